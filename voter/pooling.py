"""Pooling functions of EoR Appendix C.4, vectorised over a batch of questions.

A pooling turns the M-1 similarities of answer m to the other answers into one number.
Inputs: `sim` [N, M, M] (combined similarity, sim[i, m, n] = S_sim(y_m, y_n)) and `voters`
[N, M] bool (retrievers whose answer counts as a vote; a missing retriever does not vote).
The diagonal is never used. `candidates` (defaults to `voters`) are the answers that can
win; plurality voting compares counts among them. Output [N, M] float64; values for
non-candidates are meaningless (the estimator masks them).
"""
from __future__ import annotations

from typing import Callable, Protocol

import numpy as np

from retrievers.registry import Registry


class Pooling(Protocol):
    def __call__(
        self,
        sim: np.ndarray,
        voters: np.ndarray,
        *,
        candidates: np.ndarray | None = None,
        threshold: float = 0.5,
    ) -> np.ndarray: ...


POOLINGS = Registry("pooling")


def register_pooling(name: str) -> Callable[[Pooling], Pooling]:
    """Register a pooling under `name` (a new pooling is one function)."""
    return POOLINGS.entry(name)


def get_pooling(name: str) -> Pooling:
    """ValueError naming the known poolings for an unknown name."""
    return POOLINGS.get(name)


def available_poolings() -> list[str]:
    return POOLINGS.names()


def _others(voters: np.ndarray) -> np.ndarray:
    """[N, M, M] bool: n is a voter for m (n votes, n != m)."""
    m = voters.shape[1]
    return voters[:, None, :] & ~np.eye(m, dtype=bool)[None]


@register_pooling("mean")
def mean_pool(sim, voters, *, candidates=None, threshold=0.5):
    """Mean similarity to the other voters; 0 when there is no other voter."""
    vf = voters.astype(sim.dtype, copy=False)
    total = np.matmul(sim, vf[:, :, None])[:, :, 0]
    diag = np.diagonal(sim, axis1=1, axis2=2)
    total = total - diag * vf  # drop the self-similarity
    count = vf.sum(axis=1, keepdims=True) - vf
    out = np.zeros(total.shape, dtype=np.float64)
    np.divide(total, count, out=out, where=count > 0)
    return out


@register_pooling("max")
def max_pool(sim, voters, *, candidates=None, threshold=0.5):
    """Highest similarity to another voter; 0 when there is no other voter."""
    others = _others(voters)
    best = np.where(others, sim, -np.inf).max(axis=2)
    return np.where(np.isfinite(best), best, 0.0).astype(np.float64)


def _equivalent_counts(sim: np.ndarray, voters: np.ndarray, threshold: float):
    others = _others(voters)
    count = ((sim > threshold) & others).sum(axis=2)
    return count, others.sum(axis=2)


@register_pooling("majority")
def majority_pool(sim, voters, *, candidates=None, threshold=0.5):
    """1 if at least half of the other voters give an equivalent answer (sim > s), else 0."""
    count, n_others = _equivalent_counts(sim, voters, threshold)
    return (2 * count >= n_others).astype(np.float64)


@register_pooling("plurality")
def plurality_pool(sim, voters, *, candidates=None, threshold=0.5):
    """1 for the candidates with the most equivalent answers (sim > s) among the candidates."""
    cand = voters if candidates is None else candidates
    count, _ = _equivalent_counts(sim, voters, threshold)
    best = np.where(cand, count, -1).max(axis=1, keepdims=True)
    return ((count == best) & cand).astype(np.float64)
