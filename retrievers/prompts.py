"""The EoR paper's prompt templates (Appendix C.2), Llama2-chat variants (small models answer
"with one or few words"), and the cleaning that turns a reader's output into the short span
the voter compares.

Prefix reuse: vLLM's prefix cache reuses only an exact shared prefix, so every prompt built
from one document starts with that document. The RAG prompt already does; the compression
prompt does too in the default "shared-prefix" layout (the same opening line and document,
then the paper's instruction and the query), so a retriever's @CP prompt and its answer
prompt prefill the document once. `layout="paper"` keeps the paper's query-first wording.
"""
from __future__ import annotations

import re

from retrievers.reader import PromptText

PROMPT_LAYOUTS = ("shared-prefix", "paper")

PK_TEMPLATE = "Generate a background document to answer the given question. {query}."
CONTEXT_HEADER = "Assuming the following paragraphs are true:\n\n{document}\n\n"
CP_TEMPLATE = ("Please truthfully summarize the document below, the summary should contain the most "
               "important information relevant to answer the query and be within 200 words: "
               "query: {query}\n\ndocument: {document}")
CP_SHARED_TEMPLATE = (CONTEXT_HEADER + "Please truthfully summarize the paragraphs above, the summary should "
                      "contain the most important information relevant to answer the query and be within "
                      "200 words: query: {query}")
REFREE_TEMPLATE = "Please directly answer the following question with one or few words: {query}"
RAG_TEMPLATE = CONTEXT_HEADER + "Please directly answer the following question with one or few words: {query}"


def pk_prompt(query: str) -> PromptText:
    return PromptText(PK_TEMPLATE.format(query=query), cue="Document:")


def compress_prompt(query: str, document: str, layout: str = "shared-prefix") -> PromptText:
    if layout not in PROMPT_LAYOUTS:
        raise ValueError(f"unknown prompt layout {layout!r}; known: {', '.join(PROMPT_LAYOUTS)}")
    template = CP_SHARED_TEMPLATE if layout == "shared-prefix" else CP_TEMPLATE
    return PromptText(template.format(query=query, document=document), cue="summary:")


def answer_prompt(query: str, document: str | None) -> PromptText:
    """RAG prompt, or the retrieval-free one when there is no document."""
    if document is None:
        return PromptText(REFREE_TEMPLATE.format(query=query), cue="Answer:")
    return PromptText(RAG_TEMPLATE.format(query=query, document=document), cue="Answer:")


# A label a reader puts before its answer ("Answer:", "The answer is", "Who:"), markdown
# emphasis and wrapping quotes: none of it is the answer.
_LEAD = re.compile(r"^(?:(?:the\s+)?(?:short\s+|final\s+)?answer(?:\s+is)?|a|who|what|when|where|which|how|why)"
                   r"\s*[:\-]\s*|^the\s+answer\s+(?:to\s+the\s+question\s+)?is\s+", re.IGNORECASE)
_WRAP = "*_`\"'“”‘’ "


def clean_answer(text: str) -> str:
    """The short span the voter compares: the first non-empty line (base models run on into
    new questions, chat models add lines), without a leading answer label, emphasis, wrapping
    quotes or a final full stop. Sentences stay sentences: only the framing goes."""
    for line in text.strip().splitlines():
        line = line.strip()
        if not line:
            continue
        for _ in range(2):  # "**Answer:** Paris" has a label inside emphasis
            line = _LEAD.sub("", line.strip(_WRAP)).strip()
        line = line.strip(_WRAP)
        if line.endswith(".") and not re.search(r"\b[A-Z]\.$|\.\.\.$", line):
            line = line[:-1].rstrip()
        return line
    return ""
