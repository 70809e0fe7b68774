"""P(right) that means what it says: a calibrator for the answer scorer's probability (its measures,
reliability bins, ECE, risk-coverage: fitting/measures.py).

The scorer (voter/selector.py) is a logistic regression fitted on every candidate of every
round: its P ranks answers well, but nothing makes 0.8 mean "right 8 times in 10" for the
answer the selector *picks*. The calibrator is fitted on the picks' out-of-fold P (5-fold
cross-validation by question, fitting/layout_fit.py: the scorer never saw the question it scored)
against whether each pick was right:
- `platt-per-round` (default): P' = sigmoid(a_k * logit(P) + b_k), one line per round k of the
  cascade. The same raw P means a different chance after round 1 (one reader, one retriever)
  than after the last round (every member agreeing or not); one line for all rounds is right on
  average over every round's picks but off on the answers the caller gets, which the stop rule
  draws from different rounds (fit split, nested CV, session 23: delivered-answer ECE 0.04
  against 0.09). Strictly increasing within a round, so it never changes which round a question
  stops after. Its pooled line calibrates a set of members that is none of the rounds; its
  `early` line, where the fit gives one, round 1's early answer (voter/cascade.py: early_members,
  a stream's first reply, read before the rest of round 1: its P is the scorer's on a smaller
  vote than round 1's, and means another chance); a file without one reads round 1's line there.
- `platt`: one line for every round.
- `isotonic`: a non-decreasing step function (scikit-learn's IsotonicRegression); more
  flexible, wants more fit questions, and its flat steps can merge neighbouring P values.

Pure numpy (+ scikit-learn in `fit`).
"""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

METHODS = ("platt-per-round", "platt", "isotonic")
DEFAULT_METHOD = "platt-per-round"
EARLY = "early"  # the round index of round 1's early answer (Calibrator.predict)
_EPS = 1e-6


def _logit(p: np.ndarray) -> np.ndarray:
    p = np.clip(np.asarray(p, dtype=np.float64), _EPS, 1 - _EPS)
    return np.log(p / (1 - p))


def _platt(p: np.ndarray, y: np.ndarray) -> tuple[float, float] | None:
    """(a, b) of sigmoid(a * logit(P) + b) by maximum likelihood; None where there is no such
    line: one outcome only, or a slope that is not positive (a higher P never means a lower chance)."""
    if len(set(y.tolist())) < 2:
        return None
    from sklearn.linear_model import LogisticRegression

    model = LogisticRegression(C=1e4, max_iter=1000).fit(_logit(p)[:, None], y)
    a, b = float(model.coef_[0, 0]), float(model.intercept_[0])
    return (a, b) if a > 0 else None


def _pooled_platt(p: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """One line for every answer; without one: every answer right or wrong, their rate whatever P
    says; a slope that is not positive, the raw P (the ranking kept)."""
    line = _platt(p, y)
    if line is not None:
        return line
    if len(set(y.tolist())) < 2:
        rate = (y.mean() + 1e-3) / (1 + 2e-3)
        return 0.0, float(math.log(rate / (1 - rate)))
    return 1.0, 0.0


class Calibrator:
    """Raw P(right) -> calibrated P(right) (scikit-learn style: settings in __init__, fitted
    state ends in _, fit returns self). `k`: the 0-based round whose answer P belongs to
    (None: unknown, the pooled line); only `platt-per-round` reads it."""

    def __init__(self, method: str = DEFAULT_METHOD):
        if method not in METHODS:
            raise ValueError(f"calibration method must be one of {METHODS}, got {method!r}")
        self.method = method

    def fit(self, p: Sequence[float] | np.ndarray, right: Sequence[float] | np.ndarray,
            early: tuple[Sequence[float], Sequence[float]] | None = None) -> "Calibrator":
        """`p` and `right`: [N] answers, or [N, R] (question, round): per round for
        `platt-per-round` (which needs the rounds), pooled for the others; a NaN P is a round the
        question did not reach (a cascade's reads: `eor calibrate`), left out of every line.
        `early`: (P, right) [N] of round 1's early answers, a line of their own (`platt-per-round` only)."""
        self.early_ = None
        if early is not None and self.method == "platt-per-round":
            pe = np.asarray(early[0], dtype=np.float64)
            ye = (np.asarray(early[1], dtype=np.float64) > 0).astype(int)
            pe, ye = pe[np.isfinite(pe)], ye[np.isfinite(pe)]
            self.early_ = _platt(pe, ye) if pe.size else None
        p = np.asarray(p, dtype=np.float64)
        y = (np.asarray(right, dtype=np.float64) > 0).astype(int)
        seen = np.isfinite(p)
        if not seen.any():
            raise ValueError("calibration needs at least one answer")
        if self.method == "platt-per-round" and p.ndim != 2:
            raise ValueError("platt-per-round calibration needs P per question and round ([N, R])")
        if self.method == "isotonic":
            from sklearn.isotonic import IsotonicRegression

            iso = IsotonicRegression(y_min=0.0, y_max=1.0, increasing=True, out_of_bounds="clip").fit(p[seen],
                                                                                                       y[seen])
            self.x_, self.y_ = (np.asarray(a, dtype=np.float64) for a in (iso.X_thresholds_, iso.y_thresholds_))
            return self
        self.a_, self.b_ = _pooled_platt(p[seen], y[seen])  # platt-per-round: its pooled line
        if self.method == "platt-per-round":  # a round without a line of its own reads the pooled one
            self.rounds_ = [_platt(p[seen[:, k], k], y[seen[:, k], k]) or (self.a_, self.b_)
                            for k in range(p.shape[1])]
        return self

    @property
    def n_rounds(self) -> int | None:
        """How many rounds it has a line for (None: one for all)."""
        return len(self.rounds_) if self.method == "platt-per-round" else None

    @property
    def has_early(self) -> bool:
        """Whether round 1's early answer has a line of its own."""
        return getattr(self, "early_", None) is not None

    def predict(self, p: Sequence[float] | float, k: int | str | None = None) -> np.ndarray:
        """`k`: the 0-based round, EARLY (round 1's early answer: its line, else round 1's), or None."""
        p = np.asarray(p, dtype=np.float64)
        if self.method == "isotonic":
            return np.interp(p, self.x_, self.y_)
        a, b = self.line(k)
        z = np.clip(a * _logit(p) + b, -40, 40)
        return 1.0 / (1.0 + np.exp(-z))

    def line(self, k: int | str | None) -> tuple[float, float]:
        """(a, b) of the Platt line round `k` reads (`predict`'s `k`)."""
        if k == EARLY and self.has_early:
            return self.early_
        k = (None if self.method == "platt" else 0) if k == EARLY else k
        return (self.a_, self.b_) if k is None or self.method == "platt" else self.rounds_[k]

    def raw(self, confidence: float, k: int | str | None = None) -> float:
        """The raw P that `predict` calibrates to `confidence` on round `k`'s line: how a
        threshold on one calibrator's P is carried to another's without moving a stop
        (fitting/held_out.py: recalibrate). A line is strictly increasing; a flat one (slope 0:
        one outcome only) and isotonic steps have no inverse."""
        if self.method == "isotonic":
            raise ValueError("an isotonic calibrator has no inverse: recalibrate a Platt one")
        a, b = self.line(k)
        if a <= 0:
            raise ValueError("a flat calibration line (every answer alike) has no inverse")
        c = min(max(float(confidence), 1e-15), 1.0 - 1e-15)  # predict reaches beyond _logit's 1e-6 clip
        z = (math.log(c / (1.0 - c)) - b) / a
        return float(1.0 / (1.0 + math.exp(-max(-40.0, min(40.0, z)))))

    def predict_rounds(self, p: np.ndarray) -> np.ndarray:
        """[N, R] P per question and round -> calibrated, column k as round k."""
        p = np.asarray(p, dtype=np.float64)
        if self.method != "platt-per-round":
            return self.predict(p)
        return np.stack([self.predict(p[:, k], k) for k in range(p.shape[1])], axis=1) if p.size else p.copy()

    def __call__(self, p: float, k: int | str | None = None) -> float:
        return float(self.predict(p, k))

    def to_dict(self) -> dict[str, Any]:
        if self.method == "isotonic":
            return {"method": self.method, "x": self.x_.round(8).tolist(), "y": self.y_.round(8).tolist()}
        d = {"method": self.method, "a": round(self.a_, 8), "b": round(self.b_, 8)}
        if self.method == "platt-per-round":
            d["rounds"] = [{"a": round(a, 8), "b": round(b, 8)} for a, b in self.rounds_]
            if self.has_early:
                d["early"] = {"a": round(self.early_[0], 8), "b": round(self.early_[1], 8)}
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Calibrator":
        c = cls(str(d.get("method")))
        if c.method == "isotonic":
            c.x_, c.y_ = (np.asarray(d[k], dtype=np.float64) for k in ("x", "y"))
            if len(c.x_) != len(c.y_) or not len(c.x_) or np.any(np.diff(c.x_) < 0) or np.any(np.diff(c.y_) < 0):
                raise ValueError("calibrator: isotonic x and y must be equally long, non-empty and non-decreasing")
        else:
            c.a_, c.b_ = float(d["a"]), float(d["b"])
        if c.method == "platt-per-round":
            rounds = d.get("rounds")
            if (not isinstance(rounds, list) or not rounds
                    or not all(isinstance(r, dict) and {"a", "b"} <= set(r) for r in rounds)):
                raise ValueError("calibrator: platt-per-round needs a line {a, b} per round")
            try:
                c.rounds_ = [(float(r["a"]), float(r["b"])) for r in rounds]
            except (TypeError, ValueError):
                raise ValueError("calibrator: each round's a and b must be numbers") from None
            if any(a < 0 for a, _ in c.rounds_):
                raise ValueError("calibrator: a round's slope a must not be negative (it would reorder answers)")
            early = d.get("early")
            c.early_ = None
            if early is not None:
                try:
                    c.early_ = (float(early["a"]), float(early["b"]))
                except (TypeError, ValueError, KeyError):
                    raise ValueError("calibrator: the early line needs numbers a and b") from None
                if c.early_[0] < 0:
                    raise ValueError("calibrator: the early line's slope a must not be negative")
        values = (np.concatenate([c.x_, c.y_]) if c.method == "isotonic" else
                  np.array([c.a_, c.b_, *[x for r in getattr(c, "rounds_", []) for x in r],
                            *(getattr(c, "early_", None) or ())]))
        if not np.all(np.isfinite(values)):
            raise ValueError("calibrator: parameters must be finite numbers")
        return c


def fit_calibrator(p: np.ndarray, right: np.ndarray, method: str = DEFAULT_METHOD,
                   early: tuple[np.ndarray, np.ndarray] | None = None) -> Calibrator:
    """`p`, `right`: [N, R] per question and round (or [N] for the pooled methods); `early`: round
    1's early answers' (P, right), where the layout has one."""
    return Calibrator(method).fit(p, right, early)
