"""Index generations: documents added and deleted without rebuilding the index.

The vector databases' pattern (and Lucene's near-real-time readers): the base index stays as built;
each change writes a new *generation* beside it, `generations/NNNNN/` under the index folder, holding
the documents added since the base (all of them: a generation is whole on its own), the ids hidden
from the base (deleted, or replaced by an added document of the same id), and each source's small
delta index over the added documents (the source class's `build_delta`). `CURRENT` names the
generation that serves, written by rename last: a reader sees the old generation or the new one,
never half of one. A source searches its base, leaving out what is hidden, and its delta, and
merges the two by score. When the delta grows past `index.merge_above` documents, a *merged*
generation follows: a new base (the old less what is hidden, plus the delta; each source's
`merge_generation`) in `generations/NNNNN/base/`, no delta, nothing hidden; later generations
build on it. Old generations stay until removed (a service may still read one).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from retrievers.corpus import Document, read_jsonl

GENERATIONS_DIR = "generations"
CURRENT_FILE = "CURRENT"
DOCS_FILE = "docs.jsonl"
CHANGES_FILE = "changes.json"


@dataclass(frozen=True)
class Generation:
    """What one generation holds: its number, folder, the added documents and the hidden ids."""

    number: int
    folder: Path | None  # None: generation 0, the base alone
    hidden: frozenset[str]  # base document ids not served (deleted, or replaced by an added one)
    base: str = ""  # the folder under the index holding the base ("": the one `eor index` built)

    def source_dir(self, root: str | Path, source: str) -> Path:
        """Where this generation's base index of `source` is."""
        return Path(root) / self.base / source.lower()

    def docs(self) -> list[Document]:
        return [] if self.folder is None else list(read_jsonl(self.folder / DOCS_FILE))

    def delta_dir(self, source: str) -> Path | None:
        return None if self.folder is None else self.folder / source.lower()


def current_number(root: str | Path) -> int:
    """The published generation's number (0: the base alone); one small read."""
    path = Path(root) / CURRENT_FILE
    return int(path.read_text().strip()) if path.exists() else 0


def current(root: str | Path) -> Generation:
    """The generation `CURRENT` names (0, the base alone, when there is none)."""
    return load(root, current_number(root))


def load(root: str | Path, n: int) -> Generation:
    if n == 0:
        return Generation(0, None, frozenset())
    folder = Path(root) / GENERATIONS_DIR / f"{n:05d}"
    changes = json.loads((folder / CHANGES_FILE).read_text(encoding="utf-8"))
    return Generation(n, folder, frozenset(changes["hidden"]), changes.get("base", ""))


def next_changes(gen: Generation, added: Iterable[Document], deleted: Iterable[str]) -> tuple[list[Document], set[str]]:
    """The next generation's documents and hidden ids: an added id replaces any earlier version
    (base or added before), a deleted id leaves the added documents and is hidden in the base."""
    docs = {d.doc_id: d for d in gen.docs()}
    hidden = set(gen.hidden)
    for d in added:
        docs[d.doc_id] = d
        hidden.add(d.doc_id)  # a base document of that id, if any, is replaced
    for doc_id in deleted:
        docs.pop(doc_id, None)
        hidden.add(doc_id)
    return list(docs.values()), hidden


def merged_base(n: int) -> str:
    """The base folder (under the index) a merged generation `n` writes."""
    return f"{GENERATIONS_DIR}/{n:05d}/base"


def write(root: str | Path, n: int, docs: list[Document], hidden: set[str], summary: dict, base: str = "") -> Path:
    """The generation's own files (its sources' deltas are built into the folder by the caller);
    `base`: the base it builds on (the previous generation's)."""
    folder = Path(root) / GENERATIONS_DIR / f"{n:05d}"
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / DOCS_FILE, "w", encoding="utf-8") as f:
        for d in docs:
            f.write(json.dumps({"id": d.doc_id, "title": d.title, "text": d.text}) + "\n")
    (folder / CHANGES_FILE).write_text(json.dumps({"n": n, "base": base, "hidden": sorted(hidden), **summary}, indent=1),
                                       encoding="utf-8")
    return folder


def publish(root: str | Path, n: int) -> None:
    """Make generation `n` the one that serves (by rename: atomic for every reader)."""
    tmp = Path(root) / (CURRENT_FILE + ".tmp")
    tmp.write_text(f"{n}\n")
    os.replace(tmp, Path(root) / CURRENT_FILE)
