"""Issue 54's 21M passages on paper: the DPR Wikipedia (the EoR paper's Wiki source) indexed the way
`eor index` does it, projected from what the scale benchmark measured here.

    python -m bench.scale_paper --report var/bench/scale/scale-14k.json --report var/bench/scale/scale-100k.json \
        [--corpus var/corpora/scale-1m.jsonl.gz] [--passages 21015324] [--node-cores 32] [--gpu-tflops 100] \
        [--out var/bench/scale/paper-21m.json]

Measured (the reports of `bench.scale_index`): the corpus encoder's passages/s per core (the best report:
the encoder alone), and disk per passage (the largest report). The encoder's tokens per passage are counted
on a sample of `--corpus` with its own tokenizer, as `eor index` embeds them (title, then text).
Projected, each with its rule:
- CPU: embedding is one `map_batches` over encoder actors (a Ray Data job), so it grows with the cores:
  hours = passages / (per-core rate x cores). Two nodes sharing one build were shown (tests/serve/test_indexing.py).
- GPU: no GPU was measured. The encoder's FLOPs per passage (its shapes, the tokens counted) over an
  assumed sustained rate (`--gpu-tflops`), stated beside the figure as an assumption.
- The index: bytes per vector of the factory as `eor index` writes it (HNSW32,SQ8: 384 code bytes, 2M 4-byte
  links at level 0 and ~1 above, the graph's offset and level, the id map), and its graph's build time scaled
  by N log N from a measured build (`--hnsw-seconds` on `--hnsw-vectors` and `--hnsw-cores`). Disk: the
  largest report's, less its own index file, plus the factory's. On one machine the index step builds one
  file's graph at a time (dense_index.py: build_faiss): `index_shards` divides its memory, not its time. With
  `--ray-address` each file is a Ray task on a node of its own (serve/indexing.py: ray_index_parts), so S files
  on S nodes divide its time too: each node builds 1/S of the passages' graph.
"""
from __future__ import annotations

import argparse
import json
import math
import re
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from bench.common import emit_json

DPR_WIKI_PASSAGES = 21_015_324  # psgs_w100.tsv, the DPR Wikipedia the EoR paper retrieves from
# MiniLM-L6 (all-MiniLM-L6-v2): 6 layers, 384 wide, 1,536 in the feed-forward.
LAYERS, WIDTH, FEED_FORWARD = 6, 384, 1536
# The index step (build_faiss: HNSW32,SQ8, efConstruction 100, SQ8 trained on 100k, the knob's ladder searched)
# over 409,600 of the 1M vectors on this machine's 2 cores alone: 286 s (session-43 note). Session 42's preview,
# 404 s for 286,720, ran beside the build in another session: about one core (autogroup).
HNSW_SECONDS, HNSW_VECTORS, HNSW_CORES = 286.3, 409_600, 2
# IndexIDMap around an index without ids of its own: an id a vector (until session 44 an IndexIDMap2, whose reverse
# map took ~42 bytes more a vector in memory, measured: ~0.8 GiB at 21M, and nothing used it)
ID_BYTES = 8


@dataclass(frozen=True)
class Measured:
    per_core_rate: float  # passages/s per core, the corpus encoder alone
    rate_from: str
    cores: int  # of the machine the reports were measured on
    wiki_bytes_per_passage: float  # on disk, but its faiss index: passages, offsets, vectors
    se_bytes_per_passage: float
    disk_from: str
    tokens_per_passage: float


def encoder_flops(tokens: float, layers: int = LAYERS, width: int = WIDTH, ff: int = FEED_FORWARD) -> float:
    """One passage through the encoder: the projections and feed-forward (2 FLOPs a weight a token), attention's
    two T x T products."""
    weights = 4 * width * width + 2 * width * ff
    return layers * (2 * tokens * weights + 4 * tokens * tokens * width)


def bytes_per_vector(factory: str, dims: int = WIDTH) -> float:
    """One vector in a faiss index of this factory string as `eor index` writes it: its code, the graph or the
    inverted list's id, and the IndexIDMap it wraps an index without ids in (dense_index.py: build_faiss); the
    same in memory as on disk."""
    code = {"Flat": 4 * dims, "SQ8": dims, "SQ4": dims / 2, "SQfp16": 2 * dims}
    parts = factory.split(",")
    last = parts[-1]
    if last.startswith("PQ"):
        size = float(re.match(r"PQ(\d+)", last).group(1))
    elif last in code:
        size = float(code[last])
    elif last.startswith("HNSW"):
        size = float(code["Flat"])
    else:
        raise ValueError(f"unknown faiss factory part {last!r} in {factory!r}")
    first = parts[0]
    if first.startswith("IVF"):
        return size + 8  # the id kept in the inverted list
    if first.startswith("HNSW"):
        m = int(re.match(r"HNSW(\d+)", first).group(1))
        # level 0 holds 2M links of 4 bytes; a vector reaches level l >= 1 with chance M^-l, M links each there:
        # M / (M - 1) links above level 0 in all; and its offset (8 bytes) and level (4) in the graph
        size += 2 * m * 4 + 4 * m / (m - 1) + 12
    return size + ID_BYTES


def hnsw_build_hours(passages: int, cores: int, seconds: float = HNSW_SECONDS, vectors: int = HNSW_VECTORS,
                     measured_cores: int = HNSW_CORES) -> float:
    """Graph build time, scaled by N log N from the measured build and spread over the cores (faiss adds in
    parallel with OpenMP)."""
    scale = passages * math.log(passages) / (vectors * math.log(vectors))
    return seconds * scale * measured_cores / cores / 3600


def measured(reports: list[dict], tokens_per_passage: float) -> Measured:
    builds = [r for r in reports if r.get("build", {}).get("embed_passages_per_s_per_core")]
    if not builds:
        raise SystemExit("eor: no report has a build's passages/s: run bench.scale_index on a built index first")
    fastest = max(builds, key=lambda r: r["build"]["embed_passages_per_s_per_core"])
    largest = max(builds, key=lambda r: r["build"]["passages"])
    disk, n = largest["build"]["disk_gib"], largest["build"]["passages"]
    index_file = bytes_per_vector(largest["build"].get("factory", "Flat"))
    return Measured(per_core_rate=fastest["build"]["embed_passages_per_s_per_core"], rate_from=fastest["index"],
                    cores=int(fastest.get("cores") or 2),
                    wiki_bytes_per_passage=disk["wiki"] * 2**30 / n - index_file, se_bytes_per_passage=disk["se"] * 2**30 / n,
                    disk_from=largest["index"], tokens_per_passage=tokens_per_passage)


def plan(m: Measured, passages: int, node_cores: int, nodes: list[int], gpu_tflops: float,
         factory: str = "HNSW32,SQ8", hnsw: tuple[float, int, int] = (HNSW_SECONDS, HNSW_VECTORS, HNSW_CORES)) -> dict:
    """The projection's rows: embedding hours by where it runs, the index's memory per shard, disk."""
    flops = encoder_flops(m.tokens_per_passage)
    embed = [{"where": f"{n} node(s) x {node_cores} cores", "cores": n * node_cores,
              "embed_hours": round(passages / (m.per_core_rate * n * node_cores) / 3600, 1)} for n in nodes]
    embed.insert(0, {"where": f"the measured machine, {m.cores} cores", "cores": m.cores,
                     "embed_hours": round(passages / (m.per_core_rate * m.cores) / 3600, 1)})
    gpu_hours = passages * flops / (gpu_tflops * 1e12) / 3600
    index_gib = passages * bytes_per_vector(factory) / 2**30
    return {
        "passages": passages, "measured": asdict(m),
        "encoder_gflop_per_passage": round(flops / 1e9, 2),
        "cpu_effective_gflops_per_core": round(m.per_core_rate * flops / 1e9, 1),
        "embed": embed,
        "gpu": {"assumed_sustained_tflops": gpu_tflops, "embed_hours": round(gpu_hours, 2), "measured": False},
        "index": {"factory": factory, "bytes_per_vector": round(bytes_per_vector(factory)),
                  "memory_gib": round(index_gib, 1),
                  "memory_gib_per_shard": {str(s): round(index_gib / s, 1) for s in (1, 4, 8, 16)},
                  "graph_build_hours": {f"{c} cores": round(hnsw_build_hours(passages, c, *hnsw), 1)
                                        for c in (m.cores, node_cores)},
                  # one file a node (ray_index_parts): the nodes build their files side by side
                  "graph_build_hours_a_file_a_node": {
                      f"{n} x {node_cores} cores": round(hnsw_build_hours(passages // n, node_cores, *hnsw), 2)
                      for n in nodes if n > 1},
                  "graph_measured": dict(zip(("seconds", "vectors", "cores"), hnsw))},
        "disk_gib": {"wiki": round(passages * (m.wiki_bytes_per_passage + bytes_per_vector(factory))
                                   / 2**30),
                     "se": round(passages * m.se_bytes_per_passage / 2**30)},
    }


def corpus_tokens(path: Path, every: int = 500, limit: int = 2000, words: int = 100) -> float:
    """Mean encoder tokens (truncated where the encoder truncates) of every `every`-th passage of a JSONL corpus,
    cut into passages as `eor index` cuts it."""
    from itertools import islice

    from retrievers.corpus import read_jsonl, to_passages
    from retrievers.encoder import resolve_encoder_path
    from retrievers.onnx_encoder import MAX_TOKENS
    from retrievers.sources.dense_build import passage_text
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(resolve_encoder_path())
    texts = [passage_text(p) for p in islice(to_passages(read_jsonl(path), words), 0, every * limit, every)]
    counts = [len(tokenizer(t, truncation=True, max_length=MAX_TOKENS)["input_ids"]) for t in texts]
    return sum(counts) / len(counts)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--report", action="append", required=True, type=Path, help="a bench.scale_index report")
    ap.add_argument("--corpus", type=Path, default=Path("var/corpora/scale-1m.jsonl.gz"))
    ap.add_argument("--passages", type=int, default=DPR_WIKI_PASSAGES)
    ap.add_argument("--node-cores", type=int, default=32)
    ap.add_argument("--nodes", type=int, action="append", help="cluster sizes (default 1, 4, 16)")
    ap.add_argument("--gpu-tflops", type=float, default=100.0,
                    help="assumed sustained TFLOPS of one GPU on this small encoder (not measured)")
    ap.add_argument("--hnsw-seconds", type=float, default=HNSW_SECONDS, help="a measured graph build's seconds")
    ap.add_argument("--hnsw-vectors", type=int, default=HNSW_VECTORS, help="... over this many vectors")
    ap.add_argument("--hnsw-cores", type=int, default=HNSW_CORES, help="... on this many cores")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    reports = [json.loads(p.read_text()) for p in args.report]
    result = plan(measured(reports, corpus_tokens(args.corpus)), args.passages, args.node_cores,
                  args.nodes or [1, 4, 16], args.gpu_tflops,
                  hnsw=(args.hnsw_seconds, args.hnsw_vectors, args.hnsw_cores))
    emit_json(result, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
