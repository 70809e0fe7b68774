"""Fault injection against a live local service: SIGKILL a retriever group's actor process
(`fault`) or the reader's vLLM worker (`reader-fault`) under load, and record what the
clients saw (the CLI is `python -m bench.load_test fault|reader-fault`)."""
from __future__ import annotations

import os
import re
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from bench.common import Timeline
from bench.service_calls import run_calls


def group_processes(group: int) -> list[int]:
    """PIDs of the Ray worker processes serving retriever group `group` on this machine (Ray
    titles an actor's process `ray::ServeReplica:<app>:<deployment>`)."""
    import psutil

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
    replies: list[tuple[int, float, list[str]]] = []
    targets = group_processes(group)
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
    now = group_processes(group)
    res.update(killed_pids=targets, killed_specs=specs, kill_after_s=kill_after_s,
               replies_missing_killed_group=len(hit), replies_missing_other_retrievers=other,
               group_whole_again_after_kill_s=round(whole_again, 1) if whole_again is not None else None,
               processes_now=now, restarted=bool(now) and not set(now) & set(targets))
    return res


def _title(p) -> str:
    return " ".join(p.cmdline() or ()) or p.name() or ""


def engine_workers(deployment: str | None = None, wait_s: float = 0.0) -> list[int]:
    """PIDs of the service's vLLM worker processes (titled `VLLM::Worker`, under a Reader replica's
    actor; `deployment`, e.g. Reader_1.5B: that reader's alone): never another engine on this machine
    (an `eor eval` beside the service). A replica is known by its idle title (a busy one's names its
    task instead): `wait_s`, how long to poll for it."""
    import psutil

    owner = re.compile(r"ray::ServeReplica:eor:" + (re.escape(deployment) + r"(\s|$)" if deployment else "Reader"))
    end = time.monotonic() + wait_s
    while True:
        out = []
        for p in psutil.process_iter():
            try:
                if _title(p).startswith("VLLM::Worker") and any(owner.match(_title(a)) for a in p.parents()):
                    out.append(p.pid)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        if out or time.monotonic() >= end:
            return sorted(out)
        time.sleep(1.0)


def reader_fault_test(client, address: str, questions: list[str], n: int, concurrency: int,
                      kill_after_s: float, limit_s: float = 600.0, deployment: str | None = None) -> dict:
    """SIGKILL the readers' vLLM workers (`deployment`'s alone, e.g. Reader_1.5B) under load; the
    timeline of replies (latency, degraded or not) and Health, then how long until an Ask is
    answered again, and answered whole (not degraded) again (bounded by `limit_s`)."""

    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    targets = engine_workers(deployment, wait_s=120.0)
    if not targets:
        raise SystemExit("reader fault test: no VLLM::Worker process on this machine")
    timeline = Timeline()
    events, note = timeline.events, timeline.note

    def one(q: str) -> None:
        t = time.monotonic()
        try:
            r = client.ask(q)
            note(kind="ask", code="OK", empty=not r.answer, answer=r.answer[:40], degraded=r.degraded[:120],
                 latency_s=round(time.monotonic() - t, 2))
        except grpc.RpcError as exc:
            note(kind="ask", code=exc.code().name, details=exc.details()[:200], latency_s=round(time.monotonic() - t, 2))

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
        last = next(e for e in reversed(events) if e["kind"] == "ask")
        if last["code"] == "OK" and not last["empty"] and not last.get("degraded"):
            break
        time.sleep(2)
    stop.set()
    asks = [e for e in events if e["kind"] == "ask"]
    after = [e for e in asks if kill_t is not None and e["t"] >= kill_t]
    not_serving = next((e["t"] for e in events if e["kind"] == "health" and kill_t is not None
                        and e["t"] >= kill_t and e["status"] == 2), None)
    back = next((e["t"] for e in after if e["code"] == "OK" and not e["empty"]
                 and any(x["code"] != "OK" for x in after if x["t"] <= e["t"])), None)
    whole = next((e["t"] for e in after if e["code"] == "OK" and not e["empty"] and not e.get("degraded")
                  and e["t"] - e.get("latency_s", 0) >= kill_t), None)  # asked after the kill, answered whole
    before = sorted(e["latency_s"] for e in asks if kill_t is not None and e["t"] < kill_t and e["code"] == "OK")
    return {"killed_pids": targets, "killed": deployment or "every reader", "kill_at_s": kill_t, "asks": len(asks),
            "degraded_after_kill": sum(1 for e in after if e["code"] == "OK" and e.get("degraded")),
            "whole_again_after_s": round(whole - kill_t, 2) if whole is not None and kill_t is not None else None,
            "median_latency_before_kill_s": before[len(before) // 2] if before else None,
            "ok_with_empty_answer": sum(1 for e in asks if e["code"] == "OK" and e["empty"]),
            "codes_after_kill": {c: sum(1 for e in after if e["code"] == c) for c in {e["code"] for e in after}},
            "health_not_serving_after_s": round(not_serving - kill_t, 2) if not_serving is not None else None,
            "answered_again_after_s": round(back - kill_t, 2) if back is not None and kill_t is not None else None,
            "workers_now": engine_workers(), "timeline": events}
