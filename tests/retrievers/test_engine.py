"""The reader engine interface: what an engine must give, and the defaults of what it may."""
from __future__ import annotations

import asyncio

import pytest

from retrievers.engine import ReaderEngine
from retrievers.reader import PromptText, SamplingParams
from retrievers.types import ReaderTokens


class Minimal(ReaderEngine):
    model_id = "minimal"

    def format(self, prompt: PromptText) -> str:
        return prompt.body


def test_format_is_required():
    class NoFormat(ReaderEngine):
        model_id = "x"

    with pytest.raises(TypeError, match="abstract"):
        NoFormat()


def test_the_defaults_of_an_engine_with_no_optional_ability():
    e = Minimal()
    assert (e.continuous, e.reports_logprobs, e.dead_error, e.unfinished_requests, e.on_start) == (False, False, None, 0, None)
    assert e.load() is e and e.close() is None
    assert [len(x) for x in e.token_ids(["one two three", ""])] == [3, 0]  # whitespace words
    assert e.token_ids(["same words"]) == e.token_ids(["same words"])  # the same in every process
    with pytest.raises(NotImplementedError, match="call agenerate"):
        e.generate(["p"], SamplingParams())
    with pytest.raises(NotImplementedError, match="call generate"):
        asyncio.run(e.agenerate("p", SamplingParams()))


def test_token_stats_add_up_per_engine():
    a, b = Minimal(), Minimal()
    a.add_tokens(ReaderTokens(10, 3, 4))
    a.add_tokens(ReaderTokens(5, 1, 0))
    assert (a.prompt_tokens, a.generated_tokens, a.cached_tokens) == (15, 4, 4)
    assert (b.prompt_tokens, b.generated_tokens, b.cached_tokens) == (0, 0, 0)  # not shared through the class
