"""A fitted model on questions it never saw: its picks, stops and P as its cascade reads them
(`apply_model`, `held_out`), how good that P is there (`held_out_scores`: ECE, log loss, Brier),
and its calibration lines fitted again there with every stop kept (`recalibrate`, `eor calibrate`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from fitting.layout_fit import CV_FOLDS, CV_SEED
from fitting.measures import brier_score, expected_calibration_error, log_loss
from fitting.pool_run import PoolRun, cv_folds, early_views, picks, round_views
from voter.adaptive_model import AdaptiveModel
from voter.calibration import DEFAULT_METHOD as DEFAULT_CALIBRATION, EARLY, Calibrator, fit_calibrator
from voter.cascade import stop_rounds


@dataclass(frozen=True)
class Outcome:
    """The adaptive model on questions: per question its answer index, right or not, cost, and
    the confidence that came with the answer."""

    picked: np.ndarray
    right: np.ndarray
    tokens: np.ndarray
    rounds: np.ndarray
    stop: np.ndarray
    confidence: np.ndarray


def apply_model(run: PoolRun, model: AdaptiveModel) -> Outcome:
    views, tokens, rounds = round_views(run, model.layout)
    rows = list(range(len(run)))
    p, ok, who = picks(views, run.right, run.pool, model.scorer, rows)
    conf = model.confidence_rounds(p)
    stop = stop_rounds(conf, model.thresholds)
    i = np.arange(len(run))
    return Outcome(who[i, stop], ok[i, stop], tokens[i, stop], rounds[i, stop], stop, conf[i, stop])


@dataclass(frozen=True)
class HeldOut:
    """A shipped model's raw P on questions it was never fitted on, read as its cascade reads them
    (`eor calibrate`): each round's pick where the question reached that round (NaN after the
    round it stopped at, or where no member answered), whether it was right, the round each
    stopped after, and the first reply's P (NaN: none)."""

    p: np.ndarray  # [N, R]
    right: np.ndarray  # [N, R]
    stop: np.ndarray  # [N]
    p_early: np.ndarray  # [N]
    right_early: np.ndarray  # [N]
    groups: tuple[str, ...] = ()  # each question's passage group (fitting/pool_run.py: question_groups)

    def at_stop(self) -> tuple[np.ndarray, np.ndarray]:
        """(raw P, right) [N] of the round each question stopped after (P NaN: no answer, so wrong)."""
        rows = np.arange(len(self.stop))
        return self.p[rows, self.stop], self.right[rows, self.stop]

    def delivered(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(raw P, right, round) of each answer a caller got: the round each question stopped after
        (questions with no answer left out)."""
        p, right = self.at_stop()
        keep = np.isfinite(p)
        return p[keep], right[keep], self.stop[keep]


def held_out(run: PoolRun, model: AdaptiveModel) -> HeldOut:
    """The model's own picks and stops on `run`, a cascade's reads of questions it never saw: a
    round after the stop was not read there, so its P is NaN, not the pick of an empty vote."""
    views, _, _ = round_views(run, model.layout)
    p, ok, who = picks(views, run.right, run.pool, model.scorer, range(len(run)))
    stop = stop_rounds(model.confidence_rounds(p), model.thresholds)
    reached = np.arange(len(model.layout))[None, :] <= stop[:, None]
    firsts = early_views(run, model.layout, model.preview)
    p_early, ok_early = np.full(len(run), np.nan), np.zeros(len(run))
    if firsts is not None:
        pe, oke, whoe = picks(firsts, run.right, run.pool, model.scorer, range(len(run)))
        p_early, ok_early = np.where(whoe[:, 0] >= 0, pe[:, 0], np.nan), oke[:, 0]
    return HeldOut(np.where(reached & (who >= 0), p, np.nan), ok, stop, p_early, ok_early, tuple(run.groups))


def _fit_held_out(held: HeldOut, method: str, rows: np.ndarray) -> Calibrator:
    early = rows[np.isfinite(held.p_early[rows])]
    return fit_calibrator(held.p[rows], held.right[rows], method,
                          (held.p_early[early], held.right_early[early]) if len(early) else None)


@dataclass(frozen=True)
class HeldOutScores:
    """How well a P(right) does on held-out answers: of the answers delivered, ECE (10 bins, the
    issue's measure), log loss and Brier score (proper scores: steadier at a few hundred
    answers); of the first replies, ECE and log loss (NaN: none)."""

    ece: float
    log_loss: float
    brier: float
    early_ece: float
    early_log_loss: float


def held_out_scores(held: HeldOut, method: str | None, calibrator: Calibrator | None = None,
                    folds: int = CV_FOLDS, seed: int = CV_SEED) -> HeldOutScores:
    """`method` None: `calibrator` as it is (None: the raw P) on every question; else lines of that
    method fitted per fold on the other questions (cross-validation grouped by passage), as `recalibrate`
    would fit them."""
    n = len(held.stop)
    conf, conf_early = np.full(n, np.nan), np.full(n, np.nan)
    rows = np.arange(n)
    p_stop, right = held.at_stop()

    def apply(cal: Calibrator | None, test: np.ndarray) -> None:
        for i in test:
            if np.isfinite(p_stop[i]):
                conf[i] = cal(p_stop[i], int(held.stop[i])) if cal is not None else p_stop[i]
            if np.isfinite(held.p_early[i]):
                conf_early[i] = cal(held.p_early[i], EARLY) if cal is not None else held.p_early[i]
    if method is None:
        apply(calibrator, rows)
    else:
        for test in cv_folds(n, min(folds, n), seed, held.groups):
            apply(_fit_held_out(held, method, np.setdiff1d(rows, test)), test)
    a, e = np.isfinite(conf), np.isfinite(conf_early)
    return HeldOutScores(expected_calibration_error(conf[a], right[a]), log_loss(conf[a], right[a]),
                         brier_score(conf[a], right[a]), expected_calibration_error(conf_early[e], held.right_early[e]),
                         log_loss(conf_early[e], held.right_early[e]))


def recalibrate(model: AdaptiveModel, held: HeldOut, method: str | None = None) -> AdaptiveModel:
    """The model with its calibration lines fitted again on `held` (questions it never saw), and its
    thresholds carried to the new lines so that every question stops after the same round: the
    layout, scorer, answers, stops and latency are the model's; only the P each answer carries
    changes. The lines are taken as a file holds them (8 decimals), and each carried threshold is
    held to `held`'s own stops (a P on the old threshold stops on the new one too: float error in
    the round trip is not allowed to move it)."""
    method = method or (model.calibrator.method if model.calibrator is not None else DEFAULT_CALIBRATION)
    if method == "isotonic":
        raise ValueError("recalibrate fits Platt lines (platt-per-round or platt): an isotonic step function "
                         "could move a stop")
    cal = Calibrator.from_dict(_fit_held_out(held, method, np.arange(len(held.stop))).to_dict())
    old = model.calibrator
    conf = cal.predict_rounds(held.p)  # NaN where a round was not reached
    tau = list(model.thresholds)
    for k, t in enumerate(model.thresholds):
        if not math.isfinite(t):
            continue
        if cal.line(k)[0] <= 0:
            raise ValueError(f"the new line for round {k + 1} is flat (its answers all right or all wrong): a stop "
                             "threshold cannot be carried along it; calibrate on more questions")
        tau[k] = cal(old.raw(t, k) if old is not None else t, k)
        stopped, went_on = held.stop == k, held.stop > k
        if stopped.any():
            tau[k] = min(tau[k], float(np.nanmin(conf[stopped, k])))
        if np.any(conf[went_on, k] >= tau[k]):
            raise ValueError(f"round {k + 1}'s threshold cannot be carried to the new line without moving a stop")
    return replace(model, calibrator=cal, thresholds=tuple(tau))
