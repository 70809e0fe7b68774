"""The EoR paper's prompt templates (Appendix C.2), Llama2-chat variants (small models answer
"with one or few words"). Shared context comes first so prefix caching can reuse it."""
from __future__ import annotations

from retrievers.reader import PromptText

PK_TEMPLATE = "Generate a background document to answer the given question. {query}."
CP_TEMPLATE = ("Please truthfully summarize the document below, the summary should contain the most "
               "important information relevant to answer the query and be within 200 words: "
               "query: {query}\n\ndocument: {document}")
REFREE_TEMPLATE = "Please directly answer the following question with one or few words: {query}"
RAG_TEMPLATE = ("Assuming the following paragraphs are true:\n\n{document}\n\n"
                "Please directly answer the following question with one or few words: {query}")


def pk_prompt(query: str) -> PromptText:
    return PromptText(PK_TEMPLATE.format(query=query), cue="Document:")


def compress_prompt(query: str, document: str) -> PromptText:
    return PromptText(CP_TEMPLATE.format(query=query, document=document), cue="summary:")


def answer_prompt(query: str, document: str | None) -> PromptText:
    """RAG prompt, or the retrieval-free one when there is no document."""
    if document is None:
        return PromptText(REFREE_TEMPLATE.format(query=query), cue="Answer:")
    return PromptText(RAG_TEMPLATE.format(query=query, document=document), cue="Answer:")


def clean_answer(text: str) -> str:
    """The first non-empty line: base models run on into new questions; chat models add lines."""
    for line in text.strip().splitlines():
        line = line.strip()
        if line:
            return line
    return ""
