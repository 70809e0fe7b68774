"""vLLM's finished requests as the reader's Generations, without a model: the text, the
log-probabilities (no end-of-sequence token) and vLLM's own token counts, which also add up in
the engine's token stats."""
from __future__ import annotations

import asyncio
from types import SimpleNamespace as NS

from retrievers.reader import Generation, SamplingParams
from retrievers.types import ReaderTokens
from serve.engine.vllm_engine import AsyncVLLMEngine, VLLMEngine

EOS = 2


def request_output(text, token_ids, prompt_ids, cached, logprobs=True):
    lps = [{t: NS(logprob=-0.1 * (i + 1))} for i, t in enumerate(token_ids)] if logprobs else None
    return NS(prompt_token_ids=prompt_ids, num_cached_tokens=cached,
              outputs=[NS(text=text, token_ids=token_ids, logprobs=lps)])


def bare(cls):
    """The engine without a model: what `_generation` reads of it is the tokenizer's special ids."""
    engine = cls.__new__(cls)
    engine._tokenizer = NS(all_special_ids=[EOS])
    engine._llm = None
    return engine


def test_a_finished_request_carries_vllms_counts_and_the_stats_add_them():
    engine = bare(VLLMEngine)
    done = [request_output("Paris", [11, 12, EOS], [1] * 300, 256), request_output("x", [13], [1] * 40, 0, False)]
    engine._llm = NS(generate=lambda prompts, params, use_tqdm: done)
    engine._sampling = lambda params: None
    engine.load = lambda: engine
    outs = engine.generate(["p1", "p2"], SamplingParams())
    assert outs[0] == Generation("Paris", (-0.1, -0.2), ReaderTokens(300, 3, 256))  # the decoded EOS is counted
    assert outs[1] == Generation("x", None, ReaderTokens(40, 1, 0))
    assert (engine.prompt_tokens, engine.generated_tokens, engine.cached_tokens) == (340, 4, 256)


def test_the_async_engine_answers_one_request_with_its_counts():
    engine = bare(AsyncVLLMEngine)

    async def stream(prompt, params, request_id):
        yield request_output("Par", [11], [1] * 50, 0)  # partial outputs: the last one is the request's
        yield request_output("Paris", [11, 12], [1] * 50, 32)

    engine._llm = NS(generate=stream)
    engine._sampling = lambda params: None
    engine.load = lambda: engine
    out = asyncio.run(engine.agenerate("p", SamplingParams()))
    assert out == Generation("Paris", (-0.1, -0.2), ReaderTokens(50, 2, 32))
    assert (engine.prompt_tokens, engine.generated_tokens, engine.cached_tokens) == (50, 2, 32)
    assert engine.continuous and engine.reports_logprobs and VLLMEngine.reports_logprobs and not VLLMEngine.continuous
