"""The seeded fit/eval split of a question file: one home for the server's offline tools
(`serve.offline.dataset`: `eor fit`, `eor eval`, `eor run`) and the robustness bench (a gRPC
client with its own environment, which imports none of the server's packages), so both draw
the same questions for "fit" and "eval". Standard library only.

The split is decided over every qid of the file, before any dataset filter: a seeded shuffle
of the sorted qids, whose first round(fit_fraction * n) are "fit" and the rest "eval".

Grouped by gold passage (`passage_groups`, the default of `eor fit`/`eor eval` since 2026-11-29):
questions that share a gold passage, directly or through another question (an XQuAD paragraph, a
HotpotQA pair), form one group, and the shuffle moves whole groups, so no passage is read on both
sides. A question without gold passages is a group of its own, keyed by its qid: on such a file
the grouped split equals the split by question.
"""
from __future__ import annotations

import random
from typing import Iterable, Mapping, Sequence

SPLITS = ("fit", "eval", "all")
GROUPINGS = ("passage", "question")  # what one side may not share with the other
DEFAULT_SPLIT_SEED = 0
DEFAULT_FIT_FRACTION = 0.6


def passage_groups(gold_pids: Mapping[str, Sequence[str]]) -> dict[str, str]:
    """qid -> its group's key (the group's smallest qid): questions joined by a shared gold passage,
    directly or through others (union-find), are one group."""
    parent = {q: q for q in gold_pids}

    def root(q: str) -> str:
        while parent[q] != q:
            parent[q] = parent[parent[q]]
            q = parent[q]
        return q
    first: dict[str, str] = {}  # passage -> a question that reads it
    for q in sorted(gold_pids):
        for pid in gold_pids[q]:
            other = first.setdefault(pid, q)
            a, b = root(q), root(other)
            if a != b:
                parent[max(a, b)] = min(a, b)
    return {q: root(q) for q in gold_pids}


def shuffled_qids(qids: Iterable[str], seed: int = DEFAULT_SPLIT_SEED,
                  groups: Mapping[str, str] | None = None) -> list[str]:
    """The seeded shuffle behind the split (independent of the file's line order); with `groups`
    (qid -> group key) the group keys are shuffled and each group's qids follow in sorted order."""
    if groups is None:
        order = sorted(qids)
        random.Random(seed).shuffle(order)
        return order
    members: dict[str, list[str]] = {}
    for q in sorted(qids):
        members.setdefault(groups.get(q, q), []).append(q)
    keys = sorted(members)
    random.Random(seed).shuffle(keys)
    return [q for k in keys for q in members[k]]


def split_assignment(qids: Iterable[str], seed: int = DEFAULT_SPLIT_SEED,
                     fit_fraction: float = DEFAULT_FIT_FRACTION,
                     groups: Mapping[str, str] | None = None) -> dict[str, str]:
    """qid -> "fit" | "eval": the first round(fit_fraction * n) shuffled qids are "fit"; with
    `groups`, whole groups in shuffled order until that many (a group is never cut)."""
    order = shuffled_qids(qids, seed, groups)
    n_fit = round(fit_fraction * len(order))
    if groups is None:
        return {q: ("fit" if i < n_fit else "eval") for i, q in enumerate(order)}
    out, taken, side = {}, 0, "fit"
    for i, q in enumerate(order):
        key = groups.get(q, q)
        if side == "fit" and taken >= n_fit and (i == 0 or groups.get(order[i - 1], order[i - 1]) != key):
            side = "eval"  # only at a group's first question
        out[q] = side
        taken += 1
    return out
