"""SQuAD-style answer normalisation.

Every string comparison in the voter (EM similarity, the EM short-circuit that skips model
calls, the QA metrics) goes through this one function, so "The Eiffel Tower." and
"eiffel tower" are the same answer everywhere.
"""
from __future__ import annotations

import re
import string

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = frozenset(string.punctuation)


def normalize_answer(text: str) -> str:
    """Lowercase, drop punctuation, drop articles (a/an/the), collapse whitespace (SQuAD v1.1)."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in _PUNCT)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def normalize_tokens(text: str) -> list[str]:
    """The normalised answer split into tokens (for token-level F1)."""
    return normalize_answer(text).split()


def is_non_answer(answer: str, question: str) -> bool:
    """Empty after normalisation, or only the question restated: small readers often echo the
    question, and identical echoes would otherwise outvote real answers."""
    a = normalize_answer(answer)
    return a == "" or a == normalize_answer(question)
