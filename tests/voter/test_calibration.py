"""The calibrator of P(right), on seeded data whose true probability of being right is known (the
measures of calibration: tests/fitting/test_measures.py)."""
from __future__ import annotations

import numpy as np
import pytest

from fitting.measures import expected_calibration_error
from voter.calibration import Calibrator, fit_calibrator


def overconfident(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(raw P, right, true P): the truth is sigmoid(z), the scorer says sigmoid(2 z) (twice as
    sure as it should be), so Platt scaling's exact answer is a = 0.5, b = 0."""
    rng = np.random.default_rng(seed)
    z = rng.normal(0.0, 1.5, n)
    true = 1 / (1 + np.exp(-z))
    return 1 / (1 + np.exp(-2 * z)), (rng.random(n) < true).astype(float), true


@pytest.mark.parametrize("method", ["platt", "isotonic"])
def test_calibration_recovers_the_known_probability(method):
    raw, right, _ = overconfident(20000)
    test_raw, test_right, test_true = overconfident(20000, seed=1)
    c = fit_calibrator(raw, right, method)
    assert expected_calibration_error(test_raw, test_right) > 0.08  # the scorer as it is: overconfident
    assert expected_calibration_error(c.predict(test_raw), test_right) < 0.02  # held out, calibrated
    assert np.abs(c.predict(test_raw) - test_true).mean() < 0.03  # close to the true P, not only on average
    if method == "platt":
        assert c.a_ == pytest.approx(0.5, abs=0.05) and c.b_ == pytest.approx(0.0, abs=0.05)
    back = Calibrator.from_dict(c.to_dict())
    assert np.allclose(back.predict(test_raw[:50]), c.predict(test_raw[:50]), atol=1e-6)


def test_platt_never_reorders_and_a_useless_slope_keeps_the_raw_ranking():
    raw, right, _ = overconfident(2000)
    c = fit_calibrator(raw, right, "platt")
    grid = np.linspace(0.001, 0.999, 500)
    assert np.all(np.diff(c.predict(grid)) > 0)  # strictly increasing: the stop rule's order is kept
    backwards = fit_calibrator(raw, 1 - right, "platt")  # higher P, more often wrong: not a calibration
    assert (backwards.a_, backwards.b_) == (1.0, 0.0)
    constant = fit_calibrator([0.2, 0.9, 0.6], [1, 1, 1], "platt")  # every answer right: the rate
    assert np.all(constant.predict([0.1, 0.9]) > 0.99)


def two_rounds(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """[N, 2] (raw P, right, true P): after round 1 the scorer is twice as sure as it should be,
    after round 2 half as sure: one line for both rounds cannot fit either."""
    rng = np.random.default_rng(seed)
    z = rng.normal(0.0, 1.5, (n, 2))
    true = 1 / (1 + np.exp(-z))
    raw = 1 / (1 + np.exp(-np.stack([2 * z[:, 0], 0.5 * z[:, 1]], axis=1)))
    return raw, (rng.random((n, 2)) < true).astype(float), true


def test_a_line_per_round_calibrates_each_round_where_one_line_for_all_cannot():
    raw, right, _ = two_rounds(20000)
    test_raw, test_right, test_true = two_rounds(20000, seed=1)
    per_round, pooled = fit_calibrator(raw, right, "platt-per-round"), fit_calibrator(raw, right, "platt")
    assert [a for a, _ in per_round.rounds_] == [pytest.approx(0.5, abs=0.05), pytest.approx(2.0, abs=0.15)]
    for k in (0, 1):
        assert expected_calibration_error(per_round.predict(test_raw[:, k], k), test_right[:, k]) < 0.02
        assert expected_calibration_error(pooled.predict(test_raw[:, k]), test_right[:, k]) > 0.04
    assert np.abs(per_round.predict_rounds(test_raw) - test_true).mean() < 0.03
    assert np.allclose(per_round.predict(test_raw[:, 0]), pooled.predict(test_raw[:, 0]))  # no round: the pooled line
    back = Calibrator.from_dict(per_round.to_dict())
    assert np.allclose(back.predict_rounds(test_raw[:50]), per_round.predict_rounds(test_raw[:50]), atol=1e-6)
    # a round whose picks are all right (or whose P runs backwards) has no line of its own: the pooled one
    odd = fit_calibrator(np.stack([raw[:, 0], raw[:, 1], raw[:, 1]], axis=1),
                         np.stack([right[:, 0], np.ones(len(right)), 1 - right[:, 1]], axis=1), "platt-per-round")
    assert odd.rounds_[1] == odd.rounds_[2] == (odd.a_, odd.b_) and odd.a_ > 0
    with pytest.raises(ValueError, match=r"\[N, R\]"):
        fit_calibrator(raw[:, 0], right[:, 0], "platt-per-round")


def test_a_malformed_calibrator_is_refused():
    with pytest.raises(ValueError, match="calibration method"):
        Calibrator("temperature")
    with pytest.raises(ValueError, match="non-decreasing"):
        Calibrator.from_dict({"method": "isotonic", "x": [0.1, 0.5], "y": [0.9, 0.2]})
    with pytest.raises(ValueError, match="finite"):
        Calibrator.from_dict({"method": "platt", "a": float("nan"), "b": 0.0})
    for rounds in (None, [], [[1.0, 0.0]], [{"a": 1.0}]):
        with pytest.raises(ValueError, match="a line .a, b. per round"):
            Calibrator.from_dict({"method": "platt-per-round", "a": 1.0, "b": 0.0, "rounds": rounds})
    with pytest.raises(ValueError, match="must be numbers"):
        Calibrator.from_dict({"method": "platt-per-round", "a": 1.0, "b": 0.0, "rounds": [{"a": "x", "b": 0}]})
    with pytest.raises(ValueError, match="must not be negative"):
        Calibrator.from_dict({"method": "platt-per-round", "a": 1.0, "b": 0.0, "rounds": [{"a": -1.0, "b": 0}]})
    with pytest.raises(ValueError, match="finite"):
        Calibrator.from_dict({"method": "platt-per-round", "a": 1.0, "b": 0.0, "rounds": [{"a": 1.0, "b": float("inf")}]})


def test_round_ones_early_answer_gets_a_line_of_its_own_and_files_without_one_read_round_ones():
    """The early answer's raw P is four times as sure as it should be; round 1's twice (two_rounds):
    its own line calibrates it where round 1's cannot. A file without the line (written before)
    reads round 1's line for it, as it did; a bad line is refused."""
    from voter.calibration import EARLY

    raw, right, _ = two_rounds(20000)
    rng = np.random.default_rng(2)
    z = rng.normal(0.0, 1.5, 20000)
    early_right = (rng.random(20000) < 1 / (1 + np.exp(-z))).astype(float)
    early_raw = 1 / (1 + np.exp(-4 * z))
    c = fit_calibrator(raw, right, "platt-per-round", (early_raw, early_right))
    assert c.has_early and c.early_[0] == pytest.approx(0.25, abs=0.03)
    assert expected_calibration_error(c.predict(early_raw, EARLY), early_right) < 0.02
    assert expected_calibration_error(c.predict(early_raw, 0), early_right) > 0.04  # round 1's line: off
    back = Calibrator.from_dict(c.to_dict())
    assert back.has_early and np.allclose(back.predict(early_raw[:50], EARLY), c.predict(early_raw[:50], EARLY))
    old = c.to_dict()
    del old["early"]
    before = Calibrator.from_dict(old)
    assert not before.has_early and np.allclose(before.predict(early_raw[:50], EARLY), c.predict(early_raw[:50], 0))
    assert not fit_calibrator(raw, right, "platt-per-round").has_early
    pooled = fit_calibrator(raw.ravel(), right.ravel(), "platt", (early_raw, early_right))
    assert not pooled.has_early and np.allclose(pooled.predict(early_raw[:5], EARLY), pooled.predict(early_raw[:5]))
    for bad in ({"a": -1.0, "b": 0.0}, {"a": "x", "b": 0.0}, {"a": 1.0}, {"a": 1.0, "b": float("nan")}):
        with pytest.raises(ValueError, match="early line|finite"):
            Calibrator.from_dict({**old, "early": bad})
