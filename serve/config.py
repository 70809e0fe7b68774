"""Typed configuration for one eor process; YAML maps onto these dataclasses field by field."""
from __future__ import annotations

from dataclasses import dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any

import yaml

from retrievers.encoder import DEFAULT_ENCODER
from retrievers.pool import PoolConfig
from serve.models import DEFAULT_GENERATOR
from serve.vllm_engine import VLLMConfig


@dataclass(frozen=True)
class IndexConfig:
    name: str = "default"  # under $EOR_HOME/indexes/
    encoder: str = DEFAULT_ENCODER  # Wiki + @RR encoder: package:<module> or a folder
    se_backend: str = "lucene"  # "lucene" (embedded) or "http" (a Serper-style search API)
    se_http_url: str = "https://google.serper.dev/search"
    se_http_fetch_pages: bool = False


@dataclass(frozen=True)
class CacheConfig:
    enabled: bool = True
    path: str = ""  # empty: $EOR_HOME/cache/reader.sqlite


@dataclass(frozen=True)
class GeneratorConfig:
    """The model behind the service's `Generate` rpc (the bench's rewrites, back-translation,
    SURE's entailment filter). The same model as the reader shares the reader's engine; another
    model gets an engine of its own with the reader's engine settings."""

    model: str = DEFAULT_GENERATOR  # packaged model name or HF folder; "" = the reader's model


@dataclass(frozen=True)
class EorConfig:
    reader: VLLMConfig = field(default_factory=VLLMConfig)
    generator: GeneratorConfig = field(default_factory=GeneratorConfig)
    pool: PoolConfig = field(default_factory=PoolConfig)
    index: IndexConfig = field(default_factory=IndexConfig)
    cache: CacheConfig = field(default_factory=CacheConfig)


def _build(cls: type, data: dict[str, Any], where: str) -> Any:
    known = {f.name: f for f in fields(cls)}
    unknown = set(data) - set(known)
    if unknown:
        raise ValueError(f"unknown config keys at {where}: {sorted(unknown)}; known: {sorted(known)}")
    kwargs = {}
    for name, value in data.items():
        default = getattr(cls(), name)
        if is_dataclass(default):
            kwargs[name] = _build(type(default), value or {}, f"{where}.{name}")
        elif isinstance(default, tuple):
            kwargs[name] = tuple(value)
        else:
            kwargs[name] = value
    return cls(**kwargs)


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
    data = read_sections(path)
    for section, values in (overrides or {}).items():
        data.setdefault(section, {}).update({k: v for k, v in values.items() if v is not None})
    return _build(EorConfig, data, "config")


def generator_reader(config: EorConfig) -> VLLMConfig | None:
    """The generator's engine settings, or None when the reader's engine serves `Generate`."""
    model = config.generator.model or config.reader.model
    if model == config.reader.model:
        return None
    from dataclasses import replace

    return replace(config.reader, model=model)
