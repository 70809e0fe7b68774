"""Open-loop load curve of a live eor service over gRPC (issue 57): Poisson arrivals at a set rate
for a set time, each question asked once (never-asked eval-split questions, past `--offset`), the
next arrival never waiting for a reply (a closed loop would slow its own offered load down with the
service and hide the overload).

    # the cascade's capacity: answers/s closed-loop at concurrency c (cold questions)
    python -m bench.load_curve capacity --server 127.0.0.1:50051 -n 40 -c 8 --offset 760
    # the curve, 0.25x to 3x that capacity, for the cascade and Wiki@10 through the 0.5B
    python -m bench.load_curve curve --server 127.0.0.1:50051 --capacity 0.15 \\
        --multiples 0.25,0.5,1,1.5,2,3 --seconds 300 --offset 800 --out var/bench/load-curve
    # curves run apart, one report and one plot
    python -m bench.load_curve merge A/load-curve.json B/load-curve.json --out var/bench/load-curve-all

For each system and offered rate: goodput (OK answers with an answer, per second), p50/p95/p99 of
the answered, the refusals by status (and how fast a refusal came, with its retry pushback), Asks
hung (no reply by the end of the window plus `--grace`), OK with an empty answer (must be 0), rounds
per question, the share stopped early under load or answered degraded, Match (a gold answer in the
answer), and each reader's tokens per second (Health's counters) against its measured prefill and
decode speed (`eor models speed`: serve/offline/reader_speed.py), the physical limit. The report is
JSON (`OUT/load-curve.json`) and a plot of latency and goodput against offered load
(`OUT/load-curve.png`). Loopback only.
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import threading
import time
from collections import Counter
from functools import partial
from pathlib import Path
from typing import Any, Sequence

import grpc

from answers import match
from protos import eor_pb2

PUSHBACK_KEY = "grpc-retry-pushback-ms"  # gRPC A6: how long a refused caller should wait
SYSTEMS = {"cascade": (), "Wiki@10": ("Wiki@10",)}  # the service's voter; one retriever through the 0.5B


def arrivals(rate: float, seconds: float, rng: random.Random) -> list[float]:
    """Poisson arrival times in [0, seconds): exponential gaps of mean 1 / rate."""
    out, t = [], rng.expovariate(rate)
    while t < seconds:
        out.append(t)
        t += rng.expovariate(rate)
    return out


def _pushback_s(exc: grpc.RpcError) -> float | None:
    for key, value in (exc.trailing_metadata() or ()):
        if key == PUSHBACK_KEY:
            return int(value) / 1000
    return None


def offer(stub: Any, questions: Sequence[Any], rate: float, seconds: float, retrievers: Sequence[str] = (),
          deadline_s: float = 0.0, metadata: Sequence[tuple[str, str]] = (), timeout_s: float = 600.0,
          grace_s: float = 60.0, seed: int = 0) -> list[dict]:
    """Ask `questions` (each with `.question` and `.answers`) at Poisson arrivals of `rate` per s for
    `seconds`, without waiting for replies (grpc futures); every outcome, arrival order. An Ask
    with no reply `grace_s` after the window is cancelled and counted HUNG."""
    times = arrivals(rate, seconds, random.Random(seed))
    if len(times) > len(questions):
        raise SystemExit(f"{len(times)} arrivals at {rate:g}/s for {seconds:g} s, {len(questions)} questions left")
    rows: list[dict] = [{} for _ in times]
    lock = threading.Lock()

    def record(i: int, q: Any, sent: float, late: float, fut: Any) -> None:
        row = {"i": i, "question": q.question, "latency_s": time.monotonic() - sent, "start_lag_s": late}
        try:
            r = fut.result()
            row.update(code="OK", answer=r.answer, match=bool(r.answer) and match(r.answer, list(q.answers), word_boundary=True),
                       abstained=r.abstained, rounds=r.stopped_at_stage, under_load=r.under_load,
                       degraded=bool(r.degraded), service_s=round(r.latency_s, 2), reader_s=round(r.reader_s, 2),
                       prompt_tokens=r.prompt_tokens, cached_prompt_tokens=r.cached_prompt_tokens)
        except grpc.FutureCancelledError:
            row.update(code="HUNG")
        except grpc.RpcError as exc:
            row.update(code=exc.code().name, details=(exc.details() or "")[:200], pushback_s=_pushback_s(exc))
        with lock:
            rows[i] = row

    extra = {"deadline_s": deadline_s} if deadline_s else {}
    futures = []
    t0 = time.monotonic()
    for i, (at, q) in enumerate(zip(times, questions)):
        wait = t0 + at - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        sent = time.monotonic()
        request = eor_pb2.AskRequest(question=q.question, retrievers=list(retrievers), **extra)
        fut = stub.Ask.future(request, timeout=timeout_s, metadata=tuple(metadata))
        fut.add_done_callback(partial(record, i, q, sent, sent - t0 - at))
        futures.append(fut)
    end = t0 + seconds + grace_s
    for fut in futures:
        try:
            fut.result(timeout=max(0.0, end - time.monotonic()))
        except Exception:  # noqa: BLE001 - recorded by its callback
            pass
    for fut in futures:
        if not fut.done():
            fut.cancel()
    deadline = time.monotonic() + 5
    while any(not r for r in rows) and time.monotonic() < deadline:
        time.sleep(0.01)
    return rows


def _pct(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    s = sorted(xs)
    return round(s[min(len(s) - 1, max(0, int(round(q * (len(s) - 1)))))], 3)


def summarize(rows: list[dict], rate: float, seconds: float, reader: dict | None = None) -> dict:
    """One offered rate's figures (the module's docstring)."""
    answered = [r for r in rows if r.get("code") == "OK" and r.get("answer")]
    lat = [r["latency_s"] for r in answered]
    errors = Counter(r.get("code", "HUNG") for r in rows if r.get("code") != "OK")
    refused = [r for r in rows if r.get("code") == "RESOURCE_EXHAUSTED"]
    pushbacks = [r["pushback_s"] for r in refused if r.get("pushback_s") is not None]
    return {"offered_rate": rate, "seconds": seconds, "asked": len(rows), "answered": len(answered),
            "goodput_per_s": round(len(answered) / seconds, 4),
            "p50_s": _pct(lat, 0.5), "p95_s": _pct(lat, 0.95), "p99_s": _pct(lat, 0.99),
            "mean_s": round(statistics.fmean(lat), 3) if lat else None,
            "not_ok": dict(sorted(errors.items())), "hung": errors.get("HUNG", 0),
            "ok_empty": sum(1 for r in rows if r.get("code") == "OK" and not r.get("answer") and not r.get("abstained")),
            "abstained": sum(1 for r in rows if r.get("abstained")),
            "refused_p95_s": _pct([r["latency_s"] for r in refused], 0.95),
            "refused_over_1s": sum(1 for r in refused if r["latency_s"] > 1.0),
            "pushback_mean_s": round(statistics.fmean(pushbacks), 2) if pushbacks else None,
            "rounds_mean": round(statistics.fmean(r["rounds"] for r in answered), 3) if answered else None,
            "under_load_share": round(sum(r["under_load"] for r in answered) / len(answered), 3) if answered else None,
            "degraded_share": round(sum(r["degraded"] for r in answered) / len(answered), 3) if answered else None,
            "match_answered": round(sum(r["match"] for r in answered) / len(answered), 4) if answered else None,
            "match_asked": round(sum(r.get("match", False) for r in rows) / len(rows), 4) if rows else None,
            "reader": reader}


def reader_rates(delta: dict, seconds: float, models: dict[str, str], speeds: dict[str, Any]) -> dict:
    """Each reader deployment's tokens per second over the window (Health deltas, bench/service_calls.py)
    and, where its speed was measured here, the share of its time they took at that speed:
    computed prompt tokens at prefill speed + generated tokens at decode speed (one sequence's
    speed: a batching engine may go past 1)."""
    out = {}
    for name, d in delta.get("by_reader", {}).items():
        computed, generated = d["prompt_tokens"] - d["cached_tokens"], d["generated_tokens"]
        row = {"prefill_tok_s": round(computed / seconds, 1), "decode_tok_s": round(generated / seconds, 1),
               "model": models.get(name)}
        speed = speeds.get(name)
        if speed is not None:
            row["measured"] = {"prefill_tok_s": speed.prefill_tok_s, "decode_tok_s": speed.decode_tok_s}
            row["busy_share_at_measured_speed"] = round(speed.seconds(computed, generated) / seconds, 3)
        out[name] = row
    return out


def reader_speeds(client) -> tuple[dict[str, str], dict[str, Any]]:
    """(deployment -> model, deployment -> its measured ReaderSpeed on this CPU kind, where measured)."""
    from serve.offline.reader_speed import load_speeds, speed_key

    models = {r.deployment: r.model for r in client.health().readers}
    known = load_speeds()
    return models, {name: known[speed_key(m)] for name, m in models.items() if m and speed_key(m) in known}


def settle(client, limit_s: float = 120.0) -> float:
    """Wait until the readers hold no request (the last rate's tail), at most `limit_s`; seconds waited."""
    from bench.service_calls import readers_in_flight

    t = time.monotonic()
    while time.monotonic() - t < limit_s and readers_in_flight(client) > 0:
        time.sleep(1.0)
    return round(time.monotonic() - t, 1)


def curve(client, questions: list, rates: Sequence[float], seconds: float, systems: Sequence[str] = tuple(SYSTEMS),
          deadline_s: float = 0.0, grace_s: float = 60.0, settle_s: float = 120.0, seed: int = 0) -> dict:
    """Every system at every rate, on fresh questions each (none asked twice in the run)."""
    from bench.service_calls import reader_counters, reader_delta

    models, speeds = reader_speeds(client)
    left = list(questions)
    out: dict[str, list] = {}
    for name in systems:
        out[name] = []
        for k, rate in enumerate(rates):
            settled = settle(client, settle_s)
            before = reader_counters(client)
            rows = offer(client.stub, left, rate, seconds, SYSTEMS.get(name, (name,)), deadline_s, client.metadata,
                         grace_s=grace_s, seed=seed + k)
            left = left[len(rows):]
            delta = reader_delta(before, reader_counters(client))
            row = summarize(rows, rate, seconds, reader_rates(delta, seconds, models, speeds))
            row["settled_before_s"] = settled
            row["asks"] = rows  # per question: code, answer, Match, latency (to pair with another run)
            out[name].append(row)
            print(f"{name} at {rate:g}/s: goodput {row['goodput_per_s']:g}/s, p95 {row['p95_s']} s, "
                  f"not OK {row['not_ok']}", file=sys.stderr)
    return {"systems": out, "seconds": seconds, "deadline_s": deadline_s or None,
            "speeds_measured": sorted(speeds)}


def plot(report: dict, path: Path) -> Path:
    """Latency (p50, p95 of the answered) and goodput against offered load, one line per system."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (lat, good) = plt.subplots(1, 2, figsize=(11, 4.2))
    top = 0.0
    for name, rows in report["systems"].items():
        x = [r["offered_rate"] for r in rows]
        top = max([top, *x])
        for key, style in (("p50_s", "-"), ("p95_s", "--")):
            lat.plot(x, [r[key] if r[key] is not None else float("nan") for r in rows], style, marker="o",
                     label=f"{name} {key[:3]}")
        good.plot(x, [r["goodput_per_s"] for r in rows], marker="o", label=name)
    good.plot([0, top], [0, top], ":", color="grey", label="offered")
    capacity = report.get("capacity_per_s")
    for ax in (lat, good):
        if capacity:
            ax.axvline(capacity, color="grey", lw=0.8)
        ax.set_xlabel("offered load (Asks/s)")
        ax.legend(fontsize=8)
    lat.set_ylabel("latency of answered Asks (s)")
    good.set_ylabel("goodput (answers/s)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def merged(reports: Sequence[dict]) -> dict:
    """Curves run apart (a system's rates over several runs) as one report: each system's rows by offered
    rate, a rate run twice kept from the later report; the first report's capacity."""
    systems: dict[str, dict[float, dict]] = {}
    for report in reports:
        for name, rows in report["systems"].items():
            systems.setdefault(name, {}).update({r["offered_rate"]: r for r in rows})
    return {"systems": {n: [rows[r] for r in sorted(rows)] for n, rows in systems.items()},
            "capacity_per_s": next((r.get("capacity_per_s") for r in reports if r.get("capacity_per_s")), None),
            "merged_from": len(reports)}


def never_asked(path: str, offset: int, split: str = "eval") -> list:
    """Questions of a split (by question, seed 0) with their gold answers, in the split's seeded order,
    past `offset`: the eval split's first 700 were scored by evals, the fit split's first 400 fitted on."""
    from serve.offline.dataset import Selection, select_questions

    return select_questions(Selection(path, split=split))[offset:]


def main(argv: list[str] | None = None) -> int:
    from bench.common import DEFAULT_QUESTIONS

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=["capacity", "curve", "merge"])
    ap.add_argument("reports", nargs="*", help="merge: load-curve.json files, one plot of them all in --out")
    ap.add_argument("--server", default="127.0.0.1:50051")
    ap.add_argument("--questions", default=DEFAULT_QUESTIONS)
    ap.add_argument("--offset", type=int, default=0, help="skip this many questions of the split (asked before)")
    ap.add_argument("--split", default="eval", choices=["eval", "fit"], help="whose questions (by question, seed 0)")
    ap.add_argument("-n", type=int, default=40, help="capacity: questions")
    ap.add_argument("-c", type=int, default=8, help="capacity: concurrency (enough to keep the readers busy)")
    ap.add_argument("--capacity", type=float, help="curve: the cascade's measured capacity, answers/s")
    ap.add_argument("--multiples", default="0.25,0.5,1,1.5,2,3", help="curve: offered rates as multiples of it")
    ap.add_argument("--rates", help="curve: offered rates in Asks/s instead (comma-separated)")
    ap.add_argument("--seconds", type=float, default=300.0, help="curve: the window at each rate")
    ap.add_argument("--systems", default=",".join(SYSTEMS), help="curve: cascade and/or retriever specs")
    ap.add_argument("--deadline", type=float, default=0.0, help="each Ask's deadline_s (0: the service's default)")
    ap.add_argument("--grace", type=float, default=130.0, help="seconds after the window before a reply counts hung: "
                    "longer than an Ask's deadline (the service's default 120 s), so hung means no reply after it")
    ap.add_argument("--settle", type=float, default=120.0, help="at most this long for the readers to drain between rates")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="var/bench/load-curve")
    args = ap.parse_args(argv)

    out = Path(args.out)
    if args.mode == "merge":
        report = merged([json.loads(Path(p).read_text()) for p in args.reports])
        report["plot"] = str(plot(report, out / "load-curve.png"))
        (out / "load-curve.json").write_text(json.dumps(report, indent=2) + "\n")
        print(report["plot"])
        return 0
    from bench.service_calls import check_loopback, run_calls
    from protos.client import EorClient

    check_loopback(args.server)
    questions = never_asked(args.questions, args.offset, args.split)
    if args.mode == "capacity" and len(questions) < args.n:  # a capacity of nothing asked is no figure
        raise SystemExit(f"the {args.split} split has {len(questions)} questions past row {args.offset}, "
                         f"{args.n} asked for: take another split or offset")
    with EorClient(args.server) as client:
        client.health()
        if args.mode == "capacity":
            got = run_calls(client, [q.question for q in questions[:args.n]], args.c)
            report = {"capacity_per_s": got["throughput_qps"], "closed_loop": {k: v for k, v in got.items()
                                                                           if k != "latencies_s"}}
        else:
            if args.rates:
                rates = [float(x) for x in args.rates.split(",")]
            elif args.capacity:
                rates = [round(float(m) * args.capacity, 4) for m in args.multiples.split(",")]
            else:
                raise SystemExit("curve needs --capacity (answers/s, the `capacity` mode's) or --rates")
            report = curve(client, questions, rates, args.seconds, args.systems.split(","), args.deadline,
                           args.grace, args.settle, args.seed)
            report["capacity_per_s"] = args.capacity
            report["plot"] = str(plot(report, out / "load-curve.png"))
    out.mkdir(parents=True, exist_ok=True)
    (out / f"load-{args.mode}.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({k: v for k, v in report.items() if k != "closed_loop"}, indent=2)[:4000])
    return 0


if __name__ == "__main__":
    sys.exit(main())
