"""The vote for given weights: argmax on hand-made tensors, masks, ties, drops, margins."""
import numpy as np
import pytest

from tests.voter.conftest import tensor_from_clusters
from voter.voting import VoteRule, VoterWeights, choose, decision_scores, vote_margin

MEAN = VoteRule("mean")


def weights(wr, ws=(1.0,), t=0.1):
    return VoterWeights.from_arrays(ws, wr, t)


def pick(clusters, mask=None, wr=(0.5, 0.5, 0.5, 0.5), rule=MEAN, ws=(1.0,)):
    sim, m = tensor_from_clusters(np.array([clusters]), None if mask is None else np.array([mask]), k=len(ws))
    return int(choose(decision_scores(sim, m, weights(wr, ws), rule))[0])


def test_majority_answer_wins_and_ties_go_to_lowest_index():
    # answers A B A C: retrievers 0 and 2 agree; equal scores -> lowest index
    assert pick([0, 1, 0, 2]) == 0
    assert pick([1, 0, 2, 0]) == 1


def test_retriever_weight_breaks_the_tie():
    assert pick([0, 1, 0, 2], wr=(0.5, 0.5, 0.6, 0.5)) == 2


def test_masked_retriever_never_chosen():
    assert pick([1, 0, 0, 0], mask=[False, True, True, True]) == 1
    assert pick([0, 1, 0, 0], mask=[False, True, True, True]) == 2
    # the highest-weighted retriever is missing: it cannot win even with the best weight
    assert pick([0, 0, 1, 2], mask=[False, True, True, True], wr=(0.6, 0.2, 0.2, 0.2)) == 1
    # nobody answered
    assert pick([0, 0, 0, 0], mask=[False] * 4) == -1


def test_missing_retriever_does_not_vote():
    # without the mask, answer 0 (retrievers 0, 1, 2 agree) wins; masking 0 and 1 leaves
    # answers 1 (B), 2 (A), 3 (B): now B wins with retriever 1 -> masked, so retriever 3
    assert pick([0, 1, 0, 1], mask=[False, True, True, True]) == 1
    assert pick([0, 1, 0, 1], mask=[True, False, True, True]) == 0


def test_dropped_retriever_never_wins_and_by_default_does_not_vote():
    wr = (0.05, 0.5, 0.5, 0.5)  # retriever 0 below t = 0.1
    # A B A C: without 0's vote, 2 agrees with nobody -> all kept scores 0 -> lowest kept index
    assert pick([0, 1, 0, 2], wr=wr) == 1
    # with dropped_vote, 0 still votes for 2, but cannot win itself
    assert pick([0, 1, 0, 2], wr=wr, rule=VoteRule("mean", dropped_vote=True)) == 2


def test_fallback_when_only_dropped_retrievers_answered():
    wr = (0.05, 0.08, 0.5, 0.5)
    # both agree (equal pools): the higher raw weight wins among the answers we have
    assert pick([0, 0, 2, 3], mask=[True, True, False, False], wr=wr) == 1
    assert pick([0, 0, 2, 3], mask=[True, True, False, True], wr=wr) == 3  # a kept one answered


def test_weighted_metrics_combine_linearly():
    # metric 0 says (0,1) agree, metric 1 says (0,2) and (1,2) agree; M = 3
    sim = np.zeros((1, 3, 3, 2))
    sim[0, 0, 1, 0] = sim[0, 1, 0, 0] = 1.0
    sim[0, 0, 2, 1] = sim[0, 2, 0, 1] = sim[0, 1, 2, 1] = sim[0, 2, 1, 1] = 1.0
    for m in range(3):
        sim[0, m, m] = 1.0
    mask = np.ones((1, 3), bool)
    s = decision_scores(sim, mask, weights((0.5, 0.5, 0.5), ws=(0.6, 0.1)), MEAN)
    np.testing.assert_allclose(s[0], 0.5 * np.array([0.7, 0.7, 0.2]) / 2)
    s = decision_scores(sim, mask, weights((0.5, 0.5, 0.5), ws=(0.1, 0.6)), MEAN)
    assert choose(s)[0] == 2


@pytest.mark.parametrize("pooling", ["max", "majority", "plurality"])
def test_other_poolings_pick_the_consensus(pooling):
    # B A C A A: the three A's form the majority; the first of them wins the tie
    assert pick([1, 0, 2, 0, 0], wr=(0.5,) * 5, rule=VoteRule(pooling, sim_threshold=0.5)) == 1


def test_scores_are_minus_inf_where_nobody_can_win():
    sim, mask = tensor_from_clusters(np.array([[0, 0, 1]]), np.array([[True, False, True]]))
    s = decision_scores(sim, mask, weights((0.5, 0.5, 0.5)), MEAN)
    assert np.isneginf(s[0, 1]) and np.isfinite(s[0, [0, 2]]).all()


def test_vote_margin():
    s = np.array([[0.3, 0.1, -np.inf], [0.5, -np.inf, -np.inf], [-np.inf, -np.inf, -np.inf], [0.2, 0.2, 0.0]])
    np.testing.assert_allclose(vote_margin(s), [0.2, np.inf, np.nan, 0.0])


def test_shape_errors():
    sim, mask = tensor_from_clusters(np.array([[0, 0, 1]]))
    with pytest.raises(ValueError, match="3"):
        decision_scores(sim, mask, weights((0.5, 0.5)), MEAN)
    with pytest.raises(ValueError, match="metrics"):
        decision_scores(sim, mask, weights((0.5, 0.5, 0.5), ws=(1.0, 1.0)), MEAN)
    with pytest.raises(ValueError, match="unknown pooling"):
        VoteRule("median")


def test_answer_margin_ignores_agreeing_retrievers():
    from voter.voting import answer_margin

    scores = np.array([0.9, 0.9, 0.4, -np.inf])
    # two retrievers agree on "Paris" (normalised): the rival is "Lyon", not the tied twin
    assert answer_margin(scores, ["Paris", "paris.", "Lyon", None], 0) == pytest.approx(0.5)
    assert answer_margin(scores, ["Paris", "Paris", "Paris", None], 0) is None  # unanimous
    assert answer_margin(scores, ["a", "b", "c", "d"], -1) is None  # nobody answered
