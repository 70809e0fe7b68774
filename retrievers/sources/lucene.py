"""SE (embedded default): Lucene BM25 over page-like documents, through Anserini.

Pages (records grouped by title) make the search engine see different text shapes than
Wiki's 100-word passages, as Google and DPR did in the paper.
"""
from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator, Sequence

from retrievers.corpus import Document, iter_pages
from retrievers.java import anserini_jar, autoclass, java_binary
from retrievers.sources.base import PAGES, KnowledgeSource, MissingIndexError, SourceSetting
from retrievers.types import Passage

LUCENE_DIR = "lucene"
PAGES_FILE = "pages.jsonl"
DONE_FILE = "lucene.json"
RECORDS_FILE = "records.sqlite"  # the corpus records by page, kept: what a merge rebuilds pages from
MAX_OVERFETCH = 1000  # hidden pages a generation's base search asks beyond k (more: merge the generation)
FILE_PAGES = 50_000  # pages per input file: Anserini's indexer gives each thread a file
INDEXER_HEAP_MB = 1024  # the indexing JVM's heap
# Lucene writes a segment out once its buffer holds this much: Anserini's default (4,096 MB) never would inside
# a 1 GiB heap, so every thread's whole segment stayed in memory to the end (a 1M-page build near the cap)
INDEXER_BUFFER_MB = 256


def build_lucene_index(docs: Iterable[Document], out_dir: str | Path, threads: int = 2, corpus_id: str = "",
                       page_prefix: str = "") -> int:
    """Write pages (streamed: records grouped by title on disk) and index them with Anserini's
    multi-threaded IndexCollection (BM25 defaults, each page's raw JSON stored: pages are served
    from the index, not held in memory). The records stay grouped in `records.sqlite` (a page
    does not keep its records apart: a merge needs them). A finished index over the same corpus
    is kept as it is."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    done = out / DONE_FILE
    if corpus_id and done.exists() and json.loads(done.read_text()).get("corpus") == corpus_id:
        return int(json.loads(done.read_text())["pages"])
    done.unlink(missing_ok=True)
    records = out / (RECORDS_FILE + ".tmp")
    records.unlink(missing_ok=True)
    pages = 0
    with tempfile.TemporaryDirectory(dir=out) as tmp:
        with open(out / (PAGES_FILE + ".tmp"), "w", encoding="utf-8") as listing:
            part = None
            for n, p in enumerate(iter_pages(docs, records)):
                if n % FILE_PAGES == 0:
                    if part is not None:
                        part.close()
                    part = open(Path(tmp) / f"docs-{n // FILE_PAGES:05d}.jsonl", "w", encoding="utf-8")
                title = " ".join(p.title.split())  # one line: the stored contents is "title\ntext"
                pid = page_prefix + p.page_id  # a generation's pages are named apart from the base's
                part.write(json.dumps({"id": pid, "contents": f"{title}\n{p.text}"}) + "\n")
                listing.write(json.dumps({"id": pid, "title": p.title, "members": list(p.member_ids)}) + "\n")
                pages = n + 1
            if part is not None:
                part.close()
        target = out / LUCENE_DIR
        shutil.rmtree(target, ignore_errors=True)
        cmd = [java_binary(), f"-Xmx{INDEXER_HEAP_MB}m", "-cp", anserini_jar(), "io.anserini.index.IndexCollection",
               "-collection", "JsonCollection", "-input", tmp, "-index", str(target),
               "-generator", "DefaultLuceneDocumentGenerator", "-threads", str(threads),
               "-memoryBuffer", str(INDEXER_BUFFER_MB), "-storePositions", "-storeDocvectors", "-storeRaw"]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"Lucene indexing failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    (out / (PAGES_FILE + ".tmp")).replace(out / PAGES_FILE)
    records.replace(out / RECORDS_FILE)
    done.write_text(json.dumps({"corpus": corpus_id, "pages": pages}))
    return pages


def stored_records(index_dir: str | Path) -> Iterator[Document]:
    """The records an index was built from, in corpus order (`records.sqlite`)."""
    import sqlite3

    path = Path(index_dir) / RECORDS_FILE
    if not path.exists():
        raise MissingIndexError(f"the Lucene index at {index_dir} keeps no records (built before merges): "
                                "rebuild it with `eor index --fresh` to merge its generations")
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:  # the title kept is the page's key: the record's title, or its id where it had none
        for doc_id, title, text in db.execute("SELECT r.id, t.title, r.text FROM records r "
                                              "JOIN titles t ON t.n = r.title_n ORDER BY r.seq"):
            yield Document(doc_id, title if title != doc_id else "", text)
    finally:
        db.close()


def page_members(index_dir: str | Path) -> dict[str, tuple[str, ...]]:
    """Each page's corpus records (pages.jsonl): what judging a page against gold passages needs."""
    with open(Path(index_dir) / PAGES_FILE, encoding="utf-8") as f:
        return {r["id"]: tuple(r["members"]) for r in map(json.loads, f)}


@dataclass
class LuceneSource(KnowledgeSource):
    """BM25 search over pages; a result Passage is a whole page (pid = page id)."""

    index_dir: str
    name: str = "SE"
    shape = PAGES

    @classmethod
    def from_setting(cls, setting: SourceSetting) -> "LuceneSource":
        return cls(setting.index_dir, setting.name, **setting.options)

    @classmethod
    def build_index(cls, docs: Iterable[Document], setting: SourceSetting, corpus_id: str = "", embedder=None,
                    progress=None, **elsewhere) -> dict:
        """What `eor index` runs for a `lucene` line."""
        return {"pages": build_lucene_index(docs, setting.index_dir, threads=min(4, os.cpu_count() or 1),
                                            corpus_id=corpus_id)}

    @classmethod
    def build_delta(cls, docs: list[Document], setting: SourceSetting, delta_dir: str,
                    previous: str | None = None) -> dict | None:
        """A generation's added documents as pages of their own (grouped by title among themselves)."""
        if not docs:
            return None
        return {"pages": build_lucene_index(docs, delta_dir, threads=1, page_prefix=f"{Path(delta_dir).parent.name}-")}

    @classmethod
    def merge_generation(cls, setting: SourceSetting, delta_dir: str | None, hidden: frozenset[str],
                         out_dir: str) -> dict | None:
        """The pages indexed again from the kept records: the base's less the hidden, then the delta's
        (a page regrouped whole, its BM25 statistics the whole corpus's again)."""
        base = (d for d in stored_records(setting.index_dir) if d.doc_id not in hidden)
        added = stored_records(delta_dir) if delta_dir and (Path(delta_dir) / RECORDS_FILE).exists() else ()
        return {"pages": build_lucene_index(itertools.chain(base, added), out_dir, threads=min(4, os.cpu_count() or 1))}

    def __post_init__(self) -> None:
        self._searcher = None
        self._delta_dir: str | None = None
        self._hidden: frozenset[str] = frozenset()
        self._hidden_pages: frozenset[str] = frozenset()
        self._delta = None

    def use_generation(self, delta_dir: str | None, hidden: frozenset[str]) -> "LuceneSource":
        """A base page holding a hidden record is hidden whole (its other records come back with a
        full rebuild, `eor index --fresh`: the stored page does not keep its records apart)."""
        self._delta_dir, self._hidden = delta_dir, frozenset(hidden)
        return self

    def load(self) -> "LuceneSource":
        if self._searcher is not None:
            return self
        path = Path(self.index_dir)
        if not (path / LUCENE_DIR).exists():
            raise MissingIndexError(f"no {self.name} (Lucene) index at {path}: build it with `eor index`")
        self._searcher = autoclass("io.anserini.search.SimpleSearcher")(str(path / LUCENE_DIR))
        if self._hidden:  # the pages listing read as a stream: only the pages to hide are kept
            with open(path / PAGES_FILE, encoding="utf-8") as f:
                self._hidden_pages = frozenset(r["id"] for r in map(json.loads, f)
                                               if self._hidden.intersection(r["members"]))
        if self._delta_dir and (Path(self._delta_dir) / LUCENE_DIR).exists():
            self._delta = LuceneSource(self._delta_dir, self.name).load()
        return self

    def search(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        self.load()
        if not self._hidden_pages and self._delta is None:
            return self._search(queries, k)
        # a generation: the base without its hidden pages, then the delta's, by BM25 score (each
        # index's own statistics: close, not equal, until the generation is merged)
        base = self._search(queries, k, skip=self._hidden_pages)
        delta = self._delta.search(queries, k) if self._delta is not None else [[]] * len(base)
        return [sorted(b + d, key=lambda p: -p.score)[:k] for b, d in zip(base, delta)]

    def _search(self, queries: Sequence[str], k: int, skip: frozenset[str] = frozenset()) -> list[list[Passage]]:
        """The top k pages of each query, those in `skip` left out: searched k + k deep first (the
        searcher reads every hit's document, so depth costs), then as deep as the pages skipped
        (at most MAX_OVERFETCH) where that left fewer than k."""
        out = []
        deepest = k + min(len(skip), MAX_OVERFETCH)
        for q in queries:
            depth = min(deepest, 2 * k)
            while True:
                hits = self._searcher.search(q, depth)
                kept = [hits[i] for i in range(len(hits)) if hits[i].docid not in skip][:k]
                if len(kept) == k or len(hits) < depth or depth >= deepest:
                    break
                depth = deepest
            row = []
            for hit in kept:
                raw = hit.lucene_document.get("raw")  # the page as indexed (-storeRaw)
                title, _, text = json.loads(raw)["contents"].partition("\n")
                row.append(Passage(hit.docid, title, text, self.name, float(hit.score)))
            out.append(row)
        return out
