"""Typed configuration of the eor service (`eor serve`, `serve run deploy/serve.yaml`).

The service YAML is the usual eor config (sections reader, pool, index, cache; see
serve/config.py) plus a `service:` section that maps onto `ServiceConfig` field by field.
Secrets never live here: the bearer token is read from the environment variable named by
`token_env`.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from retrievers.spec import PAPER_POOL
from serve.config import EorConfig, load_config, read_sections

# Retrievers grouped by the knowledge sources they depend on (so a source outage or a slow
# source takes out only the groups that need it) and by the work they share inside one pool
# run (one search at the group's deepest k, one rerank memo per question, the @CP variant next
# to its base): 5 thin actors for the paper's 16 specs. Unlisted specs get an actor each.
DEFAULT_GROUPS: tuple[tuple[str, ...], ...] = (
    ("ReFree", "PK"),  # no source: the reader only
    ("Wiki@10", "Wiki@10@CP"),  # Wiki only
    ("SE@1", "SE@4", "SE@1@CP", "SE@4@CP"),  # SE only, one search at k=4
    ("SE@RR@10", "SE@RR@10@CP", "SE@RR@5&Wiki@5", "SE@RR@5&Wiki@5@CP"),  # SE pages reranked once
    ("SE@2&Wiki@5", "SE@2&Wiki@5@CP", "HB@RR@10", "HB@RR@10@CP"),  # SE + Wiki (+ PK for HB)
)


@dataclass(frozen=True)
class ServiceConfig:
    host: str = "127.0.0.1"  # the gRPC front binds here (0.0.0.0 only on purpose)
    port: int = 50051  # gRPC front (eor serve); 0 picks a free port
    ray_grpc_port: int = 0  # >0: also enable Ray Serve's own gRPC proxy here (binds all interfaces, no TLS)
    metrics_port: int = 8080  # Ray's Prometheus endpoint on this node (0: Ray picks)
    groups: tuple[tuple[str, ...], ...] = DEFAULT_GROUPS  # retriever specs per actor; unlisted specs get their own
    retriever_timeout_s: float = 120.0  # an Ask's whole budget, every cascade stage; a request deadline shortens it
    vote_reserve_s: float = 30.0  # no new stage starts with less than this (or a quarter of the budget) left
    max_question_chars: int = 2000
    max_batch: int = 64  # questions per AskBatch
    max_prompts: int = 64  # prompts per Generate
    max_prompt_chars: int = 20000
    max_tokens: int = 512  # Generate's max_tokens cap
    max_documents: int = 50  # grounding documents per question (Ask.documents)
    max_document_chars: int = 20000  # characters per grounding document
    reader_batch_wait_s: float = 0.02  # the reader waits this long for concurrent calls to merge
    reader_max_batch: int = 256  # prompts per engine call at most
    voter_metrics: tuple[str, ...] = ("em", "bertscore")  # equal weights only: a fitted voter brings its own
    voter_pooling: str = "mean"
    weights: str = ""  # a voter file; "equal": equal weights; empty: the last pushed voter, else the shipped one
    token_env: str = "EOR_SERVE_TOKEN"  # bearer token from this env var; unset/empty: no auth
    tls_cert: str = ""  # PEM paths; both set: the front serves TLS
    tls_key: str = ""
    engine_factory: str = ""  # "module:callable" -> ReaderEngine; empty: VLLMEngine(reader)
    sources_factory: str = ""  # "module:callable(EorConfig) -> (sources, encoder)"; empty: the index
    ray_temp_dir: str = ""  # empty: $EOR_HOME/ray
    reader_memory_gib: float = 0.0  # Ray memory reservations (0: none; a multi-node cluster sets them)

    def __post_init__(self) -> None:
        if self.retriever_timeout_s <= 0 or self.max_batch < 1 or self.max_question_chars < 1:
            raise ValueError("service: retriever_timeout_s, max_batch and max_question_chars must be positive")
        seen: set[str] = set()
        for g in self.groups:
            dup = seen & set(g)
            if dup:
                raise ValueError(f"service.groups: {sorted(dup)} listed in two groups")
            seen |= set(g)


@dataclass(frozen=True)
class AppSettings:
    """Everything the Serve application needs, as plain data (it travels to every actor)."""

    eor: EorConfig = field(default_factory=EorConfig)
    service: ServiceConfig = field(default_factory=ServiceConfig)

    def groups(self) -> list[tuple[str, ...]]:
        """The pool's specs split into actor groups (pool order inside each group)."""
        specs = list(self.eor.pool.specs)
        out = []
        for g in self.service.groups:
            keep = tuple(s for s in specs if s in g)
            if keep:
                out.append(keep)
        grouped = {s for g in out for s in g}
        out += [(s,) for s in specs if s not in grouped]
        return out

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self.eor), "service": asdict(self.service)}


def _service(data: dict[str, Any]) -> ServiceConfig:
    known = {f.name for f in fields(ServiceConfig)}
    unknown = set(data) - known
    if unknown:
        raise ValueError(f"unknown config keys at service: {sorted(unknown)}; known: {sorted(known)}")
    kw = dict(data)
    if "groups" in kw:
        kw["groups"] = tuple(tuple(g) for g in kw["groups"])
    if "voter_metrics" in kw:
        kw["voter_metrics"] = tuple(kw["voter_metrics"])
    return ServiceConfig(**kw)


def settings_from_dict(data: dict[str, Any] | None, overrides: dict[str, dict[str, Any]] | None = None) -> AppSettings:
    data = dict(data or {})
    service = dict(data.pop("service", None) or {})
    sections = {k: dict(v or {}) for k, v in data.items()}
    for section, values in (overrides or {}).items():
        target = service if section == "service" else sections.setdefault(section, {})
        target.update({k: v for k, v in values.items() if v is not None})
    for section, values in sections.items():
        if not isinstance(values, dict):
            raise ValueError(f"config section {section!r} must be a mapping")
    return AppSettings(load_config(None, sections), _service(service))


def load_settings(path: str | Path | None = None, overrides: dict[str, dict[str, Any]] | None = None) -> AppSettings:
    return settings_from_dict(read_sections(path), overrides)


assert set(s for g in DEFAULT_GROUPS for s in g) == set(PAPER_POOL)
