"""The 16 retrievers over REAL sources (faiss Wiki, Lucene SE) and the real encoder, with the
fake reader engine (the vLLM engine never runs in unit tests)."""
from __future__ import annotations

import pytest

from retrievers.corpus import base_id
from retrievers.pool import PoolConfig, RetrieverPool
from retrievers.reader import CachedReader
from retrievers.spec import PAPER_POOL

from tests.retrievers.fakes import FakeEngine

pytestmark = pytest.mark.slow


def test_paper_pool_over_real_indexes(dense_source, lucene_source, lucene_index_dir, encoder, data_slice):
    from retrievers.sources.lucene import page_members

    members = page_members(lucene_index_dir)
    engine = FakeEngine()
    pool = RetrieverPool(PoolConfig(), {"Wiki": dense_source, "SE": lucene_source}, encoder,
                         CachedReader(engine)).load()
    # two questions whose gold record both real sources put in their top 10
    qs = data_slice.questions
    wiki_rows = dense_source.search([q["question"] for q in qs], 10)
    se_rows = lucene_source.search([q["question"] for q in qs], 10)
    picked = [q for q, w, s in zip(qs, wiki_rows, se_rows)
              if q["gold_pids"][0] in {base_id(p.pid) for p in w}
              and q["gold_pids"][0] in {m for p in s[:1] for m in members[p.pid]}][:2]
    assert len(picked) == 2

    results = pool.run([q["question"] for q in picked])
    assert [len(p) for p, _ in engine.calls] == [2, 14, 32]  # PK, @CP, answers: one call each
    slice_ids = {d.doc_id for d in data_slice.docs}
    for q, result in zip(picked, results):
        gold = q["gold_pids"][0]
        cands = {c.retriever: c for c in result.candidates}
        assert list(cands) == list(PAPER_POOL) and result.failed == []
        assert all(c.answer.startswith("ans-") for c in result.candidates)
        for spec, c in cands.items():
            for p in c.context.passages:
                if p.source == "Wiki":
                    assert base_id(p.pid) in slice_ids
                elif p.source == "SE":
                    assert base_id(p.pid) in members
        wiki10 = cands["Wiki@10"].context.passages
        assert len(wiki10) == 10 and gold in {base_id(p.pid) for p in wiki10}
        (top_page,) = cands["SE@1"].context.passages
        assert gold in members[top_page.pid]
        assert len(cands["SE@4"].context.passages) == 4
        rr = cands["SE@RR@10"].context.passages
        assert [p.score for p in rr] == sorted((p.score for p in rr), reverse=True)
        assert all(-1.0 <= p.score <= 1.0001 for p in rr)  # cosine, not BM25
        hb = cands["HB@RR@10"].context.passages
        assert len(hb) == 10 and {p.source for p in hb} <= {"SE", "Wiki", "PK"}
        assert cands["PK"].context.document and cands["ReFree"].context.passages == ()
