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
