"""Scale out (issue 57): Ray Serve autoscales the reader on a real two-node local cluster, a second
Reader replica started under load and removed after.

    python -m bench.autoscale --model qwen2.5-coder-0.5b --out var/bench/autoscale.json

1. Two `ray start` nodes (bench/cluster.py), each with one `eor_reader` resource: one Reader replica
   fits on each, so a second replica RUNNING is on the other node.
2. eor's service deployed onto them, `service.reader_autoscaling` {min 1, max 2,
   target_ongoing_requests, upscale and downscale delays}; every other deployment on the head.
3. Closed-loop load: `-c` clients ask questions back to back for `--load-s` s (the eval split, by
   question, seed 0, from `--offset`); the Reader's replicas (RUNNING, STARTING, ...) polled each
   second from Serve's controller.
4. Idle: polled until the Reader is back at one replica, or `--idle-s` passes.
The report: the replicas over time, when the second started and went, and goodput (answers/s) in
the load window before the second replica ran and after. On one machine the two nodes share its
cores: a second replica there shows the mechanism, not more capacity (a real second node brings
its own cores).
"""
from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path

from bench.cluster import HEAD, WORKER, start_head, start_worker, stop_cluster
from bench.common import DEFAULT_QUESTIONS

READER_SLOT = "eor_reader"  # one Reader replica per node
PLACEMENT = {"Reader": {READER_SLOT: 1}, "Voter": {HEAD: 0.01}, "EorIngress": {HEAD: 0.01},
             "Source_Wiki": {HEAD: 0.01}, "Source_SE": {HEAD: 0.01}, "Retrievers": {HEAD: 0.01}}


def replica_states(app: str = "eor", deployment: str = "Reader") -> dict[str, int]:
    """The deployment's replicas by state, from Serve's controller ({} before it exists; {"ERROR": 1}
    when the controller does not answer, as while it restarts)."""
    from ray import serve

    try:
        app_status = serve.status().applications.get(app)
    except Exception:  # noqa: BLE001 - a poll that failed is a point of the timeline, not the end of the run
        return {"ERROR": 1}
    dep = app_status.deployments.get(deployment) if app_status else None
    return {str(getattr(k, "value", k)): int(v) for k, v in (dep.replica_states if dep else {}).items()}


def only_one(states: dict[str, int]) -> bool:
    """One replica RUNNING and no other (an empty or failed poll is not that)."""
    return states.get("RUNNING", 0) == 1 and sum(states.values()) == 1


def goodput(answers: list[dict], start: float, end: float) -> float | None:
    """OK answers per second that ended in [start, end) (None: an empty window)."""
    if end <= start:
        return None
    return round(sum(1 for a in answers if a["ok"] and start <= a["t"] < end) / (end - start), 4)


def first_at(timeline: list[dict], running: int, after: float = 0.0, at_most: bool = False) -> float | None:
    """The first poll at or after `after` with at least (`at_most`: at most) `running` RUNNING."""
    for p in timeline:
        n = p["states"].get("RUNNING", 0)
        if p["t"] >= after and (n <= running if at_most else n >= running):
            return p["t"]
    return None


def summarize(timeline: list[dict], answers: list[dict], load_end: float) -> dict:
    """When the second replica started (STARTING seen), ran and went; goodput before and after it ran.
    The "before" window opens at the first answer (before it nothing can end: counting the pipeline's
    filling would understate it) and the split is capped at the load's end."""
    starting = next((p["t"] for p in timeline if sum(p["states"].values()) >= 2 and "ERROR" not in p["states"]),
                    None)
    second = first_at(timeline, 2)
    back = next((p["t"] for p in timeline if p["t"] >= load_end and only_one(p["states"])), None) \
        if second is not None else None  # removed once the load ended (a replica lost meanwhile is not that)
    t0 = min((a["t"] for a in answers if a["ok"]), default=0.0)
    split = min(second, load_end) if second is not None else load_end
    return {"second_replica_asked_at_s": starting, "second_replica_running_at_s": second,
            "back_to_one_at_s": back, "load_end_s": load_end, "first_answer_s": t0,
            "goodput_before_per_s": goodput([a for a in answers if a["t"] > t0], t0, split),  # the first opens it
            "goodput_after_per_s": goodput(answers, split, load_end) if second is not None else None,
            "asks": len(answers), "ok": sum(a["ok"] for a in answers),
            "not_ok": sorted({a["code"] for a in answers if not a["ok"]})}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="qwen2.5-coder-0.5b", help="the reader (a prepared model name or path)")
    ap.add_argument("--index", default="shared")
    ap.add_argument("--questions", default=DEFAULT_QUESTIONS)
    ap.add_argument("--offset", type=int, default=900, help="eval-split rows asked start here")
    ap.add_argument("--specs", nargs="+", default=["SE@1", "Wiki@10"], help="the pool (equal votes)")
    ap.add_argument("-c", type=int, default=3, help="clients during the load (and the Asks the ingress runs at once)")
    ap.add_argument("--load-s", type=float, default=300.0)
    ap.add_argument("--idle-s", type=float, default=240.0, help="the longest wait for the replica to go")
    ap.add_argument("--target", type=float, default=2.0, help="target_ongoing_requests per Reader replica")
    ap.add_argument("--upscale-delay", type=float, default=10.0)
    ap.add_argument("--downscale-delay", type=float, default=60.0)
    ap.add_argument("--kv-gib", type=float, default=1.0, help="each replica's KV cache (two engines on one machine)")
    ap.add_argument("--eager", action="store_true", help="no compiled engine beside the eager one in each replica "
                    "(two replicas on one machine: the upgrade's second engine doubles the memory)")
    ap.add_argument("--port", type=int, default=6393, help="the head's GCS port (metrics ports: +1800, +1801)")
    ap.add_argument("--out", help="report JSON")
    args = ap.parse_args(argv)

    from bench.load_curve import never_asked
    from protos.client import EorClient
    from serve.app.application import LocalService
    from serve.config import config_from_dict
    from serve.engine.models import models_dir

    model = args.model if "/" in args.model else str(models_dir() / args.model)
    qs = [q.question for q in never_asked(args.questions, args.offset, "eval")]
    scaling = {"min_replicas": 1, "max_replicas": 2, "target_ongoing_requests": args.target,
               "upscale_delay_s": args.upscale_delay, "downscale_delay_s": args.downscale_delay}
    reader = {"model": model, "cpu_kv_cache_gib": args.kv_gib, "enforce_eager": args.eager}
    settings = {"reader": reader, "generator": {"model": ""}, "index": {"name": args.index},
                "cache": {"enabled": False}, "pool": {"specs": list(args.specs)}, "voter": {"weights": "equal"},
                "service": {"port": 0, "placement": PLACEMENT, "ray_address": f"127.0.0.1:{args.port}",
                            "reader_autoscaling": scaling, "max_asks_running": args.c}}
    report: dict = {"model": args.model, "specs": list(args.specs), "autoscaling": scaling, "clients": args.c,
                    "questions": f"eval split (by question, seed 0) from row {args.offset}"}
    temp = "/tmp/eor-autoscale"
    stop_cluster(temp)
    start_head(args.port, temp, args.port + 1800, {HEAD: 1, READER_SLOT: 1})
    start_worker(args.port, temp, args.port + 1801, {WORKER: 1, READER_SLOT: 1})
    svc = None
    timeline: list[dict] = []
    answers: list[dict] = []
    lock = threading.Lock()
    try:
        svc = LocalService(config_from_dict(settings)).start()
        with EorClient(svc.address, timeout_s=600) as client:
            client.ask("what is the capital of france")  # warm-up
            t0 = time.monotonic()
            stop = threading.Event()
            todo = iter(qs)

            def client_loop() -> None:
                while not stop.is_set():
                    with lock:
                        q = next(todo, None)
                    if q is None:
                        return
                    sent = time.monotonic() - t0
                    try:
                        client.ask(q)
                        code = "OK"
                    except Exception as exc:  # noqa: BLE001 - recorded: a status, never a crash of the bench
                        code = getattr(getattr(exc, "code", lambda: None)(), "name", type(exc).__name__)
                    with lock:
                        answers.append({"sent": sent, "t": time.monotonic() - t0, "ok": code == "OK", "code": code})

            threads = [threading.Thread(target=client_loop, daemon=True) for _ in range(args.c)]
            for th in threads:
                th.start()
            load_end = None
            while True:
                now = time.monotonic() - t0
                timeline.append({"t": round(now, 1), "states": replica_states()})
                if load_end is None and now >= args.load_s:
                    stop.set()
                    load_end = round(now, 1)
                    print(f"load ended at {load_end} s; {len(answers)} answered", file=sys.stderr)
                if load_end is not None and (only_one(timeline[-1]["states"]) or now >= args.load_s + args.idle_s):
                    break
                time.sleep(1.0)
            for th in threads:
                th.join(timeout=600)
        report["summary"] = summarize(timeline, answers, load_end)
        report["timeline"] = timeline
        report["answers"] = answers
    finally:
        if svc is not None:
            svc.stop()
        stop_cluster(temp)
    print(json.dumps(report.get("summary", {})), file=sys.stderr)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
