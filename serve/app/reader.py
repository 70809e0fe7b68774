"""The `Reader` deployment: ONE reader engine (vLLM's AsyncLLM, loaded inside this actor)
behind the disk cache; one deployment per served reader (Reader, Reader_1.5B, ...: each its
own engine, KV cache, prefix cache and cache keys), built from the settings' `reader`. Prompts arrive typed (`PromptText`, formatted here with the model's
chat template; `generate_counted` also returns their token counts and log-probabilities);
every distinct uncached prompt is one engine request that joins the running batch
(continuous batching, across retrievers and questions); a prompt already in flight is
awaited, not sent twice; a cancelled call aborts the requests only it waited for. An engine
that runs batches instead (`continuous = False`: test fakes) gets concurrent calls merged
into one batch per SamplingParams (serve/app/batching.py). A dead engine is reported and
restarted here; on CPU the engine that starts soonest answers first, and where that is eager a
compiled one takes over when it is up (serve/engine/vllm_engine.py, `service_stages`).
"""
from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import Counter
from dataclasses import replace
from typing import Sequence

from ray import serve

from retrievers.engine import ReaderEngine
from retrievers.reader import CachedReader, Generation, PromptText, SamplingParams
from retrievers.types import ReaderTokens
from serve.app import metrics
from serve.app.errors import ReaderUnavailable, engine_died, engine_down, one_line
from serve.app.placement import THIN, Placed
from serve.builder import make_engine
from serve.config import EorConfig
from serve.engine.room import one_start_at_a_time, room_for
from serve.engine.vllm_engine import VLLMConfig, service_stages

DRAIN_S = 120.0  # at most this long for the replaced engine's requests to finish before it is closed
log = logging.getLogger(__name__)


class CountingEngine(ReaderEngine):
    """Wraps the engine: records each batch's size and each request's tokens (the metrics and
    `Reader.stats`). The counts are the engine's own, carried by each output; an output
    without them (an engine that keeps none: test fakes) has its generated tokens counted by
    the engine's tokenizer and no prompt tokens."""

    def __init__(self, engine: ReaderEngine):
        self.engine = engine
        self.model_id = engine.model_id
        self.batches = 0
        self.batch_prompts = 0
        self.in_flight = 0  # requests in the engine now (a batch engine: its batch)
        self._lock = threading.Lock()  # the engine a request takes, against `swap` on another thread
        self._busy: Counter[ReaderEngine] = Counter()  # requests (batches) each engine has now

    def swap(self, engine: ReaderEngine) -> ReaderEngine:
        """Send every later request to `engine`; the engine it replaces (requests already in
        it finish there: `idle` says when)."""
        with self._lock:
            old, self.engine = self.engine, engine
        return old

    def idle(self, engine: ReaderEngine) -> bool:
        """No request is in `engine` (once swapped out, none comes back)."""
        with self._lock:
            return self._busy[engine] == 0

    def _take(self) -> ReaderEngine:
        with self._lock:
            engine = self.engine
            self._busy[engine] += 1
        return engine

    def _give_back(self, engine: ReaderEngine) -> None:
        with self._lock:
            self._busy[engine] -= 1
            if not self._busy[engine]:
                del self._busy[engine]

    @property
    def continuous(self) -> bool:
        return self.engine.continuous

    @property
    def reports_logprobs(self) -> bool:
        return self.engine.reports_logprobs

    @property
    def dead_error(self) -> BaseException | None:
        return self.engine.dead_error

    @property
    def unfinished_requests(self) -> int:
        return self.engine.unfinished_requests

    def format(self, prompt: PromptText) -> str:
        return self.engine.format(prompt)

    def token_ids(self, texts: Sequence[str]) -> list[list[int]]:
        return self.engine.token_ids(texts)

    def load(self) -> "CountingEngine":
        self.engine.load()
        return self

    def close(self) -> None:
        self.engine.close()

    def _record(self, out: Generation) -> None:
        t = out.tokens or ReaderTokens(0, len(self.engine.token_ids([out.text])[0]))
        self.add_tokens(t)
        metrics.inc("eor_reader_cached_tokens", t.cached)
        metrics.inc("eor_reader_tokens", t.generated)
        metrics.inc("eor_reader_prompt_tokens", t.prompt)

    def generate(self, prompts: Sequence[str], params: SamplingParams) -> list[Generation]:
        self.in_flight += len(prompts)  # a batch engine: the batch is what is in it now
        metrics.set_gauge("eor_reader_in_flight", self.in_flight)
        engine = self._take()
        try:
            outs = [Generation.of(o) for o in engine.generate(prompts, params)]
        finally:
            self._give_back(engine)
            self.in_flight -= len(prompts)
            metrics.set_gauge("eor_reader_in_flight", self.in_flight)
        self.batches += 1
        self.batch_prompts += len(prompts)
        metrics.observe("eor_reader_batch_size", len(prompts))
        for o in outs:
            self._record(o)
        return outs

    async def agenerate(self, prompt: str, params: SamplingParams) -> Generation:
        """One request of a continuously batching engine; the batch it joins is what is in
        flight when it arrives."""
        self.in_flight += 1
        metrics.set_gauge("eor_reader_in_flight", self.in_flight)
        metrics.observe("eor_reader_batch_size", self.in_flight)
        self.batches += 1
        self.batch_prompts += self.in_flight
        engine = self._take()
        try:
            out = await engine.agenerate(prompt, params)
        finally:
            self._give_back(engine)
            self.in_flight -= 1
            metrics.set_gauge("eor_reader_in_flight", self.in_flight)
        self._record(out)
        return out


@serve.deployment(ray_actor_options=THIN, max_ongoing_requests=256)
class Reader(Placed):
    """The shared reader engine. A dead engine (EngineDeadError: its core or worker process
    died) is noticed on the call that fails: that call and every call until the engine is
    back get ReaderUnavailable, `stats()` reports it (Health turns NOT_SERVING), and a new
    engine starts in this replica, with no operator. The engines run in `service_stages`
    order, at the start and after each restart: on CPU the compiled engine alone once its
    compile cache is warm; else an eager engine answers first, and a compiled one, started on
    a thread beside it where the machine has the memory (serve/engine/room.py), takes over when
    it is up; the eager one finishes what it holds and stops. Both run at once meanwhile: twice
    the engine's memory, and the CPU shared."""

    def __init__(self, settings: EorConfig, lazy: bool = False):
        """`lazy`: the engine starts on the first request, not here (the Generator: an engine
        only the bench's Generate uses should not hold memory and start time in every service)."""
        self.settings = settings  # its own engine's settings as `reader` (the builder's)
        from serve.builder import make_reader

        self.stages = service_stages(self.settings.reader)
        self.serving: VLLMConfig = self.stages.first  # the settings of the engine answering now
        self.counting = CountingEngine(self._new_engine(self.stages.first, start=not lazy))
        self.started = not lazy
        self._starting: asyncio.Future | None = None  # the lazy engine's start, made by the first request
        self.reader: CachedReader = make_reader(self.counting, self.settings)
        self.batcher = _batcher(self._run, self.settings)
        self.down: str | None = None  # why the engine is down; None: serving
        self.restarts = 0
        self.upgrades = 0  # times a compiled engine took over
        self._epoch = 0  # counts engine deaths: a compiled engine started before the last one is stale
        self._restart_lock = threading.Lock()
        self._in_flight: dict[str, asyncio.Future] = {}  # cache key -> its engine request
        self._waiters: dict[str, int] = {}  # cache key -> calls awaiting it
        if self.started:
            self._upgrade()

    def _new_engine(self, reader: VLLMConfig, start: bool = True) -> ReaderEngine:
        """An engine of these settings, started unless `start` is False (vLLM starts here, inside this actor)."""
        engine = make_engine(replace(self.settings, reader=reader), continuous=True)
        return engine.load() if start else engine

    async def _start_lazily(self) -> None:
        """A lazy Reader's first request starts its engine, off the event loop (Health's stats
        still answer meanwhile); the requests that arrive meanwhile wait for it."""
        if self.started:
            return
        if self._starting is None or (self._starting.done() and self._starting.exception() is not None):
            self._starting = asyncio.ensure_future(self._start_once())  # one start; a failed one is retried
        # shielded: a request cancelled meanwhile (its deadline) leaves the start running, never a second one
        await asyncio.shield(self._starting)

    async def _start_once(self) -> None:
        t = time.monotonic()
        await asyncio.to_thread(self.counting.load)
        self.started = True
        log.warning("the %s engine started on its first request (%.0f s)", _kind(self.serving), time.monotonic() - t)
        self._upgrade()

    def _upgrade(self) -> None:
        """Start the next stage's engine on its own thread, if the stages have one."""
        if self.stages.then is not None:
            threading.Thread(target=self._take_over, args=(self.stages.then, self._epoch),
                             name="engine-upgrade", daemon=True).start()

    def _take_over(self, then: VLLMConfig, epoch: int) -> None:
        """Start `then`'s engine; unless an engine died meanwhile (its restart starts its own),
        send every later request to it, then stop the one it replaced once that is idle."""
        with one_start_at_a_time():  # another reader's upgrade on this machine first (room.py)
            fits, why = room_for(then)
            if not fits:
                log.warning("the %s reader engine is not started beside the %s one: %s; the %s one goes on "
                            "answering", _kind(then), _kind(self.serving), why, _kind(self.serving))
                return
            t = time.monotonic()
            try:
                engine = self._new_engine(then)
            except Exception as exc:
                log.warning("the %s reader engine did not start (%s); the %s one goes on answering",
                            _kind(then), one_line(exc), _kind(self.serving))
                return
            with self._restart_lock:
                current = epoch == self._epoch and self.down is None
                if current:
                    old, self.serving = self.counting.swap(engine), then
                    self.upgrades += 1
            if not current:
                engine.close()
                return
            log.warning("the %s reader engine answers from now on (started in %.0f s beside the %s one)",
                        _kind(then), time.monotonic() - t, _kind(self.stages.first))
            drained = time.monotonic() + DRAIN_S  # a stuck request must not hold the machine's lock for ever
            while not self.counting.idle(old) and time.monotonic() < drained:
                time.sleep(0.2)
            old.close()

    def _restart(self, old: ReaderEngine) -> None:
        """Replace the dead engine (runs on its own thread; calls meanwhile get ReaderUnavailable)."""
        t = time.monotonic()
        try:
            old.close()
        except Exception:  # the old engine is dead: closing it is best effort
            log.warning("closing the dead reader engine failed", exc_info=True)
        closed = time.monotonic()
        while True:
            try:
                engine = self._new_engine(self.stages.first)
                break
            except Exception as exc:
                log.error("reader engine restart failed (%s); trying again in 10 s", one_line(exc))
                time.sleep(10)
        self.counting.swap(engine)  # the dead one holds no request that can still finish
        self.serving = self.stages.first
        self.restarts += 1
        self.down = None
        log.warning("reader engine restarted in %.0f s (%d restarts; closing the dead one %.0f s, starting "
                    "the %s one %.0f s)", time.monotonic() - t, self.restarts, closed - t,
                    _kind(self.stages.first), time.monotonic() - closed)
        self._upgrade()

    def _mark_down(self, exc: BaseException) -> str:
        """Record why the engine is down and start its replacement (once); the message."""
        with self._restart_lock:
            if self.down is not None:
                return self.down
            self.down = why = engine_down(exc)
            self._epoch += 1
            log.error("%s", why, exc_info=exc)  # the log keeps vLLM's own error and its traceback
            threading.Thread(target=self._restart, args=(self.counting.engine,), name="engine-restart",
                             daemon=True).start()
            return why

    def _run(self, texts: list[str], params: SamplingParams, n_calls: int) -> list[Generation]:
        if self.down is not None:
            raise ReaderUnavailable(self.down)
        before = (self.reader.stats.prompts, self.reader.stats.cache_hits)
        try:
            outs = self.reader.generate_full(texts, params)
        except Exception as exc:
            if engine_died(exc):
                raise ReaderUnavailable(self._mark_down(exc)) from None
            raise
        metrics.inc("eor_reader_prompts", self.reader.stats.prompts - before[0])
        metrics.inc("eor_reader_cache_hits", self.reader.stats.cache_hits - before[1])
        metrics.observe("eor_reader_merged_calls", n_calls)
        return outs

    async def generate(self, prompts: list[PromptText | str], params: SamplingParams) -> list[str]:
        """Typed prompts are put in the model's format here (chat template or completion); a
        plain string is sent as it is (`Generate` with raw = true)."""
        return [g.text for g in await self._complete(self._formatted(prompts), params)]

    async def generate_counted(self, prompts: list[PromptText], params: SamplingParams) -> list[Generation]:
        """Outputs with their log-probabilities and what each cost (the engine's token counts)."""
        texts = self._formatted(prompts)
        return self.reader.counted(texts, params, await self._complete(texts, params))

    async def _complete(self, texts: list[str], params: SamplingParams) -> list[Generation]:
        await self._start_lazily()
        if self.counting.continuous:
            return await self._generate_continuous(texts, params)
        return await self.batcher.submit(texts, params)

    def _formatted(self, prompts: Sequence[PromptText | str]) -> list[str]:
        return [self.reader.engine.format(p) if isinstance(p, PromptText) else p for p in prompts]

    async def _generate_continuous(self, texts: list[str], params: SamplingParams) -> list[Generation]:
        """The disk cache, then one engine request per distinct uncached prompt. A prompt
        already in flight (another retriever, another question) is awaited, not sent again.
        When this call is cancelled (its deadline passed, its client went away), the requests
        no other call waits for are aborted in the engine."""
        if self.down is not None:
            raise ReaderUnavailable(self.down)
        reader = self.reader
        keys, known, todo = reader.lookup(texts, params)
        metrics.inc("eor_reader_prompts", len(keys))
        metrics.inc("eor_reader_cache_hits", sum(1 for k in keys if k in known))
        if todo:
            reader.stats.calls += 1
        tasks = {}
        for k, t in todo.items():
            task = self._in_flight.get(k)
            if task is None:
                task = self._in_flight[k] = asyncio.ensure_future(self._request(k, t, params))
                task.add_done_callback(lambda done, k=k: self._in_flight.pop(k, None)
                                       if self._in_flight.get(k) is done else None)
            self._waiters[k] = self._waiters.get(k, 0) + 1
            tasks[k] = task
        try:
            outs = await asyncio.gather(*(asyncio.shield(t) for t in tasks.values()))
        except BaseException as exc:
            if not isinstance(exc, asyncio.CancelledError) and engine_died(exc):
                raise ReaderUnavailable(self._mark_down(exc)) from None
            raise
        finally:
            for k, task in tasks.items():
                self._waiters[k] -= 1
                if self._waiters[k] <= 0:
                    del self._waiters[k]
                    if not task.done():
                        task.cancel()  # nobody waits for it any more: abort it in the engine
                        if self._in_flight.get(k) is task:
                            del self._in_flight[k]  # a later caller sends it afresh, not into the abort
        fresh = dict(zip(tasks, outs))
        return [known[k] if k in known else fresh[k] for k in keys]

    async def _request(self, key: str, text: str, params: SamplingParams) -> Generation:
        out = (await self.counting.agenerate(text, params)).stripped()
        self.reader.stats.engine_prompts += 1
        if self.reader.cache:
            self.reader.cache.put_many({key: out})
        return out

    async def stats(self) -> dict:
        """Counters, and whether the engine is down: vLLM's own monitor notices a dead engine
        core with no request running, so an idle service's Health turns NOT_SERVING too."""
        dead = self.counting.dead_error
        down = self._mark_down(dead) if dead is not None and self.down is None else self.down
        st = self.reader.stats
        c = self.counting
        return {"model": self.reader.model_id, "prompts": st.prompts, "cache_hits": st.cache_hits,
                "engine_calls": c.batches, "engine_prompts": c.batch_prompts,
                "mean_batch": c.batch_prompts / c.batches if c.batches else 0.0,
                "prompt_tokens": c.prompt_tokens, "generated_tokens": c.generated_tokens,
                "cached_tokens": c.cached_tokens, "down": down, "restarts": self.restarts,
                "in_flight": c.in_flight, "upgrades": self.upgrades,
                "engine": _kind(self.serving) if self.started else "not started (starts on the first request)"}

    async def queue(self) -> dict:
        """What the ingress reads each round, cheaply: requests in the engine (running + waiting: the
        load signal) and why it is down or restarting (None: up); serve/app/reader_watch.py."""
        dead = self.counting.dead_error
        down = self._mark_down(dead) if dead is not None and self.down is None else self.down
        return {"in_flight": self.counting.in_flight, "down": down}

    async def model_id(self) -> str:
        return self.reader.model_id


def _kind(settings: VLLMConfig) -> str:
    return "eager" if settings.enforce_eager else "compiled"


def _batcher(fn, s: EorConfig):
    from serve.app.batching import MergingBatcher

    return MergingBatcher(fn, s.service.reader_batch_wait_s, s.service.reader_max_batch)
