"""The gate on `eor fit --push` (serve/offline/push_gate.py): the candidate voter's replayed
cascade against the live service's own answers, paired on the same questions. Here against
a fake client; tests/serve/test_service_fake.py runs it against a real service."""
from __future__ import annotations

from dataclasses import replace

import pytest

from protos import eor_pb2
from serve.offline.dataset import Question
from serve.offline.push_gate import bench_slice, judge_push
from voter.question_vote import MetricOptions, build_metrics, equal_weights
from voter.voting import VoterWeights

POOL = ("Wiki@10", "SE@1", "PK", "ReFree")
QUESTIONS = [Question(f"q{i}", "toy", f"question about topic{i}", (f"topic{i}",)) for i in range(10)]


class FakeService:
    """Every retriever answers the question's last word, ReFree "no idea"; the live voter is
    right on the first `live_right` questions (production's own answers)."""

    def __init__(self, live_right: int):
        self.live_right = live_right
        self.calls: list[tuple[str, ...]] = []

    def ask_batch(self, questions, retrievers=()):
        self.calls.append(tuple(retrievers))
        reply = eor_pb2.AskBatchReply()
        for q in questions:
            word = q.split()[-1]
            if not retrievers:  # production's path: the live voter
                n = int(word[5:])
                reply.replies.add(question=q, answer=word if n < self.live_right else "no idea", voter="live v1")
                continue
            r = reply.replies.add(question=q, answer=word)
            for s in retrievers:
                r.candidates.add(retriever=s, answer="no idea" if s == "ReFree" else word)
        return reply


def _voters():
    metrics = build_metrics(MetricOptions(("em",)), None)
    good = equal_weights(POOL, ("em",))
    # the degraded voter: every retriever but ReFree pruned (weight below the threshold)
    bad = replace(good, weights=VoterWeights.from_arrays([0.3], [0.0, 0.0, 0.0, 0.3], 0.1))
    return metrics, good, bad


def test_a_voter_as_good_as_the_live_one_passes_and_a_degraded_one_is_refused():
    metrics, good, bad = _voters()
    client = FakeService(live_right=10)
    ok = judge_push(client, good, metrics, QUESTIONS, margin_pts=2.0)
    assert ok.passed and (ok.live_match, ok.candidate_match) == (1.0, 1.0) and ok.live_voter == "live v1"
    assert client.calls[:2] == [(), POOL]  # as production asks, then naming the candidate's pool
    refused = judge_push(FakeService(live_right=10), bad, metrics, QUESTIONS, margin_pts=2.0)
    assert not refused.passed and refused.candidate_match == 0.0
    assert (refused.candidate_only_right, refused.live_only_right) == (0, 10) and refused.p_value < 0.01
    assert "REFUSED" in refused.line() and "-100.0 pts" in refused.line()


@pytest.mark.parametrize("live_right,margin,passed", [(9, 2.0, True), (10, 5.0, True), (10, 0.0, True)])
def test_the_margin_is_in_points_of_match(live_right, margin, passed):
    metrics, good, _ = _voters()
    v = judge_push(FakeService(live_right), good, metrics, QUESTIONS, margin_pts=margin)
    assert v.passed is passed and v.points == pytest.approx(100 * (1.0 - live_right / 10))


def test_a_candidate_a_little_worse_is_refused_only_beyond_the_margin():
    metrics, _, bad = _voters()
    # the degraded voter is right nowhere; the live one on 1 of 10: -10 pts
    assert not judge_push(FakeService(1), bad, metrics, QUESTIONS, margin_pts=5.0).passed
    assert judge_push(FakeService(1), bad, metrics, QUESTIONS, margin_pts=10.0).passed


def test_the_bench_slice_is_the_kept_perturbed_queries(tmp_path):
    import json

    rows = [{"id": "a", "suite": "query", "perturbation": "typo10", "kept": True, "question": "whoo wrote hamlet",
             "gold": ["Shakespeare"]},
            {"id": "b", "suite": "query", "perturbation": "original", "kept": True, "question": "who wrote hamlet",
             "gold": ["Shakespeare"]},
            {"id": "c", "suite": "query", "perturbation": "typo10", "kept": False, "question": "x", "gold": ["y"]}]
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"cut sho')
    qs = bench_slice(tmp_path)
    assert [(q.question, q.answers, q.dataset) for q in qs] == [("whoo wrote hamlet", ("Shakespeare",), "bench:typo10")]
    with pytest.raises(ValueError, match="no bench round"):
        bench_slice(tmp_path / "nothing")
