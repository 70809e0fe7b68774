"""Confidence-aware adaptive EoR: a learned scorer of candidate answers and a stop rule fitted
for accuracy under cost (FrugalGPT's scorer + thresholds; the reader's own confidence).

After each *round* (a batch of retrievers run together), every candidate so far gets features:
its EoR vote score over the candidates so far, how many of them give the same normalised
answer, the reader's confidence in it (mean, min and first token log-probability from the
same engine request), its length, which retriever gave it (and, in a pool of several readers,
which reader read it), and how many answered. A logistic
regression predicts P(the candidate is right); the selector answers with the most probable
candidate, and the stop rule ends the question after round r when that probability reaches
tau_r (the last round always ends it: voter/cascade.py, `settled`). So the first round can stop
when the reader is sure and the cheap retrievers agree, and a lone retriever can win when it is
usually right alone. This module is the scorer and its pick, as the service runs them; the
thresholds and the layouts are fitted in fitting/ (thresholds.py, layout_fit.py).

Pure numpy + scikit-learn (in `AnswerScorer.fit`): candidates and the voter's scores in, arrays out.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from retrievers.spec import by_reader, parse_spec
from voter.normalize import normalize_answer

NO_LOGPROB = -5.0  # stands in for an unknown confidence (a cached output never scored); rare by design
BASE_FEATURES = ("vote_score", "vote_rank_top", "agree_share", "agree_count", "mean_logprob", "min_logprob",
                 "first_logprob", "answer_words", "answered", "logprob_known")


@dataclass(frozen=True)
class RoundView:
    """One question as it stands after a round: per pool retriever, its answer (None: no vote),
    its vote score over the candidates so far (-inf: cannot win) and its token log-probabilities."""

    answers: tuple[str | None, ...]
    scores: tuple[float, ...]
    logprobs: tuple[tuple[float, ...] | None, ...]


def other_readers(pool: Sequence[str]) -> list[str]:
    """The readers besides the default that the pool's members name (`Wiki@10~1.5B`), in pool order."""
    return [r for r in by_reader(pool) if r]


def feature_names(pool: Sequence[str]) -> tuple[str, ...]:
    """One indicator per member and, beside them, one per reader other than the default: what
    a reader adds is learned once across its members (a single-reader pool has none)."""
    return BASE_FEATURES + tuple(f"is:{s}" for s in pool) + tuple(f"reader:{r}" for r in other_readers(pool))


def candidate_features(view: RoundView, pool: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """(X [C, F], the pool index of each row): one row per candidate that can win."""
    live = [m for m, (a, s) in enumerate(zip(view.answers, view.scores)) if a is not None and math.isfinite(s)]
    if not live:
        return np.zeros((0, len(feature_names(pool)))), np.zeros(0, dtype=int)
    norm = {m: normalize_answer(view.answers[m] or "") for m in live}
    extra, readers = other_readers(pool), [parse_spec(s).reader for s in pool]
    top = max(view.scores[m] for m in live)
    rows = []
    for m in live:
        agree = sum(1 for o in live if o != m and norm[o] == norm[m])
        lps = view.logprobs[m]
        known = bool(lps)
        mean = float(np.mean(lps)) if known else NO_LOGPROB
        low = float(np.min(lps)) if known else NO_LOGPROB
        first = float(lps[0]) if known else NO_LOGPROB
        onehot = [1.0 if k == m else 0.0 for k in range(len(pool))]
        onehot += [1.0 if readers[m] == r else 0.0 for r in extra]
        rows.append([view.scores[m], 1.0 if view.scores[m] >= top else 0.0,
                     agree / max(1, len(live) - 1), float(agree), mean, low, first,
                     float(len((view.answers[m] or "").split())), float(len(live)), float(known), *onehot])
    return np.asarray(rows, dtype=np.float64), np.asarray(live, dtype=int)


class AnswerScorer:
    """P(a candidate answer is right) from its features: standardised logistic regression
    (scikit-learn style: settings in __init__, fitted state ends in _, fit returns self)."""

    def __init__(self, C: float = 1.0):
        self.C = C

    def fit(self, X: np.ndarray, y: np.ndarray) -> "AnswerScorer":
        from sklearn.linear_model import LogisticRegression

        X = np.asarray(X, dtype=np.float64)
        y = np.asarray(y, dtype=int)
        self.mean_ = X.mean(axis=0)
        self.scale_ = np.where(X.std(axis=0) > 1e-9, X.std(axis=0), 1.0)
        if len(set(y.tolist())) < 2:  # all right or all wrong: a constant scorer
            self.coef_ = np.zeros(X.shape[1])
            self.intercept_ = float(np.log((y.mean() + 1e-3) / (1 - y.mean() + 1e-3)))
            return self
        model = LogisticRegression(C=self.C, max_iter=2000).fit((X - self.mean_) / self.scale_, y)
        self.coef_ = model.coef_[0].astype(np.float64)
        self.intercept_ = float(model.intercept_[0])
        return self

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        z = ((np.asarray(X, dtype=np.float64) - self.mean_) / self.scale_) @ self.coef_ + self.intercept_
        return 1.0 / (1.0 + np.exp(-np.clip(z, -40, 40)))

    def to_dict(self, names: Sequence[str]) -> dict[str, Any]:
        return {"C": self.C, "features": list(names), "mean": self.mean_.round(6).tolist(),
                "scale": self.scale_.round(6).tolist(), "coef": self.coef_.round(6).tolist(),
                "intercept": round(self.intercept_, 6)}

    @classmethod
    def from_dict(cls, d: dict[str, Any], names: Sequence[str]) -> "AnswerScorer":
        if list(d.get("features", [])) != list(names):
            raise ValueError(f"answer scorer: fitted on features {d.get('features')}, this pool gives {list(names)}")
        s = cls(float(d.get("C", 1.0)))
        s.mean_, s.scale_, s.coef_ = (np.asarray(d[k], dtype=np.float64) for k in ("mean", "scale", "coef"))
        s.intercept_ = float(d["intercept"])
        if not (len(s.mean_) == len(s.scale_) == len(s.coef_) == len(names)):
            raise ValueError("answer scorer: array lengths differ from the feature list")
        return s


@dataclass(frozen=True)
class Pick:
    """The selector's answer after a round: the pool index (-1: none), its answer and P(right)."""

    index: int
    answer: str
    p: float


def pick(view: RoundView, pool: Sequence[str], scorer: AnswerScorer) -> Pick:
    X, idx = candidate_features(view, pool)
    if not len(idx):
        return Pick(-1, "", 0.0)
    p = scorer.predict_proba(X)
    best = int(np.argmax(p))
    return Pick(int(idx[best]), view.answers[idx[best]] or "", float(p[best]))
