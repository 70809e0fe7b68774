"""A reader engine that dies is noticed, reported and replaced without an operator; callers get
one line, never a traceback (the Reader deployment's class and the ingress, without Ray)."""
from __future__ import annotations

import asyncio
import time

import grpc
import pytest

from protos import eor_pb2
from serve.app.deployments import VoterPlan
from retrievers.engine import ReaderEngine
from retrievers.reader import PromptText, SamplingParams
from serve.config import config_from_dict


from vllm.v1.engine.exceptions import EngineDeadError as VLLMEngineDeadError  # noqa: E402

# one engine at a time (no compiled engine taking over: tests/serve/test_reader_stages.py tests that)
ONE_ENGINE = {"enforce_eager": True}


class EngineDeadError(VLLMEngineDeadError):
    """vLLM's own error (what its LLM raises once the engine core is gone), with our message."""

    def __init__(self, message: str):
        Exception.__init__(self, message)


class DyingEngine(ReaderEngine):
    """A fake engine; `DyingEngine.kill()` makes the live one die on its next call."""

    model_id = "dying-reader"
    started = 0
    doomed = False

    def __init__(self):
        DyingEngine.started += 1
        self.dead = False

    @classmethod
    def kill(cls):
        cls.doomed = True

    def format(self, prompt: PromptText) -> str:
        return prompt.body

    def generate(self, prompts, params):
        if DyingEngine.doomed or self.dead:
            DyingEngine.doomed, self.dead = False, True
            raise EngineDeadError("\x1b[31mEngineCore encountered an issue.\x1b[0m\nTraceback (most recent call last):")
        return [f"out:{p}" for p in prompts]


def make_dying_engine(config):
    return DyingEngine()


def test_a_dead_engine_is_reported_and_restarted():
    from serve.app.reader import Reader, ReaderUnavailable

    settings = config_from_dict({"cache": {"enabled": False}, "reader": ONE_ENGINE, "service": {
        "engine_factory": f"{__name__}:make_dying_engine", "reader_batch_wait_s": 0.0}})
    reader = Reader.func_or_class(settings)
    params = SamplingParams(max_tokens=4)

    async def scenario():
        assert await reader.generate(["a"], params) == ["out:a"]
        DyingEngine.kill()
        with pytest.raises(ReaderUnavailable) as err:
            await reader.generate(["b"], params)
        msg = str(err.value)
        assert msg == "reader engine down (EngineDeadError: its engine process stopped); restarting, try again shortly"  # our words: the engine's own message is the log's
        for _ in range(200):  # the replacement engine starts on its own thread
            if reader.down is None:
                break
            await asyncio.sleep(0.01)
        stats = await reader.stats()
        assert stats["down"] is None and stats["restarts"] == 1
        assert await reader.generate(["c"], params) == ["out:c"]

    started = DyingEngine.started
    asyncio.run(scenario())
    assert DyingEngine.started == started + 1


class IdleDeathEngine(DyingEngine):
    """Dies with no request running; says so as vLLM's AsyncLLM does (`dead_error`)."""

    died = False

    @property
    def dead_error(self):
        return EngineDeadError("EngineCore exited unexpectedly") if IdleDeathEngine.died and self is IdleDeathEngine.first \
            else None

    first = None


def make_idle_death_engine(config):
    engine = IdleDeathEngine()
    IdleDeathEngine.first = IdleDeathEngine.first or engine
    return engine


def test_an_engine_that_dies_while_idle_is_reported_by_stats_and_restarted():
    from serve.app.reader import Reader

    settings = config_from_dict({"cache": {"enabled": False}, "reader": ONE_ENGINE, "service": {
        "engine_factory": f"{__name__}:make_idle_death_engine", "reader_batch_wait_s": 0.0}})
    reader = Reader.func_or_class(settings)

    async def scenario():
        assert (await reader.stats())["down"] is None
        IdleDeathEngine.died = True  # no call in flight: only vLLM's monitor knows
        stats = await reader.stats()
        assert stats["down"] == "reader engine down (EngineDeadError: its engine process stopped); restarting, try again shortly"
        for _ in range(200):
            if reader.down is None:
                break
            await asyncio.sleep(0.01)
        assert (await reader.stats())["down"] is None and reader.restarts == 1
        assert await reader.generate(["c"], SamplingParams(max_tokens=4)) == ["out:c"]

    asyncio.run(scenario())


class _Remote:
    def __init__(self, fn):
        self._fn = fn

    def remote(self, *args):
        async def call():
            value = self._fn(*args)
            if isinstance(value, BaseException):
                raise value
            return value
        return call()


class _Handle:
    def __init__(self, **methods):
        for name, fn in methods.items():
            setattr(self, name, _Remote(fn))


class RayTaskError(Exception):
    """Stands in for Ray's wrapper: the reader's error travels as `.cause`."""

    def __init__(self, cause):
        super().__init__(f"ray::Reader.generate() (pid=1)\nTraceback ...\n{cause}")
        self.cause = cause


def _ingress(reader, group, voter):
    from serve.app.ingress import EorIngress

    settings = config_from_dict({"voter": {"weights": "equal"}})
    specs = list(settings.pool.specs)
    return EorIngress.func_or_class(settings, [group], [specs], voter, reader)


def test_ask_while_the_reader_is_down_is_unavailable_and_health_says_why():
    from serve.app.errors import ReaderUnavailable
    from voter.cascade import Cascade

    down = "reader engine down (EngineDeadError: boom); restarting"
    reader = _Handle(stats=lambda: {"model": "m", "prompts": 0, "cache_hits": 0, "engine_calls": 0,
                                    "engine_prompts": 0, "mean_batch": 0.0, "prompt_tokens": 0,
                                    "generated_tokens": 0, "cached_tokens": 0, "down": down, "restarts": 0},
                     model_id=lambda: "m")
    group = _Handle(run=lambda *a: RayTaskError(ReaderUnavailable(down)))
    voter = _Handle(plan=lambda: VoterPlan("k", Cascade.single_round(["ReFree"]), "equal weights"),
                    weights_source=lambda: "equal weights")
    ing = _ingress(reader, group, voter)
    reply, code, details = asyncio.run(ing.call("Ask", eor_pb2.AskRequest(question="who?")))
    assert (reply, code, details) == (None, grpc.StatusCode.UNAVAILABLE, down)
    health, code, _ = asyncio.run(ing.call("Health", eor_pb2.HealthRequest()))
    assert code == grpc.StatusCode.OK and health.status == eor_pb2.HealthReply.NOT_SERVING and health.detail == down
    assert asyncio.run(ing.serving()) == (False, down)


def test_an_unexpected_error_is_internal_with_one_line():
    from voter.cascade import Cascade

    voter = _Handle(plan=lambda: RuntimeError("\x1b[1mbad\x1b[0m thing\n  File \"x.py\", line 1"),
                    weights_source=lambda: "equal weights")
    ing = _ingress(_Handle(), _Handle(), voter)
    reply, code, details = asyncio.run(ing.call("Ask", eor_pb2.AskRequest(question="who?")))
    assert code == grpc.StatusCode.INTERNAL and details == "RuntimeError: bad thing"
