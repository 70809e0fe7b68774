"""Value types shared by the retrievers, the reader and the voter (frozen, batch-friendly)."""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Sequence


@dataclass(frozen=True)
class Passage:
    """One chunk of text a retriever hands to the reader."""

    pid: str
    title: str
    text: str
    source: str = ""  # knowledge source that produced it: "Wiki", "SE", "PK"
    score: float = 0.0

    def render(self) -> str:
        return f"{self.title}\n{self.text}" if self.title else self.text


@dataclass(frozen=True)
class Context:
    """What one retriever gives the reader for one question: passages, or a generated document."""

    spec: str
    passages: tuple[Passage, ...] = ()
    document: str | None = None  # set for PK documents and @CP summaries

    def render(self) -> str:
        if self.document is not None:
            return self.document
        return "\n\n".join(p.render() for p in self.passages)

    @property
    def is_empty(self) -> bool:
        return self.document is None and not self.passages


@dataclass(frozen=True)
class ReaderTokens:
    """Reader work, as the engine counted it when the prompts ran: what the cascade orders stages by."""

    prompt: int = 0  # tokens of the formatted prompts (prefix-cache hits included)
    generated: int = 0
    cached: int = 0  # of `prompt`: served by the engine's prefix cache, shared with an earlier prompt of the question

    def __add__(self, other: "ReaderTokens") -> "ReaderTokens":
        return ReaderTokens(self.prompt + other.prompt, self.generated + other.generated,
                            self.cached + other.cached)

    @property
    def total(self) -> int:
        return self.prompt + self.generated

    @property
    def computed(self) -> int:
        """What the engine computes cold: prompt tokens not served by the prefix cache, plus generated."""
        return self.prompt - self.cached + self.generated


TIMEOUT = "timeout"  # its source or its retriever missed the Ask's deadline
ERROR = "error"  # its source or its processing failed
UNAVAILABLE = "unavailable"  # what it needs is down (the reader engine restarting)
ERROR_KINDS = (TIMEOUT, ERROR, UNAVAILABLE)


@dataclass(frozen=True)
class Failure:
    """Why a source or a retriever gave no answer: a kind from ERROR_KINDS and one line for people."""

    kind: str
    message: str

    def __post_init__(self) -> None:
        if self.kind not in ERROR_KINDS:
            raise ValueError(f"failure kind must be one of {ERROR_KINDS}, got {self.kind!r}")


@dataclass(frozen=True)
class Candidate:
    """One retriever's answer to one question."""

    retriever: str
    answer: str
    context: Context
    error: str | None = None  # set when the retriever failed (one line); answer is then ""
    tokens: ReaderTokens = ReaderTokens()  # its own prompts: the @CP summary and the answer
    shared: tuple[str, ...] = ()  # generated documents it reads that others share ("PK")
    cached_from: str | None = None  # the retriever whose prompt shares `tokens.cached` with its own
    # the reader's log-probability of each token it generated for this answer (same request; None: unknown)
    logprobs: tuple[float, ...] | None = None
    error_kind: str | None = None  # with `error`: one of ERROR_KINDS

    @classmethod
    def failed(cls, retriever: str, failure: Failure) -> "Candidate":
        """A retriever that gave no answer, and why."""
        return cls(retriever, "", Context(retriever), error=failure.message, error_kind=failure.kind)

    @property
    def confidence(self) -> float | None:
        """The reader's confidence in its answer: the mean token log-probability (None: unknown)."""
        return sum(self.logprobs) / len(self.logprobs) if self.logprobs else None


@dataclass(frozen=True)
class QuestionResult:
    question: str
    candidates: tuple[Candidate, ...] = field(default_factory=tuple)
    shared_tokens: dict[str, ReaderTokens] = field(default_factory=dict)  # "PK": writing the PK document

    @classmethod
    def joined(cls, question: str, parts: Sequence[QuestionResult],
               order: Sequence[str] | None = None) -> QuestionResult:
        """One question's results from several calls as one: the candidates in `order` (None: as
        they come; a member in two parts: the later one), each shared document's tokens once. The
        one place results are put together (a round's groups, a stream's early and late halves, an
        Ask's rounds, a fit's rounds and its readers' run logs)."""
        cands = [c for p in parts for c in p.candidates]
        if order is not None:
            by = {c.retriever: c for c in cands}
            cands = [by[s] for s in order if s in by]
        shared: dict = {}
        for p in parts:
            shared.update(p.shared_tokens)
        return cls(question, tuple(cands), shared)

    def for_vote(self) -> "QuestionResult":
        """The same answers without what the vote never reads (passages, documents): what
        the service sends the Voter after each round."""
        return replace(self, candidates=tuple(replace(c, context=Context(c.context.spec))
                                              for c in self.candidates))

    def reader_tokens(self, specs: "set[str] | None" = None) -> ReaderTokens:
        """Reader work of the candidates in `specs` (all without), each shared document once;
        prefix-cache hits count only where the retriever they share a prefix with is in `specs`."""
        total, shared = ReaderTokens(), set()
        ran = {c.retriever for c in self.candidates} if specs is None else set(specs)
        members = [c for c in self.candidates if c.retriever in ran]
        for c in members:
            shared |= set(c.shared)
        for c in members:
            t = c.tokens
            if c.cached_from not in ran | shared:  # the prefix it shares was paid by a prompt that did not run
                t = ReaderTokens(t.prompt, t.generated, 0)
            total += t
        for name in sorted(shared):
            total += self.shared_tokens.get(name, ReaderTokens())
        return total

    @property
    def failed(self) -> list[str]:
        return [c.retriever for c in self.candidates if c.error is not None]
