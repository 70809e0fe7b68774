"""The dense build's last step: the faiss index over every shard's vectors, in `index_shards` files.

The trained template (SQ8's ranges, IVF's lists) is made once here; each file is then filled with its
rows (the passages' row numbers as ids), searched with the recall queries at each value of its search
knob and written, by a `PartBuilder`: in this process one file after another (`local_parts`: the step
holds one file's index at a time, so `index_shards` divides its memory), or on a Ray cluster one task a
file (serve/indexing.py: `ray_index_parts`) given a node's CPUs, so that each node holds one file's graph at
a time and `index_shards` divides the step's time over the nodes too (21M on paper: 5.3 h of one 2-core node's graph, docs/benchmarks.md).
Every builder runs `build_part`, wherever it runs: the files are equivalent either way (byte for byte for IVF and
Flat; an HNSW graph filled by several threads differs from run to run, here too).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Sequence

import numpy as np

from retrievers.sources.dense_build import (SHARDS_DIR, DenseIndexSettings, ShardVectors, index_file, load_vectors,
                                            vectors_path)
from retrievers.sources.knn import exact_topk, merge_topk, recall_at, search_knob, set_knob, without_own_row
from retrievers.sources.rescore import StoredVectors, rescored_top

Found = dict[int, tuple[np.ndarray, np.ndarray]]  # knob value -> the recall queries' (scores, ids) in one file


@dataclass(frozen=True)
class IndexPart:
    """One index file's work: its number, its shards [first, last), the row number each shard starts at."""

    k: int
    first: int
    last: int
    starts: tuple[int, ...]


@dataclass(frozen=True)
class PartInputs:
    """What every file's builder is handed: the trained, empty index (faiss-serialized), the recall queries,
    the knob and the values the build tries, the rows each query asks (k, or rescore x k, and its own row)."""

    template: bytes
    queries: np.ndarray
    knob: str
    ladder: tuple[int, ...]
    depth: int = 11


# (index folder, the parts, their inputs) -> (k, found) for each part as it is written, in any order
PartBuilder = Callable[[Path, Sequence[IndexPart], PartInputs], Iterator[tuple[int, Found]]]


def build_part(out: Path, part: IndexPart, inputs: PartInputs) -> Found:
    """One file: the template filled with its shards' vectors, searched at each knob value, written by rename."""
    import faiss

    index = faiss.deserialize_index(np.frombuffer(inputs.template, dtype=np.uint8))
    if not _takes_ids(index):
        index = faiss.IndexIDMap(index)  # ids alone: IndexIDMap2's reverse map (~42 B a vector) unused
    for i in range(part.first, part.last):
        vectors = np.load(vectors_path(out / SHARDS_DIR, i))
        index.add_with_ids(np.ascontiguousarray(vectors, dtype=np.float32),
                           np.arange(part.starts[i], part.starts[i + 1], dtype=np.int64))
    found = {}
    for value in inputs.ladder:
        if inputs.knob:
            set_knob([index], inputs.knob, value)
        found[value] = index.search(inputs.queries, inputs.depth)
    path = out / index_file(part.k)
    tmp = path.with_name(path.name + ".tmp")
    faiss.write_index(index, str(tmp))
    tmp.replace(path)
    return found


def local_parts(out: Path, parts: Sequence[IndexPart], inputs: PartInputs) -> Iterator[tuple[int, Found]]:
    """Each file in turn in this process (what a build without a cluster runs)."""
    for part in parts:
        yield part.k, build_part(out, part, inputs)


def build_faiss(out: Path, shards: int, passages: int, settings: DenseIndexSettings,
                index_parts: PartBuilder | None = None) -> dict:
    """The faiss index (in `index_shards` files) over every shard's vectors, and its recall@10 against exact
    (`recall_queries` passages of the corpus as queries, each one's own row left out of both sides), the rows
    found ordered as a source orders them (rescore.py). The knob value chosen is meta.json's `search`, which
    every reader applies (dense.py: load_index_shards); a file holds the last value tried."""
    import faiss

    vecs = load_vectors(out / SHARDS_DIR, shards)
    dim = int(vecs[0].shape[1]) if vecs else 0
    factory = settings.factory_for(passages)
    template = faiss.index_factory(dim, factory, faiss.METRIC_INNER_PRODUCT)
    graph = faiss.downcast_index(template)
    if hasattr(graph, "hnsw"):
        graph.hnsw.efConstruction = settings.ef_construction
    if not template.is_trained:
        template.train(sample_rows(vecs, settings.train_sample, seed=0))
    rows = split_rows(vecs.lengths, settings.index_shards)
    starts = tuple(int(x) for x in np.cumsum([0, *vecs.lengths]))
    own = sample_ids(vecs.lengths, settings.recall_queries, seed=1)  # the queries: passages of the corpus
    queries = rows_of(vecs, own)
    exact = without_own_row(exact_topk(queries, vecs, 21), own, 20)
    knob, ladder = knob_ladder(template, settings)
    rescore = settings.rescore_for(factory)  # a source asks for rescore x its top 10 and the own row (rescore.py)
    inputs = PartInputs(faiss.serialize_index(template).tobytes(), queries, knob, tuple(ladder), 11 * rescore)
    parts = [IndexPart(k, first, last, starts) for k, (first, last) in enumerate(rows)]
    found: dict[int, Found] = dict((index_parts or local_parts)(out, parts, inputs))
    if sorted(found) != [p.k for p in parts]:
        raise RuntimeError(f"the index step returned files {sorted(found)} of {len(parts)}")
    by_value = {value: [found[p.k][value] for p in parts] for value in ladder}
    stored = StoredVectors(out / SHARDS_DIR, shards) if rescore > 1 else None

    def served(value: int) -> tuple[np.ndarray, np.ndarray]:  # the rows a source would return at this value
        return rescored_top(lambda _, m: merge_topk(by_value[value], m), stored, queries, 11, rescore)

    recalls = {value: recall_at(without_own_row(served(value), own, 10)[1], exact) for value in ladder}
    value = next((v for v in ladder if recalls[v] >= settings.target_recall), ladder[-1])
    return {"passages": passages, "dim": dim, "factory": factory,
            "index_shards": [[starts[a], starts[b] - starts[a]] for a, b in rows],
            "search": {knob: value} if knob else {}, "rescore": settings.rescore_for(factory),
            "recall_at_10": round(recalls[value], 4),
            "recall_queries": len(queries)}


def _takes_ids(index) -> bool:
    import faiss

    try:
        faiss.extract_index_ivf(index)
        return True
    except RuntimeError:
        return False


def split_rows(counts: Sequence[int], parts: int) -> list[tuple[int, int]]:
    """Build shards [first, last) for each of `parts` index files, by passages, contiguous."""
    parts = max(1, min(parts, len(counts)))
    total, out, first, acc = sum(counts), [], 0, 0
    for i, c in enumerate(counts):
        acc += c
        if len(out) < parts - 1 and acc >= total * (len(out) + 1) / parts:
            out.append((first, i + 1))
            first = i + 1
    out.append((first, len(counts)))
    return out


def sample_ids(lengths: Sequence[int], n: int, seed: int) -> np.ndarray:
    """`n` row numbers drawn without replacement across shards of these lengths (all when fewer), in order."""
    total = sum(lengths)
    return np.sort(np.random.default_rng(seed).choice(total, size=min(n, total), replace=False))


def sample_rows(vecs: Sequence[np.ndarray], n: int, seed: int) -> np.ndarray:
    """The vectors of `sample_ids`' rows (the same seed, the same rows)."""
    return rows_of(vecs, sample_ids(_lengths(vecs), n, seed))


def rows_of(vecs: Sequence[np.ndarray], rows: np.ndarray) -> np.ndarray:
    """The vectors at these row numbers (in order) across the shards, each shard read once."""
    lengths = _lengths(vecs)
    starts = np.cumsum([0, *lengths])
    shard = np.searchsorted(starts, rows, side="right") - 1
    picked = [vecs[s][rows[shard == s] - starts[s]] for s in np.unique(shard)]
    return np.concatenate(picked).astype(np.float32)


def knob_ladder(index, settings: DenseIndexSettings) -> tuple[str, list[int]]:
    """The index's search knob and the values the build tries, smallest first: the configured one, else powers
    of two up to the number of lists (IVF) or 1,024 (efSearch). The build keeps the first whose recall@10
    reaches the target, or the last."""
    knob = search_knob(index)
    if not knob:
        return "", [0]
    fixed = settings.nprobe if knob == "nprobe" else settings.ef_search
    if fixed:
        return knob, [fixed]
    import faiss

    top = faiss.extract_index_ivf(index).nlist if knob == "nprobe" else 1024
    return knob, [2**i for i in range(top.bit_length())] + ([top] if top & (top - 1) else [])


def _lengths(vecs: Sequence[np.ndarray]) -> list[int]:
    return list(vecs.lengths) if isinstance(vecs, ShardVectors) else [len(v) for v in vecs]
