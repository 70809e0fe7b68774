"""eor on a real multi-node Ray cluster, formed on this machine: two `ray start` nodes, the app
deployed across them by resources, Asks answered, then the worker node lost under load.

    python -m bench.cluster --model smollm2-135m --out var/bench/cluster.json [--one-node]

1. `ray start --head` (resource `eor_head`) and a second `ray start --address` (resource
   `eor_worker`, its own metrics port), each with one CPU.
2. `eor serve`'s service deployed onto the cluster (`service.ray_address`), placed by the
   config (`service.placement`): the reader, voter and ingress on the head; both sources and
   per-spec retriever actors (the paper's 16, or `--specs`) on the worker. Health shows which node serves what.
3. Cold questions one at a time (latency), each node's resident memory.
4. Node loss: under load (`-c` concurrent Asks), SIGKILL the worker node (its raylet, its
   agents and every worker process). A supervisor restarts the node after `--rejoin-after` s
   (as KubeRay recreates a pod, or systemd restarts a unit), again where a start fails (supervise):
   Serve brings the replicas back on it. The timeline: every reply (code, empty?, missing), every
   Health poll and every start tried.
5. `--one-node`: the same cold questions against the per-spec layout on one node (Ray started
   by eor, as `eor serve` does), for the latency and memory ratio.

Token authentication is turned off for the local cluster (`RAY_AUTH_MODE=disabled`): every
node is 127.0.0.1 here; a real cluster shares a token instead.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench.common import DEFAULT_QUESTIONS, Timeline, read_questions

HEAD, WORKER = "eor_head", "eor_worker"
PLACEMENT = {"Reader": {HEAD: 0.5}, "Voter": {HEAD: 0.01}, "EorIngress": {HEAD: 0.01},
             "Source_Wiki": {WORKER: 0.01}, "Source_SE": {WORKER: 0.01}, "Retrievers": {WORKER: 0.01}}


def _ray_bin() -> str:
    return str(Path(sys.executable).parent / "ray")


def _ray_env() -> dict:
    from serve.app.application import RAY_ENV_DEFAULTS

    return {**RAY_ENV_DEFAULTS, **os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}


def start_head(port: int, temp_dir: str, metrics_port: int, resources: dict | None = None) -> None:
    subprocess.run([_ray_bin(), "start", "--head", "--node-ip-address", "127.0.0.1", "--port", str(port),
                    "--num-cpus", "1", "--resources", json.dumps(resources or {HEAD: 1}), "--temp-dir", temp_dir,
                    "--include-dashboard", "false", "--metrics-export-port", str(metrics_port)],
                   env=_ray_env(), check=True, capture_output=True, timeout=300)


def start_worker(port: int, temp_dir: str, metrics_port: int, resources: dict | None = None) -> None:
    subprocess.run([_ray_bin(), "start", "--address", f"127.0.0.1:{port}", "--node-ip-address", "127.0.0.1",
                    "--num-cpus", "1", "--resources", json.dumps(resources or {WORKER: 1}), "--temp-dir", temp_dir,
                    "--metrics-export-port", str(metrics_port)],
                   env=_ray_env(), check=True, capture_output=True, timeout=300)


def kill_all(pids: list[int]) -> None:
    """SIGKILL each process, those already gone skipped."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def supervise(start, node_pids, note, give_up_at: float, retry_after_s: float = 5.0) -> bool:
    """Start a node as a supervisor would (KubeRay recreating a pod, systemd's Restart=on-failure):
    where `start` fails, what the failed try left (`node_pids()`) is killed and it starts again,
    until `give_up_at` (time.time()). On a loaded 2-core machine Ray 2.60's raylet gives up on its
    dashboard agent after a fixed 15 s ("Timed out waiting for file metrics_agent_port", ray-project/ray
    issue 65983) and `ray start` fails: one try is not a supervisor (2026-11-27, Xeon, fp32)."""
    tries = 0
    while True:
        tries += 1
        try:
            start()
            note(kind="rejoined", tries=tries)
            return True
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
            said = (getattr(exc, "stderr", None) or b"").decode(errors="replace").strip().splitlines()
            note(kind="rejoin_failed", tries=tries, detail=(said[-1] if said else type(exc).__name__)[:160])
        kill_all(node_pids())
        if time.time() + retry_after_s >= give_up_at:
            return False
        time.sleep(retry_after_s)


def node_processes(metrics_port: int) -> list[int]:
    """The processes of the node started with `metrics_port` (its raylet and agents carry the
    port on their command line) and all their descendants (the node's worker processes)."""
    return _with_descendants((f"--metrics-export-port={metrics_port}", f"--metrics_export_port={metrics_port}"))


def stop_cluster(temp_dir: str) -> None:
    """Stop this bench's cluster only (`ray stop` would stop every Ray on the machine): the
    processes whose command line names its temp dir, and their descendants."""
    import psutil

    procs = []
    for pid in _with_descendants((temp_dir,)):
        try:
            procs.append(psutil.Process(pid))
            procs[-1].terminate()
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(procs, timeout=15)
    for p in alive:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass


def _with_descendants(marks: tuple[str, ...]) -> list[int]:
    import psutil

    roots = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        cmd = " ".join(p.info["cmdline"] or ())
        if any(m in cmd for m in marks) and p.pid != os.getpid():
            roots.append(p)
    pids = set()
    for r in roots:
        try:
            pids.add(r.pid)
            pids.update(c.pid for c in r.children(recursive=True))
        except psutil.NoSuchProcess:
            pass
    return sorted(pids)


def rss_gib(pids: list[int]) -> float:
    import psutil

    total = 0
    for pid in pids:
        try:
            total += psutil.Process(pid).memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return round(total / 2**30, 2)


def cold_latency(client, questions: list[str]) -> dict:
    lat, missing = [], 0
    for q in questions:
        r = client.ask(q)
        lat.append(r.latency_s)
        missing += len(r.missing)
    return {"questions": len(questions), "mean_s": round(sum(lat) / len(lat), 2), "latencies_s": lat,
            "missing_total": missing}


def recovery_limit_s(rejoin_after_s: float, cluster_start_s: float, service_ready_s: float) -> float:
    """How long the node loss waits for a whole Ask after the kill: the rejoin, then three times what this
    run took to start the nodes and deploy the service (a rejoin restarts a node and redeploys its
    replicas), at least 300 s. Relative to the same run, so a slower or busier machine is not a failure
    (an idle AVX512 VM: whole again after 126-144 s; beside a pool run, 242 s)."""
    return max(300.0, rejoin_after_s + 3.0 * (cluster_start_s + service_ready_s))


def node_loss(client, questions: list[str], n: int, concurrency: int, kill_after_s: float, rejoin_after_s: float,
              worker_metrics_port: int, rejoin, limit_s: float = 300.0) -> dict:
    """SIGKILL the worker node under load, restart it after `rejoin_after_s`; the timeline."""
    import grpc

    timeline = Timeline()
    events, note = timeline.events, timeline.note
    stop = threading.Event()

    def one(q: str) -> None:
        try:
            r = client.ask(q)
            note(kind="ask", code="OK", empty=not r.answer.strip(), missing=len(r.missing), answer=r.answer[:30])
        except grpc.RpcError as exc:
            note(kind="ask", code=exc.code().name, details=(exc.details() or "")[:160])

    def poll_health():
        while not stop.is_set():
            try:
                h = client.health()
                note(kind="health", status=h.status, unavailable=len(h.unavailable), detail=h.detail[:160],
                     placement=[p for p in h.placement if "Retrievers_0" in p or "Source" in p][:3])
            except grpc.RpcError as exc:
                note(kind="health", status=-1, detail=exc.code().name)
            stop.wait(2.0)

    def chaos():
        time.sleep(kill_after_s)
        pids = node_processes(worker_metrics_port)
        kill_all(pids)
        note(kind="kill", pids=len(pids))
        give_up_at = time.time() + limit_s  # the Asks' own wait below ends then too
        time.sleep(rejoin_after_s)
        supervise(rejoin, lambda: node_processes(worker_metrics_port), note, give_up_at)

    threading.Thread(target=poll_health, daemon=True).start()
    chaos_thread = threading.Thread(target=chaos, daemon=True)
    chaos_thread.start()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        list(pool.map(one, [questions[i % len(questions)] for i in range(n)]))
    chaos_thread.join()
    kill_t = next(e["t"] for e in events if e["kind"] == "kill")
    while timeline.elapsed() < kill_t + limit_s:  # then until an Ask is whole again
        one(questions[0])
        last = events[-1]
        if last["code"] == "OK" and not last["empty"] and last["missing"] == 0:
            break
        time.sleep(3)
    stop.set()
    asks = [e for e in events if e["kind"] == "ask"]
    after = [e for e in asks if e["t"] >= kill_t]
    whole = next((e["t"] for e in after if e["code"] == "OK" and e["missing"] == 0 and not e["empty"]
                  and any(x["code"] != "OK" or x["missing"] for x in after if x["t"] <= e["t"])), None)
    degraded = next((e["t"] for e in events if e["kind"] == "health" and e["t"] >= kill_t and e.get("unavailable")), None)
    return {"kill_at_s": kill_t, "asks": len(asks),
            "ok_with_empty_answer": sum(1 for e in asks if e["code"] == "OK" and e["empty"]),
            "codes_after_kill": {c: sum(1 for e in after if e["code"] == c) for c in sorted({e["code"] for e in after})},
            "ok_with_missing_after_kill": sum(1 for e in after if e["code"] == "OK" and e["missing"]),
            "health_names_missing_after_s": round(degraded - kill_t, 2) if degraded is not None else None,
            "whole_again_after_s": round(whole - kill_t, 2) if whole is not None else None,
            "whole_again_limit_s": round(limit_s, 1),
            "rejoin_tries": max((e["tries"] for e in events if e["kind"] in ("rejoined", "rejoin_failed")), default=0),
            "timeline": events}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m", help="reader (a prepared model name or path; SmolLM2 fits 2 cores)")
    ap.add_argument("--index", default="default")
    ap.add_argument("--questions", default=DEFAULT_QUESTIONS)
    ap.add_argument("--offset", type=int, default=1200,
                    help="the NQ questions to ask start here (the cold ones, then the load's; rarely asked before)")
    ap.add_argument("--cold", type=int, default=5, help="cold questions, one at a time")
    ap.add_argument("-n", type=int, default=24, help="Asks during the node-loss load")
    ap.add_argument("-c", type=int, default=8, help="their concurrency")
    ap.add_argument("--kill-after", type=float, default=15.0)
    ap.add_argument("--rejoin-after", type=float, default=20.0)
    ap.add_argument("--one-node", action="store_true", help="also the same cold questions on one node")
    ap.add_argument("--port", type=int, default=6391, help="the head's GCS port (the node metrics ports: +1800, +1801)")
    ap.add_argument("--eager", action="store_true", help="the reader's engine without torch.compile (no compiled "
                    "engine started beside the eager one: a start without a compile cache, as in a test)")
    ap.add_argument("--specs", nargs="+", help="the pool (default: the paper's 16, the shipped voter; else equal "
                                               "weights); each spec its own actor on the worker")
    ap.add_argument("--out", help="report JSON")
    args = ap.parse_args(argv)

    from protos.client import EorClient
    from serve.app.application import LocalService
    from serve.config import config_from_dict
    from serve.engine.models import models_dir
    from serve.paths import eor_home

    model = args.model if os.path.sep in args.model else str(models_dir() / args.model)
    qs = [q["question"] for q in read_questions(args.questions)]
    cold_qs = qs[args.offset:args.offset + args.cold]
    load_qs = qs[args.offset + args.cold:args.offset + args.cold + max(8, args.n // 3)]
    if len(cold_qs) < args.cold or not load_qs:
        raise SystemExit(f"{args.questions}: too few NQ questions from --offset {args.offset}")
    base = eor_home() / "cluster"
    base.mkdir(parents=True, exist_ok=True)
    port, head_metrics, worker_metrics = args.port, args.port + 1800, args.port + 1801
    temp = "/tmp/eor-cluster"  # short: Ray's Unix sockets live under it
    from retrievers.spec import PAPER_POOL

    specs = list(args.specs or PAPER_POOL)
    settings = {"reader": {"model": model}, "generator": {"model": ""}, "index": {"name": args.index},
                "cache": {"enabled": False}, "pool": {"specs": specs},  # one reader: the shipped voter's fallback, or equal weights (--specs)
                "service": {"port": 0, "retriever_actors": "per-spec", "placement": PLACEMENT,
                            "ray_address": f"127.0.0.1:{port}"}}
    if args.eager:
        settings["reader"]["enforce_eager"] = True
    if args.specs:  # the shipped voter is fitted for the paper's pool
        settings["voter"] = {"weights": "equal"}
    report: dict = {"model": args.model, "placement": PLACEMENT, "specs": specs}
    stop_cluster(temp)  # a run killed before its end left its nodes up
    t = time.time()
    start_head(port, temp, head_metrics)
    start_worker(port, temp, worker_metrics)
    report["cluster_start_s"] = round(time.time() - t, 1)
    svc = None
    try:
        t = time.time()
        svc = LocalService(config_from_dict(settings)).start()
        report["service_ready_s"] = round(time.time() - t, 1)
        with EorClient(svc.address, timeout_s=900) as client:
            client.ask("what is the capital of france")  # warm-up
            h = client.health()
            report["health"] = {"status": h.Status.Name(h.status), "placement": list(h.placement)}
            print("\n".join(h.placement), file=sys.stderr)
            report["two_nodes"] = cold_latency(client, cold_qs)
            report["two_nodes"]["rss_gib"] = {"head": rss_gib(node_processes(head_metrics)),
                                              "worker": rss_gib(node_processes(worker_metrics))}
            print(f"two nodes: {report['two_nodes']['mean_s']} s per cold question", file=sys.stderr)
            limit_s = recovery_limit_s(args.rejoin_after, report["cluster_start_s"], report["service_ready_s"])
            report["node_loss"] = node_loss(client, load_qs, args.n, args.c, args.kill_after, args.rejoin_after,
                                            worker_metrics, lambda: start_worker(port, temp, worker_metrics), limit_s)
            # an Ask is whole once its own members are back; the service once every replica is (on a slow
            # machine the 16 per-spec actors come back one by one): Health is polled up to the same limit
            t, give_up_at = time.time(), time.time() + limit_s
            while (h := client.health()).unavailable and time.time() < give_up_at:
                time.sleep(3)
            report["health_after"] = {"status": h.Status.Name(h.status), "placement": list(h.placement),
                                      "unavailable": list(h.unavailable), "after_s": round(time.time() - t, 1)}
    finally:
        if svc is not None:
            svc.stop()
        stop_cluster(temp)
    if args.one_node:
        one = {**settings, "service": {k: v for k, v in settings["service"].items()
                                       if k not in ("ray_address", "placement")}}
        with LocalService(config_from_dict(one)) as svc1, EorClient(svc1.address, timeout_s=900) as client:
            client.ask("what is the capital of france")
            report["one_node"] = cold_latency(client, cold_qs)
            from bench.service_calls import memory_report

            report["one_node"]["rss_gib"] = memory_report(os.getpid()).get("total_gib")
        report["two_over_one_latency"] = round(report["two_nodes"]["mean_s"] / report["one_node"]["mean_s"], 3)
    loss = report["node_loss"]
    print(json.dumps({k: v for k, v in loss.items() if k != "timeline"}), file=sys.stderr)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
