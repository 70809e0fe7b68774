"""The ONNX encoders: int8 for the corpus (the default on CPUs without AVX512-VNNI), close to torch fp32, its vectors not moved
by its thread count, the threads an encoder is given the ones its session runs; fp32 for questions, torch's vectors."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from retrievers.encoder import Encoder

PASSAGES = ["Leonardo da Vinci painted the Mona Lisa in the early sixteenth century.",
            "Glaciers are slow rivers of ice that carve valleys.",
            "The Treaty of Westphalia ended the Thirty Years' War in 1648.",
            "Photosynthesis turns light, water and carbon dioxide into sugar and oxygen."]


@pytest.fixture(scope="module")
def one_thread():
    return Encoder(corpus_backend="onnx-int8", threads=1)


@pytest.mark.slow
def test_int8_vectors_are_normalised_and_near_torch_fp32(one_thread, encoder):
    int8 = one_thread.encode_corpus(PASSAGES)
    fp32 = encoder.encode(PASSAGES)
    assert int8.shape == (4, 384) and int8.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(int8, axis=1), 1.0, rtol=1e-5)
    assert (np.sum(int8 * fp32, axis=1) >= 0.97).all()  # session 38: >= 0.979 over 4,000 passages


@pytest.mark.slow
def test_the_thread_count_changes_no_vector_and_is_the_sessions(one_thread):
    two = Encoder(corpus_backend="onnx-int8", threads=2)
    assert np.array_equal(one_thread.encode_corpus(PASSAGES), two.encode_corpus(PASSAGES))
    assert one_thread._int8._session.get_session_options().intra_op_num_threads == 1
    assert two._int8._session.get_session_options().intra_op_num_threads == 2


def test_mean_pooling_leaves_the_padding_out_and_gives_unit_vectors():
    from retrievers.onnx_encoder import mean_pooled

    hidden = np.array([[[3.0, 4.0], [100.0, -7.0]], [[1.0, 0.0], [0.0, 1.0]]], dtype=np.float32)
    mask = np.array([[1, 0], [1, 1]])
    np.testing.assert_allclose(mean_pooled(hidden, mask), [[0.6, 0.8], [0.5**0.5, 0.5**0.5]], rtol=1e-6)


@pytest.mark.slow
def test_a_batchs_hidden_state_is_what_encode_pools(one_thread):
    from transformers import AutoTokenizer

    from retrievers.onnx_encoder import INPUTS, mean_pooled

    vectors = one_thread.encode_corpus(PASSAGES[:1])
    enc = AutoTokenizer.from_pretrained(one_thread.path)(PASSAGES[:1], return_tensors="np")
    hidden = one_thread._int8.hidden({k: enc[k].astype(np.int64) for k in INPUTS})
    assert np.array_equal(mean_pooled(hidden, enc["attention_mask"]), vectors)


@pytest.mark.slow
def test_the_int8_model_let_go_after_a_build_comes_back_the_same():
    enc = Encoder(corpus_backend="onnx-int8", threads=1)
    before = enc.encode_corpus(PASSAGES)
    enc.release_corpus()
    assert enc._int8 is None and np.array_equal(enc.encode_corpus(PASSAGES), before)


@pytest.mark.slow
def test_questions_on_onnx_get_torchs_vectors_without_torchs_model():
    """The query encoder: the fp32 graph in onnxruntime, chosen on a CPU; torch's vectors, whatever the batch."""
    texts = [*PASSAGES, "who painted the mona lisa"]
    on_torch = Encoder(query_backend="torch", memo_size=0)
    on_onnx = Encoder(query_backend="onnx", memo_size=0)
    got = on_onnx.encode(texts)
    np.testing.assert_allclose(got, on_torch.encode(texts), atol=1e-5)
    np.testing.assert_allclose(on_onnx.encode(texts[-1:])[0], got[-1], atol=1e-5)  # alone as in a batch
    assert on_onnx._model is None and on_onnx.dim == 384 and on_onnx.encode([]).shape == (0, 384)
    options = on_onnx._queries._session.get_session_options()
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"  # no spin-wait after a question
    assert Encoder().query_kind == "onnx" and Encoder(device="cuda").query_kind == "torch"
    assert Encoder("/models/another-sentence-encoder").query_kind == "torch"  # its pooling may not be MiniLM's
    with pytest.raises(ValueError, match="query_backend must be one of auto, torch, onnx"):
        Encoder(query_backend="tensorflow")


@pytest.mark.slow
def test_models_prepare_makes_the_question_encoders_file_once(tmp_path, monkeypatch):
    from serve.cli.prepare import prepare_query_encoder

    monkeypatch.setenv("EOR_ENCODER_CACHE", str(tmp_path))
    made = prepare_query_encoder()
    assert made.startswith(str(tmp_path)) and made.endswith("-fp32.onnx") and list(tmp_path.iterdir()) == [Path(made)]
    stamp = Path(made).stat().st_mtime_ns
    encoder = Encoder(memo_size=0).load()  # finds it: not made again
    assert str(encoder._queries.made_model()) == made and Path(made).stat().st_mtime_ns == stamp
    monkeypatch.setattr("retrievers.encoder.Encoder.query_kind", "torch")
    assert prepare_query_encoder() == ""  # queries on torch: nothing to make
