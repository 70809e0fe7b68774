"""Two readers in one pool (stand-in engines): a `SPEC~READER` member sends every prompt it
makes (PK document, @CP summary, answer) to that reader, a plain spec to the default one;
each reader writes its own PK document once per question; prefix-cache costs never cross
readers; an unconfigured reader is refused by name."""
from __future__ import annotations

import pytest

from retrievers.pool import PoolConfig, RetrieverPool
from retrievers.reader import CachedReader
from retrievers.spec import SpecError, parse_spec, split_reader, with_reader

from tests.retrievers.fakes import QUESTION, SE_PAGES, WIKI_PASSAGES, FakeEngine, FakeSource


class Two:
    def __init__(self, encoder, specs):
        self.small, self.big = FakeEngine("small"), FakeEngine("big")
        self.pool = RetrieverPool(PoolConfig(specs=tuple(specs)),
                                  {"SE": FakeSource("SE", SE_PAGES), "Wiki": FakeSource("Wiki", WIKI_PASSAGES)},
                                  encoder, CachedReader(self.small), readers={"1.5B": CachedReader(self.big)})


def prompts_of(engine, kind):
    return [p for batch, _ in engine.calls_of(kind) for p in batch]


def test_a_member_names_its_reader_and_a_plain_spec_reads_the_default():
    assert parse_spec("Wiki@10~1.5B").reader == "1.5B" and parse_spec("Wiki@10").reader == ""
    assert split_reader("SE@2&Wiki@5@CP~1.5B") == ("SE@2&Wiki@5@CP", "1.5B")
    assert with_reader("PK", "1.5B") == "PK~1.5B" and with_reader("PK~1.5B", "") == "PK"
    for bad in ("Wiki@10~", "Wiki@10~1.5 B", "Wiki@10~x~y"):
        with pytest.raises(SpecError, match="reader name"):
            parse_spec(bad)


def test_every_prompt_of_a_pair_goes_to_its_reader(memo_encoder):
    t = Two(memo_encoder, ["Wiki@10", "Wiki@10~1.5B", "PK", "PK~1.5B", "SE@1@CP~1.5B", "HB@RR@10~1.5B"])
    (result,) = t.pool.run([QUESTION])
    cands = {c.retriever: c for c in result.candidates}
    assert not [c for c in cands.values() if c.error]
    # the default reader: Wiki@10 and PK, one PK document; the big one: the rest, its own PK document
    assert len(prompts_of(t.small, "answer")) == 2 and len(prompts_of(t.big, "answer")) == 4
    assert len(prompts_of(t.small, "pk")) == 1 and len(prompts_of(t.big, "pk")) == 1  # HB~1.5B reuses PK~1.5B's
    assert prompts_of(t.small, "cp") == [] and len(prompts_of(t.big, "cp")) == 1
    # the same prompt, two readers: two answers, each the pair's own
    assert cands["Wiki@10"].context == cands["Wiki@10~1.5B"].context.__class__(
        "Wiki@10", cands["Wiki@10~1.5B"].context.passages)
    assert cands["PK~1.5B"].shared == ("PK~1.5B",) and cands["PK"].shared == ("PK",)
    assert set(result.shared_tokens) == {"PK", "PK~1.5B"}


def test_prefix_cache_costs_never_cross_readers(memo_encoder):
    """Wiki@10's prompt read by the default reader shares nothing with the same prompt read by
    the other: that one owes its prefix to no earlier prompt of its reader."""
    t = Two(memo_encoder, ["Wiki@10", "Wiki@10@CP", "Wiki@10~1.5B"])
    (result,) = t.pool.run([QUESTION])
    cands = {c.retriever: c for c in result.candidates}
    assert cands["Wiki@10~1.5B"].cached_from is None and cands["Wiki@10~1.5B"].tokens.cached == 0


def test_a_reader_the_pool_lacks_is_refused_by_name(memo_encoder):
    with pytest.raises(SpecError, match=r"reader '3B', which is not configured.*configured: 1.5B"):
        Two(memo_encoder, ["Wiki@10", "Wiki@10~3B"])
