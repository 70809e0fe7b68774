"""The seeded fit/eval split of a question file: one home for the server's offline tools
(`serve.offline.dataset`: `eor fit`, `eor eval`, `eor run`) and the robustness bench (a gRPC
client with its own environment, which imports none of the server's packages), so both draw
the same questions for "fit" and "eval". Standard library only.

The split is decided over every qid of the file, before any dataset filter: a seeded shuffle
of the sorted qids, whose first round(fit_fraction * n) are "fit" and the rest "eval".
"""
from __future__ import annotations

import random
from typing import Iterable

SPLITS = ("fit", "eval", "all")
DEFAULT_SPLIT_SEED = 0
DEFAULT_FIT_FRACTION = 0.6


def shuffled_qids(qids: Iterable[str], seed: int = DEFAULT_SPLIT_SEED) -> list[str]:
    """The seeded shuffle behind the split (independent of the file's line order)."""
    order = sorted(qids)
    random.Random(seed).shuffle(order)
    return order


def split_assignment(qids: Iterable[str], seed: int = DEFAULT_SPLIT_SEED,
                     fit_fraction: float = DEFAULT_FIT_FRACTION) -> dict[str, str]:
    """qid -> "fit" | "eval": the first round(fit_fraction * n) shuffled qids are "fit"."""
    order = shuffled_qids(qids, seed)
    n_fit = round(fit_fraction * len(order))
    return {q: ("fit" if i < n_fit else "eval") for i, q in enumerate(order)}
