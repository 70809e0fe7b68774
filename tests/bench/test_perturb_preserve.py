"""SURE's causal-feature checks: answer strings kept / not gained, bidirectional entailment."""
from __future__ import annotations

from bench.robust.perturb.preserve import Check, answer_check, equivalent, nli_label, preserved
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


def test_preserved_asks_the_reader_only_about_answer_safe_pairs():
    reader = FakeReader("entailment")
    ctx = [{"answers": ["May"]}] * 3
    checks = preserved([GOLD, GOLD, NOISE], ["In May, in Cannes.", "In Cannes.", "A jury."], ctx, reader)
    assert [c.ok for c in checks] == [True, False, True]
    assert checks[1].reason == "golden document lost the answer"
    assert len(reader.prompts) == 4  # 2 pairs x 2 directions
    assert [c.ok for c in preserved([GOLD], ["In Cannes."], ctx[:1], None, nli=False)] == [False]
