"""NLI entailment similarity, two backends behind the "nli" metric name.

The paper used microsoft/deberta-xlarge-mnli; no NLI model ships in a PyPI package, so:
- `HFNLISimilarity`: any Hugging Face sequence-classification NLI model from a path or name
  (production). Score = P(entailment), averaged over both directions by default.
- `LLMNLISimilarity`: the shared reader judges entailment with SURE's NLI prompt (its
  Figure 10), both directions (embedded default; no extra model in memory).
Both include the question by default: short answers ("1990" vs "in 1990") only entail each
other in the context of what was asked.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from retrievers.reader import PromptReader, PromptText, SamplingParams
from voter.similarity import AnswerPair, PairSimilarity

_REDUCERS = {"mean": np.mean, "min": np.min, "max": np.max}


def entailment_index(config: Any) -> int:
    """Index of the entailment label, read from a model config's id2label / label2id."""
    id2label = {int(i): str(l) for i, l in (getattr(config, "id2label", None) or {}).items()}
    for i, label in sorted(id2label.items()):
        if label.lower().startswith("entail"):
            return i
    for label, i in (getattr(config, "label2id", None) or {}).items():
        if str(label).lower().startswith("entail"):
            return int(i)
    raise ValueError(f"no entailment label in the model config (id2label={id2label}); is it an NLI model?")


def _render(answer: str, question: str, with_question: bool) -> str:
    return f"Question: {question} Answer: {answer}" if with_question and question else answer


@dataclass(frozen=True)
class HFNLIConfig:
    model: str  # local folder or hub name (offline: a folder)
    reduce: str = "mean"  # how the two directions combine: mean | min | max | forward (a => b only)
    with_question: bool = True
    batch_size: int = 32
    max_length: int = 256
    device: str = "cpu"

    def __post_init__(self) -> None:
        if self.reduce not in (*_REDUCERS, "forward"):
            raise ValueError(f"reduce must be one of {[*_REDUCERS, 'forward']}, got {self.reduce!r}")


class HFNLISimilarity(PairSimilarity):
    """P(entailment) from a Hugging Face NLI classifier."""

    name = "nli"

    def __init__(self, model: str | None = None, *, config: HFNLIConfig | None = None, **overrides: Any):
        if config is None:
            if model is None:
                raise ValueError("HFNLISimilarity needs a model path or name")
            config = HFNLIConfig(model=model, **overrides)
        elif model is not None or overrides:
            config = HFNLIConfig(**{**config.__dict__, **({"model": model} if model else {}), **overrides})
        self.config = config
        self.symmetric = config.reduce != "forward"
        self.uses_question = config.with_question
        self._model: Any = None
        self._tokenizer: Any = None
        self.entail_idx: int | None = None

    def load(self) -> None:
        if self._model is not None:
            return
        try:
            import torch  # noqa: F401
            from transformers import AutoModelForSequenceClassification, AutoTokenizer
        except ImportError as e:  # pragma: no cover - environment problem
            raise ImportError("the hf NLI backend needs transformers and torch: pip install transformers torch") from e
        self._tokenizer = AutoTokenizer.from_pretrained(self.config.model)
        model = AutoModelForSequenceClassification.from_pretrained(self.config.model)
        self.entail_idx = entailment_index(model.config)
        self._model = model.to(self.config.device).eval()

    def entail_probs(self, premises: Sequence[str], hypotheses: Sequence[str]) -> np.ndarray:
        """P(premise entails hypothesis) per pair, batched."""
        import torch

        self.load()
        out = []
        bs = self.config.batch_size
        with torch.inference_mode():
            for s in range(0, len(premises), bs):
                enc = self._tokenizer(
                    list(premises[s : s + bs]),
                    list(hypotheses[s : s + bs]),
                    padding=True,
                    truncation=True,
                    max_length=self.config.max_length,
                    return_tensors="pt",
                ).to(self.config.device)
                logits = self._model(**enc).logits.float()
                out.append(torch.softmax(logits, dim=-1)[:, self.entail_idx].cpu().numpy())
        return np.concatenate(out) if out else np.zeros(0)

    def _score(self, pairs: list[AnswerPair]) -> np.ndarray:
        wq = self.config.with_question
        a = [_render(p.a, p.question, wq) for p in pairs]
        b = [_render(p.b, p.question, wq) for p in pairs]
        if self.config.reduce == "forward":
            return self.entail_probs(a, b)
        both = self.entail_probs(a + b, b + a).reshape(2, len(pairs))
        return _REDUCERS[self.config.reduce](both, axis=0)


# -- LLM-judged NLI -------------------------------------------------------------------
# SURE (Yang et al., 2025), Figure 10 "Prompts for LLM-based NLI system", verbatim; each
# "passage" is one answer rendered with its question ("Question: ... Answer: ...").
SURE_NLI_PROMPT = (
    "Consider the two passages below.\n"
    "Premise: {premise}\n"
    "Hypothesis: {hypothesis}\n"
    "Does the premise semantically entail the hypothesis? Answer with 'entailment' if they are "
    "paraphrases, 'contradiction' if they have opposing meanings, or 'neutral' if they are neither."
)
SURE_NLI_CUE = "Response:"

_VERDICT = re.compile(r"\b(entail\w*|yes|contradict\w*|neutral|no|not)\b")


def parse_entailment(text: str) -> bool:
    """True if the judge's reply says entailment.

    The first verdict word decides: entailment / entails / yes -> True; contradiction,
    neutral, no, not ("not entailment") -> False; no verdict word -> False.
    """
    m = _VERDICT.search(text.lower())
    return bool(m) and (m.group(1).startswith("entail") or m.group(1) == "yes")


class LLMNLISimilarity(PairSimilarity):
    """Bidirectional entailment judged by the reader.

    Score = (entails(a, b) + entails(b, a)) / 2: 1.0 when both directions entail (SURE's
    "equivalent"), 0.5 when only one does (one answer is more specific, e.g. "Paris" vs
    "Paris, France"), 0.0 otherwise. The half credit keeps partial agreement informative
    to the fitted weights instead of collapsing it to "different".
    """

    name = "nli"
    symmetric = True

    def __init__(
        self,
        reader: PromptReader,
        *,
        with_question: bool = True,
        params: SamplingParams = SamplingParams(max_tokens=8),
    ):
        self.reader = reader
        self.uses_question = with_question
        self.params = params

    def prompt(self, premise: str, hypothesis: str, question: str = "") -> PromptText:
        body = SURE_NLI_PROMPT.format(
            premise=_render(premise, question, self.uses_question),
            hypothesis=_render(hypothesis, question, self.uses_question),
        )
        return PromptText(body=body, cue=SURE_NLI_CUE)

    def _score(self, pairs: list[AnswerPair]) -> np.ndarray:
        prompts = [self.prompt(p.a, p.b, p.question) for p in pairs]
        prompts += [self.prompt(p.b, p.a, p.question) for p in pairs]
        replies = self.reader.generate(prompts, self.params)  # one batched reader call
        verdicts = np.array([parse_entailment(r) for r in replies], dtype=np.float64)
        return verdicts.reshape(2, len(pairs)).mean(axis=0)


NLI_BACKENDS: dict[str, type[PairSimilarity]] = {"hf": HFNLISimilarity, "llm": LLMNLISimilarity}
