"""QA correctness metrics and the retriever-inconsistency statistics of EoR §2.1.

`exact_match`, `token_f1` and `match` score one prediction against its gold aliases (best
alias wins). `rwr_matrix`, `mrwr` and `mrlr` are the paper's eqs. 1-3 over a correctness
matrix [N questions, M retrievers]; `oracle_upper_bound` is Figure 5's perfect-voter bound.
"""
from __future__ import annotations

from collections import Counter
from typing import Iterable, Sequence

import numpy as np

import answers
from voter.normalize import normalize_tokens


def exact_match(prediction: str, golds: Sequence[str]) -> float:
    """1.0 if the normalised prediction equals any normalised gold answer (answers/)."""
    return float(answers.exact_match(prediction, golds))


def _f1(pred_tokens: list[str], gold_tokens: list[str]) -> float:
    if not pred_tokens or not gold_tokens:
        return float(pred_tokens == gold_tokens)
    common = Counter(pred_tokens) & Counter(gold_tokens)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision = same / len(pred_tokens)
    recall = same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def token_f1(prediction: str, golds: Sequence[str]) -> float:
    """SQuAD token-overlap F1 against the best-matching gold answer."""
    pred = normalize_tokens(prediction)
    return max((_f1(pred, normalize_tokens(g)) for g in golds), default=0.0)


def match(prediction: str, golds: Sequence[str], word_boundary: bool = False) -> float:
    """1.0 if a normalised gold answer is contained in the normalised prediction: BERGEN's
    *Match* (used by the query-level robustness paper), a plain substring test (answers/).
    `word_boundary=True` only accepts whole-token matches ("1" not in "1990")."""
    return float(answers.match(prediction, golds, word_boundary))


def _as_bool(correct: np.ndarray | Sequence[Sequence[float]]) -> np.ndarray:
    arr = np.asarray(correct)
    if arr.ndim != 2:
        raise ValueError(f"correctness must be [N questions, M retrievers], got shape {arr.shape}")
    return arr if arr.dtype == bool else arr >= 0.5


def rwr_matrix(correct: np.ndarray) -> np.ndarray:
    """RWR(i, j): share of the questions r_j got wrong that r_i got right (eq. 1).

    Returns [M, M]; column j is NaN when r_j got no question wrong (the ratio is undefined).
    """
    ok = _as_bool(correct).astype(np.float64)
    wrong = 1.0 - ok
    wins = ok.T @ wrong  # [i, j] = #questions i right and j wrong
    denom = wrong.sum(axis=0)  # per j
    out = np.full(wins.shape, np.nan)
    np.divide(wins, denom[None, :], out=out, where=denom[None, :] > 0)
    return out


def _off_diagonal_nanmean(mat: np.ndarray, axis: int) -> np.ndarray:
    m = mat.copy()
    np.fill_diagonal(m, np.nan)
    valid = ~np.isnan(m)
    total = np.where(valid, m, 0.0).sum(axis=axis)
    count = valid.sum(axis=axis)
    out = np.full(total.shape, np.nan)
    np.divide(total, count, out=out, where=count > 0)
    return out


def mrwr(correct: np.ndarray) -> np.ndarray:
    """Mean Relative Win Ratio (eq. 2): row mean of RWR over j != i ([M]).

    Undefined RWR entries (NaN) are left out of the mean; NaN if none is defined.
    """
    return _off_diagonal_nanmean(rwr_matrix(correct), axis=1)


def mrlr(correct: np.ndarray) -> np.ndarray:
    """Mean Relative Lose Ratio (eq. 3): column mean of RWR over j != i ([M]).

    MRLR(i) = 0 means no other retriever ever fixes a question r_i gets wrong. NaN when r_i
    got nothing wrong (every RWR(j, i) is undefined).
    """
    return _off_diagonal_nanmean(rwr_matrix(correct), axis=0)


def oracle_upper_bound(correct: np.ndarray, subset: Iterable[int] | np.ndarray | None = None) -> float:
    """Share of questions that at least one retriever of the pool answers right (Figure 5).

    `subset` selects the pool: retriever indices, or a boolean mask over the M columns.
    """
    ok = _as_bool(correct)
    if subset is not None:
        sel = np.asarray(list(subset) if not isinstance(subset, np.ndarray) else subset)
        if sel.dtype == bool:
            if sel.shape != (ok.shape[1],):
                raise ValueError(f"boolean subset must have length {ok.shape[1]}, got {sel.shape}")
            ok = ok[:, sel]
        else:
            ok = ok[:, sel.astype(int)]
    if ok.shape[0] == 0:
        return float("nan")
    return float(ok.any(axis=1).mean()) if ok.shape[1] else 0.0
