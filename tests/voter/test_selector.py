"""The confidence-aware answer scorer: its features, what it learns on seeded data whose right
answers are known, its file form (the stop thresholds and layouts: tests/fitting/)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from fitting.pool_run import round_views, training_rows
from tests.fitting.runs import POOL, synthetic_run
from voter.selector import AnswerScorer, NO_LOGPROB, RoundView, candidate_features, feature_names, pick


def test_features_count_agreement_and_mark_unknown_confidence():
    view = RoundView(("paris", "Paris", "rome", None), (0.9, 0.8, 0.2, -math.inf),
                     ((-0.1, -0.3), None, (-2.0,), None))
    X, idx = candidate_features(view, POOL)
    names = feature_names(POOL)
    col = {n: i for i, n in enumerate(names)}
    assert idx.tolist() == [0, 1, 2] and X.shape == (3, len(names))
    assert X[0, col["agree_count"]] == 1 and X[2, col["agree_count"]] == 0  # "paris" == "Paris" normalised
    assert X[0, col["mean_logprob"]] == pytest.approx(-0.2) and X[0, col["min_logprob"]] == -0.3
    assert X[1, col["mean_logprob"]] == NO_LOGPROB and X[1, col["logprob_known"]] == 0
    assert X[0, col["vote_rank_top"]] == 1 and X[1, col["vote_rank_top"]] == 0
    assert X[2, col["is:C"]] == 1 and X[2, col["is:A"]] == 0
    empty = RoundView((None,) * 4, (-math.inf,) * 4, (None,) * 4)
    assert candidate_features(empty, POOL)[0].shape == (0, len(names))


def test_scorer_learns_when_to_trust_a_confident_retriever_and_round_trips():
    run = synthetic_run(300)
    layout = (("A",), ("B", "C", "D"))
    views, _, _ = round_views(run, layout)
    scorer = AnswerScorer().fit(*training_rows(views, run.right, POOL, range(300)))
    sure = pick(RoundView(("x", None, None, None), (0.0, -math.inf, -math.inf, -math.inf),
                          ((-0.05,), None, None, None)), POOL, scorer)
    unsure = pick(RoundView(("x", None, None, None), (0.0, -math.inf, -math.inf, -math.inf),
                            ((-2.5,), None, None, None)), POOL, scorer)
    assert sure.index == 0 and sure.p > 0.9 and unsure.p < 0.2
    back = AnswerScorer.from_dict(scorer.to_dict(feature_names(POOL)), feature_names(POOL))
    X = np.random.default_rng(1).normal(size=(5, len(feature_names(POOL))))
    assert np.allclose(back.predict_proba(X), scorer.predict_proba(X), atol=1e-5)
    with pytest.raises(ValueError, match="features"):
        AnswerScorer.from_dict(scorer.to_dict(feature_names(POOL)), feature_names(POOL[:3]))


def test_constant_labels_give_a_constant_scorer():
    s = AnswerScorer().fit(np.zeros((4, 3)), np.ones(4))
    assert np.all(s.predict_proba(np.ones((2, 3))) > 0.9)
