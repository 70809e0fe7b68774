"""Embedding a corpus as a Ray Data job: the dense build's shards over a cluster's encoder actors; and its
index files as Ray tasks, one a file, spread over the cluster's nodes.

The streaming build (retrievers/sources/dense_build.py) writes passage shards to the index folder
and asks an `Embedder` for the shards without vectors. This one makes them a dataset (a row a
shard), maps it over a pool of encoder actors (`map_batches` with an actor class: the encoder
loads once per actor; Ray places the actors on the cluster's nodes, GPUs where they are), and
hands each shard's vectors back to the build as they arrive, which writes and checkpoints them.
The same code runs on one machine (`--ray-address local`) and on many. The actors read the shards
from the index folder, so on a cluster of several machines it must be on storage they share (as
Ray Data's own readers expect); on one machine it always is.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

from retrievers.sources.dense_build import Embedder, as_recorded, embed_shard, recorded_corpus_kind
from retrievers.sources.dense_index import Found, IndexPart, PartBuilder, PartInputs, build_part


ACTORS_READY_S = 300  # how long the pool may take to load every encoder before the build gives up
ACTOR_INIT_DEATHS = 2  # actors lost while loading (a node dying) that are replaced before the build fails


class ShardEncoder:
    """A Ray Data actor: one encoder, loaded once, embedding whole shards."""

    def __init__(self, encoder_name: str, corpus_backend: str, threads: int, device: str = "cpu") -> None:
        import torch

        from retrievers.encoder import Encoder

        torch.set_num_threads(threads)
        self.encoder = Encoder(encoder_name, corpus_backend=corpus_backend, device=device, threads=threads)

    def __call__(self, batch: dict) -> dict:
        out = {"shard": [], "rows": [], "vectors": [], "node": [], "seconds": []}
        import ray

        node = ray.get_runtime_context().get_node_id()
        for folder, shard in zip(batch["folder"], batch["shard"]):
            v, seconds = embed_shard(self.encoder, Path(str(folder)), int(shard))
            out["shard"].append(int(shard))
            out["rows"].append(len(v))
            out["vectors"].append(v.astype(np.float32).tobytes())  # bytes: shards differ in rows
            out["node"].append(node)
            out["seconds"].append(seconds)
        types = {"vectors": object, "node": object, "seconds": np.float64}
        return {k: np.asarray(v, dtype=types.get(k, np.int64)) for k, v in out.items()}


def connect(address: str) -> None:
    """Join a running cluster (`ray start`), or start Ray on this machine for "local"."""
    import ray

    from serve.app.application import RAY_ENV_DEFAULTS, _runtime_env

    if ray.is_initialized():
        return
    if address == "local":
        for k, v in RAY_ENV_DEFAULTS.items():
            os.environ.setdefault(k, v)
        ray.init(_node_ip_address="127.0.0.1", _temp_dir=tempfile.mkdtemp(prefix="eor-ray-", dir="/tmp"),
                 include_dashboard=False, runtime_env=_runtime_env(), configure_logging=True,
                 logging_level="WARNING", log_to_driver=False)
    else:
        ray.init(address=address, runtime_env=_runtime_env(), configure_logging=True, logging_level="WARNING",
                 log_to_driver=False)


def cluster_encoder(encoder, address: str, out_dir: str | Path):
    """The encoder a build on the cluster embeds with: the backend the index records where it began; else, where
    it would choose itself ("auto") and the cluster has GPUs, torch (the actors take a GPU each: ray_embedder),
    whatever the driver has (a head node without a GPU would have chosen a CPU backend for GPU actors)."""
    from dataclasses import replace

    if recorded_corpus_kind(out_dir) is not None or getattr(encoder, "corpus_backend", None) != "auto":
        return as_recorded(encoder, out_dir)
    import ray

    connect(address)
    return replace(encoder, corpus_backend="torch") if ray.cluster_resources().get("GPU", 0) else encoder


def ray_embedder(encoder_name: str, corpus_backend: str, address: str = "local", actors: int = 0, threads: int = 1,
                 nodes_seen: dict | None = None) -> Embedder:
    """An Embedder running on Ray: `actors` encoder actors of `threads` cores each (0: as many as
    the cluster's CPUs hold), each embedding with `corpus_backend` as the driver resolved it (the
    build records one backend, whatever CPUs the nodes have). `nodes_seen`, if given, counts the
    shards each node embedded."""
    def embed(folder: Path, shards: Sequence[int]) -> Iterator[tuple[int, np.ndarray, float]]:
        import ray

        connect(address)
        ctx = ray.data.DataContext.get_current()
        ctx.enable_progress_bars = False
        ctx.print_on_execution_start = False
        # Every actor loaded before shards are handed out, so they spread over all of them (else the
        # first actor up can take every shard, and the pool cancels the others still starting, which
        # Ray Data 2.60 counts as a death during initialization and fails the job for).
        ctx.wait_for_min_actors_s = ACTORS_READY_S
        ctx.max_consecutive_actor_init_deaths = ACTOR_INIT_DEATHS
        gpus = int(ray.cluster_resources().get("GPU", 0))  # a GPU each where the cluster has them
        free = int(ray.available_resources().get("CPU", 1))  # what the cluster can place now, not its total
        n = actors or gpus or max(1, free // threads)
        n = min(n, len(shards))
        ds = ray.data.from_items([{"folder": str(folder), "shard": int(s)} for s in shards],
                                 override_num_blocks=len(shards))
        ds = ds.map_batches(ShardEncoder, batch_size=1, compute=ray.data.ActorPoolStrategy(size=n),
                            fn_constructor_kwargs={"encoder_name": encoder_name, "corpus_backend": corpus_backend,
                                                   "threads": threads, "device": "cuda" if gpus else "cpu"},
                            num_cpus=threads, num_gpus=1 if gpus else None)
        for row in ds.iter_rows():
            if nodes_seen is not None:
                nodes_seen[row["node"]] = nodes_seen.get(row["node"], 0) + 1
            vectors = np.frombuffer(row["vectors"], dtype=np.float32).reshape(int(row["rows"]), -1)
            yield int(row["shard"]), vectors, float(row["seconds"])
    return embed


def _index_part(out: str, part: IndexPart, inputs: PartInputs, threads: int) -> tuple[int, Found, str]:
    """A Ray task: one index file built and written where the task runs (the folder is shared storage)."""
    import faiss
    import ray

    faiss.omp_set_num_threads(threads)  # the CPUs the task was given, not every core of its node
    return part.k, build_part(Path(out), part, inputs), ray.get_runtime_context().get_node_id()


def node_cpus() -> int:
    """The CPUs of the cluster's smallest live node: what a task may ask for and still be placed anywhere."""
    import ray

    sizes = [int(n["Resources"]["CPU"]) for n in ray.nodes() if n.get("Alive") and n["Resources"].get("CPU")]
    return max(1, min(sizes, default=1))


def ray_index_parts(address: str = "local", threads: int = 0, nodes_seen: dict | None = None) -> PartBuilder:
    """A PartBuilder running on Ray: a task an index file, spread over the nodes (Ray's SPREAD strategy), each
    of `threads` CPUs (0, and never more than: a node's, `node_cpus`), so a node of the cluster holds one
    file's graph at a time, on one machine (`local`) too. `nodes_seen`, if given, counts the files each node
    built. A failed file fails the step; the other files' tasks are cancelled."""
    def build(out: Path, parts: Sequence[IndexPart], inputs: PartInputs) -> Iterator[tuple[int, Found]]:
        import ray

        connect(address)
        per_node = node_cpus()
        cpus = min(threads or per_node, per_node)
        task = ray.remote(_index_part).options(num_cpus=cpus, scheduling_strategy="SPREAD", max_retries=2)
        inputs_ref = ray.put(inputs)  # the template and the queries sent once, not once a task
        pending = [task.remote(str(out), part, inputs_ref, cpus) for part in parts]
        try:
            while pending:
                done, pending = ray.wait(pending, num_returns=1)
                k, found, node = ray.get(done[0])
                if nodes_seen is not None:
                    nodes_seen[node] = nodes_seen.get(node, 0) + 1
                yield k, found
        finally:
            for ref in pending:  # a failed (or abandoned) step: no file goes on building
                ray.cancel(ref)
    return build
