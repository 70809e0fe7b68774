"""Answer correctness for the robustness suites: EM and Match (answers/: the voter's own
definitions, shared), a gold answer in a document or a rewrite, refusal detection."""
from __future__ import annotations

import re
from typing import Sequence

from answers import exact_match, match, normalize_answer  # noqa: F401  (the suites import them from here)


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
