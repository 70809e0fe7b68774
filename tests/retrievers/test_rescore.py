"""An ANN index's rows ordered by the stored float vectors: read by row from disk, scored exactly, served so."""
from __future__ import annotations

import gc
import os
from dataclasses import replace

import numpy as np
import pytest

from retrievers.sources.dense import DenseSource
from retrievers.sources.dense_build import SHARDS_DIR, DenseIndexSettings, build_dense_index, load_vectors
from retrievers.sources.rescore import StoredVectors, rescored
from tests.retrievers.test_dense_build import HashEncoder, corpus

ANN = DenseIndexSettings(shard_passages=64, exact_below=100, recall_queries=50, ef_construction=16)


def test_vectors_are_read_by_row_across_shards_and_their_files_closed_when_let_go(tmp_path):
    build_dense_index(corpus(150), tmp_path / "idx", HashEncoder(), settings=ANN)
    folder = tmp_path / "idx" / SHARDS_DIR
    whole = np.concatenate(list(load_vectors(folder, 3)))
    stored = StoredVectors(folder, 3)
    assert len(stored) == 150 and stored.dim == whole.shape[1]
    rows = np.array([149, 0, 64, -1, 63, 128])
    got = stored.get(rows)
    assert np.array_equal(got[[0, 1, 2, 4, 5]], whole[[149, 0, 64, 63, 128]]) and not got[3].any()
    with pytest.raises(IndexError, match="row 150 is outside"):
        stored.get(np.array([150]))
    assert opened_in(folder) == 3  # a file a shard read
    del stored, got
    gc.collect()
    assert opened_in(folder) == 0


def opened_in(folder) -> int:
    """This process's open files under `folder` (other tests' files may close meanwhile: only these count)."""
    found = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            found += os.readlink(f"/proc/self/fd/{fd}").startswith(str(folder))
        except OSError:  # closed while listed
            pass
    return found


def test_found_rows_come_back_by_exact_inner_product_empty_slots_last(tmp_path):
    build_dense_index(corpus(150), tmp_path / "idx", HashEncoder(), settings=ANN)
    folder = tmp_path / "idx" / SHARDS_DIR
    whole = np.concatenate(list(load_vectors(folder, 3)))
    queries = whole[[5, 90]]
    ids = np.array([[3, 5, -1, 70], [-1, -1, -1, -1]])
    scores, order = rescored(StoredVectors(folder, 3), queries, (np.zeros(ids.shape), ids))
    exact = whole[[3, 5, 70]] @ queries[0]
    assert order[0].tolist() == [[3, 5, 70][i] for i in np.argsort(-exact)] + [-1] and order[0][0] == 5
    assert np.allclose(scores[0][:3], np.sort(exact)[::-1]) and scores[0][3] == -np.inf
    assert order[1].tolist() == [-1] * 4


def test_a_source_over_an_ann_index_serves_exact_scores_and_one_over_an_exact_index_reads_no_vectors(tmp_path):
    """Rescored, each passage's score is its stored vector's inner product with the query (SQ8's codes give
    other scores: asked with rescore 1, the same index does not); an exact index has nothing to rescore."""
    build_dense_index(corpus(300), tmp_path / "ann", HashEncoder(), settings=ANN)
    qs = [f"w{i} w{i + 7} w{i * 3}" for i in range(20)]
    vectors = HashEncoder().encode(qs)
    whole = np.concatenate(list(load_vectors(tmp_path / "ann" / SHARDS_DIR, 5)))

    def gap(source: DenseSource) -> float:  # the largest |served score - exact inner product| over the hits
        scores, ids = source.top_rows(vectors, 10)
        exact = np.einsum("qkd,qd->qk", whole[ids], vectors)
        return float(np.abs(np.where(ids >= 0, scores - exact, 0)).max())

    served = DenseSource(str(tmp_path / "ann"), HashEncoder(), settings=ANN)
    assert gap(served) < 1e-5
    assert gap(DenseSource(str(tmp_path / "ann"), HashEncoder(), settings=replace(ANN, rescore=1))) > 1e-4
    hits = served.search(qs, 10)
    assert all(p.score == pytest.approx(float(s), abs=1e-5) for row, srow in zip(hits, served.top_rows(vectors, 10)[0])
               for p, s in zip(row, srow))
    exact = replace(ANN, exact_below=1000)
    build_dense_index(corpus(300), tmp_path / "flat", HashEncoder(), settings=exact)
    flat = DenseSource(str(tmp_path / "flat"), HashEncoder(), settings=exact).load()
    assert flat._vectors is None and flat.meta["rescore"] == 1
    with pytest.raises(ValueError, match="rescore must be >= 1"):
        DenseIndexSettings(rescore=0)
