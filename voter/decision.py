"""What the voter answers after a round: the answer, whether the question is settled, and
P(right). One interface over both kinds of voter file, one stop rule (voter/cascade.py: `settled`).

- A margin-cascade voter (eor-voter/2): the fitted EoR vote answers; the stop statistic is the
  answer margin; it has no P(right) (`confidence` None).
- A confidence-aware voter (eor-voter/3 and /4): the answer scorer picks (voter/selector.py) and
  the stop statistic *is* the confidence: the calibrated P(right) (v4: a calibrator fitted on
  the fit split, voter/calibration.py), else the scorer's raw P (v3).

The thresholds meet their statistic here and nowhere else: `decide` returns `Decision`s and
the orchestration (serve/ensemble.py) only reads `settled`.

Selective answering: a caller's `min_confidence` (0: always answer) turns an answer whose
confidence is below it, or unknown, into an abstention (`abstains`); the reply then carries
the best guess beside an empty answer.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Protocol, Sequence

import numpy as np

from retrievers.types import QuestionResult
from voter.cascade import Cascade, settle_stat
from voter.question_vote import Vote, answer_grid, equal_weights, similarity_inputs, vote_margin, votes_from_scores
from voter.similarity import PairSimilarity
from voter.weights_io import SavedWeights


@dataclass(frozen=True)
class Confidence:
    """P(the chosen answer is right), and whether a calibrator made it mean that (else it is the
    answer scorer's raw probability: a voter file fitted before calibration)."""

    p: float
    calibrated: bool

    @property
    def kind(self) -> str:
        return "calibrated" if self.calibrated else "raw"


@dataclass(frozen=True)
class Decision:
    """The voter's answer after a round."""

    vote: Vote
    settled: bool  # stop here: the stop rule, with the thresholds of the cascade being run
    confidence: Confidence | None  # None: this voter cannot say, or nobody answered
    stat: float  # what the stop rule read: the margin, or confidence.p


Judged = tuple[Vote, float, "Confidence | None"]  # the vote, its stop statistic, its confidence


class Rule(Protocol):
    """A voter file's way to judge a round: the vote, the statistic its thresholds read, P(right)."""

    def judge(self, results: Sequence[QuestionResult], grid: Sequence[Sequence[str | None]],
              X: tuple[np.ndarray, np.ndarray], ran: frozenset[str]) -> list[Judged]: ...


class MarginRule:
    """The fitted EoR vote; the statistic is its answer margin (voter/cascade.py: settle_stat)."""

    def __init__(self, saved: SavedWeights):
        self.saved = saved

    def judge(self, results, grid, X, ran) -> list[Judged]:
        scores = self.saved.voter().decision_scores(X)
        votes = votes_from_scores(scores, grid, self.saved.pool)
        return [(v, settle_stat(row, g), None) for v, row, g in zip(votes, scores, grid)]


class ConfidenceRule:
    """voter/selector.py's pick: the candidate the answer scorer finds most likely right, from
    its EoR vote score (equal weights over what ran, as the model was fitted), agreement, the
    reader's confidence, length and retriever. The statistic is the pick's confidence."""

    def __init__(self, saved: SavedWeights):
        self.saved = saved
        self.model = saved.adaptive

    def judge(self, results, grid, X, ran) -> list[Judged]:
        """`ran`: the members asked so far; the calibrator's line is that of the round they are
        (a member that failed or said nothing still ran, as in the fit's round views)."""
        from voter.selector import RoundView, candidate_features, pick

        pool, model = self.saved.pool, self.model
        k = model.round_of(ran)
        scores = equal_weights(pool, self.saved.metrics, self.saved.pooling).voter().decision_scores(X)
        calibrated = model.calibrator is not None
        out: list[Judged] = []
        for r, answers, row in zip(results, grid, scores):
            lps = {c.retriever: c.logprobs for c in r.candidates}
            view = RoundView(tuple(answers), tuple(float(x) for x in row), tuple(lps.get(s) for s in pool))
            chosen = pick(view, pool, model.scorer)
            feats, idx = candidate_features(view, pool)
            p = model.scorer.predict_proba(feats) if len(idx) else []
            per = {s: None for s in pool} | {pool[m]: float(q) for m, q in zip(idx, p)}
            stat = float(model.confidence(chosen.p, k))
            if chosen.index < 0:
                out.append((Vote(None, "", None, None, per), stat, None))
            else:  # the margin, as every vote's: over the best different answer, here in P(right)
                p_row = np.array([np.nan if per[s] is None else per[s] for s in pool])
                out.append((Vote(pool[chosen.index], chosen.answer, chosen.p,
                                 vote_margin(p_row, answers, chosen.index), per), stat, Confidence(stat, calibrated)))
        return out


def rule_for(saved: SavedWeights) -> Rule:
    return ConfidenceRule(saved) if saved.adaptive is not None else MarginRule(saved)


def decide(results: Sequence[QuestionResult], saved: SavedWeights, metrics: Sequence[PairSimilarity],
           cascade: Cascade | None = None, k: int = 0) -> list[Decision]:
    """Every question's decision after 0-based round `k` of `cascade` (the voter's own by default;
    a caller's explicit retrievers run as one round, which always settles). Any subset of the
    pool may have run."""
    cascade = cascade or saved.cascade_to_run
    grid = answer_grid(results, saved.pool)
    X = similarity_inputs(results, grid, metrics)
    ran = frozenset(s for st in cascade.rounds[:k + 1] for s in st)
    return [Decision(v, cascade.settled(k, stat), conf, stat)
            for v, stat, conf in rule_for(saved).judge(results, grid, X, ran)]


def vote(results: Sequence[QuestionResult], saved: SavedWeights, metrics: Sequence[PairSimilarity]) -> list[Vote]:
    """Vote every question with the given voter (the answers alone)."""
    return [d.vote for d in decide(results, saved, metrics)]


# ---- abstention ------------------------------------------------------------------------------
def check_min_confidence(value: Any) -> float:
    """A caller's `min_confidence`, checked (ValueError with one line: not a number in [0, 1])."""
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"min_confidence must be a number in [0, 1] (0: always answer), got {value!r}") from None
    if math.isnan(x) or not 0.0 <= x <= 1.0:
        raise ValueError(f"min_confidence must be a number in [0, 1] (0: always answer), got {x:g}")
    return x


def abstains(confidence: Confidence | None, min_confidence: float) -> bool:
    """Below the caller's bar, or unknown while the caller set one: answer "not sure" instead."""
    return min_confidence > 0 and (confidence is None or confidence.p < min_confidence)
