"""SE (embedded): a real Lucene BM25 index over pages, built and searched through Anserini."""
from __future__ import annotations

import json
import os

import pytest

from retrievers.corpus import to_pages
from retrievers.java import anserini_jar, java_binary
from retrievers.sources.base import MissingIndexError
from retrievers.sources.lucene import LUCENE_DIR, PAGES_FILE, LuceneSource

from tests.retrievers.fakes import recall_at


def test_java_and_anserini_ship_in_packages():
    java = java_binary()
    assert os.path.isfile(java) and os.access(java, os.X_OK)
    assert anserini_jar().endswith("-fatjar.jar") and os.path.isfile(anserini_jar())


def test_missing_index_names_the_command_that_builds_it(tmp_path):
    src = LuceneSource(str(tmp_path / "nowhere"))
    with pytest.raises(MissingIndexError, match="eor index") as err:
        src.search(["anything"], 3)
    assert isinstance(err.value, FileNotFoundError)
    assert str(tmp_path / "nowhere") in str(err.value)


@pytest.mark.slow
def test_real_lucene_index_holds_pages_with_their_records(lucene_index_dir, data_slice):
    assert (lucene_index_dir / LUCENE_DIR).is_dir()
    rows = [json.loads(x) for x in (lucene_index_dir / PAGES_FILE).read_text().splitlines()]
    pages = to_pages(data_slice.docs)
    assert [(r["id"], r["title"], tuple(r["members"])) for r in rows] == [
        (p.page_id, p.title, p.member_ids) for p in pages]
    assert len(rows) < len(data_slice.docs)
    assert max(len(r["members"]) for r in rows) > 1  # several paragraphs of one article: one page


@pytest.mark.slow
def test_real_lucene_search_finds_the_gold_records(lucene_source, data_slice):
    qs = data_slice.questions
    rows = lucene_source.search([q["question"] for q in qs], 10)
    assert len(rows) == 40
    pages = {p.page_id: p for p in to_pages(data_slice.docs)}
    for row in rows:
        assert 0 < len(row) <= 10
        assert all(p.source == "SE" for p in row)
        scores = [p.score for p in row]
        assert scores == sorted(scores, reverse=True)
        for p in row:  # a hit is a whole page, read back from the index
            assert (p.title, p.text) == (pages[p.pid].title, pages[p.pid].text)
    members = {pid: p.member_ids for pid, p in pages.items()}
    recall = recall_at([{m for p in row for m in members[p.pid]} for row in rows], qs)
    assert recall >= 0.6, f"SE Recall@10 = {recall:.2f}"


@pytest.mark.slow
def test_real_lucene_search_takes_any_question_text(lucene_source):
    rows = lucene_source.search(['what is "AND" (OR) title:foo* [1 TO 2] ~ ^ - ! ?', "the of a", "zzqxj"], 5)
    assert len(rows) == 3
    assert rows[1] == [] and rows[2] == []  # stop words only; an unknown word
    assert all(len(r) <= 5 for r in rows)
