"""The knowledge-source protocol: batch-first search returning ranked passages.

A new source is one class implementing `KnowledgeSource` (searching, and building its index), registered by name
(`retrievers/registry.py: SOURCE_BACKENDS`) or named by its "module:Class", plus one line in
the config's `index.sources` (serve/config.py) giving it the name retriever specs call it by.
The pool needs nothing else: what its hits are (`shape`) says how the spec operations treat them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Iterable, Mapping, Protocol, Sequence, TextIO

from retrievers.corpus import Document
from retrievers.types import Passage

# What one hit of a source is, which decides what the spec operations do with its hits:
# PASSAGES (Wiki): ~100-word passages; `Src@k` takes the top k (searched at k, default
#   pool.default_k), @RR reranks them, HB takes the top pool.hb_wiki_k.
# PAGES (SE): whole pages; `Src@k` takes the first k pages (default 1), cut to pool.se_top1_words
#   (k = 1) or pool.se_page_words words; @RR and HB cut the first pool.se_pages pages into
#   pool.chunk_words-word chunks.
PASSAGES, PAGES = "passages", "pages"
SHAPES = (PASSAGES, PAGES)


@dataclass(frozen=True)
class SourceSetting:
    """What the configuration gives a source to build itself with."""

    name: str  # what retriever specs call it (`Toy@2`); its passages carry it as `Passage.source`
    index_dir: str  # its folder under the configured index: $EOR_HOME/indexes/<index>/<name, lower case>
    encoder: Any = None  # the sentence encoder Wiki and @RR share (retrievers/encoder.py), not loaded yet
    options: Mapping[str, Any] = field(default_factory=dict)  # the config's `options` for it


class KnowledgeSource(Protocol):
    """Subclass it for the defaults (`shape`, `from_setting`); any object with these members
    serves (the tests' fakes, the service's remote sources)."""

    name: str
    shape: ClassVar[str] = PASSAGES  # PASSAGES or PAGES (above)

    @classmethod
    def from_setting(cls, setting: SourceSetting) -> "KnowledgeSource":
        """The source a config line asks for; the constructor stays cheap (no I/O before load()).
        The default passes the name and the configured options as keyword arguments."""
        return cls(name=setting.name, **setting.options)

    @classmethod
    def build_index(cls, docs: Iterable[Document], setting: SourceSetting, corpus_id: str = "",
                    embedder: Any = None, progress: TextIO | None = None, **elsewhere: Any) -> dict | None:
        """Build (or resume) this source's index at `setting.index_dir` from a corpus that can be
        read again (`docs`); what `eor index` runs for the source's config line. `corpus_id` names
        the corpus, so a resumed build can refuse another one; `embedder` runs dense embedding
        elsewhere (retrievers/sources/dense_build.py: Embedder), and on a cluster `elsewhere` may hold
        `index_parts` (dense_index.py: PartBuilder), passed only then. Returns a summary for the build's
        report; the default, for a source with no index of its own (a search API), builds nothing."""
        return None

    @classmethod
    def build_delta(cls, docs: list[Document], setting: SourceSetting, delta_dir: str,
                    previous: str | None = None) -> dict | None:
        """Index a generation's added documents at `delta_dir` (retrievers/sources/generations.py),
        searched beside the base; `previous`: the previous generation's delta, what it may reuse.
        The default, for a source with no index of its own: nothing."""
        return None

    @classmethod
    def merge_generation(cls, setting: SourceSetting, delta_dir: str | None, hidden: frozenset[str],
                         out_dir: str) -> dict | None:
        """Write a new base at `out_dir` (a new folder, in a generation not yet published): the base
        at `setting.index_dir` without the `hidden` document ids, plus the delta at `delta_dir`
        (None: none), as a full build of the same documents would be. The old base stays (a
        service may still read it). Default: nothing."""
        return None

    def use_generation(self, delta_dir: str | None, hidden: frozenset[str]) -> "KnowledgeSource":
        """Before load(): serve the base without the `hidden` document ids, plus the delta at
        `delta_dir` (None: no delta). The default, for a source with no index: as it is."""
        return self

    @classmethod
    def index_shards(cls, index_dir: str) -> int:
        """How many parts the built index at `index_dir` is split into, each served by an actor of
        its own (0 or 1: the source serves it whole); the default: none."""
        return 0

    def building(self) -> bool:
        """Whether its index is being built now by another process: the pool then loads it on the
        first search, which waits (retrievers/sources/build_lock.py). Default: never."""
        return False

    def load(self) -> "KnowledgeSource":
        """Open indexes / models (cheap constructors, explicit warm-up)."""

    def search(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        """Top-k results per query, best first."""


class MissingIndexError(FileNotFoundError):
    """An index that has not been built; the message names the command that builds it."""
