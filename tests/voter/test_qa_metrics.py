import math

import numpy as np
import pytest

from voter.qa_metrics import exact_match, match, mrlr, mrwr, oracle_upper_bound, rwr_matrix, token_f1


def test_exact_match_uses_best_gold():
    assert exact_match("The Beatles.", ["Rolling Stones", "beatles"]) == 1.0
    assert exact_match("Beatles band", ["beatles"]) == 0.0


def test_token_f1():
    assert token_f1("barack obama", ["Obama"]) == pytest.approx(2 * 0.5 * 1 / 1.5)
    assert token_f1("nothing", ["obama"]) == 0.0
    assert token_f1("x", ["nope", "x"]) == 1.0


def test_match_is_containment_after_normalisation():
    assert match("It was Paris, France.", ["paris"]) == 1.0
    assert match("London", ["paris"]) == 0.0
    assert match("born in 1990s", ["1990"]) == 1.0  # plain substring, as BERGEN's Match
    assert match("born in 1990s", ["1990"], word_boundary=True) == 0.0
    assert match("anything", [""]) == 0.0  # an empty gold never matches


# questions x retrievers: r0 right on q0,q1; r1 right on q1,q2; r2 never right; r3 always right
CORRECT = np.array(
    [
        [1, 0, 0, 1],
        [1, 1, 0, 1],
        [0, 1, 0, 1],
        [0, 0, 0, 1],
    ],
    dtype=bool,
)


def test_rwr_matrix_by_hand():
    rwr = rwr_matrix(CORRECT)
    # r0 got q2,q3 wrong; r1 got q0,q3 wrong; r2 got all 4 wrong; r3 got none wrong
    assert rwr[1, 0] == pytest.approx(1 / 2)  # r1 fixes q2 of {q2, q3}
    assert rwr[0, 1] == pytest.approx(1 / 2)  # r0 fixes q0 of {q0, q3}
    assert rwr[0, 2] == pytest.approx(2 / 4)
    assert rwr[3, 2] == pytest.approx(1.0)
    assert rwr[2, 0] == 0.0
    assert rwr[3, 0] == 1.0
    assert np.isnan(rwr[:, 3]).all()  # r3 got nothing wrong: undefined, no warning
    assert rwr[0, 0] == 0.0


def test_mrwr_mrlr_by_hand():
    w, l = mrwr(CORRECT), mrlr(CORRECT)
    # MRWR(0) = mean(RWR(0,1), RWR(0,2)) with RWR(0,3) undefined
    assert w[0] == pytest.approx((1 / 2 + 2 / 4) / 2)
    assert w[3] == pytest.approx((1 + 1 + 1) / 3)
    assert w[2] == pytest.approx(0.0)
    # MRLR(0) = mean(RWR(1,0), RWR(2,0), RWR(3,0)) = (1/2 + 0 + 1)/3
    assert l[0] == pytest.approx(0.5)
    assert l[2] == pytest.approx((2 / 4 + 2 / 4 + 1) / 3)
    assert math.isnan(l[3])  # never wrong: no lose ratio


def test_rwr_accepts_float_correctness():
    np.testing.assert_allclose(rwr_matrix(CORRECT.astype(float)), rwr_matrix(CORRECT), equal_nan=True)


def test_oracle_upper_bound():
    c = CORRECT[:, :3]
    assert oracle_upper_bound(c) == pytest.approx(3 / 4)
    assert oracle_upper_bound(c, subset=[0]) == pytest.approx(2 / 4)
    assert oracle_upper_bound(c, subset=[0, 1]) == pytest.approx(3 / 4)
    assert oracle_upper_bound(c, subset=np.array([False, False, True])) == 0.0
    assert oracle_upper_bound(CORRECT) == 1.0
    with pytest.raises(ValueError):
        oracle_upper_bound(c, subset=np.array([True, False]))
