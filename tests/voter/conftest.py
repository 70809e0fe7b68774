"""Voter test helpers (offline settings and the shared fixtures are in tests/conftest.py)."""
from __future__ import annotations

import numpy as np


def tensor_from_clusters(clusters: np.ndarray, mask: np.ndarray | None = None, k: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """sim[i, m, n, :] = 1 if answers m and n are in the same cluster, else 0."""
    clusters = np.asarray(clusters)
    same = (clusters[:, :, None] == clusters[:, None, :]).astype(np.float64)
    sim = np.repeat(same[..., None], k, axis=-1)
    if mask is None:
        mask = np.ones(clusters.shape, dtype=bool)
    return sim, np.asarray(mask, dtype=bool)
