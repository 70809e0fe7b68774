"""Adaptive EoR's cascade: the settle statistic, the stop rule, the early answer, the file form (the
fitted thresholds: tests/fitting/test_thresholds.py)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from voter.cascade import Cascade, settle_stat, stop_rounds


def test_settle_stat_margin_unanimity_and_too_few_answers():
    ans = ["Paris", "paris", "Lyon"]
    assert settle_stat(np.array([0.5, 0.4, 0.2]), ans) == pytest.approx(0.3)  # vs Lyon, not vs its twin
    assert settle_stat(np.array([0.5, 0.4, -np.inf]), ans) == math.inf  # everyone who answered agrees
    assert settle_stat(np.array([0.5, -np.inf, -np.inf]), ans) == -math.inf  # one answer is no vote


def test_stop_rounds_takes_the_earliest_settled_round():
    stats = np.array([[0.9, 0.9, np.inf], [0.1, 0.9, np.inf], [0.1, 0.1, np.inf]])
    assert list(stop_rounds(stats, (0.5, 0.5))) == [0, 1, 2]
    assert list(stop_rounds(stats, (math.inf, math.inf))) == [2, 2, 2]


def test_cascade_round_trip_and_validation():
    c = Cascade((("ReFree", "PK"), ("SE@1",)), (math.inf,), 0.98, 0.99, (0.2, 0.8), (100.0, 900.0))
    assert Cascade.from_dict(c.to_dict()) == c
    assert c.to_dict()["thresholds"] == [None]  # JSON has no infinity
    assert c.settled(1, -math.inf) and not c.settled(0, 5.0)
    with pytest.raises(ValueError, match="two stages"):
        Cascade((("A",), ("A",)), (0.1,))
    with pytest.raises(ValueError, match="thresholds"):
        Cascade((("A",), ("B",)), ())
    with pytest.raises(ValueError, match="cascade"):
        Cascade.from_dict({"stages": [["A"], ["B"]], "thresholds": ["high"]})


def test_an_infinite_threshold_never_stops_and_unanimous_only_stops_unanimous_votes():
    from voter.cascade import UNANIMOUS_ONLY

    c = Cascade((("A", "B"), ("C",), ("D",)), (math.inf, UNANIMOUS_ONLY))
    assert not c.settled(0, math.inf) and not c.settled(0, 5.0)
    assert c.settled(1, math.inf) and not c.settled(1, 5.0)
    assert c.settled(2, -math.inf)  # the last stage always ends the question
    stats = np.array([[math.inf, math.inf, math.inf], [0.3, 0.2, math.inf]])
    assert list(stop_rounds(stats, (math.inf, UNANIMOUS_ONLY))) == [1, 2]
    with pytest.raises(ValueError, match="-inf"):
        Cascade((("A",), ("B",)), (-math.inf,))


def test_the_early_answer_is_the_default_readers_quick_members_or_the_one_step_ones():
    from voter.cascade import early_members

    assert early_members(["SE@1", "SE@1~1.5B", "PK"]) == ("SE@1",)  # beside a slower reader
    assert early_members(["SE@1", "SE@1@CP"]) == ("SE@1",)  # beside a two-step member
    assert early_members(["SE@1", "Wiki@10"]) == ("SE@1", "Wiki@10")  # all alike: the round itself
    assert early_members(["SE@1~1.5B", "PK~1.5B"]) == ("SE@1~1.5B",)
    assert early_members(["PK", "SE@1~1.5B"]) == ("SE@1~1.5B",)  # no quick default member: the one-step rule
    from voter.cascade import early_answer

    assert early_answer(["SE@1", "SE@1~1.5B", "PK"]) == ("SE@1",)
    assert early_answer(["SE@1", "Wiki@10"]) is None  # all alike: no early answer


def test_the_early_cascade_makes_round_ones_early_members_a_stage_that_never_settles():
    import math

    from voter.cascade import Cascade, early_cascade

    c = Cascade((("SE@1", "SE@1~1.5B", "PK~1.5B"), ("Wiki@10~1.5B",)), (0.4,))
    e = early_cascade(c)
    assert e.rounds == (("SE@1",), ("SE@1~1.5B", "PK~1.5B"), ("Wiki@10~1.5B",)) and e.thresholds == (math.inf, 0.4)
    assert not e.settled(0, 1e9) and e.settled(1, 0.5) == c.settled(0, 0.5)
    alike = Cascade((("SE@1", "Wiki@10"), ("ReFree",)), (0.4,))
    assert early_cascade(alike) is alike  # no early answer: the cascade itself


def test_a_preview_is_its_own_early_stage_and_never_one_of_the_rounds():
    import math

    import pytest

    from voter.cascade import Cascade, early_cascade

    c = Cascade((("SE@1~1.5B",), ("Wiki@10~1.5B",)), (0.4,), preview=("SE@1",))
    e = early_cascade(c)
    assert e.rounds == (("SE@1",), ("SE@1~1.5B",), ("Wiki@10~1.5B",)) and e.thresholds == (math.inf, 0.4)
    assert e.preview == () and not e.settled(0, 1e9) and c.specs == ["SE@1~1.5B", "Wiki@10~1.5B"]
    assert c.asked == ["SE@1~1.5B", "Wiki@10~1.5B", "SE@1"] and Cascade.from_dict(c.to_dict()) == c
    assert "preview" not in Cascade((("A", "B"),)).to_dict()  # files without one stay as they were
    for bad in (("SE@1~1.5B",), ("SE@1", "SE@1")):
        with pytest.raises(ValueError, match="preview"):
            Cascade((("SE@1~1.5B",), ("Wiki@10~1.5B",)), (0.4,), preview=bad)
