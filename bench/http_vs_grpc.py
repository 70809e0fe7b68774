"""HTTP against gRPC on one live `eor serve`: the same eval-split questions asked over both fronts,
mean latency of each (issue 59, acceptance 3: within 5%).

    .venv/bin/eor serve --config bench/configs/cold.yaml     # the reader cache and vLLM's prefix cache off
    .venv/bin/python -m bench.http_vs_grpc --grpc 127.0.0.1:50051 --http http://127.0.0.1:8000 --limit 20

Each question is asked over both, one after the other, the order alternating (gRPC first on even
questions, HTTP first on odd ones), after one untimed warm-up ask over each. With the prefix cache
on, the second ask of a question reuses the first's prompts (here 1.3 s against 8.1 s; with the
reader cache on, its answers): bench/configs/cold.yaml turns both caches off, so both asks compute
in full, and alternating gives each front the same share of first and second asks anyway. Latency is the client's wall time of the whole Ask; the
server's own `latency_s` is reported beside it, so the fronts' transport cost is the difference.
A pure client: it imports `protos` and `bench`, never the server's packages.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import urllib.error
import urllib.request

from bench.common import DEFAULT_QUESTIONS, read_questions


def ask_http(base: str, question: str, token: str, timeout_s: float, retrievers: list[str] = ()) -> dict:
    """POST /v1/ask: the reply as JSON (an error: its status and one-line body, raised)."""
    headers = {"content-type": "application/json"}
    if token:
        headers["authorization"] = f"Bearer {token}"
    body = json.dumps({"question": question, "retrievers": list(retrievers)}).encode()
    req = urllib.request.Request(f"{base.rstrip('/')}/v1/ask", data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as exc:
        raise RuntimeError(f"HTTP {exc.code}: {exc.read().decode(errors='replace')[:300]}") from None


def timed(fn, *args) -> tuple[float, object]:
    t = time.perf_counter()
    out = fn(*args)
    return time.perf_counter() - t, out


WARM_UP = "who painted the mona lisa"  # asked once over each front first, untimed: a fresh engine's first asks are slow


def compare(questions: list[str], grpc_ask, http_ask, warm_up: bool = True) -> dict:
    """Ask each question over both fronts, alternating which goes first; per-question rows and the means."""
    if warm_up:
        grpc_ask(WARM_UP)
        http_ask(WARM_UP)
    rows = []
    for i, q in enumerate(questions):
        order = ("grpc", "http") if i % 2 == 0 else ("http", "grpc")
        row = {"question": q, "first": order[0]}
        for front in order:
            wall, reply = timed(grpc_ask if front == "grpc" else http_ask, q)
            row[front] = {"wall_s": round(wall, 3), "server_s": round(float(reply["latency_s"]), 3),
                          "answer": reply["answer"] or f"(abstained: {reply.get('guess', '')})"}
        row["same_answer"] = row["grpc"]["answer"] == row["http"]["answer"]
        rows.append(row)
        print(f"{i + 1}/{len(questions)} gRPC {row['grpc']['wall_s']:.2f} s, HTTP {row['http']['wall_s']:.2f} s "
              f"({order[0]} first): {q[:60]!r}", file=sys.stderr, flush=True)
    return {"rows": rows, **summary(rows)}


def summary(rows: list[dict]) -> dict:
    mean = {front: statistics.fmean(r[front]["wall_s"] for r in rows) for front in ("grpc", "http")}
    server = {front: statistics.fmean(r[front]["server_s"] for r in rows) for front in ("grpc", "http")}
    firsts = [r[r["first"]]["wall_s"] for r in rows]
    seconds = [r["http" if r["first"] == "grpc" else "grpc"]["wall_s"] for r in rows]
    return {"questions": len(rows),
            "mean_wall_s": {k: round(v, 3) for k, v in mean.items()},
            "mean_server_s": {k: round(v, 3) for k, v in server.items()},
            "mean_transport_s": {k: round(mean[k] - server[k], 3) for k in mean},
            "http_vs_grpc": round(mean["http"] / mean["grpc"] - 1, 4) if mean["grpc"] else None,
            "mean_first_s": round(statistics.fmean(firsts), 3), "mean_second_s": round(statistics.fmean(seconds), 3),
            "same_answers": sum(r["same_answer"] for r in rows)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--grpc", default="127.0.0.1:50051", help="the gRPC front (eor serve --port)")
    ap.add_argument("--http", default="http://127.0.0.1:8000", help="the HTTP front (eor serve --http-port)")
    ap.add_argument("--questions", default=DEFAULT_QUESTIONS)
    ap.add_argument("--dataset", default=None, help="only this dataset's questions (default: all)")
    ap.add_argument("--limit", type=int, default=20, help="questions to ask over each front")
    ap.add_argument("--offset", type=int, default=0, help="skip this many eval-split questions first")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds one Ask may take")
    ap.add_argument("--retrievers", default="", help="comma-separated specs every Ask names (default: none, "
                    "the voter's rounds)")
    ap.add_argument("--no-warm-up", action="store_true", help=f"do not ask {WARM_UP!r} over each front first")
    ap.add_argument("--out", help="write the JSON report here too")
    args = ap.parse_args(argv)

    from protos.client import EorClient, reply_to_dict

    token = os.environ.get("EOR_SERVE_TOKEN", "")
    rows = read_questions(args.questions, dataset=args.dataset, split="eval", limit=args.offset + args.limit)
    questions = [r["question"] for r in rows][args.offset:]
    specs = [s.strip() for s in args.retrievers.split(",") if s.strip()]
    with EorClient(args.grpc, token=token, timeout_s=args.timeout) as client:
        report = compare(questions, lambda q: reply_to_dict(client.ask(q, retrievers=specs)),
                         lambda q: ask_http(args.http, q, token, args.timeout, specs), not args.no_warm_up)
    report.update(grpc=args.grpc, http=args.http, retrievers=specs, questions_file=args.questions,
                  offset=args.offset,
                  date=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    text = json.dumps(report, indent=2, ensure_ascii=False)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    print(json.dumps({k: v for k, v in report.items() if k != "rows"}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
