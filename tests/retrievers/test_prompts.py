"""The paper's prompt templates (Appendix C.2) and answer cleaning."""
from __future__ import annotations

import pytest

from retrievers.prompts import answer_prompt, clean_answer, compress_prompt, pk_prompt


def test_pk_prompt():
    p = pk_prompt("who wrote hamlet")
    assert p.body == "Generate a background document to answer the given question. who wrote hamlet."
    assert p.cue == "Document:"


def test_compress_prompt_in_the_paper_layout_puts_query_and_document():
    p = compress_prompt("q?", "the doc", layout="paper")
    assert p.body.startswith("Please truthfully summarize the document below")
    assert "within 200 words" in p.body and p.body.endswith("query: q?\n\ndocument: the doc")


def test_compress_and_answer_prompts_of_one_document_share_a_prefix():
    """The default layout: the @CP prompt and the answer prompt over the same document agree
    up to and past the document, so the prefix cache prefills it once."""
    cp, rag = compress_prompt("q?", "THE DOC"), answer_prompt("q?", "THE DOC")
    shared = "Assuming the following paragraphs are true:\n\nTHE DOC\n\nPlease "
    assert cp.body.startswith(shared) and rag.body.startswith(shared)
    assert "within 200 words" in cp.body and cp.body.endswith("query: q?") and cp.cue == "summary:"
    with pytest.raises(ValueError, match="layout"):
        compress_prompt("q?", "d", layout="sideways")


def test_answer_prompts_put_the_shared_context_first():
    rag = answer_prompt("who?", "CONTEXT")
    assert rag.body.startswith("Assuming the following paragraphs are true:\n\nCONTEXT\n\n")
    assert rag.body.endswith("with one or few words: who?") and rag.cue == "Answer:"
    free = answer_prompt("who?", None)
    assert free.body == "Please directly answer the following question with one or few words: who?"
    assert answer_prompt("who?", "").body != free.body  # an empty document is still a RAG prompt


def test_clean_answer_takes_the_first_non_empty_line():
    assert clean_answer("\n  Paris \nQuestion: next one") == "Paris"
    assert clean_answer("   \n \n") == ""
    assert clean_answer("") == ""


@pytest.mark.parametrize("raw, short", [
    ("**Answer:** Leonardo da Vinci.", "Leonardo da Vinci"),
    ("The answer is 1945.", "1945"),
    ("Who: The Mona Lisa is attributed to Leonardo da Vinci.", "The Mona Lisa is attributed to Leonardo da Vinci"),
    ('"Paris"', "Paris"),
    ("A: 42", "42"),
    ("Washington D.C.", "Washington D.C."),
    ("J. R. R. Tolkien", "J. R. R. Tolkien"),
    ("Whoopi Goldberg", "Whoopi Goldberg"),
])
def test_clean_answer_drops_labels_emphasis_quotes_and_the_full_stop(raw, short):
    assert clean_answer(raw) == short
