"""A seeded pool run whose right answers are known, for the fitting tests (and the scorer's)."""
from __future__ import annotations

import numpy as np

from fitting.pool_run import PoolRun

POOL = ("A", "B", "C", "D")


def synthetic_run(n: int, seed: int = 0) -> PoolRun:
    """A is right 70% of the time and sure (log-prob ~ -0.05) exactly when right; B, C, D are
    right 40% each, with uninformative confidence; wrong answers differ from each other."""
    rng = np.random.default_rng(seed)
    right = np.zeros((n, 4), dtype=bool)
    right[:, 0] = rng.random(n) < 0.7
    right[:, 1:] = rng.random((n, 3)) < 0.4
    answers, logprobs = [], []
    for i in range(n):
        answers.append(["gold" if right[i, m] else f"wrong{m}-{i}" for m in range(4)])
        lp = [(-0.05,) if right[i, 0] else (-2.5,)] + [(float(-rng.uniform(0.1, 2.0)),) for _ in range(3)]
        logprobs.append(lp)
    same = np.array([[[a == b for b in row] for a in row] for row in answers], dtype=np.float64)
    sim = same[..., None]
    mask = np.ones((n, 4), dtype=bool)

    def vote(s, m):  # mean similarity to the other voters, -inf where it cannot win
        tot = (s[..., 0] * m[:, None, :]).sum(axis=2) - 1.0
        return np.where(m, tot / np.maximum(m.sum(axis=1, keepdims=True) - 1, 1), -np.inf)

    cost = {"A": 100.0, "B": 300.0, "C": 300.0, "D": 300.0}
    return PoolRun(POOL, answers, right.astype(float), logprobs, sim, mask, vote,
                   lambda i, rounds: sum(cost[s] for s in frozenset().union(*rounds)), ["d"] * n)
