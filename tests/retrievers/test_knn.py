"""Top k without faiss: the merge of several results, the exact reference over shards."""
from __future__ import annotations

import numpy as np

from retrievers.sources.knn import exact_topk, merge_topk


def test_merge_topk_keeps_the_best_k_and_puts_empty_slots_last():
    s1, i1 = np.array([[0.9, 0.5, -1.0]]), np.array([[4, 2, -1]])
    s2, i2 = np.array([[0.7, 0.6, 0.1]]), np.array([[10, 11, 12]])
    scores, ids = merge_topk([(s1, i1), (s2, i2)], 4)
    assert ids.tolist() == [[4, 10, 11, 2]] and scores.tolist() == [[0.9, 0.7, 0.6, 0.5]]
    _, ids = merge_topk([(s1, i1)], 3)
    assert ids.tolist() == [[4, 2, -1]]


def test_exact_topk_over_shards_is_the_brute_force_answer():
    rng = np.random.default_rng(3)
    shards = [rng.normal(size=(n, 8)).astype(np.float32) for n in (5, 9, 3)]
    q = rng.normal(size=(4, 8)).astype(np.float32)
    scores, ids = exact_topk(q, shards, 6)
    full = np.concatenate(shards)
    assert ids.tolist() == np.argsort(-(q @ full.T), axis=1)[:, :6].tolist()
