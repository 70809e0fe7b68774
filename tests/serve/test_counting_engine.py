"""The Reader deployment's CountingEngine: a ReaderEngine around the engine that counts each
request's tokens (the engine's own) and passes on what the engine declares."""
from __future__ import annotations

from retrievers.engine import ReaderEngine
from retrievers.reader import Generation, PromptText, SamplingParams
from retrievers.types import ReaderTokens


def test_counting_engine_sums_the_engines_counts_per_output_or_counts_words():
    from serve.app.reader import CountingEngine

    class Counted(ReaderEngine):
        model_id = "counted"

        def format(self, prompt):
            return prompt.body

        def generate(self, prompts, params):
            return [Generation("x y z", None, ReaderTokens(10, 3, 4))] * len(prompts)

    class Plain(Counted):
        model_id = "plain"

        def generate(self, prompts, params):
            return ["one two"] * len(prompts)

    counted = CountingEngine(Counted())
    counted.generate(["a", "b"], SamplingParams())
    counted.generate(["c"], SamplingParams())
    assert (counted.batches, counted.batch_prompts) == (2, 3)
    assert (counted.prompt_tokens, counted.generated_tokens, counted.cached_tokens) == (30, 9, 12)
    plain = CountingEngine(Plain())
    assert plain.generate(["a", "b"], SamplingParams())[0] == Generation("one two")
    assert (plain.prompt_tokens, plain.generated_tokens) == (0, 4)  # no counts: its tokenizer's words, no prompt


def test_counting_engine_is_a_reader_engine_that_passes_on_what_its_engine_declares():
    from serve.app.reader import CountingEngine

    class Continuous(ReaderEngine):
        model_id = "c"
        continuous = True
        reports_logprobs = True

        def format(self, prompt):
            return f"<{prompt.body}>"

        @property
        def dead_error(self):
            return RuntimeError("gone")

    wrapped = CountingEngine(Continuous())
    assert isinstance(wrapped, ReaderEngine) and wrapped.continuous and wrapped.reports_logprobs
    assert str(wrapped.dead_error) == "gone" and wrapped.format(PromptText("q")) == "<q>"
    assert wrapped.load() is wrapped
