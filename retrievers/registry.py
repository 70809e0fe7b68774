"""A small name -> class registry with lazy imports, so configs name components and heavy
modules load only when used."""
from __future__ import annotations

import importlib
from typing import Any


class Registry:
    def __init__(self, kind: str):
        self.kind = kind
        self._entries: dict[str, str | type] = {}

    def register(self, name: str, target: str | type) -> None:
        """`target` is a class or a lazy "module:Class" reference."""
        self._entries[name] = target

    def names(self) -> list[str]:
        return sorted(self._entries)

    def get(self, name: str) -> type:
        if name not in self._entries:
            raise KeyError(f"unknown {self.kind} {name!r}; known: {', '.join(self.names())}")
        target = self._entries[name]
        if isinstance(target, str):
            module, attr = target.split(":")
            target = getattr(importlib.import_module(module), attr)
            self._entries[name] = target
        return target

    def create(self, name: str, **kwargs: Any) -> Any:
        return self.get(name)(**kwargs)


SOURCE_BACKENDS = Registry("knowledge-source backend")
SOURCE_BACKENDS.register("dense", "retrievers.sources.dense:DenseSource")
SOURCE_BACKENDS.register("lucene", "retrievers.sources.lucene:LuceneSource")
SOURCE_BACKENDS.register("http", "retrievers.sources.web_search:WebSearchSource")
