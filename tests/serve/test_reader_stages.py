"""The Reader's engines in `service_stages` order (serve/engine/vllm_engine.py): on CPU an eager
engine answers at once and a compiled one, started beside it, takes over when it is up; a dead
engine is replaced by an eager one, then a compiled one again. Stand-in engines say which
settings made them (the Reader class without Ray)."""
from __future__ import annotations

import asyncio
import threading
import time

import pytest

from retrievers.engine import ReaderEngine
from retrievers.reader import Generation, PromptText, SamplingParams
from serve.config import config_from_dict
from tests.serve.test_reader_recovery import EngineDeadError

PARAMS = SamplingParams(max_tokens=4)
GATE = threading.Event()  # a compiled stand-in finishes starting when this is set
MADE: list["StageEngine"] = []


class StageEngine(ReaderEngine):
    """Answers "<kind>:<prompt>" after `delay` s; a compiled one starts when GATE is set (or fails
    to start with `fail`); `die` makes its next request fail as a dead vLLM engine's does."""

    model_id = "stage-reader"
    continuous = True
    fail = False

    def __init__(self, eager: bool):
        self.kind = "eager" if eager else "compiled"
        self.sent: list[str] = []
        self.loaded = self.closed = self.die = False
        self.delay = 0.0

    def load(self) -> "StageEngine":
        if self.kind == "compiled":
            assert GATE.wait(10), "the test never let the compiled engine start"
            if StageEngine.fail:
                raise RuntimeError("compile failed\nTraceback (most recent call last):")
        self.loaded = True
        return self

    def close(self) -> None:
        self.closed = True

    def format(self, prompt: PromptText) -> str:
        return prompt.body

    async def agenerate(self, prompt: str, params: SamplingParams) -> Generation:
        assert self.loaded and not self.closed, "a request reached an engine that is not running"
        self.sent.append(prompt)
        if self.die:
            raise EngineDeadError("EngineCore encountered an issue.")
        await asyncio.sleep(self.delay)
        return Generation(f"{self.kind}:{prompt}")


def make_stage_engine(config):
    MADE.append(StageEngine(bool(config.reader.enforce_eager)))
    return MADE[-1]


@pytest.fixture
def stages(eor_home, monkeypatch):
    """A fresh record of the engines made; compiled ones held until the test opens the gate. A
    fresh EOR_HOME: no compiled start recorded (else the Reader starts the compiled one alone)."""
    import serve.engine.room

    monkeypatch.setattr(serve.engine.room, "available_gib", lambda: 64.0)
    MADE.clear()
    GATE.clear()
    StageEngine.fail = False
    yield MADE
    GATE.set()  # let any thread still starting an engine finish


def _reader(**reader):
    from serve.app.reader import Reader

    settings = config_from_dict({"cache": {"enabled": False}, "reader": {"device": "cpu", **reader},
                                 "service": {"engine_factory": f"{__name__}:make_stage_engine"}})
    return Reader.func_or_class(settings)


async def _until(condition, timeout_s: float = 5.0) -> None:
    end = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < end, "timed out"
        await asyncio.sleep(0.01)


def test_the_service_answers_eager_at_once_and_compiled_once_that_is_up(stages):
    reader = _reader()

    async def scenario():
        assert await reader.generate(["a"], PARAMS) == ["eager:a"]  # the compiled one is still starting
        stats = await reader.stats()
        assert (stats["engine"], stats["upgrades"]) == ("eager", 0)
        GATE.set()
        await _until(lambda: reader.upgrades == 1)
        assert await reader.generate(["b"], PARAMS) == ["compiled:b"]
        await _until(lambda: stages[0].closed)  # the eager one stops once idle
        return await reader.stats()

    stats = asyncio.run(scenario())
    assert [e.kind for e in stages] == ["eager", "compiled"]
    assert (stats["engine"], stats["upgrades"], stats["down"]) == ("compiled", 1, None)
    assert stages[0].sent == ["a"] and stages[1].sent == ["b"] and not stages[1].closed


def test_without_room_for_a_second_engine_the_eager_one_goes_on_and_the_log_says_why(stages, monkeypatch, caplog):
    import serve.app.reader

    monkeypatch.setattr(serve.app.reader, "room_for", lambda config: (False, "3.0 GiB available, the engine "
                                                                              "needs ~4.4 GiB (+1 GiB margin)"))
    GATE.set()
    reader = _reader()

    async def scenario():
        await _until(lambda: any("not started beside" in r.message for r in caplog.records))
        return await reader.generate(["a"], PARAMS), await reader.stats()

    with caplog.at_level("WARNING"):
        answers, stats = asyncio.run(scenario())
    assert answers == ["eager:a"] and (stats["engine"], stats["upgrades"]) == ("eager", 0)
    assert [e.kind for e in stages] == ["eager"]  # no compiled engine was made
    assert "3.0 GiB available, the engine needs ~4.4 GiB" in caplog.text


def test_a_request_in_the_eager_engine_finishes_there_before_it_stops(stages):
    reader = _reader()

    async def scenario():
        stages[0].delay = 0.5
        held = asyncio.ensure_future(reader.generate(["slow"], PARAMS))
        await asyncio.sleep(0.05)
        GATE.set()
        await _until(lambda: reader.upgrades == 1)
        assert await reader.generate(["new"], PARAMS) == ["compiled:new"]
        assert not stages[0].closed  # "slow" is still in it
        assert await held == ["eager:slow"]
        await _until(lambda: stages[0].closed)

    asyncio.run(scenario())


def test_a_dead_engine_restarts_eager_then_the_compiled_one_takes_over_again(stages):
    from serve.app.reader import ReaderUnavailable

    GATE.set()
    reader = _reader()

    async def scenario():
        await _until(lambda: reader.upgrades == 1)
        GATE.clear()  # hold the next compiled engine: the restarted reader answers eager meanwhile
        stages[1].die = True
        with pytest.raises(ReaderUnavailable):
            await reader.generate(["x"], PARAMS)
        await _until(lambda: reader.down is None)
        assert await reader.generate(["y"], PARAMS) == ["eager:y"]
        assert (await reader.stats())["engine"] == "eager"
        GATE.set()
        await _until(lambda: reader.upgrades == 2)
        assert await reader.generate(["z"], PARAMS) == ["compiled:z"]
        await _until(lambda: stages[2].closed)

    asyncio.run(scenario())
    assert [e.kind for e in stages] == ["eager", "compiled", "eager", "compiled"]
    assert stages[1].closed and reader.restarts == 1


def test_a_compiled_engine_begun_before_a_death_is_stopped_not_used(stages):
    from serve.app.reader import ReaderUnavailable

    reader = _reader()

    async def scenario():
        await _until(lambda: len(stages) == 2)
        stages[0].die = True  # the eager engine dies while the first compiled one is still starting
        with pytest.raises(ReaderUnavailable):
            await reader.generate(["x"], PARAMS)
        await _until(lambda: reader.down is None)
        GATE.set()  # both compiled engines finish starting: the restart's takes over
        await _until(lambda: reader.upgrades == 1 and stages[1].closed)
        assert await reader.generate(["y"], PARAMS) == ["compiled:y"]

    asyncio.run(scenario())
    assert [e.kind for e in stages] == ["eager", "compiled", "eager", "compiled"]
    assert stages[1].sent == [] and stages[3].sent == ["y"] and not stages[3].closed


def test_when_the_compiled_engine_does_not_start_the_eager_one_goes_on(stages, caplog):
    StageEngine.fail = True
    GATE.set()
    reader = _reader()

    async def scenario():
        await _until(lambda: any("did not start" in r.getMessage() for r in caplog.records))
        assert await reader.generate(["a"], PARAMS) == ["eager:a"]
        return await reader.stats()

    stats = asyncio.run(scenario())
    assert (stats["engine"], stats["upgrades"], stats["down"]) == ("eager", 0, None)
    [record] = [r for r in caplog.records if "did not start" in r.getMessage()]
    assert record.getMessage() == ("the compiled reader engine did not start (RuntimeError: compile failed); "
                                   "the eager one goes on answering")


@pytest.mark.parametrize("eager", [True, False])
def test_a_set_enforce_eager_is_that_engine_alone_also_after_a_restart(stages, eager):
    from serve.app.reader import ReaderUnavailable

    GATE.set()
    reader = _reader(enforce_eager=eager)

    async def scenario():
        stages[0].die = True
        with pytest.raises(ReaderUnavailable):
            await reader.generate(["x"], PARAMS)
        await _until(lambda: reader.down is None)
        return await reader.generate(["y"], PARAMS)

    kind = "eager" if eager else "compiled"
    assert asyncio.run(scenario()) == [f"{kind}:y"]
    assert [e.kind for e in stages] == [kind, kind] and reader.upgrades == 0


def test_a_lazy_reader_starts_its_engine_on_the_first_request(stages):
    """The Generator (only Generate uses it) holds no engine until a Generate comes; Health's
    stats say so meanwhile; the first request starts it eager, then the compiled one follows."""
    from serve.app.reader import Reader

    settings = config_from_dict({"cache": {"enabled": False}, "reader": {"device": "cpu", "enforce_eager": True},
                                 "service": {"engine_factory": f"{__name__}:make_stage_engine"}})
    r = Reader.func_or_class(settings, lazy=True)
    assert len(stages) == 1 and not stages[0].loaded
    assert "not started" in asyncio.run(r.stats())["engine"]
    assert asyncio.run(r.generate([PromptText("q")], PARAMS)) == ["eager:q"]
    assert stages[0].loaded and asyncio.run(r.stats())["engine"] == "eager"
    assert asyncio.run(r.generate([PromptText("p")], PARAMS)) == ["eager:p"] and len(stages) == 1


def test_a_request_cancelled_while_a_lazy_engine_starts_leaves_one_start_running(stages):
    """Its deadline passes while the engine starts: the start goes on, and the next request waits
    for that same start (never a second engine beside the first)."""
    from serve.app.reader import Reader

    settings = config_from_dict({"cache": {"enabled": False}, "reader": {"device": "cpu", "enforce_eager": False},
                                 "service": {"engine_factory": f"{__name__}:make_stage_engine"}})
    r = Reader.func_or_class(settings, lazy=True)
    loads = []
    real_load = stages[0].load
    stages[0].load = lambda: (loads.append(1), real_load())[1]

    async def scenario():
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(r.generate([PromptText("q")], PARAMS), 0.1)  # the compiled start is held
        second = asyncio.ensure_future(r.generate([PromptText("p")], PARAMS))
        await asyncio.sleep(0.1)
        GATE.set()
        return await second

    assert asyncio.run(scenario()) == ["compiled:p"]
    assert len(loads) == 1 and len(stages) == 1
