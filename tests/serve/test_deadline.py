"""One Deadline per Ask (serve/deadline.py): made once from the Ask's `deadline_s`, the service's
default and the client's gRPC deadline (the shortest wins), validated once (one line), and the
same absolute time at every call of the Ask, in every process."""
from __future__ import annotations

import asyncio
import math
import pickle
import time

import grpc
import pytest

from protos import eor_pb2
from retrievers.groundwork import Groundwork, RoundRun
from retrievers.types import Candidate, Context, QuestionResult
from serve.app.deployments import VoterPlan
from serve.app.grpc_service import REPLY_MARGIN_S, client_deadline
from serve.app.wire import InvalidArgument, parse_ask
from serve.config import config_from_dict
from serve.deadline import MAX_DEADLINE_S, Deadline, InvalidDeadline, ask_deadline
from tests.serve.test_reader_recovery import _Handle, _ingress
from voter.cascade import Cascade
from voter.decision import Decision
from voter.question_vote import Vote

LIMITS = config_from_dict({"service": {"ask_deadline_s": 120}}).service
POOL = ["SE@1", "Wiki@10", "ReFree"]


def parsed(transport: Deadline | None = None, **request) -> Deadline:
    return parse_ask(eor_pb2.AskRequest(question="q", **request), POOL, LIMITS, batch=False,
                     transport=transport).deadline


def test_none_given_is_the_services_default():
    d = parsed()
    assert d.seconds == 120 and 119 < d.left() <= 120


def test_the_asks_own_deadline_shortens_the_default():
    d = parsed(deadline_s=2.5)
    assert d.seconds == 2.5 and 2 < d.left() <= 2.5
    assert parsed(deadline_s=MAX_DEADLINE_S).seconds == MAX_DEADLINE_S  # longer than the default: asked for


def test_a_grpc_deadline_shorter_than_the_asks_wins():
    transport = client_deadline(5.0)
    d = parsed(transport, deadline_s=30.0)
    assert d == transport and d.seconds == pytest.approx(5.0 - REPLY_MARGIN_S)
    assert parsed(client_deadline(5.0)).seconds == pytest.approx(5.0 - REPLY_MARGIN_S)  # and the default


def test_a_grpc_deadline_longer_than_the_asks_does_not_extend_it():
    d = parsed(client_deadline(60.0), deadline_s=2.0)
    assert d.seconds == 2.0 and d.left() <= 2.0
    assert parsed(client_deadline(10 * MAX_DEADLINE_S)).seconds == 120  # nor the default


def test_the_front_turns_the_grpc_deadline_into_one_with_room_for_the_reply():
    assert client_deadline(None) is None  # the client set none
    assert client_deadline(10.0).seconds == pytest.approx(10.0 - REPLY_MARGIN_S)
    assert client_deadline(0.1).seconds == 0.05  # almost gone: the Ask ends at once with what it has
    assert client_deadline(10 * MAX_DEADLINE_S).seconds == MAX_DEADLINE_S


@pytest.mark.parametrize("bad", [0.0, -1.0, -math.inf, math.inf, math.nan, 10 * MAX_DEADLINE_S])
def test_a_deadline_that_cannot_be_kept_is_invalid_argument_with_one_line(bad):
    with pytest.raises(InvalidArgument) as err:
        parsed(client_deadline(5.0), deadline_s=bad)  # a gRPC deadline never makes it valid
    msg = str(err.value)
    assert msg.startswith("deadline_s must be above 0 and at most 3600 seconds") and "\n" not in msg
    assert err.value.code == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(InvalidDeadline):
        ask_deadline(bad, 120)


def test_a_batch_has_one_deadline_too():
    spec = parse_ask(eor_pb2.AskBatchRequest(questions=["a", "b"], deadline_s=3.0), POOL, LIMITS, batch=True,
                     transport=client_deadline(2.0))
    assert spec.deadline.seconds == pytest.approx(2.0 - REPLY_MARGIN_S)
    with pytest.raises(InvalidArgument, match="deadline_s must be above 0"):
        parse_ask(eor_pb2.AskBatchRequest(questions=["a"], deadline_s=-2), POOL, LIMITS, batch=True)


def test_it_is_the_same_instant_in_another_process(monkeypatch):
    """Pickled, it travels as wall-clock time: on a machine whose monotonic clock reads 1000 s
    more, it lands 1000 s later on that clock, with the same time left."""
    d = Deadline.after(30.0)
    sent = pickle.dumps(d)
    real = time.monotonic
    monkeypatch.setattr(time, "monotonic", lambda: real() + 1000.0)
    there = pickle.loads(sent)
    assert there.at == pytest.approx(d.at + 1000.0, abs=0.05) and there.seconds == 30.0
    assert there.left() == pytest.approx(30.0, abs=0.1)


def test_a_vote_keeps_its_reserve_and_a_deadline_never_moves_earlier():
    d = Deadline.after(0.01)
    assert d.at_least(5.0).left() > 4.9 and d.at_least(5.0).seconds == d.seconds
    later = Deadline.after(60.0)
    assert later.at_least(5.0) is later and later.earliest(d) is d and d.earliest(None) is d


def test_the_old_config_name_says_the_new_one():
    with pytest.raises(ValueError) as err:
        config_from_dict({"service": {"retriever_timeout_s": 60}})
    msg = str(err.value)
    assert "service.retriever_timeout_s is now service.ask_deadline_s" in msg and "\n" not in msg
    with pytest.raises(ValueError, match="ask_deadline_s and max_batch must be positive"):
        config_from_dict({"service": {"ask_deadline_s": 0}})


# ---- through the ingress, with stand-in deployments --------------------------------------------
STAGES = (("SE@1",), ("Wiki@10",), ("ReFree",))


def _deployments(delay: float, seen: list):
    """A retriever group that takes `delay` s a round and a voter that never settles; both record
    the Deadline each call carried."""
    async def run(round_):
        seen.append(("run", round_.deadline))
        await asyncio.sleep(delay)
        return RoundRun([QuestionResult(q, tuple(Candidate(s, f"answer of {s}", Context(s)) for s in round_.specs))
                         for q in round_.questions], [Groundwork() for _ in round_.questions])

    class Run:
        def remote(self, *args):
            return run(*args)

    def decide(results, key, cascade, stage, deadline):
        seen.append(("vote", deadline))
        return [Decision(Vote(r.candidates[-1].retriever, r.candidates[-1].answer, 0.5, None, {}),
                         cascade.settled(stage, 0.0), None, 0.0) for r in results]

    group = _Handle()
    group.run = Run()
    voter = _Handle(plan=lambda: VoterPlan("k", Cascade(STAGES, (1.0, 1.0)), "test voter"), decide=decide)
    return group, voter


def _ask(request, transport: Deadline | None, delay: float = 0.3):
    seen: list = []
    group, voter = _deployments(delay, seen)
    ing = _ingress(_Handle(), group, voter)
    t = time.perf_counter()
    reply, code, details = asyncio.run(ing.call("Ask", request, (), transport))
    return reply, code, details, time.perf_counter() - t, seen


@pytest.mark.parametrize("asked, grpc_s", [(30.0, 0.5), (0.5, 30.0)])
def test_the_shorter_of_the_grpc_and_the_asks_deadline_ends_the_rounds(asked, grpc_s):
    reply, code, _, took, seen = _ask(eor_pb2.AskRequest(question="who?", deadline_s=asked), client_deadline(grpc_s
                                                                                                             + REPLY_MARGIN_S))
    assert code == grpc.StatusCode.OK and reply.final and reply.stopped_at_stage < 3 and took < 2.0
    runs = [d for kind, d in seen if kind == "run"]
    assert runs and all(d == runs[0] for d in runs)  # one Deadline, the same at every round
    assert runs[0].seconds == pytest.approx(0.5)


def test_without_any_deadline_the_default_bounds_every_call():
    reply, code, _, _, seen = _ask(eor_pb2.AskRequest(question="who?"), None, delay=0.01)
    assert code == grpc.StatusCode.OK and reply.stopped_at_stage == 3
    runs = [d for kind, d in seen if kind == "run"]
    votes = [d for kind, d in seen if kind == "vote"]
    assert len(runs) == 3 and len(votes) == 3 and {d.seconds for d in runs} == {120.0}
    assert all(v.at >= runs[0].at for v in votes)  # a vote's deadline: the Ask's, or later by its reserve


@pytest.mark.parametrize("bad", [-1.0, math.nan, 0.0])
def test_a_negative_nan_or_zero_deadline_is_refused_before_any_work(bad):
    reply, code, details, _, seen = _ask(eor_pb2.AskRequest(question="who?", deadline_s=bad), client_deadline(5.0))
    assert reply is None and code == grpc.StatusCode.INVALID_ARGUMENT and "\n" not in details
    assert details.startswith("deadline_s must be above 0") and seen == []


def test_a_vote_whose_judge_ran_past_the_deadline_ends_like_a_late_vote():
    """The Voter's reader calls (an NLI judge) carry the Ask's Deadline; one that runs past it
    raises VoteDeadline there, which the crew hands on as it is (not as the voter failing)."""
    from serve.app.handles import ServiceCrew
    from serve.ensemble import VoteDeadline
    from tests.serve.test_reader_recovery import RayTaskError

    results = [QuestionResult("q", (Candidate("SE@1", "a", Context("SE@1")),))]
    one = Cascade.single_round(["SE@1"])
    late = ServiceCrew([], {}, {}, _Handle(decide=lambda r, k, c, st, d: RayTaskError(VoteDeadline())), "k")
    with pytest.raises(VoteDeadline):
        asyncio.run(late.decide(results, one, 0, Deadline.after(5.0)))
    broken = ServiceCrew([], {}, {}, _Handle(decide=lambda r, k, c, st, d: RayTaskError(ValueError("bad"))), "k")
    with pytest.raises(RayTaskError):
        asyncio.run(broken.decide(results, one, 0, Deadline.after(5.0)))


# ---- Retrieve and Generate carry the client's deadline too -------------------------------------
class _Response:
    """A Serve response that takes `delay` s to give `value`; records whether it was cancelled
    (what `handles.bounded` does past a deadline: Ray aborts the call)."""

    def __init__(self, delay: float, value):
        self.delay, self.value, self.cancelled = delay, value, False

    def __await__(self):
        return asyncio.sleep(self.delay, self.value).__await__()

    def cancel(self):
        self.cancelled = True


class _Deployment:
    def __init__(self, method: str, response: _Response):
        setattr(self, method, type("M", (), {"remote": staticmethod(lambda *args: response)})())


def _front(sources=None, generator=None):
    from serve.app.ingress import EorIngress

    settings = config_from_dict({"voter": {"weights": "equal"}})
    return EorIngress.func_or_class(settings, [_Handle()], [list(settings.pool.specs)], _Handle(),
                                    _Handle(), sources=sources, generator=generator)


def test_retrieve_stops_waiting_for_a_source_at_the_clients_deadline():
    from retrievers.types import Passage

    slow, fast = _Response(10.0, None), _Response(0.0, [[Passage("p1", "Hamlet", "a play")]])
    ing = _front(sources={"SE": _Deployment("search", slow), "Wiki": _Deployment("search", fast)})
    t = time.perf_counter()
    reply, code, _ = asyncio.run(ing.call("Retrieve", eor_pb2.RetrieveRequest(questions=["who?"]), (),
                                          client_deadline(0.3 + REPLY_MARGIN_S)))
    assert code == grpc.StatusCode.OK and time.perf_counter() - t < 3.0 and slow.cancelled
    hits = {s.source: s for s in reply.results[0].sources}
    assert hits["SE"].error == "TimeoutError: missed the 0.3 s deadline" and not hits["SE"].passages
    assert [p.title for p in hits["Wiki"].passages] == ["Hamlet"] and not hits["Wiki"].error


def test_generate_past_the_clients_deadline_is_deadline_exceeded_and_aborted():
    slow = _Response(10.0, ["late"])
    ing = _front(generator=_Deployment("generate", slow))
    t = time.perf_counter()
    reply, code, details = asyncio.run(ing.call("Generate", eor_pb2.GenerateRequest(prompts=["p"], raw=True), (),
                                                client_deadline(0.3 + REPLY_MARGIN_S)))
    assert (reply, code) == (None, grpc.StatusCode.DEADLINE_EXCEEDED) and time.perf_counter() - t < 3.0
    assert details == "Generate did not finish within the client's 0.3 s deadline" and slow.cancelled
