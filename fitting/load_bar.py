"""The lower bar of depth that follows the load (voter/cascade.py: LoadRule; `service.under_load_bar`),
fitted by cross-validation: under load a question stops after the first round whose P(right)
clears the bar, so a lower bar saves rounds and may cost Match. The bar chosen on some questions is
the lowest whose Match there stays within `tolerance` (2 pt: issue 57's acceptance) of the
cascade's own stops; the cross-validated figures are that choice judged on the questions it was
not chosen on. Read a run log of questions the voter never saw (the eval split: as `eor calibrate`
reads one), where its P(right) is what the service would give.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from fitting.layout_fit import CV_FOLDS, CV_SEED
from fitting.pool_run import PoolRun, cv_folds, picks, round_views
from voter.adaptive_model import AdaptiveModel
from voter.cascade import lowered, stop_rounds

TOLERANCE = 0.02
BARS = tuple(round(float(b), 2) for b in np.arange(0.0, 1.0001, 0.01))  # the bars tried


@dataclass(frozen=True)
class LoadBarFit:
    bar: float  # chosen on every question: the value for service.under_load_bar
    fold_bars: tuple[float, ...]  # chosen on each fold's other questions
    cv_match: float  # held-out Match under load, each fold at the bar the others chose
    cv_rounds: float  # held-out mean rounds under load
    match: float  # the cascade's own stops (no load)
    rounds: float
    n: int


def under_load(p: np.ndarray, right: np.ndarray, thresholds: Sequence[float], bar: float) -> tuple[float, float]:
    """(Match, mean rounds) of questions [N, R] (calibrated P per round, right per round) stopped by
    `settled` over the thresholds lowered to `bar`; a NaN P (no answer) never stops a question."""
    stop = stop_rounds(np.nan_to_num(p, nan=-np.inf), lowered(thresholds, bar))
    return float(right[np.arange(len(stop)), stop].mean()), float((stop + 1).mean())


def choose_bar(p: np.ndarray, right: np.ndarray, thresholds: Sequence[float], tolerance: float = TOLERANCE) -> float:
    """The lowest bar whose Match on these questions is within `tolerance` of the cascade's own."""
    full = under_load(p, right, thresholds, 1.0)[0]
    return next((b for b in BARS if under_load(p, right, thresholds, b)[0] >= full - tolerance), 1.0)


def fit_load_bar(p: np.ndarray, right: np.ndarray, thresholds: Sequence[float], tolerance: float = TOLERANCE,
                 folds: int = CV_FOLDS, seed: int = CV_SEED, groups: Sequence[str] | None = None) -> LoadBarFit:
    """The bar by `folds`-fold cross-validation (`choose_bar` on the others, judged here); `groups`: each
    question's passage group, never cut by a fold."""
    n = len(p)
    if n < folds:
        raise ValueError(f"fitting the under-load bar needs at least {folds} questions, got {n}")
    matches, rounds, bars = np.zeros(n), np.zeros(n), []
    for held in cv_folds(n, folds, seed, groups):
        train = np.setdiff1d(np.arange(n), held)
        bar = choose_bar(p[train], right[train], thresholds, tolerance)
        bars.append(bar)
        stop = stop_rounds(np.nan_to_num(p[held], nan=-np.inf), lowered(thresholds, bar))
        matches[held], rounds[held] = right[held, stop], stop + 1
    full_match, full_rounds = under_load(p, right, thresholds, 1.0)
    return LoadBarFit(choose_bar(p, right, thresholds, tolerance), tuple(bars), float(matches.mean()),
                      float(rounds.mean()), full_match, full_rounds, n)


def fit_load_bar_on_run(run: PoolRun, model: AdaptiveModel, tolerance: float = TOLERANCE) -> LoadBarFit:
    """The bar for a shipped voter's model on a run log of questions it never saw: each round's pick
    and its calibrated P as the cascade reads them (fitting/held_out.py's reading)."""
    views, _, _ = round_views(run, model.layout)
    p, ok, who = picks(views, run.right, run.pool, model.scorer, range(len(run)))
    conf = np.where(who >= 0, model.confidence_rounds(p), np.nan)
    return fit_load_bar(conf, ok, model.thresholds, tolerance, groups=run.groups)
