"""Answer correctness for the robustness suites: normalisation, EM, Match, refusal detection.

The bench may not import the server's packages, so this is its own small copy of
`voter/normalize.py` and `voter.qa_metrics.exact_match` / `match` (same definitions: SQuAD
v1.1 normalisation; Match = a normalised gold answer contained in the normalised output,
BERGEN's metric, used by all three papers). Keep the two in step.
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
    """The normalised prediction equals a normalised gold answer."""
    pred = normalize_answer(prediction)
    return any(pred == normalize_answer(g) for g in golds if normalize_answer(g))


def match(prediction: str, golds: Sequence[str], word_boundary: bool = False) -> bool:
    """A normalised gold answer is contained in the normalised prediction (plain substring,
    as BERGEN's Match; `word_boundary=True` accepts whole tokens only: "1" not in "1990")."""
    pred = normalize_answer(prediction)
    if word_boundary:
        pred = f" {pred} "
    for g in golds:
        gold = normalize_answer(g)
        if gold and (f" {gold} " if word_boundary else gold) in pred:
            return True
    return False


def contains_answer(text: str, golds: Sequence[str]) -> bool:
    """A document holds a gold answer (SURE's string-match preservation, RARE's has-answer)."""
    return match(text, golds)


def leaks_answer(rewrite: str, original: str, golds: Sequence[str]) -> bool:
    """A rewritten query names a gold answer its original did not (whole tokens, so "1" is
    not leaked by "1990"): the rewrite answers the question, so it is no perturbed sample."""
    return match(rewrite, golds, word_boundary=True) and not match(original, golds, word_boundary=True)


# RARE's generator prompt asks for "no such info" when the context lacks the answer; this
# service's reader prompt (EoR App. C.2) asks for "one or few words" and has no refusal
# instruction, so a refusal is any of the ways a small reader says it cannot answer.
_REFUSAL_WHOLE = frozenset({"unknown", "none", "na", "n a", "no res", "nores", "unanswerable", "no answer",
                            "not known", "not sure", "not mentioned", "not given", "not stated", "not provided",
                            "not specified", "no information", "no info"})
_REFUSAL_PHRASE = re.compile(
    r"\bno such info|\bno idea\b|\bunanswerable\b|\bnot sure\b"
    r"|\bi (do not|dont|cannot|can not|cant) know\b"
    r"|\b(does not|doesnt|do not|dont) (contain|mention|provide|say|specify|include|state|have)\b"
    r"|\b(no|not enough) (relevant )?(info|information|context|mention|data)\b"
    r"|\b(is|are|was|were) not (mentioned|provided|given|specified|stated|available|known)\b"
    r"|\b(cannot|can not|cant|unable to) (be )?(answer|determin|find|tell|say)")


def is_refusal(prediction: str) -> bool:
    """The output declines to answer ("no such info", "unknown", "the passage does not
    mention ...", "I don't know"). An empty output is not a refusal: it is a failure."""
    text = normalize_answer(prediction)
    return text in _REFUSAL_WHOLE or bool(_REFUSAL_PHRASE.search(text))
