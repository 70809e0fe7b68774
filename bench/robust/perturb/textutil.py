"""Small text helpers the perturbations share: a sentence splitter, cleaning of the reader's
rewrites, a lexical similarity. Dependency-free on purpose: the same code runs in the
server's environment and the bench's, and gives the same output in both.
"""
from __future__ import annotations

import math
import re
from collections import Counter
from typing import Sequence

from bench.robust.perturb.ta_offline import NLTK_DATA

#: NLTK's English stop words (the list shipped in bench/robust/nltk_data)
STOP_WORDS = frozenset((NLTK_DATA / "corpora" / "stopwords" / "english").read_text(encoding="utf-8").split())

# A sentence ends at . ! or ? (plus closing quotes/brackets) followed by whitespace and an
# upper-case letter, a digit or an opening quote/bracket. Not split: known abbreviations
# ("Mr.", "e.g.", "U.S."), single-letter initials ("J. R. R. Tolkien"), decimals ("3.5", no
# space). A rule-based splitter (no NLTK punkt, which would have to be downloaded): it can
# still split after an unlisted abbreviation followed by a capitalised word.
_ABBREV = frozenset(
    "mr mrs ms dr prof sr jr st mt ft vs etc e.g i.e no nos vol fig jan feb mar apr jun jul aug sep "
    "sept oct nov dec inc ltd co corp gen col lt sgt capt rev gov sen rep est approx ca c u.s u.k".split())
_BOUNDARY = re.compile(r"""(?<=[.!?])["')\]]*\s+(?=["'(\[]?[A-Z0-9])""")


def split_sentences(text: str) -> list[str]:
    """The sentences of `text`, in order, stripped; whitespace inside a sentence is kept."""
    parts: list[str] = []
    start = 0
    for m in _BOUNDARY.finditer(text):
        head = text[start:m.start()].rstrip("\"')]")
        last = head.split()[-1].lower().rstrip(".!?") if head.split() else ""
        if last in _ABBREV or (len(last) == 1 and last.isalpha()):
            continue
        parts.append(text[start:m.end()].strip())
        start = m.end()
    parts.append(text[start:].strip())
    return [p for p in parts if p]


def join_sentences(sentences: Sequence[str]) -> str:
    return " ".join(s.strip() for s in sentences if s.strip())


# ------------------------------------------------------------------ cleaning LLM rewrites
_NUMBERING = re.compile(r"^\s*(?:[-*•]|\(?\d{1,2}[.):]|\(?[a-e][.)]|#+)\s+")
# "Rewritten question:", "Paraphrase 2:", "Output:", "Here is the simplified text:" ...
_PREFIX = re.compile(
    r"^\s*(?:(?:here\s+(?:is|are)\b[^:\n]{0,80}|sure\b[^:\n]{0,60}|"
    r"(?:rewritten|paraphrased|simplified|complexified|formal|ambiguous|new|revised|translated|"
    r"modified|perturbed)?\s*(?:question|query|text|passage|paraphrase|rewrite|version|output|answer|"
    r"translation|sentence|input text)s?\s*\d*|(?:english|french|german|spanish)(?: translation)?)\s*:)\s*",
    re.IGNORECASE)
_QUOTES = "\"'“”‘’`"


def clean_line(line: str) -> str:
    """One line of a rewrite without list numbering, a leading label and wrapping quotes."""
    prev = None
    while prev != line:
        prev = line
        line = _PREFIX.sub("", _NUMBERING.sub("", line)).strip()
        if len(line) >= 2 and line[0] in _QUOTES and line[-1] in _QUOTES:
            line = line[1:-1].strip()
    return line


def candidate_lines(output: str, original: str = "") -> list[str]:
    """The usable lines of a reader output that was asked for one rewrite per line: cleaned,
    non-empty, not a bare label ("Output:"), not the original itself (case and punctuation
    aside), no duplicates."""
    out: list[str] = []
    seen = {same_words(original)} if original else set()
    for raw in output.splitlines():
        if raw.strip().endswith(":") and len(raw.split()) <= 8:  # a header ("Here are 5 paraphrases:")
            continue
        line = clean_line(raw)
        key = same_words(line)
        if line and key not in seen and any(ch.isalnum() for ch in line):
            seen.add(key)
            out.append(line)
    return out


# A small reader asked to rewrite a question often answers it or comments on it instead
# ("The answer is ...", "The sentence is ambiguous: ..."): such lines are not rewrites.
_META = re.compile(r"\banswer(?:s|ed)?\b|\bparaphras|\brephras|\brewrit|\bthe (?:original|sentence|input)\b",
                   re.IGNORECASE)
_OPENER = re.compile(
    r"^(?:who|whom|whose|what|when|where|which|why|how|is|are|was|were|am|do|does|did|can|could|will|would|"
    r"shall|should|may|might|must|has|have|had|in|on|at|for|from|to|by|of|during|name|list|tell|please|"
    r"i'?m curious|i am curious|i want|i'?d like|i would like|i wonder|i need|could you|can you)\b",
    re.IGNORECASE)


def is_question(text: str) -> bool:
    """Reads as a question or a request for information: ends in "?" or opens like one."""
    text = text.strip()
    return text.endswith("?") or bool(_OPENER.match(text))


def query_rewrites(output: str, original: str) -> list[str]:
    """`candidate_lines` that are rewrites of the query `original`: no commentary on the task
    or answer, and a question when the original is one."""
    must_ask = is_question(original)
    return [c for c in candidate_lines(output, original)
            if not _META.search(c) and (is_question(c) or not must_ask)]


def clean_passage(output: str) -> str:
    """A rewritten passage without a leading label line ("Here is the simplified text:") or
    label prefix, and without wrapping quotes; empty when nothing is left."""
    lines = output.strip().splitlines()
    while lines and lines[0].strip().endswith(":") and len(lines[0].split()) <= 12:
        lines = lines[1:]
    if not lines:
        return ""
    lines[0] = clean_line(lines[0])
    text = "\n".join(lines).strip()
    if len(text) >= 2 and text[0] in _QUOTES and text[-1] in _QUOTES:
        text = text[1:-1].strip()
    return text if any(ch.isalnum() for ch in text) else ""


def tidy_rewrite(text: str) -> str:
    """A reader's rewrite of a passage without the ways a small model degenerates: repeated
    sentences (kept once) and a last sentence cut off by the token limit (no end mark)."""
    sents, seen = [], set()
    for s in split_sentences(text):
        if _squash(s) not in seen:
            seen.add(_squash(s))
            sents.append(" ".join(s.split()))
    if len(sents) > 1 and not re.search(r"""[.!?]["')\]]*$""", sents[-1]):
        sents.pop()
    return join_sentences(sents)


def _squash(text: str) -> str:
    return " ".join(text.lower().split())


def same_words(text: str) -> str:
    """A text's words, lowercased, without punctuation: "What does HP mean?" and "what does hp
    mean" are one text (a rewrite that only capitalises or adds a "?" changes nothing)."""
    return " ".join(re.sub(r"[^\w\s]", " ", text.lower()).split())


# ------------------------------------------------------------------ similarity
def _trigrams(text: str) -> Counter:
    t = f"  {_squash(text)} "
    return Counter(t[i:i + 3] for i in range(len(t) - 2))


def similarity(a: str, b: str) -> float:
    """Cosine similarity of character-trigram counts, in [0, 1]: the bench's dependency-free
    stand-in for the embedding model RARE ranks its candidates with (1.0 = same text)."""
    x, y = _trigrams(a), _trigrams(b)
    dot = sum(v * y[k] for k, v in x.items())
    norm = math.sqrt(sum(v * v for v in x.values())) * math.sqrt(sum(v * v for v in y.values()))
    return min(1.0, dot / norm) if norm else 0.0
