"""Wiki: dense passage retrieval (sentence encoder + faiss) over ~100-word passages."""
from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Iterable, Sequence, TextIO

import numpy as np

from retrievers.corpus import Document
from retrievers.encoder import Encoder
from retrievers.sources.base import PASSAGES, KnowledgeSource, MissingIndexError, SourceSetting
from retrievers.sources.build_lock import builder_pid, wait_for_build
from retrievers.sources.dense_build import (BUILD_FILE, FORMAT, META_FILE, SHARDS_DIR, DenseIndexSettings,
                                            as_recorded, build_dense_index, index_file)
from retrievers.sources.knn import search_all, set_knob
from retrievers.sources.passage_store import PassageStore
from retrievers.sources.rescore import StoredVectors, rescored_top
from retrievers.types import Passage

MAX_OVERFETCH = 1000  # hidden rows a generation's base search asks beyond k (more: merge the generation)



@dataclass
class DenseSource(KnowledgeSource):
    """Search a dense index built by `eor index` (dense_build.py): faiss over the passages'
    vectors (an ANN index's rows ordered by their stored vectors: rescore.py), the passages
    themselves read from disk by row (passage_store.py)."""

    index_dir: str
    encoder: Encoder
    name: str = "Wiki"
    settings: DenseIndexSettings = field(default_factory=DenseIndexSettings)
    shape = PASSAGES

    @classmethod
    def from_setting(cls, setting: SourceSetting) -> "DenseSource":
        where = f"index.sources.{setting.name}.options"
        return cls(setting.index_dir, setting.encoder, setting.name,
                   DenseIndexSettings.from_options(dict(setting.options), where))

    @classmethod
    def build_index(cls, docs: Iterable[Document], setting: SourceSetting, corpus_id: str = "",
                    embedder=None, progress: TextIO | None = None, index_parts=None) -> dict:
        """Build (or resume) this source's index: what `eor index` runs for a `dense` line."""
        source = cls.from_setting(setting)
        return build_dense_index(docs, setting.index_dir, source.encoder, settings=source.settings,
                                 corpus_id=corpus_id, embedder=embedder, progress=progress, index_parts=index_parts)

    @classmethod
    def index_shards(cls, index_dir: str) -> int:
        return index_shard_count(index_dir)

    @classmethod
    def build_delta(cls, docs: list[Document], setting: SourceSetting, delta_dir: str,
                    previous: str | None = None) -> dict | None:
        """A generation's added documents as a small exact index (embedded with the base's encoder;
        those the previous delta holds take its vectors)."""
        from retrievers.sources.dense_merge import reusing_embedder

        if not docs:
            return None
        source = cls.from_setting(setting)
        flat = replace(source.settings, factory="Flat", index_shards=1)
        encoder = as_recorded(source.encoder, setting.index_dir)  # the base's corpus backend, not this machine's
        return build_dense_index(docs, delta_dir, encoder, settings=flat, corpus_id="generation delta",
                                 embedder=reusing_embedder(encoder, previous))

    @classmethod
    def merge_generation(cls, setting: SourceSetting, delta_dir: str | None, hidden: frozenset[str],
                         out_dir: str) -> dict | None:
        """The vectors the base and the delta hold, copied (nothing embedded again), indexed anew."""
        from retrievers.sources.dense_merge import merge_dense_index

        return merge_dense_index(setting.index_dir, delta_dir, hidden, out_dir, cls.from_setting(setting).settings)

    def __post_init__(self) -> None:
        self._indexes: list = []
        self._store: PassageStore | None = None
        self._vectors: StoredVectors | None = None  # an ANN index's: its rows are rescored
        self.meta: dict = {}
        self._delta_dir: str | None = None
        self._hidden: frozenset[str] = frozenset()
        self._delta: DenseSource | None = None
        self._hidden_rows = np.zeros(0, dtype=np.int64)

    def building(self) -> bool:
        """Whether `eor index` is building this index now (the first search waits for it)."""
        return not (Path(self.index_dir) / META_FILE).exists() and builder_pid(self.index_dir) is not None

    def use_generation(self, delta_dir: str | None, hidden: frozenset[str]) -> "DenseSource":
        self._delta_dir, self._hidden = delta_dir, frozenset(hidden)
        return self

    def use_indexes(self, indexes: Sequence) -> "DenseSource":
        """Search these instead of reading the index files: objects with faiss's
        `search(vectors, k) -> (scores, ids)`, such as the service's index-shard actors."""
        self._indexes = list(indexes)
        return self

    def load(self) -> "DenseSource":
        if self._store is not None:
            return self
        path = Path(self.index_dir)
        wait_for_build(path, path / META_FILE, self.name)  # an index `eor index` is still building
        self.meta = read_meta(path, self.name)
        self._check_encoder(path)
        self._indexes = self._indexes or load_index_shards(path, self.meta, self.settings)
        store = PassageStore(path / SHARDS_DIR, self.meta["shards"])
        if self.settings.rescore_for(self.meta.get("factory", "Flat")) > 1:
            self._vectors = StoredVectors(path / SHARDS_DIR, self.meta["shards"])
        if self._hidden:
            self._hidden_rows = store.rows_of(self._hidden)
        if self._delta_dir and (Path(self._delta_dir) / META_FILE).exists():
            flat = replace(self.settings, factory="Flat", index_shards=1)
            self._delta = DenseSource(self._delta_dir, self.encoder, self.name, flat).load()
        self.encoder.load()
        self._store = store  # last: a search that sees it loaded sees every part
        return self

    def _check_encoder(self, path: Path) -> None:
        """Query vectors from another encoder than the index's are silently meaningless
        (or crash faiss on a dimension mismatch): refuse them, naming both encoders."""
        built_with = self.meta.get("encoder")
        asked = self.encoder.name
        if built_with and asked and built_with != asked:
            raise ValueError(f"the {self.name} index at {path} was built with encoder {built_with!r} but this "
                             f"configuration encodes queries with {asked!r}: set index.encoder: {built_with} "
                             "or rebuild the index with `eor index`")

    def search(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        self.load()
        if not queries:
            return []
        vectors = self.encoder.encode(list(queries))
        if not len(self._hidden_rows) and self._delta is None:
            return self.search_vectors(vectors, k)
        # a generation: the base without its hidden rows (asked for that many more), then the delta
        scores, ids = self.top_rows(vectors, k + min(len(self._hidden_rows), MAX_OVERFETCH))
        base = self.passages(*first_k(scores, np.where(np.isin(ids, self._hidden_rows), -1, ids), k))
        delta = self._delta.search_vectors(vectors, k) if self._delta else [[]] * len(base)
        return [sorted(b + d, key=lambda p: -p.score)[:k] for b, d in zip(base, delta)]

    def search_vectors(self, vectors: np.ndarray, k: int) -> list[list[Passage]]:
        """The top k of query vectors over this index alone (no generation applied)."""
        return self.passages(*self.top_rows(vectors, k))

    def top_rows(self, vectors: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Each query vector's best n rows of this index alone (scores, faiss ids; -1 for none)."""
        self.load()
        return rescored_top(lambda q, m: search_all(self._indexes, q, m), self._vectors, vectors, n,
                            self.settings.rescore)

    def passages(self, scores: np.ndarray, ids: np.ndarray) -> list[list[Passage]]:
        """Rows found (faiss ids, -1 for none) as passages read from the store."""
        self.load()
        out = []
        for row_s, row_i in zip(scores.tolist(), ids.tolist()):
            hits = [(s, i) for s, i in zip(row_s, row_i) if i >= 0]
            docs = self._store.get([i for _, i in hits])
            out.append([Passage(d.doc_id, d.title, d.text, self.name, float(s)) for (s, _), d in zip(hits, docs)])
        return out


def first_k(scores: np.ndarray, ids: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Each row's first k found (id >= 0), in order: only those are read from the store."""
    out_s, out_i = np.zeros((len(ids), k), dtype=np.float32), np.full((len(ids), k), -1, dtype=np.int64)
    for r, (s, i) in enumerate(zip(scores, ids)):
        keep = np.flatnonzero(i >= 0)[:k]
        out_s[r, : len(keep)], out_i[r, : len(keep)] = s[keep], i[keep]
    return out_s, out_i


def read_meta(path: Path, name: str = "Wiki") -> dict:
    """A finished index's meta.json; an index missing, unfinished or from before streaming
    builds is one line naming the command that builds it."""
    meta_path = path / META_FILE
    if not meta_path.exists():
        what = "an unfinished build" if (path / BUILD_FILE).exists() else "no"
        raise MissingIndexError(f"{what} {name} (dense) index at {path}: build it with `eor index`"
                                + (" (it resumes where it stopped)" if what != "no" else ""))
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    if meta.get("format") != FORMAT:
        raise MissingIndexError(f"the {name} index at {path} was built by an older eor: rebuild it with `eor index`")
    return meta


def index_shard_count(index_dir: str | Path) -> int:
    """How many faiss files a finished index is split into (0: none built yet)."""
    meta_path = Path(index_dir) / META_FILE
    if not meta_path.exists():
        return 0
    return len(json.loads(meta_path.read_text(encoding="utf-8")).get("index_shards", []))


def load_index_shards(path: Path, meta: dict, settings: DenseIndexSettings, only: Sequence[int] | None = None) -> list:
    """The index's faiss files (or the ones in `only`), with the build's search knob unless the
    configuration sets one."""
    import faiss

    indexes = [faiss.read_index(str(path / index_file(k)))
               for k in (range(len(meta["index_shards"])) if only is None else only)]
    for knob, value in meta.get("search", {}).items():
        configured = settings.nprobe if knob == "nprobe" else settings.ef_search
        set_knob(indexes, knob, configured or value)
    return indexes


def cosine_rerank(encoder: Encoder, query: str, passages: Sequence[Passage]) -> list[Passage]:
    """@RR: order passages by cosine similarity to the query (stable for ties)."""
    if not passages:
        return []
    q = encoder.encode([query])[0]
    return ranked_by_similarity(passages, encoder.encode([x.render() for x in passages]) @ q)


def ranked_by_similarity(passages: Sequence[Passage], sims: np.ndarray) -> list[Passage]:
    """The passages by descending similarity (stable for ties), each scored with its own."""
    order = np.argsort(-sims, kind="stable")
    return [Passage(passages[i].pid, passages[i].title, passages[i].text, passages[i].source,
                    float(sims[i])) for i in order]
