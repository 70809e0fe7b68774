"""An index that lives, under load: documents added and deleted while clients ask a running service.

    eor serve --index scale-100k &            # any built index; the benchmark changes it
    python -m bench.index_swap --index scale-100k --add var/corpora/add-1000c.jsonl \
        [--clients 4] [--before 60] [--after 60] [--offset 400] [--nice 19] [--deadline 600] [--out var/bench/index-swap.json]

`--clients` threads ask never-asked eval-split questions (past `--offset`) back to back the whole
time. After `--before` s, `eor index add` adds the file's documents and one probe document (a lake
no corpus names); Health is polled each second until every source serves the new generation, and
the probe question is asked: its reply must cite the probe. Then `eor index delete` removes the
probe, and once served the same question must not cite it. `--after` s more of asking, then the
timeline (every Ask's code and latency, every Health poll, each command's time) and the counts.
"""
from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench.common import DEFAULT_QUESTIONS, Timeline, start_niced
from bench.load_curve import never_asked

PROBE = {"id": "probe-zorblat", "title": "Zorblat Quenfield",
         "text": "Zorblat Quenfield is a lake in the north of Vexland, named for the glassmaker Ilse Zorblat."}
PROBE_QUESTION = "which lake is named for the glassmaker Ilse Zorblat"


def cites_probe(reply) -> bool | None:
    """Whether the reply's passages include the probe (None: the Ask failed)."""
    return None if reply is None else any(p.id == PROBE["id"] or "Zorblat" in p.title for p in reply.passages)


def ask_probe(client, timeline: Timeline):
    import grpc

    try:
        reply = client.ask(PROBE_QUESTION)
    except grpc.RpcError as exc:
        timeline.note(event="probe", code=exc.code().name)
        return None
    timeline.note(event="probe", code="OK", cites_probe=cites_probe(reply), answer=reply.answer)
    return reply


def generations_served(client) -> list[str]:
    return list(client.health().index_generations)


def wait_for_generation(client, n: int, timeline: Timeline, limit_s: float = 600.0) -> float:
    """Seconds until every source serves generation `n` (Health's `index_generations`)."""
    t0 = time.time()
    while time.time() - t0 < limit_s:
        served = generations_served(client)
        timeline.note(event="health", generations=served)
        if served and all(s.rsplit(": ", 1)[1] == str(n) for s in served):
            return time.time() - t0
        time.sleep(1.0)
    raise SystemExit(f"the service did not serve generation {n} within {limit_s:.0f} s")


def change(args_: list[str], index: str, timeline: Timeline, nice: int = 0) -> dict:
    t = time.time()
    proc = start_niced([str(Path(sys.executable).parent / "eor"), "index", *args_, "--index", index, "--json"], nice,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        stdout, stderr = proc.communicate()
    except BaseException:  # its own session: Ctrl-C here does not reach it
        proc.send_signal(signal.SIGINT)
        proc.wait()
        raise
    if proc.returncode != 0:
        raise SystemExit(f"eor index {args_[0]} failed: {stderr.strip().splitlines()[-1:]}")
    info = json.loads(stdout.strip().splitlines()[-1])
    timeline.note(event=f"index {args_[0]}", seconds=round(time.time() - t, 1), generation=info["generation"])
    return info


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--server", default="127.0.0.1:50051")
    ap.add_argument("--index", required=True, help="the index `eor serve` serves (it is changed)")
    ap.add_argument("--add", type=Path, required=True, help="a JSONL file of documents to add")
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--before", type=float, default=60.0, help="seconds of asking before the add")
    ap.add_argument("--after", type=float, default=60.0, help="seconds of asking after the delete is served")
    ap.add_argument("--offset", type=int, default=400, help="skip this many eval-split questions (asked before)")
    ap.add_argument("--questions", default=DEFAULT_QUESTIONS)
    ap.add_argument("--deadline", type=float, default=0.0,
                    help="each Ask's deadline_s (0: the service's ask_deadline_s, 120 s)")
    ap.add_argument("--nice", type=int, default=0, help="the index commands' CPU niceness (19: after the service)")
    ap.add_argument("--out", type=Path, default=Path("var/bench/index-swap.json"))
    args = ap.parse_args(argv)

    from bench.service_calls import check_loopback
    from protos.client import EorClient

    check_loopback(args.server)
    questions = [q.question for q in never_asked(args.questions, args.offset)]
    with EorClient(args.server) as client:
        report = _run(client, args, questions)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps({k: v for k, v in report.items() if k != "timeline"}, indent=1))
    return report


def _run(client, args, questions: list[str]) -> dict:
    import grpc

    timeline, stop, asked = Timeline(), threading.Event(), iter(range(10**9))

    def client_loop() -> None:
        while not stop.is_set():
            q = questions[next(asked) % len(questions)]
            t = time.time()
            try:
                client.ask(q, deadline_s=args.deadline)
                code = "OK"
            except grpc.RpcError as exc:
                code = exc.code().name
            timeline.note(event="ask", code=code, seconds=round(time.time() - t, 2))

    first = generations_served(client)
    timeline.note(event="health", generations=first)
    threads = [threading.Thread(target=client_loop) for _ in range(args.clients)]
    for t in threads:
        t.start()
    try:  # the clients stop before the channel closes, whatever happens here
        time.sleep(args.before)
        with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
            f.write(json.dumps(PROBE) + "\n")
        added = change(["add", str(args.add), f.name], args.index, timeline, args.nice)
        add_served_s = wait_for_generation(client, added.get("merged", added)["generation"], timeline)
        probe_added = ask_probe(client, timeline)
        deleted = change(["delete", PROBE["id"]], args.index, timeline, args.nice)
        delete_served_s = wait_for_generation(client, deleted.get("merged", deleted)["generation"], timeline)
        probe_deleted = ask_probe(client, timeline)
        time.sleep(args.after)
    finally:
        stop.set()
        for t in threads:
            t.join()
    asks = [e for e in timeline.events if e["event"] == "ask"]
    codes: dict[str, int] = {}
    for e in asks:
        codes[e["code"]] = codes.get(e["code"], 0) + 1
    return {"index": args.index, "clients": args.clients, "nice": args.nice, "deadline_s": args.deadline, "generations_before": first,
            "add": {k: v for k, v in added.items() if k != "sources"}, "add_served_after_s": round(add_served_s, 1),
            "delete": {k: v for k, v in deleted.items() if k != "sources"},
            "delete_served_after_s": round(delete_served_s, 1),
            "probe_cited_after_add": cites_probe(probe_added), "probe_cited_after_delete": cites_probe(probe_deleted),
            "asks": len(asks), "codes": codes, "failed": sum(v for k, v in codes.items() if k != "OK"),
            "timeline": timeline.events}


if __name__ == "__main__":
    main(sys.argv[1:])
