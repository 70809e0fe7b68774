"""A round against its baseline: paired on instances, a drop called real only by the sign test."""
from __future__ import annotations

import pytest

from bench.robust.regression import baseline_round, compare
from fitting.paired import sign_test as sign_test_p


def _rounds(lost: int, gained: int, same: int):
    base, cur = {}, {}
    for i in range(lost):
        base[f"l{i}"], cur[f"l{i}"] = {"deployed": True}, {"deployed": False}
    for i in range(gained):
        base[f"g{i}"], cur[f"g{i}"] = {"deployed": False}, {"deployed": True}
    for i in range(same):
        base[f"s{i}"], cur[f"s{i}"] = {"deployed": True}, {"deployed": True}
    return base, cur


def test_sign_test_known_values():
    assert sign_test_p(0, 0) == 1.0
    assert sign_test_p(6, 0) == pytest.approx(2 / 64)
    assert sign_test_p(5, 5) == 1.0


@pytest.mark.parametrize("lost,gained,real", [(10, 0, True), (6, 0, True), (5, 0, False), (8, 4, False), (0, 10, False)])
def test_a_drop_is_real_only_when_the_test_says_so(lost, gained, real):
    d = compare(*_rounds(lost, gained, 20))["deployed"]
    assert (d.lost, d.gained, d.paired) == (lost, gained, lost + gained + 20)
    assert d.regression is real
    assert d.points == pytest.approx(100 * (lost - gained) / (lost + gained + 20))


def test_only_instances_both_rounds_scored_are_paired():
    base, cur = _rounds(6, 0, 4)
    cur["new"] = {"deployed": False}  # not in the baseline
    del base["s0"]  # not in the baseline either
    base["gone"] = {"deployed": True}  # not asked now
    d = compare(base, cur)["deployed"]
    assert d.paired == 9 and d.lost == 6


def test_the_baseline_is_the_pinned_round_else_the_first_finished(tmp_path):
    runs = tmp_path / "runs"
    first, second, now = runs / "20260101T000000Z", runs / "20260102T000000Z", runs / "20260103T000000Z"
    for r in (first, second, now):
        r.mkdir(parents=True)
        (r / "results.jsonl").write_text("")
    assert baseline_round(tmp_path, first) is None  # nothing finished yet
    (first / "report.json").write_text("{}")
    (second / "report.json").write_text("{}")
    assert baseline_round(tmp_path, now) == first
    pinned = tmp_path / "baseline"
    pinned.mkdir()
    (pinned / "results.jsonl").write_text("")
    assert baseline_round(tmp_path, now) == pinned


def test_confidence_drop_is_paired_on_the_instances_both_rounds_asked():
    from bench.robust.regression import confidence_drop

    def rec(i, p):
        return {"id": i, "deployed": {"confidence": p}}
    base = [rec("a", 0.9), rec("b", 0.7), rec("gone", 0.1), {"qid": "q", "perturbation": "original", "variant": 0,
                                                               "deployed": {"confidence": 0.8}}]
    cur = [rec("a", 0.6), rec("b", 0.6), rec("new", 0.0), {"qid": "q", "perturbation": "original", "variant": 0,
                                                             "deployed": {"confidence": 0.5}}, rec("none", None)]
    d = confidence_drop(base, cur)
    assert d["paired"] == 3 and d["baseline"] == pytest.approx(0.8) and d["drop"] == pytest.approx(0.8 - 1.7 / 3)
    assert confidence_drop(base, [rec("x", 0.5)]) == {"paired": 0, "baseline": None, "current": None, "drop": 0.0}
