"""Which round layouts to compare, and which to ship: the candidates (cheap members first, a
stronger reader's escalations, a quick first answer), the ones within the fit's noise of the
all-kept vote, and the one of least expected latency among them, under a stream's first-reply bound.
"""
from __future__ import annotations

import math
from typing import Sequence

from fitting.layout_fit import LayoutFit
from retrievers.spec import DEFAULT_READER_NAME, by_reader, parse_spec, split_reader
from voter.adaptive_model import Layout
from voter.cascade import early_view


# the one-retriever service (through the default reader) whose whole answer a stream's first reply
# must not trail (issue 33: bench.load_test compare's --single)
SERVICE_BASELINE = "Wiki@10"
LATENCY_CAP = 3.0  # the cascade's expected latency over that service's at most (issue 33), for a quick first reply


def _splits(members: Sequence[str], firsts: Sequence[int], seconds: Sequence[int]) -> list[tuple[list, list]]:
    """(first round, middle round) over members sorted by value: the best f first, the next m."""
    return [(list(members[:f]), list(members[f:f + m])) for f in firsts for m in seconds]


def candidate_layouts(pool: Sequence[str], accuracy: dict[str, float], cost: dict[str, float],
                      firsts: Sequence[int] = (1, 2, 3), seconds: Sequence[int] = (0, 1, 2, 3, 5)) -> list[Layout]:
    """Round layouts to compare: the first round is the best members by accuracy per token
    cost (so it can answer alone), an optional middle round the next best, the last the rest;
    and the one-round layout (the whole pool, no stop). In a pool of several readers, also each
    reader's members alone (the same layouts over them, and their own one-round vote: a strong
    reader's vote is not the whole pool's, where the small reader's many answers outvote it) and
    the escalations: the best default-reader members first, then the stronger readers reading
    those same retrievers' passages, then the rest, or the stronger readers' rest alone
    (FrugalGPT's cascade, over retrievers too); and the stronger readers' layouts with the default
    reader's best member as a round of its own before them, or beside their round 1 (its early
    answer, voter/cascade.py: early_members): a stream's first reply as soon as the one-retriever
    service's (choose_layout's bound). A layout need not ask every member: each
    (first, middle) split is also a layout of its own, without the rest (never one round alone:
    a subset's one-round vote would move the all-kept anchor choose_layout measures from)."""
    value = _by_value(pool, accuracy, cost)
    groups = by_reader(value)
    out: list[Layout] = [(tuple(pool),)]

    def add(*rounds: Sequence[str]) -> None:
        layout = tuple(tuple(s for s in pool if s in x) for x in rounds if x)  # pool order within a round
        if len(layout) == 1 and len(layout[0]) < 2:  # one retriever alone is no vote (nor an anchor)
            return
        if layout and layout not in out:
            out.append(layout)

    for first, mid in _splits(value, firsts, seconds):
        add(first, mid, [s for s in value if s not in first and s not in mid])
        if mid:  # stop there: the rest may cost more than it adds (a long decode, a slow reader)
            add(first, mid)
    if len(groups) > 1:
        for members in groups.values():
            add(members)  # this reader's own vote, in one round
            for first, mid in _splits(members, firsts, seconds):
                add(first, mid, [s for s in members if s not in first and s not in mid])
                if mid:
                    add(first, mid)
        plain = groups.get("", [])
        strong = [s for s in value if parse_spec(s).reader]
        quick = [s for s in [quick_member(pool, accuracy, cost)] if s]
        if quick and strong:  # a quick first answer, alone or beside a strong layout's round 1
            for first, mid in _splits(strong, firsts, seconds):
                rest = [s for s in strong if s not in first and s not in mid]
                for lead in ([quick, first], [quick + first]):
                    if len(lead) + bool(mid) + bool(rest) > 1:  # never a one-round subset (no anchor)
                        add(*lead, mid, rest)
                    if mid:
                        add(*lead, mid)
        for f in firsts:
            first = plain[:f]
            up = [s for s in strong if split_reader(s)[0] in first]
            if first and up:
                add(first, up, [s for s in value if s not in first and s not in up])
                add(first, up, [s for s in strong if s not in up])
            if first and strong:
                add(first, strong)
    return out


def _by_value(pool: Sequence[str], accuracy: dict[str, float], cost: dict[str, float]) -> list[str]:
    """The members by accuracy per square-rooted token cost, best first."""
    return sorted(pool, key=lambda s: (-accuracy[s] / max(cost[s], 1.0) ** 0.5, s))


def quick_member(pool: Sequence[str], accuracy: dict[str, float], cost: dict[str, float]) -> str | None:
    """The default reader's best one-step member by value: a quick first answer (None: none)."""
    return next((s for s in _by_value(pool, accuracy, cost)
                 if parse_spec(s).reader == DEFAULT_READER_NAME and parse_spec(s).reader_steps == 1), None)


def acceptable(fits: Sequence[LayoutFit], tolerance: float = 0.005) -> list[LayoutFit]:
    """The layouts whose CV accuracy is within `tolerance` of the all-kept vote's (choose_layout's
    anchor: a one-round layout, every retriever, no stop; with several readers, the best of the
    whole pool's and each reader's own)."""
    whole = [f for f in fits if len(f.layout) == 1]
    anchor = max(f.cv_accuracy for f in (whole or fits))
    return [f for f in fits if f.cv_accuracy >= anchor - tolerance]


def preview_candidates(fits: Sequence[LayoutFit], quick: str, tolerance: float, first_reply_s: float) -> list[Layout]:
    """The layouts to fit again with `quick` as their preview (fit_layout): those choose_layout may
    pick (`acceptable`) whose first reply misses `first_reply_s` and which have no first reply of
    their own and do not ask `quick`. A preview keeps a layout's answers and CV figures and adds its
    work, so on a layout that meets the bound already it only costs time."""
    return [f.layout for f in acceptable(fits, tolerance)
            if not f.preview and f.first_reply_s > first_reply_s and early_view(f.layout) is None
            and quick not in {s for r in f.layout for s in r}]


def anchor_se(fits: Sequence[LayoutFit], n: int) -> float:
    """One standard error of the anchor's CV accuracy over `n` fit questions (acceptable's anchor):
    how far a layout may fall below it and still be the same within the fit's own noise."""
    whole = [f for f in fits if len(f.layout) == 1]
    p = max(f.cv_accuracy for f in (whole or fits))
    return math.sqrt(p * (1.0 - p) / max(n, 1))


def choose_layout(fits: Sequence[LayoutFit], tolerance: float = 0.005,
                  first_reply_s: float | None = None, latency_cap_s: float | None = None,
                  widen_to: float | None = None) -> LayoutFit:
    """The lowest expected latency among layouts whose CV accuracy is within `tolerance` of the
    all-kept vote's (a one-round layout: every retriever, no stop; with several readers, the best
    of the whole pool's and each reader's own). Anchored there, not on the best layout's: on a fit
    split of ~100 questions the best of a dozen layouts leads by a question or two of noise, and
    chasing it picked a layout 3x as slow for 1 question in 140. `first_reply_s` (None: no bound):
    among those, only layouts whose early answer comes within it (a stream's first reply no later
    than the one-retriever service's whole answer) and whose expected latency is within
    `latency_cap_s` (None: any), where any is. Where none is, the layout that misses its bounds
    least, relatively (the larger of first reply / bound and latency / cap): both are the issue's
    goals, and on 240 fit questions the only quick-first-reply layout was 2% over the cap while
    the rest missed the first reply by 38% (2026-11-27; in the service the former measured 2.72x).
    Without a cap, the bound is given up (the mean latency is kept). The cap applies only with a
    first-reply bound. `widen_to` (anchor_se: one standard error of the anchor; None: never), where
    no layout within `tolerance` meets both bounds: the most accurate layout within `widen_to` of
    the anchor that meets both, else the least relative excess among those within it. At 280 fit
    questions the anchor rose and a 0.5-pt tolerance (one question is 0.36 pt) left out every layout
    under the cap: the choice then ran 46% over it for 1.1 pt of CV Match, inside a 2.8-pt error."""
    ok = acceptable(fits, tolerance)
    if first_reply_s is not None:
        cap = math.inf if latency_cap_s is None else latency_cap_s

        def meets(f: LayoutFit) -> bool:
            return f.first_reply_s <= first_reply_s and f.latency_s <= cap

        met = [f for f in ok if meets(f)]
        if not met and widen_to is not None and widen_to > tolerance and math.isfinite(cap):
            ok = acceptable(fits, widen_to)
            wide = [f for f in ok if meets(f)]
            if wide:  # the bounds met at the least loss of accuracy
                return max(wide, key=lambda f: (f.cv_accuracy, -f.latency_s))
        if met:
            ok = met
        elif math.isfinite(cap):
            return min(ok, key=lambda f: (max(f.first_reply_s / first_reply_s, f.latency_s / cap), f.latency_s,
                                          -f.cv_accuracy))
    return min(ok, key=lambda f: (f.latency_s, -f.cv_accuracy))
