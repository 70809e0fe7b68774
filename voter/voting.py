"""The EoR vote for given weights (eqs. 6-7): combine metrics, pool, weight, argmax.

Kept apart from fitting so serving, the fit objective and adaptive EoR (vote over the cheap
retrievers first) share one implementation. Everything is vectorised over questions; a
boolean mask [N, M] says which retrievers answered, so voting over any subset of the pool
is just a different mask.

Drop rule (§4.2): retrievers with omega_r < t are *dropped* -- they never win; by default
they do not vote either (`dropped_vote=False`), so a deployed pool need not run them. If
none of the kept retrievers answered a question, the vote falls back to every retriever
that did (with its unthresholded weight) rather than returning nothing.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from voter.normalize import normalize_answer
from voter.pooling import get_pooling

_ROUND = 9  # decimals kept before argmax, so float summation order never breaks a tie


@dataclass(frozen=True)
class VoteRule:
    """The non-learned part of the voter."""

    pooling: str = "mean"
    sim_threshold: float = 0.5  # s of Appendix C.4 (majority / plurality)
    dropped_vote: bool = False  # do dropped retrievers still vote for the others?

    def __post_init__(self) -> None:
        get_pooling(self.pooling)  # raises on an unknown name


@dataclass(frozen=True)
class VoterWeights:
    """Learned weights: omega_s per metric, omega_r per retriever, and which retrievers are kept."""

    metric_weights: tuple[float, ...]
    retriever_weights: tuple[float, ...]
    kept: tuple[bool, ...]

    @classmethod
    def from_arrays(cls, metric_weights: Sequence[float], retriever_weights: Sequence[float], threshold: float) -> "VoterWeights":
        rw = tuple(float(w) for w in retriever_weights)
        return cls(
            metric_weights=tuple(float(w) for w in metric_weights),
            retriever_weights=rw,
            kept=tuple(w >= threshold for w in rw),
        )

    def __post_init__(self) -> None:
        if len(self.kept) != len(self.retriever_weights):
            raise ValueError("kept and retriever_weights differ in length")

    @property
    def n_metrics(self) -> int:
        return len(self.metric_weights)

    @property
    def n_retrievers(self) -> int:
        return len(self.retriever_weights)


def combine_metrics(sim: np.ndarray, metric_weights: Sequence[float] | np.ndarray) -> np.ndarray:
    """Eq. 6: [N, M, M, K] similarities -> [N, M, M] weighted sum over the K metrics."""
    w = np.asarray(metric_weights, dtype=np.float64)
    if sim.shape[-1] != w.shape[0]:
        raise ValueError(f"similarity tensor has {sim.shape[-1]} metrics, weights have {w.shape[0]}")
    return np.tensordot(sim, w, axes=([-1], [0]))


def vote_sets(mask: np.ndarray, kept: np.ndarray, dropped_vote: bool) -> tuple[np.ndarray, np.ndarray]:
    """(voters, candidates), both [N, M] bool, after the drop rule and its fallback."""
    mask = np.asarray(mask, dtype=bool)
    kept_mask = mask & np.asarray(kept, dtype=bool)[None, :]
    has_kept = kept_mask.any(axis=1, keepdims=True)
    candidates = np.where(has_kept, kept_mask, mask)
    voters = mask if dropped_vote else candidates
    return voters, candidates


def scores_from_combined(
    combined: np.ndarray,
    mask: np.ndarray,
    retriever_weights: np.ndarray,
    kept: np.ndarray,
    rule: VoteRule,
) -> np.ndarray:
    """Eq. 7 on a combined similarity [N, M, M]: omega_r * pool(...), -inf where m cannot win."""
    voters, candidates = vote_sets(mask, kept, rule.dropped_vote)
    pooled = get_pooling(rule.pooling)(combined, voters, candidates=candidates, threshold=rule.sim_threshold)
    scores = np.round(pooled * np.asarray(retriever_weights, dtype=np.float64)[None, :], _ROUND)
    return np.where(candidates, scores, -np.inf)


def decision_scores(sim: np.ndarray, mask: np.ndarray, weights: VoterWeights, rule: VoteRule) -> np.ndarray:
    """Voter score s_m for every answer: [N, M] float, -inf for answers that cannot win."""
    if sim.ndim != 4 or sim.shape[1] != sim.shape[2]:
        raise ValueError(f"similarity tensor must be [N, M, M, K], got {sim.shape}")
    if mask.shape != sim.shape[:2]:
        raise ValueError(f"mask shape {mask.shape} does not match similarity tensor {sim.shape}")
    if weights.n_retrievers != sim.shape[1]:
        raise ValueError(f"weights are for {weights.n_retrievers} retrievers, tensor has {sim.shape[1]}")
    combined = combine_metrics(np.nan_to_num(sim, nan=0.0), weights.metric_weights)
    return scores_from_combined(
        combined, mask, np.asarray(weights.retriever_weights), np.asarray(weights.kept), rule
    )


def choose(scores: np.ndarray) -> np.ndarray:
    """argmax per question, ties to the lowest index; -1 where no answer can win."""
    idx = np.argmax(scores, axis=1)
    has_any = np.isfinite(scores).any(axis=1)
    return np.where(has_any, idx, -1)


def vote_margin(scores: np.ndarray) -> np.ndarray:
    """Best minus second-best score per question ([N]).

    +inf when only one answer can win (nothing to compare against), NaN when none can.
    Adaptive EoR compares this against a fitted threshold to decide whether to run more
    retrievers.
    """
    s = np.where(np.isfinite(scores), scores, -np.inf)
    if s.shape[1] < 2:
        top = s.max(axis=1) if s.shape[1] else np.full(s.shape[0], -np.inf)
        return np.where(np.isfinite(top), np.inf, np.nan)
    part = -np.partition(-s, 1, axis=1)[:, :2]
    best, second = part[:, 0], part[:, 1]
    with np.errstate(invalid="ignore"):
        margin = best - second
    return np.where(np.isfinite(best), np.where(np.isfinite(second), margin, np.inf), np.nan)


def answer_margin(scores: np.ndarray, answers: Sequence[str | None], winner: int) -> float | None:
    """Winner's score minus the best score among candidates with a *different* normalised answer.

    Unlike `vote_margin`, agreeing retrievers do not count as rivals, so a unanimous vote is
    not mistaken for a close one. None when there is no winner or no rival answer.
    """
    if winner < 0:
        return None
    won = normalize_answer(answers[winner] or "")
    rivals = [s for s, a in zip(scores, answers)
              if a is not None and np.isfinite(s) and normalize_answer(a) != won]
    return float(scores[winner] - max(rivals)) if rivals else None
