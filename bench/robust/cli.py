"""`python -m bench.robust {sure,rare,query}`: run a robustness suite against the live service.

    python -m bench.robust sure --server 127.0.0.1:50051 --limit 20 --out var/bench/sure
    python -m bench.robust query --server HOST:PORT --every 6h --metrics-port 9108 --out var/bench/query

A run is resumable: instances already in `OUT/results.jsonl` are not asked again, so the same
command after an interruption carries on where it stopped. It ends by writing
`report.json`, `report.md`, `radar.png` and `bars.png` in OUT.

`--every 6h` re-runs for ever: each round is a fresh run in `OUT/runs/<UTC time>/` (a
restarted process resumes the last unfinished round), the latest report is also copied
to `OUT/latest/`, and with `--metrics-port` the latest scores are served as Prometheus
gauges (`eor_bench_score{suite,system,metric}`). A failed round is logged and counted
(`eor_bench_failures_total`); the next round runs on schedule.

`--min-confidence 0.5` asks the deployed path at that bar and reports it twice from the same
replies: `deployed` (always answers, as before) and `deployed, abstains below 0.5` (the answers
whose P(right) is below 0.5 withheld, scored as the suite's paper scores a refusal), with its
abstention rate; every other row is unchanged.

Each round is compared with a baseline round on the same instances (`OUT/baseline` when an
operator pinned one, else the first finished round; `--baseline DIR` names one, also for a
single run): per system, instances lost and gained and a sign test, in `regression.json`
and as gauges (`eor_bench_regression{suite,system}` is 1 for a real drop: the alert rules in
deploy/alerts.yml fire on the deployed row's).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Sequence

from bench.common import DEFAULT_CORPUS, DEFAULT_QUESTIONS
from bench.robust import query_level, rare, regression, runner, sure
from bench.robust.client import DEPLOYED, EOR, abstaining
from bench.robust.report import headline, write_report
from bench.robust.store import ResultStore
from splits import SPLITS

SUITES = {"sure": sure, "rare": rare, "query": query_level}
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> float:
    """'6h', '30m', '90s', '1d', '1h30m' or plain seconds -> seconds (> 0)."""
    t = text.strip().lower()
    if re.fullmatch(r"\d+(\.\d+)?", t):
        secs = float(t)
    elif re.fullmatch(r"(\d+(\.\d+)?[smhd])+", t):
        secs = sum(float(n) * _UNITS[u] for n, u in re.findall(r"(\d+(?:\.\d+)?)([smhd])", t))
    else:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (use e.g. 6h, 30m, 90s, 1h30m)")
    if secs <= 0:
        raise argparse.ArgumentTypeError("the duration must be positive")
    return secs


def parse_min_confidence(text: str) -> float:
    """A P(right) bar above 0 and at most 1 (0 is the deployed row itself)."""
    try:
        p = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a probability: {text!r}") from None
    if not 0 < p <= 1:  # NaN fails too
        raise argparse.ArgumentTypeError(f"must be above 0 and at most 1 (0 is the deployed row itself), got {text}")
    return p


def _csv(text: str) -> list[str]:
    return [p.strip() for p in text.split(",") if p.strip()]


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m bench.robust", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("suite", choices=sorted(SUITES))
    ap.add_argument("--server", required=True, help="HOST:PORT of the eor gRPC service")
    ap.add_argument("--token", default=None, help="bearer token (default: $EOR_SERVE_TOKEN)")
    ap.add_argument("--tls-ca", default=None, help="CA certificate for a TLS server")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds per rpc (default 1800)")
    ap.add_argument("--questions", default=DEFAULT_QUESTIONS, help="questions JSONL (default: ../shared/data)")
    ap.add_argument("--corpus", default=DEFAULT_CORPUS, help="corpus JSONL for gold and noise passages")
    ap.add_argument("--dataset", default="nq-open-oracle", help="dataset of the questions file ('all': every one)")
    ap.add_argument("--limit", type=int, default=20, help="questions (default 20)")
    ap.add_argument("--split", choices=SPLITS, default="eval",
                    help="the offline split the questions come from (default eval: no voter was fitted on them; "
                    "all: the file's first questions, as runs before 2026-11-27 took them)")
    ap.add_argument("--out", required=True, help="output folder (results.jsonl, reports)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch", type=int, default=8, help="instances per AskBatch call (default 8)")
    ap.add_argument("--retrievers", type=_csv, default=[], help="comma-separated subset of the pool (default all)")
    ap.add_argument("--perturbations", type=_csv, default=None,
                    help="comma-separated subset of the suite's perturbations (default all)")
    ap.add_argument("--variants", type=int, default=5, help="query-level: perturbed variants per question")
    ap.add_argument("--nli", choices=sure.NLI_MODES, default="rewrites",
                    help="SURE: which perturbations the entailment filter judges (default: the LLM rewrites)")
    ap.add_argument("--judge", choices=sorted(sure.JUDGES), default="content",
                    help="SURE: the semantic-equivalence judge: 'content' BERTScore both ways (default), "
                         "'reader' the service's reader with SURE's entailment prompt")
    ap.add_argument("--min-confidence", type=parse_min_confidence, default=None, metavar="P",
                    help="also report the deployed path abstaining below P(right) P, from the same replies "
                         "(default: off)")
    ap.add_argument("--every", type=parse_duration, default=None, help="re-run on this schedule (e.g. 6h)")
    ap.add_argument("--rounds", type=int, default=None, help="with --every: stop after this many rounds "
                    "(default: for ever)")
    ap.add_argument("--metrics-port", type=int, default=None, help="with --every: serve Prometheus gauges here")
    ap.add_argument("--baseline", default=None,
                    help="a finished run's folder to compare with, paired on the same instances (with --every: "
                         "default OUT/baseline, else the first finished round)")
    ap.add_argument("--alpha", type=float, default=regression.ALPHA,
                    help="sign-test level at which a drop from the baseline counts as real (default 0.05)")
    ap.add_argument("--no-plots", action="store_true")
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    return ap


def make_suite(args: argparse.Namespace, items) -> Any:
    kw: dict[str, Any] = {"items": items, "seed": args.seed, "retrievers": tuple(args.retrievers),
                          "min_confidence": args.min_confidence}
    if args.suite == "sure":
        if args.perturbations:
            kw["types"] = tuple(args.perturbations)
        return sure.SureSuite(nli=args.nli, preserve=sure.JUDGES[args.judge], **kw)
    if args.suite == "rare":
        if args.perturbations:
            kw["query_perturbations"] = tuple(p for p in args.perturbations if p in rare.QUERY_PERTURBATIONS)
            docs = [p for p in args.perturbations if p not in rare.QUERY_PERTURBATIONS]
            if docs:
                kw["doc_settings"] = ("gt", *[d for d in docs if d != "gt"])
        return rare.RareSuite(**kw)
    if args.perturbations:
        kw["perturbations"] = tuple(args.perturbations)
    return query_level.QueryLevelSuite(variants=args.variants, **kw)


def connect(args: argparse.Namespace):
    """The live service, checked: reachable, serving, and with the retrievers asked for."""
    import grpc

    from bench.robust.client import BenchClient

    try:
        client = BenchClient(args.server, token=args.token, tls_ca=args.tls_ca, timeout_s=args.timeout)
    except (ValueError, OSError) as exc:
        raise SystemExit(f"bad --server {args.server!r}: {exc}") from exc
    try:
        health = client.health()
    except grpc.RpcError as exc:
        raise SystemExit(f"cannot reach the eor service at {args.server}: "
                         f"{exc.code().name}: {exc.details()}") from exc
    if health["status"] != "SERVING":
        raise SystemExit(f"the eor service at {args.server} is {health['status']}, not SERVING")
    pool = health["retrievers"]
    unknown = [r for r in args.retrievers if r not in pool]
    if unknown:
        raise SystemExit(f"--retrievers {unknown} are not in the service's pool: {', '.join(pool)}")
    if pool and "ReFree" not in pool:
        raise SystemExit("the suites need the ReFree retriever (closed-book answers); the pool has: " + ", ".join(pool))
    if not args.retrievers:
        # the whole pool, named, so the suites score every single retriever and EoR over all of
        # them; the client asks each question as production does (none named) first: the deployed row
        args.retrievers = list(pool)
    return client, health


def run_once(args: argparse.Namespace, client, out: Path, items, health: dict | None = None) -> dict:
    """One resumable run into `out`; returns the metrics (reports written)."""
    suite = make_suite(args, items)
    out.mkdir(parents=True, exist_ok=True)
    meta = {"suite": args.suite, "server": args.server, "seed": args.seed, "dataset": args.dataset,
            "questions_file": str(args.questions), "split": args.split, "limit": args.limit, "batch": args.batch,
            "retrievers": list(args.retrievers), "model": (health or {}).get("model", ""),
            "min_confidence": args.min_confidence}
    manifest = out / "manifest.json"
    if manifest.exists():
        before = json.loads(manifest.read_text(encoding="utf-8"))
        if before.get("batch") != args.batch:
            print(f"note: {out} was started with --batch {before.get('batch')}; batches cut differently can "
                  "perturb the remaining instances differently from a fresh run", file=sys.stderr)
        meta["started"] = before.get("started")
    meta.setdefault("started", None)
    meta["started"] = meta["started"] or _now()
    manifest.write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    store = ResultStore(out)
    stats = runner.run_suite(suite, client, store, batch_size=args.batch, progress=not args.quiet)
    planned = {i.id for i in suite.plan()}
    metrics = suite.score([r for r in store.records() if r["id"] in planned])
    meta.update(finished=_now(), ran=stats.ran, resumed_from=stats.skipped, run_seconds=round(stats.seconds, 1))
    paths = write_report(metrics, out, meta, plots=not args.no_plots)
    name, scores = headline(metrics)
    best = metrics.get("best_single")
    withheld = metrics.get("abstention")
    abstains = (f"{withheld['system']} {_fmt(scores.get(withheld['system']))} (abstains on {_fmt(withheld['rate'])}), "
                if withheld else "")
    print(f"{args.suite}: {stats.ran} instances run, {stats.skipped} already done; {name}: "
          f"deployed {_fmt(scores.get(DEPLOYED))}, {abstains}EoR {_fmt(scores.get(EOR))}, "
          f"best single {best} {_fmt(scores.get(best))}")
    print("reports: " + ", ".join(paths.values()))
    return metrics


def compare_with_baseline(args: argparse.Namespace, run: Path, baseline: Path | None) -> dict | None:
    """The round in `run` against `baseline` (paired; `regression.json` in `run`), printed."""
    if baseline is None:
        return None
    module = SUITES[args.suite]
    before, now = ResultStore(baseline).records(), ResultStore(run).records()
    bar = args.min_confidence
    drops = regression.compare(module.outcomes(before, bar), module.outcomes(now, bar), args.alpha)
    doc = {"baseline": str(baseline), "alpha": args.alpha, "systems": {s: d.to_dict() for s, d in drops.items()},
           "confidence": regression.confidence_drop(before, now)}
    (run / "regression.json").write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    for s in [x for x in (DEPLOYED, abstaining(bar) if bar else None, EOR) if x in drops]:
        d = drops[s]
        print(f"{s} vs baseline {baseline.name}: {d.lost} instances lost, {d.gained} gained of {d.paired} paired "
              f"({d.points:+.1f} pts), sign test p = {d.p_value:.3f}" + ("  REGRESSION" if d.regression else ""))
    return doc


def _fmt(v: float | None) -> str:
    return "–" if v is None else f"{100 * v:.1f}%"


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


# ---------------------------------------------------------------------------- continuous mode
class Exporter:
    """The latest scores as Prometheus gauges on their own registry."""

    def __init__(self, port: int):
        from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

        self.registry = CollectorRegistry()
        self.score = Gauge("eor_bench_score", "Latest robustness score of a suite (0-1)",
                           ["suite", "system", "metric"], registry=self.registry)
        self.last = Gauge("eor_bench_last_success_timestamp_seconds", "When the suite last finished a round",
                          ["suite"], registry=self.registry)
        self.instances = Gauge("eor_bench_instances", "Instances in the latest round", ["suite"], registry=self.registry)
        self.reader = Gauge("eor_bench_reader_seconds", "Reader seconds the latest round cost", ["suite"],
                            registry=self.registry)
        self.abstention = Gauge("eor_bench_abstention_rate", "Share of the deployed path's answers withheld in the "
                                "latest round (P(right) below --min-confidence)", ["suite", "system"],
                                registry=self.registry)
        self.failures = Counter("eor_bench_failures", "Rounds that failed", ["suite"], registry=self.registry)
        self.regression = Gauge("eor_bench_regression", "1 when the latest round is worse than the baseline round "
                                "(paired sign test p < alpha), else 0", ["suite", "system"], registry=self.registry)
        self.drop = Gauge("eor_bench_drop_points", "Baseline minus latest round, percentage points (paired instances)",
                          ["suite", "system"], registry=self.registry)
        self.drop_p = Gauge("eor_bench_drop_p_value", "Sign-test p-value of the latest round against the baseline",
                            ["suite", "system"], registry=self.registry)
        self.paired = Gauge("eor_bench_paired_instances", "Instances the latest round and the baseline both scored",
                            ["suite", "system"], registry=self.registry)
        self.confidence_drop = Gauge("eor_bench_confidence_drop", "The deployed path's mean P(right), baseline "
                                     "round minus the latest, on the instances both asked", ["suite"],
                                     registry=self.registry)
        self.confidence_paired = Gauge("eor_bench_confidence_paired", "Instances behind eor_bench_confidence_drop",
                                       ["suite"], registry=self.registry)
        start_http_server(port, registry=self.registry)

    def publish(self, suite: str, metrics: dict) -> None:
        self.score.clear()
        for system, metric, value in SUITES[suite].gauges(metrics):
            self.score.labels(suite=suite, system=system, metric=metric).set(value)
        self.abstention.clear()
        if (metrics.get("abstention") or {}).get("rate") is not None:
            self.abstention.labels(suite=suite, system=metrics["abstention"]["system"]).set(metrics["abstention"]["rate"])
        self.last.labels(suite=suite).set(time.time())
        self.instances.labels(suite=suite).set(metrics["instances"])
        self.reader.labels(suite=suite).set(metrics["cost"]["total"]["reader_s"])

    def publish_regression(self, suite: str, doc: dict | None) -> None:
        for g in (self.regression, self.drop, self.drop_p, self.paired, self.confidence_drop, self.confidence_paired):
            g.clear()
        if (doc or {}).get("confidence"):
            self.confidence_drop.labels(suite=suite).set(doc["confidence"]["drop"])
            self.confidence_paired.labels(suite=suite).set(doc["confidence"]["paired"])
        for system, d in ((doc or {}).get("systems") or {}).items():
            self.regression.labels(suite=suite, system=system).set(1.0 if d["regression"] else 0.0)
            self.drop.labels(suite=suite, system=system).set(d["points"])
            self.drop_p.labels(suite=suite, system=system).set(d["p_value"])
            self.paired.labels(suite=suite, system=system).set(d["paired"])


def round_dir(out: Path) -> Path:
    """The unfinished round to resume (no report.json yet), or a new one named by UTC time."""
    runs = out / "runs"
    if runs.exists():
        unfinished = sorted(p for p in runs.iterdir() if p.is_dir() and not (p / "report.json").exists())
        if unfinished:
            return unfinished[-1]
    name = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    path, n = runs / name, 1
    while path.exists():
        n += 1
        path = runs / f"{name}-{n}"
    return path


def run_forever(args: argparse.Namespace, items, rounds: int | None = None, sleep=time.sleep) -> "Exporter | None":
    """Rounds on the `--every` schedule (for ever, or `rounds` of them); returns the exporter."""
    import grpc

    out = Path(args.out)
    exporter = Exporter(args.metrics_port) if args.metrics_port is not None else None
    n = 0
    while rounds is None or n < rounds:
        t0 = time.monotonic()
        run = round_dir(out)
        try:
            client, health = connect(args)
            try:
                metrics = run_once(args, client, run, items, health)
            finally:
                client.close()
            pinned = Path(args.baseline) if args.baseline else None
            compared = compare_with_baseline(args, run, pinned or regression.baseline_round(out, run))
            latest = out / "latest"
            if latest.exists():
                shutil.rmtree(latest)
            shutil.copytree(run, latest, ignore=shutil.ignore_patterns("results.jsonl"))
            if exporter:
                exporter.publish(args.suite, metrics)
                exporter.publish_regression(args.suite, compared)
        except (SystemExit, grpc.RpcError) as exc:
            detail = f"{exc.code().name}: {exc.details()}" if isinstance(exc, grpc.RpcError) else str(exc)
            print(f"{_now()} {args.suite} round failed ({detail}); next round on schedule", file=sys.stderr)
            if exporter:
                exporter.failures.labels(suite=args.suite).inc()
        n += 1
        if rounds is None or n < rounds:
            sleep(max(0.0, args.every - (time.monotonic() - t0)))
    return exporter


def preflight(suite: Any) -> None:
    try:
        runner.Perturber(suite.specs()).preflight()
    except ImportError as exc:
        raise SystemExit(f"a perturbation cannot run here: {exc}") from exc


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.metrics_port is not None and args.every is None:
        raise SystemExit("--metrics-port needs --every (the gauges are for the continuous mode)")
    if args.rounds is not None and (args.every is None or args.rounds < 1):
        raise SystemExit("--rounds needs --every and a count >= 1")
    if args.limit is not None and args.limit < 1:
        raise SystemExit("--limit must be >= 1")
    for flag, path in (("--questions", args.questions), ("--corpus", args.corpus)):
        if not os.path.isfile(path):
            raise SystemExit(f"{flag}: file not found: {path}")
    if args.baseline and not os.path.isfile(os.path.join(args.baseline, "results.jsonl")):
        raise SystemExit(f"--baseline: {args.baseline} holds no finished run (results.jsonl)")
    from bench.robust.data import load_items

    items = load_items(args.questions, args.corpus, None if args.dataset == "all" else args.dataset,
                       args.limit, noise=args.suite == "sure", split=args.split)
    try:
        suite = make_suite(args, items)  # bad --perturbations fail here, before any rpc
    except ValueError as exc:
        raise SystemExit(f"--perturbations: {exc}") from exc
    missing = runner.unregistered(suite.specs())
    if missing:
        raise SystemExit(f"perturbation(s) {', '.join(missing)} are not registered in bench.robust.perturb "
                         f"(known: {', '.join(runner.default_names()) or 'none'}); is the bench environment "
                         "(.venv-bench, bench/setup.sh) complete?")
    if args.every is not None:
        preflight(suite)
        run_forever(args, items, rounds=args.rounds)
        return 0
    import grpc

    client, health = connect(args)
    try:
        preflight(suite)
        run_once(args, client, Path(args.out), items, health)
        if args.baseline:
            compare_with_baseline(args, Path(args.out), Path(args.baseline))
    except grpc.RpcError as exc:
        done = len(ResultStore(args.out))
        raise SystemExit(f"the eor service failed: {exc.code().name}: {exc.details()}; {done} finished "
                         "instances are saved: rerun the same command to resume") from exc
    finally:
        client.close()
    return 0
