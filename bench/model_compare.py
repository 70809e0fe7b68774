"""Pick the default reader: each packaged model answers the same dev questions with Wiki@10.

    python -m bench.model_compare --index shared --n 50

Scores are Match (a gold answer contained in the normalised output) and EM, as the voter's
QA metrics define them; one batched reader call per model, cache off.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time

from bench.common import DEFAULT_QUESTIONS, read_questions
from voter.qa_metrics import exact_match, match


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--index", default="shared")
    ap.add_argument("--models", default="smollm2-135m,gemma3-270m")
    ap.add_argument("--retriever", default="Wiki@10")
    ap.add_argument("--questions", default=DEFAULT_QUESTIONS)
    ap.add_argument("--n", type=int, default=50)
    ap.add_argument("--out", help="also write the JSON report here")
    args = ap.parse_args(argv)

    from serve.builder import make_pool
    from serve.config import CacheConfig, EorConfig, IndexConfig
    from serve.vllm_engine import VLLMConfig, VLLMEngine

    rows = read_questions(args.questions, "nq-open-oracle", args.n)
    report = {"retriever": args.retriever, "questions": len(rows), "models": {}}
    models = args.models.split(",")
    if len(models) > 1:  # one vLLM engine per process: run each model in a child
        for model in models:
            with tempfile.TemporaryDirectory() as tmp:
                child = [sys.executable, "-m", "bench.model_compare", "--index", args.index, "--models", model,
                         "--retriever", args.retriever, "--questions", args.questions, "--n", str(args.n),
                         "--out", f"{tmp}/r.json"]
                subprocess.run(child, check=True, stdout=subprocess.DEVNULL)
                report["models"].update(json.loads(open(f"{tmp}/r.json").read())["models"])
        return _emit(report, args.out)
    for model in models:
        engine = VLLMEngine(VLLMConfig(model=model)).load()
        config = EorConfig(index=IndexConfig(name=args.index), cache=CacheConfig(enabled=False))
        pool = make_pool(config, engine=engine).load()
        t = time.perf_counter()
        results = pool.run([r["question"] for r in rows], [args.retriever])
        secs = time.perf_counter() - t
        answers = [r.candidates[0].answer for r in results]
        report["models"][model] = {
            "match": round(sum(match(a, r["answers"]) for a, r in zip(answers, rows)) / len(rows), 3),
            "em": round(sum(exact_match(a, r["answers"]) for a, r in zip(answers, rows)) / len(rows), 3),
            "mean_answer_words": round(sum(len(a.split()) for a in answers) / len(rows), 1),
            "seconds": round(secs, 1),
            "examples": [{"q": r["question"], "gold": r["answers"], "answer": a}
                         for r, a in list(zip(rows, answers))[:5]],
        }
        engine.close()
    return _emit(report, args.out)


def _emit(report: dict, out: str | None) -> dict:
    if out:
        with open(out, "w") as f:
            json.dump(report, f, indent=2)
    print(json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    main()
