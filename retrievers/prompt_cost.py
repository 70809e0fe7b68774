"""What a retriever's prompts cost the reader: the engine's own token counts (each Generation
carries its request's), with prefix-cache hits kept only where an earlier prompt of the same
question shares the prefix, and whose prompt that was (`prefix_owner`), so
`QuestionResult.reader_tokens` counts hits only where that retriever ran. Nothing is tokenised
here: prompts are compared as text.
"""
from __future__ import annotations

import os
from dataclasses import replace
from typing import Sequence

from retrievers.reader import Generation
from retrievers.types import ReaderTokens

# what a prompt cost, and whose earlier prompt of the question its prefix-cache hits were shared with
PromptCost = tuple[ReaderTokens, "str | None"]


def prefix_owner(prompt: str, earlier: Sequence[tuple[str, str]]) -> str | None:
    """Whose earlier prompt, of (prompt, owner) pairs, shares the longest prefix with `prompt`:
    where the engine's prefix cache most likely served its hits from (None: none shares any)."""
    best, owner = 0, None
    for other, who in earlier:
        n = len(os.path.commonprefix([prompt, other]))
        if n > best:
            best, owner = n, who
    return owner


def prompt_cost(prompt: str, out: Generation, earlier: Sequence[tuple[str, str]]) -> PromptCost:
    """One prompt's cost after the question's `earlier` (prompt, owner) reads: hits no earlier
    prompt of the question shares came from elsewhere (another question): not this question's."""
    owner = prefix_owner(prompt, earlier) if out.tokens.cached else None
    return (out.tokens if owner else replace(out.tokens, cached=0)), owner


def with_summary(answer: PromptCost, summary: PromptCost) -> PromptCost:
    """A @CP retriever's cost: its answer prompt's and its summary prompt's. Its hits come from
    one other retriever's prompt: its answer prompt's, else its summary prompt's."""
    (t, owner), (cp, cp_owner) = answer, summary
    return t + cp, (owner if t.cached else cp_owner)
