"""Wiki: a real faiss index over real passages, searched with the real encoder; @RR's cosine."""
from __future__ import annotations

import json

import numpy as np
import pytest

from retrievers.corpus import Document, base_id, to_passages
from retrievers.sources.base import MissingIndexError
from retrievers.sources.dense import DenseSource, build_dense_index, cosine_rerank
from retrievers.sources.dense_build import META_FILE, SHARDS_DIR, index_file
from retrievers.sources.passage_store import read_shard
from retrievers.types import Passage

from tests.retrievers.fakes import recall_at


class LetterEncoder:
    """A tiny deterministic encoder: normalised letter counts (a-z)."""

    name = "letters"
    corpus_kind = "letters"

    def load(self):
        return self

    def release_corpus(self):
        pass

    def encode(self, texts, show_progress=False):
        out = np.zeros((len(texts), 26), dtype=np.float32)
        for i, t in enumerate(texts):
            for ch in t.lower():
                if "a" <= ch <= "z":
                    out[i, ord(ch) - 97] += 1
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.where(norms == 0, 1, norms)

    encode_corpus = encode


def test_cosine_rerank_orders_by_similarity_and_keeps_ties_stable():
    ps = [Passage("a", "", "zzz", "SE", 9.0), Passage("b", "", "abc", "SE"), Passage("c", "", "bca", "Wiki"),
          Passage("d", "", "ab", "SE")]
    out = cosine_rerank(LetterEncoder(), "abc", ps)
    assert [p.pid for p in out] == ["b", "c", "d", "a"]  # b and c tie at 1.0: input order kept
    assert [round(p.score, 4) for p in out] == [1.0, 1.0, round(2 / np.sqrt(6), 4), 0.0]
    assert [p.source for p in out] == ["SE", "Wiki", "SE", "SE"]
    assert cosine_rerank(LetterEncoder(), "abc", []) == []


def test_build_writes_index_passages_and_meta(tmp_path):
    docs = [Document("a", "Alpha", "apple " * 240), Document("b", "Beta", "banana split")]
    meta = build_dense_index(docs, tmp_path / "idx", LetterEncoder())
    assert meta["passages"] == 3 and meta["factory"] == "Flat"  # a#0, a#1 and b; exact while small
    assert (tmp_path / "idx" / META_FILE).exists() and (tmp_path / "idx" / index_file(0)).exists()
    assert [d.doc_id for d in read_shard(tmp_path / "idx" / SHARDS_DIR, 0)] == ["a#0", "a#1", "b"]
    saved = json.loads((tmp_path / "idx" / META_FILE).read_text())
    assert (saved["encoder"], saved["passages"], saved["passage_words"]) == ("letters", 3, 100)
    src = DenseSource(str(tmp_path / "idx"), LetterEncoder())
    (row,) = src.search(["banana"], 10)  # k beyond the index size: only what exists
    assert [p.pid for p in row][0] == "b" and len(row) == 3
    assert all(p.source == "Wiki" for p in row)
    assert src.search([], 5) == []


def test_an_index_built_with_another_encoder_is_refused_naming_both(tmp_path):
    build_dense_index([Document("a", "Alpha", "apple pie")], tmp_path / "idx", LetterEncoder())

    class OtherEncoder(LetterEncoder):
        name = "package:other"

    with pytest.raises(ValueError, match="built with encoder 'letters'.*'package:other'"):
        DenseSource(str(tmp_path / "idx"), OtherEncoder()).load()


def test_an_unfinished_or_old_index_names_the_command_that_builds_it(tmp_path):
    build_dense_index([Document("a", "Alpha", "apple pie")], tmp_path / "idx", LetterEncoder())
    (tmp_path / "idx" / META_FILE).unlink()  # a build killed before its end
    with pytest.raises(MissingIndexError, match="unfinished build.*eor index.*resumes"):
        DenseSource(str(tmp_path / "idx"), LetterEncoder()).load()
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / META_FILE).write_text(json.dumps({"encoder": "letters", "passages": 1}))
    with pytest.raises(MissingIndexError, match="older eor: rebuild it with `eor index`"):
        DenseSource(str(tmp_path / "old"), LetterEncoder()).load()


def test_missing_index_names_the_command_that_builds_it(tmp_path):
    src = DenseSource(str(tmp_path / "nowhere"), LetterEncoder())
    with pytest.raises(MissingIndexError, match="eor index") as err:
        src.search(["anything"], 3)
    assert isinstance(err.value, FileNotFoundError)
    assert str(tmp_path / "nowhere") in str(err.value)


@pytest.mark.slow
def test_real_dense_index_passages(dense_index_dir, data_slice):
    rows = [d.doc_id for d in read_shard(dense_index_dir / SHARDS_DIR, 0)]
    assert rows == [p.doc_id for p in to_passages(data_slice.docs)]
    assert any("#" in r for r in rows)  # long XQuAD paragraphs were split


@pytest.mark.slow
def test_real_dense_search_finds_the_gold_passages(dense_source, data_slice):
    qs = data_slice.questions
    rows = dense_source.search([q["question"] for q in qs], 10)
    assert len(rows) == len(qs) == 40
    for row in rows:
        assert len(row) == 10
        assert all(p.source == "Wiki" for p in row)
        scores = [p.score for p in row]
        assert scores == sorted(scores, reverse=True)
    recall = recall_at([{base_id(p.pid) for p in row} for row in rows], qs)
    assert recall >= 0.6, f"Wiki Recall@10 = {recall:.2f}"
    # batch-first: a batched search equals the searches one by one
    single = dense_source.search([qs[3]["question"]], 10)[0]
    assert [p.pid for p in single] == [p.pid for p in rows[3]]
