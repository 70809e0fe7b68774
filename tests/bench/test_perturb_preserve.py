"""SURE's causal-feature checks: answer strings kept / not gained, bidirectional entailment."""
from __future__ import annotations

import pytest

from bench.robust.perturb.preserve import Check, answer_check, content_kept, equivalent, nli_label
from tests.bench.fake_reader import FakeReader

GOLD = "The festival is held in May in Cannes."
NOISE = "The festival has a jury."


def test_answer_check_golden_keeps_noise_does_not_gain():
    assert answer_check(GOLD, "It is held in may.", ["May"]) == Check(True)
    assert answer_check(GOLD, "It is held in spring.", ["May"]) == (False, "golden document lost the answer")
    assert answer_check(NOISE, "The jury meets.", ["May"]).ok
    assert answer_check(NOISE, "The jury meets in May.", ["May"]) == (False, "noise document gained an answer")


def test_nli_labels():
    assert nli_label("Entailment.") == "entailment"
    assert nli_label("The premise does not entail the hypothesis") == "neutral"
    assert nli_label("contradiction") == "contradiction" and nli_label("neutral") == "neutral"
    assert nli_label("yes") == "unknown"


def test_equivalence_needs_entailment_both_ways_in_one_call():
    def judge(prompt):
        premise = prompt.split("Premise: ", 1)[1].split("\n", 1)[0]
        return "entailment" if premise != "short" else "neutral"
    reader = FakeReader(judge)
    checks = equivalent(reader, ["a long text", "a long text"], ["a long text, reworded", "short"])
    assert checks[0] == Check(True)
    assert checks[1] == (False, "not equivalent (original->perturbed: entailment, perturbed->original: neutral)")
    assert len(reader.calls) == 1 and len(reader.calls[0][0]) == 4
    assert reader.prompts[0].startswith("Consider the two passages below.\nPremise: a long text\nHypothesis: ")
    assert reader.prompts[0].endswith("or 'neutral' if they are neither.\nResponse:")


class Scores:
    """bert_score's `score(cands, refs)`: precision and recall per pair, as given."""

    def __init__(self, p, r):
        self.p, self.r, self.calls = p, r, []

    def score(self, cands, refs):
        self.calls.append((cands, refs))
        return self.p, self.r, None


def test_content_kept_needs_precision_and_recall_both_over_the_threshold():
    s = Scores([0.95, 0.99, 0.6], [0.92, 0.7, 0.99])
    checks = content_kept(["a", "b", "c"], ["a2", "b2", "c2"], scorer=s)
    assert [c.ok for c in checks] == [True, False, False]
    assert checks[1].reason == "content not kept (BERTScore precision 0.99, recall 0.70; both must reach 0.9)"
    assert s.calls == [(["a2", "b2", "c2"], ["a", "b", "c"])]  # the perturbed text is the candidate
    assert content_kept([], [], scorer=s) == []
    with pytest.raises(ValueError):
        content_kept(["a"], [], scorer=s)


@pytest.mark.slow
def test_content_kept_with_the_real_minilm_tells_a_paraphrase_from_a_cut_and_an_unrelated_text():
    original = ("The Cannes Film Festival is an annual film festival held in Cannes, France. It previews new "
                "films of all genres from around the world. It is held every May at the Palais des Festivals.")
    paraphrase = ("The Cannes Film Festival is a yearly film festival in Cannes, France, which previews new films "
                  "of every genre from all over the world. It takes place each May at the Palais des Festivals.")
    cut = "The Cannes Film Festival is an annual film festival held in Cannes, France."
    other = "Photosynthesis converts light energy into chemical energy stored in glucose inside plant cells."
    checks = content_kept([original] * 4, [original, paraphrase, cut, other])
    assert [c.ok for c in checks] == [True, True, False, False]
