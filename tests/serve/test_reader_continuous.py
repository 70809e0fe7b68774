"""The Reader deployment with a continuously batching engine (an `agenerate` per prompt, as
serve/engine/vllm_engine.py's AsyncVLLMEngine): cache first, one request per distinct prompt, a
prompt in flight awaited not resent, a cancelled call aborts what only it waited for, a dead
engine reported in one line. The class runs without Ray; the engine is a fake here and the
real AsyncLLM in tests/serve/test_qwen_reader.py."""
from __future__ import annotations

import asyncio

import pytest

from retrievers.engine import ReaderEngine
from retrievers.reader import Generation, PromptText, SamplingParams
from retrievers.types import ReaderTokens
from serve.config import config_from_dict
from tests.serve.test_reader_recovery import ONE_ENGINE, EngineDeadError


class SlowEngine(ReaderEngine):
    """Each request takes `delay` seconds; records what it was sent, what finished, what was aborted."""

    model_id = "slow-reader"
    continuous = True
    delay = 0.05
    die = False

    def __init__(self):
        self.sent: list[str] = []
        self.finished: list[str] = []
        self.aborted: list[str] = []

    def format(self, prompt: PromptText) -> str:
        return prompt.body

    async def agenerate(self, prompt: str, params: SamplingParams) -> Generation:
        self.sent.append(prompt)
        if SlowEngine.die:
            raise EngineDeadError("EngineCore died\nTraceback (most recent call last):")
        try:
            await asyncio.sleep(self.delay)
        except asyncio.CancelledError:
            self.aborted.append(prompt)
            raise
        self.finished.append(prompt)
        return Generation(f" out:{prompt} ", None, ReaderTokens(len(prompt.split()), 2, 0))


ENGINES: list[SlowEngine] = []


def make_slow_engine(config):
    ENGINES.append(SlowEngine())
    return ENGINES[-1]


@pytest.fixture
def reader(tmp_path):
    from serve.app.reader import Reader

    SlowEngine.delay, SlowEngine.die = 0.05, False
    settings = config_from_dict({"cache": {"path": str(tmp_path / "cache.sqlite")}, "reader": ONE_ENGINE,
                                 "service": {"engine_factory": f"{__name__}:make_slow_engine"}})
    return Reader.func_or_class(settings)


PARAMS = SamplingParams(max_tokens=4)


def test_distinct_prompts_go_once_and_the_cache_answers_repeats(reader):
    async def scenario():
        a, b = await asyncio.gather(reader.generate(["p1", "p2", "p1"], PARAMS), reader.generate(["p2", "p3"], PARAMS))
        assert a == ["out:p1", "out:p2", "out:p1"] and b == ["out:p2", "out:p3"]
        assert await reader.generate(["p3", "p1"], PARAMS) == ["out:p3", "out:p1"]  # from the disk cache
        return await reader.stats()

    stats = asyncio.run(scenario())
    engine = ENGINES[-1]
    assert sorted(engine.sent) == ["p1", "p2", "p3"]  # p2 was in flight for the second call: awaited
    assert stats["prompts"] == 7 and stats["cache_hits"] == 2 and stats["in_flight"] == 0
    assert stats["generated_tokens"] == 6 and stats["prompt_tokens"] == 3


def test_a_cancelled_call_aborts_only_what_no_other_call_waits_for(reader):
    SlowEngine.delay = 0.5

    async def scenario():
        keep = asyncio.ensure_future(reader.generate(["shared"], PARAMS))
        doomed = asyncio.ensure_future(reader.generate(["shared", "mine"], PARAMS))
        await asyncio.sleep(0.1)
        doomed.cancel()  # a deadline passed: Ray cancels the call
        with pytest.raises(asyncio.CancelledError):
            await doomed
        await asyncio.sleep(0.05)
        assert reader.counting.in_flight == 1  # "mine" left the engine at once; "shared" still runs
        assert await keep == ["out:shared"]
        return await reader.stats()

    stats = asyncio.run(scenario())
    engine = ENGINES[-1]
    assert engine.aborted == ["mine"] and engine.finished == ["shared"] and stats["in_flight"] == 0


def test_a_dead_continuous_engine_is_reported_in_one_line_and_replaced(reader):
    from serve.app.errors import ReaderUnavailable

    async def scenario():
        SlowEngine.die = True
        with pytest.raises(ReaderUnavailable) as err:
            await reader.generate(["x"], PARAMS)
        SlowEngine.die = False
        msg = str(err.value)
        assert msg == "reader engine down (EngineDeadError: its engine process stopped); restarting, try again shortly"
        for _ in range(300):
            if reader.down is None:
                break
            await asyncio.sleep(0.01)
        assert await reader.generate(["y"], PARAMS) == ["out:y"]

    n = len(ENGINES)
    asyncio.run(scenario())
    assert len(ENGINES) == n + 1  # a new engine, no operator


def test_a_prompt_being_aborted_is_sent_afresh_by_the_next_caller(reader):
    SlowEngine.delay = 0.3

    async def scenario():
        first = asyncio.ensure_future(reader.generate(["p"], PARAMS))
        await asyncio.sleep(0.05)
        first.cancel()
        while reader._waiters:  # until the cancelled call has let go of its request
            await asyncio.sleep(0)
        # the engine may not have seen the abort yet; the request is no longer offered to callers
        assert reader._in_flight == {}
        second = await reader.generate(["p"], PARAMS)
        with pytest.raises(asyncio.CancelledError):
            await first
        return second

    assert asyncio.run(scenario()) == ["out:p"]
    engine = ENGINES[-1]
    assert engine.sent == ["p", "p"] and engine.aborted == ["p"] and engine.finished == ["p"]
