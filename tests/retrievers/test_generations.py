"""Index generations: add, replace and delete documents without a rebuild (the dense source with a
stand-in encoder; Lucene for real, slow), and the generation a reader sees is whole."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from retrievers.corpus import Document
from retrievers.sources import generations
from retrievers.sources.base import SourceSetting
from retrievers.sources.dense import DenseSource
from retrievers.sources.dense_build import DenseIndexSettings, build_dense_index

from tests.retrievers.test_dense_build import HashEncoder, corpus

SETTINGS = DenseIndexSettings(shard_passages=16, recall_queries=20)


def change(root, source_cls, setting, added=(), deleted=()):
    """What serve/builder.py's update_index does for one source."""
    gen = generations.current(root)
    docs, hidden = generations.next_changes(gen, added, deleted)
    folder = generations.write(root, gen.number + 1, docs, hidden, {})
    previous = gen.delta_dir(setting.name)
    source_cls.build_delta(docs, setting, str(folder / setting.name.lower()), str(previous) if previous else None)
    generations.publish(root, gen.number + 1)
    return generations.current(root)


def serving(root, gen):
    src = DenseSource(str(root / "wiki"), HashEncoder(), settings=SETTINGS)
    delta = gen.delta_dir("Wiki")
    return src.use_generation(str(delta) if delta else None, gen.hidden).load()


def test_added_replaced_and_deleted_documents_are_served_without_a_rebuild(tmp_path):
    docs = corpus(60)
    build_dense_index(docs, tmp_path / "wiki", HashEncoder(), settings=SETTINGS)
    setting = SourceSetting("Wiki", str(tmp_path / "wiki"), HashEncoder(), {})
    assert generations.current(tmp_path).number == 0
    new = Document("new-1", "Zebra", "zq1 zq2 zq3 zq4 zq5")
    replaced = Document("d7", "Title 7", "zr1 zr2 zr3 zr4")
    gen = change(tmp_path, DenseSource, setting, added=[new, replaced])
    assert gen.number == 1 and gen.hidden == {"new-1", "d7"}
    src = serving(tmp_path, gen)
    (row,) = src.search(["zq1 zq2 zq3"], 3)
    assert row[0].pid == "new-1" and row[0].source == "Wiki"  # an added document is found
    (row,) = src.search(["zr1 zr2 zr3 zr4"], 3)
    assert row[0].pid == "d7" and row[0].text == replaced.text  # the new version of a replaced one
    old = docs[7].text
    assert all(p.text != old for r in src.search([old, docs[7].text[:40]], 60) for p in r)  # the old never

    gen = change(tmp_path, DenseSource, setting, deleted=["d3", "new-1"])
    src = serving(tmp_path, gen)
    hits = {p.pid for r in src.search([docs[3].text, "zq1 zq2 zq3"], 60) for p in r}
    assert "d3" not in hits and "new-1" not in hits and "d7" in hits  # deleted, whether base or added
    assert len(src.search([docs[3].text], 100)[0]) == 59  # 60 - d3 (d7 replaced, new-1 gone)
    assert [d.doc_id for d in gen.docs()] == ["d7"] and gen.hidden == {"new-1", "d7", "d3"}


def test_an_add_embeds_only_its_own_documents_the_earlier_ones_reused(tmp_path):
    build_dense_index(corpus(20), tmp_path / "wiki", HashEncoder(), settings=SETTINGS)
    encoder = HashEncoder()
    setting = SourceSetting("Wiki", str(tmp_path / "wiki"), encoder, {})
    first = [Document("a", "A", "qa1 qa2 qa3"), Document("b", "B", "qb1 qb2 qb3")]
    change(tmp_path, DenseSource, setting, added=first)
    assert encoder.embedded == 2
    gen = change(tmp_path, DenseSource, setting, added=[Document("c", "C", "qc1 qc2 qc3"),
                                                        Document("b", "B", "qb1 qb2 qb4")])
    assert encoder.embedded == 4  # c and the new b; a's vector reused from the previous delta
    src = serving(tmp_path, gen)
    assert [row[0].pid for row in src.search(["qa1 qa2 qa3", "qb1 qb2 qb4", "qc1 qc2"], 1)] == ["a", "b", "c"]


def test_a_reader_sees_the_published_generation_only(tmp_path):
    build_dense_index(corpus(20), tmp_path / "wiki", HashEncoder(), settings=SETTINGS)
    gen = generations.current(tmp_path)
    docs, hidden = generations.next_changes(gen, [Document("x", "X", "xx yy")], [])
    generations.write(tmp_path, 1, docs, hidden, {})
    assert generations.current(tmp_path).number == 0  # written, not yet published
    generations.publish(tmp_path, 1)
    assert generations.current(tmp_path).number == 1


@pytest.mark.slow
def test_lucene_generations_add_replace_and_delete(tmp_path):
    from retrievers.sources.lucene import LuceneSource, build_lucene_index

    base = [Document("a", "Apple", "apples grow on trees in orchards"), Document("b", "Banana", "bananas are yellow"),
            Document("c", "Cherry", "cherries are small red fruit")]
    build_lucene_index(base, tmp_path / "se", threads=1)
    setting = SourceSetting("SE", str(tmp_path / "se"), None, {})
    gen = change(tmp_path, LuceneSource, setting, added=[Document("d", "Durian", "durian smells strongly"),
                                                        Document("b", "Banana", "plantains are cooked bananas")],
                 deleted=["c"])
    delta = gen.delta_dir("SE")
    src = LuceneSource(str(tmp_path / "se")).use_generation(str(delta), gen.hidden).load()
    (row,) = src.search(["durian smells"], 3)
    assert row[0].title == "Durian"
    (row,) = src.search(["bananas"], 3)
    assert [p.text for p in row] == ["plantains are cooked bananas"]  # the replaced page, not the old one
    assert src.search(["cherries red fruit"], 3) == [[]]  # deleted
    (row,) = src.search(["apples orchards"], 3)
    assert row[0].title == "Apple"


def test_a_merged_generation_searches_as_a_fresh_build_of_the_same_documents(tmp_path):
    from retrievers.sources.dense_merge import merge_dense_index

    docs = corpus(60)
    build_dense_index(docs, tmp_path / "wiki", HashEncoder(), settings=SETTINGS)
    setting = SourceSetting("Wiki", str(tmp_path / "wiki"), HashEncoder(), {})
    new, replaced = Document("new-1", "Zebra", "zq1 zq2 zq3 zq4 zq5"), Document("d7", "Title 7", "zr1 zr2 zr3 zr4")
    gen = change(tmp_path, DenseSource, setting, added=[new, replaced], deleted=["d3"])
    meta = merge_dense_index(tmp_path / "wiki", gen.delta_dir("Wiki"), gen.hidden, tmp_path / "merged", SETTINGS)
    assert meta["passages"] == 60 and meta["merged"]["base_rows_left_out"] == 2  # - d3 - old d7 + new d7 + new-1
    final = [d for d in docs if d.doc_id not in {"d3", "d7"}] + [replaced, new]
    build_dense_index(final, tmp_path / "fresh", HashEncoder(), settings=SETTINGS)
    merged = DenseSource(str(tmp_path / "merged"), HashEncoder(), settings=SETTINGS).load()
    fresh = DenseSource(str(tmp_path / "fresh"), HashEncoder(), settings=SETTINGS).load()
    served = serving(tmp_path, gen)
    queries = [d.text for d in docs[:12]] + ["zq1 zq2", "zr1 zr3"]

    def hits(src):
        return [sorted((p.pid, p.text, round(p.score, 5)) for p in row) for row in src.search(queries, 8)]
    assert hits(merged) == hits(fresh) == hits(served)


def test_index_add_past_merge_above_publishes_a_merged_base(tmp_path, monkeypatch):
    from serve.builder import build_indexes, make_sources, update_index
    from serve.config import SourceConfig

    monkeypatch.setenv("EOR_HOME", str(tmp_path))
    sources = {"Wiki": SourceConfig.read("Wiki", {"backend": "dense", "options": {"shard_passages": 16}})}
    build_indexes(corpus(40), "t", HashEncoder(), show_progress=False, sources=sources)
    info = update_index("t", HashEncoder(), added=[Document("new-1", "Zebra", "zq1 zq2 zq3")], sources=sources,
                        merge_above=2)
    assert info["generation"] == 1 and "merged" not in info  # 1 change: a delta
    info = update_index("t", HashEncoder(), deleted=["d5"], sources=sources, merge_above=2)
    assert info["merged"]["generation"] == 3 and info["merged"]["sources"]["Wiki"]["passages"] == 40
    gen = generations.current(tmp_path / "indexes" / "t")
    assert gen.number == 3 and not gen.hidden and gen.docs() == [] and gen.base == "generations/00003/base"
    config = SimpleNamespace(index=SimpleNamespace(name="t", sources=sources))  # what make_sources reads
    src = make_sources(config, HashEncoder())["Wiki"].load()
    ids = {p.pid for row in src.search(["zq1 zq2 zq3", corpus(40)[5].text], 40) for p in row}
    assert "new-1" in ids and "d5" not in ids
    info = update_index("t", HashEncoder(), added=[Document("new-2", "Yak", "yy1 yy2")], sources=sources,
                        merge_above=2)  # built on the merged base
    gen = generations.current(tmp_path / "indexes" / "t")
    assert gen.base == "generations/00003/base" and gen.hidden == {"new-2"}
    src = make_sources(config, HashEncoder())["Wiki"].load()
    assert src.search(["yy1 yy2"], 1)[0][0].pid == "new-2"


@pytest.mark.slow
def test_a_merged_lucene_generation_regroups_pages_from_the_kept_records(tmp_path):
    from retrievers.sources.lucene import LuceneSource, build_lucene_index

    base = [Document("a1", "Apple", "apples grow on trees in orchards"), Document("a2", "Apple", "apple pie"),
            Document("b", "Banana", "bananas are yellow"), Document("c", "Cherry", "cherries are small red fruit")]
    build_lucene_index(base, tmp_path / "se", threads=1)
    setting = SourceSetting("SE", str(tmp_path / "se"), None, {})
    gen = change(tmp_path, LuceneSource, setting, added=[Document("d", "Durian", "durian smells strongly")],
                 deleted=["a2", "c"])
    served = LuceneSource(str(tmp_path / "se")).use_generation(str(gen.delta_dir("SE")), gen.hidden).load()
    assert served.search(["apples orchards"], 3) == [[]]  # a page holding a deleted record: hidden whole
    LuceneSource.merge_generation(setting, str(gen.delta_dir("SE")), gen.hidden, str(tmp_path / "merged"))
    merged = LuceneSource(str(tmp_path / "merged")).load()
    (row,) = merged.search(["apples orchards"], 3)
    assert row[0].title == "Apple" and row[0].text == "apples grow on trees in orchards"  # back, without a2
    assert merged.search(["cherries red fruit"], 3) == [[]]
    assert merged.search(["durian smells"], 3)[0][0].title == "Durian"


def test_the_reader_cache_never_serves_an_answer_read_from_a_deleted_passage(tmp_path):
    """The cache is keyed by the prompt, which holds the passages read: once a document is deleted,
    no search returns it, so no prompt holds it and no answer read from it comes back."""
    from retrievers.pool import PoolConfig, RetrieverPool
    from retrievers.reader import CachedReader, ReaderCache

    from tests.retrievers.fakes import FakeEngine

    docs = corpus(30) + [Document("zorb", "Zorblat", "zorblat lake is named for ilse zorblat the glassmaker")]
    build_dense_index(docs, tmp_path / "wiki", HashEncoder(), settings=SETTINGS)
    setting = SourceSetting("Wiki", str(tmp_path / "wiki"), HashEncoder(), {})
    cache = ReaderCache(tmp_path / "cache.sqlite")
    q = "which lake is named for ilse zorblat the glassmaker"

    def ask(gen):
        engine = FakeEngine()
        pool = RetrieverPool(PoolConfig(specs=("Wiki@1",)), {"Wiki": serving(tmp_path, gen)}, HashEncoder(),
                             CachedReader(engine, cache))
        (result,) = pool.run([q])
        return result, [p for ps, _ in engine.calls for p in ps]
    first, asked = ask(generations.current(tmp_path))
    assert asked and "zorblat lake" in asked[0]  # read from the passage, then cached
    again, asked = ask(generations.current(tmp_path))
    assert not asked and again.candidates[0].answer == first.candidates[0].answer  # the cache serves it
    gone, asked = ask(change(tmp_path, DenseSource, setting, deleted=["zorb"]))
    assert asked and all("zorblat lake" not in p for p in asked)  # a new prompt: asked afresh, without it
