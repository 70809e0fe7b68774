"""Traffic beyond capacity (issue 57), with stand-in handles and no Ray: admission control (a full
queue and a deadline shorter than the queue's wait refused at once with a retry pushback, on the
gRPC wire as grpc-retry-pushback-ms and over HTTP as 429 + Retry-After), depth that follows a
stand-in queue signal, and the degraded answer while a reader is down."""
from __future__ import annotations

import asyncio
import time
from functools import partial

import grpc
import pytest
from starlette.testclient import TestClient

from protos import eor_pb2, eor_pb2_grpc
from retrievers.types import Candidate, Context, QuestionResult
from serve.app.admission import Admission
from serve.app.deployments import VoterPlan
from serve.app.errors import Overloaded, Pushback, ReaderUnavailable, pushback_of
from serve.config import config_from_dict
from serve.deadline import Deadline
from serve.ensemble import answer_async
from tests.serve.test_ask_stream import group
from tests.serve.test_reader_recovery import RayTaskError, _Handle
from voter.cascade import Cascade, LoadRule, ServiceLoad, lowered
from voter.decision import Confidence, Decision
from voter.question_vote import Vote

RE = grpc.StatusCode.RESOURCE_EXHAUSTED


def ingress(group_handle, voter, service=None, readers=None, reader=None):
    from serve.app.ingress import EorIngress

    settings = config_from_dict({"voter": {"weights": "equal"}, "service": service or {}})
    return EorIngress.func_or_class(settings, [group_handle], [list(settings.pool.specs)], voter,
                                    reader or _Handle(queue=lambda: {"in_flight": 0, "down": None}),
                                    readers=readers)


def sure_voter(p: float, stages=(("SE@1",), ("Wiki@10",)), thresholds=(0.8,)):
    """Votes the first candidate with P(right) `p` (a confidence-aware voter's Decision)."""
    def decide(results, key, cascade, k, deadline):
        out = []
        for r in results:
            c = r.candidates[0]
            out.append(Decision(Vote(c.retriever, c.answer, p, None, {}), cascade.settled(k, p), Confidence(p, True), p))
        return out
    return _Handle(plan=lambda *down: VoterPlan("k", Cascade(stages, thresholds), "test voter"), decide=decide)


# ---- admission control ---------------------------------------------------------------------------
def test_an_ask_that_finds_the_queue_full_is_refused_at_once_with_a_pushback():
    async def scenario():
        ing = ingress(group(delay=0.5), sure_voter(0.9), {"max_asks_running": 1, "max_asks_queued": 0})
        first = asyncio.ensure_future(ing.call("Ask", eor_pb2.AskRequest(question="who wrote hamlet?")))
        await asyncio.sleep(0.05)
        t = time.monotonic()
        reply, code, details = await ing.call("Ask", eor_pb2.AskRequest(question="who painted it?"))
        refused_in = time.monotonic() - t
        done = await first
        return reply, code, details, refused_in, done
    reply, code, details, refused_in, done = asyncio.run(scenario())
    assert code == RE and refused_in < 0.1 and "at capacity" in details and "\n" not in details
    assert isinstance(reply, Pushback) and reply.seconds >= 0.5
    assert dict(reply.metadata)["grpc-retry-pushback-ms"].isdigit()
    assert done[1] == grpc.StatusCode.OK and done[0].answer  # the one running is answered


def test_a_deadline_shorter_than_the_queue_wait_is_refused_at_once_and_never_run():
    async def scenario():
        adm = Admission(running=1, queued=8)
        adm._times.extend([2.0] * 4)  # recent Asks took 2 s each
        async with adm.slot(None):  # one running
            t = time.monotonic()
            with pytest.raises(Overloaded) as refused:
                async with adm.slot(Deadline.after(3.0)):  # would wait ~2 s, then take 2 s: past 3 s
                    raise AssertionError("ran after its deadline")
            elapsed = time.monotonic() - t
            assert adm.waiting == 0 and adm.running == 1
        return refused.value, elapsed
    err, elapsed = asyncio.run(scenario())
    assert elapsed < 0.05 and err.reason == "deadline" and err.code == RE
    assert err.retry_after_s == pytest.approx(2.0) and pushback_of(err).metadata == (("grpc-retry-pushback-ms", "2000"),)
    assert "past its 3.0 s deadline" in err.details


async def _ask(adm: Admission, ran: list, name: str, seconds: float, deadline: Deadline | None = None) -> str:
    """An Ask that holds a slot for `seconds` (its name in `ran` once it starts): "ok", or why it was refused."""
    try:
        async with adm.slot(deadline):
            ran.append(name)
            await asyncio.sleep(seconds)
        return "ok"
    except Overloaded as exc:
        return exc.reason


def test_waiting_asks_run_in_order_and_one_whose_deadline_passes_while_waiting_is_not_started():
    async def scenario():
        adm, ran = Admission(running=1, queued=4), []
        adm._times.append(0.01)  # recent Asks took 0.01 s: b is let in to wait, and its deadline passes

        ask = partial(_ask, adm, ran)
        tasks = [asyncio.ensure_future(ask("a", 0.2)), asyncio.ensure_future(ask("b", 0.0, Deadline.after(0.05))),
                 asyncio.ensure_future(ask("c", 0.0))]
        got = await asyncio.gather(*tasks)
        return got, ran, adm.running
    got, ran, running = asyncio.run(scenario())
    assert got == ["ok", "expired", "ok"] and ran == ["a", "c"] and running == 0


def test_the_grpc_front_sends_the_pushback_as_trailing_metadata():
    from serve.app.grpc_service import EorFront

    class Ingress:
        class call:  # noqa: N801 - a Serve handle's method
            @staticmethod
            def remote(method, request, metadata, transport):
                async def answer():
                    return Pushback(2.25), RE, "the service is at capacity; try again in 2.2 s"
                return answer()

    async def scenario():
        front = await EorFront(Ingress(), "127.0.0.1", 0).start()
        try:
            async with grpc.aio.insecure_channel(front.address) as channel:
                with pytest.raises(grpc.aio.AioRpcError) as err:
                    await eor_pb2_grpc.EorStub(channel).Ask(eor_pb2.AskRequest(question="who?"), timeout=10)
                return err.value.code(), err.value.details(), dict(err.value.trailing_metadata())
        finally:
            await front.stop(0.1)
    code, details, trailers = asyncio.run(scenario())
    assert code == RE and details.startswith("the service is at capacity")
    assert trailers["grpc-retry-pushback-ms"] == "2250"


def test_http_maps_a_refusal_to_429_with_retry_after():
    from serve.app.http import build_http_app

    class Refusing:
        async def call(self, method, request, metadata=(), transport=None):
            return Pushback(2.3), RE, "the service is at capacity"

        async def ask_stream(self, request, metadata=(), transport=None):
            yield Pushback(0.2), RE, "the service is at capacity"

    c = TestClient(build_http_app(Refusing()))
    for path in ("/v1/ask", "/v1/ask/stream"):
        r = c.post(path, json={"question": "who?"})
        assert r.status_code == 429 and r.json() == {"error": "the service is at capacity", "status": "RESOURCE_EXHAUSTED"}
        assert r.headers["Retry-After"] == ("3" if path == "/v1/ask" else "1")  # whole seconds, at least 1


def test_ray_serves_own_back_pressure_is_resource_exhausted_with_a_pushback():
    from ray.serve.exceptions import BackPressureError

    from serve.app.errors import http_error, status_of

    err = RayTaskError(BackPressureError(num_queued_requests=9, max_queued_requests=8))
    assert status_of(err)[0] == RE and http_error(err)[0] == 429
    assert pushback_of(err) == Pushback(1.0)


# ---- depth that follows the load ------------------------------------------------------------------
def _run(p: float, load: float, rule=LoadRule(bar=0.4, in_flight=4), confident=True, overflow: bool = False):
    cascade = Cascade((("SE@1",), ("Wiki@10",)), (0.8,))
    asked = []

    async def run_round(todo, specs):
        asked.append(list(specs))
        return [QuestionResult("q", (Candidate(specs[0], "a", Context(specs[0])),)) for _ in todo]

    async def vote(results, k):
        return [Decision(Vote("SE@1", "a", p, None, {}), cascade.settled(k, p), Confidence(p, True) if confident
                         else None, p) for _ in results]

    async def read_load():
        return ServiceLoad(load, overflow)
    [a] = asyncio.run(answer_async(["q"], cascade, run_round, vote, under_load=rule, load=read_load))
    return a, asked


def test_under_load_a_question_stops_at_the_first_round_whose_p_clears_the_lower_bar():
    a, asked = _run(p=0.5, load=10)
    assert (a.rounds_run, a.under_load, asked) == (1, True, [["SE@1"]])
    a, asked = _run(p=0.5, load=3)  # the readers are not busy: the voter's own threshold (0.8) rules
    assert (a.rounds_run, a.under_load, len(asked)) == (2, False, 2)
    a, _ = _run(p=0.3, load=10)  # below the lower bar: on to round 2
    assert (a.rounds_run, a.under_load) == (2, False)
    a, _ = _run(p=0.5, load=10, confident=False)  # a margin voter's statistic is no P(right)
    assert (a.rounds_run, a.under_load) == (2, False)
    a, _ = _run(p=0.9, load=10)  # settled by its own threshold: not "under load"
    assert (a.rounds_run, a.under_load) == (1, False)
    assert lowered((0.8, float("inf"), 0.3), 0.4) == (0.4, float("inf"), 0.3)  # never-stop rounds stay so
    assert not LoadRule(0.4, 0).loaded(ServiceLoad(1000, True))  # no signal on: never
    overflow_rule = LoadRule(bar=0.4, on_overflow=True)  # Asks overflowing the ingress's slots
    a, _ = _run(p=0.5, load=0, rule=overflow_rule, overflow=True)
    assert (a.rounds_run, a.under_load) == (1, True)
    a, _ = _run(p=0.5, load=50, rule=overflow_rule)  # busy engines alone: that signal is off
    assert (a.rounds_run, a.under_load) == (2, False)


def test_the_reply_says_it_was_answered_early_under_load_and_the_queue_is_read_per_round():
    reads = []

    def queue():
        reads.append(1)
        return {"in_flight": 12, "down": None}
    ing = ingress(group(), sure_voter(0.5), {"under_load_in_flight": 8, "under_load_bar": 0.45},
                  reader=_Handle(queue=queue))
    reply, code, _ = asyncio.run(ing.call("Ask", eor_pb2.AskRequest(question="who wrote hamlet?")))
    assert code == grpc.StatusCode.OK and reply.under_load and reply.stopped_at_stage == 1 and reads
    ing = ingress(group(), sure_voter(0.5), {"under_load_in_flight": 8, "under_load_bar": 0.45})  # idle readers
    reply, code, _ = asyncio.run(ing.call("Ask", eor_pb2.AskRequest(question="who wrote hamlet?")))
    assert code == grpc.StatusCode.OK and not reply.under_load and reply.stopped_at_stage == 2


# ---- lose a reader gracefully ---------------------------------------------------------------------
STRONG = (("SE@1~1.5B",), ("SE@4~1.5B",))
FALLBACK = (("SE@1",), ("Wiki@10",))


def two_reader_voter(has_fallback=True):
    """The shipped voter's shape: rounds through the 1.5B; its fallback the 0.5B's rounds."""
    asked = []

    def plan(down=()):
        asked.append(tuple(down))
        if not down:
            return VoterPlan("main", Cascade(STRONG, (0.5,)), "two-reader voter")
        if not has_fallback:
            return None
        return VoterPlan("fb", Cascade(FALLBACK, (0.5,)), "fallback voter",
                         f"degraded: reader {', '.join(down)} down or starting; answered by the voter's "
                         "single-reader fallback fb")

    def decide(results, key, cascade, k, deadline):
        out = []
        for r in results:
            c = next((c for c in r.candidates if c.answer), r.candidates[0])
            out.append(Decision(Vote(c.retriever, c.answer, 0.7, None, {}), cascade.settled(k, 0.7),
                                Confidence(0.7, True), 0.7))
        return out
    return _Handle(plan=plan, decide=decide), asked


def reading_group(down_1_5b: bool):
    """Answers every spec; the 1.5B's members raise ReaderUnavailable while it is down."""
    down = RayTaskError(ReaderUnavailable("reader engine down (EngineDeadError: its engine process stopped); "
                                          "restarting, try again shortly"))
    return group(fail=lambda specs: down if down_1_5b and any(s.endswith("~1.5B") for s in specs) else None)


def strong(down: str | None):
    return _Handle(queue=lambda: {"in_flight": 0, "down": down})


def test_while_the_15b_is_down_the_default_ask_is_answered_degraded_by_the_05bs_members():
    voter, asked = two_reader_voter()
    ing = ingress(reading_group(down_1_5b=True), voter, readers={"1.5B": strong("reader engine down; restarting")})
    reply, code, details = asyncio.run(ing.call("Ask", eor_pb2.AskRequest(question="who wrote hamlet?")))
    assert code == grpc.StatusCode.OK, details
    assert reply.answer == "answer of SE@1" and reply.confidence == pytest.approx(0.7)  # the fallback's own P
    assert reply.degraded.startswith("degraded: reader 1.5B down") and reply.voter == "fallback voter"
    assert all("~1.5B" not in s for s in reply.ran) and asked == [(), ("1.5B",)]


def test_a_reader_that_dies_during_the_ask_gives_a_degraded_answer_not_unavailable():
    voter, asked = two_reader_voter()
    ing = ingress(reading_group(down_1_5b=True), voter, readers={"1.5B": strong(None)})  # not known down yet
    reply, code, details = asyncio.run(ing.call("Ask", eor_pb2.AskRequest(question="who wrote hamlet?")))
    assert code == grpc.StatusCode.OK and reply.answer and reply.degraded, details
    assert asked == [(), ("1.5B",)]
    items = asyncio.run(_collect(ing, eor_pb2.AskRequest(question="who wrote hamlet?")))
    assert items[-1][1] == grpc.StatusCode.OK and items[-1][0].final and items[-1][0].degraded


async def _collect(ing, request):
    return [item async for item in ing.ask_stream(request)]


def test_without_a_fallback_or_when_it_fails_too_the_ask_is_unavailable_never_an_empty_ok():
    voter, _ = two_reader_voter(has_fallback=False)
    ing = ingress(reading_group(down_1_5b=True), voter, readers={"1.5B": strong("down")})
    reply, code, details = asyncio.run(ing.call("Ask", eor_pb2.AskRequest(question="who wrote hamlet?")))
    assert (reply, code) == (None, grpc.StatusCode.UNAVAILABLE) and details.startswith("reader engine down")
    up_voter, _ = two_reader_voter()
    ing = ingress(reading_group(down_1_5b=False), up_voter, readers={"1.5B": strong(None)})
    reply, code, _ = asyncio.run(ing.call("Ask", eor_pb2.AskRequest(question="who wrote hamlet?")))
    assert code == grpc.StatusCode.OK and not reply.degraded and reply.ran[0] == "SE@1~1.5B"


def test_the_voter_deployment_plans_the_shipped_voters_own_fallback_without_the_down_reader(monkeypatch):
    from serve.app.deployments import Voter
    from serve.config_readers import reader_models
    from voter.question_vote import choose_voter

    settings = config_from_dict({})
    readers = reader_models(settings)
    if "1.5B" not in readers:
        pytest.skip("the default config names no 1.5B reader")
    v = object.__new__(Voter.func_or_class)
    v.readers, v._recent, v._fallbacks = readers, {}, {}
    v.choice = choose_voter(list(settings.pool.specs), readers)
    if v.choice.saved.fallback is None:
        pytest.skip("the shipped voter has no single-reader fallback")
    monkeypatch.setattr(Voter.func_or_class, "_built_metrics", lambda self, choice: ["metrics"])
    plan = asyncio.run(v.plan(("1.5B",)))
    assert plan.degraded and all("~" not in s for s in plan.cascade.asked)
    assert plan.key != asyncio.run(v.plan()).key and not asyncio.run(v.plan()).degraded
    assert asyncio.run(v.plan(("2B",))).degraded == ""  # a reader the voter never asks changes nothing


def test_reader_autoscaling_and_bounded_queues_reach_the_deployments(monkeypatch, tmp_path):
    from ray.serve._private.build_app import build_app as flatten

    from serve.app.application import build_app

    monkeypatch.setenv("EOR_HOME", str(tmp_path))
    settings = config_from_dict({"voter": {"weights": "equal"}, "service": {
        "max_queued_requests": 100, "reader_autoscaling": {"min_replicas": 1, "max_replicas": 3,
                                                           "target_ongoing_requests": 8}}})
    deps = {d.name: d._deployment_config for d in flatten(build_app(settings), name="eor").deployments}
    assert all(c.max_queued_requests == 100 for c in deps.values())
    readers = [name for name in deps if name.startswith("Reader")]
    assert readers and all(deps[n].autoscaling_config.max_replicas == 3 for n in readers)
    assert all(c.autoscaling_config is None for n, c in deps.items() if n not in readers)
    with pytest.raises(ValueError, match="max_asks_running"):
        config_from_dict({"service": {"max_asks_running": -1}})


def test_an_ask_whose_turn_comes_too_late_to_finish_is_not_started_and_the_slot_goes_on():
    async def scenario():
        adm, ran = Admission(running=1, queued=4), []
        adm._times.extend([0.3] * 4)  # recent Asks took 0.3 s

        ask = partial(_ask, adm, ran)
        a = asyncio.ensure_future(ask("a", 0.5))  # takes longer than the estimate
        await asyncio.sleep(0.01)
        b = asyncio.ensure_future(ask("b", 0.0, Deadline.after(0.7)))  # let in: ~0.3 s wait + 0.3 s <= 0.7 s
        c = asyncio.ensure_future(ask("c", 0.0))
        got = await asyncio.gather(a, b, c)
        return got, ran, adm.running
    got, ran, running = asyncio.run(scenario())
    assert got == ["ok", "deadline", "ok"] and ran == ["a", "c"] and running == 0  # b's turn came with ~0.2 s left


def test_an_ask_that_runs_out_of_time_counts_toward_the_service_time():
    async def scenario():
        adm = Admission(running=1, queued=4)
        async with adm.slot(Deadline.after(0.05)):
            await asyncio.sleep(0.15)  # took all its time and more: at least this long
        async with adm.slot(Deadline.after(5.0)):
            pass
        try:
            async with adm.slot(Deadline.after(5.0)):
                raise RuntimeError("a reader failed")
        except RuntimeError:
            pass
        return list(adm._times)
    times = asyncio.run(scenario())
    assert len(times) == 2 and times[0] >= 0.15  # the failure with time left is not a service time


def test_service_times_restart_when_asks_turn_degraded_or_whole_again():
    """After a restart the fallback's short times must not let whole Asks in to miss their deadline."""
    async def served(adm: Admission, seconds: float, degraded: bool | None) -> None:
        async with adm.slot(None) as s:
            await asyncio.sleep(seconds)
            s.degraded = degraded

    async def scenario():
        adm = Admission(running=1, queued=8)
        adm._times.extend([0.5] * 8)  # whole Asks
        await served(adm, 0.01, True)  # a reader went down: the fallback answers, quicker
        after_down = list(adm._times)
        await served(adm, 0.02, None)  # ran out of time meanwhile: counts as the service is now
        await served(adm, 0.1, False)  # the reader is back: whole Asks again, slower
        return after_down, list(adm._times)
    after_down, after_back = asyncio.run(scenario())
    assert len(after_down) == 1 and after_down[0] < 0.5
    assert len(after_back) == 1 and after_back[0] >= 0.1


def test_an_arrival_is_judged_by_the_tail_of_recent_service_times_not_their_mean():
    async def scenario():
        adm = Admission(running=1, queued=8)
        adm._times.extend([1.0] * 8 + [5.0] * 2)  # mean 1.8 s; one Ask in ten took 5 s
        async with adm.slot(None):
            with pytest.raises(Overloaded) as refused:  # wait ~1.8 s, then up to 5 s: past 4 s
                async with adm.slot(Deadline.after(4.0)):
                    raise AssertionError("let in to miss its deadline")
            return refused.value, adm.service_s(), adm.tail_s()
    refused, mean, tail = asyncio.run(scenario())
    assert refused.reason == "deadline" and "up to 5.0 s" in str(refused)
    assert (round(mean, 2), tail) == (1.8, 5.0)


def test_an_ask_that_would_wait_past_max_wait_s_is_refused_at_once():
    async def scenario():
        adm, ran = Admission(running=1, queued=8, max_wait_s=3.0), []
        adm._times.extend([2.0] * 4)  # recent Asks took 2 s: the first waiting Ask waits ~2 s, the next ~4 s
        async with adm.slot(None):
            waiting = asyncio.ensure_future(_ask(adm, ran, "waits", 0.0))
            await asyncio.sleep(0.01)
            t = time.monotonic()
            with pytest.raises(Overloaded) as refused:
                async def let_in():
                    async with adm.slot(None):  # no deadline: max_wait_s alone refuses it
                        raise AssertionError("let in to wait too long")
                await asyncio.wait_for(let_in(), 1.0)  # a regression waits for the slot held here: fail, not hang
            refused_in = time.monotonic() - t
        return refused.value.reason, refused_in, await waiting, ran
    reason, refused_in, first, ran = asyncio.run(scenario())
    assert reason == "wait" and refused_in < 0.1 and (first, ran) == ("ok", ["waits"])
    with pytest.raises(ValueError, match="max_wait_s"):
        Admission(1, 1, max_wait_s=-1)
    with pytest.raises(ValueError, match="max_wait_s"):
        config_from_dict({"service": {"max_wait_s": -1}})


def test_an_ask_waiting_for_a_slot_makes_a_running_ask_stop_early_under_load():
    async def scenario():
        ing = ingress(group(delay=0.3), sure_voter(0.5), {"max_asks_running": 1, "under_load_bar": 0.45})
        first = asyncio.ensure_future(ing.call("Ask", eor_pb2.AskRequest(question="who wrote hamlet?")))
        await asyncio.sleep(0.05)
        second = await ing.call("Ask", eor_pb2.AskRequest(question="who painted it?"))  # waits for the slot
        return await first, second
    (first, c1, _), (second, c2, _) = asyncio.run(scenario())
    assert c1 == c2 == grpc.StatusCode.OK
    assert first.under_load and first.stopped_at_stage == 1  # an Ask waited behind it
    assert not second.under_load and second.stopped_at_stage == 2  # nothing waited behind it


def test_overflow_is_an_ask_waiting_or_one_turned_away_within_the_last_service_time():
    async def scenario():
        adm = Admission(running=1, queued=0)
        adm._times.append(5.0)  # Asks take 5 s
        seen = [adm.overflowing()]  # nothing turned away yet
        async with adm.slot(None):
            seen.append(adm.overflowing())  # the one slot taken, nobody turned away: not overflow
            with pytest.raises(Overloaded):
                async with adm.slot(None):  # no queue: refused
                    pass
            seen.append(adm.overflowing())
        adm._times.clear()
        adm._times.append(0.05)  # Asks take 0.05 s: the refusal is older than that in a moment
        await asyncio.sleep(0.1)
        seen.append(adm.overflowing())
        return seen
    assert asyncio.run(scenario()) == [False, False, True, False]


def test_a_fresh_service_lets_at_most_one_round_of_slots_wait():
    async def scenario():
        adm, ran = Admission(running=1, queued=8), []
        async with adm.slot(None):  # no Ask has ended: no service time to go by
            waiting = asyncio.ensure_future(_ask(adm, ran, "waits", 0.0))
            await asyncio.sleep(0.01)
            with pytest.raises(Overloaded) as refused:
                await asyncio.wait_for(adm.slot(None).__aenter__(), 1.0)
        return refused.value.reason, await waiting
    assert asyncio.run(scenario()) == ("wait", "ok")
