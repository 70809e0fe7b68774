"""The Ray Serve deployments behind the gRPC ingress (serve/app/ingress.py):

- `Reader`: ONE reader engine (vLLM's AsyncLLM; loaded inside this actor) behind the disk
  cache. Prompts arrive typed (`PromptText`, formatted here with the model's chat template;
  `generate_counted` also returns their token counts); every distinct uncached prompt is one
  engine request that joins the running batch (continuous batching, across retrievers and
  questions); a prompt already in flight is
  awaited, not sent twice; a cancelled call aborts the requests only it waited for. An
  engine without `agenerate` (test fakes) gets concurrent calls merged into one batch per
  SamplingParams instead (serve/app/batching.py).
- `Source`: one heavy knowledge source, loaded once (Wiki: encoder + faiss, and `encode()`
  for @RR; SE: Lucene or the HTTP client), shared by every retriever group.
- `RetrieverGroup`: a thin actor (no torch) running the ordinary `RetrieverPool` over its
  specs (one, or the whole pool: `service.retriever_actors`) with remote sources, encoder and
  reader (serve/app/handles.py).
- `Voter`: the EoR voter; its weights come from `user_config` (live updates, no restart).

Every deployment takes the application settings as a plain dict (EorConfig.to_dict()).
"""
from __future__ import annotations

import asyncio
import importlib
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any, Sequence

from ray import serve

from retrievers.reader import CachedReader, Counted, Generation, PromptText, ReaderEngine, SamplingParams
from retrievers.types import Passage, QuestionResult
from serve.app import metrics
from serve.app.handles import CallDeadline, RemoteEncoder, RemoteReader, RemoteSource, StageClock
from serve.config import EorConfig, config_from_dict

log = logging.getLogger(__name__)

THIN = {"num_cpus": 0}


def import_factory(path: str) -> Any:
    module, _, attr = path.partition(":")
    if not module or not attr:
        raise ValueError(f"expected 'module:callable', got {path!r}")
    return getattr(importlib.import_module(module), attr)


def make_engine(settings: EorConfig) -> ReaderEngine:
    if settings.service.engine_factory:
        return import_factory(settings.service.engine_factory)(settings)
    from serve.engine.vllm_engine import AsyncVLLMEngine

    return AsyncVLLMEngine(settings.reader)  # continuous batching: every prompt joins the running batch


def make_sources(settings: EorConfig) -> tuple[dict, Any]:
    if settings.service.sources_factory:
        return import_factory(settings.service.sources_factory)(settings)
    from retrievers.encoder import Encoder
    from serve.builder import make_sources as make_index_sources

    encoder = Encoder(settings.index.encoder)
    return make_index_sources(settings, encoder), encoder


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
        self.in_flight = 0  # continuous batching: requests in the engine now

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
        outs = [Generation.of(o) for o in self.engine.generate(prompts, params)]
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


class ReaderUnavailable(RuntimeError):
    """The reader engine is down (and restarting): callers get UNAVAILABLE with this one line."""


def engine_died(exc: BaseException) -> bool:
    """vLLM's own signal that its engine core is gone (EngineDeadError; a worker killed under
    it surfaces the same way), or the pipe to it broke. EngineGenerateError is not: vLLM calls
    it recoverable (one bad request), and it must not restart the engine for everyone."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:  # the error itself, or what it wraps
        seen.add(id(exc))
        if {t.__name__ for t in type(exc).__mro__} & {"EngineDeadError", "BrokenPipeError", "ConnectionResetError"}:
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def one_line(exc: BaseException) -> str:
    """A message a user can read: the first line, no terminal colour codes, no traceback."""
    import re

    text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc)).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".strip()[:300]


@serve.deployment(ray_actor_options=THIN, max_ongoing_requests=256)
class Reader:
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
        engine = make_engine(self.settings)
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


@serve.deployment(ray_actor_options=THIN, max_ongoing_requests=64)
class Source:
    """One knowledge source, loaded once; Wiki also serves the @RR encoder."""

    def __init__(self, settings: dict, name: str):
        sources, encoder = make_sources(config_from_dict(settings))
        self.name = name
        self.source = sources[name].load()
        self.encoder = encoder.load() if hasattr(encoder, "load") else encoder
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"source-{name}")

    async def search(self, queries: list[str], k: int):
        return await asyncio.get_running_loop().run_in_executor(self._thread, self.source.search, queries, k)

    async def encode(self, texts: list[str]):
        return await asyncio.get_running_loop().run_in_executor(self._thread, self.encoder.encode, texts)

    async def ping(self) -> str:
        return self.name


@dataclass(frozen=True)
class GroupRun:
    """A retriever group's answer to one call: the results and the seconds it waited on the reader."""

    results: list[QuestionResult]
    reader_s: float = 0.0
    shared: list[Any] | None = None  # the questions' QuestionWork, as this run extended it


GROUP_CONCURRENCY = 32  # Asks one retriever actor runs at once (each a thread waiting on remote calls)


@serve.deployment(ray_actor_options=THIN, max_ongoing_requests=GROUP_CONCURRENCY)
class RetrieverGroup:
    """A few retriever specs in one thin actor, run by the ordinary staged RetrieverPool."""

    def __init__(self, settings: dict, specs: list[str], wiki: Any, se: Any, reader: Any):
        from retrievers.pool import RetrieverPool

        s = config_from_dict(settings)
        t = s.service.retriever_timeout_s
        sources = {}
        if wiki is not None:
            sources["Wiki"] = RemoteSource("Wiki", wiki, t)
        if se is not None:
            sources["SE"] = RemoteSource("SE", se, t)
        self.specs = list(specs)
        self.config = replace(s.pool, specs=tuple(specs))
        encoder = RemoteEncoder(wiki, t) if wiki is not None else None
        reader_client = RemoteReader(reader, timeout_s=t)  # the Reader formats, deduplicates and caches
        self._pools = {0: RetrieverPool(self.config, sources, encoder, reader_client)}
        self._make = lambda k: RetrieverPool(replace(self.config, default_k=k), sources, encoder, reader_client)
        # one thread per ongoing request: asyncio's default executor has min(32, cores + 4), and with
        # one actor for the whole pool every concurrent Ask's stage runs here
        self._threads = ThreadPoolExecutor(max_workers=GROUP_CONCURRENCY, thread_name_prefix="retrievers")

    def _pool(self, top_k: int):
        if top_k not in self._pools:
            self._pools[top_k] = self._make(top_k)
        return self._pools[top_k]

    def _run(self, questions: list[str], specs: list[str], top_k: int,
             documents: Sequence[Sequence[Passage]] | None, timeout_s: float | None = None,
             shared: list | None = None, plan_specs: list[str] | None = None) -> GroupRun:
        StageClock.reset()
        CallDeadline.set(timeout_s)
        t = time.perf_counter()
        results = self._pool(top_k).run(questions, specs, documents, shared=shared, plan_specs=plan_specs)
        spent = StageClock.spent()
        for stage in ("retrieve", "read"):
            metrics.observe("eor_stage_seconds", spent.get(stage, 0.0), stage=stage)
        metrics.observe("eor_stage_seconds", time.perf_counter() - t, stage="group")  # errors: counted by the ingress
        return GroupRun(results, spent.get("read", 0.0), shared)

    async def run(self, questions: list[str], specs: list[str], top_k: int = 0,
                  documents: Sequence[Sequence[Passage]] | None = None, timeout_s: float | None = None,
                  shared: list | None = None, plan_specs: list[str] | None = None) -> GroupRun:
        """`timeout_s`: the request's time left; no source or reader call outlives it. `shared`:
        each question's QuestionWork from its earlier stages (searches, PK, reranking), reused."""
        return await asyncio.get_running_loop().run_in_executor(
            self._threads, self._run, questions, specs, top_k, documents, timeout_s, shared, plan_specs)

    async def ping(self) -> list[str]:
        return self.specs


@serve.deployment(ray_actor_options=THIN, max_ongoing_requests=64)
class Voter:
    """EoR voting over any subset of the pool, and the cascade the ingress runs.

    Which voter (voter/question_vote.py: choose_voter): a pushed one (user_config {"weights": dict},
    from `eor fit --push`; persisted under $EOR_HOME so it survives a restart), else
    user_config {"weights_file": PATH} or `voter.weights` ("equal": equal weights), else the
    last pushed voter on disk, else the shipped voter."""

    def __init__(self, settings: dict, reader: Any):
        self.settings = config_from_dict(settings)
        self.pool = list(self.settings.pool.specs)
        self.reader_client = RemoteReader(reader, timeout_s=self.settings.service.retriever_timeout_s)
        self.reader_model = self.settings.reader.model
        self.choice = None
        self._metrics = None
        self._set_weights(None, self.settings.voter.weights)

    def _set_weights(self, weights: dict | None, path: str) -> None:
        from serve.paths import pushed_voter_path
        from voter.question_vote import VoterChoice, choose_voter, metric_options
        from voter.weights_io import SavedWeights, check_compatible, save_weights

        if weights:
            saved = SavedWeights.from_dict(weights)
            check_compatible(saved, pool=self.pool)
            choice = VoterChoice(saved, metric_options(saved), "pushed")
            choice.describe()  # everything that can fail, before it is kept
            save_weights(pushed_voter_path(), saved)  # survives a restart
        elif path == "equal":
            choice = choose_voter(self.pool, self.reader_model, equal=True,
                                  metrics=",".join(self.settings.voter.metrics), pooling=self.settings.voter.pooling)
        else:
            try:
                choice = choose_voter(self.pool, self.reader_model, weights=path or None,
                                      fallback=str(pushed_voter_path()))
            except ValueError as exc:
                if path:  # a voter file named in the config must load
                    raise
                log.error("the last pushed voter (%s) does not fit this service: %s; using the shipped voter",
                          pushed_voter_path(), exc)
                choice = choose_voter(self.pool, self.reader_model)
        for w in choice.warnings:
            log.warning("voter: %s", w)
        self.choice, self._metrics = choice, None
        self._metrics_for(choice)  # the metric models load now, not in the first Ask's vote (its deadline)
        log.info("voter: %s", choice.describe())

    def reconfigure(self, user_config: dict) -> None:
        user_config = user_config or {}
        self._set_weights(user_config.get("weights"), user_config.get("weights_file")
                          or self.settings.voter.weights)

    def _metrics_for(self, choice):
        """The similarity metrics of `choice`, built and loaded once per voter."""
        from voter.question_vote import build_metrics

        metrics = self._metrics
        if metrics is None or metrics[0] is not choice:
            built = build_metrics(choice.options, self.reader_client)
            for m in built:
                m.load()
            metrics = self._metrics = (choice, built)
        return metrics[1]

    def _vote(self, results: list[QuestionResult]):
        from voter.question_vote import vote_with_stats

        choice = self.choice  # one voter for the whole vote, even during a push
        return vote_with_stats(results, choice.saved, self._metrics_for(choice))

    async def vote_with_stats(self, results: list[QuestionResult]):
        return await asyncio.to_thread(self._vote, results)

    async def vote(self, results: list[QuestionResult]):
        return (await self.vote_with_stats(results))[0]

    async def cascade(self):
        return self.choice.saved.stages

    async def weights_source(self) -> str:
        return self.choice.describe()
