"""P(right) that means what it says: a calibrator for the answer scorer's probability, and the
measures of calibration and selective answering (reliability bins, ECE, risk-coverage).

The scorer (voter/selector.py) is a logistic regression fitted on every candidate of every
round: its P ranks answers well, but nothing makes 0.8 mean "right 8 times in 10" for the
answer the selector *picks*. The calibrator is fitted on the picks' out-of-fold P (5-fold
cross-validation by question, voter/adaptive.py: the scorer never saw the question it scored)
against whether each pick was right:
- `platt` (default): P' = sigmoid(a * logit(P) + b), a > 0. Two parameters, strictly increasing,
  so it never reorders answers and never changes which round a question stops after.
- `isotonic`: a non-decreasing step function (scikit-learn's IsotonicRegression); more
  flexible, wants more fit questions, and its flat steps can merge neighbouring P values.

Pure numpy (+ scikit-learn in `fit`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

METHODS = ("platt", "isotonic")
ECE_BINS = 10
COVERAGES = (1.0, 0.8, 0.5, 0.2)
_EPS = 1e-6


def _logit(p: np.ndarray) -> np.ndarray:
    p = np.clip(np.asarray(p, dtype=np.float64), _EPS, 1 - _EPS)
    return np.log(p / (1 - p))


class Calibrator:
    """Raw P(right) -> calibrated P(right) (scikit-learn style: settings in __init__, fitted
    state ends in _, fit returns self)."""

    def __init__(self, method: str = "platt"):
        if method not in METHODS:
            raise ValueError(f"calibration method must be one of {METHODS}, got {method!r}")
        self.method = method

    def fit(self, p: Sequence[float], right: Sequence[float]) -> "Calibrator":
        p = np.asarray(p, dtype=np.float64)
        y = (np.asarray(right, dtype=np.float64) > 0).astype(int)
        if len(p) == 0:
            raise ValueError("calibration needs at least one answer")
        if self.method == "isotonic":
            from sklearn.isotonic import IsotonicRegression

            iso = IsotonicRegression(y_min=0.0, y_max=1.0, increasing=True, out_of_bounds="clip").fit(p, y)
            self.x_, self.y_ = (np.asarray(a, dtype=np.float64) for a in (iso.X_thresholds_, iso.y_thresholds_))
            return self
        if len(set(y.tolist())) < 2:  # all right or all wrong: the rate, whatever P says
            rate = (y.mean() + 1e-3) / (1 + 2e-3)
            self.a_, self.b_ = 0.0, float(math.log(rate / (1 - rate)))
            return self
        from sklearn.linear_model import LogisticRegression

        model = LogisticRegression(C=1e4, max_iter=1000).fit(_logit(p)[:, None], y)
        self.a_, self.b_ = float(model.coef_[0, 0]), float(model.intercept_[0])
        if self.a_ <= 0:  # a higher raw P never means a lower chance of being right: keep the ranking
            self.a_, self.b_ = 1.0, 0.0
        return self

    def predict(self, p: Sequence[float] | float) -> np.ndarray:
        p = np.asarray(p, dtype=np.float64)
        if self.method == "isotonic":
            return np.interp(p, self.x_, self.y_)
        z = np.clip(self.a_ * _logit(p) + self.b_, -40, 40)
        return 1.0 / (1.0 + np.exp(-z))

    def __call__(self, p: float) -> float:
        return float(self.predict(p))

    def to_dict(self) -> dict[str, Any]:
        if self.method == "isotonic":
            return {"method": self.method, "x": self.x_.round(8).tolist(), "y": self.y_.round(8).tolist()}
        return {"method": self.method, "a": round(self.a_, 8), "b": round(self.b_, 8)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Calibrator":
        c = cls(str(d.get("method")))
        if c.method == "isotonic":
            c.x_, c.y_ = (np.asarray(d[k], dtype=np.float64) for k in ("x", "y"))
            if len(c.x_) != len(c.y_) or not len(c.x_) or np.any(np.diff(c.x_) < 0) or np.any(np.diff(c.y_) < 0):
                raise ValueError("calibrator: isotonic x and y must be equally long, non-empty and non-decreasing")
        else:
            c.a_, c.b_ = float(d["a"]), float(d["b"])
        values = np.concatenate([c.x_, c.y_]) if c.method == "isotonic" else np.array([c.a_, c.b_])
        if not np.all(np.isfinite(values)):
            raise ValueError("calibrator: parameters must be finite numbers")
        return c


def fit_calibrator(p: np.ndarray, right: np.ndarray, method: str = "platt") -> Calibrator:
    return Calibrator(method).fit(np.ravel(p), np.ravel(right))


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


def ece_sampling_floor(p: Sequence[float], bins: int = ECE_BINS, draws: int = 2000, seed: int = 0) -> float:
    """The ECE a perfectly calibrated P would still show on these questions: the mean ECE when
    each question's outcome is drawn as right with its own P. An observed ECE near it is as
    calibrated as this many questions can tell; below it is luck."""
    p = np.asarray(p, dtype=np.float64)
    if len(p) == 0:
        return math.nan
    rng = np.random.default_rng(seed)
    return float(np.mean([expected_calibration_error(p, rng.random(len(p)) < p, bins) for _ in range(draws)]))


def cross_validated_ece(p: np.ndarray, right: np.ndarray, method: str = "platt", folds: int = 5,
                        seed: int = 0) -> float:
    """ECE of calibrated P on questions the calibrator did not see: rows are questions ([N] or
    [N, R] with every round of a question in the same fold)."""
    p, right = np.atleast_2d(np.asarray(p, dtype=np.float64).T).T, np.atleast_2d(np.asarray(right).T).T
    n = len(p)
    if n < 2:
        return math.nan
    order = np.random.default_rng(seed).permutation(n)
    calibrated = np.zeros_like(p)
    for f in range(min(folds, n)):
        test = order[f::min(folds, n)]
        train = np.setdiff1d(np.arange(n), test)
        calibrated[test] = fit_calibrator(p[train], right[train], method).predict(p[test])
    return expected_calibration_error(calibrated.ravel(), right.ravel())


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
