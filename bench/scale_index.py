"""The scale benchmark's figures for one built index: what the build took and what search costs.

    python -m bench.scale_index --index scale-100k --time-log var/bench/scale/build-100k.err \
        [--questions 200] [--generation N ...] [--out var/bench/scale/scale-100k.json]

Build (from the index's own records, dense_build.py's meta.json, and `/usr/bin/time -v`'s log of
the `eor index` run when given): passages, the index kind and its recall@10 against exact (the build's, on
passages as queries; and as a source serves it, on the NQ questions' vectors and on the build's own
queries again, `recall_at_10_questions`), the
embedding step's passages/s beside the encoder's own rate in the same run (its seconds inside
`encode_corpus`: what the pipeline adds is the difference), per core, peak RSS and disk.
Search: each source's latency per call at batch 1 and at batch 32 (p50 / p99, ms) over NQ questions
of ../shared/data, the query's encoding included (no memo: until session 43 the recall pass left every
query's vector remembered, so Wiki's figures were the index and the passages' fetch alone), and the gold
passage's recall@10 among the distractors. Answer quality at each
size is `eor eval` over the same index (docs/benchmarks.md, "Real corpora").
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from bench.common import DEFAULT_QUESTIONS, emit_json, read_questions
from retrievers.corpus import base_id
from retrievers.encoder import Encoder
from retrievers.sources import generations
from retrievers.sources.lucene import page_members
from serve.builder import index_path, make_sources
from serve.config import EorConfig, IndexConfig


def peak_rss_gib(time_log: Path) -> float | None:
    """`/usr/bin/time -v`'s "Maximum resident set size" (KiB) of the build, in GiB."""
    if not time_log.exists():
        return None
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", time_log.read_text(errors="replace"))
    return round(int(m.group(1)) / 2**20, 2) if m else None


def disk_gib(path: Path) -> float:
    out = subprocess.run(["du", "-sk", str(path)], capture_output=True, text=True, check=True).stdout
    return round(int(out.split()[0]) / 2**20, 2)


def latencies(search, queries: list[str], batch: int, k: int) -> dict:
    times = []
    for i in range(0, len(queries) - batch + 1, batch):
        t = time.perf_counter()
        search(queries[i : i + batch], k)
        times.append(1000 * (time.perf_counter() - t))
    return {"calls": len(times), "p50_ms": round(float(np.percentile(times, 50)), 2),
            "p99_ms": round(float(np.percentile(times, 99)), 2)}


def build_figures(root: Path, time_log: Path | None) -> dict:
    wiki = json.loads((root / "wiki" / "meta.json").read_text())
    cores = os.cpu_count() or 1
    out = {k: wiki.get(k) for k in ("passages", "factory", "search", "recall_at_10", "corpus_backend",
                                    "embed_seconds", "encoder_seconds", "build_seconds", "embedded_now")}
    if wiki.get("embedded_now") and wiki.get("embed_seconds"):
        build_rate = wiki["embedded_now"] / wiki["embed_seconds"]
        out["embed_passages_per_s"] = round(build_rate, 1)
        out["embed_passages_per_s_per_core"] = round(build_rate / cores, 1)
        if wiki.get("encoder_seconds"):
            own = wiki["embedded_now"] / wiki["encoder_seconds"]
            out["encoder_own_passages_per_s"] = round(own, 1)
            out["build_vs_encoder_rate"] = round(build_rate / own, 3)
    out["disk_gib"] = {p.name: disk_gib(p) for p in sorted(root.iterdir()) if p.is_dir()}
    if time_log is not None:
        out["peak_rss_gib"] = peak_rss_gib(time_log)
    return out


def ann_figures(root: Path, factory: str, queries: np.ndarray) -> dict:
    """An ANN index of `factory` over the same vectors (built in a scratch folder beside the shards,
    the build's own tuning to recall@10 >= 0.95): its recall, knob and search time at batch 1 / 32, searched
    as a source searches (a lone query on one thread, the rows rescored by the stored vectors)."""
    import tempfile

    import faiss

    from retrievers.sources.dense_build import SHARDS_DIR, DenseIndexSettings, index_file
    from retrievers.sources.dense_index import build_faiss
    from retrievers.sources.knn import search_index
    from retrievers.sources.rescore import StoredVectors, rescored_top

    wiki = json.loads((root / "wiki" / "meta.json").read_text())
    settings = DenseIndexSettings(factory=factory)
    with tempfile.TemporaryDirectory(dir=root) as tmp:
        (Path(tmp) / SHARDS_DIR).symlink_to(root / "wiki" / SHARDS_DIR)
        t = time.perf_counter()
        meta = build_faiss(Path(tmp), wiki["shards"], wiki["passages"], settings)
        seconds = time.perf_counter() - t
        index = faiss.read_index(str(Path(tmp) / index_file(0)))
    for knob, value in meta["search"].items():
        faiss.ParameterSpace().set_index_parameter(index, knob, value)
    depth = settings.rescore_for(factory)
    stored = StoredVectors(root / "wiki" / SHARDS_DIR, wiki["shards"]) if depth > 1 else None

    def search(q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        return rescored_top(lambda qs, m: search_index(index, qs, m), stored, q, k, depth)
    return {"factory": factory, "recall_at_10": meta["recall_at_10"], "search": meta["search"],
            "build_seconds": round(seconds, 1), "batch_1": latencies_vec(search, queries, 1),
            "batch_32": latencies_vec(search, queries, 32)}


def question_recall(wiki: Path, encoder: Encoder, vectors: np.ndarray) -> dict:
    """The dense index's recall@10 against exact search as a source serves it (its knob, its rows rescored), the
    questions' vectors as queries, and the build's own queries (passages of the corpus, their own rows left
    out): what a real question loses to the ANN, beside the build's figure."""
    from retrievers.sources.dense import DenseSource
    from retrievers.sources.dense_build import SHARDS_DIR, load_vectors
    from retrievers.sources.dense_index import rows_of, sample_ids
    from retrievers.sources.knn import exact_topk, recall_at, without_own_row

    source = DenseSource(str(wiki), encoder).load()
    meta, vecs = source.meta, load_vectors(wiki / SHARDS_DIR, source.meta["shards"])
    own = sample_ids(vecs.lengths, meta.get("recall_queries", 500), seed=1)  # the build's queries (dense_index.py)
    passages = rows_of(vecs, own)
    exact_own = without_own_row(exact_topk(passages, vecs, 21), own, 20)
    served_own = without_own_row(source.top_rows(passages, 11), own, 10)
    return {"factory": meta["factory"], "search": meta["search"],
            "rescore": source.settings.rescore_for(meta["factory"]), "questions": len(vectors),
            "recall_at_10": round(recall_at(source.top_rows(vectors, 10)[1], exact_topk(vectors, vecs, 20)), 4),
            "passage_queries": len(own), "recall_at_10_passages": round(recall_at(served_own[1], exact_own), 4)}


def search_figures(sources: dict, gen, root: Path, rows: list[dict]) -> dict:
    """Each source's gold recall@10 and latency at batch 1 and 32, at generation `gen`."""
    queries = [r["question"] for r in rows]
    members = page_members(gen.source_dir(root, "SE"))
    delta = gen.delta_dir("SE")
    if delta is not None and (delta / "pages.jsonl").exists():
        members.update(page_members(delta))
    out = {}
    for name, src in sources.items():
        src.load()
        src.search(queries[:2], 10)  # warm: the first call loads and compiles
        hits = src.search(queries, 10)
        if name == "SE":
            found = [{m for p in row for m in members[p.pid]} for row in hits]
        else:
            found = [{base_id(p.pid) for p in row} for row in hits]
        recall = float(np.mean([bool(f & set(r["gold_pids"])) for f, r in zip(found, rows)]))
        out[name] = {"gold_recall_at_10": round(recall, 4), "batch_1": latencies(src.search, queries, 1, 10),
                     "batch_32": latencies(src.search, queries, 32, 10)}
    return out


def latencies_vec(search, vectors: np.ndarray, batch: int) -> dict:
    return latencies(lambda q, k: search(np.ascontiguousarray(q), k), vectors, batch, 10)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--index", required=True)
    ap.add_argument("--time-log", type=Path, help="the build's /usr/bin/time -v output")
    ap.add_argument("--questions", type=int, default=200, help="NQ questions searched (the first N)")
    ap.add_argument("--ann", action="append", default=[], metavar="FACTORY",
                    help="also an ANN index of this faiss factory over the same vectors (recall, latency)")
    ap.add_argument("--generation", type=int, action="append", default=[], metavar="N",
                    help="search at index generation N (0: the base; repeat it to set them side by side in one "
                         "run); default: the one published")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    root = index_path(args.index)
    report = {"index": args.index, "cores": os.cpu_count(), "build": build_figures(root, args.time_log)}
    rows = read_questions(DEFAULT_QUESTIONS, "nq-open-oracle", args.questions)
    queries = [r["question"] for r in rows]
    config = EorConfig(index=IndexConfig(name=args.index))
    report["search"] = {}
    for n in args.generation or [generations.current_number(root)]:
        gen = generations.load(root, n)
        # no memo of query vectors: each search encodes its question, as a new question's does in the service
        figures = search_figures(make_sources(config, Encoder(memo_size=0), generation=gen), gen, root, rows)
        if args.generation:
            figures = {"generation": n, "documents_added": len(gen.docs()), "ids_hidden": len(gen.hidden), **figures}
            report["search"].setdefault("generations", []).append(figures)
        else:
            report["search"] = figures
    encoder = Encoder()
    vectors = encoder.encode(queries)
    current = generations.load(root, generations.current_number(root))
    report["build"]["recall_at_10_questions"] = question_recall(current.source_dir(root, "Wiki"), encoder, vectors)
    report["ann"] = [ann_figures(root, f, vectors) for f in args.ann]
    emit_json(report, args.out)
    return report


if __name__ == "__main__":
    main(sys.argv[1:])
