"""The `Reader` deployment: ONE reader engine (vLLM's AsyncLLM, loaded inside this actor)
behind the disk cache. Prompts arrive typed (`PromptText`, formatted here with the model's
chat template; `generate_counted` also returns their token counts and log-probabilities);
every distinct uncached prompt is one engine request that joins the running batch
(continuous batching, across retrievers and questions); a prompt already in flight is
awaited, not sent twice; a cancelled call aborts the requests only it waited for. An engine
without `agenerate` (test fakes) gets concurrent calls merged into one batch per
SamplingParams instead (serve/app/batching.py). A dead engine is reported and restarted here.
"""
from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Sequence

from ray import serve

from retrievers.reader import CachedReader, Counted, Generation, PromptText, ReaderEngine, SamplingParams
from serve.app import metrics
from serve.app.errors import ReaderUnavailable, engine_died, one_line
from serve.app.placement import THIN, Placed
from serve.builder import make_engine
from serve.config import EorConfig, config_from_dict

log = logging.getLogger(__name__)



class CountingEngine:
    """Wraps the engine: records each engine batch's size, prompt and generated tokens.

    Token counts come from the engine's own counters when it keeps them (VLLMEngine:
    `prompt_tokens`, `generated_tokens`); otherwise generated tokens are re-tokenized and
    prompt tokens are not counted."""

    def __init__(self, engine: ReaderEngine):
        self.engine = engine
        self.model_id = engine.model_id
        self.batches = 0
        self.batch_prompts = 0
        self.prompt_tokens = 0
        self.generated_tokens = 0
        self.cached_tokens = 0
        self.in_flight = 0  # requests in the engine now (a batch engine: its batch)

    @property
    def continuous(self) -> bool:
        return hasattr(self.engine, "agenerate")

    def format(self, prompt):
        return self.engine.format(prompt)

    @property
    def token_ids(self):
        """The engine's tokenizer (`CachedReader.token_ids` uses it when there is one)."""
        return getattr(self.engine, "token_ids", None)

    def _tokens(self, outs: Sequence[str]) -> int:
        tok = getattr(self.engine, "tokenizer", None)
        try:
            return sum(len(tok.encode(o, add_special_tokens=False)) for o in outs) if tok else \
                sum(len(o.split()) for o in outs)
        except Exception:
            return sum(len(o.split()) for o in outs)

    def generate(self, prompts: Sequence[str], params: SamplingParams) -> list[Generation]:
        before = (getattr(self.engine, "prompt_tokens", None), getattr(self.engine, "generated_tokens", None))
        cached_before = getattr(self.engine, "cached_tokens", 0)
        self.in_flight += len(prompts)  # a batch engine: the batch is what is in it now
        metrics.set_gauge("eor_reader_in_flight", self.in_flight)
        try:
            outs = [Generation.of(o) for o in self.engine.generate(prompts, params)]
        finally:
            self.in_flight -= len(prompts)
            metrics.set_gauge("eor_reader_in_flight", self.in_flight)
        cached = getattr(self.engine, "cached_tokens", 0) - cached_before
        self.cached_tokens += cached
        metrics.inc("eor_reader_cached_tokens", cached)
        self.batches += 1
        self.batch_prompts += len(prompts)
        prompt_tokens = self.engine.prompt_tokens - before[0] if before[0] is not None else 0
        generated = (self.engine.generated_tokens - before[1] if before[1] is not None
                     else self._tokens([o.text for o in outs]))
        self.prompt_tokens += prompt_tokens
        self.generated_tokens += generated
        metrics.observe("eor_reader_batch_size", len(prompts))
        metrics.inc("eor_reader_tokens", generated)
        metrics.inc("eor_reader_prompt_tokens", prompt_tokens)
        return outs

    async def agenerate(self, prompt: str, params: SamplingParams) -> Generation:
        """One request of a continuously batching engine; the batch it joins is what is in
        flight when it arrives."""
        self.in_flight += 1
        metrics.set_gauge("eor_reader_in_flight", self.in_flight)
        metrics.observe("eor_reader_batch_size", self.in_flight)
        self.batches += 1
        self.batch_prompts += self.in_flight
        try:
            out = await self.engine.agenerate(prompt, params)
        finally:
            self.in_flight -= 1
            metrics.set_gauge("eor_reader_in_flight", self.in_flight)
        self.prompt_tokens += out.prompt_tokens
        self.generated_tokens += out.generated_tokens
        self.cached_tokens += out.cached_tokens
        metrics.inc("eor_reader_cached_tokens", out.cached_tokens)
        metrics.inc("eor_reader_tokens", out.generated_tokens)
        metrics.inc("eor_reader_prompt_tokens", out.prompt_tokens)
        return Generation(out.text, out.logprobs)


@serve.deployment(ray_actor_options=THIN, max_ongoing_requests=256)
class Reader(Placed):
    """The shared reader engine. A dead engine (EngineDeadError: its core or worker process
    died) is noticed on the call that fails: that call and every call until the engine is
    back get ReaderUnavailable, `stats()` reports it (Health turns NOT_SERVING), and a new
    engine starts in this replica, with no operator."""

    def __init__(self, settings: dict):
        self.settings = config_from_dict(settings)
        from serve.builder import make_reader

        self.counting = CountingEngine(self._new_engine())
        self.reader: CachedReader = make_reader(self.counting, self.settings)
        self.batcher = _batcher(self._run, self.settings)
        self.down: str | None = None  # why the engine is down; None: serving
        self.restarts = 0
        self._restart_lock = threading.Lock()
        self._in_flight: dict[str, asyncio.Future] = {}  # cache key -> its engine request
        self._waiters: dict[str, int] = {}  # cache key -> calls awaiting it

    def _new_engine(self) -> ReaderEngine:
        engine = make_engine(self.settings, continuous=True)
        if hasattr(engine, "load"):
            engine.load()  # vLLM starts here, inside this actor
        return engine

    def _restart(self, old: ReaderEngine) -> None:
        """Replace the dead engine (runs on its own thread; calls meanwhile get ReaderUnavailable)."""
        try:
            if hasattr(old, "close"):
                old.close()
        except Exception:  # the old engine is dead: closing it is best effort
            log.warning("closing the dead reader engine failed", exc_info=True)
        while True:
            try:
                self.counting.engine = self._new_engine()
                break
            except Exception as exc:
                log.error("reader engine restart failed (%s); trying again in 10 s", one_line(exc))
                time.sleep(10)
        self.restarts += 1
        self.down = None
        log.warning("reader engine restarted (%d restarts)", self.restarts)

    def _mark_down(self, exc: BaseException) -> str:
        """Record why the engine is down and start its replacement (once); the message."""
        with self._restart_lock:
            if self.down is not None:
                return self.down
            self.down = why = f"reader engine down ({one_line(exc)}); restarting"
            log.error(why)
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

    async def generate_counted(self, prompts: list[PromptText], params: SamplingParams) -> list[Counted]:
        """Output, prompt token ids (the model's tokenizer), generated tokens and log-probabilities per prompt."""
        texts = self._formatted(prompts)
        return self.reader.counted(texts, await self._complete(texts, params))

    async def _complete(self, texts: list[str], params: SamplingParams) -> list[Generation]:
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
        dead = getattr(self.counting.engine, "dead_error", None)
        down = self._mark_down(dead) if dead is not None and self.down is None else self.down
        st = self.reader.stats
        c = self.counting
        return {"model": self.reader.model_id, "prompts": st.prompts, "cache_hits": st.cache_hits,
                "engine_calls": c.batches, "engine_prompts": c.batch_prompts,
                "mean_batch": c.batch_prompts / c.batches if c.batches else 0.0,
                "prompt_tokens": c.prompt_tokens, "generated_tokens": c.generated_tokens,
                "cached_tokens": c.cached_tokens, "down": down, "restarts": self.restarts,
                "in_flight": c.in_flight}

    async def model_id(self) -> str:
        return self.reader.model_id


def _batcher(fn, s: EorConfig):
    from serve.app.batching import MergingBatcher

    return MergingBatcher(fn, s.service.reader_batch_wait_s, s.service.reader_max_batch)
