"""What counts as the same answer and as a right one: SQuAD v1.1 normalisation, exact match and
BERGEN's Match (a normalised gold answer inside the normalised output; all three papers use it).
One home for the voter (voter/normalize.py, voter/qa_metrics.py) and the robustness bench (a gRPC
client with its own environment, which imports none of the server's packages). Standard library only.
"""
from __future__ import annotations

import re
import string
from typing import Sequence

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = frozenset(string.punctuation)


def normalize_answer(text: str) -> str:
    """Lowercase, drop punctuation, drop articles (a/an/the), collapse whitespace (SQuAD v1.1)."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in _PUNCT)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def exact_match(prediction: str, golds: Sequence[str]) -> bool:
    """The normalised prediction equals a normalised gold answer (a gold that normalises to
    nothing, such as "*", matches nothing)."""
    pred = normalize_answer(prediction)
    return any(pred == gold for gold in map(normalize_answer, golds) if gold)


def match(prediction: str, golds: Sequence[str], word_boundary: bool = False) -> bool:
    """A normalised gold answer is contained in the normalised prediction (plain substring, as
    BERGEN's Match; `word_boundary=True` accepts whole tokens only: "1" not in "1990")."""
    pred = normalize_answer(prediction)
    if word_boundary:
        pred = f" {pred} "
    return any((f" {gold} " if word_boundary else gold) in pred for gold in map(normalize_answer, golds) if gold)
