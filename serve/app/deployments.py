"""The Ray Serve deployments behind the gRPC ingress (serve/app/ingress.py), beside the shared
`Reader` (serve/app/reader.py):

- `Source`: one heavy knowledge source, loaded once (Wiki: encoder + faiss; SE: Lucene or the
  HTTP client; one per `index.sources` line), shared by every retriever group; the first
  configured one's `encode()` is the @RR encoder.
- `RetrieverGroup`: a thin actor (no torch) running the ordinary `RetrieverPool` over its
  specs (one, or the whole pool: `service.retriever_actors`) with remote sources, encoder and
  readers (serve/app/handles.py; a member `SPEC~NAME` reads with the Reader_<NAME> deployment):
  one `run(RoundInput) -> RoundRun` per round of an Ask.
- `Voter`: the EoR voter; its weights come from `user_config` (live updates, no restart).

Every deployment is handed the application's config as the builder validated it (EorConfig).
"""
from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

from ray import serve

from retrievers.groundwork import RoundRun
from retrievers.sources.knn import search_index
from retrievers.types import QuestionResult
from serve.app import metrics
from serve.app.handles import (RemoteEncoder, RemoteIndexShards, RemoteReader, RemoteSource, StageClock,
                               working_for)
from serve.app.placement import THIN, Placed
from serve.builder import (current_generation, encoding_source, generation_of, make_service_sources, make_sources,
                           source_shapes)
from serve.config import EorConfig
from serve.config_readers import reader_models, used_readers
from serve.deadline import Deadline
from serve.ensemble import VoteDeadline
from serve.orchestrator import RoundInput

log = logging.getLogger(__name__)



@serve.deployment(ray_actor_options=THIN, max_ongoing_requests=64)
class IndexShard(Placed):
    """One faiss file of a dense index split into several (`index_shards`), placed by Ray: the
    Source encodes the query, asks every shard and merges (handles.py: RemoteIndexShards). A
    merged generation's new base is loaded beside the one serving (`load_base`) before the Source
    asks for it; each search names the base it means."""

    KEPT_BASES = 2  # the base serving and the one coming

    def __init__(self, settings: EorConfig, name: str, shard: int):
        self._name, self._shard = name, shard
        source = make_service_sources(settings)[0][name]
        self._index_settings = source.settings  # the search knob the config sets, for every base
        self._bases: dict[str, Any] = {}
        self._load(source.index_dir)
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"shard-{name}-{shard}")

    def _load(self, index_dir: str):
        from pathlib import Path

        from retrievers.sources.dense import load_index_shards, read_meta

        if index_dir not in self._bases:
            path = Path(index_dir)
            (self._bases[index_dir],) = load_index_shards(path, read_meta(path, self._name), self._index_settings,
                                                          only=[self._shard])
            for old in list(self._bases)[:-self.KEPT_BASES]:
                del self._bases[old]
        return self._bases[index_dir]

    async def load_base(self, index_dir: str) -> None:
        await asyncio.get_running_loop().run_in_executor(self._thread, self._load, index_dir)

    async def search(self, vectors, k: int, index_dir: str = ""):
        index_dir = index_dir or next(iter(self._bases))
        index = self._bases.get(index_dir)
        if index is None:  # a base not announced by load_base: loaded now (the search waits)
            return await asyncio.get_running_loop().run_in_executor(
                self._thread, lambda: search_index(self._load(index_dir), vectors, k))
        return await asyncio.get_running_loop().run_in_executor(self._thread, search_index, index, vectors, k)


@serve.deployment(ray_actor_options=THIN, max_ongoing_requests=64)
class Source(Placed):
    """One knowledge source, loaded once; the encoding source (`encoding_source`) also serves @RR's
    encoder. A dense index split into shards is searched through their actors (`shards`)."""

    def __init__(self, settings: EorConfig, name: str, shards: tuple = ()):
        sources, encoder = make_service_sources(settings)
        self.name = name
        self._config, self._encoder, self._shards = settings, encoder, shards
        self.source = self._ready(sources[name])
        self.generation = generation_of(settings)
        self._moving = False
        self._checked = 0.0
        self.encoder = None
        if name == encoding_source(settings.index.sources):  # the one RetrieverGroup asks to encode (RemoteEncoder)
            self.encoder = encoder.load() if hasattr(encoder, "load") else encoder
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"source-{name}")
        self._mover = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"generation-{name}")

    def _ready(self, source, moving: bool = False):
        if self._shards and source.index_shards(source.index_dir) == len(self._shards):
            if moving:  # every shard holds the new base before a search asks for it (at start they load it)
                for pending in [h.load_base.remote(source.index_dir) for h in self._shards]:
                    pending.result()
            source.use_indexes([RemoteIndexShards(self._shards, source.index_dir)])
        return source.load()  # shards of another count than the deployments' (a merge): searched here

    def _watch(self) -> None:
        """At most once a second: a newer published generation is loaded beside the one serving
        (which answers meanwhile), then swapped in: no request fails across the move."""
        now = time.monotonic()
        if self._moving or now - self._checked < 1.0:
            return
        self._checked = now
        metrics.set_gauge("eor_index_generation", self.generation, source=self.name)  # from the request path
        if self._config.service.sources_factory:  # sources of a factory's own: no generations
            return
        if generation_of(self._config) != self.generation:
            self._moving = True
            self._mover.submit(self._move)

    def _move(self) -> None:
        try:
            gen = current_generation(self._config)
            source = self._ready(make_sources(self._config, self._encoder, generation=gen)[self.name], moving=True)
            self.source, self.generation = source, gen.number  # one assignment each: a search sees old or new
            metrics.set_gauge("eor_index_generation", gen.number, source=self.name)
            log.info("eor: source %s serves index generation %d", self.name, gen.number)
        except Exception:
            log.exception("eor: source %s could not load the new index generation; it serves %d still",
                          self.name, self.generation)
        finally:
            self._moving = False

    async def search(self, queries: list[str], k: int):
        self._watch()
        source = self.source
        return await asyncio.get_running_loop().run_in_executor(self._thread, source.search, queries, k)

    async def generation_served(self) -> int:
        self._watch()  # Health's poll moves an idle source too
        return self.generation

    async def encode(self, texts: list[str]):
        if self.encoder is None:
            raise RuntimeError(f"source {self.name} holds no encoder: @RR encodes with the first configured source")
        return await asyncio.get_running_loop().run_in_executor(self._thread, self.encoder.encode, texts)

    async def ping(self) -> str:
        return self.name


RECENT_VOTERS = 4  # voters kept for Asks that began before a push


@dataclass(frozen=True)
class VoterPlan:
    """The voter one Ask runs with (Voter.plan)."""

    key: str
    cascade: Any  # voter.cascade.Cascade
    label: str
    degraded: str = ""  # the single-reader fallback of the voter, run while a reader is down: why


GROUP_CONCURRENCY = 32  # Asks one retriever actor runs at once (each a thread waiting on remote calls)


@serve.deployment(ray_actor_options=THIN, max_ongoing_requests=GROUP_CONCURRENCY)
class RetrieverGroup(Placed):
    """A few retriever specs in one thin actor, run by the ordinary staged RetrieverPool."""

    def __init__(self, settings: EorConfig, specs: list[str], handles: dict[str, Any], reader: Any,
                 readers: dict[str, Any] | None = None):
        """`handles`: name -> Source deployment, in the configured order; `reader`: the default
        reader's deployment, `readers`: the other readers' (Reader_<name>) by the name specs give."""
        from retrievers.pool import RetrieverPool

        s = settings
        t = s.service.ask_deadline_s  # the longest a call waits; an Ask's Deadline is sooner
        shapes = source_shapes(s)
        sources = {name: RemoteSource(name, h, t, shapes[name]) for name, h in handles.items()}
        self.specs = list(specs)
        self.config = replace(s.pool, specs=tuple(specs))
        encoding = encoding_source(s.index.sources)
        encoder = RemoteEncoder(handles[encoding], t) if encoding in handles else None
        # the Readers format, deduplicate and cache; each of this group's members reads with its own
        default = RemoteReader(reader, timeout_s=t)
        others = {name: RemoteReader((readers or {})[name], timeout_s=t) for name in used_readers(s, specs) if name}
        self._pools = {0: RetrieverPool(self.config, sources, encoder, default, others)}
        self._make = lambda k: RetrieverPool(replace(self.config, default_k=k), sources, encoder, default, others)
        # one thread per ongoing request: asyncio's default executor has min(32, cores + 4), and with
        # one actor for the whole pool every concurrent Ask's stage runs here
        self._threads = ThreadPoolExecutor(max_workers=GROUP_CONCURRENCY, thread_name_prefix="retrievers")

    def _pool(self, top_k: int):
        if top_k not in self._pools:
            self._pools[top_k] = self._make(top_k)
        return self._pools[top_k]

    def _run(self, round_: RoundInput) -> RoundRun:
        StageClock.reset()
        t = time.perf_counter()
        with working_for(round_.deadline):
            out = self._pool(round_.top_k).run_round(round_.questions, round_.specs, round_.work, round_.documents,
                                                     round_.plan_specs)
        spent = StageClock.spent()
        for stage in ("retrieve", "read"):
            metrics.observe("eor_stage_seconds", spent.get(stage, 0.0), stage=stage)
        metrics.observe("eor_stage_seconds", time.perf_counter() - t, stage="group")  # errors: counted by the ingress
        return replace(out, reader_s=spent.get("read", 0.0))

    async def run(self, round_: RoundInput) -> RoundRun:
        """This group's part of one round of an Ask: no source or reader call outlives the Ask's
        Deadline; the results come back with what they found for later rounds."""
        return await asyncio.get_running_loop().run_in_executor(self._threads, self._run, round_)

    async def ping(self) -> list[str]:
        return self.specs


def voter_from_files(pool: list[str], readers: dict[str, str], path: str | None):
    """The voter a service starts with from files: `path` (a voter file named in the config, which
    must load), else the last pushed voter on disk (if it still fits), else the shipped voter."""
    from serve.paths import pushed_voter_path
    from voter.question_vote import choose_voter

    pushed = pushed_voter_path()
    try:
        return choose_voter(pool, readers, weights=path or None, fallback=str(pushed))
    except ValueError as exc:
        if path:  # a voter file named in the config must load
            raise
        if not pushed.exists():
            raise ValueError(f"the shipped voter does not fit this service: {exc}") from None
        log.error("the last pushed voter (%s) does not fit this service: %s; using the shipped voter", pushed, exc)
    try:
        return choose_voter(pool, readers)
    except ValueError as exc:
        raise ValueError(f"the shipped voter does not fit this service: {exc}") from None


def asked_readers(settings) -> set[str] | None:
    """The readers the voter a service starts with asks in its rounds (and the default one when it
    votes with the reader as NLI judge); None when that cannot be told (equal weights, a voter
    that does not load: the Voter says why), so every reader starts with the service."""
    from retrievers.spec import DEFAULT_READER_NAME, by_reader

    if settings.voter.weights == "equal":
        return None
    try:
        choice = voter_from_files(list(settings.pool.specs), reader_models(settings), settings.voter.weights)
    except Exception:
        return None
    asked = set(by_reader(choice.saved.cascade_to_run.asked))  # a stream's preview too
    if "nli" in choice.options.names and not choice.options.nli_model:
        asked.add(DEFAULT_READER_NAME)
    return asked


@serve.deployment(ray_actor_options=THIN, max_ongoing_requests=64)
class Voter(Placed):
    """EoR voting over any subset of the pool, and the cascade the ingress runs.

    Which voter (voter/question_vote.py: choose_voter): a pushed one (user_config {"weights": dict},
    from `eor fit --push`; persisted under $EOR_HOME so it survives a restart), else
    user_config {"weights_file": PATH} or `voter.weights` ("equal": equal weights), else the
    last pushed voter on disk, else the shipped voter."""

    def __init__(self, settings: EorConfig, reader: Any):
        self.settings = settings
        self.pool = list(self.settings.pool.specs)
        self.reader_client = RemoteReader(reader, timeout_s=self.settings.service.ask_deadline_s)
        self.readers = reader_models(self.settings)  # a voter naming another reader is refused (or its fallback runs)
        self.choice = None
        self._recent: dict[str, Any] = {}  # voter key -> (choice, its metrics): Asks under way keep theirs
        self._fallbacks: dict[tuple, Any] = {}  # (voter key, readers down) -> its fallback's (choice, metrics)
        self._set_weights(None, self.settings.voter.weights)

    def _set_weights(self, weights: dict | None, path: str) -> None:
        from serve.paths import pushed_voter_path
        from voter.question_vote import checked_choice, choose_voter
        from voter.weights_io import SavedWeights, save_weights

        if weights:
            saved = SavedWeights.from_dict(weights)
            choice = checked_choice(saved, "pushed", self.pool, self.readers)
            choice.describe()  # everything that can fail, before it is kept
            save_weights(pushed_voter_path(), saved)  # survives a restart (the file as pushed, fallback and all)
        elif path == "equal":
            choice = choose_voter(self.pool, self.readers, equal=True,
                                  metrics=",".join(self.settings.voter.metrics), pooling=self.settings.voter.pooling)
        else:
            choice = voter_from_files(self.pool, self.readers, path)
        for w in choice.warnings:
            log.warning("voter: %s", w)
        sims = self._built_metrics(choice)  # the metric models load now, not in the first Ask's vote
        self.choice = choice
        self._recent[self._key(choice)] = (choice, sims)
        while len(self._recent) > RECENT_VOTERS:
            self._recent.pop(next(iter(self._recent)))
        log.info("voter: %s", choice.describe())

    def reconfigure(self, user_config: dict) -> None:
        user_config = user_config or {}
        self._set_weights(user_config.get("weights"), user_config.get("weights_file")
                          or self.settings.voter.weights)

    @staticmethod
    def _key(choice) -> str:
        return f"{choice.saved.digest}:{choice.source}"

    def _built_metrics(self, choice):
        """The similarity metrics of `choice`, built and loaded (once per voter)."""
        from voter.question_vote import build_metrics

        for known, built in self._recent.values():
            if known.options == choice.options:
                return built
        built = build_metrics(choice.options, self.reader_client)
        for m in built:
            m.load()
        return built

    def _decide(self, results: list[QuestionResult], key: str | None, cascade: Any, k: int,
                deadline: Deadline | None):
        from voter.decision import decide

        fallbacks = {self._key(c): (c, m) for c, m in self._fallbacks.values() if m is not None}
        choice, sims = self._recent.get(key) or fallbacks.get(key) or self._recent[self._key(self.choice)]
        with working_for(deadline):  # the judge's reader calls (NLI) end with the Ask's deadline
            try:
                return decide(results, choice.saved, sims, cascade, k)
            except TimeoutError:
                if deadline is not None and deadline.passed:
                    raise VoteDeadline from None
                raise

    async def plan(self, down: tuple[str, ...] = ()) -> VoterPlan | None:
        """What one Ask needs of the voter, in one call: its cascade, its label, and the key its
        votes name, so a voter pushed while the Ask runs does not change the Ask's voter. `down`:
        readers down or restarting; a voter that names one runs its single-reader fallback, chosen
        as for a reader the system lacks (voter/question_vote.py: for_readers), and the plan says
        why (`degraded`); None when it has no fallback that does without them."""
        choice = self.choice
        if not down:
            return VoterPlan(self._key(choice), choice.saved.cascade_to_run, choice.describe())
        key = (self._key(choice), tuple(sorted(down)))
        if key not in self._fallbacks:
            self._fallbacks[key] = await asyncio.to_thread(self._fallback, choice, down)
            while len(self._fallbacks) > RECENT_VOTERS:
                self._fallbacks.pop(next(iter(self._fallbacks)))
        fallback = self._fallbacks[key][0]
        if fallback is None:
            return None
        if fallback.saved is choice.saved:  # the voter names none of them
            return VoterPlan(self._key(choice), choice.saved.cascade_to_run, choice.describe())
        why = f"degraded: reader {', '.join(sorted(down))} down or starting; answered by the voter's single-reader " \
              f"fallback {fallback.saved.digest}"
        return VoterPlan(self._key(fallback), fallback.saved.cascade_to_run, fallback.describe(), why)

    def _fallback(self, choice: Any, down: tuple[str, ...]) -> tuple[Any, Any]:
        """(the voter to run without the readers `down`, its metrics), or (None, None)."""
        from voter.question_vote import VoterChoice, for_readers, metric_options

        up = {name: model for name, model in self.readers.items() if name not in down}
        try:
            saved, warnings = for_readers(choice.saved, up, f"voter {choice.saved.digest}")
        except ValueError:
            return None, None
        if saved is choice.saved:
            return choice, None
        fallback = VoterChoice(saved, metric_options(saved), f"{choice.source}, single-reader fallback", warnings)
        return fallback, self._built_metrics(fallback)

    async def decide(self, results: list[QuestionResult], key: str | None = None, cascade: Any = None,
                     k: int = 0, deadline: Deadline | None = None):
        """The decisions (voter/decision.py: answer, settled?, P(right)) after 0-based round `k`
        of `cascade` (the Ask's: the plan's, or its explicit retrievers as one round), by the
        voter `key` names (plan()), else the current one; VoteDeadline when its reader calls
        run past `deadline`."""
        return await asyncio.to_thread(self._decide, results, key, cascade, k, deadline)

    async def weights_source(self) -> str:
        return self.choice.describe()
