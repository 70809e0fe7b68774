"""vLLM-CPU engine settings on this machine: start time and throughput per setting, in one run.

Each setting runs in its own process (a fresh engine, nothing shared): the engine start,
then the same work -- RAG answer prompts over the gold passages of N NQ questions (prefill
heavy, short answers) and N PK documents (decode heavy) -- with the reader's own token
counts, so tokens per second compare across settings. Match of the answers is reported too:
a faster dtype that changes answers is no free win.

    python -m bench.engine_settings --model qwen2.5-coder-0.5b --n 16 --settings dtype=float32 dtype=bfloat16

Settings run in the order given, so `dtype=bfloat16 dtype=bfloat16` times a compiled start without
and then with the compile cache the first one left (serve/engine/compile_cache.py); `--logs DIR`
keeps each child's log (vLLM's timings with VLLM_LOGGING_LEVEL=INFO).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from bench.common import DEFAULT_CORPUS, DEFAULT_QUESTIONS, read_corpus, read_questions


def _one(model: str, n: int, setting: dict) -> dict:
    from retrievers.prompts import answer_prompt, clean_answer, pk_prompt
    from retrievers.reader import SamplingParams
    from serve.engine.vllm_engine import VLLMConfig, VLLMEngine
    from voter.qa_metrics import match

    rows = read_questions(DEFAULT_QUESTIONS, "nq-open-oracle", n)
    corpus = read_corpus(DEFAULT_CORPUS)
    t = time.perf_counter()
    engine = VLLMEngine(VLLMConfig(model=model, enable_prefix_caching=False, **setting)).load()
    out = {"setting": setting, "start_s": round(time.perf_counter() - t, 1)}
    docs = ["\n\n".join(f"{corpus[p]['title']}\n{corpus[p]['text']}" for p in r["gold_pids"] if p in corpus) for r in rows]
    rag = [engine.format(answer_prompt(r["question"], d)) for r, d in zip(rows, docs)]
    pk = [engine.format(pk_prompt(r["question"])) for r in rows]
    for name, prompts, params in (("rag", rag, SamplingParams(max_tokens=32)),
                                  ("pk", pk, SamplingParams(max_tokens=200, repetition_penalty=1.1))):
        p0, g0 = engine.prompt_tokens, engine.generated_tokens
        t = time.perf_counter()
        texts = [g.text for g in engine.generate(prompts, params)]
        s = time.perf_counter() - t
        out[name] = {"seconds": round(s, 2), "prompt_tokens": engine.prompt_tokens - p0,
                     "generated_tokens": engine.generated_tokens - g0}
        if name == "rag":
            answers = [clean_answer(x) for x in texts]
            out[name]["match"] = round(sum(match(a, r["answers"]) for a, r in zip(answers, rows)) / len(rows), 3)
            out[name]["answers"] = answers[:5]
    engine.close()
    return out


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", default="qwen2.5-coder-0.5b")
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--settings", nargs="+", default=["dtype=float32", "dtype=bfloat16"],
                    help="VLLMConfig field=value, comma-joined for several fields")
    ap.add_argument("--logs", help="keep each setting's standard error here, as <i>.log")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print("RESULT " + json.dumps(_one(args.model, args.n, json.loads(args.child))), flush=True)
        return []
    results = []
    for i, s in enumerate(args.settings):
        import yaml

        setting = {k: yaml.safe_load(v) for k, v in (kv.split("=", 1) for kv in s.split(","))}
        proc = subprocess.run([sys.executable, "-m", "bench.engine_settings", "--model", args.model,
                               "--n", str(args.n), "--child", json.dumps(setting)],
                              capture_output=True, text=True)
        if args.logs:
            Path(args.logs).mkdir(parents=True, exist_ok=True)
            (Path(args.logs) / f"{i}.log").write_text(proc.stderr)
        line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
        results.append(json.loads(line[-1][7:]) if line else {"setting": setting, "error": proc.stderr[-2000:]})
        print(json.dumps(results[-1]), flush=True)
    return results


if __name__ == "__main__":
    main()
