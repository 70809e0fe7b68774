"""The encoder alternatives' bench: batches as the shipped int8 encoder makes them, rows put back in order,
and (slow) a real run of its onnxruntime and OpenVINO backends (OpenVINO said not installed where it is not)."""
from __future__ import annotations

import numpy as np
import pytest

ea = pytest.importorskip("bench.encoder_alternatives")  # imports retrievers: the server's environment


def fake_tokenizer(texts, **_):
    """Token ids = word lengths, padded with 0 to the batch's longest."""
    width = max(len(t.split()) for t in texts)
    ids = np.array([[len(w) for w in t.split()] + [0] * (width - len(t.split())) for t in texts])
    return {"input_ids": ids, "attention_mask": (ids > 0).astype(int), "token_type_ids": np.zeros_like(ids)}


def test_batches_are_of_the_shipped_size_longest_first():
    texts = ["a b", "a b c d e", "a", "a b c"]
    prepared = ea.batches(fake_tokenizer, texts, size=3)
    assert [list(rows) for rows, _, _ in prepared] == [[1, 3, 0], [2]]
    assert prepared[0][1]["input_ids"].shape == (3, 5) and prepared[1][1]["input_ids"].shape == (1, 1)


def test_embed_puts_each_vector_back_at_its_texts_row():
    texts = ["aa b", "a bbb ccc", "aaaa"]

    def hidden(feeds):  # a token's state: (its id, 1): the pooled vector's direction follows the mean id
        ids = feeds["input_ids"].astype(np.float32)
        return np.stack([ids, np.ones_like(ids)], axis=-1)

    vecs = ea.embed(hidden, ea.batches(fake_tokenizer, texts, size=2), len(texts))
    means = np.array([1.5, 7 / 3, 4.0])
    np.testing.assert_allclose(vecs, np.stack([means, np.ones(3)], 1) / np.hypot(means, 1)[:, None], rtol=1e-6)


@pytest.mark.slow
def test_a_real_run_times_both_onnx_models_and_names_what_it_could_not_run(tmp_path):
    pytest.importorskip("onnxruntime")
    out = tmp_path / "alt.json"
    report = ea.main(["--texts", "8", "--rounds", "1", "--batch-sizes", "1,8", "--out", str(out)])
    assert {"onnx-int8", "onnx-int8-fused"} <= set(report["backends"]) and out.exists()
    assert report["backends"]["onnx-int8"]["speed_vs_onnx_int8"] == 1.0
    assert all(b["cosine_to_fp32_min"] > 0.9 for b in report["backends"].values())
    assert report["onnx_int8_by_batch"][8] == {k: v for k, v in report["backends"]["onnx-int8"].items()
                                               if k.startswith("cosine")}  # 8 texts: one batch of 8 either way
    from retrievers.openvino_encoder import available

    if available():  # the shipped static int8 model, and OpenVINO's fp32 beside it
        assert {"openvino-fp32", "openvino-int8"} <= set(report["backends"])
    else:
        assert "not installed" in report["not_run"]["openvino"]
