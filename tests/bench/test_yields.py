"""bench.robust.yields: each suite's own usability verdict, counted per LLM type, no Ask sent."""
from __future__ import annotations

import re

from bench.robust import yields
from bench.robust.runner import run_suite
from bench.robust.store import ResultStore
from tests.bench.fake_reader import FakeReader
from tests.bench.fakes import ITEMS


class GenerateOnly(FakeReader):
    """The service's Generate; an Ask or a Retrieve reaching it fails the test."""

    def ask(self, *a, **k):
        raise AssertionError("the yields run sent an Ask")

    def retrieve(self, *a, **k):
        raise AssertionError("the yields run sent a Retrieve")


def reply(prompt: str) -> str:
    text = prompt.rsplit("Input text: ", 1)[-1].split("\nOutput:", 1)[0].strip()
    if 'formal tone, starting with "' in prompt:  # one rewrite per variant; "Might I ask" is answered instead
        opener = prompt.split('starting with "', 1)[1].split('"', 1)[0]
        q = prompt.rsplit("Question: ", 1)[1]
        return "The answer is unknown." if opener == "Might I ask" else f"{opener} {q}?"
    if "adding a related fact" in prompt:  # continued after "<question>, <link>"; names the answer for q1, q2
        q = prompt.rsplit("Question: ", 1)[1]
        return {"who wrote hamlet": "Shakespeare wrote plays?", "what is the capital of france": "Paris is big?"}.get(
            q, "it is a well known subject?")
    if any(k in prompt for k in ("vague and open to interpretation", "most specific one", "what kind of thing")):
        return ""  # ambiguity: the model writes nothing after the begun reply, so not applicable
    if prompt.startswith("Rewrite the question below with different grammar"):  # guided: the opener, then it
        opener = prompt.split('starting with "', 1)[1].split('"', 1)[0]
        return f"{opener} {prompt.rsplit('Question: ', 1)[1]}?"
    if "Translate the following text" in prompt:
        return prompt.rsplit("\n\n", 1)[-1]  # round trip unchanged: not applicable
    if "semantically entail" in prompt:
        return "entailment"
    if prompt.startswith("Rearrange the following list"):
        return "[1, 0]"
    # SURE passage rewrites: a fixed text that holds no answer (Golden documents lose it)
    return "This passage was rewritten. It says something else entirely."


def test_yields_count_each_suites_verdict_and_send_no_ask(tmp_path):
    gen = GenerateOnly(reply)
    dry = yields.PerturbOnlyClient(gen)
    suites = yields.make_suites(ITEMS, judge="reader")  # the fake reader judges
    out = {}
    for name, suite in suites.items():
        store = ResultStore(tmp_path / name)
        run_suite(suite, dry, store, batch_size=4, progress=False)
        out[name] = {label: yields.tally(name, label, list(store.records())) for label in yields.LLM_TYPES[name]}
    q = out["query"]
    assert q["formal"]["planned"] == len(ITEMS) * 5
    # four variants per question rewrite it, the fifth gets an answer (not applicable)
    assert q["formal"]["usable"] == len(ITEMS) * 4 and q["formal"]["questions_with_usable"] == len(ITEMS)
    assert q["formal"]["reasons"] == {"query unchanged (not applicable)": len(ITEMS)}
    assert q["ambiguity"]["usable"] == 0 and "query unchanged (not applicable)" in q["ambiguity"]["reasons"]
    leaked = q["redundancy"]["reasons"].get("the rewrite names the answer", 0)
    assert leaked >= 2 and q["redundancy"]["failures"]
    r = out["rare"]
    assert r["grammar"]["planned"] == len(ITEMS) and r["grammar"]["usable"] == len(ITEMS)
    assert r["back_translate"]["usable"] == 0
    s = out["sure"]
    # the rewrite drops every answer: Golden documents are dropped, Noise ones pass the entailment filter
    assert s["style_simple"]["planned"] == 2 * len(ITEMS)
    assert s["style_simple"]["usable"] == len(ITEMS)
    assert s["style_simple"]["reasons"] == {"golden document lost the answer": len(ITEMS)}
    md = yields.report(out, {"questions": len(ITEMS), "generator": "fake"})
    assert re.search(r"\| query \| formal \| 16 / 20 \| 80% \| 4 / 4 \|", md)
    assert "the rewrite names the answer" in md
