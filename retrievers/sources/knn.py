"""Top k over vectors with faiss and without: the exact reference over shards, the merge of several
indexes' results (a dense index's files, its shard actors), recall against exact, the search knob."""
from __future__ import annotations

from typing import Sequence

import numpy as np


def exact_topk(queries: np.ndarray, vecs: Sequence[np.ndarray], k: int) -> tuple[np.ndarray, np.ndarray]:
    """Brute-force inner-product top k over the shards, one at a time (the reference recall is against)."""
    parts, start = [], 0
    for v in vecs:
        scores = queries @ np.asarray(v, dtype=np.float32).T
        kk = min(k, scores.shape[1])
        top = np.argpartition(-scores, kk - 1, axis=1)[:, :kk]
        parts.append((np.take_along_axis(scores, top, 1), top + start))
        start += len(v)
    return merge_topk(parts, k)


def merge_topk(parts: Sequence[tuple[np.ndarray, np.ndarray]], k: int) -> tuple[np.ndarray, np.ndarray]:
    """Each query's best k over several (scores, ids) results; faiss's empty slots (-1) last."""
    scores = np.concatenate([np.where(i >= 0, s, -np.inf) for s, i in parts], axis=1)
    ids = np.concatenate([i for _, i in parts], axis=1)
    order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(scores, order, 1), np.take_along_axis(ids, order, 1)


def without_own_row(result: tuple[np.ndarray, np.ndarray], own: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Each query's first k (scores, ids) but its own row: a query drawn from the corpus finds itself first,
    in any index, so counting it would flatter recall (one of ten for free)."""
    scores, ids = result
    k = min(k, ids.shape[1] - 1)  # a result of every row (a small index): its own row is the one left out
    order = np.argsort(ids == np.asarray(own)[:, None], axis=1, kind="stable")[:, :k]  # others first, in order
    return np.take_along_axis(scores, order, 1), np.take_along_axis(ids, order, 1)


def search_all(indexes: Sequence, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    return merge_topk([search_index(index, queries, k) for index in indexes], k)


def search_index(index, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """`index.search`; a lone query against a faiss index on one OpenMP thread (this calling thread's
    setting only). faiss's other threads otherwise spin-wait after the call and take a core from the
    next question's encoding, torch's own thread pool: on 2 cores that cost the 1M Wiki source's
    batch-1 call more than faiss itself (docs/notes/2026-11-30-session-47.md)."""
    import faiss

    if len(queries) != 1 or not isinstance(index, faiss.Index):
        return index.search(queries, k)
    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        return index.search(queries, k)
    finally:
        faiss.omp_set_num_threads(threads)


def recall_at(found: np.ndarray, exact: tuple[np.ndarray, np.ndarray], k: int = 10) -> float:
    """Mean share of each query's exact top k that the index found, `exact` being a deeper exact
    (scores, ids): a row tied with the k-th counts too, so ties broken otherwise are no loss."""
    scores, ids = exact
    out = []
    for f, s, e in zip(found[:, :k].tolist(), scores.tolist(), ids.tolist()):
        kk = min(k, len(s))  # an index of fewer than k rows
        if kk == 0:  # nothing to find (one passage, its own row left out)
            out.append(1.0)
            continue
        tied = {i for x, i in zip(s, e) if x >= s[kk - 1] - 1e-6}
        out.append(min(kk, len(set(f) & tied)) / kk)
    return float(np.mean(out))


def search_knob(index) -> str:
    """The knob that trades speed for recall in this index: "nprobe" (IVF), "efSearch" (HNSW), or ""."""
    import faiss

    inner = faiss.downcast_index(index.index) if isinstance(index, (faiss.IndexIDMap, faiss.IndexIDMap2)) else index
    try:
        faiss.extract_index_ivf(inner)
        return "nprobe"
    except RuntimeError:
        return "efSearch" if "HNSW" in type(inner).__name__ else ""


def set_knob(indexes: Sequence, knob: str, value: int) -> None:
    import faiss

    params = faiss.ParameterSpace()
    for index in indexes:
        params.set_index_parameter(index, knob, value)
