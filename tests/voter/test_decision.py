"""The one stop rule (voter/cascade.py: `settled`) against hand counts, and the voter's
decision after a round (voter/decision.py): the answer, settled?, P(right), for the margin
cascade and the confidence-aware model alike; abstention below a caller's min_confidence."""
from __future__ import annotations

import math

import numpy as np
import pytest

from retrievers.types import ERROR, Candidate, Context, Failure, QuestionResult
from voter.adaptive_model import AdaptiveModel
from voter.calibration import Calibrator
from voter.cascade import UNANIMOUS_ONLY, Cascade, settled, stop_rounds
from voter.decision import Confidence, abstains, check_min_confidence, decide
from voter.question_vote import equal_weights
from tests.voter.conftest import logprob_scorer
from voter.similarity import create_metric
from voter.weights_io import FORMAT_V4, Provenance, SavedWeights, load_weights, save_weights

POOL = ("A", "B", "C")
EM = [create_metric("em")]


def test_the_rule_by_hand():
    tau = (0.5, math.inf, UNANIMOUS_ONLY)  # four stages
    assert settled(0, 0.5, tau) and not settled(0, 0.49, tau)  # reaches: >=
    assert not settled(1, 1e12, tau) and not settled(1, math.inf, tau)  # +inf: never stops there
    assert settled(2, math.inf, tau) and not settled(2, 5.0, tau)  # unanimous only
    assert settled(3, -math.inf, tau) and settled(7, -math.inf, tau)  # the last stage always ends it
    stats = np.array([[0.7, 9.0, 0.0, 0.0],   # stops after stage 1
                      [0.2, 9.0, math.inf, 0.0],  # stage 2 never stops; unanimous after stage 3
                      [0.2, 9.0, 3.0, -math.inf],  # runs to the end
                      [-math.inf, math.inf, math.inf, 0.0]])  # no vote after stage 1, unanimous after 3
    assert stop_rounds(stats, tau).tolist() == [0, 2, 3, 2]
    assert settled(0, stats[:, 0], tau).tolist() == [True, False, False, False]  # the same rule on arrays
    c = Cascade((("A",), ("B",), ("C",), ("D",)), tau)
    assert [next(k for k in range(4) if c.settled(k, row[k])) for row in stats] == [0, 2, 3, 2]


def scorer():
    """P(right) = sigmoid(5 * mean log-prob + 2.5): 0.90 at -0.05, 0.27 at -0.7, 0.00 at -2.5."""
    return logprob_scorer(POOL)


def voter(adaptive: AdaptiveModel | None = None, cascade: Cascade | None = None) -> SavedWeights:
    base = equal_weights(list(POOL), ["em"])
    return SavedWeights(base.pool, base.metrics, base.pooling, base.threshold, base.weights,
                        Provenance("q.jsonl", 30, "reader-x", 0.5), cascade=cascade, adaptive=adaptive)


def result(**answers: tuple[str, float]) -> QuestionResult:
    return QuestionResult("q", tuple(Candidate(s, a, Context(s), logprobs=(lp,)) for s, (a, lp) in answers.items()))


def test_a_margin_voter_decides_on_its_margin_and_gives_no_confidence():
    saved = voter(cascade=Cascade((("A", "B"), ("C",)), (0.2,)))
    agree, split = result(A=("paris", -0.1), B=("Paris", -0.1)), result(A=("paris", -0.1), B=("rome", -0.1))
    d_agree, d_split = decide([agree, split], saved, EM)
    assert d_agree.vote.answer == "paris" and d_agree.stat == math.inf and d_agree.settled  # unanimous
    assert d_split.stat == 0.0 and not d_split.settled  # 1 answer each: margin 0 < 0.2
    assert d_agree.confidence is None and saved.confidence_kind == "none"
    (last,) = decide([split], saved, EM, k=1)
    assert last.settled  # the last stage always ends it
    (alone,) = decide([split], saved, EM, Cascade.single_round(["A", "B"]))  # a caller's explicit retrievers
    assert alone.settled


def test_a_confidence_voter_stops_on_the_calibrated_p_it_gives_the_caller():
    """Calibrated P = sigmoid(0.5 logit(P) + 0.5): 0.90 -> 0.84, 0.27 -> 0.50. The threshold
    0.7 is on the calibrated P: the sure answer stops the rounds, the unsure one does not."""
    cal = Calibrator.from_dict({"method": "platt", "a": 0.5, "b": 0.5})
    saved = voter(AdaptiveModel((("A",), ("B", "C")), scorer(), (0.7,), cal))
    sure, unsure = result(A=("paris", -0.05)), result(A=("rome", -0.7))
    d_sure, d_unsure = decide([sure, unsure], saved, EM, saved.cascade_to_run, 0)
    raw = 1 / (1 + math.exp(-(5 * -0.05 + 2.5)))
    expected = 1 / (1 + math.exp(-(0.5 * math.log(raw / (1 - raw)) + 0.5)))
    assert d_sure.confidence == Confidence(pytest.approx(expected), True) and d_sure.stat == d_sure.confidence.p
    assert d_sure.vote.score == pytest.approx(raw)  # the reply's `score` stays the scorer's raw P
    assert d_sure.settled and expected == pytest.approx(0.84, abs=0.01)
    assert not d_unsure.settled and d_unsure.confidence.p == pytest.approx(0.50, abs=0.01)
    assert saved.confidence_kind == "calibrated" and "calibrated" in saved.describe()
    (nobody,) = decide([QuestionResult("q", (Candidate.failed("A", Failure(ERROR, "x")),))], saved, EM)
    assert nobody.vote.retriever is None and nobody.confidence is None


def test_each_round_is_calibrated_by_its_own_line_and_a_callers_own_members_by_the_pooled_one(tmp_path):
    """platt-per-round: after round 1 (A asked) its line (a=1, b=-1), after round 2 (B and C asked,
    whether they answered or not, as the fit's round views) its own (a=1, b=+1); a set holding a
    member no round has (D, a caller's own) reads the pooled line (a=1, b=0)."""
    cal = Calibrator.from_dict({"method": "platt-per-round", "a": 1.0, "b": 0.0,
                                "rounds": [{"a": 1.0, "b": -1.0}, {"a": 1.0, "b": 1.0}]})
    model = AdaptiveModel((("A",), ("B", "C")), scorer(), (0.7,), cal)
    saved = voter(model)
    assert [model.round_of(m) for m in (["A"], [], ["A", "C"], ["B"], ["A", "D"])] == [0, 0, 1, 1, None]
    def line(p: float, b: float) -> float:
        return 1 / (1 + math.exp(-(math.log(p / (1 - p)) + b)))

    (one,) = decide([result(A=("paris", -0.05))], saved, EM, saved.cascade_to_run, 0)
    (two,) = decide([result(A=("paris", -0.05), C=("paris", -0.05))], saved, EM, saved.cascade_to_run, 1)
    (mute,) = decide([result(A=("paris", -0.05))], saved, EM, saved.cascade_to_run, 1)  # round 2 ran, said nothing
    (own,) = decide([result(B=("paris", -0.05))], saved, EM, Cascade.single_round(["B"]))  # round 2's member alone
    assert one.confidence.p == pytest.approx(line(one.vote.score, -1.0)) == one.stat
    assert two.confidence.p == pytest.approx(line(two.vote.score, +1.0)) == two.stat
    assert mute.confidence.p == pytest.approx(line(mute.vote.score, +1.0))  # round 2's line, as the fit read it
    assert own.confidence.p == pytest.approx(line(own.vote.score, +1.0))  # B alone: within rounds 1..2
    back = load_weights(save_weights(tmp_path / "v.json", saved))
    assert back.adaptive.calibrator.to_dict() == cal.to_dict()
    bad = saved.to_dict()
    bad["adaptive"]["calibrator"]["rounds"] = bad["adaptive"]["calibrator"]["rounds"][:1]
    with pytest.raises(ValueError, match="lines for 1 rounds, the layout 2"):
        AdaptiveModel.from_dict(bad["adaptive"], saved.pool)


def test_a_voter_file_with_a_calibrator_is_v4_and_older_files_load_as_they_were(tmp_path):
    cal = Calibrator.from_dict({"method": "isotonic", "x": [0.1, 0.9], "y": [0.2, 0.7]})
    saved = voter(AdaptiveModel((("A",), ("B", "C")), scorer(), (0.6,), cal))
    path = save_weights(tmp_path / "v4.json", saved)
    back = load_weights(path)
    assert back.to_dict()["format"] == FORMAT_V4 and back.adaptive.calibrator.to_dict() == cal.to_dict()
    assert back.digest == saved.digest and back.confidence_kind == "calibrated"
    v3 = voter(AdaptiveModel((("A",), ("B", "C")), scorer(), (0.6,)))
    assert v3.to_dict()["format"] == "eor-voter/3" and "calibrator" not in v3.to_dict()["adaptive"]
    assert v3.confidence_kind == "raw" and "calibrated" not in v3.describe()
    (d,) = decide([result(A=("paris", -0.05))], v3, EM)
    assert d.confidence.kind == "raw" and d.confidence.p == d.stat == d.vote.score  # the raw P, as before


@pytest.mark.parametrize("bad", [float("nan"), -0.01, 1.5, "abc", None])
def test_a_min_confidence_outside_0_1_is_refused_in_one_line(bad):
    with pytest.raises(ValueError) as err:
        check_min_confidence(bad)
    assert str(err.value).startswith("min_confidence must be a number in [0, 1]") and "\n" not in str(err.value)


def test_abstention():
    assert check_min_confidence("0.5") == 0.5 and check_min_confidence(0) == 0.0 and check_min_confidence(1) == 1.0
    sure, unsure = Confidence(0.8, True), Confidence(0.3, True)
    assert not abstains(unsure, 0.0) and not abstains(None, 0.0)  # 0: always answer
    assert abstains(unsure, 0.5) and not abstains(sure, 0.5) and not abstains(Confidence(0.5, False), 0.5)
    assert abstains(None, 0.1)  # a bar the voter cannot say it reaches


def test_round_ones_early_answer_reads_the_early_line(tmp_path):
    """Round 1 asks two readers: its default reader's one-step members answer first (a stream's
    first reply, voter/cascade.py: early_members) and their vote reads the calibrator's early line
    (b = -2); the whole round reads round 1's (b = -1). A layout without an early answer has no
    EARLY stage."""
    from voter.calibration import EARLY

    pool = ("A", "A~1.5B", "C")
    cal = Calibrator.from_dict({"method": "platt-per-round", "a": 1.0, "b": 0.0,
                                "rounds": [{"a": 1.0, "b": -1.0}, {"a": 1.0, "b": 1.0}],
                                "early": {"a": 1.0, "b": -2.0}})
    model = AdaptiveModel((("A", "A~1.5B"), ("C",)), logprob_scorer(pool), (0.7,), cal)
    assert [model.round_of(m) for m in (["A"], ["A", "A~1.5B"], ["A~1.5B"], ["C"])] == [EARLY, 0, 0, 1]
    assert AdaptiveModel((("A", "C"), ("A~1.5B",)), logprob_scorer(pool), (0.7,), cal).round_of(["A"]) == 0
    base = equal_weights(list(pool), ["em"])
    saved = SavedWeights(base.pool, base.metrics, base.pooling, base.threshold, base.weights,
                         Provenance("q.jsonl", 10, "r", 0.5), adaptive=model)
    (early,) = decide([result(A=("paris", -0.05))], saved, EM, Cascade.single_round(["A"]))
    (whole,) = decide([QuestionResult("q", (Candidate("A", "paris", Context("A", ()), logprobs=(-0.05,)),
                                            Candidate("A~1.5B", "paris", Context("A~1.5B", ()), logprobs=(-0.05,))))],
                      saved, EM, saved.cascade_to_run, 0)

    def line(p: float, b: float) -> float:
        return 1 / (1 + math.exp(-(math.log(p / (1 - p)) + b)))
    assert early.confidence.p == pytest.approx(line(early.vote.score, -2.0))
    assert whole.confidence.p == pytest.approx(line(whole.vote.score, -1.0))
    back = load_weights(save_weights(tmp_path / "v.json", saved))
    assert back.adaptive.calibrator.to_dict()["early"] == {"a": 1.0, "b": -2.0}
