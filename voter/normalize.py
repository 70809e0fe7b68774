"""SQuAD-style answer normalisation (answers/: the one definition, shared with the bench).

Every string comparison in the voter (EM similarity, the EM short-circuit that skips model
calls, the QA metrics) goes through this one function, so "The Eiffel Tower." and
"eiffel tower" are the same answer everywhere.
"""
from __future__ import annotations

from answers import normalize_answer  # noqa: F401  (the one definition, shared with the bench)


def normalize_tokens(text: str) -> list[str]:
    """The normalised answer split into tokens (for token-level F1)."""
    return normalize_answer(text).split()


def is_non_answer(answer: str, question: str) -> bool:
    """Empty after normalisation, or only the question restated: small readers often echo the
    question, and identical echoes would otherwise outvote real answers."""
    a = normalize_answer(answer)
    return a == "" or a == normalize_answer(question)
