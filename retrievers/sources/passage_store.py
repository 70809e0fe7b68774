"""Passages on disk, fetched by row: what a dense index serves without holding the corpus.
(Their vectors are read by row the same way: rescore.py.)

A store is a folder of shards, each `NNNNN.jsonl` (a passage a line: id, title, text) beside
`NNNNN.offsets.npy` (each line's byte offset, then the end). Rows are numbered across the shards
in order; they are faiss's ids. A row is read with one `pread` of a file the OS caches, so the
service's memory holds the offsets only (8 bytes a passage), and threads read without a lock.
The offsets file is written last, by rename: a shard without it is not there (a killed build
writes it again).
"""
from __future__ import annotations

import bisect
import json
import os
import weakref
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from retrievers.corpus import Document

TEXT_SUFFIX = ".jsonl"
DOC_ROWS_FILE = "doc_rows.sqlite"
OFFSETS_SUFFIX = ".offsets.npy"


def shard_stem(folder: Path, shard: int) -> Path:
    return folder / f"{shard:05d}"


def write_shard(folder: Path, shard: int, passages: Iterable[Document]) -> int:
    """Write one shard's passages; returns how many. Atomic: the offsets file is renamed in last."""
    folder.mkdir(parents=True, exist_ok=True)
    stem = shard_stem(folder, shard)
    text_tmp = stem.with_name(stem.name + ".jsonl.tmp")
    offsets = [0]
    with open(text_tmp, "wb") as f:
        for p in passages:
            line = (json.dumps({"id": p.doc_id, "title": p.title, "text": p.text}) + "\n").encode("utf-8")
            f.write(line)
            offsets.append(offsets[-1] + len(line))
    text_tmp.replace(stem.with_suffix(TEXT_SUFFIX))
    off_tmp = stem.with_name(stem.name + ".offsets.tmp.npy")
    np.save(off_tmp, np.asarray(offsets, dtype=np.int64))
    off_tmp.replace(stem.with_name(stem.name + OFFSETS_SUFFIX))
    return len(offsets) - 1


def shard_done(folder: Path, shard: int) -> bool:
    stem = shard_stem(folder, shard)
    return stem.with_name(stem.name + OFFSETS_SUFFIX).exists()


def read_shard(folder: Path, shard: int) -> list[Document]:
    """Every passage of one shard, in order (the build's embedding step reads them back)."""
    with open(shard_stem(folder, shard).with_suffix(TEXT_SUFFIX), encoding="utf-8") as f:
        return [_document(line) for line in f]


def _document(line: str | bytes) -> Document:
    r = json.loads(line)
    return Document(r["id"], r["title"], r["text"])


class RowFiles:
    """Rows numbered across a folder's shard files in order, each read with a `pread` of a file
    opened lazily, read-only (no lock: threads share the descriptors)."""

    def __init__(self, paths: Sequence[Path], counts: Sequence[int]) -> None:
        self._paths = list(paths)
        self._starts = list(np.cumsum([0, *counts[:-1]]).tolist()) if counts else []
        self._size = int(sum(counts))
        self._fds: list[int | None] = [None] * len(self._paths)
        # files let go unclosed (an index generation swapped out) are closed when collected: 262 a 1M index
        weakref.finalize(self, _close_all, self._fds)

    def __len__(self) -> int:
        return self._size

    def _fd(self, shard: int) -> int:
        fd = self._fds[shard]
        if fd is None:  # two threads may both open it: one descriptor is kept, the other closed
            fd = os.open(self._paths[shard], os.O_RDONLY)
            if self._fds[shard] is None:
                self._fds[shard] = fd
            else:
                os.close(fd)
                fd = self._fds[shard]
        return fd

    def locate(self, row: int) -> tuple[int, int]:
        """(shard, row within it) of a row; a row outside the files is an IndexError."""
        if not 0 <= row < self._size:
            raise IndexError(f"passage row {row} is outside this store's {self._size}")
        shard = bisect.bisect_right(self._starts, row) - 1
        return shard, row - self._starts[shard]

    def close(self) -> None:
        _close_all(self._fds)


class PassageStore(RowFiles):
    """Read passages by row from a folder of `shards` shards."""

    def __init__(self, folder: str | Path, shards: int) -> None:
        self.folder = Path(folder)
        self._offsets = [np.load(shard_stem(self.folder, i).with_name(f"{i:05d}{OFFSETS_SUFFIX}"), mmap_mode="r")
                         for i in range(shards)]
        super().__init__([shard_stem(self.folder, i).with_suffix(TEXT_SUFFIX) for i in range(shards)],
                         [len(o) - 1 for o in self._offsets])

    def get(self, rows: Sequence[int]) -> list[Document]:
        out = []
        for row in rows:
            shard, i = self.locate(row)
            start, end = int(self._offsets[shard][i]), int(self._offsets[shard][i + 1])
            out.append(_document(os.pread(self._fd(shard), end - start, start)))
        return out

    def rows_of(self, doc_ids: Iterable[str]) -> np.ndarray:
        """The rows of these corpus documents' passages (`id` and `id#n`), from a map of the
        store built on first use beside it (doc_rows.sqlite; a scan of every shard once)."""
        import sqlite3

        path = self.folder / DOC_ROWS_FILE
        if not path.exists():
            tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
            db = sqlite3.connect(str(tmp))
            db.execute("CREATE TABLE rows (doc TEXT, row INTEGER)")
            row = 0
            for i in range(len(self._offsets)):
                with open(shard_stem(self.folder, i).with_suffix(TEXT_SUFFIX), encoding="utf-8") as f:
                    db.executemany("INSERT INTO rows VALUES (?, ?)",
                                   ((json.loads(line)["id"].split("#", 1)[0], row + n) for n, line in enumerate(f)))
                row += len(self._offsets[i]) - 1
            db.execute("CREATE INDEX by_doc ON rows (doc)")
            db.commit()
            db.close()
            os.replace(tmp, path)
        ids = list(dict.fromkeys(doc_ids))
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            found = []
            for i in range(0, len(ids), 500):
                chunk = ids[i : i + 500]
                found += [r for (r,) in db.execute(
                    f"SELECT row FROM rows WHERE doc IN ({','.join('?' * len(chunk))})", chunk)]
        finally:
            db.close()
        return np.asarray(sorted(found), dtype=np.int64)


def _close_all(fds: list[int | None]) -> None:
    for i, fd in enumerate(fds):
        if fd is not None:
            os.close(fd)
            fds[i] = None
