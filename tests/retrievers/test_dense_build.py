"""The streaming dense build: shards, resume after a kill, refusal of another build, the index
chosen by size, the shard merge and passages read by row."""
from __future__ import annotations

import json
from dataclasses import dataclass, field, replace

import numpy as np
import pytest

from retrievers.corpus import Document
from retrievers.sources.dense import DenseSource
from retrievers.sources.dense_build import (BUILD_FILE, META_FILE, SHARDS_DIR, DenseIndexSettings, as_recorded,
                                            build_dense_index, load_vectors, recorded_corpus_kind, vectors_path,
                                            write_vectors)
from retrievers.sources.dense_index import sample_ids, sample_rows, split_rows
from retrievers.sources.passage_store import PassageStore, read_shard


class HashEncoder:
    """Deterministic 32-d vectors of word hashes; counts what it embedded."""

    name = "hashes"
    corpus_kind = "hashes"

    def __init__(self, fail_after: int | None = None):
        self.embedded = 0
        self.fail_after = fail_after

    def load(self):
        return self

    def release_corpus(self):
        pass

    def encode(self, texts, show_progress=False):
        out = np.zeros((len(texts), 32), dtype=np.float32)
        for i, t in enumerate(texts):
            for w in t.lower().split():
                out[i, sum(map(ord, w)) % 32] += 1
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-9)

    def encode_corpus(self, texts, show_progress=False):
        if self.fail_after is not None and self.embedded >= self.fail_after:
            raise KeyboardInterrupt("killed half-way")
        self.embedded += len(texts)
        return self.encode(texts)


def corpus(n: int) -> list[Document]:
    rng = np.random.default_rng(0)
    words = [f"w{i}" for i in range(500)]
    return [Document(f"d{i}", f"Title {i}", " ".join(rng.choice(words, 30))) for i in range(n)]


SMALL = DenseIndexSettings(shard_passages=10, recall_queries=50)


def test_a_killed_build_resumes_without_redoing_finished_shards_and_ends_with_the_same_index(tmp_path):
    docs = corpus(95)
    whole = build_dense_index(docs, tmp_path / "whole", HashEncoder(), settings=SMALL, corpus_id="c")
    with pytest.raises(KeyboardInterrupt):
        build_dense_index(docs, tmp_path / "resumed", HashEncoder(fail_after=40), settings=SMALL, corpus_id="c")
    folder = tmp_path / "resumed" / SHARDS_DIR
    assert [vectors_path(folder, i).exists() for i in range(10)] == [True] * 4 + [False] * 6
    assert not (tmp_path / "resumed" / META_FILE).exists()
    again = HashEncoder()
    resumed = build_dense_index(docs, tmp_path / "resumed", again, settings=SMALL, corpus_id="c")
    assert again.embedded == 55  # only the 6 shards not done: 5 of 10 passages and the last of 5
    assert resumed["passages"] == whole["passages"] == 95 and resumed["shards"] == 10
    for a, b in zip(load_vectors(tmp_path / "whole" / SHARDS_DIR, 10), load_vectors(folder, 10)):
        assert np.array_equal(a, b)
    q = HashEncoder().encode(["w1 w2 w3", "w400"])
    ra = DenseSource(str(tmp_path / "whole"), HashEncoder(), settings=SMALL).load()
    rb = DenseSource(str(tmp_path / "resumed"), HashEncoder(), settings=SMALL).load()
    assert [[p.pid for p in row] for row in ra.search(["w1 w2 w3", "w400"], 5)] == \
        [[p.pid for p in row] for row in rb.search(["w1 w2 w3", "w400"], 5)]
    assert q.shape == (2, 32)
    third = HashEncoder()  # finished: a third run does nothing
    assert build_dense_index(docs, tmp_path / "resumed", third, settings=SMALL, corpus_id="c") == resumed
    assert third.embedded == 0


def test_a_build_resumed_over_another_corpus_or_settings_is_refused_naming_what_differs(tmp_path):
    build_dense_index(corpus(12), tmp_path / "idx", HashEncoder(), settings=SMALL, corpus_id="a.jsonl|1|1")
    with pytest.raises(ValueError, match="other corpus.*'a.jsonl|1|1'.*--fresh"):
        build_dense_index(corpus(12), tmp_path / "idx", HashEncoder(), settings=SMALL, corpus_id="b.jsonl|1|1")
    with pytest.raises(ValueError, match="other passage_words"):
        build_dense_index(corpus(12), tmp_path / "idx", HashEncoder(), passage_words=50, settings=SMALL,
                          corpus_id="a.jsonl|1|1")
    assert json.loads((tmp_path / "idx" / BUILD_FILE).read_text())["fingerprint"]["corpus"] == "a.jsonl|1|1"


@dataclass
class ChoosingEncoder:
    """Chooses its corpus backend as `Encoder` does: "auto" is this machine's pick (`machine`)."""

    corpus_backend: str = "auto"
    machine: str = "onnx-int8"
    hashes: HashEncoder = field(default_factory=HashEncoder)
    name = "hashes"

    @property
    def corpus_kind(self):
        return self.machine if self.corpus_backend == "auto" else self.corpus_backend

    def encode_corpus(self, texts, show_progress=False):
        return self.hashes.encode_corpus(texts)

    def release_corpus(self):
        pass


def test_a_resume_on_a_machine_whose_auto_differs_embeds_with_the_recorded_backend(tmp_path):
    docs, out = corpus(35), tmp_path / "idx"
    assert recorded_corpus_kind(out) is None
    with pytest.raises(KeyboardInterrupt):
        build_dense_index(docs, out, ChoosingEncoder(machine="torch", hashes=HashEncoder(fail_after=20)),
                          settings=SMALL, corpus_id="c")
    assert recorded_corpus_kind(out) == "torch"
    here = ChoosingEncoder(machine="openvino-int8")
    assert as_recorded(here, out).corpus_kind == "torch" and here.corpus_kind == "openvino-int8"  # a copy
    meta = build_dense_index(docs, out, here, settings=SMALL, corpus_id="c")
    assert meta["corpus_backend"] == "torch" == recorded_corpus_kind(out) and here.hashes.embedded == 15
    named = ChoosingEncoder(corpus_backend="onnx-int8")  # asked for by name: as asked, never swapped
    assert as_recorded(named, out) is named
    with pytest.raises(ValueError, match="other corpus_backend.*'torch'"):
        build_dense_index(docs, tmp_path / "idx", named, settings=replace(SMALL, recall_queries=49), corpus_id="c")


def test_the_index_is_exact_below_the_size_and_an_ann_index_above_with_its_recall(tmp_path):
    docs = corpus(400)
    exact = build_dense_index(docs, tmp_path / "exact", HashEncoder(), settings=SMALL)
    assert exact["factory"] == "Flat" and exact["recall_at_10"] == 1.0 and exact["search"] == {}
    auto = DenseIndexSettings(shard_passages=64, exact_below=100, recall_queries=100)
    assert auto.factory_for(400) == "HNSW32,SQ8" and auto.factory_for(99) == "Flat"
    assert DenseIndexSettings().factory_for(1_000_000) == "HNSW32,SQ8"
    hnsw = build_dense_index(docs, tmp_path / "hnsw", HashEncoder(), settings=auto)
    assert hnsw["factory"] == "HNSW32,SQ8" and "efSearch" in hnsw["search"] and hnsw["recall_at_10"] >= 0.95
    import faiss

    from retrievers.sources.dense_build import index_file
    built = faiss.read_index(str(tmp_path / "hnsw" / index_file(0)))
    inner = faiss.downcast_index(built.index if hasattr(built, "id_map") else built)
    assert inner.hnsw.efConstruction == auto.ef_construction == 100  # the graph built as set, not faiss's 40
    with pytest.raises(ValueError, match="ef_construction"):
        DenseIndexSettings(ef_construction=0)
    ivf = DenseIndexSettings(shard_passages=64, recall_queries=100, target_recall=0.9, factory="IVF64,SQ8")
    meta = build_dense_index(docs, tmp_path / "ivf", HashEncoder(), settings=ivf)
    assert meta["factory"] == "IVF64,SQ8"
    assert meta["recall_at_10"] >= 0.9 and 1 <= meta["search"]["nprobe"] <= 64  # tuned to the target
    fixed = DenseIndexSettings(shard_passages=64, recall_queries=100, factory="IVF64,SQ8", nprobe=64)
    again = build_dense_index(docs, tmp_path / "ivf", HashEncoder(), settings=fixed)  # index step only
    assert again["search"] == {"nprobe": 64} and again["recall_at_10"] >= meta["recall_at_10"]


def test_index_shards_return_what_one_index_returns(tmp_path):
    docs = corpus(120)
    one = build_dense_index(docs, tmp_path / "one", HashEncoder(), settings=SMALL)
    three = build_dense_index(docs, tmp_path / "three", HashEncoder(),
                              settings=DenseIndexSettings(shard_passages=10, recall_queries=50, index_shards=3))
    assert [c for _, c in three["index_shards"]] == [40, 40, 40] and one["index_shards"] == [[0, 120]]
    qs = [f"w{i} w{i + 7} w{i * 3}" for i in range(20)]
    a = DenseSource(str(tmp_path / "one"), HashEncoder(), settings=SMALL).search(qs, 7)
    b = DenseSource(str(tmp_path / "three"), HashEncoder(), settings=SMALL).search(qs, 7)
    assert [[round(p.score, 5) for p in r] for r in a] == [[round(p.score, 5) for p in r] for r in b]

    def untied(row):  # passages whose score no other hit shares, nor the cut (faiss breaks ties its own way)
        scores = [round(p.score, 5) for p in row]
        return [p.pid for p, s in zip(row, scores) if scores.count(s) == 1 and s != scores[-1]]
    assert [untied(r) for r in a] == [untied(r) for r in b]
    assert sum(map(len, map(untied, a))) > 40, sum(map(len, map(untied, a)))


def test_an_ann_index_in_files_built_one_at_a_time_reports_the_recall_its_files_give(tmp_path):
    """The build searches each file as it is built; loaded back by a source with the knob it chose, the files give
    that recall, their rows rescored as the build rescored them, and the knob is the smallest power of two
    reaching the target."""
    from retrievers.sources.knn import exact_topk, recall_at, without_own_row

    settings = DenseIndexSettings(shard_passages=64, exact_below=100, recall_queries=100, index_shards=3,
                                  ef_construction=16, target_recall=0.97)
    meta = build_dense_index(corpus(600), tmp_path / "idx", HashEncoder(), settings=settings)
    assert meta["factory"] == "HNSW32,SQ8" and len(meta["index_shards"]) == 3 and meta["rescore"] == 2
    vecs = load_vectors(tmp_path / "idx" / SHARDS_DIR, meta["shards"])
    queries, own = sample_rows(vecs, 100, seed=1), sample_ids(vecs.lengths, 100, seed=1)
    exact = without_own_row(exact_topk(queries, vecs, 21), own, 20)

    def recall(source: DenseSource) -> float:
        return recall_at(without_own_row(source.top_rows(queries, 11), own, 10)[1], exact)

    served = DenseSource(str(tmp_path / "idx"), HashEncoder(), settings=settings)
    assert recall(served) == pytest.approx(meta["recall_at_10"])
    ef = meta["search"]["efSearch"]
    assert meta["recall_at_10"] >= 0.97 and ef > 1  # this corpus and seed: a few steps up the ladder
    assert recall(DenseSource(str(tmp_path / "idx"), HashEncoder(), settings=replace(settings, ef_search=ef // 2))) < 0.97
    assert recall_at(served.top_rows(queries, 10)[1], exact_topk(queries, vecs, 20)) > recall(served)  # self: flattering


def test_a_query_drawn_from_the_corpus_is_left_out_of_its_own_neighbours():
    from retrievers.sources.knn import without_own_row

    scores = np.array([[1.0, 0.9, 0.8], [0.7, 0.6, 0.5]])
    ids = np.array([[4, 2, 9], [3, 4, 8]])
    kept = without_own_row((scores, ids), np.array([4, 5]), 2)  # row 0 found itself first; row 1 did not
    assert kept[1].tolist() == [[2, 9], [3, 4]] and kept[0].tolist() == [[0.9, 0.8], [0.7, 0.6]]
    whole = without_own_row((scores, ids), np.array([9, 3]), 5)  # every row of a 3-row index: two left, never self
    assert whole[1].tolist() == [[4, 2], [4, 8]]


@pytest.mark.parametrize("n", [1, 5, 10, 11, 25])
def test_an_exact_index_of_any_size_reports_full_recall(tmp_path, n):
    meta = build_dense_index(corpus(n), tmp_path / "idx", HashEncoder(), settings=SMALL)
    assert meta["factory"] == "Flat" and meta["recall_at_10"] == 1.0


def test_the_corpus_encoder_is_let_go_before_the_index_step(tmp_path):
    class Releasing(HashEncoder):
        released_after = None

        def release_corpus(self):
            self.released_after = self.embedded

    enc = Releasing()
    meta = build_dense_index(corpus(25), tmp_path / "idx", enc, settings=SMALL)
    assert enc.released_after == meta["passages"] == 25


def test_build_shards_split_the_rows_contiguously():
    assert split_rows([10] * 10, 3) == [(0, 4), (4, 7), (7, 10)]
    assert split_rows([10, 10], 5) == [(0, 1), (1, 2)]


def test_shard_vectors_are_read_a_shard_at_a_time_and_sampled_as_from_memory(tmp_path):
    rng = np.random.default_rng(5)
    shards = [rng.normal(size=(n, 4)).astype(np.float32) for n in (7, 3, 11)]
    for i, v in enumerate(shards):
        write_vectors(tmp_path, i, v)
    on_disk = load_vectors(tmp_path, 3)
    assert on_disk.lengths == [7, 3, 11] and len(on_disk) == 3
    assert type(on_disk[2]) is np.ndarray and np.array_equal(on_disk[-1], shards[2])  # read whole, not mapped
    with pytest.raises(IndexError):
        on_disk[3]
    rows = np.sort(np.random.default_rng(2).choice(21, size=9, replace=False))
    assert np.array_equal(sample_rows(on_disk, 9, seed=2), np.concatenate(shards)[rows])  # in row order
    assert np.array_equal(np.sort(sample_rows(on_disk, 50, seed=2), axis=0), np.sort(np.concatenate(shards), axis=0))


def test_passages_are_read_by_row_from_disk_across_shards(tmp_path):
    docs = corpus(25)
    build_dense_index(docs, tmp_path / "idx", HashEncoder(), settings=SMALL)
    store = PassageStore(tmp_path / "idx" / SHARDS_DIR, 3)
    assert len(store) == 25
    assert [d.doc_id for d in store.get([24, 0, 10, 9])] == ["d24", "d0", "d10", "d9"]
    assert store.get([13])[0] == Document("d13", "Title 13", docs[13].text)
    with pytest.raises(IndexError, match="row 25 is outside this store's 25"):
        store.get([25])
    assert [d.doc_id for d in read_shard(tmp_path / "idx" / SHARDS_DIR, 2)] == [f"d{i}" for i in range(20, 25)]
    store.close()


def test_a_store_let_go_without_close_closes_its_files(tmp_path):
    import gc
    import os

    build_dense_index(corpus(25), tmp_path / "idx", HashEncoder(), settings=SMALL)
    before = len(os.listdir("/proc/self/fd"))
    store = PassageStore(tmp_path / "idx" / SHARDS_DIR, 3)
    opened = len(os.listdir("/proc/self/fd"))  # the offsets' memory maps
    store.get([0, 12, 24])  # and a text file a shard
    assert len(os.listdir("/proc/self/fd")) == opened + 3
    del store
    gc.collect()
    assert len(os.listdir("/proc/self/fd")) == before


def test_unknown_or_out_of_range_options_are_refused_naming_the_key():
    with pytest.raises(ValueError, match=r"index.sources.Wiki.options: unknown key 'nprob' \(did you mean 'nprobe'\?\)"):
        DenseIndexSettings.from_options({"nprob": 8}, "index.sources.Wiki.options")
    with pytest.raises(ValueError, match="index_shards must be >= 1"):
        DenseIndexSettings(index_shards=0)
    with pytest.raises(ValueError, match="target_recall"):
        DenseIndexSettings(target_recall=1.5)
