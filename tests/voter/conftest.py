"""Voter test helpers (offline settings and the shared fixtures are in tests/conftest.py)."""
from __future__ import annotations

import numpy as np


def tensor_from_clusters(clusters: np.ndarray, mask: np.ndarray | None = None, k: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """sim[i, m, n, :] = 1 if answers m and n are in the same cluster, else 0."""
    clusters = np.asarray(clusters)
    same = (clusters[:, :, None] == clusters[:, None, :]).astype(np.float64)
    sim = np.repeat(same[..., None], k, axis=-1)
    if mask is None:
        mask = np.ones(clusters.shape, dtype=bool)
    return sim, np.asarray(mask, dtype=bool)


def logprob_scorer(pool, weight: float = 5.0, intercept: float = 2.5):
    """An answer scorer that reads only the reader's mean token log-probability:
    P(right) = sigmoid(weight * mean log-prob + intercept) (0.90 at -0.05, 0.5 at -0.5, 0.00 at -2.5)."""
    from voter.selector import AnswerScorer, feature_names

    names = feature_names(pool)
    coef = [0.0] * len(names)
    coef[names.index("mean_logprob")] = weight
    return AnswerScorer.from_dict({"features": list(names), "mean": [0.0] * len(names), "scale": [1.0] * len(names),
                                   "coef": coef, "intercept": intercept}, names)


SMALL, STRONG = "qwen2.5-coder-0.5b:q05:bfloat16", "qwen2.5-coder-1.5b:q15:bfloat16"  # engine model ids
ONE_READER_POOL = ("Wiki@10", "SE@1", "PK")
TWO_READER_POOL = ("Wiki@10", "SE@1", "Wiki@10~1.5B", "PK")


def reader_voter(pool=TWO_READER_POOL, readers=None, fallback=None, reader_model: str = SMALL):
    """A fitted (equal-weight) voter over `pool`, recording `readers` (default: the two readers)."""
    from voter.question_vote import equal_weights
    from voter.weights_io import Provenance, SavedWeights

    base = equal_weights(list(pool), ["em"])
    return SavedWeights(base.pool, base.metrics, base.pooling, base.threshold, base.weights,
                        Provenance("q.jsonl", 30, reader_model, 0.5),
                        readers={"": reader_model, "1.5B": STRONG} if readers is None else readers, fallback=fallback)
