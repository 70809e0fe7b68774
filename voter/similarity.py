"""Pairwise answer similarity: the metric protocol, a name registry, and the tensor builder.

A metric scores a batch of (a, b, question) triples at once and returns floats in [0, 1].
Pairs whose normalised answers are identical score 1.0 in every metric without reaching a
model (the base class enforces it). Metrics register by name with lazy factories, so
importing this module never loads torch, transformers or bert_score.

`similarity_tensor` builds the voter's input once per data set: each distinct unordered
answer pair is scored once per metric (across all questions when the metric ignores the
question), in one batched call per metric.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Callable, NamedTuple, Sequence

import numpy as np

from retrievers.registry import Registry
from voter.normalize import normalize_answer


class AnswerPair(NamedTuple):
    a: str
    b: str
    question: str = ""


MEMO_PAIRS = 200_000  # pairs a metric object remembers


class PairSimilarity(ABC):
    """Base of every metric. Subclasses implement `_score` for non-identical pairs only."""

    name: str = "?"
    symmetric: bool = True  # sim(a, b) == sim(b, a): the tensor builder scores one order
    uses_question: bool = False  # False: pairs are deduplicated across questions

    def load(self) -> None:
        """Load models (explicit, so constructors stay cheap). Idempotent."""

    def score(self, pairs: Sequence[tuple[str, str] | tuple[str, str, str]]) -> np.ndarray:
        """Similarity of every pair, float64 [len(pairs)] in [0, 1]. A pair scored before (by
        this metric object) is not scored again: the rounds of an adaptive vote re-vote over
        the answers so far, and only the new answers' pairs cost a model call."""
        triples = [AnswerPair(*p) for p in pairs]
        out = np.ones(len(triples), dtype=np.float64)
        memo: dict = self.__dict__.setdefault("_memo", {})
        todo, keys = [], {}
        for i, p in enumerate(triples):
            if normalize_answer(p.a) == normalize_answer(p.b):
                continue
            key = self._memo_key(p)
            if key in memo:
                out[i] = memo[key]
            else:
                todo.append(i)
                keys[i] = key
        if todo:
            self.load()
            vals = np.asarray(self._score([triples[i] for i in todo]), dtype=np.float64)
            if vals.shape != (len(todo),):
                raise RuntimeError(f"{type(self).__name__} returned {vals.shape} scores for {len(todo)} pairs")
            vals = np.clip(np.nan_to_num(vals, nan=0.0), 0.0, 1.0)
            out[todo] = vals
            if len(memo) > MEMO_PAIRS:
                memo.clear()  # bounded: a long-lived service forgets and starts again
            memo.update((keys[i], float(v)) for i, v in zip(todo, vals))
        return out

    def _memo_key(self, p: "AnswerPair") -> tuple:
        a, b = (p.a, p.b) if not self.symmetric or p.a <= p.b else (p.b, p.a)
        return (a, b, p.question) if self.uses_question else (a, b)

    @abstractmethod
    def _score(self, pairs: list[AnswerPair]) -> np.ndarray:
        """Scores for pairs whose normalised answers differ."""


class EMSimilarity(PairSimilarity):
    """Normalised exact match: 1 if the SQuAD-normalised answers are equal, else 0. No model."""

    name = "em"

    def _score(self, pairs: list[AnswerPair]) -> np.ndarray:
        return np.zeros(len(pairs))  # identical pairs never get here


# -- registry ------------------------------------------------------------------------
METRICS = Registry("similarity metric")


def register_metric(name: str) -> Callable[[Callable[..., PairSimilarity]], Callable[..., PairSimilarity]]:
    """Register a factory `(**kwargs) -> PairSimilarity` under `name`."""
    return METRICS.entry(name)


def create_metric(name: str, **kwargs: Any) -> PairSimilarity:
    """Build a metric by name (ValueError naming the known ones); cheap: models load on
    `load()` or first use."""
    return METRICS.create(name, **kwargs)


def available_metrics() -> list[str]:
    return METRICS.names()


@register_metric("em")
def _em(**kwargs: Any) -> PairSimilarity:
    return EMSimilarity(**kwargs)


@register_metric("bertscore")
def _bertscore(**kwargs: Any) -> PairSimilarity:
    from voter.bertscore import BERTScoreSimilarity

    return BERTScoreSimilarity(**kwargs)


@register_metric("nli")
def _nli(backend: str = "llm", **kwargs: Any) -> PairSimilarity:
    """backend "llm": LLMNLISimilarity(reader=...) (embedded default); "hf": HFNLISimilarity(model=...)."""
    from voter.nli import NLI_BACKENDS

    try:
        cls = NLI_BACKENDS[backend]
    except KeyError:
        raise ValueError(f"unknown NLI backend {backend!r}; available: {sorted(NLI_BACKENDS)}") from None
    return cls(**kwargs)


# -- the similarity tensor -----------------------------------------------------------
def similarity_tensor(
    answers: Sequence[Sequence[str | None]],
    questions: Sequence[str],
    metrics: Sequence[PairSimilarity],
    dtype: type = np.float32,
) -> tuple[np.ndarray, np.ndarray]:
    """(sim [N, M, M, K], mask [N, M]) for N questions x M retrievers x K metrics.

    `answers[i][m]` is retriever m's answer to question i, None if it failed (masked out:
    its rows and columns are 0). The diagonal of every answered retriever is 1.
    """
    n = len(answers)
    if len(questions) != n:
        raise ValueError(f"{n} answer lists but {len(questions)} questions")
    m = len(answers[0]) if n else 0
    if any(len(row) != m for row in answers):
        raise ValueError("every question needs the same number of answers (one per retriever)")
    k = len(metrics)
    mask = np.array([[a is not None for a in row] for row in answers], dtype=bool).reshape(n, m)
    norm = [[normalize_answer(a) if a is not None else None for a in row] for row in answers]
    sim = np.zeros((n, m, m, k), dtype=dtype)

    # Identical normalised answers (diagonal included): 1.0 in every metric, no model.
    for i in range(n):
        for a in range(m):
            if norm[i][a] is None:
                continue
            for b in range(m):
                if norm[i][b] == norm[i][a]:
                    sim[i, a, b, :] = 1.0

    for kk, metric in enumerate(metrics):
        keys: dict[tuple[str, str, str], int] = {}
        todo: list[AnswerPair] = []
        idx_i, idx_a, idx_b, idx_key = [], [], [], []
        for i in range(n):
            for a in range(m):
                if norm[i][a] is None:
                    continue
                for b in range(a + 1 if metric.symmetric else 0, m):
                    if norm[i][b] is None or norm[i][b] == norm[i][a]:
                        continue
                    x, y = (a, b)
                    if metric.symmetric and norm[i][b] < norm[i][a]:
                        x, y = b, a  # canonical order, so (p, q) and (q, p) share one call
                    q = questions[i] if metric.uses_question else ""
                    key = (q, norm[i][x], norm[i][y])
                    j = keys.get(key)
                    if j is None:
                        j = keys[key] = len(todo)
                        todo.append(AnswerPair(answers[i][x], answers[i][y], questions[i]))
                    idx_i.append(i), idx_a.append(x), idx_b.append(y), idx_key.append(j)
        if not todo:
            continue
        vals = metric.score(todo)
        ii, aa, bb = np.array(idx_i), np.array(idx_a), np.array(idx_b)
        got = vals[np.array(idx_key)]
        sim[ii, aa, bb, kk] = got
        if metric.symmetric:
            sim[ii, bb, aa, kk] = got
    return sim, mask
