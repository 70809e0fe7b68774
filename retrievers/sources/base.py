"""The knowledge-source protocol: batch-first search returning ranked passages."""
from __future__ import annotations

from typing import Protocol, Sequence

from retrievers.types import Passage


class KnowledgeSource(Protocol):
    name: str

    def load(self) -> "KnowledgeSource":
        """Open indexes / models (cheap constructors, explicit warm-up)."""

    def search(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        """Top-k results per query, best first."""


class MissingIndexError(FileNotFoundError):
    """An index that has not been built; the message names the command that builds it."""
