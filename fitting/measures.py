"""How well a P(right) means what it says, and what selective answering buys: reliability bins,
the ECE and its sampling floor and bootstrap interval, the proper scores (log loss, Brier:
scikit-learn's), and the risk-coverage table.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

ECE_BINS = 10
COVERAGES = (1.0, 0.8, 0.5, 0.2)
_EPS = 1e-6


# ---- measuring it ----------------------------------------------------------------------------
@dataclass(frozen=True)
class ReliabilityBin:
    low: float
    high: float
    n: int
    confidence: float  # mean P in the bin (NaN when empty)
    accuracy: float  # share right in the bin (NaN when empty)


def reliability(p: Sequence[float], right: Sequence[float], bins: int = ECE_BINS) -> list[ReliabilityBin]:
    """Equal-width bins over [0, 1] (P = 1 falls in the last one)."""
    p = np.asarray(p, dtype=np.float64)
    y = (np.asarray(right, dtype=np.float64) > 0).astype(np.float64)
    which = np.minimum((p * bins).astype(int), bins - 1)
    out = []
    for b in range(bins):
        sel = which == b
        n = int(sel.sum())
        out.append(ReliabilityBin(b / bins, (b + 1) / bins, n, float(p[sel].mean()) if n else math.nan,
                                  float(y[sel].mean()) if n else math.nan))
    return out


def expected_calibration_error(p: Sequence[float], right: Sequence[float], bins: int = ECE_BINS) -> float:
    """ECE: the answers' share in each bin times |accuracy - mean P| there, summed (NaN: no answers)."""
    n = len(p)
    if n == 0:
        return math.nan
    return float(sum(b.n / n * abs(b.accuracy - b.confidence) for b in reliability(p, right, bins) if b.n))


def log_loss(p: Sequence[float], right: Sequence[float]) -> float:
    """Mean negative log-likelihood of the outcomes under P (P clipped to [1e-6, 1 - 1e-6]; NaN: no
    answers): a proper scoring rule, so it ranks two calibrations of a few hundred answers far more
    steadily than the ECE's ten bins do."""
    from sklearn.metrics import log_loss as sk_log_loss

    if not len(p):
        return math.nan
    p = np.clip(np.asarray(p, dtype=np.float64), _EPS, 1 - _EPS)
    return float(sk_log_loss(np.asarray(right, dtype=np.float64) > 0, p, labels=[False, True]))


def brier_score(p: Sequence[float], right: Sequence[float]) -> float:
    """Mean squared difference between P and the outcome (NaN: no answers)."""
    from sklearn.metrics import brier_score_loss

    if not len(p):
        return math.nan
    return float(brier_score_loss(np.asarray(right, dtype=np.float64) > 0, np.asarray(p, dtype=np.float64),
                                  pos_label=True))


def ece_sampling_floor(p: Sequence[float], bins: int = ECE_BINS, draws: int = 2000, seed: int = 0) -> float:
    """The ECE a perfectly calibrated P would still show on these questions: the mean ECE when
    each question's outcome is drawn as right with its own P. An observed ECE near it is as
    calibrated as this many questions can tell; below it is luck."""
    p = np.asarray(p, dtype=np.float64)
    if len(p) == 0:
        return math.nan
    rng = np.random.default_rng(seed)
    return float(np.mean([expected_calibration_error(p, rng.random(len(p)) < p, bins) for _ in range(draws)]))


def ece_interval(p: Sequence[float], right: Sequence[float], bins: int = ECE_BINS, draws: int = 1000,
                 level: float = 0.95, seed: int = 0) -> tuple[float, float]:
    """A bootstrap interval of the ECE (the questions resampled with replacement): where another
    draw of as many questions like these could put it, so that a figure near a bound reads as
    what it is. (NaN, NaN): no answers."""
    p = np.asarray(p, dtype=np.float64)
    y = np.asarray(right, dtype=np.float64)
    if len(p) == 0:
        return math.nan, math.nan
    rng = np.random.default_rng(seed)
    eces = [expected_calibration_error(p[idx], y[idx], bins)
            for idx in (rng.integers(0, len(p), len(p)) for _ in range(draws))]
    tail = (1.0 - level) / 2.0
    return float(np.quantile(eces, tail)), float(np.quantile(eces, 1.0 - tail))


@dataclass(frozen=True)
class CoveragePoint:
    coverage: float  # the share of questions answered
    answered: int
    match: float  # Match of the answers kept (NaN: none kept)


def risk_coverage(confidence: Sequence[float | None], right: Sequence[float],
                  coverages: Sequence[float] = COVERAGES) -> list[CoveragePoint]:
    """Answer the most confident `coverage` of the questions (ties: the earlier question;
    unknown confidence counts as least sure) and score the answers kept."""
    conf = np.array([-math.inf if c is None else float(c) for c in confidence], dtype=np.float64)
    y = (np.asarray(right, dtype=np.float64) > 0).astype(np.float64)
    order = np.argsort(-conf, kind="stable")
    out = []
    for c in coverages:
        k = min(len(y), max(1, int(round(c * len(y))))) if len(y) else 0
        out.append(CoveragePoint(c, k, float(y[order[:k]].mean()) if k else math.nan))
    return out
