"""LLM query rewrites with a fake reader: the paper's prompt goes out, one Generate call per
batch, the reply is cleaned, the seed picks the variant, unusable replies fall back."""
from __future__ import annotations

import re

import pytest

from bench.robust.perturb import get
from tests.bench.fake_reader import FakeReader

Q = ["when does the cannes film festival take place", "who wrote hamlet"]


def test_ambiguity_hedges_with_a_modal_or_generalises_the_most_specific_term_per_variant():
    from bench.robust.perturb.llm_query import AMBIGUITY_MOVES, CATEGORY_START, TERM_START

    def reply(prompt):
        if "most specific one" in prompt:
            return 'hamlet" is the most specific'
        if "what kind of thing" in prompt:
            return 'play".'
        assert 'vague and open to interpretation, using the word "' in prompt
        return "have written hamlet?"
    reader = FakeReader(reply)
    p = get("ambiguity", generator=reader)
    outs = [p.apply(["who wrote hamlet"], seed=s)[0] for s in range(len(AMBIGUITY_MOVES) + 1)]
    assert outs == ["Who might have written hamlet?", "Who could have written hamlet?", "who wrote a play",
                    "Who may have written hamlet?", "Who might have written a play?", "Who might have written hamlet?"]
    assert reader.starts[0] == ["Who might"] and reader.starts[2] == [TERM_START]
    assert reader.starts[3] == [CATEGORY_START.format(term="hamlet")]
    assert p.apply(["the vascular layer of the eye is the"], seed=1) == ["What could have written hamlet?"]
    assert reader.starts[-1] == ["What could"]  # no question word: "What"


def test_ambiguity_falls_back_when_the_model_copies_or_names_no_usable_kind():
    copy = get("ambiguity", generator=FakeReader(""))  # nothing after "Who might": no rewrite
    assert copy.apply(["who wrote hamlet"], seed=0) == ["who wrote hamlet"] and copy.last_fallbacks == [True]
    same = get("ambiguity", generator=FakeReader(lambda p: 'hamlet"'))  # the kind is the term
    assert same.apply(["who wrote hamlet"], seed=2) == ["who wrote hamlet"] and same.last_fallbacks == [True]


def test_generalize_puts_the_kind_in_the_terms_place_with_an_article_where_a_noun_phrase_ends():
    from bench.robust.perturb.llm_query import generalize

    assert generalize("what is the main mineral in lithium batteries", "lithium", "metal") == \
        "what is the main mineral in metal batteries"  # a modifier: no article
    assert generalize("what is the corporate tax rate in great britain", "Great Britain", "country") == \
        "what is the corporate tax rate in a country"
    assert generalize("who is the current director of the us mint", "us mint", "agency") == \
        "who is the current director of the agency"  # a determiner already there
    assert generalize("who sang rip it up and start again", "rip it up and start again", "song") == "who sang a song"
    assert generalize("name the fusion of an egg with a sperm", "egg", "sperm") == ""  # repeats a word
    assert generalize("who wrote hamlet", "macbeth", "play") == ""  # the term is not in the question
    assert generalize("who wrote hamlet", "hamlet", "a very long kind of play") == ""
    assert generalize("who is the owner of reading fc", "reading", "reading") == ""


@pytest.mark.parametrize("name, opener_of", [
    ("formal", lambda: __import__("bench.robust.perturb.llm_query", fromlist=["x"]).FORMAL_OPENERS),
    ("grammar_rewrite", lambda: ("Do you know", "Does anyone know", "Can you tell me")),
    ("irrelevant_detail", lambda: ("For a school project,", "Just out of curiosity,")),
])
def test_guided_rewrites_ask_one_rewrite_per_variant_with_its_own_opener(name, opener_of):
    openers = opener_of()

    def reply(prompt):
        opener = re.search(r'starting with "([^"]+)"', prompt).group(1)
        q = prompt.rsplit("Question: ", 1)[1]
        return f"{opener} {q}?"
    reader = FakeReader(reply)
    p = get(name, generator=reader)
    n = len(openers)
    outs = [p.apply(["who wrote hamlet"], seed=s)[0] for s in range(n + 1)]
    assert outs[:n] == [f"{o} who wrote hamlet?" for o in openers] and outs[n] == outs[0]
    assert all(len(call[0]) == 1 and call[1] == 64 for call in reader.calls)
    answered = get(name, generator=FakeReader("Shakespeare wrote it."))  # an answer, not a question
    assert answered.apply(["who wrote hamlet"]) == ["who wrote hamlet"] and answered.last_fallbacks == [True]


def test_redundancy_continues_the_question_after_a_link_per_variant():
    from bench.robust.perturb.llm_query import Redundancy

    reader = FakeReader(lambda prompt: "a play set in Denmark?")
    p = get("redundancy", generator=reader)
    outs = [p.apply(["who wrote hamlet"], seed=s)[0] for s in range(len(Redundancy.links) + 1)]
    assert outs[:-1] == [f"Who wrote hamlet{link} a play set in Denmark?" for link in Redundancy.links]
    assert outs[-1] == outs[0] and reader.starts[0] == ["Who wrote hamlet, knowing that"]
    assert "adding a related fact that does not answer it" in reader.calls[0][0][0]
    for stub in ["?", "", "Shakespeare"]:  # nothing, or one word, after the link: no rewrite
        short = get("redundancy", generator=FakeReader(stub))
        assert short.apply(["who wrote hamlet"]) == ["who wrote hamlet"] and short.last_fallbacks == [True]


def test_unusable_replies_fall_back_to_the_original_and_are_flagged():
    formal = get("formal", generator=FakeReader("The owner of Reading Football Club is John Doe."))
    assert formal.apply(["who is the owner of reading football club"]) == ["who is the owner of reading football club"]
    assert formal.last_fallbacks == [True]  # an answer is no rewrite
    copy = get("formal", generator=FakeReader("Who is the owner of Reading Football Club?"))
    assert copy.apply(["who is the owner of reading football club"]) == ["who is the owner of reading football club"]
    assert copy.last_fallbacks == [True]  # the original back, capitalised: no rewrite


def test_batches_over_64_prompts_are_chunked():
    reader = FakeReader("Could you please tell me another query?")
    out = get("formal", generator=reader).apply([f"q{i}" for i in range(70)])
    assert out == ["Could you please tell me another query?"] * 70 and [len(c[0]) for c in reader.calls] == [64, 6]
