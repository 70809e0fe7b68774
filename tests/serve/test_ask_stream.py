"""AskStream's one code path (EorIngress.ask_stream) with stand-in handles: a provisional reply
after each round that left the question open, the final reply last; errors end the stream
with their status and one line; a caller that goes away cancels the Ask's work."""
from __future__ import annotations

import asyncio

import grpc
import pytest

from protos import eor_pb2
from retrievers.groundwork import Groundwork, RoundRun
from serve.app.deployments import VoterPlan
from retrievers.types import Candidate, Context, QuestionResult
from tests.serve.test_reader_recovery import _Handle, _ingress
from voter.cascade import Cascade
from voter.decision import Decision
from voter.question_vote import Vote

STAGES = (("SE@1",), ("Wiki@10",), ("ReFree",))


def group(delay=0.0, started: list | None = None, cancelled: list | None = None, fail=None):
    """A retriever group; `delay`: seconds per call, or a function of the call's specs; `fail`: a
    function of the call's specs giving the error the call raises (None: it answers)."""
    async def run(round_):
        questions, specs = round_.questions, list(round_.specs)
        if started is not None:
            started.append(list(specs))
        if fail is not None and fail(specs) is not None:
            raise fail(specs)
        try:
            await asyncio.sleep(delay(specs) if callable(delay) else delay)
        except asyncio.CancelledError:
            if cancelled is not None:
                cancelled.append(list(specs))
            raise
        return RoundRun([QuestionResult(q, tuple(Candidate(s, f"answer of {s}", Context(s)) for s in specs))
                         for q in questions], [Groundwork() for _ in questions])

    class Run:
        def remote(self, *args):
            return run(*args)
    handle = _Handle()
    handle.run = Run()
    return handle


def decisions(votes, stats, cascade, stage):
    """What the Voter deployment's `decide` returns: the one stop rule over the fakes' statistics."""
    return [Decision(v, cascade.settled(stage, st), None, st) for v, st in zip(votes, stats)]


def voter(settle_at: int):
    """Votes the last candidate; the vote settles (+inf) once `settle_at` stages have run."""
    def vote(results, cascade, stage):
        votes, stats = [], []
        for r in results:
            c = r.candidates[-1]
            votes.append(Vote(c.retriever, c.answer, 0.5, None, {c.retriever: 0.5}))
            stats.append(float("inf") if len(r.candidates) >= settle_at else 0.0)
        return decisions(votes, stats, cascade, stage)
    return _Handle(plan=lambda: VoterPlan("k", Cascade(STAGES, (1.0, 1.0)), "test voter"),
                   decide=lambda results, key, cascade, stage, deadline: vote(results, cascade, stage))


async def collect(ing, request, metadata=()):
    return [item async for item in ing.ask_stream(request, metadata)]


def test_provisional_replies_then_the_final_one_last():
    ing = _ingress(_Handle(), group(), voter(settle_at=3))
    items = asyncio.run(collect(ing, eor_pb2.AskRequest(question="who?")))
    assert [code for _, code, _ in items] == [grpc.StatusCode.OK] * 3
    replies = [r for r, _, _ in items]
    assert [r.final for r in replies] == [False, False, True]
    assert [r.stopped_at_stage for r in replies] == [1, 2, 3] and replies[-1].stages == 3
    assert [r.answer for r in replies] == ["answer of SE@1", "answer of Wiki@10", "answer of ReFree"]
    assert list(replies[-1].ran) == ["SE@1", "Wiki@10", "ReFree"] and replies[0].voter == "test voter"


def test_a_question_settled_by_the_first_round_gets_the_final_reply_alone():
    ing = _ingress(_Handle(), group(), voter(settle_at=1))
    (item,) = asyncio.run(collect(ing, eor_pb2.AskRequest(question="who?")))
    assert item[0].final and item[0].stopped_at_stage == 1


def test_errors_end_the_stream_with_their_status_and_one_line():
    ing = _ingress(_Handle(), group(), voter(settle_at=3))
    (item,) = asyncio.run(collect(ing, eor_pb2.AskRequest(question="  ")))
    assert item[0] is None and item[1] == grpc.StatusCode.INVALID_ARGUMENT and "\n" not in item[2]
    broken = _Handle(plan=lambda: RuntimeError("bad\nTraceback (most recent call last):"))
    (item,) = asyncio.run(collect(_ingress(_Handle(), group(), broken), eor_pb2.AskRequest(question="who?")))
    assert item[1] == grpc.StatusCode.INTERNAL and item[2] == "RuntimeError: bad"


def test_a_deadline_ends_with_a_final_reply_of_what_finished():
    ing = _ingress(_Handle(), group(delay=0.3), voter(settle_at=3))
    items = asyncio.run(collect(ing, eor_pb2.AskRequest(question="who?", deadline_s=0.5)))
    final = items[-1][0]
    assert final.final and items[-1][1] == grpc.StatusCode.OK
    assert final.stopped_at_stage < 3 and all(not r.final for r, _, _ in items[:-1])


def test_a_caller_that_goes_away_cancels_the_ask():
    started, cancelled = [], []
    ing = _ingress(_Handle(), group(delay=0.2, started=started, cancelled=cancelled), voter(settle_at=3))

    async def scenario():
        stream = ing.ask_stream(eor_pb2.AskRequest(question="who?"))
        first = await stream.__anext__()  # the provisional reply after round 1 ...
        assert not first[0].final
        await stream.aclose()  # ... and the caller leaves
        await asyncio.sleep(0.3)
    asyncio.run(scenario())
    assert started[:2] == [["SE@1"], ["Wiki@10"]] and cancelled == [["Wiki@10"]]
    assert ["ReFree"] not in started  # nothing after the caller left


def first_vote_plan(stages):
    """A voter over `stages` that votes the first candidate and settles once three have answered."""
    def vote(results, cascade, stage):
        votes = [Vote(r.candidates[0].retriever, r.candidates[0].answer, 0.5, None, {}) for r in results]
        return decisions(votes, [float("inf") if len(r.candidates) >= 3 else 0.0 for r in results], cascade, stage)
    return _Handle(plan=lambda: VoterPlan("k", Cascade(stages, (1.0,)), "test voter"),
                   decide=lambda results, key, cascade, stage, deadline: vote(results, cascade, stage))


def stream(handle, plan):
    items = asyncio.run(collect(_ingress(_Handle(), handle, plan), eor_pb2.AskRequest(question="who?")))
    return [r for r, _, _ in items]


def test_the_first_answer_comes_when_round_1s_one_step_retrievers_have_read():
    """Round 1 holds SE@1 (one reader call) and SE@1@CP (compression, then the answer): a
    stream gets SE@1's answer first (stage 0), then round 1's vote over both, then the final;
    a plain Ask runs round 1 as one call."""
    calls = []
    handle = group(delay=lambda specs: 0.2 if any(s.endswith("@CP") for s in specs) else 0.01, started=calls)
    plan = first_vote_plan((("SE@1", "SE@1@CP"), ("Wiki@10",)))
    replies = stream(handle, plan)
    assert [r.stopped_at_stage for r in replies] == [0, 1, 2] and [r.final for r in replies] == [False, False, True]
    assert list(replies[0].ran) == ["SE@1"] and list(replies[1].ran) == ["SE@1", "SE@1@CP"]  # pool order kept
    assert sorted(map(tuple, calls[:2])) == [("SE@1",), ("SE@1@CP",)] and calls[2] == ["Wiki@10"]
    calls.clear()
    ing = _ingress(_Handle(), handle, plan)
    reply = asyncio.run(ing._ask_one(eor_pb2.AskRequest(question="who?")))
    assert reply.final and calls[0] == ["SE@1", "SE@1@CP"]


def test_the_first_answer_comes_from_the_default_readers_members_beside_a_slower_reader():
    """Round 1 holds SE@1 (the 0.5B) and SE@1~1.5B: a stream gets SE@1's answer first (stage 0)
    while the 1.5B reads, then round 1's vote over both."""
    calls = []
    handle = group(delay=lambda specs: 0.2 if any("~" in s for s in specs) else 0.01, started=calls)
    replies = stream(handle, first_vote_plan((("SE@1", "SE@1~1.5B"), ("Wiki@10~1.5B",))))
    assert [r.stopped_at_stage for r in replies] == [0, 1, 2]
    assert list(replies[0].ran) == ["SE@1"] and list(replies[1].ran) == ["SE@1", "SE@1~1.5B"]
    assert sorted(map(tuple, calls[:2])) == [("SE@1",), ("SE@1~1.5B",)]


def test_the_early_answer_is_voted_as_the_members_asked_so_its_p_reads_its_own_line():
    """The early vote names just SE@1 (voter/cascade.py: early_cascade: SE@1 a stage of its own that
    never settles, then the rest of round 1, then round 2), so the voter calibrates it on round 1's
    early line (voter/adaptive_model.py: round_of); round 1's own vote keeps the plan's cascade."""
    import math

    seen = []
    stages = (("SE@1", "SE@1~1.5B"), ("Wiki@10~1.5B",))

    def decide(results, key, cascade, stage, deadline):
        seen.append((cascade.rounds, cascade.thresholds, stage))
        votes = [Vote(r.candidates[0].retriever, r.candidates[0].answer, 0.5, None, {}) for r in results]
        return decisions(votes, [0.0] * len(results), cascade, stage)
    plan = _Handle(plan=lambda: VoterPlan("k", Cascade(stages, (1.0,)), "test voter"), decide=decide)
    stream(group(delay=lambda specs: 0.2 if any("~" in s for s in specs) else 0.01), plan)
    assert seen[0] == ((("SE@1",), ("SE@1~1.5B",), ("Wiki@10~1.5B",)), (math.inf, 1.0), 0)
    assert seen[1] == ((("SE@1", "SE@1~1.5B"), ("Wiki@10~1.5B",)), (1.0,), 0)


@pytest.mark.parametrize("kind, status", [("crashed", grpc.StatusCode.UNAVAILABLE),
                                          ("timeout", grpc.StatusCode.DEADLINE_EXCEEDED)])
def test_a_question_no_retriever_answered_fails_the_ask_as_unavailable_never_ok_with_nothing(kind, status):
    """A lost node: every member asked failed. An OK with an empty answer would look like one. When
    every member missed the deadline, nothing is down: the status says the time ran out."""
    from retrievers.types import Candidate

    async def run(round_):
        return RoundRun([QuestionResult(q, tuple(Candidate(s, "", Context(s), error="actor died", error_kind=kind)
                                                 for s in round_.specs)) for q in round_.questions],
                        [Groundwork() for _ in round_.questions])

    class Run:
        def remote(self, *args):
            return run(*args)
    handle = _Handle()
    handle.run = Run()

    def vote(results, key, cascade, stage, deadline):
        return decisions([Vote(None, "", None, None, {}) for _ in results], [0.0] * len(results), cascade, stage)

    ing = _ingress(_Handle(), handle, _Handle(plan=lambda: VoterPlan("k", Cascade(STAGES, (1.0, 1.0)), "t"),
                                               decide=vote))
    items = asyncio.run(collect(ing, eor_pb2.AskRequest(question="who?")))
    _, code, details = items[-1]
    assert code == status and "no retriever answered 'who?'" in details
    assert ("SE@1, Wiki@10, ReFree" in details) == (kind == "crashed") and "Traceback" not in details
    assert "\n" not in details


def test_a_preview_is_streamed_first_voted_alone_and_never_in_a_rounds_vote():
    """The plan's preview (SE@1, the 0.5B) is read beside round 1 (SE@1~1.5B) in a stream: its
    answer comes first, voted over it alone (its own early line); round 1's vote and every later
    one never see it, though the Ask's result holds it (its answer listed, its tokens counted).
    A plain Ask never reads it; a preview whose call fails leaves the stream its rounds."""
    import math

    calls, seen = [], []
    stages = (("SE@1~1.5B",), ("Wiki@10~1.5B",))

    def decide(results, key, cascade, stage, deadline):
        seen.append((cascade.rounds, cascade.thresholds, stage, [c.retriever for c in results[0].candidates]))
        votes = [Vote(r.candidates[-1].retriever, r.candidates[-1].answer, 0.5, None, {}) for r in results]
        return decisions(votes, [0.0] * len(results), cascade, stage)
    plan = _Handle(plan=lambda: VoterPlan("k", Cascade(stages, (1.0,), preview=("SE@1",)), "test voter"), decide=decide)
    handle = group(delay=lambda specs: 0.2 if any("~" in s for s in specs) else 0.01, started=calls)
    replies = stream(handle, plan)
    assert [r.stopped_at_stage for r in replies] == [0, 1, 2] and replies[0].answer == "answer of SE@1"
    assert sorted(map(tuple, calls[:2])) == [("SE@1",), ("SE@1~1.5B",)] and calls[2] == ["Wiki@10~1.5B"]
    assert seen[0] == ((("SE@1",), *stages), (math.inf, 1.0), 0, ["SE@1"])  # the preview's own vote
    assert seen[1] == (stages, (1.0,), 0, ["SE@1~1.5B"]) and seen[2] == (stages, (1.0,), 1,
                                                                          ["SE@1~1.5B", "Wiki@10~1.5B"])
    assert replies[1].answer == "answer of SE@1~1.5B" and "SE@1" in [c.retriever for c in replies[-1].candidates]
    calls.clear()
    reply = asyncio.run(_ingress(_Handle(), handle, plan)._ask_one(eor_pb2.AskRequest(question="who?")))
    assert reply.final and ["SE@1"] not in calls  # a plain Ask: no preview

    async def run(round_):
        if list(round_.specs) == ["SE@1"]:
            raise RuntimeError("the 0.5B's engine died")
        return RoundRun([QuestionResult(q, tuple(Candidate(s, f"answer of {s}", Context(s)) for s in round_.specs))
                         for q in round_.questions], [Groundwork() for _ in round_.questions])

    class Run:
        def remote(self, *args):
            return run(*args)
    broken = _Handle()
    broken.run = Run()
    replies = stream(broken, plan)
    assert [r.stopped_at_stage for r in replies] == [1, 2] and replies[-1].final
