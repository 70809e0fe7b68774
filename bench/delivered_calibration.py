"""Does P(right) want its calibration line fitted on the answers each round *delivers*? An offline
probe on the fit split (issue 36; tried in session 28, not kept).

The shipped calibrator (voter/calibration.py: platt-per-round) fits round k's line on every fit
question's round-k pick; the caller only ever gets round k's answer on the questions the stop rule
ends there (round 1: the sure ones; later rounds: the rest). A line fitted on those alone
(`delivered`; `delivered+shrink`: pulled towards the per-round line by n / (n + 50)) could undo
that selection. Nested CV by question, five seeds: the scorer's out-of-fold P, then per outer fold
the calibrator, the stop thresholds and the delivered lines fitted on the other questions; ECE
(10 bins), Brier and log loss of each question's delivered P. Reads only finished questions.

    python -m bench.delivered_calibration --limit 120
"""
from __future__ import annotations

import argparse
from types import SimpleNamespace

import numpy as np

LAYOUTS = {  # session 27's fit on 120 fit questions, and the shipped 68b522be257c's round 1 with a second round
    "quick-first": (("SE@1", "SE@1~1.5B"), ("SE@2&Wiki@5~1.5B",)),
    "1.5B pair | 5": (("SE@1~1.5B", "SE@2&Wiki@5~1.5B"),
                      ("Wiki@10~1.5B", "SE@4~1.5B", "PK~1.5B", "SE@RR@5&Wiki@5~1.5B", "ReFree~1.5B")),
}


def delivered(limit: int, config: str, questions: str, seeds: int = 5) -> dict[str, dict[str, list[float]]]:
    from fitting.measures import expected_calibration_error
    from fitting.pool_run import (early_views, equal_vote, cv_folds, picks, pool_run, round_views,
                                  scored_views, training_rows)
    from fitting.pricing import LatencyModel, priced_speeds, unit_speed
    from fitting.thresholds import RoundTrace, fit_stop_thresholds
    from serve.builder import pool_reader_models
    from serve.offline.adaptive import finished
    from serve.offline.reader_speed import pool_speeds, round_overhead
    from voter.calibration import _logit, _platt, fit_calibrator
    from voter.cascade import stop_rounds
    from voter.question_vote import build_metrics, choose_voter
    from voter.selector import AnswerScorer

    args = SimpleNamespace(config=config, index="shared", questions=questions, fit_limit=limit, eval_limit=1)
    _, pool, fit, _ = finished(args)
    print(f"{len(fit)} fit questions finished by every reader", flush=True)
    specs = list(pool.specs)
    choice = choose_voter(specs, pool_reader_models(pool), equal=True)
    speeds = priced_speeds(specs, pool_speeds(pool))
    latency = LatencyModel(round_overhead(None)[0], unit_speed(speeds))
    run = pool_run(fit, specs, build_metrics(choice.options, pool.reader),
                   equal_vote(specs, choice.saved.metrics, choice.saved.pooling), {}, speeds)
    out = {}
    for name, layout in LAYOUTS.items():
        views, tokens, rounds = round_views(run, layout)
        seen = scored_views(views, early_views(run, layout))
        n, r = len(run), len(layout)
        cost = np.vectorize(latency.seconds)(rounds, tokens)
        res: dict[str, list] = {k: [] for k in ("per-round", "delivered", "delivered+shrink", "raw")}
        for seed in range(seeds):
            p, ok = np.zeros((n, r)), np.zeros((n, r))
            for test in cv_folds(n, 5, 100 + seed):
                train = np.setdiff1d(np.arange(n), test)
                scorer = AnswerScorer(1.0).fit(*training_rows(seen, run.right, run.pool, train))
                p[test], ok[test], _ = picks(views, run.right, run.pool, scorer, test)
            conf = {k: np.zeros(n) for k in res}
            right = np.zeros(n)
            for test in cv_folds(n, 5, 200 + seed):
                train = np.setdiff1d(np.arange(n), test)
                cal = fit_calibrator(p[train], ok[train], "platt-per-round")
                p_tr, p_te = cal.predict_rounds(p[train]), cal.predict_rounds(p[test])
                tau = fit_stop_thresholds(RoundTrace(p_tr, ok[train], cost[train]), 0.005)
                s_tr, s_te = stop_rounds(p_tr, tau), stop_rounds(p_te, tau)
                rows, rtr = np.arange(len(test)), np.arange(len(train))
                right[test] = ok[test][rows, s_te]
                per_round, raw = p_te[rows, s_te], p[test][rows, s_te]
                conf["per-round"][test], conf["raw"][test] = per_round, raw
                d_p, d_y = p[train][rtr, s_tr], ok[train][rtr, s_tr]
                for k in range(r):
                    tr, te = s_tr == k, s_te == k
                    line = _platt(d_p[tr], d_y[tr]) if tr.sum() >= 10 else None
                    own = per_round[te] if line is None else 1 / (1 + np.exp(-(line[0] * _logit(raw[te]) + line[1])))
                    w = 0.0 if line is None else tr.sum() / (tr.sum() + 50)
                    conf["delivered"][test[te]] = own
                    conf["delivered+shrink"][test[te]] = w * own + (1 - w) * per_round[te]
            for k in res:
                c = np.clip(conf[k], 1e-6, 1 - 1e-6)
                res[k].append([expected_calibration_error(c, right), float(np.mean((c - right) ** 2)),
                               float(-np.mean(right * np.log(c) + (1 - right) * np.log(1 - c)))])
        out[name] = {k: np.mean(v, axis=0).round(4).tolist() for k, v in res.items()}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=int, default=120, help="fit-split questions (the run logs must hold them)")
    ap.add_argument("--config", default="deploy/eor-cascade-fit.yaml")
    ap.add_argument("--questions", default="../shared/data/questions.dev.jsonl")
    args = ap.parse_args(argv)
    for layout, rows in delivered(args.limit, args.config, args.questions).items():
        print(layout)
        for k, (ece, brier, logloss) in rows.items():
            print(f"  {k:18s} ECE {ece:.3f}  Brier {brier:.4f}  log loss {logloss:.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
