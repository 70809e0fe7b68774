"""A generation's dense vectors, never embedded twice: reused by the next delta, merged into a base.

Each generation's delta holds every document added since the base (retrievers/sources/generations.py);
`reusing_embedder` embeds only the passages the previous delta did not hold, so an add costs its own
documents, whatever the delta holds already.

The base's passages, less the rows of hidden documents, then the delta's, are copied shard by
shard with the vectors already computed for them (the delta's were embedded by `eor index add`),
into a new index folder; the faiss index is built over them as `eor index` builds one (its ANN
trained again, its knob tuned again). It is written into the merged generation's own folder, which
no service reads before that generation is published.
"""
from __future__ import annotations

import itertools
import json
import time
from dataclasses import asdict
from pathlib import Path
from typing import Iterator

import numpy as np

from retrievers.corpus import Document
from retrievers.sources.dense_build import (FORMAT, META_FILE, SHARDS_DIR, DenseIndexSettings, Embedder, chunks,
                                            passage_text, vectors_path, write_vectors)
from retrievers.sources.dense_index import build_faiss
from retrievers.sources.passage_store import PassageStore, read_shard, write_shard


def _rows(index_dir: Path, skip: set[int]) -> Iterator[tuple[Document, np.ndarray]]:
    """A finished index's passages with their vectors, in row order, those in `skip` left out."""
    meta = json.loads((index_dir / META_FILE).read_text(encoding="utf-8"))
    row = 0
    for shard in range(meta["shards"]):
        vectors = np.load(vectors_path(index_dir / SHARDS_DIR, shard), mmap_mode="r")
        for passage, vector in zip(read_shard(index_dir / SHARDS_DIR, shard), vectors):
            if row not in skip:
                yield passage, vector
            row += 1


def reusing_embedder(encoder, previous_dir: str | Path | None) -> Embedder:
    """Embed shards in this process, a passage the finished index at `previous_dir` holds (same
    title and text) taking its vector from there."""
    known: dict[str, np.ndarray] = {}
    if previous_dir is not None and (Path(previous_dir) / META_FILE).exists():
        known = {passage_text(p): np.asarray(v) for p, v in _rows(Path(previous_dir), set())}

    def embed(folder: Path, shards) -> Iterator[tuple[int, np.ndarray, float]]:
        for shard in shards:
            texts = [passage_text(p) for p in read_shard(folder, shard)]
            missing = list(dict.fromkeys(t for t in texts if t not in known))
            t = time.perf_counter()
            if missing:
                known.update(zip(missing, encoder.encode_corpus(missing)))
            yield shard, np.stack([known[x] for x in texts]).astype(np.float32), time.perf_counter() - t
    return embed


def merge_dense_index(base_dir: str | Path, delta_dir: str | Path | None, hidden: frozenset[str],
                      out_dir: str | Path, settings: DenseIndexSettings) -> dict:
    """The base at `base_dir` without the `hidden` documents, plus the delta at `delta_dir` (None:
    none), as a finished index at `out_dir` (a new folder); returns its meta."""
    base, out = Path(base_dir), Path(out_dir)
    meta = json.loads((base / META_FILE).read_text(encoding="utf-8"))
    skip = set(PassageStore(base / SHARDS_DIR, meta["shards"]).rows_of(hidden).tolist()) if hidden else set()
    folder = out / SHARDS_DIR
    parts = [_rows(base, skip)]
    if delta_dir is not None and (Path(delta_dir) / META_FILE).exists():
        parts.append(_rows(Path(delta_dir), set()))
    shards = passages = 0
    for chunk in chunks(itertools.chain(*parts), settings.shard_passages):
        write_shard(folder, shards, [p for p, _ in chunk])
        write_vectors(folder, shards, np.stack([v for _, v in chunk]))
        shards, passages = shards + 1, passages + len(chunk)
    if not passages:
        raise ValueError(f"merging the generation into {base} would leave no passages: every document is deleted")
    merged = build_faiss(out, shards, passages, settings)
    merged.update({k: meta[k] for k in ("encoder", "corpus_backend", "passage_words") if k in meta})
    merged.update({"format": FORMAT, "shards": shards, "settings": asdict(settings),
                   "merged": {"base": str(base), "base_rows_left_out": len(skip),
                              "delta": str(delta_dir) if len(parts) > 1 else None}})
    (out / META_FILE).write_text(json.dumps(merged, indent=1), encoding="utf-8")
    return merged
