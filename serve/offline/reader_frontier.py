"""Depth against breadth, on the fit split only: the small reader alone, the strong reader alone
and the cascade over (retriever, reader) pairs, each fitted as `eor fit` fits its rounds
(5-fold CV by question, calibrated P, the cheapest layout within the tolerance), compared by
cross-validated Match against expected latency (each reader's prefill and decode at its
measured speed, `eor models speed`; without it, its run logs' seconds per token):

    .venv/bin/python -m serve.offline.reader_frontier --questions ../shared/data/questions.dev.jsonl \\
        --index shared --reader 1.5B --plot var/eval/reader_frontier.png

No eval-split question is read: this is where the choice between readers and layouts is made.
Reads only questions both readers' run logs have finished (`EOR_CONFIG=deploy/eor-cascade-fit.yaml
EOR_SPLITS=fit bench/grow_runs.sh 40 400`); it never starts an engine.

`--voter FILE` reads no run log: the frontier a fitted voter keeps (every candidate layout of its
fit, CV on its own fit questions, priced by its latency model), grouped the same three ways:

    .venv/bin/python -m serve.offline.reader_frontier --voter voter/data/voter.json
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Sequence

from retrievers.spec import PAPER_POOL, with_reader
from serve.config import STRONG_SPECS
from voter.calibration import DEFAULT_METHOD, METHODS


def systems(specs: Sequence[str], strong_specs: Sequence[str], reader: str) -> dict[str, list[str]]:
    """The three pools compared: the default reader's, the strong reader's, and both."""
    strong = [with_reader(s, reader) for s in strong_specs]
    return {"default reader only": list(specs), f"{reader} only": strong, "cascade over both": [*specs, *strong]}


def _point(fit: Any) -> dict[str, Any]:
    return {"rounds": [list(r) for r in fit.layout], "cv_match": round(fit.cv_accuracy, 4),
            "cv_match_every_round": round(fit.cv_all_rounds, 4), "latency_s": round(fit.latency_s, 3),
            "tokens": round(fit.tokens, 1), "rounds_run": round(fit.rounds, 3),
            "first_round_share": round(fit.first_round_share, 4), "cv_ece": round(fit.cv_ece, 4)}


def frontier(args) -> dict[str, Any]:
    from serve.builder import make_pool
    from serve.config import load_config
    from serve.config_readers import quick_reader_first
    from serve.offline.dataset import Selection, select_questions
    from serve.offline.reader_runs import ReaderRuns
    from voter.question_vote import MetricOptions, build_metrics

    pools = systems(PAPER_POOL, STRONG_SPECS, args.reader)
    joined = pools["cascade over both"]
    config = load_config(args.config, {"index": {"name": args.index}, "pool": {"specs": joined}})
    pool = make_pool(config)  # engines are built, never started: the run logs hold every answer
    runs = ReaderRuns(config, pool, args.questions)
    done = runs.load()
    scored = [(q, done[q.qid]) for q in select_questions(Selection(args.questions, None, "fit", args.limit))
              if q.qid in done]
    if len(scored) < 20:
        raise SystemExit(f"both readers' run logs hold {len(scored)} fit questions: grow them first (bench/grow_runs.sh)")
    names = config.voter.metrics
    metrics = build_metrics(MetricOptions.parse(",".join(names)), pool.reader)
    from serve.offline.reader_speed import pool_speeds, round_overhead

    overhead_s = round_overhead(args.round_overhead)[0]
    costs = None
    if args.tokens_per_s or args.reader_cost:  # e.g. measured on an idle machine, where the logs' seconds were not
        from fitting.pricing import LatencyModel, measured_latency

        measured, ratio = measured_latency(scored, runs.seconds(), overhead_s)
        costs = (LatencyModel(overhead_s, args.tokens_per_s or measured.tokens_per_s),
                 {**ratio, "": 1.0, **({args.reader: args.reader_cost} if args.reader_cost else {})})
    doc = compare(scored, runs.seconds(), pools, metrics, names, config.voter.pooling, overhead_s,
                  args.tolerance, None if args.calibration == "none" else args.calibration, costs,
                  None if costs else pool_speeds(pool), quick_reader_first(config))
    return {**doc, "reader": args.reader, "models": {r or "default": pool.readers[r].model_id for r in pool.readers}}


def compare(scored: Sequence, seconds: dict[str, dict[str, float]], pools: dict[str, list[str]],
            metrics: Sequence[Any], names: Sequence[str], pooling: str, round_overhead_s: float = 1.0,
            tolerance: float = 0.005, calibration: str | None = DEFAULT_METHOD,
            costs: Any = None, speeds: Any = None, early_first: bool = False) -> dict[str, Any]:
    """Each pool's rounds fitted as `eor fit` fits them, on the same questions; its chosen layout,
    every candidate layout (the frontier) and its best single member, by CV on `scored`."""
    from fitting.pricing import priced_speeds
    from fitting.search import fit_adaptive

    # one latency model for every system (a table of latencies priced two ways compares nothing)
    speeds = priced_speeds(sorted({s for specs in pools.values() for s in specs}), speeds)
    out: dict[str, Any] = {"fit_questions": len(scored), "tolerance": tolerance, "systems": {}}
    for name, specs in pools.items():
        fitted = fit_adaptive(scored, specs, metrics, names, pooling, seconds, round_overhead_s, tolerance, calibration,
                              costs, speeds, early_first=early_first)
        best = max(specs, key=lambda s: (fitted.accuracy[s], -specs.index(s)))
        out["systems"][name] = {"chosen": _point(fitted.chosen), "layouts": [_point(f) for f in fitted.layouts],
                                "best_single": best, "best_single_match": round(fitted.accuracy[best], 4),
                                "reader_cost_per_token": fitted.reader_cost,
                                "reader_speed": {r or "default": [round(v.prefill_tok_s), round(v.decode_tok_s, 1)]
                                                 for r, v in (fitted.speeds or {}).items()},
                                "tokens_per_s": round(fitted.latency.tokens_per_s, 1)}
    return out


def stored_frontier(record: dict[str, Any], reader: str = "1.5B") -> dict[str, Any]:
    """The frontier in a voter's fit record (`AdaptiveModel.fit`): its layouts by the readers they
    use, each group's Pareto points (faster, or more accurate than every faster one) and the layout
    each group would ship under the same bounds (the most accurate within the latency cap and
    first-reply bound; the voter's own choice in its group)."""
    suffix = f"~{reader}"
    groups: dict[str, list[dict[str, Any]]] = {"default reader only": [], f"{reader} only": [], "cascade over both": []}
    for layout in record.get("layouts") or []:
        members = [m for r in layout["rounds"] for m in r]
        strong = sum(m.endswith(suffix) for m in members)
        name = list(groups)[0 if strong == 0 else 1 if strong == len(members) else 2]
        groups[name].append(layout)
    if not any(groups.values()):
        raise ValueError("the voter keeps no fit record with layouts (fitted before eor kept them): "
                         "run reader_frontier on the run logs instead")
    cap, bound = record.get("latency_cap_s"), record.get("first_reply_bound_s")

    def within(layout: dict[str, Any]) -> bool:
        return ((cap is None or layout["latency_s"] <= cap)
                and (bound is None or layout.get("first_reply_s") is None or layout["first_reply_s"] <= bound))

    systems = {}
    for name, layouts in groups.items():
        if not layouts:
            continue
        pareto, best = [], float("-inf")
        for layout in sorted(layouts, key=lambda x: (x["latency_s"], -x["cv_match"])):
            if layout["cv_match"] > best:
                pareto.append(layout)
                best = layout["cv_match"]
        shipped = next((x for x in layouts if x.get("chosen")), None)
        ok = [x for x in layouts if within(x)]
        chosen = shipped or (max(ok, key=lambda x: (x["cv_match"], -x["latency_s"])) if ok else None)
        systems[name] = {"layouts": layouts, "pareto": pareto, "chosen": chosen, "shipped": shipped is not None}
    return {"layouts": sum(len(v) for v in groups.values()), "latency_cap_s": cap, "first_reply_bound_s": bound,
            "reader_speed": record.get("reader_speed"), "systems": systems}


def format_stored_frontier(doc: dict[str, Any]) -> str:
    lines = [f"{doc['layouts']} layouts the voter's fit kept (5-fold CV on its fit questions); latency cap "
             f"{doc['latency_cap_s']} s, first reply within {doc['first_reply_bound_s']} s",
             f"{'system':22s} {'CV Match':>8s} {'latency s':>9s} {'1st reply':>9s}  layout (rounds)"]

    def row(label: str, x: dict[str, Any]) -> str:
        first = x.get("first_reply_s")
        return (f"{label:22s} {x['cv_match']:8.3f} {x['latency_s']:9.2f} {first if first is not None else float('nan'):9.2f}"
                f"  {' | '.join(', '.join(r) for r in x['rounds'])}")

    for name, s in doc["systems"].items():
        c = s["chosen"]
        lines.append(row(name, c) + ("  (shipped)" if s["shipped"] else "  (best within the bounds)") if c
                     else f"{name:22s} no layout within the bounds")
        lines += [row("  frontier", x) for x in s["pareto"]]
    return "\n".join(lines)


def format_frontier(doc: dict[str, Any]) -> str:
    lines = [f"{doc['fit_questions']} fit questions (5-fold CV; no eval question read); readers {doc.get('models')}; "
             + (f"prefill / decode tok/s {first['reader_speed']}" if (first := next(iter(doc['systems'].values())))
              .get("reader_speed") else f"cost per token {first['reader_cost_per_token']}"),
             f"{'system':22s} {'CV Match':>8s} {'latency s':>9s} {'rounds':>6s} {'stop@1':>6s} {'CV ECE':>6s}  best single pair"]
    for name, s in doc["systems"].items():
        c = s["chosen"]
        lines.append(f"{name:22s} {c['cv_match']:8.3f} {c['latency_s']:9.1f} {c['rounds_run']:6.2f} "
                     f"{c['first_round_share']:6.0%} {c.get('cv_ece', float('nan')):6.3f}  {s['best_single']} "
                     f"{s['best_single_match']:.3f}")
        lines.append(f"{'':22s} rounds: " + " | ".join(", ".join(r) for r in c["rounds"]))
    return "\n".join(lines)


GROUP_COLORS = ("tab:gray", "tab:orange", "tab:blue")  # the default reader, the strong one, both


def _frontier_figure(path: Path, title: str, draw: Any) -> Path:
    """One frontier figure: `draw(ax)` draws the points; axes, legend and file are the same for both kinds."""
    from serve.offline.plots import _figure

    fig = _figure(6.0, 4.2)
    ax = fig.add_subplot(1, 1, 1)
    draw(ax)
    ax.set_xlabel("expected seconds per question (the fit's latency model: measured speeds, where kept)")
    ax.set_ylabel("cross-validated Match (fit split)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    return path


def frontier_plot(doc: dict[str, Any], path: Path) -> Path:
    def draw(ax: Any) -> None:
        for (name, s), color in zip(doc["systems"].items(), GROUP_COLORS):
            pts = sorted((p["latency_s"], p["cv_match"]) for p in s["layouts"])
            ax.scatter([x for x, _ in pts], [y for _, y in pts], s=14, color=color, alpha=0.6)
            c = s["chosen"]
            ax.scatter([c["latency_s"]], [c["cv_match"]], s=90, marker="*", color=color, label=f"{name} (chosen)")

    return _frontier_figure(path, f"readers and layouts, {doc['fit_questions']} fit questions", draw)


def stored_frontier_plot(doc: dict[str, Any], path: Path) -> Path:
    """A voter's stored frontier: each group's layouts, its Pareto line, the layout it would ship (a star)
    and the latency cap (dashed)."""
    def draw(ax: Any) -> None:
        for (name, s), color in zip(doc["systems"].items(), GROUP_COLORS):
            ax.scatter([x["latency_s"] for x in s["layouts"]], [x["cv_match"] for x in s["layouts"]], s=10,
                       color=color, alpha=0.35)
            ax.plot([x["latency_s"] for x in s["pareto"]], [x["cv_match"] for x in s["pareto"]], color=color, lw=1)
            if (c := s["chosen"]) is not None:
                ax.scatter([c["latency_s"]], [c["cv_match"]], s=90, marker="*", color=color,
                           label=f"{name} ({'shipped' if s['shipped'] else 'best within the bounds'})")
        if doc.get("latency_cap_s"):
            ax.axvline(doc["latency_cap_s"], color="k", lw=0.6, ls="--")

    return _frontier_figure(path, f"a fitted voter's frontier: {doc['layouts']} layouts", draw)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--questions", help="the run logs' questions (not with --voter)")
    ap.add_argument("--voter", type=Path, help="a fitted voter file: the frontier its fit kept (no run log read)")
    ap.add_argument("--index", default="shared")
    ap.add_argument("--config")
    ap.add_argument("--reader", default="1.5B", help="the configured reader to compare with the default one")
    ap.add_argument("--limit", type=int, default=None, help="the first N fit questions")
    ap.add_argument("--tolerance", type=float, default=0.005)
    ap.add_argument("--round-overhead", type=float, default=None, help="as eor fit's (default: measured here)")
    ap.add_argument("--calibration", choices=(*METHODS, "none"), default=DEFAULT_METHOD)
    ap.add_argument("--tokens-per-s", type=float, help="the default reader's tokens per second (default: the run logs')")
    ap.add_argument("--reader-cost", type=float, help="the strong reader's cost per token over the default's "
                    "(default: the run logs'; 2.4 measured with the gold passage, issue 33)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--plot", type=Path)
    args = ap.parse_args(argv)
    from serve.cli.common import _quiet_logs

    _quiet_logs()
    from serve.offline.adaptive import emit

    if args.voter is not None:
        from voter.weights_io import load_weights

        try:
            saved = load_weights(args.voter)
            if saved.adaptive is None:
                raise ValueError("the voter has no adaptive rounds")
            doc = stored_frontier(saved.adaptive.fit, args.reader)
        except (OSError, ValueError) as exc:
            print(f"eor: {args.voter}: {exc}", file=sys.stderr)
            return 2
        if args.plot:
            stored_frontier_plot(doc, args.plot)
        return emit(doc, args, format_stored_frontier)
    if not args.questions:
        ap.error("--questions (the run logs' questions) or --voter (a fitted voter file) is required")
    doc = frontier(args)
    if args.plot:
        frontier_plot(doc, args.plot)
    return emit(doc, args, format_frontier)


if __name__ == "__main__":
    sys.exit(main())
