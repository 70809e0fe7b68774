"""The paper's prompt templates (Appendix C.2) and answer cleaning."""
from __future__ import annotations

from retrievers.prompts import answer_prompt, clean_answer, compress_prompt, pk_prompt


def test_pk_prompt():
    p = pk_prompt("who wrote hamlet")
    assert p.body == "Generate a background document to answer the given question. who wrote hamlet."
    assert p.cue == "Document:"


def test_compress_prompt_puts_query_and_document():
    p = compress_prompt("q?", "the doc")
    assert p.body.startswith("Please truthfully summarize the document below")
    assert "within 200 words" in p.body and p.body.endswith("query: q?\n\ndocument: the doc")


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
