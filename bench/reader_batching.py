"""Reader batching on this machine: the 16 answer prompts of a question sent one by one vs in
one batched call vs served from the warm cache, as ratios in one run; plus the seconds one
question costs through the whole pool (PK, retrieval, @CP, answers) with a cold cache.

    python -m bench.reader_batching --index shared --n 2

Prefix caching is off here so the batched call cannot reuse what the sequential run computed.
"""
from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from typing import Sequence

from bench.common import DEFAULT_QUESTIONS, read_questions
from retrievers.engine import ReaderEngine
from retrievers.reader import CachedReader, Generation, ReaderCache, SamplingParams


class RecordingEngine(ReaderEngine):
    """Passes through to the real engine and keeps the prompts of the last call."""

    def __init__(self, engine: ReaderEngine):
        self.engine, self.model_id, self.last = engine, engine.model_id, []

    def format(self, prompt):
        return self.engine.format(prompt)

    def token_ids(self, texts: Sequence[str]) -> list[list[int]]:
        return self.engine.token_ids(texts)

    def generate(self, prompts: Sequence[str], params: SamplingParams) -> "Sequence[Generation | str]":
        self.last = list(prompts)
        return self.engine.generate(prompts, params)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--index", default="shared")
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--questions", default=DEFAULT_QUESTIONS)
    ap.add_argument("--n", type=int, default=2, help="questions to time")
    ap.add_argument("--offset", type=int, default=0, help="skip this many questions (fresh prompts)")
    args = ap.parse_args(argv)

    from serve.builder import make_pool
    from retrievers.pool import PoolConfig
    from retrievers.spec import PAPER_POOL
    from serve.config import CacheConfig, EorConfig, IndexConfig
    from serve.engine.vllm_engine import VLLMConfig, VLLMEngine

    rows = read_questions(args.questions, "nq-open-oracle", args.offset + args.n)[args.offset:]
    t = time.perf_counter()
    engine = VLLMEngine(VLLMConfig(model=args.model, enable_prefix_caching=False)).load()
    start_s = time.perf_counter() - t
    rec = RecordingEngine(engine)
    config = EorConfig(index=IndexConfig(name=args.index), cache=CacheConfig(enabled=False),
                       pool=PoolConfig(specs=PAPER_POOL))  # the paper's 16 through the reader measured
    pool = make_pool(config, engine=rec).load()
    params = SamplingParams(max_tokens=pool.config.answer_tokens)
    per_q, seq, batch, warm, n_prompts = [], [], [], [], []
    for row in rows:
        t = time.perf_counter()
        pool.run([row["question"]])
        per_q.append(time.perf_counter() - t)
        prompts = rec.last  # the answer stage: all 16 prompts of the question
        n_prompts.append(len(prompts))
        t = time.perf_counter()
        for p in prompts:
            engine.generate([p], params)
        seq.append(time.perf_counter() - t)
        t = time.perf_counter()
        outs = engine.generate(prompts, params)
        batch.append(time.perf_counter() - t)
        with tempfile.TemporaryDirectory() as tmp:
            cache = ReaderCache(f"{tmp}/c.sqlite")
            cache.put_many({ReaderCache.key(engine.model_id, p, params): o for p, o in zip(prompts, outs)})
            reader = CachedReader(engine, cache)
            t = time.perf_counter()
            reader.generate_raw(prompts, params)
            warm.append(time.perf_counter() - t)
            assert reader.stats.engine_prompts == 0
    report = {
        "model": args.model, "questions": len(rows), "answer_prompts_per_question": n_prompts,
        "engine_start_s": round(start_s, 1),
        "pool_seconds_per_question_cold": round(statistics.mean(per_q), 2),
        "sequential_s": round(statistics.mean(seq), 3), "batched_s": round(statistics.mean(batch), 3),
        "warm_cache_s": round(statistics.mean(warm), 5),
    }
    report["sequential_over_batched"] = round(report["sequential_s"] / report["batched_s"], 2)
    report["batched_over_warm_cache"] = round(report["batched_s"] / max(report["warm_cache_s"], 1e-6), 1)
    print(json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    main()
