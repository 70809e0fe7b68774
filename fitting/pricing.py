"""What a round costs: each reader's measured prefill and decode speed (serve/offline/reader_speed.py
measures and keeps them), the work a question's rounds did, and the latency model a layout is
judged by: rounds run x overhead + reader work / tokens_per_s. A *round* is one batched fan-out of
retrievers; its cost is the reader work it does plus a fixed per-round overhead (a sequential
engine round trip), so a layout is judged by expected latency, not by tokens alone.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from retrievers.spec import by_reader

DEFAULT_ROUND_OVERHEAD_S = 1.0  # issue 26 measured ~1 s a round; where bench.load_test compare measured it here, eor fit reads that
DEFAULT_TOKENS_PER_S = 400.0  # reader tokens computed per second on the 2-core CPU (bf16); set from the run


@dataclass(frozen=True)
class LatencyModel:
    round_overhead_s: float = DEFAULT_ROUND_OVERHEAD_S
    tokens_per_s: float = DEFAULT_TOKENS_PER_S
    # round 1's early answer has the cores first (its reader's engine at a lower niceness than the
    # rest's: serve/engine/priority.py), so it reads as if alone; else they share the cores
    early_first: bool = False

    def seconds(self, rounds: float, tokens: float) -> float:
        return rounds * self.round_overhead_s + tokens / self.tokens_per_s


@dataclass(frozen=True)
class ReaderSpeed:
    """Tokens per second of one reader on this machine: prompt tokens it computes (prefix-cache
    hits excluded), and decode steps of one sequence."""

    prefill_tok_s: float
    decode_tok_s: float

    def seconds(self, prefill: float, steps: float) -> float:
        return prefill / self.prefill_tok_s + steps / self.decode_tok_s


def round_work(result: Any, rounds: Sequence[frozenset]) -> dict[str, tuple[float, float]]:
    """reader name -> (prompt tokens computed, decode steps) of running `rounds` in order. Prefill:
    every prompt that ran, each shared document once, prefix-cache hits as the run counted them
    (QuestionResult.reader_tokens). Decode: a round runs in stages (retrievers/pool.py: run_round),
    each a batch that decodes side by side and ends with its longest sequence: the shared
    documents first (PK's, in the first round that needs one), then the members' own generations
    (a @CP summary and its answer, or an answer): per round, the longest of each."""
    ran = frozenset().union(*rounds) if rounds else frozenset()
    cands = {c.retriever: c for c in result.candidates}
    out = {}
    for reader, members in by_reader(sorted(ran)).items():
        t = result.reader_tokens(set(members))
        out[reader] = [float(t.prompt - t.cached), 0.0]
    made: set[str] = set()
    for rnd in rounds:
        for reader, members in by_reader(sorted(rnd)).items():
            ran_here = [cands[s] for s in members if s in cands]
            docs = {d for c in ran_here for d in c.shared if d not in made and d in result.shared_tokens}
            made |= docs
            # the round's stages: the shared documents, then each member's summary and answer
            out[reader][1] += max((result.shared_tokens[d].generated for d in docs), default=0) + \
                max((c.tokens.generated for c in ran_here), default=0)
    return {r: (p, s) for r, (p, s) in out.items()}


def priced_seconds(result: Any, rounds: Sequence[frozenset], speeds: dict[str, ReaderSpeed]) -> float:
    """Reader seconds of running `rounds` on this machine (round_work at each reader's speed)."""
    return sum(speeds[r].seconds(p, s) for r, (p, s) in round_work(result, rounds).items())


def unit_speed(speeds: dict[str, ReaderSpeed]) -> float:
    """The latency model's token: the default reader's prefill token (else the first reader's)."""
    return (speeds.get("") or next(iter(speeds.values()))).prefill_tok_s


def priced_speeds(specs: Sequence[str], speeds: dict[str, ReaderSpeed] | None) -> dict[str, ReaderSpeed] | None:
    """`speeds` for the readers `specs` name (and the default reader's, the unit), when every one
    of them was measured; else None."""
    readers = set(by_reader(specs))
    if not speeds or not readers <= set(speeds):
        return None
    return {r: v for r, v in speeds.items() if r in readers | {""}}


def weighted_tokens(result: Any, specs: Sequence[str], weights: dict[str, float] | None = None) -> float:
    """Reader tokens computed by `specs`, each reader's in the default reader's tokens (`weights`:
    reader name -> its seconds per token over the default reader's; None or missing: 1)."""
    return float(sum((weights or {}).get(r, 1.0) * result.reader_tokens(set(ms)).computed
                     for r, ms in by_reader(specs).items()))


def reader_speeds(scored: Sequence, seconds: dict[str, dict[str, float]]) -> dict[str, float]:
    """reader name -> reader tokens its members computed per second on this machine, from its run
    log's cold seconds (serve/offline/reader_runs.py: ReaderRuns.seconds); readers without any: absent."""
    members = by_reader([c.retriever for c in scored[0][1].candidates]) if scored else {}
    out = {}
    for reader, secs in seconds.items():
        mine = set(members.get(reader, ()))
        pairs = [(secs[q.qid], r.reader_tokens(mine).computed) for q, r in scored if q.qid in secs]
        total_s, total_t = sum(p[0] for p in pairs), sum(p[1] for p in pairs)
        if total_s > 0 and total_t > 0:
            out[reader] = total_t / total_s
    return out


def measured_latency(scored: Sequence, seconds: dict[str, dict[str, float]],
                     overhead_s: float) -> tuple[LatencyModel, dict[str, float]]:
    """(the latency model in the default reader's tokens per second, each reader's cost per token
    relative to the default reader's): a 1.5B token costs what the run logs measured it to."""
    speeds = reader_speeds(scored, seconds)
    base = speeds.get("", LatencyModel().tokens_per_s)
    return LatencyModel(overhead_s, base), {r: base / v for r, v in speeds.items()}
