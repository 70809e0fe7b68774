"""The paired counts and the sign test (SciPy's exact binomial test)."""
from __future__ import annotations

import pytest

from fitting.paired import paired_counts, sign_test


def test_paired_counts_count_the_questions_only_one_side_got_right():
    assert paired_counts([True, True, False, False, True], [True, False, True, False, False]) == (2, 1)
    assert paired_counts([], []) == (0, 0)


def test_sign_test_known_values():
    assert sign_test(10, 0) == pytest.approx(2 / 1024)
    assert sign_test(5, 5) == 1.0
    assert sign_test(0, 0) == 1.0
    assert sign_test(34, 24) == pytest.approx(0.237, abs=0.002)  # the figure quoted in issue 26
