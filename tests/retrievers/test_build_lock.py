"""retrievers/sources/build_lock.py: an index `eor index` is still building is waited for by the
first search that reads it, not by the pool's load; a second build of the same folder is refused."""
from __future__ import annotations

import os
import subprocess
import threading
import time

import pytest

from retrievers.pool import PoolConfig, RetrieverPool
from retrievers.sources import build_lock
from retrievers.sources.dense import DenseSource
from retrievers.sources.dense_build import DenseIndexSettings, build_dense_index

from tests.retrievers.test_dense_build import HashEncoder, corpus

SETTINGS = DenseIndexSettings(shard_passages=16, recall_queries=20)


def test_a_lock_names_a_live_builder_only_and_refuses_a_second_one(tmp_path):
    assert build_lock.builder_pid(tmp_path) is None
    build_lock.hold(tmp_path)
    assert build_lock.builder_pid(tmp_path) == os.getpid()
    build_lock.release(tmp_path)
    dead = subprocess.Popen(["true"])
    dead.wait()
    (tmp_path / build_lock.LOCK_FILE).write_text(str(dead.pid))
    assert build_lock.builder_pid(tmp_path) is None  # a build that died: no build
    other = subprocess.Popen(["sleep", "30"])
    try:
        (tmp_path / build_lock.LOCK_FILE).write_text(str(other.pid))
        with pytest.raises(ValueError, match=f"another eor index \\(pid {other.pid}\\) is building"):
            build_dense_index(corpus(5), tmp_path, HashEncoder(), settings=SETTINGS)
    finally:
        other.kill()


def test_the_pool_loads_around_an_index_being_built_and_its_first_search_waits_for_it(tmp_path):
    out = tmp_path / "wiki"
    out.mkdir()
    build_lock.hold(out)  # "eor index" (this process) has begun the build
    source = DenseSource(str(out), HashEncoder(), settings=SETTINGS)
    assert source.building()
    pool = RetrieverPool(PoolConfig(specs=("Wiki@1",)), {"Wiki": source}, HashEncoder(), None)
    pool.load()  # does not wait: the source loads on its first search
    assert source.meta == {}

    def build():
        time.sleep(1.0)
        build_dense_index(corpus(40), out, HashEncoder(), settings=SETTINGS)
    builder = threading.Thread(target=build)
    builder.start()
    (row,) = source.search([corpus(40)[3].text], 1)  # waits for the build, then answers
    builder.join()
    assert row[0].pid == "d3" and not source.building() and build_lock.builder_pid(out) is None


def test_a_missing_index_with_no_build_is_one_line_at_once(tmp_path):
    from retrievers.sources.base import MissingIndexError

    source = DenseSource(str(tmp_path / "wiki"), HashEncoder(), settings=SETTINGS)
    assert not source.building()
    with pytest.raises(MissingIndexError, match="build it with `eor index`"):
        source.load()
