"""Fitting the stop thresholds: the cheapest per-round thresholds (greedy coordinate descent over
the observed statistics) whose quality holds, for the confidence-aware rounds (P(right), within a
tolerance of running every round) and the margin cascade (agreement with the all-kept vote, the
FrugalGPT-style rule of voter/cascade.py). The rule they are fitted for is voter/cascade.py:
`settled`, replayed over arrays by `stop_rounds`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from voter.cascade import DEFAULT_TARGET, UNANIMOUS_ONLY, settle_stat, stop_rounds
from voter.normalize import normalize_answer
from voter.voting import choose


# ---- the stop rule over rounds ------------------------------------------------------------------
@dataclass(frozen=True)
class RoundTrace:
    """Every question after every round: [N, R] arrays of the pick's P(right), whether the pick
    is right, and the cost (reader tokens computed, rounds) spent up to that round."""

    p: np.ndarray
    right: np.ndarray
    cost: np.ndarray

    @property
    def shape(self) -> tuple[int, int]:
        return self.p.shape


def evaluate_stop(trace: RoundTrace, thresholds: Sequence[float]) -> tuple[float, float, np.ndarray]:
    """(accuracy, mean cost, stop round per question) of thresholds on P (voter/cascade.py:
    the one stop rule, `settled`, replayed by `stop_rounds`)."""
    stop = stop_rounds(trace.p, thresholds)
    rows = np.arange(len(stop))
    return float(trace.right[rows, stop].mean()), float(trace.cost[rows, stop].mean()), stop


def fit_stop_thresholds(trace: RoundTrace, tolerance: float = 0.005) -> tuple[float, ...]:
    """The cheapest thresholds whose accuracy stays within `tolerance` of running every round
    (greedy_thresholds, below, over the observed probabilities)."""
    n, r = trace.shape
    if n == 0 or r < 2:
        return tuple([math.inf] * (r - 1))
    target = float(trace.right[:, -1].mean()) - tolerance
    grid = [sorted({float(x) for x in trace.p[:, k]}) for k in range(r - 1)]
    return greedy_thresholds(grid, lambda tau: evaluate_stop(trace, tau)[:2], target)


def frontier(trace: RoundTrace, levels: Sequence[float] = tuple(np.linspace(0.0, 1.0, 21))) -> list[dict[str, float]]:
    """Accuracy against cost as one shared threshold sweeps from 0 (stop after round 1) to
    above 1 (run every round)."""
    out = []
    for t in list(levels) + [math.inf]:
        acc, cost, stop = evaluate_stop(trace, [t] * (trace.shape[1] - 1))
        out.append({"threshold": t, "accuracy": acc, "cost": cost,
                    "first_round_share": float((stop == 0).mean())})
    return out


def order_rounds(specs: Sequence[str], cost: dict[str, float], first: int = 2) -> tuple[tuple[str, ...], ...]:
    """Cheapest first: the `first` cheapest retrievers make round 1 (a vote needs two answers),
    then one retriever per round, so the rule can stop as soon as the vote settles."""
    ranked = sorted(specs, key=lambda s: (cost.get(s, math.inf), list(specs).index(s)))
    if len(ranked) <= first:
        return (tuple(ranked),)
    return (tuple(ranked[:first]), *((s,) for s in ranked[first:]))


@dataclass
class MarginTrace:
    """What each fit question looks like after each round of a margin cascade: [N, R] arrays."""

    stats: np.ndarray  # settle statistic of the vote so far
    same: np.ndarray  # bool: the vote so far picks the all-kept answer (normalised)
    cum_tokens: np.ndarray  # reader tokens spent up to and including the round
    answers: list[list[str]] = field(default_factory=list)  # [N][R] voted answer after each round


def evaluate_rule(trace: MarginTrace, thresholds: Sequence[float]) -> tuple[float, float, np.ndarray]:
    """(agreement with the all-kept vote, mean tokens per question, stop round per question)."""
    stop = stop_rounds(trace.stats, thresholds)
    rows = np.arange(len(stop))
    return float(trace.same[rows, stop].mean()), float(trace.cum_tokens[rows, stop].mean()), stop


def greedy_thresholds(grid: Sequence[Sequence[float]], evaluate: Any, target: float) -> tuple[float, ...]:
    """The cheapest per-round thresholds whose quality stays >= target, by greedy coordinate
    descent from never stopping early: each move lowers the one threshold (to a value of its
    round's `grid`) that saves the most cost. `evaluate(thresholds) -> (quality, cost)`.
    Shared by the margin cascade and the confidence stop rule (fit_stop_thresholds)."""
    tau = [math.inf] * len(grid)
    _, best_cost = evaluate(tau)
    while True:
        move = None
        for k, values in enumerate(grid):
            for c in values:
                if c >= tau[k]:
                    continue
                quality, cost = evaluate(tau[:k] + [c] + tau[k + 1:])
                if quality >= target - 1e-12 and cost < best_cost - 1e-9:
                    best_cost, move = cost, (k, c)
        if move is None:
            return tuple(tau)
        tau[move[0]] = move[1]


def fit_thresholds(trace: MarginTrace, target: float = DEFAULT_TARGET) -> tuple[float, ...]:
    """The cheapest thresholds whose final answer agrees with the all-kept vote on >= target
    of the fit questions (greedy over the observed statistics)."""
    n, r = trace.stats.shape
    if n == 0 or r < 2:
        return tuple([math.inf] * (r - 1))
    grid = [sorted({float(x) for x in trace.stats[:, k] if math.isfinite(x)} | {UNANIMOUS_ONLY})
            for k in range(r - 1)]
    return greedy_thresholds(grid, lambda tau: evaluate_rule(trace, tau)[:2], target)


def same_answer(a: str | None, b: str | None) -> bool:
    """Two votes agree when their normalised answers do (no answer agrees with no answer)."""
    return normalize_answer(a or "") == normalize_answer(b or "")


def build_trace(voter: Any, sim: np.ndarray, mask: np.ndarray, pool: Sequence[str],
                grid: Sequence[Sequence[str | None]], rounds: Sequence[Sequence[str]],
                cum_tokens: np.ndarray) -> MarginTrace:
    """Vote over the answers of rounds 1..k for every k (the voter's `decision_scores` on the
    mask restricted to those retrievers) and compare with the last round's vote.

    `cum_tokens` [N, R]: reader tokens of rounds 1..k per question (shared documents once)."""
    n, r = len(grid), len(rounds)
    stats = np.full((n, r), -math.inf)
    answers: list[list[str]] = [[""] * r for _ in range(n)]
    index = {spec: m for m, spec in enumerate(pool)}
    cols = np.zeros(len(pool), dtype=bool)
    for k, members in enumerate(rounds):
        cols[[index[x] for x in members]] = True
        scores = voter.decision_scores((sim, mask & cols[None, :]))
        for i, w in enumerate(choose(scores)):
            answers[i][k] = (grid[i][w] or "") if w >= 0 else ""
            stats[i, k] = settle_stat(scores[i], grid[i])
    same = np.array([[same_answer(a, row[-1]) for a in row] for row in answers], dtype=bool).reshape(n, r)
    return MarginTrace(stats, same, np.asarray(cum_tokens, dtype=np.float64).reshape(n, r), answers)
