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
         over disjoint sets of never-asked questions (the eval split's, past `--offset`: never
         fitted on, all cold); the headline is the
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
soak:    production batches (`-n` Asks at `-c` over `--distinct` never-asked questions each, from
         `--offset`) alone, then while `eor bench SUITE --every 1s --rounds N` runs a slice beside
         them: failed Asks, p50/p95 with and without the bench, the bench's share of reader time
         (bench/soak.py).
reader-fault: during a load at concurrency `-c`, SIGKILL the vLLM worker process; expect no
         Ask OK with an empty answer, the affected ones UNAVAILABLE with one line, Health (and
         grpc.health.v1) NOT_SERVING within 5 s, and correct answers again within 3 min with no
         operator; the report is the timeline (every reply and every Health poll).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from bench.common import DEFAULT_QUESTIONS, read_questions
from bench.faults import fault_test, reader_fault_test
from bench.service_calls import (check_loopback, latency_summary, memory_report, metrics_snapshot, ratio, readers_in_flight,
                                 reader_counters, reader_delta, run_calls)

WARM_UP = "what is the capital of france"  # asked before the timed questions of `cold` and `inprocess`
# issue 33's service goals for `compare`: the cascade's mean latency over the one-retriever service's at
# most 3x (fitting/layout_choice.py: LATENCY_CAP, the fit's cap), its first streamed answer no later than that answer
MEAN_GOAL = 3.0
FIRST_REPLY_GOAL = 1.0


def never_asked(path: str, offset: int) -> list[str]:
    """Questions for the cold modes: the eval split only (in its seeded order, past `offset`), so
    none was fitted on and none was asked by a fit (fit questions stop earlier: they would flatter
    the service). The split is the offline one (`serve.offline.dataset`)."""
    from serve.offline.dataset import Selection, select_questions

    return [q.question for q in select_questions(Selection(path, split="eval"))][offset:]


def load_test(client, questions: list[str], n: int, concurrency: int, distinct: int) -> dict:
    if len(questions) < distinct:
        raise SystemExit(f"need {distinct} distinct questions, have {len(questions)}")
    pool = questions[:distinct]
    asked = [pool[i % distinct] for i in range(n)]
    before = reader_counters(client)
    out = run_calls(client, asked, concurrency)
    out.update(distinct=distinct, concurrency=concurrency, reader=reader_delta(before, reader_counters(client)))
    return out


def compare(client, questions: list[str], cold: int, single: str, concurrency: int = 1,
            pool: tuple[str, ...] = (), settle_s: float = 0.0, speed=None) -> dict:
    """Adaptive EoR, one retriever and EoR-16 over three disjoint sets of `cold` questions, in
    one run. `pool`: the 16 specs EoR-16 names explicitly (empty: skip that row). Each row's
    readers are started first (one untimed Ask with its retrievers): a service starts a reader
    on the first Ask that needs it, and that start belongs to no row. `settle_s`: then wait this
    long, for the compiled engines a first start builds in the background (docs/operations.md)
    to take over before anything is timed. `speed` (the default reader's measured ReaderSpeed,
    serve/offline/reader_speed.py; None: not measured here): the one-retriever row's mean latency
    less its reader work at that speed is what a round adds in this service (`round_overhead_s`)."""
    n_sets = 3 if pool else 2
    if len(questions) < n_sets * cold:
        raise SystemExit(f"need {n_sets * cold} questions for a cold comparison, have {len(questions)}")
    sets = [questions[i * cold:(i + 1) * cold] for i in range(n_sets)]
    rows: dict[str, dict] = {}
    stops: dict[str, int] = {}

    def note_stop(i, when, reply):
        stops[str(reply.stopped_at_stage)] = stops.get(str(reply.stopped_at_stage), 0) + 1
    plan = (("adaptive", sets[0], (), note_stop), ("single", sets[1], [single], None),
            *((("eor16", sets[2], list(pool), None),) if pool else ()))
    for _, _, specs, _ in plan:
        client.ask(WARM_UP, retrievers=specs)
    time.sleep(settle_s)
    for name, qs, specs, hook in plan:
        h0 = reader_counters(client)
        rows[name] = run_calls(client, qs, concurrency, retrievers=specs, on_reply=hook, stream=name == "adaptive")
        rows[name]["reader"] = reader_delta(h0, reader_counters(client))
    rows["adaptive"]["stopped_at_stage"] = dict(sorted(stops.items()))
    rows["adaptive"]["first_round_stop_share"] = round(stops.get("1", 0) / cold, 3)
    work = {}
    for kind in ("prompt_tokens", "cached_tokens", "generated_tokens", "computed_tokens"):
        work[kind] = {name: round(r["reader"][kind] / cold, 1) for name, r in rows.items()}
        work[kind]["adaptive_over_single"] = ratio(work[kind]["adaptive"], work[kind]["single"])
    overhead = None
    if speed is not None:  # one round, one prompt per question: its tokens are one sequence's
        from serve.offline.reader_speed import measured_overhead

        mean, computed, steps = rows["single"]["mean_s"], work["computed_tokens"]["single"], \
            work["generated_tokens"]["single"]
        overhead = {"seconds": round(measured_overhead(mean, computed, steps, speed), 3), "single_mean_s": mean,
                    "reader_s": round(speed.seconds(computed, steps), 3),
                    "speed": {"prefill_tok_s": speed.prefill_tok_s, "decode_tok_s": speed.decode_tok_s}}
    mean_ratio = ratio(rows["adaptive"]["mean_s"], rows["single"]["mean_s"])
    first_ratio = ratio(rows["adaptive"].get("first_reply_mean_s"), rows["single"]["mean_s"])
    return {"cold_questions": cold, "single": single, "rows": rows, "round_overhead_s": overhead,
            "latency_ratio_adaptive_over_single": mean_ratio,
            "latency_ratio_eor16_over_single": ratio(rows.get("eor16", {}).get("mean_s"), rows["single"]["mean_s"]),
            "first_streamed_reply_over_single": first_ratio,
            "goal": {"mean": f"<= {MEAN_GOAL:g}x", "first_streamed_reply": f"<= {FIRST_REPLY_GOAL:g}x",
                     "mean_met": mean_ratio is not None and mean_ratio <= MEAN_GOAL,
                     "first_streamed_reply_met": first_ratio is not None and first_ratio <= FIRST_REPLY_GOAL},
            "reader_work_per_question": work}


def deadline_test(client, questions: list[str], deadline_s: float = 5.0, drain_limit_s: float = 10.0) -> dict:
    """Cold Asks with `deadline_s`: each reply's latency and what it lists missing, then how
    long after the reply the readers' running + waiting requests (Health.readers' in_flight)
    take to fall back to zero (the work behind the missed deadline is aborted, not finished)."""
    rows = []
    for q in questions:
        t = time.perf_counter()
        r = client.ask(q, deadline_s=deadline_s)
        latency = time.perf_counter() - t
        in_flight_at_reply = readers_in_flight(client)
        t1, drained = time.perf_counter(), None
        while time.perf_counter() - t1 < drain_limit_s:
            if readers_in_flight(client) == 0:
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
    h0 = reader_counters(client)
    latencies, stops = [], []
    for q in questions:
        t = time.perf_counter()
        reply = client.ask(q)
        latencies.append(time.perf_counter() - t)
        stops.append([reply.stopped_at_stage, reply.answer])
    reader = reader_delta(h0, reader_counters(client))
    n = len(questions)
    # AsyncLLM: one engine request per distinct uncached prompt (CountingEngine counts requests as calls)
    return {"path": "service", "voter": client.health().voter, **latency_summary(latencies), "stops": stops,
            "reader": reader,
            "prompts_per_question": round(reader["prompts"] / n, 2),
            "engine_requests_per_question": round(reader["engine_calls"] / n, 2)}


def _reader_totals(pool) -> dict[str, int]:
    """Every reader's cache counters and engine tokens, summed (a cascade may read with the
    second reader alone)."""
    out: dict[str, int] = {}
    for reader in pool.readers.values():
        e = reader.engine
        for k, v in [*vars(reader.stats).items(), ("prompt_tokens", e.prompt_tokens),
                     ("generated_tokens", e.generated_tokens), ("cached_tokens", e.cached_tokens)]:
            out[k] = out.get(k, 0) + v
    return out


def inprocess_asks(questions: list[str], config_path: str | None) -> dict:
    """The same questions through `eor ask`'s in-process path (serve/orchestrator.answer over the
    pool, the offline vLLM engine), one at a time, in one process; the engine is started and
    warmed before the first timed question."""
    from serve.builder import close_engines, make_pool
    from serve.cli.common import voter_choice
    from serve.config import load_config
    from serve.orchestrator import answer
    from voter.question_vote import build_metrics

    config = load_config(config_path)
    pool = make_pool(config)
    choice = voter_choice(argparse.Namespace(metrics=None, pooling=None, nli_model=None), pool, config=config)
    metrics = build_metrics(choice.options, pool.reader)
    pool.load()
    try:
        answer([WARM_UP], choice, pool, metrics)  # starts the engines the voter's rounds need
        before = _reader_totals(pool)
        latencies, stops = [], []
        for q in questions:
            t = time.perf_counter()
            a = answer([q], choice, pool, metrics)[0]
            latencies.append(time.perf_counter() - t)
            stops.append([a.rounds_run, a.vote.answer])
    finally:
        close_engines(pool)
    after = _reader_totals(pool)
    stats = {k: v - before[k] for k, v in after.items()}
    tokens = {k: stats.pop(k) for k in ("prompt_tokens", "generated_tokens", "cached_tokens")}
    n = len(questions)
    return {"path": "in-process", "voter": choice.describe(), **latency_summary(latencies), "stops": stops,
            "reader": {**stats, **tokens}, "prompts_per_question": round(stats["prompts"] / n, 2),
            "engine_requests_per_question": round(stats["engine_prompts"] / n, 2),
            "engine_calls_per_question": round(stats["calls"] / n, 2),
            "mean_batch": round(stats["engine_prompts"] / stats["calls"], 2) if stats["calls"] else None}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=["load", "compare", "cold", "inprocess", "fault", "reader-fault", "deadline",
                                     "memory", "soak", "all"])
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
                    "eval-split questions (past the ones evals or earlier runs asked, so every question is cold); "
                    "load, soak: its distinct questions start here (some never asked: the engine batches them)")
    ap.add_argument("--no-eor16", action="store_true", help="compare: skip the third row (EoR-16 over its own "
                    "--cold questions: the costliest part of a cold comparison)")
    ap.add_argument("--settle", type=float, default=0.0, help="compare: seconds to wait after the warm-up Asks "
                    "(a first start's compiled engines take over in the background)")
    ap.add_argument("--fault-n", type=int, default=60, help="calls of the fault test's load")
    ap.add_argument("--kill-after", type=float, default=30.0)
    ap.add_argument("--kill-reader", help="reader-fault: that reader deployment's engine alone (e.g. Reader_1.5B; "
                    "default: every reader's)")
    ap.add_argument("--kill-group", type=int, default=1, help="index of the retriever group whose actor dies")
    ap.add_argument("--metrics-address", help="HOST:PORT of the server's Prometheus endpoint (with --start: known)")
    ap.add_argument("--deadline", type=float, default=5.0, help="deadline mode: deadline_s of each Ask")
    ap.add_argument("--pid", type=int, help="memory mode: the pid of the running `eor serve`")
    ap.add_argument("--bench-suite", choices=["sure", "rare", "query"], default="query",
                    help="soak: the suite `eor bench --every` runs beside the load (default query)")
    ap.add_argument("--bench-limit", type=int, default=2, help="soak: questions of the bench slice (default 2)")
    ap.add_argument("--rounds", type=int, default=3, help="soak: bench rounds (default 3)")
    ap.add_argument("--bench-out", default="var/bench/soak", help="soak: the bench's output folder")
    ap.add_argument("--bench-args", default="", help="soak: more bench arguments, e.g. '--variants 2'")
    ap.add_argument("--out", help="write the report JSON here")
    args = ap.parse_args(argv)

    from protos.client import EorClient

    qs = [r["question"] for r in read_questions(args.questions, dataset=None)]
    fresh = never_asked(args.questions, args.offset)
    if args.mode == "all":  # the load asks the file's first --distinct questions first: not cold any more
        asked = set(qs[:args.distinct])
        fresh = [q for q in fresh if q not in asked]
    cold = fresh[:args.cold]  # never-asked questions (cold, inprocess, deadline)
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
    check_loopback(args.server)
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

                speed = _default_reader_speed(client)
                report["compare"] = compare(client, fresh, args.cold, args.single,
                                            pool=() if args.no_eor16 else PAPER_POOL, settle_s=args.settle,
                                            speed=speed)
                _keep_overhead(report["compare"], args.cold)
            if args.mode == "deadline":
                report["deadline"] = deadline_test(client, cold, args.deadline)
            if args.mode == "cold":
                report["cold"] = cold_asks(client, cold)
            if args.mode == "soak":
                from bench.soak import bench_command, soak

                out = Path(args.bench_out).resolve()
                cmd = bench_command(args.server, args.bench_suite, args.bench_limit, args.rounds, out,
                                    args.bench_args.split())
                report["soak"] = soak(client, qs[args.offset:], args.n, args.c, args.distinct, cmd, out,
                                      out / "bench.log")
            if args.mode == "memory":
                report["memory"] = memory_report(args.pid)
                report["health"] = reader_counters(client)
            if args.mode == "reader-fault":
                report["reader_fault"] = reader_fault_test(client, args.server, qs[:args.distinct], args.fault_n,
                                                           args.c, args.kill_after, deployment=args.kill_reader)
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
    failed += report.get("soak", {}).get("failed_production_asks", 0)
    failed += report.get("reader_fault", {}).get("ok_with_empty_answer", 0)
    return 1 if failed else 0


def _default_reader_speed(client):
    """The service's default reader's measured speed on this CPU (`eor models speed`, same
    machine), or None: then the compare measures no round overhead."""
    from serve.offline.reader_speed import load_speeds, speed_key

    h = client.health()
    model = h.readers[0].model if h.readers else h.model
    speed = load_speeds().get(speed_key(model)) if model else None
    if speed is None:
        print(f"no measured speed of the service's reader {model or '(unknown)'} on this CPU: the round overhead "
              "is not measured (`eor models speed` first)", file=sys.stderr)
    return speed


def _keep_overhead(result: dict, cold: int) -> None:
    """What a round adds in the service, kept for `eor fit` (serve/offline/reader_speed.py)."""
    from serve.offline.reader_speed import overhead_path, save_overhead

    if result.get("round_overhead_s"):
        seconds = result["round_overhead_s"]["seconds"]
        save_overhead(seconds, f"bench.load_test compare: {result['single']} over {cold} never-asked questions")
        print(f"a service round adds {seconds:.2f} s beyond its reader work: kept in {overhead_path()}",
              file=sys.stderr)


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


if __name__ == "__main__":
    sys.exit(main())
