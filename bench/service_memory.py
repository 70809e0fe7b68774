"""What a running service holds in memory: the PSS of every process under it, by role.

    python -m bench.service_memory --pid $(pgrep -f "eor serve" | head -1) [--out var/bench/scale/memory-1m.json]

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
from pathlib import Path

import psutil

from bench.common import emit_json

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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pid", type=int, required=True, help="the `eor serve` process")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    try:
        result = measure(args.pid)
    except psutil.NoSuchProcess:
        raise SystemExit(f"eor: no process {args.pid}: start `eor serve` and give its pid")
    emit_json(result, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
