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


def test_the_decorator_form_refuses_a_name_twice_and_unknown_names_are_value_errors_too():
    reg = Registry("widget")

    @reg.entry("thing")
    def make(size: int = 1) -> Thing:
        return Thing(size)

    assert reg.create("thing", size=2).size == 2
    with pytest.raises(ValueError, match="widget 'thing' already registered"):
        reg.entry("thing")(Thing)
    with pytest.raises(ValueError) as err:  # config checks catch ValueError
        reg.get("nope")
    assert str(err.value) == "unknown widget 'nope'; known: thing"  # no quotes around it


def test_the_voters_metrics_and_poolings_are_registries():
    from voter.pooling import POOLINGS
    from voter.similarity import METRICS

    assert isinstance(METRICS, Registry) and isinstance(POOLINGS, Registry)
    assert {"em", "bertscore"} <= set(METRICS.names()) and "mean" in POOLINGS.names()


def test_a_configured_source_names_a_registered_backend_or_a_class_by_reference():
    from retrievers.registry import UnknownName, source_class
    from retrievers.sources.web_search import WebSearchSource
    from tests.retrievers.fakes import KeywordSource

    assert source_class("http") is WebSearchSource
    assert source_class("tests.retrievers.fakes:KeywordSource") is KeywordSource  # a plug-in, unregistered
    assert "tests.retrievers.fakes:KeywordSource" not in SOURCE_BACKENDS.names()
    with pytest.raises(UnknownName, match="unknown knowledge-source backend 'toy'; known: dense, http, lucene"):
        source_class("toy")
    with pytest.raises(UnknownName, match="'tests.retrievers.fakes:Nope' cannot be imported"):
        source_class("tests.retrievers.fakes:Nope")
