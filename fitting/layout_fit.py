"""One layout's confidence-aware fit on the fit split: the answer scorer cross-validated by
question (it never scores a question it was trained on), its out-of-fold P calibrated
(voter/calibration.py) when a method is named, and the stop thresholds fitted on that calibrated
P, so the number a caller gets with each answer is the number the stop rule reads; with the
layout's CV figures (accuracy, expected latency, ECE of the answers delivered, the first reply).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from fitting.measures import expected_calibration_error
from fitting.pool_run import (PoolRun, cv_folds, early_views, picks, round_views, scored_views,
                              training_rows)
from fitting.pricing import LatencyModel
from fitting.thresholds import RoundTrace, evaluate_stop, fit_stop_thresholds, frontier
from voter.adaptive_model import AdaptiveModel, Layout
from voter.calibration import EARLY, Calibrator, fit_calibrator
from voter.cascade import early_members, stop_rounds
from voter.selector import AnswerScorer


CV_FOLDS, CV_SEED, SCORER_C = 5, 0, 1.0  # the adaptive fit's cross-validation and regularisation


@dataclass(frozen=True)
class LayoutFit:
    """A layout's fit on the fit split: the out-of-fold trace, thresholds, and its CV figures."""

    layout: Layout
    thresholds: tuple[float, ...]
    cv_accuracy: float  # out-of-fold: stop rule applied to out-of-fold probabilities
    cv_all_rounds: float  # out-of-fold accuracy when every round runs (the selector alone)
    tokens: float
    rounds: float
    latency_s: float
    first_round_share: float
    frontier: list[dict[str, float]]
    calibrator: Calibrator | None = None  # None: the stop rule and the caller read the scorer's raw P
    cv_ece: float = math.nan  # ECE (10 bins) of the answers delivered, on questions neither scorer nor calibrator saw
    first_reply_s: float = math.nan  # expected seconds to a stream's first reply (round 1's early answer)
    cv_ece_early: float = math.nan  # the same for the first reply's P (NaN: no first reply of its own)
    preview: tuple[str, ...] = ()  # read beside round 1 for a stream's first reply, never voted (fit_layout)


def fit_layout(run: PoolRun, layout: Layout, latency: LatencyModel, folds: int = CV_FOLDS, C: float = SCORER_C,
               tolerance: float = 0.005, seed: int = CV_SEED, calibration: str | None = None,
               preview: Sequence[str] = ()) -> LayoutFit:
    """Out-of-fold P for every question and round (the scorer never sees the question it
    scores), calibrated when `calibration` names a method, then the cheapest-latency thresholds
    on it within `tolerance` of running every round.

    `preview`: members read beside round 1 for a stream's first reply and never voted after. The
    scorer is trained on the rounds alone (so the layout's answers, stops and CV figures are those
    without it), the preview's P gets a calibration line of its own, and its reader work is paid on
    top of the rounds' (the cores are shared); its first reply is priced as round 1's early answer is."""
    preview = tuple(preview)
    views, tokens, rounds = round_views(run, layout)
    firsts = early_views(run, layout, preview)  # the first reply: scored, on a line of its own
    seen = views if preview else scored_views(views, firsts)
    n, r = len(run), len(layout)
    p, ok = np.zeros((n, r)), np.zeros((n, r))
    p_early, ok_early, who_early = np.zeros((n, 1)), np.zeros((n, 1)), np.full((n, 1), -1)
    for test in cv_folds(n, min(folds, n), seed, run.groups):
        train = np.setdiff1d(np.arange(n), test)
        scorer = AnswerScorer(C).fit(*training_rows(seen, run.right, run.pool, train))
        p[test], ok[test], _ = picks(views, run.right, run.pool, scorer, test)
        if firsts is not None:
            p_early[test], ok_early[test], who_early[test] = picks(firsts, run.right, run.pool, scorer, test)
    cost = np.vectorize(latency.seconds)(rounds, tokens)
    answered = who_early[:, 0] >= 0  # no early candidate: no first reply, no P (as the service and eval)
    first = (p_early[answered, 0], ok_early[answered, 0]) if firsts is not None else None
    calibrator = fit_calibrator(p, ok, calibration, first) if calibration else None
    trace = RoundTrace(calibrator.predict_rounds(p) if calibrator else p, ok, cost)
    tau = fit_stop_thresholds(trace, tolerance)
    ece = delivered_ece(RoundTrace(p, ok, cost), calibration, tolerance, folds, seed, run.groups)
    ece_early = (early_ece(p, ok, p_early[:, 0], ok_early[:, 0], calibration, folds, seed, answered, run.groups)
                 if firsts is not None else math.nan)
    acc, lat, stop = evaluate_stop(trace, tau)
    rows = np.arange(n)
    work = early_answer_work(run, layout[0], latency.early_first, preview)
    first_reply = float(np.mean(latency.seconds(1, work)))
    if preview:  # its reader work delays the rounds' on the shared cores
        lat += float(np.mean([run.cost(i, (frozenset(preview),)) for i in range(n)])) / latency.tokens_per_s
    return LayoutFit(layout, tau, acc, float(ok[:, -1].mean()), float(tokens[rows, stop].mean()),
                     float(rounds[rows, stop].mean()), lat, float((stop == 0).mean()), frontier(trace),
                     calibrator, ece, first_reply, ece_early, preview)


def early_ece(p: np.ndarray, right: np.ndarray, p_early: np.ndarray, right_early: np.ndarray,
              calibration: str | None, folds: int = CV_FOLDS, seed: int = CV_SEED,
              answered: np.ndarray | None = None, groups: Sequence[str] | None = None) -> float:
    """ECE (10 bins) of round 1's early answers' P as a stream's first reply carries it: per fold,
    the calibrator fitted on the other questions' out-of-fold P (the rounds' [N, R] and the early
    answers' [N]), applied to these questions' early answers. `answered` [N]: the questions with an
    early answer (None: all); the others carry no P and count nowhere."""
    n = len(p_early)
    answered = np.ones(n, dtype=bool) if answered is None else np.asarray(answered, dtype=bool)
    if answered.sum() < 2:
        return math.nan
    conf = np.zeros(n)
    for test in cv_folds(n, min(folds, n), seed, groups):
        train = np.setdiff1d(np.arange(n), test)
        if calibration is None:
            conf[test] = p_early[test]
            continue
        early = train[answered[train]]
        cal = fit_calibrator(p[train], right[train], calibration, (p_early[early], right_early[early]))
        conf[test] = cal.predict(p_early[test], EARLY)
    return expected_calibration_error(conf[answered], right_early[answered])


def delivered_ece(raw: RoundTrace, calibration: str | None, tolerance: float = 0.005, folds: int = CV_FOLDS,
                  seed: int = CV_SEED, groups: Sequence[str] | None = None) -> float:
    """ECE (10 bins) of the P each question's *answer* comes with, the answer of the round it
    stops after, as a caller gets it: per fold, the calibrator and the stop thresholds fitted on
    the other questions' out-of-fold P, then applied to these. (Every round's pick pooled is not
    that: session 23 measured 0.05 there against 0.09 on the answers delivered.)"""
    n = len(raw.p)
    if n < 2:
        return math.nan
    conf, right = np.zeros(n), np.zeros(n)
    for test in cv_folds(n, min(folds, n), seed, groups):
        train = np.setdiff1d(np.arange(n), test)
        cal = fit_calibrator(raw.p[train], raw.right[train], calibration) if calibration else None
        p_train, p_test = ((cal.predict_rounds(raw.p[train]), cal.predict_rounds(raw.p[test])) if cal else
                           (raw.p[train], raw.p[test]))
        tau = fit_stop_thresholds(RoundTrace(p_train, raw.right[train], raw.cost[train]), tolerance)
        stop = stop_rounds(p_test, tau)
        rows = np.arange(len(test))
        conf[test], right[test] = p_test[rows, stop], raw.right[test][rows, stop]
    return expected_calibration_error(conf, right)


def early_answer_work(run: PoolRun, first_round: Sequence[str], early_first: bool = False,
                      preview: Sequence[str] = ()) -> np.ndarray:
    """Per question, the work (latency-model tokens) before its first streamed reply: the preview,
    else round 1's early answer (voter/cascade.py: early_members), while the rest of round 1 reads
    beside it on the same cores. Processor sharing: with a of its own and b beside it, it ends at a + min(a, b).
    Measured in the service (session 22): the 0.5B's SE@1 beside the 1.5B's SE@1 answered in 2.41 s;
    priced alone, 1.75 s with the round's overhead (2.5 s shared). `early_first` (its reader has the
    cores first): a, as alone (bench/reader_priority.py: 1.26 s beside the 1.5B's two prompts, 0.93 s
    alone, 2.73 s sharing the cores)."""
    early = frozenset(preview or early_members(first_round))
    rest = frozenset(first_round) - early
    a = np.array([run.cost(i, (early,)) for i in range(len(run))], dtype=float)
    if not rest or early_first:
        return a
    return a + np.minimum(a, [run.cost(i, (rest,)) for i in range(len(run))])


def fit_record(chosen: LayoutFit, layouts: Sequence[LayoutFit], latency: LatencyModel, *, tolerance: float,
               C: float, folds: int, seed: int, calibration: str | None,
               first_reply: tuple[str, float, float] | None = None) -> dict[str, Any]:
    """What the voter file says about its adaptive fit, so a reader can audit the choice: the
    settings, the latency model it assumed and every candidate layout with its CV figures."""
    def r(x: float) -> float | None:
        return round(float(x), 4) if math.isfinite(x) else None

    bound = {}
    if first_reply is not None:  # (the member, its first reply, the latency cap), and whether the chosen met both
        ref, reply_s, cap_s = first_reply
        bound = {"first_reply_vs": ref, "first_reply_bound_s": r(reply_s), "latency_cap_s": r(cap_s),
                 "first_reply_met": bool(chosen.first_reply_s <= reply_s and chosen.latency_s <= cap_s)}
    return {"tolerance": tolerance, "C": C, "cv_folds": folds, "cv_seed": seed, "calibration": calibration,
            "tokens_per_s": r(latency.tokens_per_s), "round_overhead_s": latency.round_overhead_s,
            "early_answer_first": latency.early_first, **bound,
            "layouts": [{"rounds": [list(x) for x in f.layout], **({"preview": list(f.preview)} if f.preview else {}),
                         "chosen": f is chosen, "cv_match": r(f.cv_accuracy),
                         "cv_match_all_rounds": r(f.cv_all_rounds), "latency_s": r(f.latency_s),
                         "tokens": r(f.tokens), "rounds_run": r(f.rounds), "first_round_share": r(f.first_round_share),
                         "cv_ece": r(f.cv_ece), "first_reply_s": r(f.first_reply_s),
                         **({"cv_ece_early": r(f.cv_ece_early)} if math.isfinite(f.cv_ece_early) else {})}
                        for f in layouts]}


def fit_model(run: PoolRun, fit: LayoutFit, C: float = SCORER_C, record: dict[str, Any] | None = None) -> AdaptiveModel:
    views, _, _ = round_views(run, fit.layout)
    seen = views if fit.preview else scored_views(views, early_views(run, fit.layout))  # as fit_layout
    scorer = AnswerScorer(C).fit(*training_rows(seen, run.right, run.pool, range(len(run))))
    return AdaptiveModel(fit.layout, scorer, fit.thresholds, fit.calibrator, fit.preview, record or {})
