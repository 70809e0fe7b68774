"""What a running service holds in memory: the PSS of every process under it, by role.

    python -m bench.service_memory --pid $(pgrep -f "eor serve" | head -1) [--out var/bench/scale/memory-1m.json]
    python -m bench.service_memory --pid BUILD_PID --watch 10 --out F.json   (a job's peak, sampled until it ends)

PSS (proportional set size) counts a page shared by k processes as 1/k in each, so the sum over a
service's processes is what the service takes from the machine: RSS summed counts shared pages (the
model files mapped by several processes, the corpus's memory-mapped passages) once a process. The
processes are the `eor serve` process and everything under it (Ray's head is started by it: the GCS, the
raylet, its workers and actors, and the reader engines those spawn). Roles, by process title: the reader
engines (vLLM's processes), the index (the search sources' and index shards' actors), the retriever
groups, Ray itself, and the rest (the ingress, the readers' and voter's actors).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import psutil

from bench.common import emit_json, write_json

ROLES = (  # the first role whose words appear in a process's title and command line. Ray names a replica's
    # process "ray::ServeReplica:APP:DEPLOYMENT"; eor's deployments: Source_<name> and Source_<name>_shard<k>
    # (serve/config.py: source_deployment), Retrievers_<i>, Reader_<name>, Voter, EorIngress.
    ("reader engines", ("VLLM", "EngineCore")),
    ("index", (":Source_",)),
    ("retriever groups", (":Retrievers_",)),
    ("ray", ("raylet", "gcs_server", "dashboard", "log_monitor", "runtime_env", "monitor.py", "ray::IDLE")),
)


def role(title: str) -> str:
    for name, words in ROLES:
        if any(w in title for w in words):
            return name
    return "rest"


def processes(pid: int) -> list[psutil.Process]:
    root = psutil.Process(pid)
    return [root, *root.children(recursive=True)]


def pss_kinds(pid: int) -> dict[str, float]:
    """The process's PSS by kind (GiB): its own objects (anon), mapped files (libraries, memory-mapped indexes),
    shared memory (vLLM's and Ray's queues); {} where the kernel has no smaps_rollup."""
    kinds = {}
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("Pss_Anon", "Pss_File", "Pss_Shmem"):
                kinds[key.removeprefix("Pss_").lower() + "_gib"] = int(value.split()[0]) / 2**20
    except (OSError, ValueError):
        return {}
    return kinds


def measure(pid: int) -> dict:
    """PSS and RSS (GiB) summed by role, and each process's, largest first, PSS split by kind where the kernel
    tells; a process gone meanwhile is skipped."""
    rows = []
    for p in processes(pid):
        try:
            info = p.memory_full_info()
            title = " ".join([p.name(), *p.cmdline()])[:160]
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        rows.append({"pid": p.pid, "title": title, "role": role(title),
                     "pss_gib": info.pss / 2**30, "rss_gib": info.rss / 2**30, **pss_kinds(p.pid)})
    by_role: dict[str, dict] = {}
    for r in rows:
        total = by_role.setdefault(r["role"], {"processes": 0})
        total["processes"] += 1
        for key in ("pss_gib", "rss_gib", "anon_gib", "file_gib", "shmem_gib"):
            if key in r:
                total[key] = total.get(key, 0.0) + r[key]
    rounded = lambda d: {k: round(v, 2) if isinstance(v, float) else v for k, v in d.items()}  # noqa: E731
    return {"pid": pid, "processes": len(rows),
            "pss_gib": round(sum(r["pss_gib"] for r in rows), 2), "rss_gib": round(sum(r["rss_gib"] for r in rows), 2),
            "by_role": {k: rounded(v) for k, v in sorted(by_role.items())},
            "each": [rounded(r) for r in sorted(rows, key=lambda r: -r["pss_gib"])]}


def watch(pid: int, every: float, out: Path | None = None) -> dict:
    """The sample with the largest PSS summed over the tree, every `every` seconds until the process ends (each
    new peak written to `out` as it comes: a watcher killed with its job keeps what it saw). A build's peak is
    its processes' sum at one time (Lucene's JVM beside the build), where `/usr/bin/time` gives the largest one."""
    peak, samples, start = None, 0, time.time()
    job = psutil.Process(pid)  # is_running() checks its start time too: a pid used again is not this job
    while True:
        try:
            if not job.is_running() or job.status() == psutil.STATUS_ZOMBIE:  # ended (reaped or not yet)
                break
            now = measure(pid)
        except psutil.NoSuchProcess:
            break
        samples += 1
        if peak is None or now["pss_gib"] > peak["pss_gib"]:
            peak = {**now, "at_s": round(time.time() - start)}
            if out is not None:
                write_json({**peak, "samples": samples, "every_s": every}, out)
        time.sleep(every)
    if peak is None:
        raise psutil.NoSuchProcess(pid)
    return {**peak, "samples": samples, "every_s": every, "watched_s": round(time.time() - start)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pid", type=int, required=True, help="the `eor serve` process (or any, with --watch)")
    ap.add_argument("--watch", type=float, metavar="SECONDS",
                    help="sample every SECONDS until the process ends; report the largest sum (a build's peak)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    try:
        result = watch(args.pid, args.watch, args.out) if args.watch else measure(args.pid)
    except psutil.NoSuchProcess:
        raise SystemExit(f"eor: no process {args.pid}: start `eor serve` (or the build) and give its pid")
    emit_json(result, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
