"""What each LLM-written perturbation yields: usable instances per type, without reading them.

    python -m bench.robust.yields --server 127.0.0.1:50051 --limit 30 --out var/bench/yields

Every perturbation of the three suites that the service's generator writes (query-level:
redundancy, formal, ambiguity; RARE: grammar, irrelevant, back_translate; SURE: the style,
source and LLM-ranked logic rewrites) runs through its suite's own `execute`, with a client
that sends Generate to the live service and answers no Ask. So "usable" is exactly what the
suite would ask: the text changed, a query is still a question and names no gold answer its
original did not, a variant repeats no earlier one, a document keeps its causal feature
(Golden keeps the answer, Noise gains none, back-translation keeps the answer) and a SURE
rewrite passes the bidirectional-entailment filter. Resumable (one `ResultStore` per suite
under OUT); writes `yields.json` and `yields.md` with the counts, the reasons and a few
failures per type, so a type that falls short shows why.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from bench.common import DEFAULT_CORPUS, DEFAULT_QUESTIONS
from bench.robust import query_level, rare, sure
from bench.robust.client import AskResult
from bench.robust.runner import run_suite
from bench.robust.store import ResultStore
from splits import SPLITS

#: suite -> its LLM-written perturbation labels
LLM_TYPES: dict[str, tuple[str, ...]] = {
    "query": ("redundancy", "formal", "ambiguity"),
    "rare": ("grammar", "irrelevant", "back_translate"),
    "sure": ("style_simple", "style_complex", "source_llm", "source_self", "logic_llm_ranked"),
}
EXAMPLES = 3  # failures shown per type


@dataclass
class PerturbOnlyClient:
    """The live service's Generate; every Ask and Retrieve answered empty, never sent."""

    client: Any

    @property
    def generate_seconds(self) -> float:
        return float(getattr(self.client, "generate_seconds", 0.0))

    def generate(self, prompts: Sequence[str], max_tokens: int = 128, temperature: float = 0.0,
                 starts: Sequence[str] = ()) -> list[str]:
        return self.client.generate(prompts, max_tokens=max_tokens, temperature=temperature, starts=starts)

    def ask(self, questions: Sequence[str], documents=None, retrievers: Sequence[str] = (),
            min_confidence: float = 0.0) -> list[AskResult]:
        return [AskResult(question=q, answer="", retriever="", answers={}) for q in questions]

    def retrieve(self, questions: Sequence[str], k: int, sources: Sequence[str] = ()) -> list[dict]:
        return [{} for _ in questions]


def make_suites(items, seed: int = 0, judge: str = "content") -> dict[str, Any]:
    """The three suites restricted to their LLM types (RARE: the cells those types make);
    `judge`: SURE's semantic-equivalence judge (`sure.JUDGES`)."""
    return {
        "query": query_level.QueryLevelSuite(items=items, seed=seed, perturbations=LLM_TYPES["query"]),
        "rare": rare.RareSuite(items=items, seed=seed, query_perturbations=("grammar", "irrelevant"),
                               doc_settings=("gt", "back_translate")),
        "sure": sure.SureSuite(items=items, seed=seed, types=LLM_TYPES["sure"], preserve=sure.JUDGES[judge]),
    }


def _cell(suite: str, label: str, r: dict) -> bool:
    """Is record `r` one of `label`'s instances? RARE: a query type's cell with the ground-truth
    documents, back-translation's cell with the original query."""
    if suite == "rare":
        if label == "back_translate":
            return r["perturbation"] == "original" and r["variant"] == "back_translate"
        return r["perturbation"] == label and r["variant"] == "gt"
    return r["perturbation"] == label


def _example(r: dict) -> dict:
    text = r.get("question") if "doc" not in r and "docs" not in r else (r.get("doc") or " | ".join(r.get("docs", [])))
    return {"qid": r["qid"], "variant": r["variant"], "reason": r.get("reason", ""),
            "original": r.get("original_question", r.get("question", "")), "text": str(text)[:400]}


def tally(suite: str, label: str, records: Sequence[dict]) -> dict:
    recs = [r for r in records if _cell(suite, label, r)]
    usable = [r for r in recs if r.get("kept", True)]
    return {"planned": len(recs), "usable": len(usable),
            "share": len(usable) / len(recs) if recs else None,
            "questions": len({r["qid"] for r in recs}),
            "questions_with_usable": len({r["qid"] for r in usable}),
            "generate_s": round(sum(float(r.get("generate_s", 0.0)) for r in recs), 1),
            "reasons": dict(Counter(r.get("reason", "") for r in recs if not r.get("kept", True)).most_common()),
            "failures": [_example(r) for r in recs if not r.get("kept", True)][:EXAMPLES],
            "usable_examples": [_example(r) for r in usable][:2]}


def report(yields: dict[str, dict[str, dict]], meta: dict) -> str:
    lines = [f"# LLM perturbation yields ({meta['questions']} questions, generator {meta.get('generator') or '?'}, "
             f"SURE judge {meta.get('judge', 'content')})",
             "", "| suite | type | usable / planned | share | questions with a usable one | generate s |",
             "|---|---|---|---|---|---|"]
    for suite, per in yields.items():
        for label, t in per.items():
            share = "-" if t["share"] is None else f"{100 * t['share']:.0f}%"
            lines.append(f"| {suite} | {label} | {t['usable']} / {t['planned']} | {share} | "
                         f"{t['questions_with_usable']} / {t['questions']} | {t['generate_s']} |")
    lines += ["", "## Why instances were dropped", ""]
    for suite, per in yields.items():
        for label, t in per.items():
            if not t["reasons"]:
                continue
            lines.append(f"- **{suite} {label}**: " + "; ".join(f"{n}× {why}" for why, n in t["reasons"].items()))
            for ex in t["failures"]:
                lines.append(f"  - {ex['qid']} ({ex['variant']}, {ex['reason']}): `{ex['text'][:200]}`")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(prog="python -m bench.robust.yields", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server", required=True, help="HOST:PORT of the eor gRPC service")
    ap.add_argument("--questions", default=DEFAULT_QUESTIONS)
    ap.add_argument("--corpus", default=DEFAULT_CORPUS)
    ap.add_argument("--dataset", default="nq-open-oracle")
    ap.add_argument("--limit", type=int, default=30)
    ap.add_argument("--split", choices=SPLITS, default="eval", help="the offline split (default eval)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--suites", default="query,rare,sure")
    ap.add_argument("--judge", choices=sorted(sure.JUDGES), default="content", help="SURE's equivalence judge")
    ap.add_argument("--timeout", type=float, default=1800.0)
    ap.add_argument("--out", required=True)
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    names = [s.strip() for s in args.suites.split(",") if s.strip()]
    bad = [s for s in names if s not in LLM_TYPES]
    if bad:
        raise SystemExit(f"--suites: unknown {bad}; known: {', '.join(LLM_TYPES)}")
    from bench.robust.client import BenchClient
    from bench.robust.data import load_items

    items = load_items(args.questions, args.corpus, args.dataset, args.limit, noise="sure" in names, split=args.split)
    client = BenchClient(args.server, timeout_s=args.timeout)
    out = Path(args.out)
    health = client.health()
    generator = health.get("generator") or health.get("model", "")
    yields: dict[str, dict[str, dict]] = {}
    try:
        dry = PerturbOnlyClient(client)
        suites = make_suites(items, args.seed, args.judge)
        for name in names:
            store = ResultStore(out / name)
            run_suite(suites[name], dry, store, batch_size=args.batch, progress=not args.quiet)
            recs = list(store.records())
            yields[name] = {label: tally(name, label, recs) for label in LLM_TYPES[name]}
    finally:
        client.close()
    meta = {"questions": len(items), "generator": generator, "seed": args.seed, "dataset": args.dataset,
            "judge": args.judge}
    out.mkdir(parents=True, exist_ok=True)
    (out / "yields.json").write_text(json.dumps({"meta": meta, "yields": yields}, indent=2) + "\n")
    md = report(yields, meta)
    (out / "yields.md").write_text(md)
    print(md, file=sys.stdout)
    return yields


if __name__ == "__main__":
    main()
