"""Value types shared by the retrievers, the reader and the voter (frozen, batch-friendly)."""
from __future__ import annotations

from dataclasses import dataclass, field


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
class Candidate:
    """One retriever's answer to one question."""

    retriever: str
    answer: str
    context: Context
    error: str | None = None  # set when the retriever failed; answer is then ""


@dataclass(frozen=True)
class QuestionResult:
    question: str
    candidates: tuple[Candidate, ...] = field(default_factory=tuple)

    @property
    def failed(self) -> list[str]:
        return [c.retriever for c in self.candidates if c.error is not None]
