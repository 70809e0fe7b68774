"""The confidence-aware voter file (eor-voter/3) and its live use: the scorer votes, its
P(right) stops the rounds; v2 files load as before, with the same id."""
from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from retrievers.types import Candidate, Context, QuestionResult
from voter.adaptive_model import AdaptiveModel
from voter.decision import decide, vote
from voter.question_vote import equal_weights
from tests.voter.conftest import logprob_scorer
from voter.similarity import create_metric
from voter.weights_io import FORMAT, FORMAT_V2, SHIPPED_VOTER, Provenance, SavedWeights, load_weights, save_weights

POOL = ("A", "B", "C")
V2_VOTER = Path(__file__).parent / "data" / "voter-v2-8b3d50282f43.json"  # the voter shipped until v3


def confident_model(threshold: float = 0.8) -> AdaptiveModel:
    """P(right) = sigmoid(5 * mean log-prob + 2.5): sure at -0.05 (0.90), unsure at -2.5 (0.00)."""
    return AdaptiveModel((("A",), ("B", "C")), logprob_scorer(POOL), (threshold,))


def voter_file(model: AdaptiveModel | None) -> SavedWeights:
    base = equal_weights(list(POOL), ["em"])
    prov = Provenance("q.jsonl", 30, "reader-x", 0.5)
    return SavedWeights(base.pool, base.metrics, base.pooling, base.threshold, base.weights, prov, adaptive=model)


def test_v3_round_trip_and_v2_loading(tmp_path):
    saved = voter_file(confident_model())
    path = save_weights(tmp_path / "v3.json", saved)
    d = json.loads(path.read_text())
    assert d["format"] == FORMAT == "eor-voter/3" and d["adaptive"]["rounds"] == [["A"], ["B", "C"]]
    back = load_weights(path)
    assert back.adaptive.layout == saved.adaptive.layout and back.adaptive.thresholds == (0.8,)
    assert back.digest == saved.digest and "confidence-aware" in back.describe()
    assert back.cascade_to_run.rounds == (("A",), ("B", "C")) and back.cascade_to_run.thresholds == (0.8,)
    plain = voter_file(None)
    assert plain.to_dict()["format"] == FORMAT_V2 and "adaptive" not in plain.to_dict()
    old = load_weights(V2_VOTER)  # the voter shipped before v3: loads, with the id it always had
    assert old.adaptive is None and old.to_dict()["format"] == FORMAT_V2 and old.digest == "8b3d50282f43"
    v3 = load_weights(V2_VOTER.parent / "voter-v3-abb0f19062fd.json")  # shipped 2026-11-25 to -26: loads as it was
    assert v3.to_dict()["format"] == FORMAT and len(v3.adaptive.layout) >= 2 and v3.digest == "abb0f19062fd"
    v5 = load_weights(V2_VOTER.parent / "voter-v5-30eff7e9e0a1.json")  # shipped 2026-11-26, one Platt line
    assert v5.digest == "30eff7e9e0a1" and v5.adaptive.calibrator.method == "platt"
    shipped = load_weights(SHIPPED_VOTER)  # today's: a cascade over two readers, fitted on a mixed split
    assert shipped.adaptive.calibrator.n_rounds == len(shipped.adaptive.layout)  # a calibration line per round
    assert len(shipped.adaptive.layout) >= 2 and shipped.fallback is not None
    assert shipped.provenance.extra["split"] == "fit" and shipped.provenance.extra["dataset"] is None


def test_a_malformed_adaptive_section_is_refused(tmp_path):
    d = voter_file(confident_model()).to_dict()
    d["adaptive"]["thresholds"] = [0.5, 0.5]
    with pytest.raises(ValueError, match="malformed voter file: adaptive model: 2 thresholds for 2 rounds"):
        SavedWeights.from_dict(d)
    d = voter_file(confident_model()).to_dict()
    d["adaptive"]["scorer"]["features"] = d["adaptive"]["scorer"]["features"][:-1]
    with pytest.raises(ValueError, match="features"):
        SavedWeights.from_dict(d)


def result(q: str, answers: dict[str, tuple[str, float]]) -> QuestionResult:
    return QuestionResult(q, tuple(Candidate(s, a, Context(s), logprobs=(lp, lp)) for s, (a, lp) in answers.items()))


def test_the_scorer_votes_and_its_probability_is_the_statistic():
    saved = voter_file(confident_model())
    r = result("q", {"A": ("paris", -2.5), "B": ("lyon", -0.05), "C": ("paris", -3.0)})
    (d,) = decide([r], saved, [create_metric("em")])
    v, p = d.vote, d.stat
    assert v.retriever == "B" and v.answer == "lyon" and p == pytest.approx(0.9047, abs=1e-3)
    assert v.scores["B"] == pytest.approx(p) and v.scores["A"] < 0.01
    assert d.confidence.p == p and d.confidence.kind == "raw" and d.settled  # 0.90 >= 0.8 after round 1


def test_a_confident_vote_has_a_margin_over_the_best_different_answer_in_p_right():
    """As every vote's margin (the service's vote-margin metric and the reply's `margin`), in P(right)."""
    saved = voter_file(confident_model())
    r = result("q", {"A": ("paris", -2.5), "B": ("lyon", -0.05), "C": ("paris", -0.5)})
    (v,) = vote([r], saved, [create_metric("em")])
    assert v.answer == "lyon" and v.margin == pytest.approx(v.scores["B"] - v.scores["C"])
    (same,) = vote([result("q", {"A": ("paris", -2.5), "B": ("Paris", -0.05)})], saved, [create_metric("em")])
    assert same.margin is None  # no different answer to be ahead of


def test_rounds_stop_after_the_first_when_the_reader_is_sure():
    from serve.ensemble import answer_async

    saved = voter_file(confident_model())
    answers = {"sure?": {"A": ("paris", -0.05), "B": ("lyon", -1.0), "C": ("rome", -1.0)},
               "unsure?": {"A": ("paris", -2.5), "B": ("lyon", -0.05), "C": ("lyon", -0.1)}}
    ran: list[tuple[list[int], list[str]]] = []
    qs = list(answers)

    async def run_round(open_, specs):
        ran.append((list(open_), list(specs)))
        return [result(qs[i], {s: answers[qs[i]][s] for s in specs}) for i in open_]

    async def vote(results, stage):
        return decide(results, saved, [create_metric("em")], saved.cascade_to_run, stage)

    sure, unsure = asyncio.run(answer_async(qs, saved.cascade_to_run, run_round, vote))
    assert (sure.rounds_run, sure.vote.answer, sure.ran) == (1, "paris", ["A"])
    assert (unsure.rounds_run, unsure.vote.answer, unsure.ran) == (2, "lyon", ["A", "B", "C"])
    assert ran == [([0, 1], ["A"]), ([1], ["B", "C"])]  # round 2 only for the open question
