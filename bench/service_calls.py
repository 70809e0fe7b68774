"""The gRPC calls and measurements the service benches share (load_test, faults, cluster,
fuzz): asking under concurrency, the reader's Health counters and their deltas, latency
percentiles, the service's resident memory and its Prometheus sums. Client side only."""
from __future__ import annotations

import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor

LOOPBACK = ("127.0.0.1", "localhost", "[::1]")
def check_loopback(address: str) -> None:
    host = address.rpartition(":")[0]
    if host not in LOOPBACK:
        raise SystemExit(f"load tests run against loopback only, not {address}")


def percentile(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, int(round(q * (len(s) - 1)))))]


READER_COUNTERS = ("prompts", "cache_hits", "engine_calls", "engine_prompts", "in_flight", "prompt_tokens",
                   "generated_tokens", "cached_tokens")


def reader_counters(client) -> dict:
    """The readers' counters since start, summed over every reader deployment (Health.readers:
    the 0.5B's `Reader`, the 1.5B's `Reader_1.5B`, ...), each one's own under `by_reader`."""
    h = client.health()
    by_reader = {r.deployment: {k: getattr(r, k) for k in READER_COUNTERS} for r in h.readers}
    if not by_reader:  # a service from before Health.readers: its one reader's fields
        by_reader = {"Reader": {k: getattr(h, f"reader_{k}") for k in READER_COUNTERS}}
    return {**{k: sum(c[k] for c in by_reader.values()) for k in READER_COUNTERS}, "by_reader": by_reader}


def readers_in_flight(client) -> int:
    """Requests running or waiting in every reader deployment (Health.readers), or the one
    reader's where the service predates the list."""
    h = client.health()
    return sum(r.in_flight for r in h.readers) if h.readers else h.reader_in_flight


def _counter_delta(before: dict, after: dict) -> dict:
    d = {k: after[k] - before.get(k, 0) for k in READER_COUNTERS}
    d["computed_tokens"] = d["prompt_tokens"] - d["cached_tokens"] + d["generated_tokens"]
    return {**d, "cache_hit_rate": d["cache_hits"] / d["prompts"] if d["prompts"] else None,
            "mean_batch": d["engine_prompts"] / d["engine_calls"] if d["engine_calls"] else None}


def reader_delta(before: dict, after: dict) -> dict:
    """What the readers did between two `reader_counters`, in all and per reader deployment."""
    per = {name: _counter_delta(before.get("by_reader", {}).get(name, {}), c)
           for name, c in after.get("by_reader", {}).items()}
    return {**_counter_delta(before, after), "by_reader": per}


def run_calls(client, questions: list[str], concurrency: int, retrievers=(), on_reply=None,
              stream: bool = False) -> dict:
    """Ask every question (in order, `concurrency` at a time); latencies and failures.
    `stream`: through AskStream, also the latency of the first (provisional or final) reply."""
    import grpc

    lat, first, failures, lock = [], [], [], threading.Lock()

    def ask(q: str):
        if not stream:
            return client.ask(q, retrievers)
        t, r, first_s = time.perf_counter(), None, None
        for r in client.ask_stream(q, retrievers):
            first_s = first_s if first_s is not None else time.perf_counter() - t
        with lock:
            first.append(first_s)
        return r

    def one(i_q):
        i, q = i_q
        t = time.perf_counter()
        try:
            r = ask(q)
        except grpc.RpcError as exc:
            with lock:
                failures.append({"i": i, "question": q, "code": exc.code().name, "details": exc.details()})
            return
        dt = time.perf_counter() - t
        with lock:
            lat.append(dt)
        if on_reply:
            on_reply(i, time.time(), r)

    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        list(pool.map(one, enumerate(questions)))
    wall = time.perf_counter() - t0
    out = {"calls": len(questions), "ok": len(lat), "failed": len(failures), "failures": failures[:10],
           "wall_s": round(wall, 2), "throughput_qps": round(len(lat) / wall, 3) if wall else None,
           "p50_s": round(percentile(lat, 0.5), 3), "p95_s": round(percentile(lat, 0.95), 3),
           "mean_s": round(statistics.fmean(lat), 3) if lat else None,
           "max_s": round(max(lat), 3) if lat else None, "latencies_s": [round(x, 2) for x in lat]}
    if stream:
        out["first_reply_mean_s"] = round(statistics.fmean(first), 3) if first else None
    return out


def ratio(a: float | None, b: float | None) -> float | None:
    """a / b to two decimals, or None when either side is missing (or b is 0)."""
    return round(a / b, 2) if a is not None and b else None


def latency_summary(latencies: list[float]) -> dict:
    return {"questions": len(latencies), "mean_s": round(statistics.fmean(latencies), 3),
            "p50_s": round(percentile(latencies, 0.5), 3), "p95_s": round(percentile(latencies, 0.95), 3),
            "latencies_s": [round(x, 2) for x in latencies]}


def metrics_snapshot(address: str) -> dict:
    """What `curl http://ADDRESS/metrics` shows of eor's metrics: per metric, the sum of its
    samples (counters and histogram `_count`s), so a report can show they moved."""
    import urllib.request

    text = urllib.request.urlopen(f"http://{address}/metrics", timeout=30).read().decode()
    sums: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("#") or "eor_" not in line:
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name.endswith("_bucket") or name.endswith("_sum"):
            continue
        try:
            sums[name] = sums.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
        except ValueError:
            continue
    return {"address": address, "sums": dict(sorted(sums.items()))}


def memory_report(root_pid: int | None = None) -> dict:
    """Resident memory of the service, GiB: the process `root_pid` (default: this one, the
    service --start began) and every descendant (GCS, raylet, the actors, vLLM's engine
    processes under the Reader)."""
    import psutil

    me = psutil.Process(root_pid)
    total, by = 0, {}
    for p in [me] + me.children(recursive=True):
        try:
            rss, name = p.memory_info().rss, (p.name() or "?")
            title = " ".join(p.cmdline()[:1]) or name
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        key = ("driver (gRPC front)" if p.pid == me.pid else title.split(" ")[0])[:48]
        total += rss
        by[key] = by.get(key, 0) + rss
    return {"total_gib": round(total / 2**30, 2),
            "by_process_gib": {k: round(v / 2**30, 2) for k, v in sorted(by.items(), key=lambda kv: -kv[1])[:25]}}
