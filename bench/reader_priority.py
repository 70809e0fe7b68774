"""The quick reader first: round 1's early answer on the 0.5B beside the 1.5B's two prompts, with
the 1.5B's engine processes at each niceness, in one run (serve/engine/priority.py).

Both engines run in this process (AsyncLLM, continuous batching, each its own cores' share); a
trial sends the 0.5B one answer prompt over two corpus pages and, at the same moment, the 1.5B
two (the same two pages; six), as the service's round 1 does with an early member. Per
niceness: the seconds to the 0.5B's answer and to the 1.5B's second; and the 0.5B's alone.
Trials alternate the settings, so a noisy machine weighs on each alike.

    python -m bench.reader_priority --trials 9 --nice 0 10
"""
from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import sys
import time

from bench.common import DEFAULT_CORPUS, read_corpus


def pages(path: str, n: int) -> list[str]:
    """The first `n` corpus records of more than 80 words, each as a page (title, then text)."""
    long = (r for r in read_corpus(path).values() if len(r["text"].split()) > 80)
    return [f"{r['title']}\n{r['text']}" for r in itertools.islice(long, n)]


async def run(args) -> dict:
    from retrievers.prompts import answer_prompt
    from retrievers.reader import SamplingParams
    from serve.engine.priority import child_pids, niceness, set_nice
    from serve.engine.vllm_engine import AsyncVLLMEngine, VLLMConfig

    texts = pages(args.corpus, 8 * args.trials + 2)
    small = AsyncVLLMEngine(VLLMConfig(model=args.quick, enforce_eager=True)).load()
    before = child_pids()
    big = AsyncVLLMEngine(VLLMConfig(model=args.strong, enforce_eager=True)).load()
    big_pids = child_pids() - before
    params = SamplingParams(max_tokens=12)
    await small.agenerate(small.format(answer_prompt("warm up?", texts[-1])), params)
    await big.agenerate(big.format(answer_prompt("warm up?", texts[-2])), params)
    modes = [*args.nice, "alone"]
    rows: dict[str, list[tuple[float, float | None]]] = {str(m): [] for m in modes}
    for trial in range(args.trials):
        mode = modes[trial % len(modes)]
        base = texts[trial * 8: trial * 8 + 8]
        q = f"what is item {trial} about?"
        doc = "\n\n".join(base[:2])
        early = small.format(answer_prompt(q, doc))
        pair = [big.format(answer_prompt(q, doc)), big.format(answer_prompt(q, "\n\n".join(base[:6])))]
        want = 0 if mode == "alone" else mode
        set_nice(big_pids, want)
        if niceness(big_pids) != {want}:
            raise SystemExit(f"the strong engine's threads could not be set to nice {want} (lowering a niceness "
                             "needs root or CAP_SYS_NICE): list the higher settings last, or run as root")
        t0 = time.perf_counter()

        async def timed(coro):
            await coro
            return time.perf_counter() - t0
        if mode == "alone":
            rows[str(mode)].append((await timed(small.agenerate(early, params)), None))
            continue
        e, *strong = await asyncio.gather(timed(small.agenerate(early, params)),
                                          *(timed(big.agenerate(p, params)) for p in pair))
        rows[str(mode)].append((e, max(strong)))
    set_nice(big_pids, 0)
    small.close()
    big.close()
    out = {"quick": args.quick, "strong": args.strong, "trials": args.trials, "rows": {}}
    for m, v in rows.items():
        out["rows"][m if m == "alone" else f"strong at nice {m}"] = {
            "trials": len(v), "early_answer_s": round(sum(r[0] for r in v) / len(v), 3),
            "strong_round_s": round(sum(r[1] for r in v) / len(v), 3) if v[0][1] is not None else None}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", default="qwen2.5-coder-0.5b")
    ap.add_argument("--strong", default="qwen2.5-coder-1.5b")
    ap.add_argument("--nice", nargs="+", type=int, default=[0, 10], help="the strong engine's niceness to compare")
    ap.add_argument("--trials", type=int, default=9, help="in turn over the settings and the quick reader alone")
    ap.add_argument("--corpus", default=DEFAULT_CORPUS)
    print(json.dumps(asyncio.run(run(ap.parse_args(argv))), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
