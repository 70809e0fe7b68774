"""SURE's and RARE's document perturbations: what each changes, what it keeps, seeding."""
from __future__ import annotations

import json
import re

import pytest

from bench.robust.perturb import get
from bench.robust.perturb.documents import parse_order
from bench.robust.perturb.textutil import split_sentences
from tests.bench.fake_reader import FakeReader

DOC = ("The Cannes Festival is an annual film festival held in Cannes, France. It previews new films of all "
       "genres. It is held in May at the Palais des Festivals. Its top prize is the Palme d'Or.")
SENTS = split_sentences(DOC)
CTX = {"title": "Cannes Film Festival", "answers": ["May"], "question": "when is the cannes film festival"}


def run(name, seed=0, doc=DOC, ctx=CTX, **kw):
    p = get(name, **kw)
    return p.apply([doc], seed=seed, context=[ctx])[0], p.last_fallbacks[0]


# ------------------------------------------------------------------ LLM rewrites
@pytest.mark.parametrize("name, phrase", [
    ("style_simple", "Please simplify the following text while preserving its original meaning."),
    ("style_complex", "Please complexify the following text while preserving its original meaning."),
    ("source_llm", "Please rewrite the following passage."),
    ("source_self", "Please rewrite the following passage."),
])
def test_llm_rewrites_use_sures_prompt_and_clean_the_reply(name, phrase):
    reader = FakeReader(lambda p: 'Here is the rewritten passage:\n\n"The festival is in May. It is in Cannes."')
    out, fell_back = run(name, generator=reader)
    assert out == "The festival is in May. It is in Cannes." and not fell_back
    (prompt,) = reader.prompts
    assert prompt.startswith(phrase) and prompt.endswith(":\n\n" + DOC)
    assert run(name, seed=5, generator=reader)[0] == out  # greedy: the seed changes nothing
    assert run(name, generator=FakeReader("Here is the passage:\n"))[0:2] == (DOC, True)


def test_source_llm_can_use_a_separate_paraphraser():
    reader, strong = FakeReader("reader's copy."), FakeReader("stronger LLM's copy.")
    assert run("source_llm", generator=reader, paraphraser=strong)[0] == "stronger LLM's copy."
    assert not reader.calls
    assert run("source_self", generator=reader)[0] == "reader's copy."


# ------------------------------------------------------------------ logic
def test_logic_reverse_and_random_reorder_every_sentence_verbatim():
    rev, _ = run("logic_reverse")
    assert split_sentences(rev) == SENTS[::-1]
    outs = {run("logic_random", seed=s)[0] for s in range(6)}
    for out in outs:
        assert sorted(split_sentences(out)) == sorted(SENTS) and out != DOC
    assert run("logic_random", seed=1) == run("logic_random", seed=1)
    assert len(outs) > 1  # different seeds, different orders
    assert run("logic_reverse", doc="One sentence only.") == ("One sentence only.", True)


def test_logic_llm_ranked_applies_the_readers_order():
    reader = FakeReader("[3, 1, 1, 9, 0]")  # a repeat and an out-of-range index: dropped; 2 appended
    out, fell_back = run("logic_llm_ranked", generator=reader)
    assert split_sentences(out) == [SENTS[3], SENTS[1], SENTS[0], SENTS[2]] and not fell_back
    prompt = reader.prompts[0]
    assert "Rearrange the following list of sentences in your preferred logical order" in prompt
    assert json.dumps(SENTS) in prompt and "must contain 4 elements" in prompt and "cannot exceed 3" in prompt
    assert run("logic_llm_ranked", generator=FakeReader("I like this order."))[1] is True
    assert parse_order("2, 0", 3) == [2, 0, 1] and parse_order("none", 3) is None


# ------------------------------------------------------------------ format (Figure 9)
def test_formats_wrap_the_untouched_text_with_the_title():
    j, _ = run("format_json")
    assert json.loads(j) == {"title": CTX["title"], "text": DOC}
    h, _ = run("format_html")
    assert h == ('<html lang="en">\n<head>\n<meta charset="UTF-8">\nCannes Film Festival\n</head>\n<body>\n'
                 + DOC + "\n</body>\n</html>")
    assert run("format_yaml")[0] == f"Title: Cannes Film Festival\nText: {DOC}"
    assert run("format_markdown")[0] == f"# Cannes Film Festival\n\n{DOC}"
    assert run("format_markdown", seed=9)[0] == run("format_markdown")[0]  # rule-based: no randomness


# ------------------------------------------------------------------ metadata
def _meta(html: str, name: str) -> str:
    m = re.search(rf"<meta name='{name}' content='([^']*)'>", html)
    assert m and html.endswith(f"<body>\n{DOC}\n</body>\n</html>") and "Cannes Film Festival" in html
    return m.group(1)


def test_timestamps_fall_before_or_after_the_cutoff_seeded():
    pre = {_meta(run("meta_timestamp_pre", seed=s)[0], "timestamp") for s in range(5)}
    post = {_meta(run("meta_timestamp_post", seed=s)[0], "timestamp") for s in range(5)}
    assert all("2019-06-01" < t < "2024-06-01" for t in pre) and len(pre) == 5
    assert all("2024-06-01" < t < "2029-06-01" for t in post) and len(post) == 5
    assert run("meta_timestamp_pre", seed=2) == run("meta_timestamp_pre", seed=2)
    assert _meta(run("meta_timestamp_post", cutoff="2020-01-01", years=1)[0], "timestamp").startswith("2020")


def test_datasource_links_name_wikipedia_or_a_seeded_tweet():
    assert _meta(run("meta_source_wiki")[0], "datasource") == "https://en.wikipedia.org/wiki/Cannes_Film_Festival"
    tweets = {_meta(run("meta_source_twitter", seed=s)[0], "datasource") for s in range(4)}
    assert all(re.fullmatch(r"https://twitter\.com/[a-z]+\d*/status/\d{19}", t) for t in tweets)
    assert len(tweets) == 4 and run("meta_source_twitter", seed=1) == run("meta_source_twitter", seed=1)


# ------------------------------------------------------------------ RARE
def test_answer_sentence_delete_drops_only_the_answer_sentences():
    out, fell_back = run("answer_sentence_delete")
    assert split_sentences(out) == [SENTS[0], SENTS[1], SENTS[3]] and not fell_back
    assert run("answer_sentence_delete", ctx={"answers": ["Berlin"]}) == (DOC, True)
    assert run("answer_sentence_delete", ctx={}) == (DOC, True)
    assert run("answer_sentence_delete", doc="It is held in may.", ctx={"answers": ["May"]}) == ("It is held in may.", True)


def test_back_translation_goes_there_and_back_in_two_batched_calls():
    def reply(prompt):
        if "into French" in prompt:
            return "Traduction : " + ("" if "EMPTY" in prompt else "Le festival a lieu en mai.")
        return "The festival takes place in May."
    reader = FakeReader(reply)
    p = get("back_translate", generator=reader)
    out = p.apply([DOC, "EMPTY doc.", DOC], context=[CTX, CTX, CTX])
    assert out == ["The festival takes place in May.", "EMPTY doc.", "The festival takes place in May."]
    assert p.last_fallbacks == [False, True, False]
    assert [len(c[0]) for c in reader.calls] == [3, 2]  # the unusable French one is not sent back
    assert reader.calls[1][0][0].startswith("Translate the following text into English.")
    assert reader.calls[1][0][0].endswith("Le festival a lieu en mai.")
    stays_french = FakeReader("Le festival de Cannes a lieu en mai au Palais des Festivals.")
    assert get("back_translate", generator=stays_french).apply([DOC], context=[CTX]) == [DOC]


def test_llm_rewrites_lose_repeats_and_a_cut_off_ending():
    reply = "It is held in May. It is big.\n\nIt is held in May. It is big.\n\nIt is held in May. It is"
    assert run("style_complex", generator=FakeReader(reply))[0] == "It is held in May. It is big."
