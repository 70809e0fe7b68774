"""What the fit and the evaluation read: each question (its gold answers and dataset) with the
pool's result on it. Correctness is *Match on whole tokens* (a normalised gold answer found in the
normalised output at token boundaries, as DPR's `has_answer`), not the paper's BEM or EM: the small
readers this system runs answer in sentences ("The Mona Lisa was painted by Leonardo da Vinci."),
which EM scores 0 and Match scores 1; BEM needs a model no package ships. BERGEN's plain substring
Match (the papers' figure) found "3" in "13" (26 of the 700 eval questions until 2026-11-29 had a
gold of 3 characters or fewer), and a scorer trained on it learnt to prefer long answers: it is
reported beside (`substring_match`), never fitted on. A failed retriever or an empty answer counts
as wrong and takes no part in the vote.
"""
from __future__ import annotations

from typing import Callable, Protocol, Sequence

import numpy as np

from retrievers.types import QuestionResult
from voter.qa_metrics import match
from voter.question_vote import answer_grid


class Graded(Protocol):
    """A question as the fit reads it (serve/offline/dataset.py: Question is one)."""

    answers: Sequence[str]
    dataset: str


CORRECTNESS = "match-tokens"  # what a voter file records it was fitted on ("match": the substring test, before)


def right(prediction: str, golds: Sequence[str]) -> float:
    """1.0 when a normalised gold answer is in the normalised prediction as whole tokens."""
    return match(prediction, golds, word_boundary=True)


def substring_match(prediction: str, golds: Sequence[str]) -> float:
    """BERGEN's Match (a plain substring test): beside the figures, for the papers' sake."""
    return match(prediction, golds)

Scored = Sequence[tuple[Graded, QuestionResult]]


def correctness(scored: Scored, pool: Sequence[str],
                g: Callable[[str, Sequence[str]], float] = right) -> np.ndarray:
    """y [N, M]: g(answer of retriever m, gold answers of question i); 0 where it cannot vote."""
    grid = answer_grid([r for _, r in scored], pool)
    return np.array([[g(a, q.answers) if a is not None else 0.0 for a in row]
                     for (q, _), row in zip(scored, grid)], dtype=np.float64).reshape(len(scored), len(pool))
