"""The dense (Wiki) index, built streaming and resumably, chosen by size.

Three steps, each resumable at a shard (`DenseIndexSettings.shard_passages` passages):
1. split: the corpus is read as a stream and cut into ~100-word passages, written a shard at a
   time to `shards/` (passage_store.py); peak memory is one shard, whatever the corpus size;
2. embed: every shard without vectors is embedded by an `Embedder` (in this process by default;
   serve/indexing.py's runs a Ray Data job over a cluster's encoder actors) and written as
   `NNNNN.vectors.npy` by rename, so a killed build keeps every finished shard;
3. index: exact inner product below `exact_below` passages, else a faiss `index_factory` index
   (HNSW with SQ8 by default: its SQ8 trained on a sample, filled shard by shard), split into
   `index_shards` files with the passages' rows as ids (dense_index.py: a file at a time here, or a
   Ray task a file on a cluster); the build measures recall@10 against exact search on a sample and,
   where the knob (`ef_search`, `nprobe`) is 0, takes its smallest power of two that reaches
   `target_recall`. meta.json, written last, is the finished index.
Why HNSW (session 42, 287k of the 1M corpus's vectors, 2 cores): MiniLM's 384-d neighbourhoods here
are wide (the 10th and 20th neighbours 0.016 apart), so IVF4096,SQ8 reached recall@10 0.95 only
probing 1,024 of 4,096 lists (7.2 ms, a quarter of the rows: ~27 ms at 1M), HNSW32,SQ8 at efSearch
512 in 3.5 ms, and a graph's search grows about with log N, not N. efConstruction 100 against
faiss's 40: recall@10 at efSearch 512 0.970 against 0.948, for a build 2.7x as long (404 s).
A build remembers what it was started with (`build.json`): one resumed with other settings
or another corpus is refused, naming what differs.
"""
from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, Sequence, TextIO

import numpy as np

from retrievers.corpus import Document, to_passages
from retrievers.sources import build_lock
from retrievers.sources.passage_store import read_shard, shard_done, shard_stem, write_shard

if TYPE_CHECKING:
    from retrievers.encoder import CorpusEncoder
    from retrievers.sources.dense_index import PartBuilder

AUTO_ANN = "HNSW32,SQ8"  # "auto"'s index at or above exact_below passages (the module's docstring: why)
SHARDS_DIR = "shards"
BUILD_FILE = "build.json"
META_FILE = "meta.json"
FORMAT = 2
VECTORS_SUFFIX = ".vectors.npy"

# embed(folder, shards) -> (shard, vectors, encoder seconds) as each is done, in any order: the
# shards' passages are read from `folder` (passage_store.py); the seconds are the encoder's own
# (its rate, beside the build's: the pipeline's overhead); in this process, or on a cluster's
# encoder actors (serve/indexing.py)
Embedder = Callable[[Path, Sequence[int]], Iterator[tuple[int, np.ndarray, float]]]


@dataclass(frozen=True)
class DenseIndexSettings:
    """How the dense index is built and searched: `index.sources.<name>.options` in the config."""

    factory: str = "auto"  # a faiss index_factory string ("HNSW32,SQ8", "IVF4096,SQ8"), "Flat", or "auto" (below)
    exact_below: int = 200_000  # "auto": exact (Flat) below this many passages, else AUTO_ANN
    nprobe: int = 0  # IVF lists searched; 0: the smallest that reaches target_recall, found at build
    ef_search: int = 0  # HNSW's efSearch; 0: likewise
    ef_construction: int = 100  # HNSW's efConstruction, its graph's quality (faiss's own default: 40)
    target_recall: float = 0.95  # recall@10 against exact, on `recall_queries` sampled passages
    recall_queries: int = 500
    index_shards: int = 1  # faiss files the rows are split into (the service: one actor each)
    shard_passages: int = 4096  # the unit of writing, embedding and resuming
    train_sample: int = 100_000  # vectors an IVF or SQ8 is trained on
    rescore: int = 2  # an ANN index is asked for rescore x k rows, ordered by their stored vectors (1: by its codes)

    def __post_init__(self) -> None:
        for name in ("exact_below", "index_shards", "shard_passages", "train_sample", "recall_queries",
                     "ef_construction", "rescore"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.nprobe < 0 or self.ef_search < 0:
            raise ValueError("nprobe and ef_search must be >= 0 (0: tuned at build)")
        if not 0 < self.target_recall <= 1:
            raise ValueError(f"target_recall must be in (0, 1], got {self.target_recall}")

    @classmethod
    def from_options(cls, options: dict, where: str = "options") -> "DenseIndexSettings":
        """The config's options, an unknown key refused with the nearest known name."""
        import difflib

        known = [f.name for f in fields(cls)]
        for key in options:
            if key not in known:
                near = difflib.get_close_matches(key, known, n=1)
                raise ValueError(f"{where}: unknown key {key!r}" + (f" (did you mean {near[0]!r}?)" if near else "")
                                 + f"; known: {', '.join(known)}")
        return cls(**options)

    def factory_for(self, passages: int) -> str:
        if self.factory != "auto":
            return self.factory
        return "Flat" if passages < self.exact_below else AUTO_ANN

    def rescore_for(self, factory: str) -> int:
        """How many times k rows a search asks of an index of `factory` (rescore.py): 1 for exact search."""
        return 1 if factory == "Flat" else self.rescore


def vectors_path(folder: Path, shard: int) -> Path:
    stem = shard_stem(folder, shard)
    return stem.with_name(stem.name + VECTORS_SUFFIX)


def write_vectors(folder: Path, shard: int, vectors: np.ndarray) -> None:
    path = vectors_path(folder, shard)
    tmp = path.with_name(path.name + ".tmp.npy")
    np.save(tmp, np.ascontiguousarray(vectors, dtype=np.float32))
    tmp.replace(path)


def local_embedder(encoder: CorpusEncoder) -> Embedder:
    """Embed shard after shard in this process (what a build without a cluster runs)."""
    def embed(folder: Path, shards: Sequence[int]) -> Iterator[tuple[int, np.ndarray, float]]:
        for shard in shards:
            yield (shard, *embed_shard(encoder, folder, shard))
    return embed


def embed_shard(encoder: CorpusEncoder, folder: Path, shard: int) -> tuple[np.ndarray, float]:
    """One shard's vectors and the encoder's seconds: what every embedder computes, wherever it runs."""
    texts = [passage_text(p) for p in read_shard(folder, shard)]
    t = time.perf_counter()
    vectors = encoder.encode_corpus(texts)
    return vectors, time.perf_counter() - t


def passage_text(p: Document) -> str:
    """What a passage is embedded as (and was, before streaming builds): its title, then its text."""
    return f"{p.title}. {p.text}" if p.title else p.text


def chunks(items: Iterable[Document], size: int) -> Iterator[list[Document]]:
    chunk: list[Document] = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def recorded_corpus_kind(out_dir: str | Path) -> str | None:
    """The corpus backend the index at `out_dir` (finished, or begun) embeds with; None where there is none."""
    for name in (META_FILE, BUILD_FILE):
        path = Path(out_dir) / name
        if path.exists():
            data = json.loads(path.read_text(encoding="utf-8"))
            kind = data.get("corpus_backend") or data.get("fingerprint", {}).get("corpus_backend")
            if kind:
                return kind
    return None


def as_recorded(encoder: CorpusEncoder, out_dir: str | Path) -> CorpusEncoder:
    """`encoder`, or where it would choose its backend itself ("auto") a copy with the one the index at
    `out_dir` records: a resumed build, an added document and a cluster's actors embed as the index began
    (a machine or release whose "auto" differs would otherwise be refused, or mix two models' vectors)."""
    kind = recorded_corpus_kind(out_dir)
    if kind and kind != encoder.corpus_kind and getattr(encoder, "corpus_backend", None) == "auto":
        return replace(encoder, corpus_backend=kind)
    return encoder


def _start(out: Path, fingerprint: dict) -> dict:
    """The build's state, new or resumed; another build's folder is refused, saying what differs."""
    path = out / BUILD_FILE
    if path.exists():
        state = json.loads(path.read_text(encoding="utf-8"))
        old = state.get("fingerprint", {})
        differ = sorted(k for k in set(old) | set(fingerprint) if old.get(k) != fingerprint.get(k))
        if differ:
            raise ValueError(f"the index at {out} was started with other {', '.join(differ)} "
                             f"({', '.join(f'{k}: {old.get(k)!r}' for k in differ)}): resume it as it was, "
                             "or start again with --fresh")
        return state
    out.mkdir(parents=True, exist_ok=True)
    state = {"fingerprint": fingerprint, "shards": None, "passages": None}
    _save(out, state)
    return state


def _save(out: Path, state: dict) -> None:
    tmp = out / (BUILD_FILE + ".tmp")
    tmp.write_text(json.dumps(state, indent=1), encoding="utf-8")
    tmp.replace(out / BUILD_FILE)


def split(docs: Iterable[Document], folder: Path, shard_passages: int, passage_words: int) -> tuple[int, int]:
    """Write the passage shards not written yet; (shards, passages). Shards already there are read
    past, not rewritten: the corpus is the same (the fingerprint says so) and so are they."""
    shards = passages = 0
    for i, chunk in enumerate(chunks(to_passages(docs, passage_words), shard_passages)):
        if not shard_done(folder, i):
            write_shard(folder, i, chunk)
        shards, passages = i + 1, passages + len(chunk)
    return shards, passages


def build_dense_index(docs: Iterable[Document], out_dir: str | Path, encoder: CorpusEncoder, passage_words: int = 100,
                      settings: DenseIndexSettings = DenseIndexSettings(), corpus_id: str = "",
                      embedder: Embedder | None = None, progress: TextIO | None = None,
                      index_parts: PartBuilder | None = None) -> dict:
    """Build (or resume) the index at `out_dir`; returns its meta (passages, factory, recall@10...).
    `corpus_id` names the corpus (path, size, time) so a resume over another one is refused. `embedder` and
    `index_parts` run the embedding and the index files elsewhere (a Ray cluster: serve/indexing.py)."""
    from retrievers.sources.dense_index import build_faiss

    out = Path(out_dir)
    encoder = as_recorded(encoder, out)
    folder = out / SHARDS_DIR
    fingerprint = {"corpus": corpus_id, "encoder": encoder.name, "passage_words": passage_words,
                   "shard_passages": settings.shard_passages, "corpus_backend": encoder.corpus_kind}
    meta_path = out / META_FILE
    state = _start(out, fingerprint)
    build_lock.hold(out)  # a source asked to load meanwhile waits for this build (build_lock.py)
    if meta_path.exists():
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        if meta.get("format") == FORMAT and meta.get("settings") == asdict(settings):
            build_lock.release(out)
            return meta  # finished with these settings: nothing to do
        meta_path.unlink()
    t0 = time.time()
    if state["shards"] is None:
        state["shards"], state["passages"] = split(docs, folder, settings.shard_passages, passage_words)
        _save(out, state)
    shards, passages = state["shards"], state["passages"]
    pending = [i for i in range(shards) if not vectors_path(folder, i).exists()]
    embed_s, encode_s = _embed(pending, folder, embedder or local_embedder(encoder), passages, shards, progress)
    encoder.release_corpus()  # the index step's memory beside the encoder's, at 1M: ~0.75 GiB beside ~1 GiB
    t_index = time.time()
    meta = build_faiss(out, shards, passages, settings, index_parts)
    meta.update({"format": FORMAT, "encoder": encoder.name, "corpus_backend": encoder.corpus_kind,
                 "passage_words": passage_words, "shards": shards, "settings": asdict(settings),
                 "embedded_now": sum(_count(folder, i) for i in pending), "embed_seconds": round(embed_s, 1),
                 "encoder_seconds": round(encode_s, 1), "index_seconds": round(time.time() - t_index, 1),
                 "build_seconds": round(time.time() - t0, 1)})
    tmp = out / (META_FILE + ".tmp")
    tmp.write_text(json.dumps(meta, indent=1), encoding="utf-8")
    tmp.replace(meta_path)
    build_lock.release(out)
    return meta


def _count(folder: Path, shard: int) -> int:
    return int(np.load(vectors_path(folder, shard), mmap_mode="r").shape[0])


def _embed(pending: list[int], folder: Path, embed: Embedder, passages: int, shards: int,
           progress: TextIO | None) -> tuple[float, float]:
    """(wall seconds of the step, the encoders' own seconds summed)."""
    t, encoder_s = time.time(), 0.0
    if not pending:
        return 0.0, 0.0
    bar = None
    if progress is not None:
        from tqdm import tqdm

        done = sum(_count(folder, i) for i in range(shards) if i not in set(pending))
        bar = tqdm(total=passages, initial=done, desc="embedding passages", unit="passage", file=progress)
    for shard, vectors, seconds in embed(folder, pending):
        write_vectors(folder, shard, vectors)
        encoder_s += seconds
        if bar is not None:
            bar.update(len(vectors))
    if bar is not None:
        bar.close()
    return time.time() - t, encoder_s


class ShardVectors(Sequence[np.ndarray]):
    """Every shard's vectors, each read from its file when asked and let go after: never all held. (A memory
    map of them all would keep every page read in the build's resident set: 1.5 GiB at 1M passages.)"""

    def __init__(self, folder: Path, shards: int) -> None:
        self.paths = [vectors_path(folder, i) for i in range(shards)]
        self.lengths = [_count(folder, i) for i in range(shards)]

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> np.ndarray:  # type: ignore[override]
        if not -len(self) <= i < len(self):
            raise IndexError(i)
        return np.load(self.paths[i])


def load_vectors(folder: Path, shards: int) -> ShardVectors:
    return ShardVectors(folder, shards)


def index_file(k: int) -> str:
    return f"index-{k:02d}.faiss"
