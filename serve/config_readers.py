"""The readers a config runs, as its commands and the service ask: each reader's name and engine
settings, the ones the pool's members name (the engines to start), whether the default reader has
the cores first, their models for the voter's reader check, and which engine serves `Generate`.
Questions over a loaded `EorConfig` (serve/config.py, the one loader and its sections).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from retrievers.spec import DEFAULT_READER_NAME, by_reader
from serve.config import GENERATOR_AUTO, EorConfig, reader_deployment
from serve.engine.models import STRONG_READER
from serve.engine.vllm_engine import VLLMConfig


def reader_names(config: EorConfig) -> list[str]:
    """The configured readers' names: "" (the default reader), then `readers`, in order."""
    return [DEFAULT_READER_NAME, *config.readers]


def reader_config(config: EorConfig, name: str) -> VLLMConfig:
    """The engine settings of the reader named `name` ("": the `reader` section)."""
    if name == DEFAULT_READER_NAME:
        return config.reader
    if name not in config.readers:
        raise KeyError(f"reader {name!r} is not configured (config section readers: "
                       f"{', '.join(config.readers) or 'none'})")
    value = config.readers[name]
    return replace(config.reader, **({"model": value} if isinstance(value, str) else value))


def used_readers(config: EorConfig, specs=None) -> list[str]:
    """The readers the pool's members (or `specs`) name, the default first: the engines to start."""
    from retrievers.spec import by_reader

    named = by_reader(config.pool.specs if specs is None else specs)
    return [n for n in reader_names(config) if n in named or n == DEFAULT_READER_NAME]


def quick_reader_first(config: EorConfig, specs=None) -> bool:
    """Whether the default reader's engine has the cores before every other reader the pool's
    members (or `specs`) name (a lower niceness: serve/engine/priority.py), so round 1's early
    answer reads as if alone (fitting/layout_fit.py: early_answer_work)."""
    others = [reader_config(config, n).cpu_nice for n in used_readers(config, specs) if n != DEFAULT_READER_NAME]
    return bool(others) and config.reader.cpu_nice < min(others)


def reader_models(config: EorConfig) -> dict[str, str]:
    """The readers this system runs (the pool's, `used_readers`), name -> model, for the
    voter's reader check (voter/question_vote.py: choose_voter)."""
    return {name: reader_config(config, name).model for name in used_readers(config)}


def generator_model(config: EorConfig) -> str:
    """The model `Generate` uses: the configured one ("": the reader's); "auto" resolved here,
    once: STRONG_READER when it is prepared on this machine (`eor models prepare`, ./setup.sh
    --tests/--bench/--reader-1.5b), else the reader's model."""
    model = config.generator.model
    if model != GENERATOR_AUTO:
        return model or config.reader.model
    from serve.engine.models import resolve_model

    try:
        resolve_model(STRONG_READER)
    except FileNotFoundError:
        return config.reader.model
    return STRONG_READER


@dataclass(frozen=True)
class GeneratorReader:
    """The engine behind `Generate`: a served reader's (`reader`, its name; "" the default one),
    or, when no served reader runs its model, one of its own (`reader` None) with `settings`."""

    model: str
    reader: str | None
    settings: VLLMConfig

    @property
    def deployment(self) -> str:
        """The service's deployment that serves Generate (a reader's, or Generator)."""
        return reader_deployment(self.reader) if self.reader is not None else "Generator"


def generator_reader(config: EorConfig) -> GeneratorReader:
    """Which engine serves `Generate`: the first served reader (`used_readers`) whose model is the
    generator's, so one model never gets two engines; else its own, with the settings of the
    configured reader of that model if there is one (its KV cache), else the default reader's."""
    model = generator_model(config)
    for name in used_readers(config):
        if reader_config(config, name).model == model:
            return GeneratorReader(model, name, reader_config(config, name))
    like = [reader_config(config, n) for n in reader_names(config) if reader_config(config, n).model == model]
    return GeneratorReader(model, None, like[0] if like else replace(config.reader, model=model))
