"""Load, latency and fault tests of the live eor service over gRPC (loopback only, bounded).

    # against a running `eor serve` (127.0.0.1:50051):
    python -m bench.load_test load    --server 127.0.0.1:50051 -n 300 -c 8 --distinct 30
    python -m bench.load_test compare --server 127.0.0.1:50051 --cold 20 --single Wiki@10
    python -m bench.load_test fault --server 127.0.0.1:50051 [--config eor.yaml] --fault-n 60 --kill-after 20
    # or start the service in this process:
    python -m bench.load_test all --start [--config eor.yaml] --out var/bench/load.json
    python -m bench.load_test all --start --out var/bench/load.json

load:    N Ask calls at concurrency C cycling over D distinct questions (repeats may hit the
         reader cache); throughput, p50/p95, failures, and from Health deltas the reader's cache
         hit rate and mean batch size (prompts per engine call).
compare: cold adaptive EoR (the service's voter: its retrievers, its stages, its early stop)
         vs one retriever, with EoR-16 (all 16 retrievers) as a third row, in the same run,
         over disjoint sets of never-asked questions (so all are cold); the headline is the
         ratio of mean latencies, beside the ratio of reader tokens computed (prompt tokens
         minus prefix-cache hits, plus generated; the service's Health counters).
fault:   during a load (`--fault-n` calls over the load's distinct questions), kill one
         retriever-group actor; expect no failed request, affected replies listing its
         retrievers as missing, Ray restarting it, later replies complete.
cold:    `--cold` never-asked questions through the service's adaptive EoR, one at a time;
inprocess: the same questions through `eor ask`'s in-process path (no service needed): with the
         reader cache off on both sides (`--config bench/configs/no-cache.yaml`), the ratio of
         the two mean latencies is what serving costs over the pool (and the reader work per
         question: engine calls, prompts, mean batch).
deadline: `--cold` never-asked questions, each an Ask with deadline_s = `--deadline`: latency, what
         is listed missing, and how soon after the reply the reader's in-flight requests are 0.
memory:  the resident memory of a running `eor serve` (`--pid`) and all its processes.
reader-fault: during a load at concurrency `-c`, SIGKILL the vLLM worker process; expect no
         Ask OK with an empty answer, the affected ones UNAVAILABLE with one line, Health (and
         grpc.health.v1) NOT_SERVING within 5 s, and correct answers again within 3 min with no
         operator; the report is the timeline (every reply and every Health poll).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench.common import DEFAULT_QUESTIONS, Timeline, read_questions

LOOPBACK = ("127.0.0.1", "localhost", "[::1]")
WARM_UP = "what is the capital of france"  # asked before the timed questions of `cold` and `inprocess`


def _check_loopback(address: str) -> None:
    host = address.rpartition(":")[0]
    if host not in LOOPBACK:
        raise SystemExit(f"load tests run against loopback only, not {address}")


def _pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, int(round(q * (len(s) - 1)))))]


def _health(client) -> dict:
    h = client.health()
    return {"prompts": h.reader_prompts, "cache_hits": h.reader_cache_hits,
            "engine_calls": h.reader_engine_calls, "engine_prompts": h.reader_engine_prompts,
            "in_flight": h.reader_in_flight,
            "prompt_tokens": h.reader_prompt_tokens, "generated_tokens": h.reader_generated_tokens,
            "cached_tokens": h.reader_cached_tokens}


def _reader_delta(before: dict, after: dict) -> dict:
    d = {k: after[k] - before[k] for k in before}
    d["computed_tokens"] = d["prompt_tokens"] - d["cached_tokens"] + d["generated_tokens"]
    return {**d, "cache_hit_rate": d["cache_hits"] / d["prompts"] if d["prompts"] else None,
            "mean_batch": d["engine_prompts"] / d["engine_calls"] if d["engine_calls"] else None}


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
           "p50_s": round(_pct(lat, 0.5), 3), "p95_s": round(_pct(lat, 0.95), 3),
           "mean_s": round(statistics.fmean(lat), 3) if lat else None}
    if stream:
        out["first_reply_mean_s"] = round(statistics.fmean(first), 3) if first else None
    return out


def load_test(client, questions: list[str], n: int, concurrency: int, distinct: int) -> dict:
    if len(questions) < distinct:
        raise SystemExit(f"need {distinct} distinct questions, have {len(questions)}")
    pool = questions[:distinct]
    asked = [pool[i % distinct] for i in range(n)]
    before = _health(client)
    out = run_calls(client, asked, concurrency)
    out.update(distinct=distinct, concurrency=concurrency, reader=_reader_delta(before, _health(client)))
    return out


def compare(client, questions: list[str], cold: int, single: str, concurrency: int = 1,
            pool: tuple[str, ...] = ()) -> dict:
    """Adaptive EoR, one retriever and EoR-16 over three disjoint sets of `cold` questions, in
    one run. `pool`: the 16 specs EoR-16 names explicitly (empty: skip that row)."""
    n_sets = 3 if pool else 2
    if len(questions) < n_sets * cold:
        raise SystemExit(f"need {n_sets * cold} questions for a cold comparison, have {len(questions)}")
    sets = [questions[i * cold:(i + 1) * cold] for i in range(n_sets)]
    rows: dict[str, dict] = {}
    stops: dict[str, int] = {}

    def note_stop(i, when, reply):
        stops[str(reply.stopped_at_stage)] = stops.get(str(reply.stopped_at_stage), 0) + 1
    for name, qs, specs, hook in (("adaptive", sets[0], (), note_stop), ("single", sets[1], [single], None),
                                  *((("eor16", sets[2], list(pool), None),) if pool else ())):
        h0 = _health(client)
        rows[name] = run_calls(client, qs, concurrency, retrievers=specs, on_reply=hook, stream=name == "adaptive")
        rows[name]["reader"] = _reader_delta(h0, _health(client))
    rows["adaptive"]["stopped_at_stage"] = dict(sorted(stops.items()))
    rows["adaptive"]["first_round_stop_share"] = round(stops.get("1", 0) / cold, 3)

    def ratio(a: float | None, b: float | None) -> float | None:
        return round(a / b, 2) if a is not None and b else None
    work = {}
    for kind in ("prompt_tokens", "cached_tokens", "generated_tokens", "computed_tokens"):
        work[kind] = {name: round(r["reader"][kind] / cold, 1) for name, r in rows.items()}
        work[kind]["adaptive_over_single"] = ratio(work[kind]["adaptive"], work[kind]["single"])
    return {"cold_questions": cold, "single": single, "rows": rows,
            "latency_ratio_adaptive_over_single": ratio(rows["adaptive"]["mean_s"], rows["single"]["mean_s"]),
            "latency_ratio_eor16_over_single": ratio(rows.get("eor16", {}).get("mean_s"), rows["single"]["mean_s"]),
            "first_streamed_reply_over_single": ratio(rows["adaptive"].get("first_reply_mean_s"),
                                                      rows["single"]["mean_s"]),
            "goal": "<= 2.5", "reader_work_per_question": work}


def deadline_test(client, questions: list[str], deadline_s: float = 5.0, drain_limit_s: float = 10.0) -> dict:
    """Cold Asks with `deadline_s`: each reply's latency and what it lists missing, then how
    long after the reply the reader's running + waiting requests (Health.reader_in_flight)
    take to fall back to zero (the work behind the missed deadline is aborted, not finished)."""
    rows = []
    for q in questions:
        t = time.perf_counter()
        r = client.ask(q, deadline_s=deadline_s)
        latency = time.perf_counter() - t
        in_flight_at_reply = client.health().reader_in_flight
        t1, drained = time.perf_counter(), None
        while time.perf_counter() - t1 < drain_limit_s:
            if client.health().reader_in_flight == 0:
                drained = round(time.perf_counter() - t1, 2)
                break
            time.sleep(0.1)
        rows.append({"question": q, "latency_s": round(latency, 2), "answer": r.answer, "ran": list(r.ran),
                     "missing": list(r.missing), "in_flight_at_reply": in_flight_at_reply,
                     "in_flight_zero_after_s": drained})
    return {"deadline_s": deadline_s, "asks": rows,
            "max_latency_s": max(x["latency_s"] for x in rows),
            "max_drain_s": max((x["in_flight_zero_after_s"] or drain_limit_s) for x in rows),
            "goal": f"reply <= {deadline_s + 1:g} s; in flight 0 within 2 s"}


def cold_asks(client, questions: list[str]) -> dict:
    """Adaptive EoR (the service's voter) on never-asked questions, one at a time: the service
    side of `inprocess` (start `eor serve` with the reader cache off, e.g.
    `--config bench/configs/no-cache.yaml`, so both sides compute every prompt)."""
    client.ask(WARM_UP)  # as `inprocess` does: both sides are warm before the timed questions
    h0 = _health(client)
    latencies, stops = [], []
    for q in questions:
        t = time.perf_counter()
        reply = client.ask(q)
        latencies.append(time.perf_counter() - t)
        stops.append([reply.stopped_at_stage, reply.answer])
    reader = _reader_delta(h0, _health(client))
    n = len(questions)
    # AsyncLLM: one engine request per distinct uncached prompt (CountingEngine counts requests as calls)
    return {"path": "service", "voter": client.health().voter, **_latency_summary(latencies), "stops": stops,
            "reader": reader,
            "prompts_per_question": round(reader["prompts"] / n, 2),
            "engine_requests_per_question": round(reader["engine_calls"] / n, 2)}


def inprocess_asks(questions: list[str], config_path: str | None) -> dict:
    """The same questions through `eor ask`'s in-process path (serve/ensemble.answer over the
    pool, the offline vLLM engine), one at a time, in one process; the engine is started and
    warmed before the first timed question."""
    from serve.builder import make_pool
    from serve.cli.common import voter_choice
    from serve.config import load_config
    from serve.ensemble import answer
    from voter.question_vote import build_metrics

    config = load_config(config_path)
    pool = make_pool(config)
    choice = voter_choice(argparse.Namespace(metrics=None, pooling=None, nli_model=None), pool, config=config)
    metrics = build_metrics(choice.options, pool.reader)
    pool.load()
    engine = pool.reader.engine
    engine.load()
    try:
        answer([WARM_UP], choice, pool.run, metrics)
        stats0 = dict(vars(pool.reader.stats))
        tokens0 = {k: getattr(engine, k, 0) for k in ("prompt_tokens", "generated_tokens", "cached_tokens")}
        latencies, stops = [], []
        for q in questions:
            t = time.perf_counter()
            a = answer([q], choice, pool.run, metrics)[0]
            latencies.append(time.perf_counter() - t)
            stops.append([a.stopped_at, a.vote.answer])
    finally:
        engine.close()
    stats = {k: v - stats0[k] for k, v in vars(pool.reader.stats).items()}
    tokens = {k: getattr(engine, k, 0) - tokens0[k] for k in tokens0}
    n = len(questions)
    return {"path": "in-process", "voter": choice.describe(), **_latency_summary(latencies), "stops": stops,
            "reader": {**stats, **tokens}, "prompts_per_question": round(stats["prompts"] / n, 2),
            "engine_requests_per_question": round(stats["engine_prompts"] / n, 2),
            "engine_calls_per_question": round(stats["calls"] / n, 2),
            "mean_batch": round(stats["engine_prompts"] / stats["calls"], 2) if stats["calls"] else None}


def _latency_summary(latencies: list[float]) -> dict:
    return {"questions": len(latencies), "mean_s": round(statistics.fmean(latencies), 3),
            "p50_s": round(_pct(latencies, 0.5), 3), "p95_s": round(_pct(latencies, 0.95), 3),
            "latencies_s": [round(x, 2) for x in latencies]}


def _group_processes(group: int) -> list[int]:
    """PIDs of the Ray worker processes serving retriever group `group` on this machine (Ray
    titles an actor's process `ray::ServeReplica:<app>:<deployment>`)."""
    import psutil

    import re

    tag = re.compile(rf"ServeReplica:eor:Retrievers_{group}(?!\d)")  # Retrievers_1, not Retrievers_10
    out = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        try:
            if any(tag.search(part) for part in (p.info["cmdline"] or ())):
                out.append(p.info["pid"])
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return sorted(out)


def fault_test(client, questions: list[str], n: int, concurrency: int, kill_after_s: float,
               specs: list[str], group: int = 1) -> dict:
    """Crash the process of retriever group `group` (serving `specs`) with SIGKILL after
    `kill_after_s` s of load: works against any local server, not only one this process started."""
    import os
    import signal

    replies: list[tuple[int, float, list[str]]] = []
    targets = _group_processes(group)
    if not targets:
        raise SystemExit(f"fault test: no process of retriever group {group} found on this machine")
    killed_at: list[float] = []

    def killer():
        time.sleep(kill_after_s)
        for pid in targets:
            os.kill(pid, signal.SIGKILL)
        killed_at.append(time.time())

    threading.Thread(target=killer, daemon=True).start()
    res = run_calls(client, [questions[i % len(questions)] for i in range(n)], concurrency,
                    on_reply=lambda i, t, r: replies.append((i, t, list(r.missing))))
    k = killed_at[0] if killed_at else float("inf")
    hit = [t for _, t, m in replies if set(specs) & set(m)]  # replies missing the killed group
    other = sum(1 for _, _, m in replies if set(m) - set(specs))  # missing something else (load timeouts)
    after = sorted((t, m) for _, t, m in replies if t > k)
    whole_again = next((t - k for t, m in after if not set(specs) & set(m) and t > max(hit, default=k)), None)
    now = _group_processes(group)
    res.update(killed_pids=targets, killed_specs=specs, kill_after_s=kill_after_s,
               replies_missing_killed_group=len(hit), replies_missing_other_retrievers=other,
               group_whole_again_after_kill_s=round(whole_again, 1) if whole_again is not None else None,
               processes_now=now, restarted=bool(now) and not set(now) & set(targets))
    return res


def _title(p) -> str:
    return " ".join(p.cmdline() or ()) or p.name() or ""


def _engine_workers() -> list[int]:
    """PIDs of the service's vLLM worker processes (titled `VLLM::Worker`, under the Reader
    replica's actor): never another engine on this machine (an `eor eval` beside the service)."""
    import psutil

    out = []
    for p in psutil.process_iter():
        try:
            if _title(p).startswith("VLLM::Worker") and any(
                    _title(a).startswith("ray::ServeReplica:eor:Reader") for a in p.parents()):
                out.append(p.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return sorted(out)


def reader_fault_test(client, address: str, questions: list[str], n: int, concurrency: int,
                      kill_after_s: float, limit_s: float = 600.0) -> dict:
    """SIGKILL the reader's vLLM worker under load; the timeline of replies and Health, then
    how long until an Ask is answered again (bounded by `limit_s`)."""
    import os
    import signal

    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    targets = _engine_workers()
    if not targets:
        raise SystemExit("reader fault test: no VLLM::Worker process on this machine")
    timeline = Timeline()
    events, note = timeline.events, timeline.note

    def one(q: str) -> None:
        try:
            r = client.ask(q)
            note(kind="ask", code="OK", empty=not r.answer, answer=r.answer[:40])
        except grpc.RpcError as exc:
            note(kind="ask", code=exc.code().name, details=exc.details()[:200])

    stop = threading.Event()

    def poll_health():
        with grpc.insecure_channel(address) as ch:
            probe = health_pb2_grpc.HealthStub(ch)
            while not stop.is_set():
                try:
                    h = client.health()
                    std = probe.Check(health_pb2.HealthCheckRequest(), timeout=10).status
                    note(kind="health", status=h.status, detail=h.detail[:120], grpc_health=std)
                except grpc.RpcError as exc:
                    note(kind="health", status=-1, detail=exc.code().name)
                stop.wait(0.5)

    def killer():
        time.sleep(kill_after_s)
        for pid in targets:
            os.kill(pid, signal.SIGKILL)
        note(kind="kill", pids=targets)

    threading.Thread(target=poll_health, daemon=True).start()
    threading.Thread(target=killer, daemon=True).start()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        list(pool.map(one, [questions[i % len(questions)] for i in range(n)]))
    # then ask until an answer comes back (the engine restarting), at most limit_s after the kill
    kill_t = next((e["t"] for e in events if e["kind"] == "kill"), None)
    while kill_t is not None and timeline.elapsed() < kill_t + limit_s:
        one(questions[0])
        last = events[-1]
        if last["kind"] == "ask" and last["code"] == "OK" and not last["empty"]:
            break
        time.sleep(2)
    stop.set()
    asks = [e for e in events if e["kind"] == "ask"]
    after = [e for e in asks if kill_t is not None and e["t"] >= kill_t]
    not_serving = next((e["t"] for e in events if e["kind"] == "health" and kill_t is not None
                        and e["t"] >= kill_t and e["status"] == 2), None)
    back = next((e["t"] for e in after if e["code"] == "OK" and not e["empty"]
                 and any(x["code"] != "OK" for x in after if x["t"] <= e["t"])), None)
    return {"killed_pids": targets, "kill_at_s": kill_t, "asks": len(asks),
            "ok_with_empty_answer": sum(1 for e in asks if e["code"] == "OK" and e["empty"]),
            "codes_after_kill": {c: sum(1 for e in after if e["code"] == c) for c in {e["code"] for e in after}},
            "health_not_serving_after_s": round(not_serving - kill_t, 2) if not_serving is not None else None,
            "answered_again_after_s": round(back - kill_t, 2) if back is not None and kill_t is not None else None,
            "workers_now": _engine_workers(), "timeline": events}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=["load", "compare", "cold", "inprocess", "fault", "reader-fault", "deadline",
                                     "memory", "all"])
    ap.add_argument("--server", default="127.0.0.1:50051")
    ap.add_argument("--start", action="store_true", help="start the service in this process (loopback)")
    ap.add_argument("--config", help="eor YAML for --start")
    ap.add_argument("--questions", default=DEFAULT_QUESTIONS)
    ap.add_argument("-n", type=int, default=300)
    ap.add_argument("-c", type=int, default=8)
    ap.add_argument("--distinct", type=int, default=30)
    ap.add_argument("--cold", type=int, default=20)
    ap.add_argument("--single", default="Wiki@10")
    ap.add_argument("--offset", type=int, default=0, help="compare, cold, inprocess, deadline: skip this many "
                    "more questions of the file (past the ones fits, evals or earlier runs asked, so every question "
                    "is cold); load: its distinct questions start here (some never asked: the engine batches them)")
    ap.add_argument("--fault-n", type=int, default=60, help="calls of the fault test's load")
    ap.add_argument("--kill-after", type=float, default=30.0)
    ap.add_argument("--kill-group", type=int, default=1, help="index of the retriever group whose actor dies")
    ap.add_argument("--metrics-address", help="HOST:PORT of the server's Prometheus endpoint (with --start: known)")
    ap.add_argument("--deadline", type=float, default=5.0, help="deadline mode: deadline_s of each Ask")
    ap.add_argument("--pid", type=int, help="memory mode: the pid of the running `eor serve`")
    ap.add_argument("--out", help="write the report JSON here")
    args = ap.parse_args(argv)

    from protos.client import EorClient

    qs = [r["question"] for r in read_questions(args.questions, dataset=None)]
    cold = qs[args.distinct + args.offset:][:args.cold]  # never-asked questions (cold, inprocess, deadline)
    if args.mode in ("cold", "inprocess", "deadline") and len(cold) < args.cold:
        raise SystemExit(f"--offset {args.offset} leaves {len(cold)} questions of {args.questions}; "
                         f"{args.cold} needed")
    if args.mode == "inprocess":
        report = {"inprocess": inprocess_asks(cold, args.config)}
        return _write_report(report, args.out)
    service = None
    if args.start:
        from serve.app.application import LocalService
        from serve.config import load_config

        service = LocalService(load_config(args.config, {"service": {"port": 0}})).start()
        args.server = service.address
    _check_loopback(args.server)
    report: dict = {"server": args.server}
    try:
        with EorClient(args.server) as client:
            client.health()
            # the load's questions, then fresh ones for compare; the fault test reuses the load's
            if args.mode in ("load", "all"):
                report["load"] = load_test(client, qs[args.offset:] if args.mode == "load" else qs, args.n, args.c,
                                           args.distinct)
            if args.mode in ("compare", "all"):
                from retrievers.spec import PAPER_POOL

                fresh = qs[args.distinct + args.offset:]
                report["compare"] = compare(client, fresh, args.cold, args.single, pool=PAPER_POOL)
            if args.mode == "deadline":
                report["deadline"] = deadline_test(client, cold, args.deadline)
            if args.mode == "cold":
                report["cold"] = cold_asks(client, cold)
            if args.mode == "memory":
                report["memory"] = memory_report(args.pid)
                report["health"] = _health(client)
            if args.mode == "reader-fault":
                report["reader_fault"] = reader_fault_test(client, args.server, qs[:args.distinct], args.fault_n,
                                                           args.c, args.kill_after)
            if args.mode in ("fault", "all"):
                specs = _group_specs(service, args.config, args.kill_group)
                report["fault"] = fault_test(client, qs[:args.distinct], args.fault_n, args.c,
                                             args.kill_after, specs, args.kill_group)
        if service is not None:
            report["memory"] = memory_report()
        address = service.metrics_address if service is not None else args.metrics_address
        if address:
            report["metrics"] = metrics_snapshot(address)
    finally:
        if service is not None:
            service.stop()
    _write_report(report, args.out)
    failed = sum(report.get(k, {}).get("failed", 0) for k in ("load", "fault"))
    failed += report.get("reader_fault", {}).get("ok_with_empty_answer", 0)
    return 1 if failed else 0


def _write_report(report: dict, out: str | None) -> int:
    text = json.dumps(report, indent=2)
    print(text)
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(text + "\n")
    return 0


def _group_specs(service, config: str | None, group: int) -> list[str]:
    from serve.config import actor_groups, load_config  # the same config file the server was given

    if service is not None:
        return list(actor_groups(service.settings)[group])
    return list(actor_groups(load_config(config))[group])


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


if __name__ == "__main__":
    sys.exit(main())
