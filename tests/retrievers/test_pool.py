"""The retriever pool over fakes (recording engine, canned sources) and the real encoder (memoised):
staged, batch-first runs; one engine call per stage; failure isolation; processing ops."""
from __future__ import annotations

from collections import Counter
from dataclasses import replace

import math
import numpy as np
import pytest

from retrievers.corpus import split_words, truncate_words
from retrievers.pool import MAX_QUESTION_CHARS, PoolConfig, QuestionError, RetrieverPool, check_question
from retrievers.prompts import answer_prompt, clean_answer, compress_prompt
from retrievers.reader import CachedReader, Generation, ReaderCache
from retrievers.spec import PAPER_POOL, parse_spec
from retrievers.types import TIMEOUT, Context, Failure, Passage

from tests.retrievers.fakes import PK_WORDS, QUESTION, SE_PAGES, WIKI_PASSAGES, FakeEngine, FakeSource, fill

CP_SPECS = [s for s in PAPER_POOL if s.endswith("@CP")]
SE_USERS = ["SE@1", "SE@4", "SE@RR@10", "SE@2&Wiki@5", "SE@RR@5&Wiki@5", "HB@RR@10", "SE@1@CP",
            "SE@4@CP", "SE@RR@10@CP", "SE@2&Wiki@5@CP", "SE@RR@5&Wiki@5@CP", "HB@RR@10@CP"]
WIKI_USERS = ["Wiki@10", "SE@2&Wiki@5", "SE@RR@5&Wiki@5", "HB@RR@10", "Wiki@10@CP", "SE@2&Wiki@5@CP",
              "SE@RR@5&Wiki@5@CP", "HB@RR@10@CP"]


class Setup:
    def __init__(self, encoder, specs=PAPER_POOL, se=None, wiki=None, cache=None, more=None, **config):
        """`more`: other sources beside SE and Wiki (name -> source)."""
        self.engine = FakeEngine()
        self.se = se or FakeSource("SE", SE_PAGES)
        self.wiki = wiki or FakeSource("Wiki", WIKI_PASSAGES)
        self.reader = CachedReader(self.engine, cache)
        self.pool = RetrieverPool(PoolConfig(specs=tuple(specs), **config),
                                  {"SE": self.se, "Wiki": self.wiki, **(more or {})}, encoder, self.reader)

    def answer_prompt_for(self, question, cand) -> str:
        """The answer prompt the pool must have sent for a candidate, rebuilt independently."""
        doc = None if parse_spec(cand.retriever).retrieval_free else truncate_words(
            cand.context.render(), self.pool.config.max_context_words)
        return self.engine.format(answer_prompt(question, doc))


@pytest.fixture
def setup(memo_encoder):
    return Setup(memo_encoder)


@pytest.fixture
def one_run(setup):
    (result,) = setup.pool.run([QUESTION])
    return setup, result


def by_spec(result):
    return {c.retriever: c for c in result.candidates}


def cosine(encoder, query, passages):
    q = encoder.encode([query])[0]
    return encoder.encode([p.render() for p in passages]) @ q


def chunks_of(pages, words=100):
    return [Passage(f"{p.pid}#{i}", p.title, part, p.source, p.score)
            for p in pages for i, part in enumerate(split_words(p.text, words))]


# ---- one question through the paper's 16 retrievers ------------------------------------
def test_default_pool_gives_16_candidates_in_the_papers_order(one_run):
    setup, result = one_run
    assert setup.pool.specs == list(PAPER_POOL)
    assert result.question == QUESTION
    assert [c.retriever for c in result.candidates] == list(PAPER_POOL)
    assert result.failed == []
    assert all(c.error is None and c.answer for c in result.candidates)
    assert all(c.context.spec == c.retriever for c in result.candidates)


def test_pk_and_refree_have_no_passages_the_others_do(one_run):
    _, result = one_run
    cands = by_spec(result)
    assert cands["ReFree"].context == Context("ReFree")
    pk = cands["PK"].context
    assert pk.passages == () and pk.document == fill(QUESTION, PK_WORDS)  # the stripped PK output
    for spec in PAPER_POOL:
        if spec not in ("PK", "ReFree"):
            assert cands[spec].context.passages, spec


def test_compressed_retrievers_answer_from_their_summary_and_keep_passages(one_run):
    setup, result = one_run
    cands = by_spec(result)
    for spec in CP_SPECS:
        plain = cands[spec[: -len("@CP")]].context
        ctx = cands[spec].context
        assert ctx.passages == plain.passages, spec  # same retrieval as the uncompressed one
        expected_prompt = setup.engine.format(compress_prompt(
            QUESTION, truncate_words(plain.render(), setup.pool.config.max_context_words)))
        assert ctx.document == FakeEngine.respond(expected_prompt).strip(), spec
        assert ctx.render() == ctx.document


def test_each_candidate_gets_the_answer_to_its_own_prompt(one_run):
    setup, result = one_run
    for cand in result.candidates:
        prompt = setup.answer_prompt_for(QUESTION, cand)
        assert cand.answer == clean_answer(FakeEngine.respond(prompt)), cand.retriever
    refree = by_spec(result)["ReFree"]
    assert "Assuming the following paragraphs" not in setup.answer_prompt_for(QUESTION, refree)


def test_answer_stage_is_one_engine_call_with_all_16_prompts(one_run):
    """The batching proof: PK, @CP and the answers are one engine call each."""
    setup, result = one_run
    eng = setup.engine
    assert [len(p) for p, _ in eng.calls] == [1, 7, 16]
    assert [eng.calls_of(k) for k in ("pk", "cp", "answer")] == [eng.calls[i : i + 1] for i in range(3)]
    (answer_prompts, params), = eng.calls_of("answer")
    assert sorted(answer_prompts) == sorted(setup.answer_prompt_for(QUESTION, c) for c in result.candidates)
    assert params.max_tokens == setup.pool.config.answer_tokens
    assert eng.calls_of("pk")[0][1].max_tokens == setup.pool.config.pk_tokens
    assert eng.calls_of("cp")[0][1].max_tokens == setup.pool.config.cp_tokens
    assert all(p.temperature == 0.0 for _, p in eng.calls)  # greedy
    # each source searched once, as deep as its deepest user needs
    assert setup.se.calls == [([QUESTION], 10)]
    assert setup.wiki.calls == [([QUESTION], 20)]


def test_two_questions_still_use_one_call_per_stage(setup):
    q2 = "What is a glacier?"
    r1, r2 = setup.pool.run([QUESTION, "  " + q2 + "\n"])
    assert (r1.question, r2.question) == (QUESTION, q2)
    assert [len(p) for p, _ in setup.engine.calls] == [2, 14, 32]
    assert setup.se.calls == [([QUESTION, q2], 10)] and setup.wiki.calls == [([QUESTION, q2], 20)]
    for q, r in ((QUESTION, r1), (q2, r2)):
        assert [c.retriever for c in r.candidates] == list(PAPER_POOL)
        for cand in r.candidates:
            assert cand.answer == clean_answer(FakeEngine.respond(setup.answer_prompt_for(q, cand)))
    assert by_spec(r1)["PK"].context.document != by_spec(r2)["PK"].context.document
    assert by_spec(r2)["PK"].context.document == fill(q2, PK_WORDS)


def test_identical_contexts_are_generated_once(memo_encoder):
    # one short page: SE@1, SE@4 and SE@RR@10 all see the same text, and so do the two SE&Wiki mixes
    short = Passage("only", "Mona Lisa", fill("The Mona Lisa hangs in the Louvre in Paris.", 80), "SE")
    s = Setup(memo_encoder, se=FakeSource("SE", [short]))
    (result,) = s.pool.run([QUESTION])
    cands = by_spec(result)
    same = [cands[x].context.render() for x in ("SE@1", "SE@4", "SE@RR@10")]
    assert same[0] == same[1] == same[2]
    assert cands["SE@2&Wiki@5"].context.render() == cands["SE@RR@5&Wiki@5"].context.render()
    assert cands["SE@1"].answer == cands["SE@4"].answer == cands["SE@RR@10"].answer

    expected = {s.answer_prompt_for(QUESTION, c) for c in result.candidates}
    (answer_prompts, _), = s.engine.calls_of("answer")
    assert len(answer_prompts) == len(set(answer_prompts)) == len(expected) == 10
    (cp_prompts, _), = s.engine.calls_of("cp")
    assert len(cp_prompts) == len(set(cp_prompts)) == 4
    assert s.reader.stats.prompts == 1 + 7 + 16
    assert s.reader.stats.engine_prompts == 1 + 4 + 10


# ---- failure isolation -------------------------------------------------------------------
@pytest.mark.parametrize("broken, users", [("SE", SE_USERS), ("Wiki", WIKI_USERS)])
def test_a_broken_source_fails_only_its_retrievers(memo_encoder, broken, users):
    bad = FakeSource(broken, [], fail=ConnectionError("boom"))
    s = Setup(memo_encoder, **{broken.lower(): bad})
    (result,) = s.pool.run([QUESTION])
    assert result.failed == [spec for spec in PAPER_POOL if spec in users]
    for cand in result.candidates:
        if cand.retriever in users:
            assert cand.answer == "" and cand.context == Context(cand.retriever)
            assert f"{broken} search failed: boom" in cand.error
        else:
            assert cand.error is None and cand.answer.startswith("ans-"), cand.retriever
    ok = [c for c in result.candidates if c.error is None]
    (answer_prompts, _), = s.engine.calls_of("answer")
    assert sorted(answer_prompts) == sorted(s.answer_prompt_for(QUESTION, c) for c in ok)
    (cp_prompts, _), = s.engine.calls_of("cp")
    assert len(cp_prompts) == sum(1 for c in ok if c.retriever.endswith("@CP"))


def test_a_failed_search_is_not_redone_by_later_stages_of_the_question(memo_encoder):
    """A source that failed (here, or in the service's orchestrator) is in what the round found:
    a later round's retrievers that read it fail at once, with the first error, and the source
    is not asked again (in the service: not waited out again by every actor)."""
    from retrievers.groundwork import Groundwork

    bad = FakeSource("SE", [], fail=TimeoutError("slow"))
    s = Setup(memo_encoder, se=bad)
    first = s.pool.run_round([QUESTION], ["SE@1", "Wiki@10"])
    assert first.results[0].failed == ["SE@1"]
    assert first.found[0].failed == {"SE": Failure(TIMEOUT, "SE search failed: slow")}
    later = s.pool.run_round([QUESTION], ["SE@4", "SE@RR@10", "Wiki@10@CP"], first.found)
    assert later.results[0].failed == ["SE@4", "SE@RR@10"] and len(bad.calls) == 1
    assert all(c.error.endswith("SE search failed: slow") for c in later.results[0].candidates if c.error)
    recorded = [Groundwork(failed={"SE": Failure(TIMEOUT, "SE search timed out after 2 s")})]  # as the service does
    (r,) = s.pool.run_round([QUESTION], ["SE@1", "ReFree"], recorded).results
    assert r.failed == ["SE@1"] and r.candidates[0].error.endswith("SE search timed out after 2 s")
    assert len(bad.calls) == 1


def test_both_sources_broken_still_answers_pk_and_refree(memo_encoder):
    s = Setup(memo_encoder, se=FakeSource("SE", [], fail=RuntimeError("down")),
              wiki=FakeSource("Wiki", [], fail=RuntimeError("down")))
    (result,) = s.pool.run([QUESTION])
    assert [c.retriever for c in result.candidates if c.error is None] == ["PK", "ReFree"]
    assert len(result.failed) == 14


# ---- processing ops ----------------------------------------------------------------------
def test_se_top1_is_the_first_page_cut_to_1000_words(one_run):
    _, result = one_run
    (p,) = by_spec(result)["SE@1"].context.passages
    assert p.pid == "se-0" and len(SE_PAGES[0].text.split()) == 1200
    assert p.text == " ".join(SE_PAGES[0].text.split()[:1000])


def test_se_topk_takes_250_words_of_each_of_the_first_k_pages(one_run):
    _, result = one_run
    cands = by_spec(result)
    ps = cands["SE@4"].context.passages
    assert [p.pid for p in ps] == ["se-0", "se-1", "se-2", "se-3"]
    assert all(p.text == " ".join(SE_PAGES[i].text.split()[:250]) for i, p in enumerate(ps))
    mix = cands["SE@2&Wiki@5"].context.passages
    assert [p.pid for p in mix] == ["se-0", "se-1", "wiki-0", "wiki-1", "wiki-2", "wiki-3", "wiki-4"]
    assert [len(p.text.split()) for p in mix[:2]] == [250, 250]
    assert [p.text for p in mix[2:]] == [w.text for w in WIKI_PASSAGES[:5]]
    assert [p.pid for p in cands["Wiki@10"].context.passages] == [f"wiki-{i}" for i in range(10)]


def test_rerank_orders_chunks_by_cosine_to_the_question(one_run, memo_encoder):
    _, result = one_run
    cands = by_spec(result)
    chunks = chunks_of(SE_PAGES)
    sims = cosine(memo_encoder, QUESTION, chunks)
    expected = [chunks[i].pid for i in np.argsort(-sims, kind="stable")[:10]]
    got = cands["SE@RR@10"].context.passages
    assert [p.pid for p in got] == expected
    assert all(len(p.text.split()) <= 150 for p in got)  # ~100-word chunks, not pages
    scores = [p.score for p in got]
    assert scores == sorted(scores, reverse=True)
    np.testing.assert_allclose(scores, np.sort(sims)[::-1][:10], rtol=1e-4, atol=1e-5)
    # the Mona Lisa page, ranked 7th by the search engine, comes first after reranking
    assert {p.pid for p in got[:3]} == {"se-6#0", "se-6#1", "se-6#2"}
    mix = cands["SE@RR@5&Wiki@5"].context.passages
    assert [p.pid for p in mix] == expected[:5] + [f"wiki-{i}" for i in range(5)]


def test_hybrid_reranks_se_chunks_pk_chunks_and_wiki_together(one_run, memo_encoder):
    _, result = one_run
    cands = by_spec(result)
    pk_doc = cands["PK"].context.document
    pk = [Passage(f"pk:0#{i}", "", t, "PK") for i, t in enumerate(split_words(pk_doc, 100))]
    assert len(pk) == 2
    union = chunks_of(SE_PAGES) + pk + WIKI_PASSAGES[:20]
    sims = cosine(memo_encoder, QUESTION, union)
    expected = [union[i].pid for i in np.argsort(-sims, kind="stable")[:10]]
    got = cands["HB@RR@10"].context.passages
    assert [p.pid for p in got] == expected
    assert {p.source for p in got} == {"SE", "PK", "Wiki"}  # the question's topic is in all three
    assert cands["HB@RR@10@CP"].context.passages == got


def test_hybrid_pool_holds_every_se_chunk_both_pk_chunks_and_the_top_20_wiki(memo_encoder):
    s = Setup(memo_encoder, specs=["HB@RR@100"])
    (result,) = s.pool.run([QUESTION])
    (cand,) = result.candidates
    counts = Counter(p.source for p in cand.context.passages)
    assert counts == {"SE": len(chunks_of(SE_PAGES)), "PK": 2, "Wiki": 20}
    wiki_ids = {p.pid for p in cand.context.passages if p.source == "Wiki"}
    assert wiki_ids == {f"wiki-{i}" for i in range(20)}
    assert [len(p) for p, _ in s.engine.calls] == [1, 1]  # HB needs the PK document
    assert s.se.calls == [([QUESTION], 10)] and s.wiki.calls == [([QUESTION], 20)]


# ---- subsets -----------------------------------------------------------------------------
def test_a_subset_runs_only_those_retrievers_in_the_given_order(setup):
    (result,) = setup.pool.run([QUESTION], specs=["ReFree", "Wiki@10"])
    assert [c.retriever for c in result.candidates] == ["ReFree", "Wiki@10"]
    assert [len(p) for p, _ in setup.engine.calls] == [2]  # no PK, no @CP: just the answers
    assert setup.se.calls == [] and setup.wiki.calls == [([QUESTION], 10)]


def test_a_subset_searches_only_as_deep_as_it_needs(setup):
    setup.pool.run([QUESTION], specs=["SE@1", "SE@4@CP"])
    assert setup.se.calls == [([QUESTION], 4)] and setup.wiki.calls == []
    assert [len(p) for p, _ in setup.engine.calls] == [1, 2]


def test_an_empty_subset_runs_nothing(setup):
    (result,) = setup.pool.run([QUESTION], specs=[])
    assert result.candidates == ()
    assert setup.engine.calls == [] and setup.se.calls == [] and setup.wiki.calls == []


def test_unknown_spec_in_a_subset_is_a_key_error_naming_it(setup):
    with pytest.raises(KeyError, match="SE@3"):
        setup.pool.run([QUESTION], specs=["SE@1", "SE@3"])
    assert setup.engine.calls == [] and setup.se.calls == []


def test_a_pool_of_other_specs_runs_them(memo_encoder):
    s = Setup(memo_encoder, specs=["Wiki@3", "SE@RR", "PK@CP"])
    (result,) = s.pool.run([QUESTION])
    cands = by_spec(result)
    assert [p.pid for p in cands["Wiki@3"].context.passages] == ["wiki-0", "wiki-1", "wiki-2"]
    assert len(cands["SE@RR"].context.passages) == 10  # @RR without @k: default_k
    pk_cp = cands["PK@CP"].context
    assert [p.source for p in pk_cp.passages] == ["PK"] and pk_cp.document.startswith("summary-")


# ---- questions and configuration ---------------------------------------------------------
@pytest.mark.parametrize("bad", ["", "   \n\t", "x" * (MAX_QUESTION_CHARS + 1)])
def test_bad_questions_are_refused_before_any_work(setup, bad):
    with pytest.raises(QuestionError):
        setup.pool.run([QUESTION, bad])
    assert setup.engine.calls == [] and setup.se.calls == [] and setup.wiki.calls == []


def test_question_length_limit_is_2000_characters():
    assert MAX_QUESTION_CHARS == 2000
    assert check_question("  " + "x" * 2000 + "  ") == "x" * 2000
    with pytest.raises(QuestionError, match="2001"):
        check_question("x" * 2001)
    with pytest.raises(QuestionError):
        check_question(None)  # type: ignore[arg-type]
    assert issubclass(QuestionError, ValueError)


def test_no_questions_no_work(setup):
    assert setup.pool.run([]) == []
    assert setup.engine.calls == []


def test_pool_refuses_a_missing_source(memo_encoder):
    reader = CachedReader(FakeEngine())
    with pytest.raises(ValueError, match=r"unknown knowledge source 'Wiki' in retriever spec 'Wiki@10'; known: SE, PK"):
        RetrieverPool(PoolConfig(specs=("Wiki@10",)), {"SE": FakeSource("SE", [])}, memo_encoder, reader)
    # PK and ReFree need no search at all; HB combines the sources there are (none: PK's chunks)
    pool = RetrieverPool(PoolConfig(specs=("PK", "ReFree", "HB@10")), {}, memo_encoder, reader)
    (result,) = pool.run([QUESTION])
    assert [c.retriever for c in result.candidates] == ["PK", "ReFree", "HB@10"] and not result.failed
    assert {p.source for p in result.candidates[2].context.passages} == {"PK"}


def test_duplicate_specs_in_the_config_are_refused(memo_encoder):
    with pytest.raises(ValueError, match="twice"):
        Setup(memo_encoder, specs=["SE@1", "SE@1"])


def test_load_warms_every_source(setup):
    assert setup.pool.load() is setup.pool
    assert setup.se.loaded and setup.wiki.loaded


def test_a_rerun_is_served_from_the_reader_cache(memo_encoder, tmp_path):
    cache = ReaderCache(tmp_path / "reader.sqlite")
    first = Setup(memo_encoder, cache=cache)
    (r1,) = first.pool.run([QUESTION])
    second = Setup(memo_encoder, cache=ReaderCache(tmp_path / "reader.sqlite"))
    (r2,) = second.pool.run([QUESTION])
    assert second.engine.calls == []
    assert r1 == r2
    assert second.reader.stats.cache_hits == 1 + 7 + 16


def test_a_malformed_spec_in_a_subset_names_the_bad_token(setup):
    from retrievers.spec import SpecError

    with pytest.raises(SpecError, match="@XX"):
        setup.pool.run(["q"], ["SE@XX"])


GIVEN = [Passage("doc:a", "Alpha", fill("the given alpha document", 300), "bench"),
         Passage("doc:b", "Beta", fill("the given beta document", 120), "bench")]


@pytest.mark.parametrize("truncation", ["own-whitespace", "collapse"])
def test_se1_and_se2_prompts_share_the_first_pages_cut_when_cuts_keep_their_whitespace(memo_encoder, truncation):
    import os

    page = Passage("doc:a", "Alpha", "\n".join(fill(f"record {i} of the alpha page", 60) for i in range(6)), "bench")
    setup = Setup(memo_encoder, truncation=truncation)
    setup.pool.run([QUESTION], specs=["SE@1", "SE@2&Wiki@5"], documents=[[page, GIVEN[1]]])
    se1, se2 = setup.engine.calls_of("answer")[0][0]
    shared = len(os.path.commonprefix([se1, se2]))
    cut = truncate_words(page.text, 250)  # SE@2's first page; SE@1 reads up to 1000 words of it
    if truncation == "own-whitespace":
        assert se1.index(cut) + len(cut) <= shared  # the whole cut, newlines and all: one prefix to cache
    else:  # the old cut joined its words by spaces: the prompts part at the page's first newline
        assert shared < se1.index(page.text.split("\n")[0]) + len(page.text.split("\n")[0]) + 1


def test_an_unknown_truncation_is_refused():
    with pytest.raises(ValueError, match="pool.truncation"):
        PoolConfig(truncation="squash")


def test_given_documents_replace_both_sources_for_that_question_only(setup):
    other = "who wrote the other question"
    with_docs, searched = setup.pool.run([QUESTION, other], specs=["Wiki@10", "SE@1", "SE@2&Wiki@5"],
                                         documents=[GIVEN, None])
    c = by_spec(with_docs)
    assert [p.pid for p in c["Wiki@10"].context.passages] == ["doc:a", "doc:b"]
    assert [p.pid for p in c["SE@1"].context.passages] == ["doc:a"]  # SE@1: the first one, cut
    assert c["SE@1"].context.passages[0].text == truncate_words(GIVEN[0].text, 1000)
    se2 = [p.text for p in c["SE@2&Wiki@5"].context.passages[:2]]
    assert se2 == [truncate_words(d.text, 250) for d in GIVEN]  # SE@k>1: 250 words each
    # only the other question was searched, and its candidates come from the sources
    assert setup.wiki.calls == [([other], 10)] and setup.se.calls == [([other], 2)]
    assert all(not p.pid.startswith("doc:") for p in by_spec(searched)["Wiki@10"].context.passages)


def test_given_documents_are_chunked_and_reranked_by_rr(setup, memo_encoder):
    (r,) = setup.pool.run([QUESTION], specs=["SE@RR@10", "PK", "ReFree"], documents=[GIVEN])
    c = by_spec(r)
    chunks = chunks_of(GIVEN)
    order = np.argsort(-cosine(memo_encoder, QUESTION, chunks), kind="stable")
    assert [p.pid for p in c["SE@RR@10"].context.passages] == [chunks[i].pid for i in order][:10]
    assert c["PK"].context.passages == () and c["ReFree"].context.passages == ()
    assert setup.se.calls == [] and setup.wiki.calls == []


def test_documents_must_match_the_questions(setup):
    with pytest.raises(ValueError, match="1 questions but 2 document lists"):
        setup.pool.run([QUESTION], documents=[GIVEN, GIVEN])


def test_reader_tokens_per_retriever_with_shared_prefixes_and_the_pk_document_once(one_run):
    """Every candidate carries its reader work (the fake engine counts words as tokens); an
    answer prompt that shares its document prefix with its @CP prompt counts whole 128-token
    blocks as prefix-cache hits, and only when that @CP retriever is in the set."""
    setup, result = one_run
    cands = by_spec(result)
    for c in cands.values():
        assert c.tokens.prompt > 0 and c.tokens.generated > 0, c.retriever
    wiki = cands["Wiki@10"]
    assert wiki.cached_from == "Wiki@10@CP" and wiki.tokens.cached > 0 and wiki.tokens.cached % 128 == 0
    assert cands["ReFree"].tokens.cached == 0 and cands["ReFree"].cached_from is None
    assert result.reader_tokens({"Wiki@10"}).cached == 0  # its twin did not run: nothing to hit
    both = result.reader_tokens({"Wiki@10", "Wiki@10@CP"})
    assert both.cached == wiki.tokens.cached + cands["Wiki@10@CP"].tokens.cached
    assert both.computed == both.prompt - both.cached + both.generated
    pk = result.shared_tokens["PK"]
    assert pk.prompt > 0 and cands["PK"].shared == ("PK",) and cands["HB@RR@10"].shared == ("PK",)
    alone = result.reader_tokens({"PK"}).total + result.reader_tokens({"HB@RR@10"}).total
    assert result.reader_tokens({"PK", "HB@RR@10"}).total == alone - pk.total  # the PK document is written once


def test_token_counts_are_the_engines_and_nothing_is_tokenised(memo_encoder):
    """The pool reads each prompt's tokens from the engine's output; a hit the engine counted
    that no earlier prompt of the question shares (another question's prefix) is not the
    question's: 0, no owner."""
    class NoTokenizer(FakeEngine):
        def token_ids(self, texts):
            raise AssertionError("tokenised again")

    s = Setup(memo_encoder, specs=["Wiki@10@CP"])
    s.reader = s.pool.readers[""] = CachedReader(NoTokenizer())
    (first,) = s.pool.run([QUESTION])
    (second,) = s.pool.run(["who painted the night watch"])  # the same Wiki passages: the engine hits them
    assert s.pool.reader.engine.cached_tokens > 0
    for r in (first, second):
        (c,) = r.candidates
        assert c.tokens.prompt > 0 and c.tokens.cached == 0 and c.cached_from is None


class CountingEncoder:
    """Counts the texts it embeds (the @RR cost), over the memoised real encoder."""

    def __init__(self, inner):
        self.inner, self.name, self.texts, self.calls = inner, inner.name, 0, 0

    def load(self):
        return self

    @property
    def dim(self):
        return self.inner.dim

    def encode(self, texts, show_progress=False):
        self.texts += len(texts)
        self.calls += 1
        return self.inner.encode(texts)


def test_stages_of_one_question_share_searches_pk_and_reranking(memo_encoder):
    """A cascade's rounds, each given what the earlier ones found (immutable, never merged back
    into): each source searched once at the depth the whole plan needs, PK written once,
    chunks embedded once; the candidates are the ones a single run of the same specs gives."""
    from retrievers.groundwork import Groundwork

    stages = [["SE@1", "SE@1@CP"], ["SE@RR@10", "PK"], ["HB@RR@10", "Wiki@10"], ["SE@RR@10@CP", "HB@RR@10@CP"]]
    plan = [s for st in stages for s in st]
    enc = CountingEncoder(memo_encoder)
    s = Setup(enc)
    work, staged = Groundwork(), []
    for st in stages:
        run = s.pool.run_round([QUESTION], st, [work], plan_specs=plan)
        work = work.plus(run.found[0])
        staged += run.results[0].candidates
    assert set(work.pk) == {""} and set(work.reranked) == {"SE", "HB"} and work.depth == {"SE": 10, "Wiki": 20}
    assert len(s.se.calls) == 1 and len(s.wiki.calls) == 1  # once each, though four stages use them
    assert s.se.calls[0][1] == s.pool.config.se_pages and s.wiki.calls[0][1] == s.pool.config.hb_wiki_k
    assert len(s.engine.calls_of("pk")) == 1
    embedded = enc.texts

    whole = Setup(CountingEncoder(memo_encoder))
    (one,) = whole.pool.run([QUESTION], plan)
    assert {c.retriever: (c.answer, c.context) for c in staged} == {c.retriever: (c.answer, c.context)
                                                                   for c in one.candidates}
    assert embedded == whole.pool.reranker.texts  # the staged run embedded no chunk twice
    # without shared work every stage searches again
    again = Setup(memo_encoder)
    for st in stages:
        again.pool.run([QUESTION], st)
    assert len(again.se.calls) == 4


class LogprobEngine(FakeEngine):
    """The fake engine, with a log-probability per output word (as vLLM gives per token)."""

    def generate(self, prompts, params):
        outs = super().generate(prompts, params)
        return [replace(o, logprobs=tuple(-0.1 * (i + 1) for i in range(len(o.text.split())))) for o in outs]


def test_every_answer_carries_the_readers_logprobs(memo_encoder):
    s = Setup(memo_encoder, specs=["SE@1", "Wiki@10@CP", "ReFree"])
    s.reader = s.pool.readers[""] = CachedReader(LogprobEngine())
    (result,) = s.pool.run([QUESTION])
    for c in result.candidates:
        assert c.error is None
        assert c.logprobs is not None and len(c.logprobs) > 0
        assert c.confidence == pytest.approx(sum(c.logprobs) / len(c.logprobs))
    (plain,) = Setup(memo_encoder, specs=["SE@1"]).pool.run([QUESTION])
    assert plain.candidates[0].logprobs is None and plain.candidates[0].confidence is None


def test_pending_searches_is_the_one_rule_for_what_a_stage_still_searches():
    """Every home of searching (a pool run, the rounds of an Ask in-process and in the service) asks it."""
    from retrievers.groundwork import Groundwork, pending_searches, search_found

    p = Passage("w1", "t", "text", "Wiki")
    work = [Groundwork(),
            Groundwork(hits={"Wiki": (p,)}, depth={"Wiki": 10}),  # searched deep enough by an earlier round
            Groundwork(failed={"Wiki": Failure(TIMEOUT, "Wiki search timed out")})]  # never searched again
    calls = pending_searches(work, {"Wiki": 5, "SE": 1}, {"Wiki": 10, "SE": 30})
    assert calls == [("Wiki", [0], 10), ("SE", [0, 1, 2], 30)]  # at the plan's deepest k
    assert pending_searches(work, {"SE": 1}, {}, skip={0, 2}) == [("SE", [1], 1)]  # given documents

    for src, todo, k, found in [("Wiki", [0], 10, [[p, p]]), ("SE", [0, 1, 2], 30, Failure(TIMEOUT, "SE timed out"))]:
        for j, more in search_found(src, todo, k, found).items():
            work[j] = work[j].plus(more)
    assert work[0].hits["Wiki"] == (p, p) and work[0].depth["Wiki"] == 10
    assert all(w.failed["SE"].kind == TIMEOUT for w in work) and "SE" not in work[0].depth
    assert pending_searches(work, {"Wiki": 10, "SE": 1}, {}) == []  # done, or failed for good


def test_groundwork_plus_keeps_the_deeper_search_and_the_first_pk_and_order():
    from retrievers.groundwork import Groundwork, PKDocument
    from retrievers.types import ReaderTokens

    a, b = Passage("a", "", "a"), Passage("b", "", "b")
    pk1, pk2 = PKDocument("first", ReaderTokens(3, 2)), PKDocument("second", ReaderTokens(3, 2))
    base = Groundwork(hits={"SE": (a,)}, depth={"SE": 1}, pk={"": pk1}, reranked={"SE": (a, b)}, read=(("pk prompt", "PK"),))
    more = Groundwork(hits={"SE": (a, b), "Wiki": (b,)}, depth={"SE": 10, "Wiki": 5}, pk={"": pk2, "1.5B": pk2},
                      reranked={"SE": (b, a), "HB": (b,)}, read=(("pk prompt", "PK"), ("se prompt", "SE@1")))
    both = base.plus(more)
    assert both.hits == {"SE": (a, b), "Wiki": (b,)} and both.depth == {"SE": 10, "Wiki": 5}
    assert both.pk == {"": pk1, "1.5B": pk2} and both.reranked == {"SE": (a, b), "HB": (b,)}
    assert both.read == (("pk prompt", "PK"), ("se prompt", "SE@1"))
    assert base.depth == {"SE": 1} and base.pk == {"": pk1}  # neither side changed
    shallow = both.plus(Groundwork(hits={"SE": (a,)}, depth={"SE": 1}))
    assert shallow.hits["SE"] == (a, b)


def test_rerank_is_one_encoder_call_per_round_for_the_whole_batch_and_orders_as_alone(memo_encoder):
    counting = CountingEncoder(memo_encoder)
    specs = ["SE@RR@10", "SE@RR@5&Wiki@5", "HB@RR@10", "Wiki@10"]
    s = Setup(counting, specs=specs)
    questions = [QUESTION, "what is the capital of france", "who wrote hamlet"]
    results = s.pool.run(questions)
    assert counting.calls == 1  # every question's SE, Wiki and HB orders in one call
    for q, result in zip(questions, results):  # the same order as each key ranked alone
        cands = by_spec(result)
        chunks = [p for p in cands["SE@RR@10"].context.passages]
        sims = cosine(memo_encoder, q, chunks)
        # in order up to float noise: a chunk's vector embedded in a batch and alone differ by ~1e-8 (AVX512)
        assert all(a >= b - 1e-6 for a, b in zip(sims, sims[1:]))
        assert all(math.isclose(p.score, float(x), abs_tol=1e-6) for p, x in zip(chunks, sims))
    s.pool.run(questions)  # a second round over the same work would reuse it; a new run embeds again
    assert counting.calls == 2
