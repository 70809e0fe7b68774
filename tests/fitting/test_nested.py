"""Nested cross-validation grouped by passage: every question judged once, by a voter fitted
without it or any question sharing its passage, beside the pair those same folds chose."""
import math
from dataclasses import replace

import numpy as np

from fitting.nested import coverage_area, nested_cv, nested_report
from fitting.pricing import LatencyModel
from fitting.search import PricedRun
from tests.fitting.runs import POOL, synthetic_run


def priced(n=240, seed=0, groups=None):
    run = synthetic_run(n, seed)
    if groups is not None:
        run = replace(run, groups=groups)
    return PricedRun(run, POOL, LatencyModel(round_overhead_s=1.0, tokens_per_s=100.0), {}, None)


def test_each_question_is_judged_once_out_of_fold_and_groups_stay_whole():
    groups = [f"para{i // 4}" for i in range(240)]  # 60 paragraphs of 4 questions
    rows, chosen = nested_cv(priced(groups=groups), folds=4, calibration=None)
    assert len(rows) == 240 and sum(c["questions"] for c in chosen) == 240
    fold_of = [r.fold for r in rows]
    for g in set(groups):
        assert len({fold_of[i] for i, x in enumerate(groups) if x == g}) == 1
    assert all(c["pair"] == "A" for c in chosen)  # A is right 70%, the others 40%
    assert all(r.answers[1] in ("gold",) or r.answers[1].startswith("wrong0") for r in rows)


def test_the_report_pairs_the_voter_with_its_pair_on_the_same_questions():
    rows, chosen = nested_cv(priced(), folds=3, calibration=None)
    golds = [("gold",)] * len(rows)
    doc = nested_report(rows, golds, chosen)
    part = doc["datasets"]["all"]
    assert set(doc["datasets"]) == {"d", "all"} and part["n"] == 240
    assert part["match"]["pair"] == round(float(np.mean([r.answers[1] == "gold" for r in rows])), 4)
    wins = sum(r.answers[0] == "gold" and r.answers[1] != "gold" for r in rows)
    assert part["match"]["voter_higher"] == wins and 0 <= part["match"]["p"] <= 1
    assert part["tokens"]["ratio"] >= 1.0 - 1e-9  # the cascade reads A first, then may read more
    # A is sure exactly when right: its log-probability ranks perfectly
    assert part["risk_coverage"]["pair_logprob_area"] > 0.9
    assert part["calibration"]["ece_over_floor"] < 0.2


def test_coverage_area():
    assert math.isclose(coverage_area([0.9, 0.8, 0.1, 0.2], [1, 1, 0, 0]), np.mean([1, 1, 2 / 3, 0.5]))  # best
    assert math.isclose(coverage_area([0.1, 0.2, 0.9, 0.8], [1, 1, 0, 0]), np.mean([0, 0, 1 / 3, 0.5]))  # worst
    assert math.isclose(coverage_area([float("nan"), 0.5], [0, 1]), np.mean([1, 0.5]))  # unknown last
