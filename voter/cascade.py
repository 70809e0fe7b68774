"""Adaptive EoR: the kept retrievers in rounds, cheapest first, and a stop rule fitted on data.

After each round the voter votes over every answer so far. The vote is *settled* after round k
(0-based, as every round index in the code; a count of rounds run is 1-based) when its settle
statistic reaches the round's threshold tau_k; the last round always ends the question. The statistic is the answer margin of the weighted vote (the winner's score
minus the best score of a different normalised answer): +inf when at least two retrievers
answered and all agree, -inf when fewer than two answered (one answer is no vote). The
confidence-aware rounds (voter/adaptive_model.py) use the same rule, `settled`, on P(right);
voter/decision.py is where a voter's thresholds meet its statistic.

Why fitted thresholds rather than a prior alone (Adaptive-Consistency's Beta posterior,
ESC's window): our retrievers are correlated and unequal in cost, so, as FrugalGPT does, the
thresholds are learned on the fit split (fitting/thresholds.py: the cheapest per-round thresholds
whose final answer equals the all-kept-retrievers vote on >= `target` of the fit questions).
This module is what the service runs with them: the cascade as a value, the rule, the early answer.

Pure numpy.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Sequence

import numpy as np

from voter.voting import answer_margin, choose

DEFAULT_TARGET = 0.98
UNANIMOUS_ONLY = 1e9  # a threshold no margin reaches: the round stops only unanimous votes (statistic +inf)


@dataclass(frozen=True)
class Cascade:
    """Rounds of retriever specs and the stop threshold after each round but the last. A voter file
    keeps the rounds under "stages" (and `round_tokens` under "stage_tokens"), as it always has."""

    rounds: tuple[tuple[str, ...], ...]
    thresholds: tuple[float, ...] = ()  # len(rounds) - 1; +inf: never stop after that round
    target: float = DEFAULT_TARGET
    fit_agreement: float | None = None  # share of fit questions answered as the all-kept vote
    fit_stop_rate: tuple[float, ...] = ()  # share of fit questions that stopped after each round
    round_tokens: tuple[float, ...] = ()  # mean reader tokens per question each round adds (fit)
    # read beside round 1 for a stream's first reply only, voted on its own, never in a round's vote
    # (early_cascade); a unary Ask never reads it
    preview: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.rounds or any(not s for s in self.rounds):
            raise ValueError("a cascade needs at least one stage and no empty stage")
        flat = [s for st in self.rounds for s in st]
        if len(set(flat)) != len(flat):
            raise ValueError(f"a retriever appears in two stages: {flat}")
        if len(set(self.preview)) != len(self.preview) or set(self.preview) & set(flat):
            raise ValueError(f"the preview {list(self.preview)} repeats a retriever or one a stage asks")
        if len(self.thresholds) != len(self.rounds) - 1:
            raise ValueError(f"{len(self.thresholds)} thresholds for {len(self.rounds)} stages "
                             f"(one per stage but the last)")
        if any(math.isnan(t) or t == -math.inf for t in self.thresholds):
            raise ValueError("a stop threshold is NaN or -inf")
        if not 0.0 < self.target <= 1.0:
            raise ValueError(f"target agreement must lie in (0, 1], got {self.target}")

    @classmethod
    def single_round(cls, specs: Sequence[str]) -> "Cascade":
        """Every retriever at once, no early stop (the pruned ensemble)."""
        return cls((tuple(specs),))

    @property
    def specs(self) -> list[str]:
        return [s for st in self.rounds for s in st]

    @property
    def asked(self) -> list[str]:
        """Every retriever a stream may ask: the rounds' and the preview's."""
        return self.specs + list(self.preview)

    def settled(self, k: int, stat: float) -> bool:
        """Stop after round `k` (0-based)? The one rule, `settled`, with this cascade's thresholds."""
        return bool(settled(k, stat, self.thresholds))

    def to_dict(self) -> dict[str, Any]:
        return {"stages": [list(s) for s in self.rounds],
                "thresholds": [None if t == math.inf else t for t in self.thresholds],  # None: never stop there
                "target": self.target, "fit_agreement": self.fit_agreement,
                "fit_stop_rate": list(self.fit_stop_rate), "stage_tokens": list(self.round_tokens),
                **({"preview": list(self.preview)} if self.preview else {})}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Cascade":
        if not isinstance(d, dict) or not isinstance(d.get("stages"), list):
            raise ValueError("cascade: expected an object with a 'stages' list")
        try:
            return cls(rounds=tuple(tuple(str(s) for s in st) for st in d["stages"]),
                       thresholds=tuple(math.inf if t is None else float(t) for t in d.get("thresholds", ())),
                       target=float(d.get("target", DEFAULT_TARGET)),
                       fit_agreement=None if d.get("fit_agreement") is None else float(d["fit_agreement"]),
                       fit_stop_rate=tuple(float(x) for x in d.get("fit_stop_rate", ())),
                       round_tokens=tuple(float(x) for x in d.get("stage_tokens", ())),
                       preview=tuple(str(s) for s in d.get("preview") or ()))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"cascade: {exc}") from None


def settled(k: int, stat: float | np.ndarray, thresholds: Sequence[float]) -> bool | np.ndarray:
    """THE stop rule, for the margin cascade and the confidence-aware rounds alike (live, in
    replays and in the threshold fits): after 0-based round `k`, a question is settled when that
    is the last round (one threshold per round but the last), or when its statistic reaches the
    round's threshold; +inf never stops there. `stat` may be one number or an array of them."""
    if k >= len(thresholds):
        return np.ones(np.shape(stat), dtype=bool) if isinstance(stat, np.ndarray) else True
    t = thresholds[k]
    return np.isfinite(t) & (stat >= t) if isinstance(stat, np.ndarray) else (math.isfinite(t) and stat >= t)


@dataclass(frozen=True)
class ServiceLoad:
    """What the service reads of its own load once a round: the busiest asked reader's requests
    (running + waiting in its engine), and whether Asks overflow the ingress's running slots (one
    waits now, or one was refused or had to wait within the last mean service time)."""

    in_flight: float = 0.0
    overflow: bool = False


@dataclass(frozen=True)
class LoadRule:
    """Depth that follows the load (issue 57; Cocktail, NSDI'22: the ensemble's size follows the
    load). While the service is loaded (`loaded`), a question stops after any round whose P(right)
    clears `bar`, a bar below the round's own threshold: the same rule, `settled`, over `lowered`
    thresholds. The last round ends a question as always and a +inf threshold (never stop there)
    stays. Only a P(right) meets the bar (the caller passes confidence-aware decisions alone): a
    margin is no probability. Under load a question spends fewer rounds at a small cost in Match
    (the bar is fitted for that: fitting/load_bar.py).

    Two signals, either enough: `on_overflow`, Asks overflowing the ingress's running slots (demand
    past capacity: a slot freed sooner serves the next; the queue alone is no signal, since a
    bounded wait keeps it empty, nor are the slots all taken, which one Ask does with one slot), and
    `in_flight` (0: off), the readers' requests (where the ingress does not bound the Asks, the
    queue forms in the engines instead)."""

    bar: float
    in_flight: int = 0
    on_overflow: bool = False

    def __post_init__(self) -> None:
        if not 0.0 <= self.bar <= 1.0 or self.in_flight < 0:
            raise ValueError(f"the under-load bar must lie in [0, 1] and the in-flight threshold be >= 0, got "
                             f"{self.bar:g} and {self.in_flight}")

    @property
    def on(self) -> bool:
        return self.in_flight > 0 or self.on_overflow

    def loaded(self, load: ServiceLoad) -> bool:
        """Whether the service is under load (no signal on: never)."""
        return (self.in_flight > 0 and load.in_flight >= self.in_flight) or (self.on_overflow and load.overflow)

    def settled(self, k: int, p: float, thresholds: Sequence[float]) -> bool:
        """Would P(right) `p` stop the question after 0-based round `k` under load?"""
        return bool(settled(k, p, lowered(thresholds, self.bar)))


def lowered(thresholds: Sequence[float], bar: float) -> tuple[float, ...]:
    """The stop thresholds under load: each at most `bar`; +inf (never stop there) stays."""
    return tuple(t if math.isinf(t) else min(t, bar) for t in thresholds)


def early_members(first_round: Sequence[str]) -> tuple[str, ...]:
    """What a stream answers first, voted on its own while the rest of round 1 reads beside it:
    round 1's one-step members on the default reader (the smallest, fastest) when the round also
    asks another reader; else its one-step members when some take two steps (a document written
    first); else the whole round (no early answer). The one rule the service (serve/orchestrator.py) and the fit's
    first-reply price (fitting/layout_fit.py) share."""
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


def early_view(layout: Sequence[Sequence[str]], preview: Sequence[str] = ()) -> tuple[str, ...] | None:
    """The members of a stream's first reply: the preview (read beside round 1, never voted after),
    else round 1's early answer's (early_answer), read before the rest; None
    where there is none."""
    if preview:
        return tuple(preview)
    return early_answer(layout[0]) if layout else None


def early_cascade(cascade: Cascade) -> Cascade:
    """The cascade a stream's early answer is voted under: its preview, else round 1's early members
    (early_answer), as a round of their own that never settles, then the rest of round 1 and the
    later rounds; so the vote after it names just the members asked (voter/adaptive_model.py:
    AdaptiveModel.round_of, the early line). Itself where there is no early answer."""
    if cascade.preview:
        return replace(cascade, rounds=(cascade.preview, *cascade.rounds), thresholds=(math.inf, *cascade.thresholds),
                       preview=())
    first = tuple(cascade.rounds[0])
    quick = early_answer(first)
    if quick is None:
        return cascade
    rest = tuple(s for s in first if s not in quick)
    return replace(cascade, rounds=(tuple(quick), rest, *cascade.rounds[1:]),
                   thresholds=(math.inf, *cascade.thresholds))


def settle_stat(scores: np.ndarray, answers: Sequence[str | None]) -> float:
    """The settle statistic of one question's vote (scores [M], -inf where it cannot win)."""
    finite = np.isfinite(scores)
    if finite.sum() < 2:
        return -math.inf
    winner = int(choose(scores[None, :])[0])
    margin = answer_margin(scores, answers, winner)
    return math.inf if margin is None else float(margin)


def stop_rounds(stats: np.ndarray, thresholds: Sequence[float]) -> np.ndarray:
    """[N] 0-based round after which each question stops: `settled` over each question's
    statistics [N, R] (the earliest settled round wins)."""
    n, r = stats.shape
    stop = np.full(n, r - 1)
    for k in range(r - 2, -1, -1):  # earliest round wins: fill from the back
        stop = np.where(settled(k, stats[:, k], thresholds), k, stop)
    return stop
