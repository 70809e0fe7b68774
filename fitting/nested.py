"""Nested cross-validation grouped by passage: the whole fit (fitting/search.py: the layout search
with its own inner CV, the stop thresholds, the calibrator) judged on questions it never saw, one
outer fold at a time, beside the best single (retriever, reader) pair chosen on the same training
folds. What issue 58's acceptance is read from, on the shared questions (all development data):
Match on whole tokens, EM and F1 with paired counts and the sign test, tokens per question, how
well P(right) ranks (risk-coverage area against the pair's mean log-probability) and how well it
means what it says (|mean P - Match|, ECE beside its sampling floor), per dataset and overall.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from fitting.held_out import apply_model
from fitting.measures import ece_sampling_floor, expected_calibration_error, risk_coverage
from fitting.paired import paired_counts, sign_test
from fitting.pool_run import cv_folds
from fitting.questions import right
from fitting.search import PricedRun, fit_on_run
from voter.qa_metrics import exact_match, token_f1

OUTER_FOLDS = 5
OUTER_SEED = 1  # not the inner folds' seed: the outer split is its own draw


@dataclass(frozen=True)
class Judged:
    """One question as the fit judged in its outer fold: the voter's answer and the pair's."""

    dataset: str
    fold: int
    pair: str
    answers: tuple[str, str]  # (voter, pair); "" where none answered
    tokens: tuple[float, float]  # what each cost, in the run's unit
    p: float  # the voter's P(right) of its answer (NaN: none)
    pair_logprob: float  # the pair's mean token log-probability (NaN: none)


def _mean_logprob(lps: Sequence[float] | None) -> float:
    return float(np.mean(lps)) if lps else math.nan


def nested_cv(priced: PricedRun, folds: int = OUTER_FOLDS, seed: int = OUTER_SEED,
              **fit: Any) -> tuple[list[Judged], list[dict[str, Any]]]:
    """Each question judged by the voter fitted on the other folds (`fit`: fit_on_run's options),
    and the per-fold record of what each fit chose."""
    run = priced.run
    n = len(run)
    out: list[Judged | None] = [None] * n
    chosen = []
    for k, test in enumerate(cv_folds(n, min(folds, n), seed, run.groups)):
        train = np.setdiff1d(np.arange(n), test)
        fitted = fit_on_run(priced.subset(train), **fit)
        model = fitted.model
        pair = max(fitted.accuracy, key=lambda s: (fitted.accuracy[s], -list(priced.specs).index(s)))
        m = list(run.pool).index(pair)
        held = run.subset(test)
        outcome = apply_model(held, model)
        for j, i in enumerate(test):
            w = int(outcome.picked[j])
            stop = int(outcome.stop[j])
            rounds = tuple(frozenset(r) for r in model.layout[: stop + 1])
            if model.preview:
                rounds += (frozenset(model.preview),)
            out[i] = Judged(run.datasets[i] if run.datasets else "default", k, pair,
                            ((run.answers[i][w] or "") if w >= 0 else "", run.answers[i][m] or ""),
                            (float(run.cost(i, rounds)), float(run.cost(i, (frozenset({pair}),)))),
                            float(outcome.confidence[j]) if w >= 0 else math.nan,
                            _mean_logprob(run.logprobs[i][m]))
        chosen.append({"fold": k, "questions": len(test), "rounds": [list(r) for r in model.layout],
                       "preview": list(model.preview), "pair": pair, "cv_match": fitted.chosen.cv_accuracy})
    return [j for j in out if j is not None], chosen


def coverage_area(confidence: Sequence[float], right_: Sequence[float]) -> float:
    """The area under the risk-coverage curve: Match of the k most confident answers, averaged over
    k = 1..n (unknown confidence last): higher is better ranked; at its best when every right answer
    comes before every wrong one (1.0 only when all are right)."""
    pts = risk_coverage([None if not math.isfinite(c) else c for c in confidence], right_,
                        [k / len(right_) for k in range(1, len(right_) + 1)])
    return float(np.mean([p.match for p in pts])) if pts else math.nan


def _part(rows: Sequence[Judged], golds: Sequence[Sequence[str]]) -> dict[str, Any]:
    scores = {name: [(fn(v, g), fn(p, g)) for (v, p), g in zip((r.answers for r in rows), golds)]
              for name, fn in (("match", right), ("em", exact_match), ("f1", token_f1))}
    doc: dict[str, Any] = {"n": len(rows)}
    for name, pairs in scores.items():
        v, p = np.array(pairs).T if pairs else (np.zeros(0), np.zeros(0))
        wins, losses = paired_counts(v > p, p > v)
        doc[name] = {"voter": round(float(v.mean()), 4), "pair": round(float(p.mean()), 4),
                     "voter_higher": wins, "pair_higher": losses, "p": round(sign_test(wins, losses), 4)}
    tok = np.array([r.tokens for r in rows])
    doc["tokens"] = {"voter": round(float(tok[:, 0].mean()), 1), "pair": round(float(tok[:, 1].mean()), 1),
                     "ratio": round(float(tok[:, 0].mean() / max(tok[:, 1].mean(), 1e-9)), 3)}
    ok = np.array([v for v, _ in scores["match"]])
    pair_ok = np.array([p for _, p in scores["match"]])
    pv = np.array([r.p for r in rows])
    lp = np.array([r.pair_logprob for r in rows])
    half = risk_coverage([None if not math.isfinite(c) else c for c in pv], ok, (0.5,))[0].match
    doc["risk_coverage"] = {"voter_area": round(coverage_area(pv, ok), 4),
                            "pair_logprob_area": round(coverage_area(lp, pair_ok), 4),
                            "voter_match_at_50": round(half, 4)}
    known = np.isfinite(pv)
    if known.any():
        ece, floor = expected_calibration_error(pv[known], ok[known]), ece_sampling_floor(pv[known])
        doc["calibration"] = {"mean_p": round(float(pv[known].mean()), 4), "match": round(float(ok[known].mean()), 4),
                              "gap": round(abs(float(pv[known].mean() - ok[known].mean())), 4),
                              "ece": round(ece, 4), "ece_floor": round(floor, 4), "ece_over_floor": round(ece - floor, 4)}
    return doc


def nested_report(rows: Sequence[Judged], golds: Sequence[Sequence[str]], chosen: Sequence[dict]) -> dict[str, Any]:
    """Per dataset (sorted), then "all": the voter against its pair, judged out of fold."""
    by: dict[str, list[int]] = {}
    for i, r in enumerate(rows):
        by.setdefault(r.dataset, []).append(i)
    names = sorted(by) + ["all"]
    by["all"] = list(range(len(rows)))
    return {"judged_by": "nested cross-validation grouped by passage, Match on whole tokens",
            "outer_folds": len(chosen), "folds": list(chosen),
            "datasets": {d: _part([rows[i] for i in by[d]], [golds[i] for i in by[d]]) for d in names}}
