"""The stop thresholds fitted: the confidence rounds' (cheapest within a tolerance of running every
round) and the margin cascade's (cheapest keeping the all-kept vote's answer), on seeded data."""
from __future__ import annotations

import math

import numpy as np
import pytest

from fitting.thresholds import (RoundTrace, MarginTrace, build_trace, evaluate_rule, evaluate_stop, fit_stop_thresholds,
                                fit_thresholds, frontier, order_rounds)
from voter.cascade import stop_rounds
from voter.estimator import EoRVoter
from voter.voting import VoterWeights


def test_stop_rule_stops_where_p_reaches_the_threshold():
    p = np.array([[0.95, 0.5], [0.2, 0.9], [0.6, 0.1]])
    assert stop_rounds(p, [0.9]).tolist() == [0, 1, 1]
    assert stop_rounds(p, [math.inf]).tolist() == [1, 1, 1]
    assert stop_rounds(p, [0.0]).tolist() == [0, 0, 0]


def test_thresholds_are_the_cheapest_within_the_tolerance():
    # rounds: confident first-round picks are right; unsure ones need round 2
    p = np.array([[0.95, 0.9], [0.9, 0.9], [0.3, 0.9], [0.2, 0.9]])
    right = np.array([[1, 1], [1, 1], [0, 1], [0, 1]], dtype=float)
    cost = np.array([[1, 3]] * 4, dtype=float)
    trace = RoundTrace(p, right, cost)
    tau = fit_stop_thresholds(trace, tolerance=0.0)
    acc, mean_cost, stop = evaluate_stop(trace, tau)
    assert acc == 1.0 and stop.tolist() == [0, 0, 1, 1] and mean_cost == 2.0
    loose = fit_stop_thresholds(trace, tolerance=0.5)  # half may be lost: stop everything after round 1
    assert evaluate_stop(trace, loose)[1] == 1.0
    points = frontier(trace)
    assert points[0]["first_round_share"] == 1.0 and points[-1]["first_round_share"] == 0.0
    assert points[-1]["accuracy"] == 1.0 and points[0]["accuracy"] == 0.5


def _trace(seed: int = 0, n: int = 200) -> MarginTrace:
    """Three stages; stage-1 votes with a large margin agree with the final vote, small ones
    agree half the time; stage 2 agrees whenever its margin is above 0.5."""
    rng = np.random.default_rng(seed)
    s1 = rng.uniform(0, 1, n)
    s2 = rng.uniform(0, 1, n)
    same1 = (s1 > 0.7) | (rng.uniform(0, 1, n) < 0.5)
    same2 = (s2 > 0.5) | same1
    stats = np.stack([s1, s2, np.full(n, np.inf)], axis=1)
    same = np.stack([same1, same2, np.ones(n, bool)], axis=1)
    cum = np.tile(np.array([100.0, 300.0, 1000.0]), (n, 1))
    return MarginTrace(stats, same, cum)


def test_order_rounds_puts_the_cheapest_two_first_then_one_per_round():
    cost = {"Wiki@10": 1400.0, "ReFree": 40.0, "SE@1": 1300.0, "PK": 500.0, "SE@1@CP": 2900.0}
    stages = order_rounds(list(cost), cost)
    assert stages == (("ReFree", "PK"), ("SE@1",), ("Wiki@10",), ("SE@1@CP",))
    assert order_rounds(["A", "B"], {"A": 2, "B": 1}) == (("B", "A"),)


def test_fit_thresholds_is_cheapest_rule_that_keeps_the_target():
    trace = _trace()
    tau = fit_thresholds(trace, target=0.98)
    agree, cost, stop = evaluate_rule(trace, tau)
    assert agree >= 0.98
    assert cost < 1000.0  # it saves tokens over running every stage
    never, full_cost, _ = evaluate_rule(trace, (math.inf, math.inf))
    assert never == 1.0 and full_cost == 1000.0
    # no single threshold move that is cheaper still keeps the target
    for k in range(2):
        for c in sorted(set(trace.stats[:, k])):
            if c < tau[k]:
                trial = list(tau)
                trial[k] = c
                a, co, _ = evaluate_rule(trace, trial)
                assert a < 0.98 or co >= cost - 1e-9
    assert set(np.unique(stop)) <= {0, 1, 2}


def test_fit_thresholds_with_target_one_never_loses_an_answer():
    trace = _trace(seed=3)
    tau = fit_thresholds(trace, target=1.0)
    assert evaluate_rule(trace, tau)[0] == 1.0


def test_build_trace_votes_over_each_stage_prefix():
    """Two questions, three retrievers: A and B agree on q0 (settled after stage 1); on q1 they
    disagree and C decides."""
    pool = ["A", "B", "C"]
    grid = [["x", "x", "y"], ["x", "y", "y"]]
    sim = np.zeros((2, 3, 3, 1))
    for i, row in enumerate(grid):
        for a in range(3):
            for b in range(3):
                sim[i, a, b, 0] = float(row[a] == row[b])
    mask = np.ones((2, 3), bool)
    voter = EoRVoter.from_weights(VoterWeights.from_arrays([0.3], [0.3, 0.3, 0.3], 0.1))
    trace = build_trace(voter, sim, mask, pool, grid, [("A", "B"), ("C",)], np.array([[10, 20], [10, 20]]))
    assert trace.stats[0, 0] == math.inf and trace.same[0, 0]
    assert trace.answers[1][1] == "y" and trace.stats[1, 0] == pytest.approx(0.0)
    assert trace.answers[0][1] == "x"
