"""bench.scale_index's ANN recall on questions: the built dense index against exact search, real vectors in."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("faiss")  # the server's environment; .venv-bench has neither faiss nor the index code
from bench.scale_index import question_recall  # noqa: E402
from retrievers.sources.dense_build import DenseIndexSettings, build_dense_index  # noqa: E402
from tests.retrievers.test_dense_build import HashEncoder, corpus  # noqa: E402


@pytest.mark.parametrize("settings, exact", [
    (DenseIndexSettings(shard_passages=64, recall_queries=50), True),
    (DenseIndexSettings(shard_passages=64, exact_below=100, recall_queries=50, ef_construction=8, ef_search=2), False)])
def test_question_recall_is_one_for_an_exact_index_and_measured_for_an_ann(tmp_path, settings, exact):
    build_dense_index(corpus(600), tmp_path / "wiki", HashEncoder(), settings=settings)
    questions = HashEncoder().encode([f"w{i} w{i + 7} w{i + 50}" for i in range(40)])
    got = question_recall(tmp_path / "wiki", HashEncoder(), questions)
    assert got["questions"] == 40 and got["factory"] == ("Flat" if exact else "HNSW32,SQ8")
    assert got["recall_at_10"] == 1.0 if exact else 0.2 < got["recall_at_10"] < 1.0
    assert got["passage_queries"] == 50 and got["rescore"] == (1 if exact else 2)
    assert got["recall_at_10_passages"] == 1.0 if exact else 0.2 < got["recall_at_10_passages"] < 1.0


def test_an_ann_alternative_is_built_beside_and_searched_as_a_source_searches(tmp_path):
    from bench.scale_index import ann_figures

    build_dense_index(corpus(600), tmp_path / "wiki", HashEncoder(), settings=DenseIndexSettings(shard_passages=64))
    questions = HashEncoder().encode([f"w{i} w{i + 7} w{i + 50}" for i in range(40)])
    got = ann_figures(tmp_path, "HNSW16,SQ8", questions)
    assert got["factory"] == "HNSW16,SQ8" and got["recall_at_10"] >= 0.95 and "efSearch" in got["search"]
    assert got["batch_1"]["calls"] == 40 and got["batch_32"]["calls"] == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["wiki"]  # the scratch index is gone
