"""Index generations: add, replace and delete documents without a rebuild (the dense source with a
stand-in encoder; Lucene for real, slow), and the generation a reader sees is whole."""
from __future__ import annotations

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
    source_cls.build_delta(docs, setting, str(folder / setting.name.lower()))
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
