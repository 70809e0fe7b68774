"""The sentence encoder as ONNX models: int8 for the corpus on CPUs without AVX512-VNNI; fp32 for questions.

Embedding the corpus is most of a large index's build. On CPUs without AVX512 the encoder
runs fp32; its MatMuls quantized to int8 (per channel, onnxruntime's dynamic quantization) run
~2.3-2.7x as fast on the same cores (docs/benchmarks.md, "Real corpora"), with vectors at cosine
>= 0.97 of fp32's and retrieval recall measured against them before this was made the default.
With VNNI, retrievers/openvino_encoder.py's static int8 is faster still (1.4x this).
The model is exported once from the same folder the torch encoder loads (a PyPI package's files;
nothing is fetched) into $EOR_ENCODER_CACHE (default ~/.cache/eor/encoders). Queries run the fp32 graph
(`OnnxFp32Encoder`): torch's vectors (cosine 1.0), a lone question ~3.5x faster on 2 cores, where torch's
per-operation dispatch is most of the time (docs/notes/2026-11-30-session-47.md); only the corpus side is
approximate.
"""
from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path
from typing import Callable, Iterator, Sequence

import numpy as np

MAX_TOKENS = 256  # all-MiniLM-L6-v2's max_seq_length (sentence-transformers truncates there too)
INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def cache_dir() -> Path:
    return Path(os.environ.get("EOR_ENCODER_CACHE", Path.home() / ".cache" / "eor" / "encoders"))


def model_key(folder: str, runtime: str = "") -> str:
    """The exported file's name: the encoder folder, its weights' size and time, and the runtime's
    versions (default onnxruntime's)."""
    if not runtime:
        import onnxruntime

        runtime = onnxruntime.__version__
    weights = sorted(Path(folder).glob("*.safetensors")) or sorted(Path(folder).glob("*.bin"))
    stamp = "|".join(f"{w.name}:{w.stat().st_size}:{int(w.stat().st_mtime)}" for w in weights)
    digest = hashlib.sha256(f"{Path(folder).resolve()}|{stamp}|{runtime}".encode()).hexdigest()
    return digest[:16]


def export_fp32(folder: str, out: Path) -> Path:
    """The transformer as an fp32 ONNX graph (dynamic batch and length): last hidden state out."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    class Hidden(torch.nn.Module):  # positional inputs in, last hidden state out
        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.model(input_ids=input_ids, attention_mask=attention_mask,
                              token_type_ids=token_type_ids).last_hidden_state

    model = AutoModel.from_pretrained(folder).eval()
    sample = AutoTokenizer.from_pretrained(folder)(["a short text", "another"], padding=True, return_tensors="pt")
    with torch.no_grad():
        torch.onnx.export(Hidden(model), tuple(sample[k] for k in INPUTS), str(out), input_names=list(INPUTS),
                          output_names=["hidden"], opset_version=17, dynamo=False,
                          dynamic_axes={k: {0: "batch", 1: "tokens"} for k in (*INPUTS, "hidden")})
    return out


def export_int8(folder: str, out: Path) -> Path:
    """Export the transformer to ONNX, then quantize its MatMuls to int8 (per channel, dynamic)."""
    import tempfile

    from onnxruntime.quantization import QuantType, quantize_dynamic

    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        fp32 = export_fp32(folder, Path(tmp) / "fp32.onnx")
        part = Path(tmp) / "int8.onnx"
        quantize_dynamic(str(fp32), str(part), weight_type=QuantType.QInt8, per_channel=True)
        part.replace(out)  # by rename: two exporting at once leave one whole file
    return out


def length_sorted_batches(tokenizer, texts: Sequence[str],
                          size: int) -> Iterator[tuple[np.ndarray, dict[str, np.ndarray], np.ndarray]]:
    """(rows, model inputs, attention mask) of each batch of `size`, longest texts first: similar lengths
    together, less padding. A batch's make-up moves its vectors (int8 scales activations per batch)."""
    order = np.argsort([-len(t) for t in texts], kind="stable")
    for i in range(0, len(texts), size):
        rows = order[i : i + size]
        enc = tokenizer([texts[j] for j in rows], padding=True, truncation=True, max_length=MAX_TOKENS,
                        return_tensors="np")
        yield rows, {k: enc[k].astype(np.int64) for k in INPUTS}, enc["attention_mask"]


def mean_pooled(hidden: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
    """Unit vectors: the mean of each text's token states, padding left out (sentence-transformers' pooling)."""
    mask = attention_mask[..., None].astype(np.float32)
    vecs = (hidden * mask).sum(1) / np.maximum(mask.sum(1), 1e-9)
    return vecs / np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)


class ExportedEncoder:
    """Normalised mean-pooled embeddings from an exported model (`_open`, its runtime's own; `hidden`), batches
    sorted by length; the model and its tokenizer load once, on first use."""

    def __init__(self, folder: str, batch_size: int = 32, threads: int = 0) -> None:
        self.folder = folder
        self.batch_size = batch_size
        self.threads = threads or (os.cpu_count() or 1)
        self._tokenizer = None
        self._lock = threading.Lock()

    def _open(self) -> None:
        raise NotImplementedError

    def hidden(self, feeds: dict[str, np.ndarray]) -> np.ndarray:
        """The last hidden state of one tokenized batch (`INPUTS`, int64)."""
        raise NotImplementedError

    def load(self):
        with self._lock:
            if self._tokenizer is None:  # set last: loaded once the model is
                from transformers import AutoTokenizer

                self._open()
                self._tokenizer = AutoTokenizer.from_pretrained(self.folder)
        return self

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        self.load()
        return encode_batched(self.hidden, self._tokenizer, texts, self.batch_size)


class OnnxEncoder(ExportedEncoder):
    """An exported model (`made_model`: made once, into the cache) in onnxruntime."""

    _session = None
    spin = True  # onnxruntime's default: its threads spin-wait after a call for the next one

    def made_model(self) -> Path:
        raise NotImplementedError

    def _open(self) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = self.threads
        if not self.spin:
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self._session = ort.InferenceSession(str(self.made_model()), options, providers=["CPUExecutionProvider"])

    def hidden(self, feeds: dict[str, np.ndarray]) -> np.ndarray:
        """The last hidden state of one tokenized batch (`INPUTS`, int64)."""
        return self.load()._session.run(None, feeds)[0]

    @property
    def dim(self) -> int:
        return int(self.load()._session.get_outputs()[0].shape[-1])


class OnnxInt8Encoder(OnnxEncoder):
    """The int8 ONNX model in onnxruntime."""

    def made_model(self) -> Path:
        path = cache_dir() / f"{model_key(self.folder)}-int8.onnx"
        if not path.exists():
            export_int8(self.folder, path)
        return path


class OnnxFp32Encoder(OnnxEncoder):
    """The fp32 graph in onnxruntime: the query encoder. Its threads do not spin after a question: spinning
    took 2.2x the CPU a 1M Wiki search costs (32-34 against 14-16 ms a call), CPU the readers beside it need,
    for a p50 1.10x lower (docs/notes/2026-11-30-session-47.md)."""

    spin = False

    def made_model(self) -> Path:
        import tempfile

        path = cache_dir() / f"{model_key(self.folder)}-fp32.onnx"
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(dir=path.parent) as tmp:
                export_fp32(self.folder, Path(tmp) / "fp32.onnx").replace(path)  # by rename: one whole file
        return path


def encode_batched(hidden: Callable[[dict], np.ndarray], tokenizer, texts: Sequence[str], size: int) -> np.ndarray:
    """Unit vectors of `texts` in their order, from a model's last hidden state (`hidden`) batch by batch."""
    texts = list(texts)
    out = np.zeros((len(texts), 0), dtype=np.float32)
    for rows, feeds, mask in length_sorted_batches(tokenizer, texts, size):
        vecs = mean_pooled(hidden(feeds), mask)
        if out.shape[1] == 0:
            out = np.zeros((len(texts), vecs.shape[1]), dtype=np.float32)
        out[rows] = vecs
    return out
