"""Scale on paper: what a cold Ask costs the reader, and how throughput should grow with reader
replicas, computed from a run log's measured tokens (docs/operations.md, "Scaling").

A CPU reader is compute-bound: a cold Ask costs the tokens its engine computes (prompt minus
prefix-cache hits, plus generated), so cold throughput is replicas x tokens/s per replica /
tokens per Ask. What replicas change is the prefix cache: eor's retrievers of one question share
prompt prefixes (the question and its documents; `Candidate.cached_from` names the partner),
and vLLM's prefix cache is per engine. With question affinity (every reader call of a question
on one replica: one retriever actor per stage, or a router that hashes the question) every hit
survives; with per-call routing over R replicas (Ray Serve's default power-of-two choice
under an even load; 16 per-spec actors each calling the reader), a hit survives only when the
partner's call landed on the same replica: 1/R of them.

    python -m bench.scale_model --run var/runs/85aa939f6458515f.jsonl [--specs SE@1,SE@1@CP,...]
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from retrievers.types import QuestionResult
from serve.offline.results_io import result_from_record

# Measured (docs/benchmarks.md; 2-core AMD EPYC VM, AVX512-BF16, Qwen2.5-Coder-0.5B bf16):
TOKENS_PER_S = 390.0  # one 2-core reader replica: 8,614 tokens computed per cold question in 22 s
OTHER_CPU_S_PER_COLD_ASK = 5.4  # everything but vLLM (Ray, sources, actor, voter): 108 CPU-s / 20 questions
WARM_ASKS_PER_S_PER_2_CORES = 5.69  # reader cache hits only: ingress + actors + Voter (BERTScore) bound


@dataclass(frozen=True)
class ReaderCost:
    """Mean reader tokens per question over a run, for one set of retrievers."""

    questions: int
    prompt: float
    cached: float  # prefix-cache hits when every call of a question reaches one engine
    generated: float

    def computed(self, replicas: int = 1, affinity: bool = True) -> float:
        """Tokens computed per question: hits survive all (affinity) or 1/R (per-call routing)."""
        kept = self.cached if affinity else self.cached / max(replicas, 1)
        return self.prompt - kept + self.generated


def reader_cost(results: Iterable[QuestionResult], specs: Sequence[str] | None = None) -> ReaderCost:
    n, p, c, g = 0, 0, 0, 0
    for r in results:
        t = r.reader_tokens(set(specs) if specs else None)
        n, p, c, g = n + 1, p + t.prompt, c + t.cached, g + t.generated
    if not n:
        raise ValueError("no questions in the run")
    return ReaderCost(n, p / n, c / n, g / n)


def read_run(path: Path) -> list[QuestionResult]:
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(result_from_record(json.loads(line)["result"]))
        except (json.JSONDecodeError, KeyError):
            continue  # a torn last line (a run in progress)
    return out


def table(cost: ReaderCost, replicas: Sequence[int], tokens_per_s: float) -> list[dict[str, float]]:
    rows = []
    for r in replicas:
        aff, rnd = cost.computed(r, True), cost.computed(r, False)
        rows.append({"reader_replicas": r, "tokens_affinity": round(aff), "tokens_per_call": round(rnd),
                     "cold_asks_per_s_affinity": round(r * tokens_per_s / aff, 3),
                     "cold_asks_per_s_per_call": round(r * tokens_per_s / rnd, 3),
                     "other_cores_needed": round(r * tokens_per_s / aff * OTHER_CPU_S_PER_COLD_ASK, 2)})
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", type=Path, required=True, help="a run log (eor run / fit / eval): $EOR_HOME/runs/*.jsonl")
    ap.add_argument("--specs", default="", help="the retrievers an Ask runs (comma-separated; default: all)")
    ap.add_argument("--replicas", default="1,2,4,8")
    ap.add_argument("--tokens-per-s", type=float, default=TOKENS_PER_S)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    specs = [s for s in args.specs.split(",") if s] or None
    try:
        cost = reader_cost(read_run(args.run), specs)
    except (OSError, ValueError) as exc:
        print(f"scale_model: {exc}", file=sys.stderr)
        return 2
    rows = table(cost, [int(x) for x in args.replicas.split(",")], args.tokens_per_s)
    if args.json:
        print(json.dumps({"cost": cost.__dict__, "rows": rows}, indent=1))
        return 0
    print(f"{cost.questions} questions, {'all retrievers' if not specs else ', '.join(specs)}: prompt "
          f"{cost.prompt:.0f}, prefix-cache hits {cost.cached:.0f}, generated {cost.generated:.0f} tokens per question")
    print("replicas  tokens/Ask (affinity | per call)  cold Asks/s (affinity | per call)  other cores")
    for r in rows:
        print(f"{r['reader_replicas']:8d}  {r['tokens_affinity']:8d} | {r['tokens_per_call']:8d}"
              f"            {r['cold_asks_per_s_affinity']:8.3f} | {r['cold_asks_per_s_per_call']:7.3f}"
              f"         {r['other_cores_needed']:6.2f}")
    print(f"warm Asks (reader cache hits): about {WARM_ASKS_PER_S_PER_2_CORES} per 2 cores of ingress + Voter")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
