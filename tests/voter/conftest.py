"""Voter test setup: offline Hugging Face, the `slow` marker, one torch thread, shared helpers."""
from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np
import pytest


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: loads a model (runs by default; deselect with -m 'not slow')")


@pytest.fixture(scope="session")
def one_torch_thread():
    """Model tests are tiny: keep one of the machine's two cores free."""
    try:
        import torch
    except ImportError:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def tensor_from_clusters(clusters: np.ndarray, mask: np.ndarray | None = None, k: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """sim[i, m, n, :] = 1 if answers m and n are in the same cluster, else 0."""
    clusters = np.asarray(clusters)
    same = (clusters[:, :, None] == clusters[:, None, :]).astype(np.float64)
    sim = np.repeat(same[..., None], k, axis=-1)
    if mask is None:
        mask = np.ones(clusters.shape, dtype=bool)
    return sim, np.asarray(mask, dtype=bool)
