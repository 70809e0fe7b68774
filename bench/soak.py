"""Soak: the live service under production-like load, first alone, then while `eor bench
--every` runs rounds of a small suite slice beside it (issue 22, "A soak").

Production traffic is batches of `n` Asks at concurrency `c` over `distinct` questions never
asked before (so each batch has `distinct` cold questions and `n - distinct` repeats, which
the reader cache answers). The alone phase is one batch; the bench phase repeats batches, each
over its own fresh questions, until the bench has finished its rounds. The report gives
production's failures and p50/p95 in each phase, and the bench's share of the reader's time:
the seconds the rounds' Asks waited on the reader (their reports' `cost.total.reader_s`)
over those plus production's during the bench phase (each reply's `reader_s`).
"""
from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

from bench.service_calls import latency_summary, ratio, run_calls

ROOT = Path(__file__).resolve().parents[1]


def production_batch(client, fresh: list[str], n: int, concurrency: int) -> dict:
    """`n` Asks at `concurrency` cycling over `fresh`; the run_calls summary plus the
    latencies and the reader seconds of its replies."""
    asked = [fresh[i % len(fresh)] for i in range(n)]
    lat, reader_s, lock = [], [0.0], threading.Lock()

    def note(i, when, reply):
        with lock:
            lat.append(reply.latency_s)
            reader_s[0] += reply.reader_s
    out = run_calls(client, asked, concurrency, on_reply=note)
    return {**out, "reader_s": round(reader_s[0], 2), "server_latencies_s": lat}


def _merge(batches: list[dict]) -> dict:
    """Batches as one phase; latencies are the service's own (each reply's latency_s)."""
    lat = [x for b in batches for x in b["server_latencies_s"]]
    phase = {"batches": len(batches), "asks": sum(b["calls"] for b in batches),
             "ok": sum(b["ok"] for b in batches), "failed": sum(b["failed"] for b in batches),
             "failures": [f for b in batches for f in b["failures"]][:10],
             "reader_s": round(sum(b["reader_s"] for b in batches), 2),
             "wall_s": round(sum(b["wall_s"] for b in batches), 1)}
    if lat:
        phase.update({k: v for k, v in latency_summary(lat).items() if k != "latencies_s"})
    return phase


def bench_command(server: str, suite: str, limit: int, rounds: int, out: Path, extra: list[str]) -> list[str]:
    """`eor bench SUITE --every 1s --rounds N`: back-to-back rounds, each a fresh run in OUT/runs/."""
    return [sys.executable, "-m", "serve.cli", "bench", suite, "--server", server, "--limit", str(limit),
            "--every", "1s", "--rounds", str(rounds), "--out", str(out), "--quiet", *extra]


def finished_rounds(out: Path) -> dict[str, dict]:
    """OUT/runs/<round>/report.json of every finished round, by round name."""
    runs = out / "runs"
    return {p.parent.name: json.loads(p.read_text()) for p in sorted(runs.glob("*/report.json"))} \
        if runs.is_dir() else {}


def soak(client, questions: list[str], n: int, concurrency: int, distinct: int, command: list[str],
         bench_out: Path, log: Path, max_batches: int = 200) -> dict:
    """The alone phase, then the bench phase while `command` (the bench) runs; see the module."""
    if distinct < 1 or n < distinct:
        raise SystemExit(f"need n >= distinct >= 1 (n={n}, distinct={distinct})")
    pools = [questions[i:i + distinct] for i in range(0, len(questions) - distinct + 1, distinct)]
    if len(pools) < 2:
        raise SystemExit(f"need at least {2 * distinct} never-asked questions, have {len(questions)}")
    alone = _merge([production_batch(client, pools[0], n, concurrency)])
    before = set(finished_rounds(bench_out))
    log.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with open(log, "w") as fh:
        proc = subprocess.Popen(command, cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT)
        batches: list[dict] = []
        try:
            while proc.poll() is None:
                if len(batches) + 1 >= len(pools) or len(batches) >= max_batches:
                    raise SystemExit(f"the bench outlasted {len(batches)} production batches "
                                     f"(questions or --max-batches exhausted); see {log}")
                batches.append(production_batch(client, pools[len(batches) + 1], n, concurrency))
        finally:
            if proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=60)
    bench_wall = time.perf_counter() - t0
    rounds = {k: v for k, v in finished_rounds(bench_out).items() if k not in before}
    bench_reader = sum(r["metrics"]["cost"]["total"]["reader_s"] for r in rounds.values())
    with_bench = _merge(batches)
    both = bench_reader + with_bench["reader_s"]
    return {"production": {"n": n, "concurrency": concurrency, "distinct_per_batch": distinct},
            "alone": alone,
            "with_bench": with_bench,
            "bench": {"command": " ".join(command[1:]), "rc": proc.returncode, "rounds_finished": len(rounds),
                      "rounds": sorted(rounds), "wall_s": round(bench_wall, 1), "reader_s": round(bench_reader, 2),
                      "log": str(log)},
            "bench_share_of_reader_s": round(bench_reader / both, 3) if both else None,
            "p50_with_over_alone": ratio(with_bench.get("p50_s"), alone.get("p50_s")),
            "p95_with_over_alone": ratio(with_bench.get("p95_s"), alone.get("p95_s")),
            "failed_production_asks": alone["failed"] + with_bench["failed"]}
