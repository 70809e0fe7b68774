"""The pool over any set of knowledge sources: a source it has never heard of (the toy,
tests/retrievers/fakes.py: KeywordSource) serves its specs and joins HB, and a source is
processed by its shape (passages or pages), not by its name."""
from __future__ import annotations

from retrievers.prompts import clean_answer

from tests.retrievers.fakes import QUESTION, SE_PAGES, TOY_PASSAGES, WIKI_PASSAGES, FakeEngine, FakeSource, KeywordSource
from tests.retrievers.test_pool import Setup, by_spec, chunks_of


def test_a_toy_source_serves_its_specs_and_joins_the_hybrid(memo_encoder):
    """A third source, one class (tests/retrievers/fakes.py: KeywordSource): its specs run beside
    the paper's, it is searched once at the depth its deepest user needs, and HB takes it in."""
    toy = KeywordSource("Toy")
    s = Setup(memo_encoder, specs=["Toy@2", "Toy@RR@1", "SE@1&Toy@1", "HB@100", "Wiki@10", "ReFree"],
              more={"Toy": toy})
    (result,) = s.pool.run([QUESTION])
    cands = by_spec(result)
    assert not result.failed
    assert [(p.pid, p.source) for p in cands["Toy@2"].context.passages] == [("toy-0", "Toy"), ("toy-1", "Toy")]
    assert cands["Toy@2"].context.passages[0].text == TOY_PASSAGES[0][1]  # the Mona Lisa passage first
    assert [p.source for p in cands["SE@1&Toy@1"].context.passages] == ["SE", "Toy"]
    (rr,) = cands["Toy@RR@1"].context.passages
    assert rr.pid in {"toy-0", "toy-1", "toy-2", "toy-3"}
    for cand in result.candidates:  # each answer is the reader's answer to its own prompt
        assert cand.answer == clean_answer(FakeEngine.respond(s.answer_prompt_for(QUESTION, cand))), cand.retriever
    # HB: the pages' chunks, PK's, then the top passages of each passage source (Wiki, Toy)
    hb = [p.source for p in cands["HB@100"].context.passages]
    assert hb == ["SE"] * len(chunks_of(SE_PAGES)) + ["PK"] * 2 + ["Wiki"] * 20 + ["Toy"] * len(TOY_PASSAGES)


def test_a_source_is_processed_by_its_shape_not_its_name(memo_encoder):
    """A pages source called Toy is cut and chunked exactly as SE is; a passages one taken as Wiki is."""
    pages = FakeSource("Toy", SE_PAGES, shape="pages")
    s = Setup(memo_encoder, specs=["SE@1", "SE@4", "SE@RR@10", "Toy@1", "Toy@4", "Toy@RR@10"], more={"Toy": pages})
    (result,) = s.pool.run([QUESTION])
    cands = by_spec(result)
    for k in ("@1", "@4", "@RR@10"):
        assert cands["Toy" + k].context.passages == cands["SE" + k].context.passages, k
    assert pages.calls == [([QUESTION], 10)]  # the deepest of Toy@1, Toy@4, Toy@RR@10 (se_pages)
    passages = FakeSource("Toy", WIKI_PASSAGES, shape="passages")
    s = Setup(memo_encoder, specs=["Wiki@10", "Toy@10", "Wiki@RR@3", "Toy@RR@3"], more={"Toy": passages})
    (result,) = s.pool.run([QUESTION])
    cands = by_spec(result)
    assert cands["Toy@10"].context.passages == cands["Wiki@10"].context.passages
    assert cands["Toy@RR@3"].context.passages == cands["Wiki@RR@3"].context.passages


def test_a_broken_toy_source_fails_its_retrievers_and_the_hybrid_only(memo_encoder):
    bad = FakeSource("Toy", [], fail=ConnectionError("toy down"))
    s = Setup(memo_encoder, specs=["Toy@2", "HB@RR@10", "SE@1", "Wiki@10", "PK"], more={"Toy": bad})
    (result,) = s.pool.run([QUESTION])
    assert result.failed == ["Toy@2", "HB@RR@10"]
    assert all("Toy search failed: toy down" in c.error for c in result.candidates if c.error)
