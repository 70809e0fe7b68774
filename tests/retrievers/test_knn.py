"""Top k: the merge of several results, the exact reference over shards, a lone query's faiss search."""
from __future__ import annotations

import numpy as np

from retrievers.sources.knn import exact_topk, merge_topk, search_index


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


def test_a_lone_query_searches_faiss_on_one_thread_and_restores_the_setting(monkeypatch):
    import faiss

    rng = np.random.default_rng(5)
    index = faiss.IndexFlatIP(8)
    index.add(rng.normal(size=(50, 8)).astype(np.float32))
    q = rng.normal(size=(3, 8)).astype(np.float32)
    before = faiss.omp_get_max_threads()
    set_to = []
    real_set = faiss.omp_set_num_threads
    monkeypatch.setattr(faiss, "omp_set_num_threads", lambda n: (set_to.append(n), real_set(n)))
    one = search_index(index, q[:1], 5)
    assert set_to == [1, before] and faiss.omp_get_max_threads() == before
    assert [a.tolist() for a in one] == [a.tolist() for a in index.search(q[:1], 5)]
    set_to.clear()
    search_index(index, q, 5)  # a batch: faiss's threads share its queries, as they should
    assert set_to == []

    class Remote:  # not a faiss index (the service's shard actors): asked as it is
        def search(self, vectors, k):
            return "asked", len(vectors), k
    assert search_index(Remote(), q[:1], 4) == ("asked", 1, 4)
