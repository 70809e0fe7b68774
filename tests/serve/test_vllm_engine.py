"""The real reader: vLLM on CPU with the packaged SmolLM2 model, and the whole 16-retriever
pool over real Lucene + faiss indexes through it (one engine start for the module)."""
from __future__ import annotations

import json
import math


import pytest

from retrievers.reader import CachedReader, PromptText, ReaderCache, SamplingParams
from serve.engine.models import models_dir

pytestmark = pytest.mark.slow

from tests.shared_data import CORPUS_FILE as CORPUS


@pytest.fixture(scope="module")
def engine():
    if not (models_dir() / "smollm2-135m" / "config.json").exists():
        pytest.fail("reader model not prepared: run ./setup.sh (eor models prepare smollm2-135m)")
    from serve.engine.vllm_engine import VLLMConfig, VLLMEngine

    engine = VLLMEngine(VLLMConfig(model="smollm2-135m", max_model_len=4096)).load()
    yield engine
    engine.close()


def test_chat_model_uses_its_template(engine):
    text = engine.format(PromptText("What is 2+2?"))
    assert "<|im_start|>user" in text and text.rstrip().endswith("assistant")


def test_batched_generation_answers_each_prompt(engine):
    prompts = [engine.format(PromptText(f"Please directly answer the following question with one or few words: {q}"))
               for q in ["what is the capital of france", "who wrote hamlet"]]
    outs = [o.text for o in engine.generate(prompts, SamplingParams(max_tokens=16))]
    assert len(outs) == 2
    assert "paris" in outs[0].lower()
    assert "shakespeare" in outs[1].lower()


# What the scorer reads is the decode-time log-probability of each generated token. How much it
# moves when the same prompt is read in another batch (alone instead of with 39 others, or again
# with the prefix cache warm) was measured with bench/logprob_agreement.py on 200 fit-split NQ
# prompts (2026-11-25, 2-core AVX512-BF16 VM; fp32 also with ATEN_CPU_CAPABILITY=avx2, emulating a
# CPU without AVX512; docs/notes/2026-11-25-logprob-agreement.md): SmolLM2 bf16 moved one token by
# at most 0.153 nats and an answer's mean by at most 0.018; fp32 by at most 2e-5. The bounds below
# are about 3x the bf16 maxima and 500x the fp32 ones (fp32 kernels differ between CPUs).
# bf16's mean bound: 0.064 measured on a Xeon without AVX512-BF16 (bf16 emulated; a one-token "Paris", its
# prompt's prefix cached in one read and not in the other), above the 0.06 that AVX512-BF16 machines kept
DECODE_TOLERANCE = {"bfloat16": {"token": 0.5, "mean": 0.2}, "float32": {"token": 0.01, "mean": 0.005}}


@pytest.fixture(scope="module", params=["bfloat16", "float32"])
def engine_of_dtype(request, engine):
    """The module's engine where its dtype matches, else one more SmolLM2 engine in that dtype."""
    if engine.dtype == request.param:
        yield engine
        return
    from serve.engine.vllm_engine import VLLMConfig, VLLMEngine

    other = VLLMEngine(VLLMConfig(model="smollm2-135m", dtype=request.param, max_model_len=4096,
                                  enforce_eager=True)).load()
    yield other
    other.close()


def test_answers_carry_one_logprob_per_generated_token(engine):
    qs = ["what is the capital of france", "who wrote hamlet", "how many legs does a spider have"]
    prompts = [engine.format(PromptText(f"Please directly answer the following question with one or few words: {q}"))
               for q in qs]
    outs = engine.generate(prompts, SamplingParams(max_tokens=12))
    for o in outs:
        n = len(engine.tokenizer(o.text, add_special_tokens=False)["input_ids"])
        assert o.logprobs is not None and len(o.logprobs) == n  # the end-of-sequence token is not counted
        assert all(-100.0 <= x <= 0.0 for x in o.logprobs)
    # greedy: each token is the most probable one, so its probability is at least 1 / vocabulary size
    # (how sure it is of "Paris" depends on the dtype: above -1 in bf16, -1.35 in fp32 here)
    floor = -math.log(len(engine.tokenizer))
    assert all(x >= floor - 1e-3 for o in outs for x in o.logprobs)


def test_an_answer_read_alone_carries_the_confidence_it_has_in_a_batch(engine_of_dtype):
    """The same prompt read in a batch of eight, then alone: where the greedy text is the same,
    each token's log-probability and the answer's mean agree within the measured bound for the
    engine's dtype (in bf16 the text itself may change: then there is nothing to compare)."""
    engine = engine_of_dtype
    qs = ["what is the capital of france", "who wrote hamlet", "how many legs does a spider have",
          "what colour is the sky on a clear day", "who painted the mona lisa", "what is the largest planet",
          "in which country is the eiffel tower", "what is the boiling point of water in celsius"]
    prompts = [engine.format(PromptText(f"Please directly answer the following question with one or few words: {q}"))
               for q in qs]
    params = SamplingParams(max_tokens=12)
    batch = engine.generate(prompts, params)
    alone = [engine.generate([p], params)[0] for p in prompts]
    tol = DECODE_TOLERANCE[engine.dtype]
    same = [(a, b) for a, b in zip(batch, alone) if a.text == b.text and len(a.logprobs) == len(b.logprobs)]
    assert len(same) >= len(prompts) // 2, [(a.text, b.text) for a, b in zip(batch, alone)]
    for a, b in same:
        assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs)) <= tol["token"], (engine.dtype, a, b)
        assert abs(sum(a.logprobs) / len(a.logprobs) - sum(b.logprobs) / len(b.logprobs)) <= tol["mean"]


def test_engine_counts_prompt_and_generated_tokens(engine):
    prompt = engine.format(PromptText("Name a primary colour."))
    before = (engine.prompt_tokens, engine.generated_tokens, engine.cached_tokens)
    out = engine.generate([prompt, prompt], SamplingParams(max_tokens=4))
    n_prompt = len(engine.tokenizer.encode(prompt, add_special_tokens=False))
    assert engine.prompt_tokens - before[0] in (2 * n_prompt, 2 * n_prompt + 2)  # +BOS if the model adds one
    assert 2 <= engine.generated_tokens - before[1] <= 8 and all(out)
    # each output carries its own request's counts (vLLM's), and they add up to the engine's
    assert [o.tokens.prompt for o in out] == [len(engine.token_ids([prompt])[0])] * 2
    assert sum(o.tokens.generated for o in out) == engine.generated_tokens - before[1]
    assert sum(o.tokens.cached for o in out) == engine.cached_tokens - before[2]


def test_cached_reader_never_pays_twice(engine, tmp_path):
    reader = CachedReader(engine, ReaderCache(tmp_path / "c.sqlite"))
    p = [PromptText("Name a primary colour.")]
    first = reader.generate(p, SamplingParams(max_tokens=8))
    again_reader = CachedReader(engine, ReaderCache(tmp_path / "c.sqlite"))
    again = again_reader.generate(p, SamplingParams(max_tokens=8))
    assert first == again and reader.stats.engine_prompts == 1
    text = engine.format(p[0])
    assert again_reader.generate_full([text], SamplingParams(max_tokens=8))[0].logprobs  # cached with them
    counted = again_reader.generate_counted(p, SamplingParams(max_tokens=8))[0].tokens  # and with their counts
    assert counted.prompt == len(engine.token_ids([text])[0]) and counted.generated >= 1


def test_missing_model_is_a_clear_error(tmp_path):
    from serve.engine.vllm_engine import VLLMConfig, VLLMEngine

    with pytest.raises(FileNotFoundError, match="not found"):
        VLLMEngine(VLLMConfig(model=str(tmp_path / "nope")))


def _slice(n_vital: int = 300):
    """Gold passages of a few NQ questions plus distractors, read from ../shared by path."""
    if not CORPUS.exists():
        pytest.skip("../shared/data/corpus.jsonl not present")
    from retrievers.corpus import Document

    docs, vital = [], 0
    with open(CORPUS, encoding="utf-8") as f:
        for line in f:
            r = json.loads(line)
            keep = r["source"] == "nqgold" and len(docs) < 200
            if r["source"] == "vital" and vital < n_vital:
                vital += 1
                keep = True
            if keep:
                docs.append(Document(r["id"], r["title"], r["text"]))
    return docs


def test_the_16_retrievers_answer_through_one_batched_reader_call(engine, tmp_path, monkeypatch):
    monkeypatch.setenv("EOR_HOME", str(tmp_path))
    from retrievers.encoder import Encoder
    from retrievers.spec import PAPER_POOL
    from serve.builder import build_indexes, make_pool
    from serve.config import CacheConfig, EorConfig, IndexConfig

    build_indexes(_slice(), "t", Encoder(), show_progress=False)
    from retrievers.pool import PoolConfig

    config = EorConfig(index=IndexConfig(name="t"), cache=CacheConfig(path=str(tmp_path / "cache.sqlite")),
                       pool=PoolConfig(specs=PAPER_POOL))  # one reader: the 16 through it
    pool = make_pool(config, engine=engine).load()
    [result] = pool.run(["who painted the mona lisa"])
    assert [c.retriever for c in result.candidates] == list(PAPER_POOL)
    for c in result.candidates:
        assert c.error is None and c.answer.strip(), c
        assert bool(c.context.passages) == (c.retriever not in ("PK", "ReFree"))
    # PK documents, @CP summaries, answers: one engine call each, never one per retriever
    assert pool.reader.stats.calls == 3
