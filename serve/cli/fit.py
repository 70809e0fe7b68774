"""`eor fit`: fit the voter on the fit split, optionally push it into a live service."""
from __future__ import annotations

import contextlib
import json
import math
import sys
from dataclasses import replace
from pathlib import Path

from serve.cli.common import DEFAULT_WEIGHTS, _config
from serve.cli.runs import _run_pool, _selection

MIN_ADAPTIVE_QUESTIONS = 20  # fewer, and a 5-fold CV of the answer scorer has a handful of questions per fold


def _check_push(target: str | None) -> None:
    if target is None:
        return
    host, _, port = target.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"--push expects HOST:PORT, got {target!r}")


def push_weights(target: str, path: Path) -> int:
    """Send a weights file to a live system (SetVoterWeights): the Voter's user_config changes,
    nothing restarts. The file stays the record of what was pushed."""
    import grpc

    from protos.client import EorClient

    with EorClient(target, timeout_s=300.0) as client:
        try:
            reply = client.set_voter_weights(path.read_text())
        except grpc.RpcError as exc:
            print(f"eor: push to {target} failed: {exc.code().name}: {exc.details()}", file=sys.stderr)
            return 1
    print(f"weights pushed to {target}: {reply.source}; voting retrievers: {', '.join(reply.retrievers)}")
    return 0


def gated_push(args, saved, metrics, path: Path) -> int:
    """Judge the candidate against the live voter (serve/offline/push_gate.py), then push it
    when it passes; `--force` pushes anyway and says so."""
    import grpc

    from protos.client import EorClient
    from serve.offline.dataset import Selection, select_questions
    from serve.offline.push_gate import bench_slice, judge_push

    questions = select_questions(Selection(args.questions, args.dataset, "eval", args.gate_questions, args.split_seed,
                                           group_by=getattr(args, "split_by", None) or "passage"))
    if args.gate_slice:
        questions += bench_slice(args.gate_slice)
    try:
        with EorClient(args.push, timeout_s=1800.0) as client:
            verdict = judge_push(client, saved, metrics, questions, args.gate_margin)
    except grpc.RpcError as exc:
        print(f"eor: the push gate could not ask {args.push}: {exc.code().name}: {exc.details()}", file=sys.stderr)
        if not args.force:
            print("eor: nothing pushed (--force pushes without the gate)", file=sys.stderr)
            return 1
        print("eor: --force: pushing without the gate", file=sys.stderr)
        return push_weights(args.push, path)
    print(verdict.line())
    if not verdict.passed:
        if not args.force:
            print(f"eor: nothing pushed; the live voter stays ({verdict.live_voter}). The candidate is in {path}; "
                  "--force pushes it anyway", file=sys.stderr)
            return 1
        print("eor: --force: pushing the candidate although the gate refused it", file=sys.stderr)
    return push_weights(args.push, path)


def _priced(args, config, pool, selection, scored, metrics, metric_names, pooling, specs):
    """(the priced run over `specs`, its equal vote by `metric_names` and `pooling`; fit_on_run's
    options; the round overhead): what a fit reads."""
    from retrievers.spec import by_reader
    from serve.config_readers import quick_reader_first
    from fitting.search import priced_run
    from serve.offline.reader_runs import ReaderRuns
    from serve.offline.reader_speed import pool_speeds, round_overhead
    from fitting.layout_choice import SERVICE_BASELINE

    readers = by_reader(specs)
    seconds = {r: s for r, s in ReaderRuns(config, pool, selection.path).seconds().items() if r in readers}
    method = None if args.calibration == "none" else args.calibration
    given = args.first_reply_vs
    ref = SERVICE_BASELINE if given is None else (None if given == "none" else given)
    if ref is not None and ref not in specs:  # the service's member not here: no bound, and the summary says so
        if given is not None and ref not in pool.specs:
            raise ValueError(f"--first-reply-vs {ref}: not a member of the pool ({len(pool.specs)} members)")
        ref = None
    overhead_s, overhead_by = round_overhead(args.round_overhead)
    priced = priced_run(scored, specs, metrics, metric_names, pooling, seconds, overhead_s,
                        speeds=pool_speeds(pool), early_first=quick_reader_first(config, specs))
    return priced, {"calibration": method, "first_reply_vs": ref, "overhead_by": overhead_by}, overhead_s


def _fit_adaptive(args, config, pool, selection, scored, metrics, saved, specs=None):
    """The confidence-aware rounds, answer scorer and stop thresholds (fitting/search.py),
    fitted on the same questions with 5-fold CV, over `specs` (default: the whole pool);
    (the voter with them, a summary line)."""
    from fitting.search import fit_on_run

    specs = list(pool.specs if specs is None else specs)
    run, options, overhead_s = _priced(args, config, pool, selection, scored, metrics, saved.metrics, saved.pooling,
                                       specs)
    method, overhead_by = options["calibration"], options["overhead_by"]
    fitted = fit_on_run(run, **options)
    c = fitted.chosen
    priced = ("rounds priced by each reader's measured prefill and decode speed" if fitted.speeds else
              "rounds priced by the run logs' seconds per token (no measured speed for every reader: "
              "`eor models speed` measures them)") + f", {overhead_s:.2f} s a round beyond it ({overhead_by})" + \
        ("; the default reader's early answer as alone (the quick reader first)" if fitted.latency.early_first else "")
    rounds = " | ".join(", ".join(r) for r in c.layout)
    first = (f"{'+'.join(c.preview)}'s preview (read beside round 1 for a stream, never voted after)" if c.preview
             else "round 1's early answer")
    if c.preview:
        rounds += f" (and {'+'.join(c.preview)} as a stream's preview)"
    calibrated = f"{method}-calibrated P(right)" if method else "the scorer's raw P(right) (not calibrated)"
    summary = (f"confidence-aware rounds: {rounds}; thresholds {[round(t, 3) for t in c.thresholds]} on "
               f"{calibrated}, cross-validated ECE of the answers delivered {c.cv_ece:.3f}"
               + (f" (of {first}, on a line of its own: {c.cv_ece_early:.3f})"
                  if math.isfinite(c.cv_ece_early) else "") + "; "
               f"CV Match {c.cv_accuracy:.3f} (every round {c.cv_all_rounds:.3f}), "
               f"{c.rounds:.2f} rounds, {c.first_round_share:.0%} stop after round 1, expected {c.latency_s:.1f} s, "
               f"first reply {c.first_reply_s:.1f} s{_first_reply_bound(fitted.model.fit)} ({priced})")
    return replace(saved, adaptive=fitted.model), summary


def _first_reply_bound(record: dict) -> str:
    """What the first reply was held to, and whether the chosen rounds met it (and the cap)."""
    if "first_reply_bound_s" not in record:
        return " (no first-reply bound)"
    bound, ref, cap = record["first_reply_bound_s"], record["first_reply_vs"], record["latency_cap_s"]
    near, widened = "near the anchor's accuracy", ""
    if "tolerance_widened_to" in record:  # no layout within the tolerance met both: the target widened
        near = f"within {record['tolerance_widened_to']:.1%} of the anchor's accuracy (one standard error)"
        widened = f"; none within {record['tolerance']:.1%} of the anchor's accuracy met both: the most accurate {near}"
    if record.get("first_reply_met"):
        return f" (within {ref} alone: {bound:.1f} s{widened})"
    return (f" (NOT within both {ref} alone's {bound:.1f} s for the first reply and {cap:.1f} s expected: no layout "
            f"{near} met both; the one that misses them least{_best_under_cap(record)})")


def _best_under_cap(record: dict) -> str:
    """Where the chosen layout misses a bound: the most accurate layout the fit tried that keeps the
    latency cap (and the bound too, where one does), so the trade is in front of whoever ships it."""
    layouts, cap, bound = record.get("layouts") or [], record["latency_cap_s"], record["first_reply_bound_s"]
    out = []
    for what, keep in (("the cap", lambda f: f["latency_s"] <= cap),
                       ("both", lambda f: f["latency_s"] <= cap and f["first_reply_s"] <= bound)):
        kept = [f for f in layouts if keep(f)]
        if kept:
            f = max(kept, key=lambda f: (f["cv_match"], -f["latency_s"]))
            out.append(f"most accurate within {what}: CV Match {f['cv_match']:.3f} at {f['latency_s']:.1f} s, "
                       f"first reply {f['first_reply_s']:.1f} s ({' | '.join(', '.join(r) for r in f['rounds'])})")
    return "; " + "; ".join(out) if out else "; no layout tried keeps the cap"


def _with_best_single(report, specs):
    """The report's voter with the fit split's best single member (by Match; ties: the earlier
    one) in its provenance: what `eor eval` pairs EoR with unless told another (--baseline)."""
    best = max(specs, key=lambda s: (report.single_accuracy.get(s, -1.0), -list(specs).index(s)))
    return replace(report.saved, provenance=replace(report.saved.provenance, extra={
        **report.saved.provenance.extra, "best_single": best}))


def _fit_fallback(args, config, pool, selection, scored, metrics, fit_config, extra, adaptive):
    """The single-reader fallback of a voter whose pool names other readers: the same fit over the
    default reader's members alone, so a system without the other readers still runs a fitted
    voter (voter/question_vote.py: choose_voter says which ran). (the voter or None, a summary line)."""
    from retrievers.spec import DEFAULT_READER_NAME, by_reader
    from fitting.weights import fit_weights

    own = by_reader(pool.specs).get(DEFAULT_READER_NAME, [])
    if len(own) < 2:
        return None, f"no single-reader fallback: the default reader reads {len(own)} member(s), a vote needs 2"
    report = fit_weights(scored, own, metrics, fit_config, Path(selection.path).name, pool.reader.model_id, extra,
                         readers={DEFAULT_READER_NAME: pool.reader.model_id})
    saved, summary = _with_best_single(report, own), "confidence-aware rounds not fitted"
    if adaptive:
        saved, summary = _fit_adaptive(args, config, pool, selection, scored, metrics, saved, specs=own)
    return saved, (f"single-reader fallback ({len(own)} members through {pool.reader.model_id}): fit Match "
                   f"{report.train_accuracy:.3f}; {summary}")


def _nested(args, config, pool, selection, scored, metrics, fit_config) -> int:
    """`eor fit --nested-cv K`: the fit judged, not shipped (fitting/nested.py); the report's JSON in
    --out (default $EOR_HOME/reports/nested-cv.json)."""
    from fitting.nested import nested_cv, nested_report
    from serve.paths import eor_home

    priced, options, _ = _priced(args, config, pool, selection, scored, metrics, fit_config.metrics.names,
                                 fit_config.voter.pooling, list(pool.specs))
    rows, chosen = nested_cv(priced, args.nested_cv, **options)
    doc = {**nested_report(rows, [q.answers for q, _ in scored], chosen), "selection": selection.describe()}
    out = Path(args.out or eor_home() / "reports" / "nested-cv.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=2) + "\n")
    if args.json:
        print(json.dumps(doc))
        return 0
    print(f"the fit judged by {doc['outer_folds']}-fold nested cross-validation grouped by passage "
          f"({len(rows)} questions; Match on whole tokens); voter vs the pair the same folds chose:")
    for name, d in doc["datasets"].items():
        cal = d.get("calibration") or {}
        print(f"  {name} (n={d['n']}): " + "; ".join(
            f"{m} {d[m]['voter']:.3f} vs {d[m]['pair']:.3f} ({d[m]['voter_higher']} vs {d[m]['pair_higher']}, "
            f"p = {d[m]['p']:.3g})" for m in ("match", "em", "f1"))
              + f"; tokens x{d['tokens']['ratio']:.2f}; risk-coverage area {d['risk_coverage']['voter_area']:.3f} vs "
              f"{d['risk_coverage']['pair_logprob_area']:.3f}" + (f"; |mean P - Match| {cal['gap']:.3f}, ECE "
                                                                  f"{cal['ece']:.3f} (floor {cal['ece_floor']:.3f})"
                                                                  if cal else ""))
    print(f"report in {out}")
    return 0


def cmd_fit(args) -> int:
    from serve.builder import make_pool, pool_reader_models
    from serve.offline.dataset import qids_digest, select_questions
    from fitting.weights import FitConfig, fit_weights, format_report
    from voter.estimator import VoterConfig
    from serve.paths import eor_home, source_commit
    from voter.question_vote import MetricOptions, build_metrics
    from voter.weights_io import file_sha256, save_weights

    _check_push(args.push)
    config = _config(args)
    selection = _selection(args)
    questions = select_questions(selection)
    fit_config = FitConfig(metrics=MetricOptions.parse(args.metrics, args.nli_model),
                           voter=VoterConfig(pooling=args.pooling or config.voter.pooling))
    pool = make_pool(config)
    scored, pool_s = _run_pool(args, config, pool, selection, questions)
    sel = selection.describe()
    extra = {**{k: v for k, v in sel.items() if k != "questions_file"},
             "questions_sha256": file_sha256(selection.path),
             "qids_sha256": qids_digest([q for q, _ in scored]), "seconds": {"pool": round(pool_s, 3)},
             "commit": source_commit()}
    metrics = build_metrics(fit_config.metrics, pool.reader)
    if args.nested_cv:  # the fit judged, not shipped: no voter's weights are fitted
        return _nested(args, config, pool, selection, scored, metrics, fit_config)
    report = fit_weights(scored, pool.specs, metrics, fit_config,
                         Path(selection.path).name, pool.reader.model_id, extra,  # a name, not this machine's path
                         readers=pool_reader_models(pool))
    saved = _with_best_single(report, pool.specs)
    adaptive = args.adaptive if args.adaptive is not None else len(scored) >= MIN_ADAPTIVE_QUESTIONS
    if adaptive and len(scored) < MIN_ADAPTIVE_QUESTIONS:
        raise ValueError(f"--adaptive needs at least {MIN_ADAPTIVE_QUESTIONS} questions, the selection has "
                         f"{len(scored)}")
    summary = ("confidence-aware rounds not fitted (--no-adaptive)" if args.adaptive is False else
               f"confidence-aware rounds not fitted: {len(scored)} questions, fewer than {MIN_ADAPTIVE_QUESTIONS}")
    if adaptive:
        saved, summary = _fit_adaptive(args, config, pool, selection, scored, metrics, saved)
    if len(saved.named_readers) > 1:
        fallback, fallback_summary = _fit_fallback(args, config, pool, selection, scored, metrics, fit_config,
                                                   extra, adaptive)
        saved = replace(saved, fallback=fallback)
        summary += "\n" + fallback_summary
    out = save_weights(args.out or eor_home() / DEFAULT_WEIGHTS, saved)
    if args.json:
        print(json.dumps({"weights": str(out), "voter": saved.describe(), "fit_match": report.train_accuracy,
                          "equal_weights_match": report.equal_weights_accuracy, "single_match": report.single_accuracy,
                          "kept": saved.kept_specs(), "adaptive": summary if adaptive else None,
                          "seconds": report.seconds}))
        with contextlib.redirect_stdout(sys.stderr):  # stdout carries the JSON alone
            return gated_push(args, saved, metrics, Path(out)) if args.push else 0
    print(format_report(report))
    print(summary)
    print(f"weights written to {out}")
    return gated_push(args, saved, metrics, Path(out)) if args.push else 0

