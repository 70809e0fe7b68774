"""Wire configured components into a running pool (the only place that knows them all)."""
from __future__ import annotations

import importlib
import json
import shutil
import sys
from pathlib import Path
from typing import Any, Collection, Iterable, Mapping, TextIO

from retrievers.corpus import Document
from retrievers.encoder import Encoder
from retrievers.pool import RetrieverPool
from retrievers.engine import ReaderEngine
from retrievers.reader import CachedReader, ReaderCache
from retrievers.registry import source_class
from retrievers.sources import generations
from retrievers.sources.base import KnowledgeSource, SourceSetting
from retrievers.sources.generations import Generation
from serve.config import MERGE_ABOVE, EorConfig, IndexConfig, SourceConfig
from serve.config_readers import reader_config, used_readers
from serve.paths import cache_path, indexes_dir


def index_path(name: str) -> Path:
    return indexes_dir() / name


def build_indexes(docs: Iterable[Document], name: str, encoder: Encoder, show_progress: bool = True,
                  progress: TextIO | None = None, sources: Mapping[str, SourceConfig] | None = None,
                  corpus_id: str = "", embedder: Any = None, complete: bool = True, index_parts: Any = None) -> dict:
    """Every source `sources` lists (default: Wiki and SE), each built by its own class over one
    corpus (`docs` is read once per source: a list, or retrievers.corpus.Corpus for a file of any
    size). Resumable: a source already built from the same corpus is kept. `complete`: these are
    all the index's sources (index.json, the finished index's summary, is written then only)."""
    root = index_path(name)
    built = {}
    for source, conf in (sources or IndexConfig().sources).items():
        setting = SourceSetting(source, str(root / source.lower()), encoder, conf.options)
        cls = source_class(conf.backend)
        # a source written before the index step could run elsewhere builds as it always did
        elsewhere = {"index_parts": index_parts} if index_parts is not None and _takes(cls.build_index,
                                                                                       "index_parts") else {}
        summary = cls.build_index(docs, setting, corpus_id=corpus_id, embedder=embedder,
                                  progress=progress if progress is not None or not show_progress else sys.stderr,
                                  **elsewhere)
        if summary is not None:
            built[source] = summary
    info = {"sources": built}
    if complete:
        (root / "index.json").write_text(json.dumps(info, indent=2))
    return info


def _takes(fn, name: str) -> bool:
    """`fn` accepts keyword `name` (by name, or in its **kwargs)."""
    import inspect

    params = inspect.signature(fn).parameters
    return name in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def describe_index(info: dict) -> str:
    """A build's summary in a line: each source's size and, for a dense one, its kind and recall."""
    parts = []
    for name, s in info["sources"].items():
        if "factory" in s:
            recall = "" if s["factory"] == "Flat" else f", recall@10 {s['recall_at_10']:.3f}"
            parts.append(f"{name} {s['passages']:,} passages ({s['factory']}{recall})")
        else:
            parts.append(f"{name} " + ", ".join(f"{v:,} {k}" for k, v in s.items() if isinstance(v, int)))
    return "; ".join(parts)


def make_sources(config: EorConfig, encoder: Encoder, generation: Generation | None = None) -> dict[str, KnowledgeSource]:
    """Every source `index.sources` configures, in its order, built (not loaded) by its class, at
    the index's current generation (or `generation`)."""
    root = index_path(config.index.name)
    gen = generation if generation is not None else generations.current(root)
    out = {}
    for name, s in config.index.sources.items():
        source = source_class(s.backend).from_setting(SourceSetting(name, str(gen.source_dir(root, name)), encoder,
                                                                    s.options))
        delta = gen.delta_dir(name)
        out[name] = source.use_generation(str(delta) if delta else None, gen.hidden) if gen.number else source
    return out


def current_generation(config: EorConfig) -> Generation:
    return generations.current(index_path(config.index.name))


def generation_of(config: EorConfig) -> int:
    """The published generation's number (a cheap read: the service asks once a second)."""
    return generations.current_number(index_path(config.index.name))


def update_index(name: str, encoder: Encoder, added: Iterable[Document] = (), deleted: Iterable[str] = (),
                 sources: Mapping[str, SourceConfig] | None = None, merge_above: int = MERGE_ABOVE) -> dict:
    """`eor index add/delete`: a new generation (every added document since the base, the ids hidden
    from it, each source's delta), published as the one that serves; then, once `merge_above`
    documents were added or deleted since the base, merged into a new base (`merge_index`)."""
    root = index_path(name)
    if not (root / "index.json").exists():
        raise ValueError(f"no index {name!r} at {root} to change: build it with `eor index` first")
    sources = sources or IndexConfig().sources
    gen = generations.current(root)
    docs, hidden = generations.next_changes(gen, added, deleted)
    n = gen.number + 1
    folder = generations.write(root, n, docs, hidden, {"documents": len(docs)}, base=gen.base)
    built = {}
    for source, conf, setting in _base_settings(root, gen, sources, encoder):
        previous = gen.delta_dir(source)
        built[source] = source_class(conf.backend).build_delta(docs, setting, str(folder / source.lower()),
                                                               str(previous) if previous else None)
    generations.publish(root, n)
    info = {"generation": n, "documents_added": len(docs), "ids_hidden": len(hidden), "sources": _scalars(built)}
    if len(hidden) >= merge_above:  # every added id is hidden too (replacing any base version): the changes made
        info["merged"] = merge_index(name, encoder, sources)
    return info


def merge_index(name: str, encoder: Encoder, sources: Mapping[str, SourceConfig] | None = None) -> dict:
    """`eor index merge`: the serving generation folded into a new base (each source's
    `merge_generation`: the dense vectors copied, the pages indexed again), published as the next
    generation, with no delta and nothing hidden. Nothing to merge: the generation as it is."""
    root = index_path(name)
    gen = generations.current(root)
    if not gen.hidden:
        return {"generation": gen.number, "sources": {}}
    n = gen.number + 1
    base = generations.merged_base(n)
    generations.write(root, n, [], set(), {"documents": 0, "merged_from": gen.number}, base=base)
    built = {}
    for source, conf, setting in _base_settings(root, gen, sources or IndexConfig().sources, encoder):
        out = root / base / source.lower()
        shutil.rmtree(out, ignore_errors=True)  # what an earlier, unpublished try of this generation left
        delta = gen.delta_dir(source)
        built[source] = source_class(conf.backend).merge_generation(setting, str(delta) if delta else None,
                                                                    gen.hidden, str(out))
    generations.publish(root, n)
    return {"generation": n, "sources": _scalars(built)}


def _base_settings(root: Path, gen: Generation, sources: Mapping[str, SourceConfig], encoder: Encoder):
    """(name, its config line, its SourceSetting at `gen`'s base) for each source."""
    for source, conf in sources.items():
        yield source, conf, SourceSetting(source, str(gen.source_dir(root, source)), encoder, conf.options)


def _scalars(built: Mapping[str, dict | None]) -> dict:
    """Each source's summary for the report: its plain values, a source with none left out."""
    return {source: {k: v for k, v in summary.items() if isinstance(v, (int, float, str))}
            for source, summary in built.items() if summary is not None}


def source_shapes(config: EorConfig) -> dict[str, str]:
    """Each configured source's hit shape (retrievers/sources/base.py), from its class alone: what
    the service's ingress and retriever actors, which hold no source, need to process its hits."""
    return {name: source_class(s.backend).shape for name, s in config.index.sources.items()}


def make_reader(engine: ReaderEngine, config: EorConfig) -> CachedReader:
    cache = None
    if config.cache.enabled:
        cache = ReaderCache(config.cache.path or cache_path())
    return CachedReader(engine, cache)


def import_factory(path: str) -> Any:
    """A `module:callable` named in the config (service.engine_factory / sources_factory)."""
    module, _, attr = path.partition(":")
    if not module or not attr:
        raise ValueError(f"expected 'module:callable', got {path!r}")
    return getattr(importlib.import_module(module), attr)


def make_engine(config: EorConfig, continuous: bool = False, reader: str = "") -> ReaderEngine:
    """The engine of the reader named `reader` ("": the default one): vLLM's offline engine
    in-process (`eor ask`, fit, eval), its continuously batching AsyncLLM in the service;
    `service.engine_factory` replaces both (it gets the config with that reader's settings as
    `reader`)."""
    settings = reader_config(config, reader)
    if config.service.engine_factory:
        from dataclasses import replace

        return import_factory(config.service.engine_factory)(replace(config, reader=settings))
    from serve.engine.vllm_engine import AsyncVLLMEngine, VLLMEngine

    return AsyncVLLMEngine(settings) if continuous else VLLMEngine(settings)


def make_service_sources(config: EorConfig) -> tuple[dict, Any]:
    """(sources, encoder) for a Source deployment; `service.sources_factory` replaces them."""
    if config.service.sources_factory:
        return import_factory(config.service.sources_factory)(config)
    encoder = Encoder(config.index.encoder)
    return make_sources(config, encoder), encoder


def encoding_source(names: Iterable[str]) -> str | None:
    """The service's source that also serves @RR's encoder: the first of `names`, the configured
    sources in their order (`index.sources`, one Source deployment each); the others never load
    it, so a Lucene source's process holds no torch model."""
    return next(iter(names), None)


def runnable_config(config: EorConfig) -> tuple[EorConfig, list[str]]:
    """For the commands that answer (eor ask, eor serve): the config without the members of a
    reader whose packaged model is not prepared on this machine (the voter then runs its
    single-reader fallback, or refuses in one line), and a line saying so and how to add them.
    The default reader's members always stay (nothing answers without it: its own clear error)."""
    from dataclasses import replace

    from retrievers.spec import by_reader
    from serve.engine.models import PACKAGED_MODELS, resolve_model

    missing = {}
    for name, members in by_reader(config.pool.specs).items():
        model = reader_config(config, name).model
        if name and model in PACKAGED_MODELS:
            try:
                resolve_model(model)
            except FileNotFoundError:
                missing[name] = (model, members)
    left = [s for s in config.pool.specs if not any(s in m for _, m in missing.values())]
    if not missing or not left:
        return config, []
    notes = [f"reader {name} ({model}) is not prepared on this machine: its {len(members)} retriever"
             f"{'s' if len(members) != 1 else ''} left out (`eor models prepare {model}` adds them)"
             for name, (model, members) in missing.items()]
    return replace(config, pool=replace(config.pool, specs=tuple(left))), notes


def make_pool(config: EorConfig, engine: ReaderEngine | None = None) -> RetrieverPool:
    """The pool over the configured sources, with an engine for each reader its members name
    (`engine`, if given, is the default reader's); every engine starts on its first prompt."""
    encoder = Encoder(config.index.encoder)
    reader = make_reader(engine or make_engine(config), config)
    others = {name: make_reader(make_engine(config, reader=name), config) for name in used_readers(config) if name}
    return RetrieverPool(config.pool, make_sources(config, encoder), encoder, reader, others)


def close_engines(pool: RetrieverPool, keep: Collection[str] = ()) -> None:
    """Stop every reader engine of the pool now (their worker processes), not at interpreter exit,
    but those of the readers named in `keep` ("": the default); a later call (an NLI judge) starts
    the default one again."""
    for name, reader in pool.readers.items():
        if name not in keep:
            reader.engine.close()


def pool_reader_models(pool: RetrieverPool) -> dict[str, str]:
    """The pool's readers, name -> model id ("": the default): what a voter is checked against
    (voter/question_vote.py: choose_voter) and what `eor fit` records."""
    return {name: reader.model_id for name, reader in pool.readers.items()}
