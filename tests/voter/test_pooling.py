import numpy as np
import pytest

from voter.pooling import available_poolings, get_pooling, register_pooling

S = np.array(
    [
        [1.0, 0.8, 0.2],
        [0.8, 1.0, 0.4],
        [0.2, 0.4, 1.0],
    ]
)
ALL = np.array([[True, True, True]])


def pool(name, sim, mask, **kw):
    return get_pooling(name)(sim, mask, **kw)


def test_registry():
    assert available_poolings() == ["majority", "max", "mean", "plurality"]
    with pytest.raises(ValueError, match="unknown pooling"):
        get_pooling("median")
    with pytest.raises(ValueError, match="already registered"):
        register_pooling("mean")(lambda *a, **k: None)


def test_mean():
    np.testing.assert_allclose(pool("mean", S[None], ALL), [[0.5, 0.6, 0.3]])


def test_max():
    np.testing.assert_allclose(pool("max", S[None], ALL), [[0.8, 0.8, 0.4]])


def test_majority_and_plurality():
    # sim > 0.5: only the pair (0, 1). Two others each; 1 of 2 counts as majority (>= N/2).
    np.testing.assert_array_equal(pool("majority", S[None], ALL, threshold=0.5), [[1, 1, 0]])
    np.testing.assert_array_equal(pool("plurality", S[None], ALL, threshold=0.5), [[1, 1, 0]])
    # threshold 0.3: counts 1, 2, 1 -> plurality picks answer 1 alone; majority keeps all
    np.testing.assert_array_equal(pool("plurality", S[None], ALL, threshold=0.3), [[0, 1, 0]])
    np.testing.assert_array_equal(pool("majority", S[None], ALL, threshold=0.3), [[1, 1, 1]])


def test_majority_needs_half_of_the_others():
    # answers 0,1,2 agree, 3 is alone: 3 others each
    same = np.array([0, 0, 0, 1])
    sim = (same[:, None] == same[None, :]).astype(float)[None]
    mask = np.ones((1, 4), bool)
    np.testing.assert_array_equal(pool("majority", sim, mask), [[1, 1, 1, 0]])
    np.testing.assert_array_equal(pool("plurality", sim, mask), [[1, 1, 1, 0]])


def test_missing_retriever_neither_votes_nor_counts():
    mask = np.array([[True, True, False]])
    np.testing.assert_allclose(pool("mean", S[None], mask)[0, :2], [0.8, 0.8])
    np.testing.assert_allclose(pool("max", S[None], mask)[0, :2], [0.8, 0.8])
    np.testing.assert_array_equal(pool("majority", S[None], mask)[0, :2], [1, 1])
    # plurality never marks a missing retriever as a winner
    assert pool("plurality", S[None], mask)[0, 2] == 0
    mask = np.array([[True, False, True]])
    np.testing.assert_allclose(pool("mean", S[None], mask)[0, [0, 2]], [0.2, 0.2])
    np.testing.assert_array_equal(pool("majority", S[None], mask)[0, [0, 2]], [0, 0])
    np.testing.assert_array_equal(pool("plurality", S[None], mask)[0], [1, 0, 1])  # tie at 0


def test_plurality_counts_only_among_candidates():
    same = np.array([0, 0, 1, 1, 1])
    sim = (same[:, None] == same[None, :]).astype(float)[None]
    voters = np.ones((1, 5), bool)
    cands = np.array([[True, True, False, False, False]])
    np.testing.assert_array_equal(pool("plurality", sim, voters, candidates=cands), [[1, 1, 0, 0, 0]])


def test_single_voter_pools_to_zero_or_majority():
    mask = np.array([[True, False, False]])
    assert pool("mean", S[None], mask)[0, 0] == 0.0
    assert pool("max", S[None], mask)[0, 0] == 0.0
    assert pool("majority", S[None], mask)[0, 0] == 1.0  # 0 of 0 others: trivially a majority


def test_vectorised_over_questions():
    sims = np.stack([S, S[::-1, ::-1]])
    masks = np.array([[True, True, True], [True, True, False]])
    got = pool("mean", sims, masks)
    np.testing.assert_allclose(got[0], [0.5, 0.6, 0.3])
    np.testing.assert_allclose(got[1, :2], [0.4, 0.4])
