"""How stable is the reader's confidence? The token log-probabilities of one greedy answer,
read four ways with one engine (issue 37):

- `batch`: every prompt in one `generate` call, prefix cache cold (how `eor run` / `eor fit`
  read: the reference);
- `again`: the same batch again, every prompt's whole blocks now served by the prefix cache;
- `alone`: the first `--alone` prompts one request each (how a lone `eor ask` reads);
- `rescore`: a prefill-only pass over prompt + the reference answer's text, re-tokenised
  (`prompt_logprobs`: no decoding at all); `rescore_stripped` the same over the stripped text
  (what the reader cache stored and rescored until 2026-11-25).

Per pass against `batch`: answers whose text changed, and over the answers with the same text
the absolute difference per token and of the three features the answer scorer reads (mean,
min and first token log-probability): median, 99th percentile and maximum.

    python -m bench.logprob_agreement --model smollm2-135m --dtype bfloat16 --n 200
    ATEN_CPU_CAPABILITY=avx2 python -m bench.logprob_agreement --model smollm2-135m --dtype float32

Prompts are real: fit-split NQ questions with their gold passage (the RAG prompt) and alone
(the retrieval-free prompt), half each.
"""
from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np

from bench.common import DEFAULT_QUESTIONS, read_corpus

PASSES = ("again", "alone", "rescore")
FEATURES = ("mean", "min", "first")


def real_prompts(n: int, questions_file: str = DEFAULT_QUESTIONS) -> list:
    """n PromptTexts: fit-split NQ questions with their gold passage, then the same alone."""
    from retrievers.prompts import answer_prompt
    from serve.offline.dataset import Selection, select_questions

    half = max(1, n // 2)
    qs = select_questions(Selection(questions_file, dataset="nq-open-oracle", split="fit", limit=half))
    gold = {}
    with open(questions_file, encoding="utf-8") as f:
        for line in f:
            r = json.loads(line)
            gold[r["qid"]] = r.get("gold_pids") or []
    corpus = read_corpus()
    rag = [answer_prompt(q.question, corpus[gold[q.qid][0]]["text"]) for q in qs if gold[q.qid]]
    closed = [answer_prompt(q.question, None) for q in qs]
    return (rag + closed)[:n]


def features(lps: tuple[float, ...]) -> dict[str, float]:
    return {"mean": float(np.mean(lps)), "min": float(np.min(lps)), "first": float(lps[0])}


def _summary(values: list[float]) -> dict[str, float]:
    if not values:
        return {"p50": 0.0, "p99": 0.0, "max": 0.0}
    a = np.abs(np.asarray(values))
    return {"p50": round(float(np.median(a)), 5), "p99": round(float(np.percentile(a, 99)), 5),
            "max": round(float(a.max()), 5)}


def scorer_weights() -> dict[str, float]:
    """d z / d feature of the shipped voter's answer scorer (its logistic regression's coefficient
    over the feature's scale): how far a change in a feature moves the scorer's log-odds."""
    from voter.weights_io import SHIPPED_VOTER

    doc = json.loads(SHIPPED_VOTER.read_text())
    sc = doc["adaptive"]["scorer"]
    return {f: sc["coef"][sc["features"].index(f"{f}_logprob")] / sc["scale"][sc["features"].index(f"{f}_logprob")]
            for f in FEATURES}


def compare(ref: list, other: list, ref_text: list[str], other_text: list[str]) -> dict:
    """`other` against `ref` (lists of log-probability tuples; texts alongside). `scorer_dz`: per
    answer, how far the shipped scorer's log-odds move (|dP| <= |dz| / 4)."""
    per_token: list[float] = []
    per_feature: dict[str, list[float]] = {f: [] for f in FEATURES}
    dz: list[float] = []
    w = scorer_weights()
    changed = misaligned = 0
    for a, b, ta, tb in zip(ref, other, ref_text, other_text):
        if ta != tb or not a or not b or len(a) != len(b):
            changed += ta != tb
            misaligned += ta == tb and bool(a) and bool(b) and len(a) != len(b)
            continue
        per_token += [x - y for x, y in zip(a, b)]
        fa, fb = features(a), features(b)
        for f in FEATURES:
            per_feature[f].append(fa[f] - fb[f])
        dz.append(sum(w[f] * (fa[f] - fb[f]) for f in FEATURES))
    return {"answers": len(other), "text_changed": changed, "token_count_differs": misaligned,
            "tokens_compared": len(per_token),
            "token": _summary(per_token), **{f: _summary(v) for f, v in per_feature.items()},
            "scorer_dz": _summary(dz), "dz_over_0.1": sum(abs(x) > 0.1 for x in dz)}


def measure(model: str, dtype: str, n: int, alone: int) -> dict:
    from retrievers.reader import SamplingParams
    from serve.engine.vllm_engine import VLLMConfig, VLLMEngine

    engine = VLLMEngine(VLLMConfig(model=model, dtype=dtype, max_model_len=4096, enforce_eager=True))
    texts = [engine.format(p) for p in real_prompts(n)]
    params = SamplingParams(max_tokens=32)
    t0 = time.perf_counter()
    engine.load()
    timings = {"start_s": round(time.perf_counter() - t0, 1)}
    try:
        runs = {}
        t0 = time.perf_counter()
        runs["batch"] = engine.generate(texts, params)
        timings["batch_s"] = round(time.perf_counter() - t0, 1)
        runs["again"] = engine.generate(texts, params)
        runs["alone"] = [engine.generate([t], params)[0] for t in texts[:alone]]
        ref = runs["batch"]
        rescored = engine.score(texts, [g.text for g in ref])
        # what the reader cache did: it stores the stripped text, and rescored that
        rescored_stripped = engine.score(texts, [g.text.strip() for g in ref])
    finally:
        engine.close()
    import torch

    out = {"model": model, "dtype": engine.dtype, "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
           "prompts": len(texts), "timings": timings}
    for name in ("again", "alone"):
        got = runs[name]
        out[name] = compare([g.logprobs for g in ref[:len(got)]], [g.logprobs for g in got],
                            [g.text for g in ref[:len(got)]], [g.text for g in got])
    out["rescore"] = compare([g.logprobs for g in ref], rescored, [g.text for g in ref], [g.text for g in ref])
    out["rescore_stripped"] = compare([g.logprobs for g in ref], rescored_stripped, [g.text for g in ref],
                                      [g.text for g in ref])
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--dtype", default="auto", help="auto, bfloat16 or float32")
    ap.add_argument("--n", type=int, default=200, help="prompts (half with the gold passage, half without)")
    ap.add_argument("--alone", type=int, default=40, help="prompts also read one request each")
    ap.add_argument("--out", default=None, help="append the JSON result to this file")
    args = ap.parse_args(argv)
    result = measure(args.model, args.dtype, args.n, args.alone)
    result["aten_cpu_capability_env"] = os.environ.get("ATEN_CPU_CAPABILITY")
    line = json.dumps(result)
    print(line)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        with open(args.out, "a") as f:
            f.write(line + "\n")
    return result


if __name__ == "__main__":
    main()
