"""Typed configuration of eor, one loader for every command and the service.

One YAML file, sections reader, readers, generator, pool, index, cache, voter, service and ask, maps onto
`EorConfig` field by field (`load_config`), checked by serve/config_schema.py: a wrong type, a value
outside a field's bounds or an unknown key anywhere is a one-line error naming the key's path.
`eor ask`, `eor fit`, `eor eval` and `eor serve` read the same file; the `service` section is
used only by the service, and a command-line flag overrides its key. Secrets never live here:
the service's bearer token is read from the environment variable named by `service.token_env`.
"""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Annotated, Any, Iterable

import yaml
from pydantic import Field, SkipValidation

from retrievers.encoder import DEFAULT_ENCODER
from retrievers.pool import PoolConfig
from retrievers.registry import SOURCE_BACKENDS, is_reference
from retrievers.spec import (PAPER_POOL, SpecError, check_reader_name, check_source_name, parse_pool, parse_spec,
                             with_reader)
from serve.config_schema import validate
from serve.engine.models import STRONG_READER
from serve.engine.vllm_engine import VLLMConfig
from voter.estimator import VoterConfig

Port = Annotated[int, Field(ge=0, le=65535)]


@dataclass(frozen=True)
class SourceConfig:
    """One knowledge source: the class that serves it, a registered backend name
    (retrievers/registry.py: SOURCE_BACKENDS) or a "module:Class" reference, and the keyword
    options its `from_setting` takes (retrievers/sources/base.py)."""

    backend: str
    options: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def read(cls, name: str, value: Any) -> "SourceConfig":
        """A config line's value: `BACKEND`, or {backend: BACKEND, options: {...}}."""
        if isinstance(value, SourceConfig):
            return value
        if isinstance(value, str):
            value = {"backend": value}
        if not isinstance(value, dict):
            raise ValueError(f"index.sources.{name} must be a backend name or {{backend: NAME, options: {{...}}}}, "
                             f"got {value!r}")
        line = validate(cls, {k: v for k, v in value.items() if not (k == "options" and v is None)},
                        f"index.sources.{name}")
        if line.backend not in SOURCE_BACKENDS.names() and not is_reference(line.backend):
            raise ValueError(f"index.sources.{name}: unknown knowledge-source backend {line.backend!r}; "
                             f"known: {', '.join(SOURCE_BACKENDS.names())}, or module:Class")
        return line


DEFAULT_SOURCES = {"Wiki": "dense", "SE": "lucene"}  # the paper's two: dense passages, BM25 pages
MERGE_ABOVE = 3000  # index.merge_above's default: measured at 100k (docs/benchmarks.md, "An index that lives")


@dataclass(frozen=True)
class IndexConfig:
    name: str = "default"  # under $EOR_HOME/indexes/
    encoder: str = DEFAULT_ENCODER  # Wiki + @RR encoder: package:<module> or a folder
    # The knowledge sources, by the name retriever specs call them, one line each (the section
    # lists them all; its order is the service's: the first source's deployment also serves the
    # @RR encoder). A line: `Toy: toy` (a registered backend), `Toy: mypkg.toy:ToySource`, or
    # `SE: {backend: http, options: {fetch_pages: true}}` (a Serper-style search API for SE).
    # (a line may be a bare backend name: SourceConfig.read checks each)
    sources: SkipValidation[dict[str, SourceConfig]] = field(default_factory=lambda: dict(DEFAULT_SOURCES))
    # `eor index add/delete` merge the generation into a new base once this many documents were
    # added or deleted since the base (docs/operations.md: what an add costs as the delta grows)
    merge_above: Annotated[int, Field(ge=1)] = MERGE_ABOVE

    def __post_init__(self) -> None:
        if not isinstance(self.sources, dict):
            raise ValueError(f"index.sources must map source names to backends, got {self.sources!r}")
        for name in self.sources:
            try:
                check_source_name(name)
            except SpecError as exc:
                raise ValueError(f"index.sources: {exc}") from None
        object.__setattr__(self, "sources", {n: SourceConfig.read(n, v) for n, v in self.sources.items()})


@dataclass(frozen=True)
class CacheConfig:
    enabled: bool = True
    path: str = ""  # empty: $EOR_HOME/cache/reader.sqlite


GENERATOR_AUTO = "auto"  # Generate's default model: the strong reader when prepared (`generator_model`)


@dataclass(frozen=True)
class GeneratorConfig:
    """The model behind the service's `Generate` rpc (the bench's rewrites, back-translation,
    SURE's entailment filter). "auto": the strong reader (STRONG_READER, its formal rewrites are
    usable 9 times in 10 against the 0.5B's 5) when it is prepared, else the reader's model.
    A model a served reader runs shares that reader's engine; another gets an engine of its own
    (`generator_reader`)."""

    model: str = GENERATOR_AUTO  # "auto", a packaged model name or HF folder; "" = the reader's model


@dataclass(frozen=True)
class VoterSelection:
    """Which voter answers: `weights` names a voter file, "equal" asks for equal weights, and
    empty means the default (the service: the last pushed voter, else the shipped one; the
    CLI: the shipped one). `metrics` and `pooling` apply to equal weights only: a fitted
    voter brings its own."""

    weights: str = ""
    metrics: tuple[str, ...] = ("em", "bertscore")
    pooling: str = VoterConfig.pooling


@dataclass(frozen=True)
class AskConfig:
    """`eor ask` without a running `eor serve`: how long the reader it started stays warm for the
    next question, in idle seconds (serve/cli/warm/); 0: none, each ask starts its own.
    `--keep-warm` and $EOR_KEEP_WARM override it."""

    keep_warm_s: Annotated[float, Field(ge=0)] = 300.0


# The retriever actors (the design card, ../shared/ARCHITECTURE.md, "Serving"): thin actors doing only the processing ops;
# the work specs share is shared per question (the ingress searches each source once, the reader
# writes PK once and dedups prompts in flight). "per-spec": one actor per retriever spec (16: a
# broken or slow actor takes out one retriever; each scales on its own). "one": one actor runs
# every spec. Every Ray process wakes 100 times a second (Ray's fixed signal-check timer) and each
# wakeup stalls the reader's bound OpenMP threads: on 2 cores, 16 actors made a cold question
# 1.35x the in-process path's latency and one actor 1.12x (docs/benchmarks.md, "serving overhead"). "auto":
# per-spec on nodes with at least PER_SPEC_MIN_CPUS cores, else one. Or the groups themselves (a list
# of spec lists, one actor each); specs no group lists get an actor each. One knob: the layout.
RETRIEVER_ACTOR_LAYOUTS = ("auto", "per-spec", "one")
PER_SPEC_MIN_CPUS = 8


@dataclass(frozen=True)
class ServiceConfig:
    host: str = "127.0.0.1"  # the gRPC front binds here (0.0.0.0 only on purpose)
    port: Port = 50051  # gRPC front (eor serve); 0 picks a free port
    ray_grpc_port: Port = 0  # >0: also enable Ray Serve's own gRPC proxy here (binds all interfaces, no TLS)
    # Ray Serve's HTTP proxy: the JSON API, server-sent events and the web page (serve/app/http.py), on
    # `host`, with TLS when tls_cert/tls_key are set; 0: none
    http_port: Port = 8000
    metrics_port: Port = 8080  # Ray's Prometheus endpoint on this node (0: Ray picks)
    # "auto", "per-spec", "one" (RETRIEVER_ACTOR_LAYOUTS, above) or [[spec, ...], ...]: the specs of each actor
    retriever_actors: str | tuple[tuple[str, ...] | str, ...] = "auto"
    # the whole Ask's default deadline (every round and its vote); a request's deadline_s or the
    # client's gRPC deadline shortens it (serve/deadline.py)
    ask_deadline_s: float = 120.0
    # no new stage starts with less than this (or a quarter of the budget) left
    vote_reserve_s: Annotated[float, Field(ge=0)] = 30.0
    # an Ask that sets no min_confidence abstains below this P(right) (0: always answer; voter/decision.py)
    min_confidence: float = 0.0
    max_batch: int = 64  # questions per AskBatch
    max_prompts: Annotated[int, Field(ge=1)] = 64  # prompts per Generate
    max_prompt_chars: Annotated[int, Field(ge=1)] = 20000
    max_tokens: Annotated[int, Field(ge=1)] = 512  # Generate's max_tokens cap
    max_documents: Annotated[int, Field(ge=0)] = 50  # grounding documents per question (Ask.documents; 0: none)
    max_document_chars: Annotated[int, Field(ge=1)] = 20000  # characters per grounding document
    # for a batch-only engine (an engine_factory's with `continuous = False`: serve/app/batching.py) the
    # reader waits this long for concurrent calls to merge, up to this many prompts a call; vLLM, the
    # default, batches continuously and reads neither
    reader_batch_wait_s: Annotated[float, Field(ge=0)] = 0.02
    reader_max_batch: Annotated[int, Field(ge=1)] = 256
    token_env: str = "EOR_SERVE_TOKEN"  # bearer token from this env var; unset/empty: no auth
    tls_cert: str = ""  # PEM paths; both set: the front serves TLS
    tls_key: str = ""
    engine_factory: str = ""  # "module:callable" -> ReaderEngine; empty: VLLMEngine(reader)
    sources_factory: str = ""  # "module:callable(EorConfig) -> (sources, encoder)"; empty: the index
    ray_temp_dir: str = ""  # empty: $EOR_HOME/ray
    # Ray memory reservations (0: none; a multi-node cluster sets them)
    reader_memory_gib: Annotated[float, Field(ge=0)] = 0.0
    ray_address: str = ""  # a running Ray cluster ("HOST:PORT" or "auto") to deploy onto; empty: Ray on this machine
    # deployment -> Ray custom resources it needs on its node (DEPLOYMENTS, below), e.g.
    # {"Reader": {"eor_reader": 1}, "Retrievers": {"eor_retrievers": 0.01}}: which node serves what
    placement: dict[str, dict[str, float]] = field(default_factory=dict)
    # traffic beyond capacity (issue 57; docs/operations.md): Asks an ingress replica runs at once (0: no
    # limit, no admission control), and how many wait in order beyond them; an Ask past that queue, or
    # whose wait would miss its deadline, is refused at once (RESOURCE_EXHAUSTED + retry pushback). 2: CPU
    # readers share the cores, so more Asks at once only make each slower (at 16, 4 clients on 2 cores:
    # p50 98 s, 5 of 24 past the 120 s deadline: docs/benchmarks.md); GPU readers batch: 16 or more there
    max_asks_running: int = 2
    max_asks_queued: int = 64
    # Ray Serve's bound on every deployment's queue of requests (max_queued_requests; -1: unbounded)
    max_queued_requests: int = 512
    # the longest an Ask may wait for a slot: one whose estimated wait is longer is refused at once
    # (0: only its deadline bounds the wait). An SLO's choice, not a default: at 2.3x capacity 20 s
    # kept answered Asks' p95 at 57 s (119 s at 2x without it), but where one Ask takes about 45 s
    # (2 cores) it also refuses every Ask that finds the slots taken below capacity (docs/operations.md)
    max_wait_s: float = 0.0
    # depth that follows the load (voter/cascade.py: LoadRule): while Asks overflow the running slots
    # (under_load_on_overflow: one waits, or one was refused or waited within the last mean service
    # time), or the readers hold at least under_load_in_flight requests, running + waiting (0: off), a
    # question stops after a round whose P(right) >= under_load_bar (docs/benchmarks.md, issue 57)
    under_load_on_overflow: bool = True
    under_load_in_flight: int = 0
    under_load_bar: float = 0.35
    # Ray Serve autoscaling_config of each reader deployment ({}: one replica), e.g. {min_replicas: 1,
    # max_replicas: 2, target_ongoing_requests: 8}
    reader_autoscaling: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.ask_deadline_s > 0 or self.max_batch < 1:
            raise ValueError("service: ask_deadline_s and max_batch must be positive")
        from voter.decision import check_min_confidence

        try:
            check_min_confidence(self.min_confidence)
        except ValueError as exc:
            raise ValueError(f"service.{exc}") from None
        for name, res in self.placement.items():
            if not isinstance(res, dict) or not all(isinstance(v, (int, float)) and v > 0 for v in res.values()):
                raise ValueError(f"service.placement.{name} must map resource names to positive amounts, got {res!r}")
        if isinstance(self.retriever_actors, (list, tuple)):
            groups = tuple(tuple(g) if isinstance(g, (list, tuple)) else (g,) for g in self.retriever_actors)
            object.__setattr__(self, "retriever_actors", groups)
            seen: set[str] = set()
            for g in groups:
                dup = seen & set(g)
                if dup:
                    raise ValueError(f"service.retriever_actors: {sorted(dup)} listed in two groups")
                seen |= set(g)
        elif self.retriever_actors not in RETRIEVER_ACTOR_LAYOUTS:
            raise ValueError(f"service.retriever_actors must be one of {RETRIEVER_ACTOR_LAYOUTS} or a list of "
                             f"spec lists, got {self.retriever_actors!r}")
        if min(self.max_asks_running, self.max_asks_queued, self.under_load_in_flight) < 0 or \
                not self.max_wait_s >= 0 or not 0.0 <= self.under_load_bar <= 1.0 or \
                not isinstance(self.reader_autoscaling, dict):
            raise ValueError("service: max_asks_running, max_asks_queued, max_wait_s and "
                             "under_load_in_flight must be >= 0, under_load_bar in [0, 1], reader_autoscaling a "
                             "mapping")


# the deployments `service.placement` may name ("Retrievers": every retriever actor), besides one
# Reader_<name> per configured reader other than the default and one Source_<name> per configured
# knowledge source (`deployment_names`); serve/app/ builds them under these names
DEPLOYMENTS = ("Reader", "Generator", "Retrievers", "Voter", "EorIngress")


def reader_deployment(name: str) -> str:
    """The deployment serving the reader `name`: "Reader" for the default one (""), Reader_<name>
    for one of the config's `readers` (Reader_1.5B)."""
    return f"Reader_{name}" if name else "Reader"


def source_deployment(name: str) -> str:
    """The deployment serving the knowledge source `name` (Source_Wiki, Source_SE, ...)."""
    return f"Source_{name}"


def deployment_names(sources: Iterable[str], readers: Iterable[str] = ()) -> tuple[str, ...]:
    """Every deployment name `service.placement` may use, for the configured sources and readers
    (the names besides the default reader)."""
    return (DEPLOYMENTS[:1] + tuple(reader_deployment(r) for r in readers if r) + DEPLOYMENTS[1:2]
            + tuple(source_deployment(s) for s in sources) + DEPLOYMENTS[2:])


# The readers besides `reader` (the default one), by the name a pool member gives after `~`
# (retrievers/spec.py: `Wiki@10~1.5B`); a file's `readers` section adds to these. A line: `1.5B: qwen2.5-coder-1.5b` (a model, with the
# `reader` section's engine settings) or `1.5B: {model: ..., cpu_kv_cache_gib: 3}` (settings of its
# own). Each is its own engine (KV cache, prefix cache, reader-cache keys); only the readers a pool
# member names are ever started. The 1.5B's KV cache is 1 GiB (37k tokens: more than 2 cores batch), as the
# 0.5B's (VLLMConfig): `eor serve` with both started holds 15.3-15.5 GiB PSS (session-21 note).
# Its engine runs at nice 10 (serve/engine/priority.py): the 0.5B's early answer takes the cores first.
STRONG_READER_NAME = "1.5B"
DEFAULT_READERS = {STRONG_READER_NAME: {"model": STRONG_READER, "cpu_kv_cache_gib": 1, "cpu_nice": 10}}

# The retrievers the strong reader reads in the default pool: neither the @CP compressions (a 200-token
# summary each, then the answer: most of a question's reader time, and the 1.5B prefills at 0.3x and
# decodes at 0.5x the 0.5B's speed) nor the two 10-passage reranks (SE@RR@10, HB@RR@10: ~1,350 prompt tokens each, a third of
# the rest, and the weakest through the 1.5B on the first 20 fit questions).
STRONG_DROPPED = ("SE@RR@10", "HB@RR@10")
STRONG_SPECS = tuple(s for s in PAPER_POOL if not parse_spec(s).compress and s not in STRONG_DROPPED)
# The default pool, the one the shipped voter was fitted on (issue 33): the paper's 16 through the
# default reader and the 7 above through the 1.5B (`~1.5B`). The voter chooses which it asks: its
# rounds read only the 1.5B's; its single-reader fallback the 0.5B's 16 (voter/data/voter.json).
DEFAULT_POOL = (*PAPER_POOL, *(with_reader(s, STRONG_READER_NAME) for s in STRONG_SPECS))


@dataclass(frozen=True)
class EorConfig:
    reader: VLLMConfig = field(default_factory=VLLMConfig)
    readers: dict[str, Any] = field(default_factory=lambda: dict(DEFAULT_READERS))
    generator: GeneratorConfig = field(default_factory=GeneratorConfig)
    pool: PoolConfig = field(default_factory=lambda: PoolConfig(specs=DEFAULT_POOL))
    index: IndexConfig = field(default_factory=IndexConfig)
    cache: CacheConfig = field(default_factory=CacheConfig)
    voter: VoterSelection = field(default_factory=VoterSelection)
    service: ServiceConfig = field(default_factory=ServiceConfig)
    ask: AskConfig = field(default_factory=AskConfig)

    def __post_init__(self) -> None:
        """What crosses sections: the pool reads configured sources and readers; placement names
        deployments."""
        from serve.config_readers import reader_names  # questions over a config: they import it

        if not isinstance(self.readers, dict):
            raise ValueError(f"readers must map reader names to models, got {self.readers!r}")
        for name, value in self.readers.items():
            try:
                check_reader_name(name)
            except SpecError as exc:
                raise ValueError(f"readers: {exc}") from None
            if isinstance(value, dict):  # its settings over the reader section's, checked now (types, niceness)
                validate(VLLMConfig, {**asdict(self.reader), **value}, f"readers.{name}")
            elif not (isinstance(value, str) and value):
                raise ValueError(f"readers.{name} must be a model name or {{model: ..., <reader settings>}}, "
                                 f"got {value!r}")
        try:
            parse_pool(self.pool.specs, sources=self.index.sources, readers=reader_names(self))
        except SpecError as exc:
            raise ValueError(f"pool.specs: {exc}") from None
        known = deployment_names(self.index.sources, self.readers)
        unknown = sorted(set(self.service.placement) - set(known))
        if unknown:
            raise ValueError(f"service.placement: unknown deployments {unknown}; known: {list(known)}")

    def to_dict(self) -> dict[str, Any]:
        """Plain data (a run's record, the app's version); `config_from_dict` reads it back."""
        return asdict(self)


def read_sections(path: str | Path | None) -> dict[str, Any]:
    """A YAML config file as a mapping of sections ({} without a file)."""
    if not path:
        return {}
    data = yaml.safe_load(Path(path).read_text()) or {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping of sections")
    return data


def load_config(path: str | Path | None = None, overrides: dict[str, dict[str, Any]] | None = None) -> EorConfig:
    """Defaults, then the YAML file (if any), then per-section overrides from the command line."""
    return config_from_dict(read_sections(path), overrides)


def config_from_dict(data: dict[str, Any] | None, overrides: dict[str, dict[str, Any]] | None = None) -> EorConfig:
    """The config from a mapping of sections (a YAML file's, or `EorConfig.to_dict()`'s), validated."""
    data = {k: v for k, v in (data or {}).items()}
    for section, values in data.items():
        if values is not None and not isinstance(values, dict):
            raise ValueError(f"config section {section!r} must be a mapping")
    data = {k: dict(v or {}) for k, v in data.items()}
    for section, values in (overrides or {}).items():
        data.setdefault(section, {}).update({k: v for k, v in values.items() if v is not None})
    if "readers" in data:  # a file's readers join the default ones (the default pool names the 1.5B)
        data["readers"] = _with_default_readers(data["readers"])
    if "pool" in data and "specs" not in data["pool"]:  # a pool section that names no members: the default's
        data["pool"]["specs"] = list(DEFAULT_POOL)
    return validate(EorConfig, data)


def _with_default_readers(readers: dict[str, Any]) -> dict[str, Any]:
    """A file's `readers` over DEFAULT_READERS, reader by reader: a line for a default reader
    changes only what it names (`1.5B: {cpu_kv_cache_gib: 2}` keeps the model; `1.5B: MODEL`
    keeps the settings); other lines add readers as written."""
    out = dict(DEFAULT_READERS)
    for name, value in readers.items():
        default = out.get(name)
        if isinstance(default, dict) and isinstance(value, dict):
            value = {**default, **value}
        elif isinstance(default, dict) and isinstance(value, str) and value:
            value = {**default, "model": value}
        out[name] = value
    return out


def actor_layout(config: EorConfig, cpus: int | None = None) -> str:
    """"per-spec", "one" or "groups": the configured layout, "auto" resolved for a node of
    `cpus` cores (default: this machine's)."""
    layout = config.service.retriever_actors
    if not isinstance(layout, str):
        return "groups"
    if layout == "auto":
        layout = "per-spec" if (cpus or os.cpu_count() or 1) >= PER_SPEC_MIN_CPUS else "one"
    return layout


def actor_groups(config: EorConfig, cpus: int | None = None) -> list[tuple[str, ...]]:
    """The pool's specs split into the service's retriever actors (pool order inside each)."""
    specs = list(config.pool.specs)
    layout = actor_layout(config, cpus)
    if layout == "one":
        return [tuple(specs)]
    out = []
    for g in config.service.retriever_actors if layout == "groups" else ():
        keep = tuple(s for s in specs if s in g)
        if keep:
            out.append(keep)
    grouped = {s for g in out for s in g}
    out += [(s,) for s in specs if s not in grouped]
    return sorted(out, key=lambda g: specs.index(g[0]))  # pool order
