"""Reading only what a cascade reads (serve/offline/cascade_reads.py): round 1 for every
question, a later round for the questions the stop rule sends there, each round its own
resumable run logs, over the same sources and readers (RetrieverPool.subset)."""
from __future__ import annotations

import pytest

from retrievers.types import QuestionResult
from serve.config import config_from_dict
from serve.builder import close_engines
from serve.offline.cascade_reads import read_cascade, round_members
from tests.serve.test_reader_runs import JOINED, QUESTIONS, make_pool


def test_round_members_read_the_baseline_in_round_one_and_not_again():
    layout = (("SE@1", "SE@1~1.5B"), ("Wiki@10", "PK"))
    assert round_members(layout, ["ReFree"]) == [["SE@1", "SE@1~1.5B", "ReFree"], ["Wiki@10", "PK"]]
    assert round_members(layout, ["PK"]) == [["SE@1", "SE@1~1.5B", "PK"], ["Wiki@10"]]
    assert round_members(layout, ["SE@1"]) == [["SE@1", "SE@1~1.5B"], ["Wiki@10", "PK"]]
    assert round_members(layout) == [["SE@1", "SE@1~1.5B"], ["Wiki@10", "PK"]]


def test_a_subset_reads_its_members_as_the_whole_pool_does():
    pool, small, big = make_pool()
    sub = pool.subset(["Wiki@10~1.5B", "SE@1"])
    assert sub.specs == ["SE@1", "Wiki@10~1.5B"]  # the pool's order
    assert sub.readers == pool.readers and sub.sources == pool.sources
    want = {c.retriever: c.answer for r in make_pool()[0].run([QUESTIONS[0].question]) for c in r.candidates}
    got = sub.run([QUESTIONS[0].question])[0]
    assert {c.retriever: c.answer for c in got.candidates} == {s: want[s] for s in sub.specs}
    with pytest.raises(KeyError, match="HB@RR@10"):
        pool.subset(["SE@1", "HB@RR@10"])


def test_later_rounds_are_read_only_for_the_questions_sent_there_and_never_twice(eor_home):
    config = config_from_dict({})
    rounds = [["SE@1", "Wiki@10~1.5B"], ["PK", "ReFree~1.5B"]]
    judged = []

    def stops(scored):  # q0 stops after round 1; the others go on
        judged.append({q.qid: [c.retriever for c in r.candidates] for q, r in scored})
        return [0 if q.qid == "q0" else 1 for q, _ in scored]

    pool, small, big = make_pool()
    scored, counts = read_cascade(pool, config, "questions.jsonl", QUESTIONS, rounds, stops, progress=False)
    assert counts == [3, 2]
    members = {q.qid: [c.retriever for c in r.candidates] for q, r in scored}
    assert members == {"q0": ["SE@1", "Wiki@10~1.5B"],
                       "q1": ["SE@1", "PK", "Wiki@10~1.5B", "ReFree~1.5B"],
                       "q2": ["SE@1", "PK", "Wiki@10~1.5B", "ReFree~1.5B"]}
    assert judged == [{q.qid: ["SE@1", "Wiki@10~1.5B"] for q in QUESTIONS}]  # judged on round 1 alone
    whole = {r.question: r for r in make_pool()[0].run([q.question for q in QUESTIONS])}
    for q, r in scored:  # the same answers the whole pool gives those members
        assert [c.answer for c in r.candidates] == [c.answer for c in whole[q.question].candidates
                                                    if c.retriever in members[q.qid]]
    asked = (len(small.calls), len(big.calls))
    pool, small, big = make_pool()  # a new process: everything comes from the rounds' run logs
    again, counts = read_cascade(pool, config, "questions.jsonl", QUESTIONS, rounds, stops, progress=False)
    assert not small.calls and not big.calls and asked[0] and asked[1]
    assert [(q.qid, [c.answer for c in r.candidates]) for q, r in again] == \
        [(q.qid, [c.answer for c in r.candidates]) for q, r in scored]


def test_a_later_round_that_held_only_the_baseline_reads_nothing_and_still_judges(eor_home):
    rounds = round_members((("SE@1", "Wiki@10~1.5B"), ("PK",), ("ReFree~1.5B",)), ["PK"])
    assert rounds == [["SE@1", "Wiki@10~1.5B", "PK"], [], ["ReFree~1.5B"]]
    judged = []

    def stops(scored):  # q0 stops after round 1, q1 after round 2 (read in round 1), q2 goes on
        judged.append(len(scored))
        return [{"q0": 0, "q1": 1}.get(q.qid, 2) for q, _ in scored]

    pool, small, big = make_pool()
    scored, counts = read_cascade(pool, config_from_dict({}), "questions.jsonl", QUESTIONS, rounds, stops,
                                  progress=False)
    assert counts == [3, 2, 1] and judged == [3, 3]
    members = {q.qid: [c.retriever for c in r.candidates] for q, r in scored}
    assert members["q1"] == ["SE@1", "PK", "Wiki@10~1.5B"]
    assert members["q2"] == ["SE@1", "PK", "Wiki@10~1.5B", "ReFree~1.5B"]


def test_a_reader_the_next_round_does_not_use_is_stopped_between_rounds(eor_home):
    pool, small, big = make_pool()
    closed = []
    small.close = lambda: closed.append("0.5B")
    big.close = lambda: closed.append("1.5B")
    close_engines(pool, keep={"1.5B"})
    assert closed == ["0.5B"]
    closed.clear()
    close_engines(pool, keep={"", "1.5B"})
    assert closed == []
    rounds = [["SE@1", "PK"], ["Wiki@10~1.5B"]]  # the 0.5B alone, then the 1.5B alone: never both held
    read_cascade(pool, config_from_dict({}), "questions.jsonl", QUESTIONS, rounds, lambda sc: [1] * len(sc),
                 progress=False)
    assert closed[0] == "0.5B" and big.calls


def test_a_questions_rounds_join_in_the_pools_order():
    pool, _, _ = make_pool()
    a = pool.subset(["Wiki@10", "ReFree"]).run([QUESTIONS[0].question])[0]
    b = pool.subset(["SE@1"]).run([QUESTIONS[0].question])[0]
    assert [c.retriever for c in QuestionResult.joined(a.question, [a, b], JOINED).candidates] == ["Wiki@10", "SE@1",
                                                                                              "ReFree"]
