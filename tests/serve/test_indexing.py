"""The dense build's embedding as a Ray Data job and its index files as Ray tasks (serve/indexing.py): on a
real two-node Ray cluster formed on this machine both nodes embed shards of one build and each builds one of
its two index files; the vectors are those of a build in one process; index shards served by their own actors
return what one index does."""
from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass

import numpy as np
import pytest

from retrievers.sources.dense_build import SHARDS_DIR, DenseIndexSettings, build_dense_index, load_vectors


class FakeShardHandle:
    """A Serve handle's shape: `.search.remote(...)` -> a response with `.result()`."""

    def __init__(self, index):
        self.index = index
        self.search = self

    def remote(self, vectors, k, index_dir=""):
        result = self.index.search(vectors, k)

        class Response:
            def result(self, timeout_s=None):
                return result
        return Response()


def test_index_shards_searched_through_their_handles_return_what_one_index_returns(tmp_path):
    from retrievers.sources.dense import DenseSource, load_index_shards, read_meta
    from serve.app.handles import RemoteIndexShards
    from tests.retrievers.test_dense_build import HashEncoder, corpus

    settings = DenseIndexSettings(shard_passages=10, recall_queries=50, index_shards=3)
    build_dense_index(corpus(60), tmp_path / "idx", HashEncoder(), settings=settings)
    meta = read_meta(tmp_path / "idx")
    shards = [FakeShardHandle(load_index_shards(tmp_path / "idx", meta, settings, only=[k])[0]) for k in range(3)]
    remote = DenseSource(str(tmp_path / "idx"), HashEncoder(), settings=settings).use_indexes(
        [RemoteIndexShards(shards)])
    local = DenseSource(str(tmp_path / "idx"), HashEncoder(), settings=settings)
    qs = ["w1 w2", "w30 w7 w8", "w100"]
    assert [[(p.pid, p.score) for p in r] for r in remote.search(qs, 6)] == \
        [[(p.pid, p.score) for p in r] for r in local.search(qs, 6)]


# The Ray Data job runs in a driver process of its own, as `eor index --ray-address` does: in the
# suite's process an earlier test's Ray leaves Ray Data state behind that cancels the job's actors.
TWO_NODE_BUILD = """
import itertools, json, sys
from retrievers.corpus import read_embedded
from retrievers.encoder import Encoder
from retrievers.sources.dense_build import DenseIndexSettings, build_dense_index
from serve.indexing import ray_embedder, ray_index_parts
docs = list(itertools.islice(read_embedded(), 120))
encoder = Encoder(corpus_backend="torch")
nodes, part_nodes = {}, {}
embed = ray_embedder(encoder.name, encoder.corpus_kind, address=sys.argv[2], actors=2, nodes_seen=nodes)
parts = ray_index_parts(address=sys.argv[2], nodes_seen=part_nodes)  # a node's CPUs a file
settings = DenseIndexSettings(**json.loads(sys.argv[3]))
meta = build_dense_index(docs, sys.argv[1], encoder, settings=settings, corpus_id="embedded-120", embedder=embed,
                         index_parts=parts)
print(json.dumps({"nodes": nodes, "part_nodes": part_nodes, "shards": meta["shards"], "recall": meta["recall_at_10"]}))
"""
# an IVF index in two files: one Ray task each, SPREAD over the two nodes
SETTINGS = DenseIndexSettings(shard_passages=16, recall_queries=20, exact_below=50, factory="IVF4,Flat", index_shards=2)


@pytest.mark.slow
def test_two_nodes_of_a_local_ray_cluster_build_one_index_with_the_vectors_of_one_process(tmp_path):
    import json
    import subprocess
    import sys

    from bench.cluster import _ray_env, start_head, start_worker, stop_cluster
    from retrievers.corpus import read_embedded
    from retrievers.encoder import Encoder

    docs = list(itertools.islice(read_embedded(), 120))
    encoder = Encoder(corpus_backend="torch")  # fp32 on every class of CPU: the same vectors wherever they run
    one_meta = build_dense_index(docs, tmp_path / "one", encoder, settings=SETTINGS, corpus_id="embedded-120")
    temp = f"/tmp/eor-idx-{tmp_path.name[-8:]}"
    try:
        start_head(6389, temp, 58391)
        start_worker(6389, temp, 58392)
        proc = subprocess.run([sys.executable, "-c", TWO_NODE_BUILD, str(tmp_path / "two"), "127.0.0.1:6389",
                               json.dumps(asdict(SETTINGS))],
                              env=_ray_env(), capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, proc.stderr[-3000:]
        got = json.loads(proc.stdout.strip().splitlines()[-1])
        assert len(got["nodes"]) == 2 and sum(got["nodes"].values()) == got["shards"], got  # both nodes embedded
        assert len(got["part_nodes"]) == 2 and sum(got["part_nodes"].values()) == 2, got  # a file on each node
    finally:
        stop_cluster(temp)
    one = load_vectors(tmp_path / "one" / SHARDS_DIR, got["shards"])
    two = load_vectors(tmp_path / "two" / SHARDS_DIR, got["shards"])
    for a, b in zip(one, two):
        assert a.shape == b.shape and np.allclose(a, b, atol=1e-5)
    assert one_meta["factory"] == "IVF4,Flat" and abs(got["recall"] - one_meta["recall_at_10"]) <= 0.05


@dataclass(frozen=True)
class AutoEncoder:
    """An Encoder's choosing: "auto" is what this machine (the driver) would take."""
    corpus_backend: str = "auto"
    machine: str = "openvino-int8"

    @property
    def corpus_kind(self) -> str:
        return self.machine if self.corpus_backend == "auto" else self.corpus_backend


@pytest.mark.parametrize("resources, recorded, asked, kind", [
    ({"CPU": 64, "GPU": 4}, None, "auto", "torch"),  # a head node without a GPU: its actors' GPUs decide
    ({"CPU": 64}, None, "auto", "openvino-int8"),  # CPUs only: the driver's choice, recorded for every node
    ({"CPU": 64, "GPU": 4}, "onnx-int8", "auto", "onnx-int8"),  # a resume embeds as the index began
    ({"CPU": 64, "GPU": 4}, None, "onnx-int8", "onnx-int8"),  # named: as asked
])
def test_a_cluster_build_embeds_with_the_record_else_torch_where_the_cluster_has_gpus(
        monkeypatch, tmp_path, resources, recorded, asked, kind):
    import json

    import ray

    from retrievers.sources.dense_build import BUILD_FILE
    from serve import indexing

    if recorded:
        (tmp_path / BUILD_FILE).write_text(json.dumps({"fingerprint": {"corpus_backend": recorded}}))
    monkeypatch.setattr(indexing, "connect", lambda address: None)
    monkeypatch.setattr(ray, "cluster_resources", lambda: resources)
    assert indexing.cluster_encoder(AutoEncoder(corpus_backend=asked), "ray://head:10001", tmp_path).corpus_kind == kind
