"""An open source set (issue 35, item 6): a knowledge source is one class plus one config line.

The toy (tests/retrievers/fakes.py: KeywordSource, a few in-memory passages ranked by shared
words) is added by a line in `index.sources`, and a spec using it (`Toy@2`) is answered
in-process through the pool, by the service's own classes wired by in-memory handles, and
(slow) by the service under Ray Serve."""
from __future__ import annotations

import asyncio
import textwrap

import pytest

from protos import eor_pb2
from retrievers.registry import SOURCE_BACKENDS
from serve.config import config_from_dict, load_config
from tests.retrievers.fakes import QUESTION, TOY_PASSAGES, FakeEngine, KeywordSource

TOY = "tests.retrievers.fakes:KeywordSource"  # the toy named by reference: every Ray actor imports it
FAKES = "tests.serve.service_fakes"
SPECS = ["Wiki@10", "SE@1", "Toy@2", "SE@1&Toy@1", "HB@RR@5", "ReFree"]


@pytest.fixture
def toy_backend(monkeypatch):
    """The toy registered by name ("toy") for this test only."""
    monkeypatch.setattr(SOURCE_BACKENDS, "_entries", dict(SOURCE_BACKENDS._entries))
    SOURCE_BACKENDS.register("toy", KeywordSource)


def _toy_settings(**service):
    return config_from_dict({
        "index": {"sources": {"Wiki": "dense", "SE": "lucene", "Toy": TOY}}, "pool": {"specs": SPECS},
        "voter": {"weights": "equal", "metrics": ["em"]}, "cache": {"enabled": False},
        "service": {"engine_factory": f"{FAKES}:make_engine", "sources_factory": f"{FAKES}:make_sources", **service}})


# ---- the config line ---------------------------------------------------------------------
def test_one_config_line_adds_a_registered_source_to_the_in_process_pool(toy_backend, tmp_path, monkeypatch):
    from serve.builder import make_pool

    monkeypatch.setenv("EOR_HOME", str(tmp_path))
    path = tmp_path / "eor.yaml"
    path.write_text(textwrap.dedent("""\
        index:
          sources:
            Toy: toy
        pool:
          specs: [Toy@2, HB@6, PK, ReFree]
        cache:
          enabled: false
        """))
    pool = make_pool(load_config(path), FakeEngine())
    toy = pool.sources["Toy"]
    assert isinstance(toy, KeywordSource) and toy.name == "Toy" and list(pool.sources) == ["Toy"]
    (result,) = pool.run([QUESTION])
    cands = {c.retriever: c for c in result.candidates}
    assert not result.failed and all(c.answer for c in result.candidates)
    assert [p.text for p in cands["Toy@2"].context.passages] == [TOY_PASSAGES[0][1], TOY_PASSAGES[1][1]]
    assert cands["Toy@2"].answer.startswith("ans-")  # the fake reader's answer to the toy's prompt
    # HB combines the configured sources: here PK's chunks, then the toy's passages
    assert [p.source for p in cands["HB@6"].context.passages] == ["PK"] * 2 + ["Toy"] * 4


def test_the_config_checks_the_sources_and_what_reads_them(toy_backend):
    ok = config_from_dict({"index": {"sources": {"Wiki": "dense", "SE": {"backend": "http", "options": {
        "fetch_pages": True}}, "Toy": "toy"}}, "pool": {"specs": ["Toy@2", "SE@1"]},
        "service": {"placement": {"Source_Toy": {"eor_worker": 1}}}})
    assert ok.index.sources["SE"].backend == "http" and ok.index.sources["SE"].options == {"fetch_pages": True}
    assert config_from_dict(ok.to_dict()) == ok
    assert config_from_dict({}).index.sources.keys() == {"Wiki", "SE"}  # the paper's two by default
    for bad, message in [
        ({"pool": {"specs": ["Toy@2"]}}, "pool.specs: unknown knowledge source 'Toy' in retriever spec 'Toy@2'"),
        ({"index": {"sources": {"Toy": "toys"}}, "pool": {"specs": ["PK"]}}, "unknown knowledge-source backend 'toys'"),
        ({"index": {"sources": {"PK": "toy"}}}, "index.sources: a knowledge source's name must be letters only"),
        ({"index": {"sources": {"Toy": {"backend": "toy", "k": 3}}}},
         "unknown key index.sources.Toy.k; known: backend, options"),
        ({"index": {"sources": {"Toy": ["toy"]}}}, "index.sources.Toy must be a backend name"),
        ({"service": {"placement": {"Source_Toy": {"eor_worker": 1}}}}, "unknown deployments ['Source_Toy']"),
    ]:
        with pytest.raises(ValueError) as err:
            config_from_dict(bad)
        assert message in str(err.value), str(err.value)


def test_a_source_class_is_built_from_its_line_with_its_folder_and_options(toy_backend, tmp_path, monkeypatch):
    from serve.builder import index_path, make_sources, source_shapes

    monkeypatch.setenv("EOR_HOME", str(tmp_path))
    config = config_from_dict({"index": {"sources": {"Wiki": "dense", "SE": "lucene", "Toy": {
        "backend": "toy", "options": {"passages": [["Only", "one passage"]]}}}}})
    sources = make_sources(config, encoder=None)
    assert list(sources) == ["Wiki", "SE", "Toy"] and [s.name for s in sources.values()] == ["Wiki", "SE", "Toy"]
    assert sources["Wiki"].index_dir == str(index_path("default") / "wiki")  # where `eor index` writes
    assert sources["SE"].index_dir == str(index_path("default") / "se")
    assert [p.text for p in sources["Toy"].search(["one"], 5)[0]] == ["one passage"]
    assert source_shapes(config) == {"Wiki": "passages", "SE": "pages", "Toy": "passages"}


# ---- the service's classes, wired by in-memory handles (no Ray) ------------------------------
class _Call:
    """A Serve response: awaited by the ingress, `.result()` in a retriever actor's thread."""

    def __init__(self, fn, args):
        self.fn, self.args = fn, args

    def _value(self):
        out = self.fn(*self.args)
        return asyncio.run(out) if asyncio.iscoroutine(out) else out

    def result(self, timeout_s=None):
        return self._value()

    def __await__(self):
        out = self.fn(*self.args)
        if asyncio.iscoroutine(out):
            return (yield from out.__await__())
        return out

    def cancel(self):
        pass


class _Handle:
    """A deployment handle over the deployment's own object, recording each call."""

    def __init__(self, target):
        self.target, self.calls = target, []

    def __getattr__(self, method):
        handle = self

        class Method:
            def remote(self, *args):
                handle.calls.append((method, args))
                return _Call(getattr(handle.target, method), args)
        return Method()


def test_the_service_searches_the_toy_once_and_answers_its_spec(tmp_path, monkeypatch):
    """One Ask through the ingress, a retriever actor, one Source deployment per configured source,
    the reader and the voter, as `build_app` wires them (`Source_Toy` beside `Source_Wiki` and
    `Source_SE`), with in-memory handles."""
    from retrievers.reader import CachedReader
    from serve.app.deployments import RetrieverGroup, Source, Voter
    from serve.app.ingress import EorIngress

    monkeypatch.setenv("EOR_HOME", str(tmp_path))
    settings = _toy_settings()
    sources = {name: _Handle(Source.func_or_class(settings, name)) for name in settings.index.sources}
    reader = _Handle(CachedReader(FakeEngine()))
    group = _Handle(RetrieverGroup.func_or_class(settings, SPECS, sources, reader))
    voter = _Handle(Voter.func_or_class(settings, reader))
    ingress = EorIngress.func_or_class(settings, [group], [SPECS], voter, reader, sources=sources)

    reply, code, details = asyncio.run(ingress.call("Ask", eor_pb2.AskRequest(question=QUESTION)))
    assert code.name == "OK", details
    assert [c.retriever for c in reply.candidates] == SPECS and not reply.missing
    assert all(not c.error and c.answer for c in reply.candidates)
    # the ingress searched each source once, the toy at the depth HB needs (pool.hb_wiki_k)
    searches = {name: [args[1] for m, args in h.calls if m == "search"] for name, h in sources.items()}
    assert searches == {"Wiki": [20], "SE": [10], "Toy": [20]}
    assert [m for m, _ in sources["Wiki"].calls].count("encode") > 0  # the first source serves @RR
    assert not [m for m, _ in sources["Toy"].calls if m == "encode"]
    # only the first configured source holds the @RR encoder; another asked to encode says so in one line
    assert [n for n, h in sources.items() if h.target.encoder is not None] == ["Wiki"]
    with pytest.raises(RuntimeError, match="source SE holds no encoder: @RR encodes with the first configured"):
        asyncio.run(sources["SE"].target.encode(["x"]))

    only, code, _ = asyncio.run(ingress.call("Ask", eor_pb2.AskRequest(question=QUESTION, retrievers=["Toy@2"])))
    assert code.name == "OK" and only.retriever == "Toy@2"
    assert [(p.source, p.text) for p in only.passages] == [("Toy", TOY_PASSAGES[0][1]), ("Toy", TOY_PASSAGES[1][1])]
    hits, code, _ = asyncio.run(ingress.call("Retrieve", eor_pb2.RetrieveRequest(questions=[QUESTION], sources=["Toy"],
                                                                                k=1)))
    assert code.name == "OK" and [p.title for p in hits.results[0].sources[0].passages] == ["Mona Lisa"]


def test_build_app_binds_one_source_deployment_per_configured_source():
    from serve.app.application import build_app

    bound = {}

    def walk(value):  # the bound deployments (Ray Serve keeps them in Application._bound_deployment)
        if hasattr(value, "_bound_deployment"):
            dep = value._bound_deployment
            bound.setdefault(dep.name, dep)
            walk(dep.init_args)
        elif isinstance(value, (list, tuple)):
            for v in value:
                walk(v)
        elif isinstance(value, dict):
            for v in value.values():
                walk(v)
    walk(build_app(_toy_settings(retriever_actors="one")))
    assert {"Source_Wiki", "Source_SE", "Source_Toy", "Retrievers_0", "Voter", "EorIngress"} <= set(bound)
    assert bound["Source_Toy"].init_args[1] == "Toy"
    group_sources = bound["Retrievers_0"].init_args[2]
    assert list(group_sources) == ["Wiki", "SE", "Toy"]
    assert group_sources["Toy"]._bound_deployment.name == "Source_Toy"


# ---- served: Ray Serve with fakes ------------------------------------------------------------
@pytest.mark.slow
def test_a_toy_source_is_served(tmp_path_factory, monkeypatch):
    """The service under Ray Serve (fake reader and sources, the toy built from its config line
    in its own `Source_Toy` deployment): Ask answers `Toy@2` from the toy, Retrieve searches it,
    Health places it."""
    import grpc

    from protos import eor_pb2_grpc
    from serve.app.application import LocalService

    monkeypatch.setenv("EOR_HOME", str(tmp_path_factory.mktemp("home")))
    settings = _toy_settings(port=0, metrics_port=0, retriever_actors="one", ask_deadline_s=60.0)
    with LocalService(settings) as svc, grpc.insecure_channel(svc.address) as ch:
        stub = eor_pb2_grpc.EorStub(ch)
        r = stub.Ask(eor_pb2.AskRequest(question=QUESTION), timeout=120)
        assert [c.retriever for c in r.candidates] == SPECS and not r.missing, r.missing
        only = stub.Ask(eor_pb2.AskRequest(question=QUESTION, retrievers=["Toy@2"]), timeout=60)
        assert [(p.source, p.title) for p in only.passages] == [("Toy", "Mona Lisa"), ("Toy", "Louvre")]
        hits = stub.Retrieve(eor_pb2.RetrieveRequest(questions=[QUESTION], sources=["Toy"], k=1), timeout=60)
        assert [p.title for p in hits.results[0].sources[0].passages] == ["Mona Lisa"]
        health = stub.Health(eor_pb2.HealthRequest(), timeout=60)
        assert any(p.startswith("Source_Toy: ") for p in health.placement), list(health.placement)


class IndexedToy(KeywordSource):
    """The toy with an index of its own: `build_index` writes its documents to its folder, where
    `from_setting` reads them back (one class: searching and building)."""

    @classmethod
    def build_index(cls, docs, setting, corpus_id="", embedder=None, progress=None):
        import json
        from pathlib import Path

        Path(setting.index_dir).mkdir(parents=True, exist_ok=True)
        rows = [[d.title, d.text] for d in docs]
        (Path(setting.index_dir) / "toy.json").write_text(json.dumps(rows))
        return {"documents": len(rows)}

    @classmethod
    def from_setting(cls, setting):
        import json
        from pathlib import Path

        return cls(setting.name, json.loads((Path(setting.index_dir) / "toy.json").read_text()))


def test_eor_index_builds_a_source_that_is_one_class_and_a_config_line(tmp_path, monkeypatch):
    from retrievers.corpus import Document
    from serve.builder import build_indexes, make_sources

    monkeypatch.setenv("EOR_HOME", str(tmp_path))
    config = config_from_dict({"index": {"name": "toy", "sources": {"Toy": "tests.serve.test_toy_source:IndexedToy"}},
                               "pool": {"specs": ["Toy@1", "ReFree"]}})
    docs = [Document("a", "Ants", "ants live in colonies"), Document("b", "Bees", "bees make honey")]
    info = build_indexes(docs, "toy", encoder=None, show_progress=False, sources=config.index.sources)
    assert info == {"sources": {"Toy": {"documents": 2}}}
    # a cluster's index files (`eor index --ray-address`): a build_index without the keyword is called as before
    assert build_indexes(docs, "toy", encoder=None, show_progress=False, sources=config.index.sources,
                         index_parts=lambda *a: iter(())) == info
    (row,) = make_sources(config, encoder=None)["Toy"].load().search(["who makes honey"], 1)
    assert (row[0].title, row[0].source) == ("Bees", "Toy")


def test_a_source_with_its_own_index_is_one_class_and_a_config_line_and_eor_index_builds_it(tmp_path, monkeypatch):
    import json

    from serve.builder import make_pool
    from serve.cli import main

    monkeypatch.setenv("EOR_HOME", str(tmp_path / "home"))
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps({"id": f"d{i}", "title": t, "text": x}) + "\n"
                              for i, (t, x) in enumerate(TOY_PASSAGES)))
    config = tmp_path / "eor.yaml"
    config.write_text(textwrap.dedent("""\
        index:
          name: mine
          sources:
            Toy: tests.retrievers.fakes:IndexedKeywordSource
        pool:
          specs: [Toy@2, ReFree]
        cache:
          enabled: false
        """))
    assert main(["index", "--config", str(config), "--corpus", str(corpus)]) == 0
    assert (tmp_path / "home" / "indexes" / "mine" / "toy" / "records.jsonl").exists()
    pool = make_pool(load_config(config), FakeEngine())
    (result,) = pool.run([QUESTION])
    toy = next(c for c in result.candidates if c.retriever == "Toy@2")
    assert [p.text for p in toy.context.passages] == [TOY_PASSAGES[0][1], TOY_PASSAGES[1][1]]
