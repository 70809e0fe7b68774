"""What one question's rounds find and reuse (`Groundwork`), what a round returns (`RoundRun`), and
the one rule for which searches a round still needs: shared by the pool run alone and the rounds
of an Ask (serve/orchestrator.py), in-process and in the service."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Collection, Mapping, Sequence

from retrievers.sources.base import PAGES
from retrievers.spec import HB, PK, RetrieverPlan, Term, split_reader
from retrievers.types import Failure, Passage, QuestionResult, ReaderTokens

if TYPE_CHECKING:
    from retrievers.pool import PoolConfig


@dataclass(frozen=True)
class PKDocument:
    """A question's parametric-knowledge document: written once, read by PK and HB."""

    text: str
    tokens: ReaderTokens


@dataclass(frozen=True)
class Groundwork:
    """What one question's earlier rounds found that later rounds reuse, so each piece of work
    is done once per question: each source's hits (searched at the depth every retriever the
    question may run needs) or why its search failed (not searched again: its retrievers
    report the error at once rather than wait out the deadline a second time), the PK
    document each reader wrote (by reader name, "" the default), @RR orders, and the prompts read
    so far (whose prefixes later prompts of the same reader reuse). Immutable: a round reads it
    and returns what it found (`RoundRun.found`, a Groundwork too)."""

    hits: Mapping[str, tuple[Passage, ...]] = field(default_factory=dict)
    depth: Mapping[str, int] = field(default_factory=dict)  # the k each source was searched at
    failed: Mapping[str, Failure] = field(default_factory=dict)  # source -> why its search failed
    pk: Mapping[str, PKDocument] = field(default_factory=dict)  # reader name -> its PK document
    reranked: Mapping[str, tuple[Passage, ...]] = field(default_factory=dict)  # @RR order per key (SE, Wiki, HB)
    read: tuple[tuple[str, str], ...] = ()  # (prompt, owner member: spec, or spec~reader) of each prompt read

    def plus(self, found: "Groundwork") -> "Groundwork":
        """This and what a later round found: a deeper search, each reader's first PK document,
        the first rerank order, every prompt read."""
        hits, depth = dict(self.hits), dict(self.depth)
        for src, k in found.depth.items():
            if k > depth.get(src, 0):
                hits[src], depth[src] = found.hits[src], k
        seen = set(self.read)
        return Groundwork(hits, depth, {**found.failed, **self.failed}, {**found.pk, **self.pk},
                          {**found.reranked, **self.reranked}, self.read + tuple(r for r in found.read if r not in seen))

    def only(self, keys: Collection[str], readers: Collection[str], pk_readers: Collection[str] = ()) -> "Groundwork":
        """What members reading `keys` (the sources they search, and their terms' own names: HB, an @RR
        order's key) through `readers` (`pk_readers`: those of them that read a PK document) can use: a
        retriever group is sent this, not the whole record (every source's hits, every prompt read)."""
        keys, readers, pk_readers = set(keys), set(readers), set(pk_readers)
        return Groundwork({s: h for s, h in self.hits.items() if s in keys},
                          {s: k for s, k in self.depth.items() if s in keys},
                          {s: f for s, f in self.failed.items() if s in keys},
                          {r: d for r, d in self.pk.items() if r in pk_readers},
                          {k: v for k, v in self.reranked.items() if k in keys},
                          tuple(r for r in self.read if split_reader(r[1])[1] in readers))


def reads_of(plans: Sequence[RetrieverPlan], config: PoolConfig,
             shapes: Mapping[str, str]) -> tuple[set[str], set[str], set[str]]:
    """`Groundwork.only`'s (keys, readers, pk_readers) for these members: what they search and name, who
    reads them, and who of those reads a PK document (PK, HB)."""
    keys = set(search_depths(plans, config, shapes)) | {t.source for p in plans for t in p.terms}
    return keys, {p.reader for p in plans}, {p.reader for p in plans if p.sources & {PK, HB}}


@dataclass(frozen=True)
class RoundRun:
    """A round's results, what it found per question, and (service) the seconds it waited on the reader."""

    results: list[QuestionResult]
    found: list[Groundwork]
    reader_s: float = 0.0


def search_depth(t: Term, c: PoolConfig, shapes: Mapping[str, str]) -> list[tuple[str, int]]:
    """The sources one term reads and the k each must be searched at; `shapes`: each configured
    source's hit shape (retrievers/sources/base.py), HB reads them all."""
    if t.source == "HB":
        return [(src, c.se_pages if shape == PAGES else c.hb_wiki_k) for src, shape in shapes.items()]
    if t.source not in shapes:  # PK
        return []
    if shapes[t.source] == PAGES:
        return [(t.source, c.se_pages if t.rerank else (t.k or 1))]
    return [(t.source, t.k or c.default_k)]


def search_depths(plans: Sequence[RetrieverPlan], config: PoolConfig, shapes: Mapping[str, str]) -> dict[str, int]:
    """The k each source must be searched at to serve all of `plans` (one search per source)."""
    depth: dict[str, int] = {}
    for plan in plans:
        for t in plan.terms:
            for src, k in search_depth(t, config, shapes):
                depth[src] = max(depth.get(src, 0), k)
    return depth


def pending_searches(work: Sequence[Groundwork], need: Mapping[str, int], deep: Mapping[str, int],
                     skip: Collection[int] = ()) -> list[tuple[str, list[int], int]]:
    """(source, question indexes, k) of each search a round still needs: a source is searched for
    the questions whose work has it at less than the round's depth `need` and whose search of
    it has not failed, at the deepest k their whole plan needs (`deep`), so a later round finds
    it done. The one rule for every home of searching: the pool run alone, and the rounds of an
    Ask (serve/orchestrator.py) in-process and in the service."""
    calls = []
    for src, k in need.items():
        todo = [j for j, w in enumerate(work) if j not in skip and src not in w.failed and w.depth.get(src, 0) < k]
        if todo:
            calls.append((src, todo, max(k, deep.get(src, 0))))
    return calls


def search_found(src: str, todo: Sequence[int], k: int,
                 found: Sequence[Sequence[Passage]] | Failure) -> dict[int, Groundwork]:
    """What one search adds to the work of each of its questions: its hits, or why it failed."""
    per = [found] * len(todo) if isinstance(found, Failure) else found
    return {j: Groundwork(failed={src: hits}) if isinstance(hits, Failure)
            else Groundwork(hits={src: tuple(hits)}, depth={src: k}) for j, hits in zip(todo, per)}
