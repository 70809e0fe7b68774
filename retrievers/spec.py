"""Parse the paper's retriever spec strings into a small plan.

Grammar (precedence @RR > @k > & > @CP, as in the paper's §2.1):
    pair  := spec ["~" READER]
    spec  := "ReFree" | terms ["@CP"]
    terms := term ("&" term)*
    term  := SOURCE ["@RR"] ["@" INT]
e.g. `SE@RR@5&Wiki@5@CP` = compress(concat(topk(rerank(SE), 5), topk(Wiki, 5))).

A retriever is read by the default reader (the config's `reader`); `~READER` names another
configured reader (serve/config.py `readers`, e.g. `Wiki@10~1.5B`): the pair (retriever, reader)
is then one member of the pool, with its own name, weight and candidates. Every prompt the
pair makes (its PK document, @CP summary and answer) goes to that reader.

SOURCE is a configured knowledge source's name (letters: `Wiki`, `SE`, any other the config
names: serve/config.py `index.sources`), or one of the two the pool makes itself: PK (the
reader's own document) and HB (the hybrid of every configured source and PK). The grammar does
not know which sources are configured; `parse_pool(..., sources=)` and `check_sources` do.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Collection, Iterable

REFREE = "ReFree"
PK, HB = "PK", "HB"
RESERVED = (PK, HB, REFREE)  # spec tokens no configured source may be named
SOURCE_NAME = re.compile(r"^[A-Za-z]+$")
READER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
READER_MARK = "~"  # `SPEC~READER`: the spec read by a configured reader other than the default
DEFAULT_READER_NAME = ""  # the config's `reader`: a spec without `~READER`

# The paper's 16 retrievers (Appendix C.1 plus ReFree), in the paper's order.
PAPER_POOL: tuple[str, ...] = (
    "Wiki@10", "SE@1", "SE@4", "PK", "SE@RR@10", "SE@2&Wiki@5", "SE@RR@5&Wiki@5", "HB@RR@10",
    "Wiki@10@CP", "SE@1@CP", "SE@4@CP", "SE@RR@10@CP", "SE@2&Wiki@5@CP", "SE@RR@5&Wiki@5@CP",
    "HB@RR@10@CP", "ReFree",
)


class SpecError(ValueError):
    """A spec string that does not parse; the message names the bad token."""


@dataclass(frozen=True)
class Term:
    source: str
    rerank: bool = False
    k: int | None = None  # None: the source's natural output (PK: its one document)


@dataclass(frozen=True)
class RetrieverPlan:
    spec: str  # the member's name: the spec string, with `~READER` when another reader reads it
    terms: tuple[Term, ...] = ()  # empty for ReFree
    compress: bool = False
    reader: str = DEFAULT_READER_NAME  # the configured reader every prompt of this member goes to

    @property
    def retrieval_free(self) -> bool:
        return not self.terms

    @property
    def sources(self) -> set[str]:
        return {t.source for t in self.terms}

    @property
    def reader_steps(self) -> int:
        """Reader calls made one after another before the answer exists: the answer itself, the
        compression before it (@CP), and the parametric passage (PK, and HB, which holds PK)."""
        return 1 + int(self.compress) + int(bool(self.sources & {PK, HB}))


_TERM = re.compile(r"^(?P<src>[A-Za-z]+)(?P<ops>(@[A-Za-z0-9]+)*)$")  # src: SOURCE_NAME


def _parse_term(text: str, spec: str) -> Term:
    m = _TERM.match(text)
    if not m:
        raise SpecError(f"bad token {text!r} in retriever spec {spec!r}")
    source = m.group("src")
    ops = [o for o in m.group("ops").split("@") if o]
    rerank, k = False, None
    for i, op in enumerate(ops):
        if op == "RR":
            if rerank or k is not None:  # @RR binds tighter than @k, so it must come first
                raise SpecError(f"misplaced '@RR' in {text!r} of retriever spec {spec!r}")
            rerank = True
        elif op.isdigit():
            if k is not None or int(op) < 1:
                raise SpecError(f"bad top-k '@{op}' in {text!r} of retriever spec {spec!r}")
            k = int(op)
        elif op == "CP":
            raise SpecError(f"'@CP' must end the whole spec, found inside {text!r} of {spec!r}")
        else:
            raise SpecError(f"unknown operation '@{op}' in {text!r} of retriever spec {spec!r}; "
                            "known: @RR, @<k>, @CP, &")
    if source == PK and (rerank or k is not None):
        raise SpecError(f"PK is one generated document: no @RR or @k ({spec!r})")
    return Term(source, rerank, k)


@lru_cache(maxsize=1024)
def parse_spec(spec: str) -> RetrieverPlan:
    """The plan of one spec string. Cached (plans are frozen): every stage of every Ask names
    its retrievers by spec, and the same few strings are parsed once per process."""
    name = spec.strip()
    text, reader = split_reader(name)
    if not text:
        raise SpecError("empty retriever spec")
    if text == REFREE:
        return RetrieverPlan(name, reader=reader)
    compress = text.endswith("@CP")
    body = text[: -len("@CP")] if compress else text
    parts = body.split("&")
    if any(not p for p in parts):
        raise SpecError(f"empty operand around '&' in retriever spec {spec!r}")
    return RetrieverPlan(name, tuple(_parse_term(p, name) for p in parts), compress, reader)


def split_reader(name: str) -> tuple[str, str]:
    """(spec, reader) of a pool member's name: `Wiki@10~1.5B` -> ("Wiki@10", "1.5B"); a plain
    spec is read by the default reader ("")."""
    spec, mark, reader = name.strip().partition(READER_MARK)
    if mark:
        check_reader_name(reader, name)
    return spec.strip(), reader


def with_reader(spec: str, reader: str) -> str:
    """The member name of `spec` read by `reader` ("" : the default reader, the spec itself)."""
    base, _ = split_reader(spec)
    return f"{base}{READER_MARK}{reader}" if reader else base


def by_reader(specs: Iterable[str]) -> dict[str, list[str]]:
    """reader name -> the members it reads, in the given order; the default reader ("") first when
    it reads any. The one grouping of a pool by reader (the pool's parts, the fit's costs, the
    scorer's reader features, the engines to start)."""
    out: dict[str, list[str]] = {}
    for s in specs:
        out.setdefault(parse_spec(s).reader, []).append(s)
    return dict(sorted(out.items(), key=lambda kv: kv[0] != DEFAULT_READER_NAME))


def check_reader_name(reader: str, where: str = "") -> str:
    """A reader's name in a spec (letters, digits, '.', '_', '-'; e.g. `1.5B`)."""
    if not isinstance(reader, str) or not READER_NAME.match(reader):
        at = f" in retriever spec {where!r}" if where else ""
        raise SpecError(f"bad reader name {reader!r}{at}: letters, digits, '.', '_' or '-', e.g. 1.5B")
    return reader


def check_readers(plans: Iterable[RetrieverPlan], readers: Collection[str]) -> None:
    """Every reader the plans name is configured (`readers`: the configured names, "" the default)."""
    for plan in plans:
        if plan.reader not in readers:
            known = ", ".join(r for r in readers if r) or "none"
            raise SpecError(f"retriever {plan.spec!r} names reader {plan.reader!r}, which is not configured "
                            f"(config section readers; configured: {known})")


def check_source_name(name: str) -> str:
    """A name a configured source may take: letters (the spec grammar's SOURCE), not PK, HB or ReFree."""
    if not isinstance(name, str) or not SOURCE_NAME.match(name) or name in RESERVED:
        raise SpecError(f"a knowledge source's name must be letters only and not one of {', '.join(RESERVED)}: "
                        f"got {name!r}")
    return name


def check_sources(plans: Iterable[RetrieverPlan], sources: Collection[str]) -> None:
    """Every source the plans read is one of `sources` (the configured ones), PK or HB."""
    known = [*sources, PK, HB]
    for plan in plans:
        for t in plan.terms:
            if t.source not in known:
                raise SpecError(f"unknown knowledge source {t.source!r} in retriever spec {plan.spec!r}; "
                                f"known: {', '.join(known)}")


def parse_pool(specs: list[str] | tuple[str, ...], sources: Collection[str] | None = None,
               readers: Collection[str] | None = None) -> list[RetrieverPlan]:
    """The plans of a pool, each spec once; with `sources` (the configured ones), every spec must
    read only those (and PK, HB); with `readers` (the configured names), name only those."""
    plans = [parse_spec(s) for s in specs]
    if sources is not None:
        check_sources(plans, sources)
    if readers is not None:
        check_readers(plans, readers)
    seen: set[str] = set()
    for p in plans:
        if p.spec in seen:
            raise SpecError(f"retriever {p.spec!r} appears twice in the pool")
        seen.add(p.spec)
    return plans
