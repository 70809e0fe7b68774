"""Calibration measures: the ECE's sampling floor and bootstrap interval, reliability bins and the
risk-coverage table by hand, and the proper scores (scikit-learn's)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from fitting.measures import (ece_interval, ece_sampling_floor, expected_calibration_error, reliability,
                              risk_coverage)
from tests.voter.test_calibration import overconfident


def test_a_perfectly_calibrated_p_shows_the_sampling_floor_and_it_shrinks_with_n():
    """The ECE of a P that is exactly the truth is not 0 on a finite sample: the floor says how
    much of an observed ECE the sample alone explains."""
    _, _, true = overconfident(4000, seed=2)
    small, large = ece_sampling_floor(true[:380], draws=400), ece_sampling_floor(true, draws=100)
    observed = [expected_calibration_error(true[:380], np.random.default_rng(s).random(380) < true[:380])
                for s in range(200)]
    assert small == pytest.approx(np.mean(observed), rel=0.15)  # what calibrated answers score at n = 380
    assert 0.02 < small < 0.08 and large < small / 2.5  # about 1 / sqrt(n)
    assert math.isnan(ece_sampling_floor([]))


def test_the_ece_interval_holds_the_ece_and_narrows_with_n():
    """The bootstrap interval holds the observed ECE, shrinks about as 1 / sqrt(n), and covers the
    ECE of another sample of the same P about as often as it says."""
    p, right, _ = overconfident(4000, seed=3)
    lo, hi = ece_interval(p[:400], right[:400], draws=300)
    assert lo <= expected_calibration_error(p[:400], right[:400]) <= hi
    lo_big, hi_big = ece_interval(p, right, draws=100)
    assert (hi_big - lo_big) < (hi - lo) / 2
    other = expected_calibration_error(p[400:800], right[400:800])
    assert lo - 0.02 <= other <= hi + 0.02
    assert all(math.isnan(x) for x in ece_interval([], []))


def test_ece_reliability_and_risk_coverage_by_hand():
    p = [0.95, 0.9, 0.15, 0.1, 1.0]
    right = [1, 0, 0, 0, 1]
    bins = reliability(p, right)
    assert len(bins) == 10 and [b.n for b in bins] == [0, 2, 0, 0, 0, 0, 0, 0, 0, 3]  # P = 1 in the last bin
    assert bins[9].accuracy == pytest.approx(2 / 3) and bins[9].confidence == pytest.approx(0.95)
    assert bins[1].accuracy == 0.0 and bins[1].confidence == pytest.approx(0.125)
    # 3/5 * |2/3 - 0.95| + 2/5 * |0 - 0.125|
    assert expected_calibration_error(p, right) == pytest.approx(0.6 * (0.95 - 2 / 3) + 0.4 * 0.125)
    assert math.isnan(bins[0].accuracy) and math.isnan(expected_calibration_error([], []))
    points = risk_coverage([0.9, None, 0.8, 0.3, 0.8], [1, 1, 0, 0, 1], coverages=(1.0, 0.8, 0.4, 0.2))
    # most sure first: 0.9 (right), 0.8 (wrong, the earlier of the tie), 0.8 (right), 0.3, unknown last
    assert [(x.answered, x.match) for x in points] == [(5, 0.6), (4, 0.5), (2, 0.5), (1, 1.0)]
