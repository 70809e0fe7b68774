"""An ANN index's candidates ordered by the passages' stored float vectors, not by its codes.

An SQ8 or PQ index ranks by its compressed codes: near-ties come out in the wrong order and a row the
graph found can fall below the top k. The source asks the index for `rescore` x k rows and orders them
by the exact inner product with the vectors the build keeps beside the passages (`NNNNN.vectors.npy`):
the index keeps its memory (codes only) and the rows it found come back in the exact order. On the 1M
index, recall@10 0.946 -> 0.955 (passage queries) and 0.976 -> 0.981 (NQ questions) at ~0.2 ms a query
(docs/notes/2026-11-30-session-47.md). A vector is read with one `pread`, so the OS's page cache holds
them, not the service's memory (1.5 GiB at 1M).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

import numpy as np

from retrievers.sources.dense_build import vectors_path
from retrievers.sources.passage_store import RowFiles


class StoredVectors(RowFiles):
    """The vectors of a folder's `shards` shards, read by row (faiss's ids)."""

    def __init__(self, folder: str | Path, shards: int) -> None:
        paths = [vectors_path(Path(folder), i) for i in range(shards)]
        heads = [np.load(p, mmap_mode="r") for p in paths]  # each file's shape and where its data starts
        for p, h in zip(paths, heads):
            if h.dtype != np.float32 or h.ndim != 2 or not h.flags.c_contiguous:
                raise ValueError(f"{p} does not hold float32 rows (a build of another eor?): rebuild with `eor index`")
        self.dim = int(heads[0].shape[1]) if heads else 0
        self._data_at = [int(h.offset) for h in heads]
        super().__init__(paths, [int(h.shape[0]) for h in heads])
        del heads  # the maps are let go: reads go through pread

    def get(self, rows: np.ndarray) -> np.ndarray:
        """The vectors at these rows, in order (a row of -1: zeros)."""
        out = np.zeros((len(rows), self.dim), dtype=np.float32)
        size = 4 * self.dim
        for j, row in enumerate(np.asarray(rows).tolist()):
            if row >= 0:
                shard, i = self.locate(row)
                out[j] = np.frombuffer(os.pread(self._fd(shard), size, self._data_at[shard] + i * size), np.float32)
        return out


def rescored(vectors: StoredVectors, queries: np.ndarray, found: tuple[np.ndarray, np.ndarray]
             ) -> tuple[np.ndarray, np.ndarray]:
    """Each query's found rows (faiss's ids, -1 for none) by exact inner product, best first; the
    empty slots last, scored -inf."""
    _, ids = found
    out_s = np.full(ids.shape, -np.inf, dtype=np.float32)
    out_i = np.full(ids.shape, -1, dtype=np.int64)
    for q, row in enumerate(ids):
        keep = row[row >= 0]
        scores = vectors.get(keep) @ np.asarray(queries[q], dtype=np.float32)
        order = np.argsort(-scores, kind="stable")
        out_s[q, : len(keep)], out_i[q, : len(keep)] = scores[order], keep[order]
    return out_s, out_i


def rescored_top(search: Callable[[np.ndarray, int], tuple[np.ndarray, np.ndarray]], stored: StoredVectors | None,
                 queries: np.ndarray, n: int, depth: int) -> tuple[np.ndarray, np.ndarray]:
    """Each query's best n rows as a source serves them: `search` (queries, rows asked) -> (scores, ids) asked for
    `depth` x n rows, ordered by their `stored` vectors; without stored vectors (an exact index), its own n."""
    if stored is None:
        return search(queries, n)
    scores, ids = rescored(stored, queries, search(queries, n * depth))
    return scores[:, :n], ids[:, :n]
