"""The index step's files built by a PartBuilder: in any order, elsewhere, the same files and the same meta as
one after another here; a builder that loses a file fails the build, and no meta.json is written."""
from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from retrievers.sources.dense_build import META_FILE, DenseIndexSettings, build_dense_index, index_file
from retrievers.sources.dense_index import build_part, local_parts
from tests.retrievers.test_dense_build import HashEncoder, corpus

# IVF: its adds are deterministic (an HNSW graph built with several threads is not), so files compare exactly
IVF = DenseIndexSettings(shard_passages=50, exact_below=100, recall_queries=60, index_shards=3, factory="IVF8,Flat",
                         target_recall=0.9)
TIMES = ("embed_seconds", "encoder_seconds", "index_seconds", "build_seconds")


def without_times(meta: dict) -> dict:
    return {k: v for k, v in meta.items() if k not in TIMES}


def test_files_built_in_reverse_order_elsewhere_are_the_files_built_here(tmp_path):
    here = build_dense_index(corpus(400), tmp_path / "here", HashEncoder(), settings=IVF)
    seen = []

    def reversed_parts(out, parts, inputs):
        assert isinstance(inputs.template, bytes) and inputs.queries.shape == (60, 32)
        for part in reversed(parts):  # as a cluster may hand them back
            seen.append((part.k, part.first, part.last))
            yield part.k, build_part(out, part, inputs)

    there = build_dense_index(corpus(400), tmp_path / "there", HashEncoder(), settings=IVF, index_parts=reversed_parts)
    assert [k for k, _, _ in seen] == [2, 1, 0] and seen[-1][1] == 0 and seen[0][2] == here["shards"]
    assert without_times(there) == without_times(here) and there["factory"] == "IVF8,Flat"
    for k in range(3):
        assert (tmp_path / "here" / index_file(k)).read_bytes() == (tmp_path / "there" / index_file(k)).read_bytes()
    assert here["index_seconds"] >= 0 and not list((tmp_path / "there").glob("*.tmp"))


def test_a_builder_that_loses_a_file_fails_the_build_and_leaves_no_meta(tmp_path):
    def loses_one(out, parts, inputs):
        for k, found in local_parts(out, parts, inputs):
            if k != 1:
                yield k, found

    with pytest.raises(RuntimeError, match=r"files \[0, 2\] of 3"):
        build_dense_index(corpus(400), tmp_path / "idx", HashEncoder(), settings=IVF, index_parts=loses_one)
    assert not (tmp_path / "idx" / META_FILE).exists()
    meta = build_dense_index(corpus(400), tmp_path / "idx", HashEncoder(), settings=IVF)  # run again: whole
    assert json.loads((tmp_path / "idx" / META_FILE).read_text())["recall_at_10"] == meta["recall_at_10"] >= 0.9


def test_each_part_is_searched_at_every_knob_value_tried(tmp_path):
    calls = []

    def counting(out, parts, inputs):
        for k, found in local_parts(out, parts, inputs):
            calls.append((k, sorted(found)))
            assert all(ids.shape == (60, 22) for _, ids in found.values())  # (10 and its own row) x rescore 2
            yield k, found

    meta = build_dense_index(corpus(400), tmp_path / "idx", HashEncoder(),
                             settings=replace(IVF, target_recall=0.999),
                             index_parts=counting)
    assert [k for k, _ in calls] == [0, 1, 2] and all(values == [1, 2, 4, 8] for _, values in calls)
    assert meta["search"] == {"nprobe": 8} and np.isclose(meta["recall_at_10"], 1.0)  # every list: exact
