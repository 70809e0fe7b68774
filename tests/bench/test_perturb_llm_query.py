"""LLM query rewrites with a fake reader: the paper's prompt goes out, one Generate call per
batch, the reply is cleaned, the seed picks the variant, unusable replies fall back."""
from __future__ import annotations

import re

import pytest

from bench.robust.perturb import get
from tests.bench.fake_reader import FakeReader

Q = ["when does the cannes film festival take place", "who wrote hamlet"]


def numbered(prompt: str) -> str:
    """n numbered variants of the input text, the i-th ending in " v<i>" (and a header)."""
    n = int(re.search(r"(?:text|question|below) (\d+) times", prompt).group(1))
    text = prompt.split("Input text: ", 1)[1].split("\n", 1)[0]
    return "Here are the paraphrases:\n" + "\n".join(f'{i + 1}. "{text} v{i}"' for i in range(n))


@pytest.mark.parametrize("name, phrase", [
    ("ambiguity", "while making it unclear to answer by introducing ambiguity"),
])
def test_query_level_rewrites_take_line_seed_of_five(name, phrase):
    reader = FakeReader(numbered)
    p = get(name, generator=reader)
    out0 = p.apply(Q, seed=0)
    assert out0 == [f"{q} v0" for q in Q] and p.last_fallbacks == [False, False]
    assert len(reader.calls) == 1 and len(reader.calls[0][0]) == 2  # one batched call
    prompts, max_tokens, temperature = reader.calls[0]
    assert phrase in prompts[0] and "Paraphrase" in prompts[0] and "5 times" in prompts[0]
    assert prompts[0].endswith(f"Input text: {Q[0]}\nOutput:\n\n") and temperature == 0.0
    assert p.apply(Q, seed=3) == [f"{q} v3" for q in Q]
    assert p.apply(Q, seed=7) == [f"{q} v2" for q in Q]  # 7 mod 5
    assert p.apply(Q, seed=0) == out0
    assert len({p for call in reader.calls for p in call[0]}) == 2  # the same prompts for every seed


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
    reader = FakeReader(lambda prompt: "" if "Input text: hamlet?" in prompt else "Output:\n\"who wrote hamlet\"\nWho penned Hamlet?")
    p = get("ambiguity", generator=reader)
    out = p.apply(["who wrote hamlet", "hamlet?"], seed=0)
    assert out == ["Who penned Hamlet?", "hamlet?"]
    assert p.last_fallbacks == [False, True]
    reader2 = FakeReader("Who wrote Hamlet?")  # the original back, capitalised: not a rewrite
    assert get("ambiguity", generator=reader2).apply(["who wrote hamlet"]) == ["who wrote hamlet"]
    formal = get("formal", generator=FakeReader("The owner of Reading Football Club is John Doe."))
    assert formal.apply(["who is the owner of reading football club"]) == ["who is the owner of reading football club"]
    assert formal.last_fallbacks == [True]  # an answer is no rewrite


def test_batches_over_64_prompts_are_chunked():
    reader = FakeReader("Another query.")
    out = get("ambiguity", generator=reader, variants=1).apply([f"q{i}" for i in range(70)])
    assert out == ["Another query."] * 70 and [len(c[0]) for c in reader.calls] == [64, 6]
    assert "1 times" in reader.calls[0][0][0]


def test_answers_and_commentary_are_not_rewrites():
    # what SmolLM2-135M-Instruct actually replied to these prompts (greedy)
    replies = {"who wrote the lord of the rings": "Who wrote the Lord of the Rings?\n\nThe answer is: The Lord of "
                                                  "the Rings is a fictional work by J.R.R. Tolkien.",
               "when does the cannes film festival take place": "The film festival of the 2022 is held on 2022-01-01.",
               "how many legs does a spider have": 'The sentence is ambiguous: "How many legs does a spider have?"'}
    reader = FakeReader(lambda p: replies[p.split("Input text: ", 1)[1].split("\n", 1)[0]])
    p = get("ambiguity", generator=reader)
    out = p.apply(list(replies), seed=1)
    assert out == list(replies)  # the first reply only capitalised the question: no rewrite either
    assert p.last_fallbacks == [True, True, True]
