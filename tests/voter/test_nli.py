"""NLI similarity: the LLM judge with a fake reader engine, and a real (tiny, random)
Hugging Face NLI classifier that the test builds itself -- nothing is downloaded."""
import inspect
import re
from types import SimpleNamespace

import numpy as np
import pytest

from retrievers.engine import ReaderEngine
from retrievers.reader import CachedReader, PromptText, SamplingParams
from voter.nli import (
    SURE_NLI_CUE,
    SURE_NLI_PROMPT,
    HFNLISimilarity,
    LLMNLISimilarity,
    entailment_index,
    parse_entailment,
)
from voter.similarity import create_metric, similarity_tensor


class FakeEngine(ReaderEngine):
    """A ReaderEngine: completion formatting; says "yes" for the (premise, hypothesis)
    answer pairs in `entails`, "no" otherwise."""

    model_id = "fake-judge"

    def __init__(self, entails, yes="yes", no="no"):
        self.entails = set(entails)
        self.yes, self.no = yes, no
        self.calls: list[list[str]] = []

    def format(self, prompt: PromptText) -> str:
        return f"{prompt.body}\n{prompt.cue}"

    def generate(self, prompts, params: SamplingParams) -> list[str]:
        self.calls.append(list(prompts))
        out = []
        for p in prompts:
            prem = re.search(r"Premise: (?:Question: .*? Answer: )?(.*)", p).group(1)
            hyp = re.search(r"Hypothesis: (?:Question: .*? Answer: )?(.*)", p).group(1)
            out.append(self.yes if (prem, hyp) in self.entails else self.no)
        return out


def judge(entails, **kw):
    engine = FakeEngine(entails, **{k: kw.pop(k) for k in ("yes", "no") if k in kw})
    return LLMNLISimilarity(CachedReader(engine), **kw), engine


def test_prompt_is_sures_figure_10():
    assert "Consider the two passages below." in SURE_NLI_PROMPT
    assert (
        "Does the premise semantically entail the hypothesis? Answer with 'entailment' if they are "
        "paraphrases, 'contradiction' if they have opposing meanings, or 'neutral' if they are neither."
    ) in SURE_NLI_PROMPT
    metric, _ = judge([])
    p = metric.prompt("Paris", "Paris, France", "capital of France?")
    assert p.cue == SURE_NLI_CUE == "Response:"
    assert "Premise: Question: capital of France? Answer: Paris\n" in p.body
    assert "Hypothesis: Question: capital of France? Answer: Paris, France\n" in p.body


def test_bidirectional_scores_one_half_zero():
    metric, engine = judge({("Paris", "Paris, France"), ("Paris, France", "Paris"), ("Paris", "the French capital")})
    out = metric.score(
        [
            ("Paris", "Paris, France", "q"),  # both directions entail
            ("Paris", "the French capital", "q"),  # one direction
            ("Paris", "London", "q"),  # none
            ("Paris", "paris.", "q"),  # identical after normalisation: no call
        ]
    )
    np.testing.assert_array_equal(out, [1.0, 0.5, 0.0, 1.0])
    assert len(engine.calls) == 1 and len(engine.calls[0]) == 6  # 3 pairs x 2 directions, one batch


def test_llm_judge_through_the_registry_and_tensor():
    engine = FakeEngine({("Paris", "Paris, France"), ("Paris, France", "Paris")})
    metric = create_metric("nli", backend="llm", reader=CachedReader(engine))
    sim, mask = similarity_tensor([["Paris", "Paris, France", "London", None]], ["capital?"], [metric])
    assert sim[0, 0, 1, 0] == sim[0, 1, 0, 0] == 1.0
    assert sim[0, 0, 2, 0] == 0.0 and mask.tolist() == [[True, True, True, False]]
    assert len(engine.calls) == 1 and len(engine.calls[0]) == 6  # 3 distinct pairs x 2


def test_sure_style_verdicts_are_understood():
    metric, _ = judge({("a", "b")}, yes="Entailment.", no="neutral")
    np.testing.assert_array_equal(metric.score([("a", "b"), ("c", "d")]), [0.5, 0.0])


@pytest.mark.parametrize(
    "reply,verdict",
    [
        ("yes", True), ("Yes.", True), ("entailment", True), ("Entailment - they are paraphrases", True),
        ("The premise entails the hypothesis.", True), ("no", False), ("No, it does not.", False),
        ("neutral", False), ("Contradiction", False), ("not entailment", False), ("", False), ("maybe", False),
    ],
)
def test_parse_entailment(reply, verdict):
    assert parse_entailment(reply) is verdict


def test_entailment_index_from_config():
    cfg = SimpleNamespace(id2label={0: "CONTRADICTION", 1: "NEUTRAL", 2: "ENTAILMENT"}, label2id={})
    assert entailment_index(cfg) == 2
    assert entailment_index(SimpleNamespace(id2label={"0": "entailment", "1": "not_entailment"})) == 0
    assert entailment_index(SimpleNamespace(id2label={0: "LABEL_0"}, label2id={"entails": 1})) == 1
    with pytest.raises(ValueError, match="no entailment label"):
        entailment_index(SimpleNamespace(id2label={0: "LABEL_0", 1: "LABEL_1"}, label2id={}))


# -- a real Hugging Face NLI model (tiny, randomly initialised, built here) ------------
WORDS = "question answer capital of france uk what is the paris london rome city 1990 year in".split()


@pytest.fixture(scope="module")
def tiny_nli_model(tmp_path_factory, one_torch_thread):
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizer

    folder = tmp_path_factory.mktemp("tiny_nli")
    vocab = folder / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS, "?", ":", ".", ","]) + "\n")
    params = inspect.signature(BertTokenizer.__init__).parameters
    tokenizer = BertTokenizer(**({"vocab_file": str(vocab)} if "vocab_file" in params else {"vocab": str(vocab)}))
    labels = {0: "contradiction", 1: "neutral", 2: "entailment"}
    config = BertConfig(
        vocab_size=len(WORDS) + 9,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
        id2label=labels,
        label2id={v: k for k, v in labels.items()},
    )
    torch.manual_seed(0)
    model = BertForSequenceClassification(config).eval()
    out = folder / "model"
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return str(out)


def _manual_entail(path, premise, hypothesis):
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForSequenceClassification.from_pretrained(path).eval()
    with torch.inference_mode():
        logits = model(**tok(premise, hypothesis, return_tensors="pt")).logits
    return float(torch.softmax(logits, -1)[0, 2])


@pytest.mark.slow
def test_hf_nli_with_a_real_tiny_model(tiny_nli_model):
    metric = HFNLISimilarity(tiny_nli_model, batch_size=2)
    pairs = [("Paris", "London", "what is the capital of france?"), ("Rome", "the city", "q"), ("1990", "in 1990", "q")]
    out = metric.score(pairs)
    assert metric.entail_idx == 2
    assert out.shape == (3,) and ((out >= 0) & (out <= 1)).all()
    # bidirectional mean of P(entailment), the question rendered into both sides
    fwd = _manual_entail(tiny_nli_model, "Question: what is the capital of france? Answer: Paris",
                         "Question: what is the capital of france? Answer: London")
    bwd = _manual_entail(tiny_nli_model, "Question: what is the capital of france? Answer: London",
                         "Question: what is the capital of france? Answer: Paris")
    assert out[0] == pytest.approx((fwd + bwd) / 2, abs=1e-5)
    # symmetric, and identical answers are 1.0 without the model
    np.testing.assert_allclose(metric.score([(b, a, q) for a, b, q in pairs]), out, atol=1e-5)
    assert metric.score([("The Paris", "paris")])[0] == 1.0


@pytest.mark.slow
def test_hf_nli_forward_only_and_through_the_tensor(tiny_nli_model):
    fwd = create_metric("nli", backend="hf", model=tiny_nli_model, reduce="forward", with_question=False)
    assert not fwd.symmetric and not fwd.uses_question
    sim, _ = similarity_tensor([["Paris", "London", "Rome"]], ["q"], [fwd])
    assert sim[0, 0, 1, 0] == pytest.approx(_manual_entail(tiny_nli_model, "Paris", "London"), abs=1e-5)
    assert sim[0, 1, 0, 0] == pytest.approx(_manual_entail(tiny_nli_model, "London", "Paris"), abs=1e-5)
