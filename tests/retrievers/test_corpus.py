"""Corpus reading and the two text shapes: ~100-word passages (Wiki) and pages (SE)."""
from __future__ import annotations

import json

import pytest

from retrievers.corpus import (Document, Page, base_id, embedded_corpus_path, read_corpus,
                               read_embedded, read_jsonl, split_words, to_pages, to_passages,
                               truncate_words)


def words(n: int, prefix: str = "w") -> str:
    return " ".join(f"{prefix}{i}" for i in range(n))


# ---- split_words / truncate_words --------------------------------------------------------
def test_split_short_text_is_one_chunk_with_whitespace_normalised():
    assert split_words("  a  b\n c\t", 100) == ["a b c"]
    assert split_words("", 100) == []
    assert split_words("   \n ", 100) == []


def test_split_up_to_one_and_a_half_chunks_stays_whole():
    assert split_words(words(150), 100) == [words(150)]


def test_split_long_text_into_chunks_of_the_given_size():
    chunks = split_words(words(300), 100)
    assert [len(c.split()) for c in chunks] == [100, 100, 100]
    assert " ".join(chunks) == words(300)


def test_split_keeps_a_tail_of_at_least_half_a_chunk():
    assert [len(c.split()) for c in split_words(words(160), 100)] == [100, 60]
    assert [len(c.split()) for c in split_words(words(250), 100)] == [100, 100, 50]


def test_split_merges_a_short_tail_into_the_chunk_before():
    chunks = split_words(words(240), 100)
    assert [len(c.split()) for c in chunks] == [100, 140]
    assert " ".join(chunks) == words(240)  # nothing lost, order kept


def test_truncate_words():
    assert truncate_words(words(10), 3) == "w0 w1 w2"
    assert truncate_words(words(3), 3) == words(3)
    short = "keep   my  spacing"
    assert truncate_words(short, 5) == short


def test_a_cut_keeps_the_texts_own_whitespace_so_a_shorter_cut_is_a_prefix_of_a_longer():
    page = "Title line\nfirst  record here.\n\nsecond record\tthere and more words\n"
    assert truncate_words(page, 4) == "Title line\nfirst  record"
    assert truncate_words(page, 9).startswith(truncate_words(page, 4))
    assert truncate_words(page, 11) == page == truncate_words(page, 50)  # no more words: untouched
    assert truncate_words(page, 0) == ""
    # the run logs before 2026-11-26: the kept words joined by single spaces
    assert truncate_words(page, 4, "collapse") == "Title line first record"
    assert truncate_words(page, 11, "collapse") == page


# ---- passages and pages ------------------------------------------------------------------
def test_to_passages_keeps_ids_of_documents_that_fit():
    docs = [Document("a", "A", words(80)), Document("b", "B", words(150))]
    out = list(to_passages(docs, 100))
    assert [(d.doc_id, d.title) for d in out] == [("a", "A"), ("b", "B")]
    assert out[1].text == words(150)


def test_to_passages_numbers_chunks_of_split_documents():
    docs = [Document("long", "L", words(240)), Document("x", "X", words(5))]
    out = list(to_passages(docs, 100))
    assert [d.doc_id for d in out] == ["long#0", "long#1", "x"]
    assert all(d.title == "L" for d in out[:2])
    assert [len(d.text.split()) for d in out[:2]] == [100, 140]  # the 40-word tail was merged
    assert [base_id(d.doc_id) for d in out] == ["long", "long", "x"]


def test_to_passages_drops_empty_documents():
    assert list(to_passages([Document("e", "E", "  ")], 100)) == []


def test_to_pages_groups_by_title_in_first_seen_order():
    docs = [Document("1", "Paris", "Paris is a city."), Document("2", "Rome", "Rome is old."),
            Document("3", "Paris", "It is in France."), Document("4", "", "No title here.")]
    pages = to_pages(docs)
    assert pages == [
        Page("page-0", "Paris", "Paris is a city.\nIt is in France.", ("1", "3")),
        Page("page-1", "Rome", "Rome is old.", ("2",)),
        Page("page-2", "4", "No title here.", ("4",)),  # untitled: its own page, named by its id
    ]


def test_base_id():
    assert base_id("doc-1#3") == "doc-1"
    assert base_id("doc-1") == "doc-1"


# ---- reading -----------------------------------------------------------------------------
def test_read_jsonl_reads_records_and_skips_blank_lines(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text(json.dumps({"id": 7, "title": "T", "text": "hello", "source": "x"}) + "\n\n"
                    + json.dumps({"id": "b", "text": "no title"}) + "\n", encoding="utf-8")
    assert list(read_jsonl(path)) == [Document("7", "T", "hello"), Document("b", "", "no title")]
    assert list(read_corpus(path)) == list(read_jsonl(path))


@pytest.mark.parametrize("bad", ['{"id": "x", "text": ', '{"title": "no id", "text": "t"}',
                                 '{"id": "x", "title": "no text"}', '["a", "list"]', '"a string"', "42"])
def test_read_jsonl_error_names_the_line(tmp_path, bad):
    path = tmp_path / "c.jsonl"
    good = json.dumps({"id": "a", "title": "A", "text": "fine"})
    path.write_text(f"{good}\n{good}\n\n{bad}\n{good}\n", encoding="utf-8")
    with pytest.raises(ValueError, match=rf"c\.jsonl:4\b"):
        list(read_jsonl(path))


def test_embedded_corpus_has_10033_documents_with_text():
    path = embedded_corpus_path()
    assert path.name == "summaries_en-us.json" and path.exists()
    docs = list(read_embedded())
    assert len(docs) == 10_033
    assert all(d.text.strip() and d.title for d in docs)
    assert len({d.doc_id for d in docs}) == 10_033
    assert docs[0].doc_id == "vital-0"
    assert docs[0].title == "20th-century classical music"
    assert docs[0].text.startswith("20th-century classical music is Western art music")
    assert read_corpus(None).__next__() == docs[0]


def test_a_gzipped_corpus_reads_as_the_plain_one_and_a_corpus_reads_again(tmp_path):
    import gzip

    from retrievers.corpus import Corpus

    lines = "".join(json.dumps({"id": f"d{i}", "title": "T", "text": f"text {i}"}) + "\n" for i in range(3))
    (tmp_path / "c.jsonl").write_text(lines)
    with gzip.open(tmp_path / "c.jsonl.gz", "wt") as f:
        f.write(lines)
    assert list(read_jsonl(tmp_path / "c.jsonl.gz")) == list(read_jsonl(tmp_path / "c.jsonl"))
    corpus = Corpus(str(tmp_path / "c.jsonl.gz"))
    assert [d.doc_id for d in corpus] == [d.doc_id for d in corpus] == ["d0", "d1", "d2"]
    assert corpus.identity().startswith(str((tmp_path / "c.jsonl.gz").resolve()) + "|")


def test_pages_grouped_on_disk_are_the_pages_grouped_in_memory(tmp_path):
    from retrievers.corpus import iter_pages

    docs = [Document(f"d{i}", f"T{i % 4}" if i % 5 else "", f"text {i}") for i in range(30)]
    assert list(iter_pages(docs, tmp_path / "scratch.sqlite")) == to_pages(docs)
