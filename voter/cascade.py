"""Adaptive EoR: the kept retrievers in stages, cheapest first, and a stop rule fitted on data.

After each stage the voter votes over every answer so far. The vote is *settled* at stage k
when its settle statistic reaches the stage's threshold tau_k; the last stage always ends
the question. The statistic is the answer margin of the weighted vote (the winner's score
minus the best score of a different normalised answer): +inf when at least two retrievers
answered and all agree, -inf when fewer than two answered (one answer is no vote). The
confidence-aware rounds (voter/adaptive.py) use the same rule, `settled`, on P(right);
voter/decision.py is where a voter's thresholds meet its statistic.

Why calibrated thresholds rather than a prior alone (Adaptive-Consistency's Beta posterior,
ESC's window): our retrievers are correlated and unequal in cost, so, as FrugalGPT does, the
thresholds are learned on the fit split: the cheapest per-stage thresholds (mean reader tokens
per question) whose final answer equals the all-kept-retrievers vote on >= `target` of the
fit questions. The search is greedy coordinate descent over the observed statistics (each
move lowers one tau_k to the value that saves the most tokens while agreement holds).

Pure numpy; the similarity tensor and per-retriever token counts come from the fit run.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Sequence

import numpy as np

from voter.normalize import normalize_answer
from voter.voting import answer_margin, choose

DEFAULT_TARGET = 0.98
UNANIMOUS_ONLY = 1e9  # a threshold no margin reaches: the stage stops only unanimous votes (statistic +inf)


@dataclass(frozen=True)
class Cascade:
    """Stages of retriever specs and the stop threshold after each stage but the last."""

    stages: tuple[tuple[str, ...], ...]
    thresholds: tuple[float, ...] = ()  # len(stages) - 1; +inf: never stop after that stage
    target: float = DEFAULT_TARGET
    fit_agreement: float | None = None  # share of fit questions answered as the all-kept vote
    fit_stop_rate: tuple[float, ...] = ()  # share of fit questions that stopped at each stage
    stage_tokens: tuple[float, ...] = ()  # mean reader tokens per question each stage adds (fit)
    # read beside stage 1 for a stream's first reply only, voted on its own, never in a stage's vote
    # (early_cascade); a unary Ask never reads it
    preview: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.stages or any(not s for s in self.stages):
            raise ValueError("a cascade needs at least one stage and no empty stage")
        flat = [s for st in self.stages for s in st]
        if len(set(flat)) != len(flat):
            raise ValueError(f"a retriever appears in two stages: {flat}")
        if len(set(self.preview)) != len(self.preview) or set(self.preview) & set(flat):
            raise ValueError(f"the preview {list(self.preview)} repeats a retriever or one a stage asks")
        if len(self.thresholds) != len(self.stages) - 1:
            raise ValueError(f"{len(self.thresholds)} thresholds for {len(self.stages)} stages "
                             f"(one per stage but the last)")
        if any(math.isnan(t) or t == -math.inf for t in self.thresholds):
            raise ValueError("a stop threshold is NaN or -inf")
        if not 0.0 < self.target <= 1.0:
            raise ValueError(f"target agreement must lie in (0, 1], got {self.target}")

    @classmethod
    def single_stage(cls, specs: Sequence[str]) -> "Cascade":
        """Every retriever at once, no early stop (the pruned ensemble)."""
        return cls((tuple(specs),))

    @property
    def specs(self) -> list[str]:
        return [s for st in self.stages for s in st]

    @property
    def asked(self) -> list[str]:
        """Every retriever a stream may ask: the stages' and the preview's."""
        return self.specs + list(self.preview)

    def settled(self, stage: int, stat: float) -> bool:
        """Stop after `stage` (0-based)? The one rule, `settled`, with this cascade's thresholds."""
        return bool(settled(stage, stat, self.thresholds))

    def to_dict(self) -> dict[str, Any]:
        return {"stages": [list(s) for s in self.stages],
                "thresholds": [None if t == math.inf else t for t in self.thresholds],  # None: never stop there
                "target": self.target, "fit_agreement": self.fit_agreement,
                "fit_stop_rate": list(self.fit_stop_rate), "stage_tokens": list(self.stage_tokens),
                **({"preview": list(self.preview)} if self.preview else {})}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Cascade":
        if not isinstance(d, dict) or not isinstance(d.get("stages"), list):
            raise ValueError("cascade: expected an object with a 'stages' list")
        try:
            return cls(stages=tuple(tuple(str(s) for s in st) for st in d["stages"]),
                       thresholds=tuple(math.inf if t is None else float(t) for t in d.get("thresholds", ())),
                       target=float(d.get("target", DEFAULT_TARGET)),
                       fit_agreement=None if d.get("fit_agreement") is None else float(d["fit_agreement"]),
                       fit_stop_rate=tuple(float(x) for x in d.get("fit_stop_rate", ())),
                       stage_tokens=tuple(float(x) for x in d.get("stage_tokens", ())),
                       preview=tuple(str(s) for s in d.get("preview") or ()))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"cascade: {exc}") from None


def settled(stage: int, stat: float | np.ndarray, thresholds: Sequence[float]) -> bool | np.ndarray:
    """THE stop rule, for the margin cascade and the confidence-aware rounds alike (live, in
    replays and in the threshold fits): after 0-based `stage`, a question is settled when that
    is the last stage (one threshold per stage but the last), or when its statistic reaches the
    stage's threshold; +inf never stops there. `stat` may be one number or an array of them."""
    if stage >= len(thresholds):
        return np.ones(np.shape(stat), dtype=bool) if isinstance(stat, np.ndarray) else True
    t = thresholds[stage]
    return np.isfinite(t) & (stat >= t) if isinstance(stat, np.ndarray) else (math.isfinite(t) and stat >= t)


def early_members(first_round: Sequence[str]) -> tuple[str, ...]:
    """What a stream answers first, voted on its own while the rest of round 1 reads beside it:
    round 1's one-step members on the default reader (the smallest, fastest) when the round also
    asks another reader; else its one-step members when some take two steps (a document written
    first); else the whole round (no early answer). The one rule the service (serve/orchestrator.py) and the fit's
    first-reply price (voter/adaptive.py) share."""
    from retrievers.spec import DEFAULT_READER_NAME, parse_spec

    specs = [(s, parse_spec(s)) for s in first_round]
    quick = [(s, p) for s, p in specs if p.reader_steps == 1]
    default = [s for s, p in quick if p.reader == DEFAULT_READER_NAME]
    if default and len({p.reader for _, p in specs}) > 1:
        return tuple(default)
    if quick and len(quick) < len(specs):
        return tuple(s for s, _ in quick)
    return tuple(first_round)


def early_answer(first_round: Sequence[str]) -> tuple[str, ...] | None:
    """The members a stream's early answer is voted on: early_members where they are not the whole
    round; None where round 1 has no early answer."""
    quick = early_members(first_round)
    return quick if set(quick) < set(first_round) else None


def early_cascade(cascade: Cascade) -> Cascade:
    """The cascade a stream's early answer is voted under: its preview, else round 1's early members
    (early_answer), as a stage of their own that never settles, then the rest of round 1 and the
    later rounds; so the vote after it names just the members asked (voter/adaptive.py:
    AdaptiveModel.stage_of, the early line). Itself where there is no early answer."""
    if cascade.preview:
        return replace(cascade, stages=(cascade.preview, *cascade.stages), thresholds=(math.inf, *cascade.thresholds),
                       preview=())
    first = tuple(cascade.stages[0])
    quick = early_answer(first)
    if quick is None:
        return cascade
    rest = tuple(s for s in first if s not in quick)
    return replace(cascade, stages=(tuple(quick), rest, *cascade.stages[1:]),
                   thresholds=(math.inf, *cascade.thresholds))


def settle_stat(scores: np.ndarray, answers: Sequence[str | None]) -> float:
    """The settle statistic of one question's vote (scores [M], -inf where it cannot win)."""
    finite = np.isfinite(scores)
    if finite.sum() < 2:
        return -math.inf
    winner = int(choose(scores[None, :])[0])
    margin = answer_margin(scores, answers, winner)
    return math.inf if margin is None else float(margin)


def order_stages(specs: Sequence[str], cost: dict[str, float], first: int = 2) -> tuple[tuple[str, ...], ...]:
    """Cheapest first: the `first` cheapest retrievers make stage 1 (a vote needs two answers),
    then one retriever per stage, so the rule can stop as soon as the vote settles."""
    ranked = sorted(specs, key=lambda s: (cost.get(s, math.inf), list(specs).index(s)))
    if len(ranked) <= first:
        return (tuple(ranked),)
    return (tuple(ranked[:first]), *((s,) for s in ranked[first:]))


@dataclass
class StageTrace:
    """What each fit question looks like after each stage: [N, S] arrays."""

    stats: np.ndarray  # settle statistic of the vote so far
    same: np.ndarray  # bool: the vote so far picks the all-kept answer (normalised)
    cum_tokens: np.ndarray  # reader tokens spent up to and including the stage
    answers: list[list[str]] = field(default_factory=list)  # [N][S] voted answer after each stage


def stop_stages(stats: np.ndarray, thresholds: Sequence[float]) -> np.ndarray:
    """[N] 0-based stage after which each question stops: `settled` over each question's
    statistics [N, S] (the earliest settled stage wins)."""
    n, s = stats.shape
    stop = np.full(n, s - 1)
    for k in range(s - 2, -1, -1):  # earliest stage wins: fill from the back
        stop = np.where(settled(k, stats[:, k], thresholds), k, stop)
    return stop


def evaluate_rule(trace: StageTrace, thresholds: Sequence[float]) -> tuple[float, float, np.ndarray]:
    """(agreement with the all-kept vote, mean tokens per question, stop stage per question)."""
    stop = stop_stages(trace.stats, thresholds)
    rows = np.arange(len(stop))
    return float(trace.same[rows, stop].mean()), float(trace.cum_tokens[rows, stop].mean()), stop


def greedy_thresholds(grid: Sequence[Sequence[float]], evaluate: Any, target: float) -> tuple[float, ...]:
    """The cheapest per-stage thresholds whose quality stays >= target, by greedy coordinate
    descent from never stopping early: each move lowers the one threshold (to a value of its
    stage's `grid`) that saves the most cost. `evaluate(thresholds) -> (quality, cost)`.
    Shared by the margin cascade and the confidence stop rule (voter/selector.py)."""
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


def fit_thresholds(trace: StageTrace, target: float = DEFAULT_TARGET) -> tuple[float, ...]:
    """The cheapest thresholds whose final answer agrees with the all-kept vote on >= target
    of the fit questions (greedy over the observed statistics)."""
    n, s = trace.stats.shape
    if n == 0 or s < 2:
        return tuple([math.inf] * (s - 1))
    grid = [sorted({float(x) for x in trace.stats[:, k] if math.isfinite(x)} | {UNANIMOUS_ONLY})
            for k in range(s - 1)]
    return greedy_thresholds(grid, lambda tau: evaluate_rule(trace, tau)[:2], target)


def same_answer(a: str | None, b: str | None) -> bool:
    """Two votes agree when their normalised answers do (no answer agrees with no answer)."""
    return normalize_answer(a or "") == normalize_answer(b or "")


def build_trace(voter: Any, sim: np.ndarray, mask: np.ndarray, pool: Sequence[str],
                grid: Sequence[Sequence[str | None]], stages: Sequence[Sequence[str]],
                cum_tokens: np.ndarray) -> StageTrace:
    """Vote over the answers of stages 1..k for every k (the voter's `decision_scores` on the
    mask restricted to those retrievers) and compare with the last stage's vote.

    `cum_tokens` [N, S]: reader tokens of stages 1..k per question (shared documents once)."""
    n, s = len(grid), len(stages)
    stats = np.full((n, s), -math.inf)
    answers: list[list[str]] = [[""] * s for _ in range(n)]
    index = {spec: m for m, spec in enumerate(pool)}
    cols = np.zeros(len(pool), dtype=bool)
    for k, stage in enumerate(stages):
        cols[[index[x] for x in stage]] = True
        scores = voter.decision_scores((sim, mask & cols[None, :]))
        for i, w in enumerate(choose(scores)):
            answers[i][k] = (grid[i][w] or "") if w >= 0 else ""
            stats[i, k] = settle_stat(scores[i], grid[i])
    same = np.array([[same_answer(a, row[-1]) for a in row] for row in answers], dtype=bool).reshape(n, s)
    return StageTrace(stats, same, np.asarray(cum_tokens, dtype=np.float64).reshape(n, s), answers)
