"""The under-load bar's fit (fitting/load_bar.py) on arrays made by hand: the lowest bar within the
tolerance of the cascade's own Match, judged by cross-validation on questions it was not chosen on."""
from __future__ import annotations

import numpy as np
import pytest

from fitting.load_bar import choose_bar, fit_load_bar, under_load


def questions(n=200, seed=0):
    """Two rounds; round 1's P is calibrated (right with probability P), round 2 is right 80%."""
    rng = np.random.default_rng(seed)
    p1 = rng.uniform(0, 1, n)
    right = np.stack([rng.uniform(0, 1, n) < p1, rng.uniform(0, 1, n) < 0.8], axis=1).astype(float)
    return np.stack([p1, np.full(n, 0.9)], axis=1), right


def test_a_lower_bar_stops_more_questions_after_round_1():
    p, right = questions()
    full, rounds_full = under_load(p, right, (0.8,), 1.0)
    low, rounds_low = under_load(p, right, (0.8,), 0.5)
    assert rounds_low < rounds_full and low <= full + 0.05
    assert under_load(p, right, (0.8,), 0.0)[1] == 1.0  # a bar of 0: every question stops after round 1
    assert under_load(p, right, (float("inf"),), 0.0)[1] == 2.0  # a never-stop round stays one
    nan = p.copy()
    nan[:, 0] = np.nan  # no answer in round 1: never stops there
    assert under_load(nan, right, (0.8,), 0.0)[1] == 2.0


def test_the_bar_is_the_lowest_within_the_tolerance_and_cross_validated():
    p, right = questions()
    bar = choose_bar(p, right, (0.8,), tolerance=0.02)
    assert 0 < bar < 0.8
    assert under_load(p, right, (0.8,), bar)[0] >= under_load(p, right, (0.8,), 1.0)[0] - 0.02
    assert under_load(p, right, (0.8,), bar - 0.01)[0] < under_load(p, right, (0.8,), 1.0)[0] - 0.02
    fit = fit_load_bar(p, right, (0.8,))
    assert fit.bar == bar and len(fit.fold_bars) == 5 and fit.n == 200
    assert fit.cv_rounds < fit.rounds and fit.cv_match == pytest.approx(fit.match, abs=0.06)
    with pytest.raises(ValueError, match="at least 5 questions"):
        fit_load_bar(p[:3], right[:3], (0.8,))
