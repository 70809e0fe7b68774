"""Frozen value types and their rendering."""
from __future__ import annotations

import dataclasses

import pytest

from retrievers.types import Candidate, Context, Passage, QuestionResult


def test_passage_render_and_frozen():
    assert Passage("1", "Title", "Body").render() == "Title\nBody"
    assert Passage("1", "", "Body").render() == "Body"
    with pytest.raises(dataclasses.FrozenInstanceError):
        Passage("1", "t", "b").text = "x"  # type: ignore[misc]


def test_context_render_prefers_the_document():
    ps = (Passage("1", "A", "a"), Passage("2", "", "b"))
    assert Context("s", ps).render() == "A\na\n\nb"
    assert Context("s", ps, "summary").render() == "summary"
    assert Context("s", ps, "").render() == ""
    assert Context("s").is_empty and not Context("s", ps).is_empty and not Context("s", (), "d").is_empty


def test_question_result_lists_failed_retrievers():
    ok = Candidate("A", "x", Context("A"))
    bad = Candidate("B", "", Context("B"), error="boom")
    assert QuestionResult("q", (ok, bad, ok)).failed == ["B"]
    assert QuestionResult("q").candidates == ()


def test_what_the_voter_is_sent_keeps_every_answer_and_drops_the_passages():
    from retrievers.types import Candidate, Context, Failure, Passage, QuestionResult, ReaderTokens

    p = Passage("1", "t", "a long passage " * 50, "Wiki")
    r = QuestionResult("q", (Candidate("Wiki@5", "Paris", Context("Wiki@5", (p,)), tokens=ReaderTokens(90, 2),
                                       logprobs=(-0.1, -0.2)),
                             Candidate("PK", "Lyon", Context("PK", document="a PK document")),
                             Candidate.failed("SE@1", Failure("timeout", "SE search timed out"))))
    v = r.for_vote()
    assert [(c.retriever, c.answer, c.error, c.logprobs, c.tokens) for c in v.candidates] == \
        [(c.retriever, c.answer, c.error, c.logprobs, c.tokens) for c in r.candidates]
    assert all(c.context.is_empty for c in v.candidates) and r.candidates[0].context.passages == (p,)
    assert v.failed == r.failed and v.reader_tokens() == r.reader_tokens()
