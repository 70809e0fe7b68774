"""The one registry helper: name -> class or factory, with lazy imports, so configs name
components and heavy modules load only when used. The knowledge-source backends, the voter's
similarity metrics and its poolings are Registries. (The bench's perturbations keep their own
table: the bench is a client that imports no server package.)"""
from __future__ import annotations

import importlib
from typing import Any, Callable


class UnknownName(KeyError, ValueError):
    """A name nothing is registered under: a KeyError to lookups, a ValueError to config checks."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class Registry:
    def __init__(self, kind: str):
        self.kind = kind
        self._entries: dict[str, Any] = {}

    def register(self, name: str, target: Any) -> None:
        """`target` is a class, a factory or a lazy "module:Class" reference."""
        self._entries[name] = target

    def entry(self, name: str) -> Callable[[Any], Any]:
        """Decorator form: `@METRICS.entry("em")` registers the function or class it decorates;
        a name registered twice is an error (two modules claiming one name)."""
        def deco(target: Any) -> Any:
            if name in self._entries:
                raise ValueError(f"{self.kind} {name!r} already registered")
            self._entries[name] = target
            return target
        return deco

    def names(self) -> list[str]:
        return sorted(self._entries)

    def get(self, name: str) -> Any:
        if name not in self._entries:
            raise UnknownName(f"unknown {self.kind} {name!r}; known: {', '.join(self.names())}")
        target = self._entries[name]
        if isinstance(target, str):
            module, attr = target.split(":")
            target = getattr(importlib.import_module(module), attr)
            self._entries[name] = target
        return target

    def create(self, name: str, **kwargs: Any) -> Any:
        return self.get(name)(**kwargs)


# The classes a config's `index.sources` line may name (retrievers/sources/base.py: KnowledgeSource).
SOURCE_BACKENDS = Registry("knowledge-source backend")
SOURCE_BACKENDS.register("dense", "retrievers.sources.dense:DenseSource")
SOURCE_BACKENDS.register("lucene", "retrievers.sources.lucene:LuceneSource")
SOURCE_BACKENDS.register("http", "retrievers.sources.web_search:WebSearchSource")


def is_reference(backend: str) -> bool:
    """A "module:Class" reference rather than a registered name."""
    module, _, attr = backend.partition(":")
    return bool(module and attr)


def source_class(backend: str) -> Any:
    """The class a configured source names: a registered backend, or a "module:Class" reference
    to one outside eor (a plug-in: every process of the service imports it from the config, as
    it does the engine factory). Only the operator's config names a class; requests never do."""
    if backend in SOURCE_BACKENDS.names() or not is_reference(backend):
        return SOURCE_BACKENDS.get(backend)
    module, attr = backend.split(":", 1)
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise UnknownName(f"knowledge-source backend {backend!r} cannot be imported: {exc}") from None
