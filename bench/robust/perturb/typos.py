"""Surface-level query perturbations through TextAttack (bench environment only).

- `typo` (query-level paper §3.2): keyboard typos in `rate` (0.10 or 0.25) of the words, stop
  words (NLTK's English list) never touched. The paper names QWERTY-neighbour swaps; the issue
  adds TextAttack's random character deletion, so both are the default (`transformations=
  ("qwerty",)` is the paper's alone).
- `char_level` / `word_level` (RARE App. C.1): TextAttack Augmenter over 10% of the words
  (RARE says "10% of the characters" for the first; the Augmenter counts words) with
  CompositeTransformation(WordSwapQWERTY, WordSwapRandomCharacterDeletion), resp.
  WordSwapEmbedding(max_candidates=50); same constraints (no repeats, no stop words); up to 5
  variants sampled, the first whose similarity to the original passes `min_similarity` is
  kept, else the most similar. Differences from RARE, forced by working offline: the
  embedding is GloVe 6B 50d (top 50k plain words, `ta_offline`), not TextAttack's
  counter-fitted vectors, so neighbours are related rather than strictly synonymous words;
  and the similarity is `textutil.similarity` (character trigrams), not an embedding model.

TextAttack draws from Python's `random` and numpy's global generator: each text is perturbed
with both seeded from (name, seed, position) and their previous states restored afterwards.
TextAttack is imported on first use, so the registry loads in environments without it.
"""
from __future__ import annotations

import random
from contextlib import contextmanager
from typing import Any, Iterator, Mapping, Sequence

from bench.robust.perturb.base import NotApplicable, Perturbation, register
from bench.robust.perturb.textutil import similarity


@contextmanager
def seeded_globals(seed: int) -> Iterator[None]:
    """Seed `random` and numpy's global generator; restore both afterwards."""
    import numpy as np

    py_state, np_state = random.getstate(), np.random.get_state()
    random.seed(seed)
    np.random.seed(seed % 2**32)
    try:
        yield
    finally:
        random.setstate(py_state)
        np.random.set_state(np_state)


def _transformation(kind: str):
    from bench.robust.perturb.ta_offline import glove_embedding, load_textattack

    load_textattack()
    from textattack import transformations as T

    if kind == "qwerty":
        return T.WordSwapQWERTY()
    if kind == "char_delete":
        return T.WordSwapRandomCharacterDeletion()
    if kind == "embedding":
        return T.WordSwapEmbedding(max_candidates=50, embedding=glove_embedding())
    raise ValueError(f"unknown TextAttack transformation {kind!r}; known: qwerty, char_delete, embedding")


class TextAttackPerturbation(Perturbation):
    """An Augmenter over `rate` of the words; `variants` > 1 samples that many and keeps the
    first as similar as `min_similarity` (else the most similar), as RARE selects."""

    target = "query"

    def __init__(self, rate: float, transformations: Sequence[str], variants: int = 1,
                 min_similarity: float = 0.75):
        if not 0 < rate <= 1:
            raise ValueError(f"rate must be in (0, 1], not {rate}")
        if variants < 1:
            raise ValueError("variants must be >= 1")
        self.rate = rate
        self.transformations = tuple(transformations)
        self.variants = variants
        self.min_similarity = min_similarity
        self._augmenter = None

    def augmenter(self):
        if self._augmenter is None:
            from bench.robust.perturb.ta_offline import load_textattack

            load_textattack()
            from textattack.augmentation import Augmenter
            from textattack.constraints.pre_transformation import RepeatModification, StopwordModification
            from textattack.transformations import CompositeTransformation

            steps = [_transformation(k) for k in self.transformations]
            self._augmenter = Augmenter(
                transformation=steps[0] if len(steps) == 1 else CompositeTransformation(steps),
                constraints=[RepeatModification(), StopwordModification(language="english")],
                pct_words_to_swap=self.rate, transformations_per_example=1)
        return self._augmenter

    def perturb_one(self, text: str, rng: random.Random, context: Mapping[str, Any]) -> str:
        aug = self.augmenter()
        with seeded_globals(rng.getrandbits(32)):
            candidates = []
            for _ in range(self.variants):
                out = aug.augment(text)
                if out and out[0] != text and out[0] not in candidates:
                    candidates.append(out[0])
        if not candidates:
            raise NotApplicable("no word TextAttack may change")
        if len(candidates) == 1:
            return candidates[0]
        scores = [similarity(text, c) for c in candidates]
        passing = [c for c, s in zip(candidates, scores) if s >= self.min_similarity]
        return passing[0] if passing else candidates[scores.index(max(scores))]


@register("typo")
class Typo(TextAttackPerturbation):
    def __init__(self, rate: float = 0.10, transformations: Sequence[str] = ("qwerty", "char_delete")):
        super().__init__(rate, transformations)


@register("char_level")
class CharLevel(TextAttackPerturbation):
    def __init__(self, rate: float = 0.10, variants: int = 5, min_similarity: float = 0.75):
        super().__init__(rate, ("qwerty", "char_delete"), variants, min_similarity)


@register("word_level")
class WordLevel(TextAttackPerturbation):
    def __init__(self, rate: float = 0.10, variants: int = 5, min_similarity: float = 0.75):
        super().__init__(rate, ("embedding",), variants, min_similarity)
