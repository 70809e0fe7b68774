"""The name -> class registry with lazy imports."""
from __future__ import annotations

import sys

import pytest

from retrievers.registry import SOURCE_BACKENDS, Registry


class Thing:
    def __init__(self, size: int = 1):
        self.size = size


def test_register_get_create():
    reg = Registry("widget")
    reg.register("thing", Thing)
    reg.register("lazy", "tests.retrievers.test_registry:Thing")
    assert reg.names() == ["lazy", "thing"]
    assert reg.get("thing") is Thing and reg.get("lazy") is Thing
    made = reg.create("lazy", size=3)
    assert isinstance(made, Thing) and made.size == 3


def test_unknown_name_is_a_key_error_listing_the_known_ones():
    reg = Registry("widget")
    reg.register("a", Thing)
    with pytest.raises(KeyError, match=r"unknown widget 'b'; known: a"):
        reg.get("b")


def test_lazy_entries_import_only_when_asked(monkeypatch):
    monkeypatch.delitem(sys.modules, "json.tool", raising=False)
    reg = Registry("widget")
    reg.register("tool", "json.tool:main")
    assert "json.tool" not in sys.modules
    assert callable(reg.get("tool")) and "json.tool" in sys.modules


def test_source_backends_are_registered():
    assert SOURCE_BACKENDS.names() == ["dense", "http", "lucene"]
    from retrievers.sources.dense import DenseSource
    from retrievers.sources.lucene import LuceneSource

    assert SOURCE_BACKENDS.get("dense") is DenseSource
    assert SOURCE_BACKENDS.get("lucene") is LuceneSource
    se = SOURCE_BACKENDS.create("lucene", index_dir="/nonexistent")  # cheap constructor: no I/O yet
    assert se.name == "SE"
