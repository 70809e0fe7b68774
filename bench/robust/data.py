"""The suites' inputs: questions with their gold passages, and a noise passage per question.

    items = load_items(questions_file, corpus_file, dataset="nq-open-oracle", limit=20, noise=True)  # eval split

Gold passages come from the corpus by the question's `gold_pids`. SURE's Noise subset needs
a grounding document that does *not* hold the answer; SURE took retrieved documents without
the answer, so the noise document here is the retrieval-like hard negative: the corpus
passage with the highest BM25 score for the question (k1=0.9, b=0.4, Pyserini's defaults)
that is not gold and contains no gold answer (normalised string match). Deterministic: ties
break by corpus order.
"""
from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from bench.common import DEFAULT_CORPUS, DEFAULT_QUESTIONS, read_corpus, read_questions
from bench.robust.client import Doc
from bench.robust.qa import contains_answer, normalize_answer

_TOKEN = re.compile(r"[a-z0-9]+")
_STOP = frozenset("""a an and are as at be by for from has have he her his in is it its of on or
that the their they this to was were what when where which who whom whose why how with did does
do name many much".""".split())


def tokens(text: str) -> list[str]:
    return [t for t in _TOKEN.findall(text.lower()) if t not in _STOP]


@dataclass(frozen=True)
class Item:
    """One question of a suite, with its grounding material."""

    qid: str
    question: str
    answers: tuple[str, ...]
    gold: tuple[Doc, ...]  # the gold passages (gold_pids order)
    noise: Doc | None = None  # SURE's Noise document (None when not asked for or none found)
    gold_pids: tuple[str, ...] = field(default=())

    @property
    def golden(self) -> Doc | None:
        """SURE's Golden document: the first gold passage that holds an answer."""
        return next((d for d in self.gold if contains_answer(d.text, self.answers)), None)


def to_doc(rec: dict) -> Doc:
    return Doc(text=rec["text"], title=rec.get("title", ""), id=rec["id"], source=rec.get("source", ""))


class BM25:
    """A small in-memory BM25 over the corpus (only for choosing noise documents)."""

    def __init__(self, docs: Sequence[dict], k1: float = 0.9, b: float = 0.4):
        self.docs = list(docs)
        self.k1, self.b = k1, b
        self.postings: dict[str, list[tuple[int, int]]] = defaultdict(list)
        lengths = []
        for i, d in enumerate(self.docs):
            toks = tokens(f"{d.get('title', '')} {d['text']}")
            lengths.append(len(toks))
            for t, n in Counter(toks).items():
                self.postings[t].append((i, n))
        self.lengths = lengths
        self.avgdl = (sum(lengths) / len(lengths)) if lengths else 1.0
        n_docs = len(self.docs)
        self.idf = {t: math.log(1 + (n_docs - len(p) + 0.5) / (len(p) + 0.5)) for t, p in self.postings.items()}

    def ranked(self, query: str) -> list[int]:
        """Document indexes by descending score (ties: corpus order); only docs sharing a term."""
        scores: dict[int, float] = defaultdict(float)
        for t in set(tokens(query)):
            idf = self.idf.get(t)
            if idf is None:
                continue
            for i, tf in self.postings[t]:
                norm = self.k1 * (1 - self.b + self.b * self.lengths[i] / self.avgdl)
                scores[i] += idf * tf * (self.k1 + 1) / (tf + norm)
        return sorted(scores, key=lambda i: (-scores[i], i))


def pick_noise(bm25: BM25, question: str, answers: Sequence[str], gold_ids: Iterable[str],
               gold_texts: Iterable[str] = ()) -> dict | None:
    """The best-scoring passage that is neither gold (by id or by identical text) nor holds an
    answer (None if none does)."""
    gold = set(gold_ids)
    gold_texts = {normalize_answer(t) for t in gold_texts}
    for i in bm25.ranked(question):
        d = bm25.docs[i]
        if d["id"] in gold or d["id"].split("#", 1)[0] in gold:
            continue
        if contains_answer(d["text"], answers) or normalize_answer(d["text"]) in gold_texts:
            continue
        return d
    return None


def load_items(questions: str = DEFAULT_QUESTIONS, corpus: str = DEFAULT_CORPUS,
               dataset: str | None = "nq-open-oracle", limit: int | None = None,
               noise: bool = False, split: str = "eval") -> list[Item]:
    """The first `limit` questions of `dataset` in the offline `split` (default "eval": none a
    voter was fitted on), in file order, whose gold passages are all in the corpus (a question
    with a missing gold passage is skipped: no oracle or golden document)."""
    recs = read_corpus(corpus)
    rows = read_questions(questions, dataset, None, split)
    bm25 = BM25(list(recs.values())) if noise else None
    items: list[Item] = []
    for r in rows:
        gold_ids = [str(p) for p in r.get("gold_pids", [])]
        if not gold_ids or any(p not in recs for p in gold_ids):
            continue
        answers = tuple(str(a) for a in r["answers"])
        nz = None
        if bm25 is not None:
            picked = pick_noise(bm25, r["question"], answers, gold_ids, [recs[p]["text"] for p in gold_ids])
            nz = to_doc(picked) if picked else None
        items.append(Item(qid=str(r["qid"]), question=r["question"], answers=answers,
                          gold=tuple(to_doc(recs[p]) for p in gold_ids), noise=nz,
                          gold_pids=tuple(gold_ids)))
        if limit and len(items) >= limit:
            break
    if not items:
        raise SystemExit(f"no usable questions (dataset {dataset!r}, split {split!r}) in {questions} "
                         f"with gold passages in {corpus}")
    return items
