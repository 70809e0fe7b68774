"""The paired sign test, one home for the fit's reports (`eor eval`, the adaptive report, the push
gate) and the robustness bench's regression check (bench/robust/regression.py, run in .venv-bench):
SciPy's exact binomial test, which both environments install. Standard library and SciPy only, so
the bench imports it without the server's packages (tests/bench/test_bench_imports.py).
"""
from __future__ import annotations

from typing import Sequence


def paired_counts(a_right: Sequence[bool], b_right: Sequence[bool]) -> tuple[int, int]:
    """Questions only A got right and questions only B got right (the sign test's wins, losses)."""
    wins = sum(bool(x) and not y for x, y in zip(a_right, b_right))
    return wins, sum(bool(y) and not x for x, y in zip(a_right, b_right))


def sign_test(wins: int, losses: int) -> float:
    """Two-sided exact sign test p-value of paired wins vs losses (ties dropped; 1.0 with none)."""
    from scipy.stats import binomtest

    n = wins + losses
    return 1.0 if n == 0 else float(binomtest(wins, n, 0.5).pvalue)
