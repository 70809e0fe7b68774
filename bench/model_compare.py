"""Choose the default reader: each packaged reader runs the whole pool of 16 on the same NQ
questions, its voter is fitted on the fit split and evaluated on the eval split.

    python -m bench.model_compare --index shared --fit 60 --eval 80 --out var/bench/readers

Per reader it runs `eor fit` then `eor eval` (both resumable through the run log and the
reader cache, so an interrupted comparison continues where it stopped) and tabulates EM, F1,
Match of adaptive EoR, pruned EoR and every single retriever, words per answer and the pool's
cold seconds per question. The rule: the reader whose EoR Match on the eval split is higher;
within 1 pt, the one with the higher EoR EM.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from bench.common import DEFAULT_QUESTIONS

RULE_MARGIN = 0.01  # within 1 pt of Match the higher EM decides


def eor(*args: str) -> None:
    cmd = [sys.executable, "-m", "serve.cli", *args]
    print("$ eor " + " ".join(args), file=sys.stderr, flush=True)
    subprocess.run(cmd, check=True, stdout=sys.stderr)


def choose(rows: dict[str, dict]) -> str:
    """The rule, over {reader: {"match": .., "em": ..}} of EoR on the eval split."""
    best = max(rows, key=lambda r: rows[r]["match"])
    close = [r for r in rows if rows[best]["match"] - rows[r]["match"] <= RULE_MARGIN + 1e-12]
    return max(close, key=lambda r: (rows[r]["em"], rows[r]["match"]))


def words_per_answer(eval_json: dict) -> float | None:
    return eval_json.get("words_per_answer")


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--index", default="shared")
    ap.add_argument("--models", default="qwen2.5-coder-0.5b,smollm2-135m")
    ap.add_argument("--questions", default=DEFAULT_QUESTIONS)
    ap.add_argument("--dataset", default="nq-open-oracle")
    ap.add_argument("--fit", type=int, default=60, help="fit-split questions")
    ap.add_argument("--eval", type=int, default=80, help="eval-split questions")
    ap.add_argument("--out", default="var/bench/readers")
    ap.add_argument("--report-only", action="store_true", help="tabulate what the runs wrote; run nothing")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    paper16 = Path(__file__).resolve().parents[1] / "deploy" / "eor-paper16.yaml"  # the 16 through the model compared
    common = ["--questions", args.questions, "--dataset", args.dataset, "--index", args.index, "--no-progress",
              "--config", str(paper16)]
    rows: dict[str, dict] = {}
    for model in args.models.split(","):
        voter = out / f"voter-{model}.json"
        eval_dir = out / model
        if not args.report_only:
            eor("fit", *common, "--model", model, "--split", "fit", "--limit", str(args.fit), "--out", str(voter))
            eor("eval", *common, "--model", model, "--split", "eval", "--limit", str(args.eval),
                "--weights", str(voter), "--out-dir", str(eval_dir))
        doc_path = eval_dir / "eval.json"
        if not doc_path.exists():
            continue
        doc = json.loads(doc_path.read_text())
        ds = doc["datasets"][args.dataset] if args.dataset in doc["datasets"] else doc["datasets"]["all"]
        systems = ds["systems"]
        singles = {k: v for k, v in systems.items() if not k.startswith("EoR")}
        best = max(singles, key=lambda k: singles[k]["match"])
        rows[model] = {"n": ds["n"], **{k: systems["EoR"][k] for k in ("em", "f1", "match")},
                       "pruned_match": systems["EoR pruned"]["match"],
                       "eor16_equal_match": (systems.get("EoR-all equal") or systems["EoR-16 equal"])["match"],
                       "best_single": best, "best_single_match": singles[best]["match"],
                       "best_single_em": singles[best]["em"],
                       "seconds_per_question": doc.get("pool_seconds_per_question"),
                       "words_per_answer": doc.get("words_per_answer"),
                       "tokens": systems["EoR"].get("tokens"), "voter": doc.get("voter")}
    report = {"rows": rows, "rule": "higher EoR Match on the eval split; within 1 pt, higher EoR EM"}
    if rows:
        report["default"] = choose(rows)
    lines = ["| reader | n | EoR Match | EoR EM | EoR F1 | pruned Match | EoR-all equal Match | best single (Match / EM) "
             "| words / answer | pool s / question |", "|---|---|---|---|---|---|---|---|---|---|"]
    for model, r in rows.items():
        mark = "**" if model == report.get("default") else ""
        lines.append(f"| {mark}{model}{mark} | {r['n']} | {r['match']:.3f} | {r['em']:.3f} | {r['f1']:.3f} | "
                     f"{r['pruned_match']:.3f} | {r['eor16_equal_match']:.3f} | {r['best_single']} "
                     f"{r['best_single_match']:.3f} / {r['best_single_em']:.3f} | "
                     f"{r['words_per_answer'] if r['words_per_answer'] is not None else '-'} | "
                     f"{r['seconds_per_question'] if r['seconds_per_question'] is not None else '-'} |")
    (out / "report.md").write_text("\n".join(lines) + "\n")
    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    print("\n".join(lines))
    print(json.dumps({k: v for k, v in report.items() if k != "rows"}))
    return report


if __name__ == "__main__":
    main()
