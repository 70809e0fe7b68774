"""Confidence-aware adaptive EoR on the questions a run log already holds:

    .venv/bin/python -m serve.offline.adaptive --questions ../shared/data/questions.dev.jsonl --index shared

Fits on the fit split (5-fold CV by question: the answer scorer's out-of-fold P calibrated,
--calibration, as `eor fit` does; each layout's stop thresholds are the cheapest
within 0.5 pt of running its every round; the layout is the one of least expected latency within
0.5 pt of the all-kept vote), then reports on the eval split, per dataset: Match,
EM, F1, tokens computed and rounds per question of the adaptive model, the selector with
every round, a voter file's cascade (the shipped one, or --voter; adaptive and pruned), EoR-16 with equal weights and
every single retriever; the paired counts and sign test against the fit split's best single
retriever; the Match-vs-latency frontier. Reads only finished questions (`bench/grow_runs.sh`
grows them): it never starts the reader engine.
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from fitting.evaluation import EOR, EOR_ALL, EOR_PRUNED
from fitting.held_out import apply_model
from fitting.layout_fit import fit_layout, fit_model
from fitting.measures import expected_calibration_error
from fitting.paired import paired_counts, sign_test
from fitting.pool_run import equal_vote, pool_run
from fitting.replay import replay_ensembles
from fitting.search import fit_adaptive
from voter.calibration import DEFAULT_METHOD, METHODS
from fitting.questions import right as match  # whole-token Match, as the fit
from voter.qa_metrics import exact_match, token_f1

ADAPTIVE = "adaptive (confidence)"
SELECTOR = "selector, every round"
BLIND = "adaptive, no confidence"  # the same rounds, refitted with the log-probabilities hidden
VOTER = "voter file's cascade"  # the shipped voter's (or --voter's) own cascade and vote, replayed


def finished(args) -> tuple[Any, list, list]:
    """(config, fit pairs, eval pairs): the selected questions the run log has finished."""
    from serve.builder import make_pool
    from serve.config import load_config
    from serve.offline.dataset import Selection, select_questions
    from serve.offline.reader_runs import ReaderRuns

    config = load_config(args.config, {"index": {"name": args.index}})
    pool = make_pool(config)
    done = ReaderRuns(config, pool, args.questions).load()
    parts = []
    for split, limit in (("fit", args.fit_limit), ("eval", args.eval_limit)):
        qs = select_questions(Selection(args.questions, None, split, limit))
        parts.append([(q, done[q.qid]) for q in qs if q.qid in done])
    return config, pool, parts[0], parts[1]


def scores(answers: Sequence[str], golds: Sequence[Sequence[str]]) -> dict[str, float]:
    n = max(len(answers), 1)
    return {"match": sum(match(a, g) for a, g in zip(answers, golds)) / n,
            "em": sum(exact_match(a, g) for a, g in zip(answers, golds)) / n,
            "f1": sum(token_f1(a, g) for a, g in zip(answers, golds)) / n}


def report(args) -> dict[str, Any]:
    from serve.builder import pool_reader_models
    from serve.config_readers import quick_reader_first
    from serve.offline.reader_runs import ReaderRuns
    from serve.offline.reader_speed import pool_speeds, round_overhead
    from voter.question_vote import build_metrics, choose_voter

    config, pool, fit, held = finished(args)
    if len(fit) < 20 or len(held) < 10:
        raise SystemExit(f"the run log holds {len(fit)} fit and {len(held)} eval questions of this selection: "
                         "grow it first (bench/grow_runs.sh)")
    specs = list(pool.specs)
    choice = choose_voter(specs, pool_reader_models(pool), weights=args.voter)
    metrics = build_metrics(choice.options, pool.reader)
    seconds = ReaderRuns(config, pool, args.questions).seconds()
    calibration = None if args.calibration == "none" else args.calibration
    overhead_s, overhead_by = round_overhead(args.round_overhead)
    fitted = fit_adaptive(fit, specs, metrics, choice.saved.metrics, choice.saved.pooling, seconds,
                          overhead_s, args.tolerance, calibration, speeds=pool_speeds(pool), overhead_by=overhead_by,
                          early_first=quick_reader_first(config))
    model, chosen, fits, fit_run, latency, acc = (fitted.model, fitted.chosen, fitted.layouts, fitted.run,
                                                  fitted.latency, fitted.accuracy)
    # reader tokens as the engines counted them, every system alike (the fit's priced cost is its own unit)
    eval_run = pool_run(held, specs, metrics, equal_vote(specs, choice.saved.metrics, choice.saved.pooling))
    best_single = max(specs, key=lambda s: (acc[s], -specs.index(s)))
    blind_fit = replace(fit_run, logprobs=[[None] * len(specs) for _ in range(len(fit_run))])
    blind_eval = replace(eval_run, logprobs=[[None] * len(specs) for _ in range(len(eval_run))])
    blind_layout = fit_layout(blind_fit, chosen.layout, latency, tolerance=args.tolerance, calibration=calibration)
    blind = apply_model(blind_eval, fit_model(blind_fit, blind_layout))
    out = apply_model(eval_run, model)
    every = apply_model(eval_run, replace(model, thresholds=(float("inf"),) * (len(model.layout) - 1)))
    shipped = replay_ensembles(held, choice.saved, metrics)
    golds = [q.answers for q, _ in held]
    systems: dict[str, list[str]] = {
        ADAPTIVE: [eval_run.answers[i][w] or "" if w >= 0 else "" for i, w in enumerate(out.picked)],
        SELECTOR: [eval_run.answers[i][w] or "" if w >= 0 else "" for i, w in enumerate(every.picked)],
        BLIND: [eval_run.answers[i][w] or "" if w >= 0 else "" for i, w in enumerate(blind.picked)],
        VOTER: shipped.answers[EOR], EOR_PRUNED: shipped.answers[EOR_PRUNED],
        EOR_ALL: shipped.answers[EOR_ALL]}
    tokens = {ADAPTIVE: out.tokens, SELECTOR: every.tokens, BLIND: blind.tokens,
              VOTER: np.array([t.computed for t in shipped.tokens[EOR]], dtype=float),
              EOR_PRUNED: np.array([t.computed for t in shipped.tokens[EOR_PRUNED]], dtype=float),
              EOR_ALL: np.array([t.computed for t in shipped.tokens[EOR_ALL]], dtype=float)}
    rounds = {ADAPTIVE: out.rounds, SELECTOR: every.rounds, BLIND: blind.rounds}
    for m, s in enumerate(specs):
        systems[s] = [a or "" for a in (row[m] for row in eval_run.answers)]
        tokens[s] = np.array([eval_run.cost(i, (frozenset({s}),)) for i in range(len(eval_run))])
        rounds[s] = np.ones(len(eval_run))
    per_dataset = {}
    datasets = sorted(set(eval_run.datasets)) + ["all"]
    for ds in datasets:
        rows = [i for i, d in enumerate(eval_run.datasets) if ds == "all" or d == ds]
        table = {}
        for name, answers in systems.items():
            sc = scores([answers[i] for i in rows], [golds[i] for i in rows])
            sc["tokens"] = float(np.mean(tokens[name][rows]))
            if name in rounds:
                sc["rounds"] = float(np.mean(rounds[name][rows]))
            table[name] = sc
        a = [match(systems[ADAPTIVE][i], golds[i]) > 0 for i in rows]

        def paired(single: str) -> dict[str, Any]:
            wins, losses = paired_counts(a, [match(systems[single][i], golds[i]) > 0 for i in rows])
            return {"best_single": single, "adaptive_only_right": wins, "best_single_only_right": losses,
                    "sign_test_p": sign_test(wins, losses)}
        # the fit split's best single is the fair baseline; the one best on these very questions,
        # picked after the fact, is flattered by the pick, and reported beside it
        eval_best = max(specs, key=lambda s: (table[s]["match"], -specs.index(s)))
        per_dataset[ds] = {"n": len(rows), "systems": table, "vs_best_single": paired(best_single),
                           "vs_eval_best_single": paired(eval_best),
                           "first_round_share": float((out.stop[rows] == 0).mean())}
    eval_frontier = []  # the chosen rounds and scorer on the eval split, one shared stop threshold
    for tau in (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, float("inf")):
        o = apply_model(eval_run, replace(model, thresholds=(tau,) * (len(model.layout) - 1)))
        right = [match(eval_run.answers[i][w] or "", golds[i]) if w >= 0 else 0.0 for i, w in enumerate(o.picked)]
        eval_frontier.append({"scale": tau, "match": float(np.mean(right)), "computed_tokens": float(np.mean(o.tokens)),
                              "rounds": float(np.mean(o.rounds)), "first_round_share": float((o.stop == 0).mean())})
    if args.plot:
        from serve.offline.plots import cost_accuracy_plot

        singles = {s: (float(np.mean(tokens[s])), float(np.mean([match(a, g) for a, g in zip(systems[s], golds)])))
                   for s in specs}
        here = per_dataset["all"]["systems"][ADAPTIVE]
        cost_accuracy_plot(eval_frontier, singles, f"confidence-aware EoR, {len(held)} eval questions",
                           args.plot, curve="one stop threshold for every round (label)",
                           marked={"the fitted thresholds": (here["tokens"], here["match"])})
    return {"fit_questions": len(fit), "eval_questions": len(held), "voter": choice.saved.describe(),
            "fit_datasets": {d: fit_run.datasets.count(d) for d in sorted(set(fit_run.datasets))},
            "latency_model": {"round_overhead_s": latency.round_overhead_s, "tokens_per_s": round(latency.tokens_per_s, 1)},
            "fit_best_single": best_single, "fit_single_match": acc,
            "layouts": [{"rounds": [list(r) for r in f.layout], "cv_match": f.cv_accuracy,
                         "cv_match_every_round": f.cv_all_rounds, "tokens": f.tokens, "rounds_run": f.rounds,
                         "latency_s": f.latency_s, "first_round_share": f.first_round_share,
                         "thresholds": [None if t == float("inf") else t for t in f.thresholds]} for f in fits],
            "chosen": {"rounds": [list(r) for r in chosen.layout],
                       "thresholds": [None if t == float("inf") else t for t in chosen.thresholds]},
            "frontier_fit_cv": chosen.frontier,
            "frontier_eval": [{"threshold": None if p["scale"] == float("inf") else p["scale"],
                               **{k: v for k, v in p.items() if k != "scale"}} for p in eval_frontier],
            "eval": per_dataset,
            "calibration": {"method": args.calibration, "fit_cv_ece": _finite(chosen.cv_ece),
                            "fit_cv_ece_early": _finite(chosen.cv_ece_early),
                            "eval_ece": _finite(expected_calibration_error(out.confidence, out.right))},
            "model": model.to_dict(specs)}


def _finite(x: float) -> float | None:
    return float(x) if np.isfinite(x) else None


def format_report(doc: dict[str, Any]) -> str:
    lines = [f"fit: {doc['fit_questions']} questions {doc['fit_datasets']}; eval: {doc['eval_questions']}; "
             f"best single on fit: {doc['fit_best_single']}; latency model {doc['latency_model']}",
             "chosen rounds: " + " | ".join(", ".join(r) for r in doc["chosen"]["rounds"])
             + f"; thresholds {doc['chosen']['thresholds']}"]
    for ds, d in doc["eval"].items():
        v = d["vs_best_single"]
        lines.append(f"\n{ds} (n={d['n']}): adaptive vs {v['best_single']}: {v['adaptive_only_right']} vs "
                     f"{v['best_single_only_right']} questions right only by one, sign test p = {v['sign_test_p']:.3f}; "
                     f"stopped after round 1: {d['first_round_share']:.0%}")
        e = d["vs_eval_best_single"]
        lines.append(f"  vs the best single on these questions ({e['best_single']}, picked after the fact): "
                     f"{e['adaptive_only_right']} vs {e['best_single_only_right']}, sign test p = {e['sign_test_p']:.3f}")
        lines.append(f"  {'system':28s} {'Match':>6s} {'EM':>6s} {'F1':>6s} {'tokens':>7s} {'rounds':>6s}")
        for name, sc in d["systems"].items():
            r = f"{sc['rounds']:.2f}" if "rounds" in sc else ""
            lines.append(f"  {name:28s} {sc['match']:6.3f} {sc['em']:6.3f} {sc['f1']:6.3f} {sc['tokens']:7.0f} {r:>6s}")
    lines.append("\nfrontier (eval; one shared threshold): " + "; ".join(
        f"{'inf' if p['threshold'] is None else format(p['threshold'], '.1f')}: {p['match']:.3f} @ {p['computed_tokens']:.0f} tokens, {p['rounds']:.2f} rounds "
        f"({p['first_round_share']:.0%} stop at 1)" for p in doc["frontier_eval"]))
    lines.append("\nfrontier (fit, out-of-fold; one shared threshold): " + "; ".join(
        f"{p['threshold']:.2f}: {p['accuracy']:.3f} @ {p['cost']:.1f}s ({p['first_round_share']:.0%} stop at 1)"
        for p in doc["frontier_fit_cv"][::4]))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--questions", required=True)
    ap.add_argument("--index", default="shared")
    ap.add_argument("--config")
    ap.add_argument("--fit-limit", type=int, default=None)
    ap.add_argument("--eval-limit", type=int, default=None)
    ap.add_argument("--tolerance", type=float, default=0.005, help="Match the stop rule may give up (0.005 = 0.5 pt)")
    ap.add_argument("--round-overhead", type=float, default=None, help="seconds each round adds beyond its tokens "
                    "(default: as the service measured it here, eor fit's --round-overhead)")
    ap.add_argument("--calibration", choices=(*METHODS, "none"), default=DEFAULT_METHOD,
                    help="calibration of P(right), as `eor fit --calibration` (none: the raw P, a v3 voter)")
    ap.add_argument("--voter", help="the voter file whose cascade is replayed beside the fit (default: the shipped "
                    "voter), e.g. tests/voter/data/voter-v2-8b3d50282f43.json, the one shipped before v3")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--out", type=Path, help="also write the report here (JSON)")
    ap.add_argument("--plot", type=Path, help="the eval frontier (Match vs reader tokens, singles as dots) as a PNG")
    args = ap.parse_args(argv)
    from serve.cli.common import _quiet_logs

    _quiet_logs()
    return emit(report(args), args, format_report)


def emit(doc: dict[str, Any], args: Any, text: Any) -> int:
    """A report's JSON to `args.out` (if given), and to stdout as JSON (`args.json`) or as `text(doc)`."""
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps(doc, indent=2) if args.json else text(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
