"""SE (embedded default): Lucene BM25 over page-like documents, through Anserini.

Pages (records grouped by title) make the search engine see different text shapes than
Wiki's 100-word passages, as Google and DPR did in the paper.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from retrievers.corpus import Document, to_pages
from retrievers.java import anserini_jar, autoclass, java_binary
from retrievers.sources.base import PAGES, KnowledgeSource, MissingIndexError, SourceSetting
from retrievers.types import Passage

LUCENE_DIR = "lucene"
PAGES_FILE = "pages.jsonl"


def build_lucene_index(docs: Iterable[Document], out_dir: str | Path, threads: int = 2) -> int:
    """Write pages and index them with Anserini's IndexCollection (BM25 defaults)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    pages = to_pages(docs)
    with tempfile.TemporaryDirectory() as tmp:
        with open(Path(tmp) / "docs.jsonl", "w", encoding="utf-8") as f:
            for p in pages:
                f.write(json.dumps({"id": p.page_id, "contents": f"{p.title}\n{p.text}"}) + "\n")
        target = out / LUCENE_DIR
        shutil.rmtree(target, ignore_errors=True)
        cmd = [java_binary(), "-Xmx1g", "-cp", anserini_jar(), "io.anserini.index.IndexCollection",
               "-collection", "JsonCollection", "-input", tmp, "-index", str(target),
               "-generator", "DefaultLuceneDocumentGenerator", "-threads", str(threads),
               "-storePositions", "-storeDocvectors"]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"Lucene indexing failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    with open(out / PAGES_FILE, "w", encoding="utf-8") as f:
        for p in pages:
            f.write(json.dumps({"id": p.page_id, "title": p.title, "text": p.text,
                                "members": list(p.member_ids)}) + "\n")
    return len(pages)


@dataclass
class LuceneSource(KnowledgeSource):
    """BM25 search over pages; a result Passage is a whole page (pid = page id)."""

    index_dir: str
    name: str = "SE"
    shape = PAGES

    @classmethod
    def from_setting(cls, setting: SourceSetting) -> "LuceneSource":
        return cls(setting.index_dir, setting.name, **setting.options)

    def __post_init__(self) -> None:
        self._searcher = None
        self._pages: dict[str, tuple[str, str]] = {}
        self.members: dict[str, tuple[str, ...]] = {}

    def load(self) -> "LuceneSource":
        if self._searcher is not None:
            return self
        path = Path(self.index_dir)
        if not (path / LUCENE_DIR).exists():
            raise MissingIndexError(f"no {self.name} (Lucene) index at {path}: build it with `eor index`")
        with open(path / PAGES_FILE, encoding="utf-8") as f:
            for line in f:
                r = json.loads(line)
                self._pages[r["id"]] = (r["title"], r["text"])
                self.members[r["id"]] = tuple(r["members"])
        self._searcher = autoclass("io.anserini.search.SimpleSearcher")(str(path / LUCENE_DIR))
        return self

    def search(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        self.load()
        out = []
        for q in queries:
            hits = self._searcher.search(q, k)
            row = []
            for i in range(len(hits)):
                doc_id = hits[i].docid
                title, text = self._pages[doc_id]
                row.append(Passage(doc_id, title, text, self.name, float(hits[i].score)))
            out.append(row)
        return out
