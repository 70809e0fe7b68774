"""The perturbation registry: every name the suites use is registered, the rule-based ones
refuse `generator=` (the runner's Perturber relies on that), fallbacks are flagged."""
from __future__ import annotations

import pytest

from bench.robust import query_level, rare, sure
from bench.robust.perturb import Compose, NotApplicable, Perturbation, get, names
from bench.robust.runner import Perturber
from tests.bench.fake_reader import FakeReader

LLM = {"redundancy", "formal", "ambiguity", "grammar_rewrite", "irrelevant_detail", "style_simple",
       "style_complex", "source_llm", "source_self", "logic_llm_ranked", "back_translate"}


def test_every_name_the_suites_use_is_registered():
    used = ({n for _, n, _ in sure.TYPES.values()} | {n for n, _ in rare.QUERY_PERTURBATIONS.values()}
            | {n for n, _ in rare.DOC_PERTURBATIONS.values()} | {n for n, _ in query_level.PERTURBATIONS.values()})
    assert used <= set(names())
    assert len(names()) == 25


@pytest.mark.parametrize("name", sorted(LLM))
def test_llm_perturbations_take_the_reader(name):
    p = get(name, generator=FakeReader())
    assert p.generator is not None


def test_rule_based_perturbations_refuse_a_generator():
    for name in set(names()) - LLM:
        with pytest.raises(TypeError):
            get(name, generator=FakeReader())
    built = Perturber({"j": ("format_json", {}), "f": ("formal", {})}, generator=FakeReader())
    assert built.build("j").name == "format_json" and built.build("f").generator is not None


def test_llm_perturbation_without_a_reader_is_a_clear_error():
    with pytest.raises(ValueError, match="needs generator"):
        get("formal").apply(["who wrote hamlet"])


class _Picky(Perturbation):
    name = "picky"

    def perturb_one(self, text, rng, context):
        if text.startswith("x"):
            raise NotApplicable("starts with x")
        return text.upper()


def test_not_applicable_keeps_the_text_and_flags_it():
    p = _Picky()
    assert p.apply(["ab", "xy"]) == ["AB", "xy"]
    assert p.last_fallbacks == [False, True]
    both = Compose([_Picky(), get("format_markdown")])
    out = both.apply(["ab", "xy"], context=[{"title": "T"}, {"title": "T"}])
    assert out == ["# T\n\nAB", "# T\n\nxy"] and both.last_fallbacks == [False, True]
