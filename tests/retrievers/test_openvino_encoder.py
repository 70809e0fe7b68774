"""The static int8 OpenVINO corpus encoder ("auto" on CPUs with AVX512-VNNI): which CPUs take it, its fixed
calibration, vectors close to torch fp32 and free of the batch they came in, one model made once."""
from __future__ import annotations

import logging

import numpy as np
import pytest

from retrievers import encoder as encoder_module
from retrievers import openvino_encoder
from retrievers.encoder import Encoder

PASSAGES = ["Leonardo da Vinci painted the Mona Lisa in the early sixteenth century.",
            "Glaciers are slow rivers of ice that carve valleys.",
            "The Treaty of Westphalia ended the Thirty Years' War in 1648, after long talks in Osnabrück and Münster.",
            "Photosynthesis turns light, water and carbon dioxide into sugar and oxygen."]


@pytest.mark.parametrize("device, vnni, installed, kind", [
    ("cpu", True, True, "openvino-int8"),
    ("cpu", False, True, "onnx-int8"),   # AVX2: OpenVINO's int8 measured 0.59x onnxruntime's
    ("cpu", True, False, "onnx-int8"),   # OpenVINO not importable: the ONNX model, not an error
    ("cuda", True, True, "torch"),
])
def test_auto_takes_openvino_only_where_the_cpu_has_vnni(monkeypatch, device, vnni, installed, kind):
    monkeypatch.setattr(encoder_module, "cpu_has_vnni", lambda: vnni)
    monkeypatch.setattr(openvino_encoder, "available", lambda: installed)
    assert Encoder(device=device).corpus_kind == kind
    assert Encoder(device=device, corpus_backend="onnx-int8").corpus_kind == "onnx-int8"  # named: as asked


def test_an_unknown_backend_is_refused_naming_the_choices():
    with pytest.raises(ValueError, match="openvino-int8"):
        Encoder(corpus_backend="openvino")


def test_calibration_is_a_fixed_sample_of_the_embedded_corpus():
    texts = openvino_encoder.calibration_texts()
    assert len(texts) == openvino_encoder.CALIBRATION_PASSAGES and all(t.strip() for t in texts)
    assert texts == openvino_encoder.calibration_texts()  # seeded: every machine, every corpus the same
    assert texts != openvino_encoder.calibration_texts(seed=1)


@pytest.fixture(scope="module")
def ov_encoder(tmp_path_factory):
    pytest.importorskip("openvino")
    pytest.importorskip("nncf")
    mp = pytest.MonkeyPatch()
    mp.setenv("EOR_ENCODER_CACHE", str(tmp_path_factory.mktemp("encoders")))
    yield Encoder(corpus_backend="openvino-int8", threads=1)
    mp.undo()


@pytest.mark.slow
def test_vectors_are_unit_near_torch_fp32_and_do_not_depend_on_their_batch(ov_encoder, encoder):
    together = ov_encoder.encode_corpus(PASSAGES)
    fp32 = encoder.encode(PASSAGES)
    assert together.shape == (4, 384) and together.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(together, axis=1), 1.0, rtol=1e-5)
    assert (np.sum(together * fp32, axis=1) >= 0.97).all()  # 4,000 passages: >= 0.982, recall@10 the same
    alone = np.stack([ov_encoder.encode_corpus([p])[0] for p in PASSAGES])
    # static scales: padding is masked and no scale is the batch's, so only float rounding differs
    np.testing.assert_allclose(alone, together, atol=2e-3)


@pytest.mark.slow
def test_the_model_is_made_once_and_a_second_encoder_loads_it(ov_encoder):
    ov_encoder.encode_corpus(PASSAGES[:1])
    path = openvino_encoder.model_path(ov_encoder.path)
    made = (path.stat().st_mtime_ns, path.with_suffix(".bin").stat().st_mtime_ns)
    again = Encoder(corpus_backend="openvino-int8", threads=2)
    assert np.allclose(again.encode_corpus(PASSAGES), ov_encoder.encode_corpus(PASSAGES), atol=1e-4)
    assert (path.stat().st_mtime_ns, path.with_suffix(".bin").stat().st_mtime_ns) == made
    ov_encoder.release_corpus()
    assert ov_encoder._int8 is None


@pytest.mark.slow
def test_two_machines_make_the_same_model_byte_for_byte(ov_encoder, tmp_path, monkeypatch):
    """A cluster's nodes each make their own (their caches are their own): they must embed alike."""
    ov_encoder.encode_corpus(PASSAGES[:1])
    first = openvino_encoder.model_path(ov_encoder.path).with_suffix(".bin").read_bytes()
    monkeypatch.setenv("EOR_ENCODER_CACHE", str(tmp_path))
    Encoder(corpus_backend="openvino-int8", threads=1).encode_corpus(PASSAGES[:1])
    # making it leaves others' logging alone: nncf.set_log_level had set pytest's capture (on root and on
    # nncf's logger) to ERROR, and every later test's warnings were lost
    assert all(h.level == logging.NOTSET for h in logging.getLogger().handlers)
    assert openvino_encoder.model_path(ov_encoder.path).with_suffix(".bin").read_bytes() == first


@pytest.mark.slow
def test_the_model_runs_with_the_threads_it_was_given_and_unpinned(ov_encoder):
    ov_encoder.encode_corpus(PASSAGES[:1])
    compiled = ov_encoder._int8.compiled  # (the shape cache's capacity is not a compiled model's property to read)
    assert compiled.get_property("INFERENCE_NUM_THREADS") == 1
    assert compiled.get_property("ENABLE_CPU_PINNING") is False
