"""The confidence-aware fit end to end (`eor fit`, `python -m serve.offline.adaptive`): the
candidate layouts compared by 5-fold CV on the fit questions, priced by each reader's measured
speed, the chosen one refitted on all of them, with the record a voter file keeps of the choice.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Sequence

import numpy as np

from fitting.layout_choice import (LATENCY_CAP, acceptable, anchor_se, candidate_layouts, choose_layout,
                                   preview_candidates, quick_member)
from fitting.layout_fit import CV_FOLDS, CV_SEED, SCORER_C, LayoutFit, fit_layout, fit_model, fit_record
from fitting.pool_run import PoolRun, equal_vote, pool_run
from fitting.pricing import LatencyModel, ReaderSpeed, measured_latency, priced_speeds, unit_speed
from voter.adaptive_model import AdaptiveModel
from voter.calibration import DEFAULT_METHOD


@dataclass(frozen=True)
class AdaptiveFit:
    model: AdaptiveModel
    chosen: LayoutFit
    layouts: list[LayoutFit]
    run: PoolRun
    latency: LatencyModel
    accuracy: dict[str, float]
    reader_cost: dict[str, float]  # reader name -> its cost per token over the default reader's (measured)
    speeds: dict[str, ReaderSpeed] | None = None  # reader name -> measured speed, where the fit priced by them


def fit_adaptive(scored: Sequence, specs: Sequence[str], metrics: Sequence[Any], metric_names: Sequence[str],
                 pooling: str, seconds: dict[str, dict[str, float]], round_overhead_s: float = 1.0,
                 tolerance: float = 0.005, calibration: str | None = DEFAULT_METHOD,
                 costs: tuple[LatencyModel, dict[str, float]] | None = None,
                 speeds: dict[str, ReaderSpeed] | None = None,
                 first_reply_vs: str | None = None, overhead_by: str | None = None,
                 early_first: bool = False) -> AdaptiveFit:
    """Layouts compared by 5-fold CV on the fit questions; the chosen one refitted on all of them.
    `calibration`: voter/calibration.py's method for P(right) (None: the raw P, as a v3 file).
    `speeds`: reader name -> its measured prefill and decode speed (serve/offline/reader_speed.py);
    where every reader of `specs` has one, a round is priced by them. Else `seconds`: reader name ->
    qid -> cold seconds of its run log (ReaderRuns.seconds), one price per token per reader; `costs`
    (the latency model and each reader's cost per token) replaces both. `first_reply_vs` (a member
    of `specs`; None: no bound; `eor fit` passes SERVICE_BASELINE): prefer layouts whose early answer
    comes no later than that member alone answers, at no more than LATENCY_CAP times its expected
    latency (fitting/layout_choice.py: choose_layout), so a stream's first reply is as quick as the service
    with it; the layouts that could be chosen but miss it are fitted again with the default reader's
    best one-step member as their preview (preview_candidates); the record says whether the chosen
    layout met both. `overhead_by`: where
    `round_overhead_s` came from (serve/offline/reader_speed.py: round_overhead), for the record.
    `early_first`: round 1's early answer has the cores first (serve/config_readers.py: quick_reader_first)."""
    priced = priced_run(scored, specs, metrics, metric_names, pooling, seconds, round_overhead_s, costs, speeds,
                        early_first)
    return fit_on_run(priced, tolerance, calibration, first_reply_vs, overhead_by)


@dataclass(frozen=True)
class PricedRun:
    """The pool's run with what its rounds cost: what a layout search reads (once for a nested CV)."""

    run: PoolRun
    specs: tuple[str, ...]
    latency: LatencyModel
    weights: dict[str, float]
    speeds: dict[str, ReaderSpeed] | None

    def subset(self, rows: Sequence[int]) -> "PricedRun":
        return replace(self, run=self.run.subset(rows))


def priced_run(scored: Sequence, specs: Sequence[str], metrics: Sequence[Any], metric_names: Sequence[str],
               pooling: str, seconds: dict[str, dict[str, float]], round_overhead_s: float = 1.0,
               costs: tuple[LatencyModel, dict[str, float]] | None = None,
               speeds: dict[str, ReaderSpeed] | None = None, early_first: bool = False) -> PricedRun:
    """The similarity tensor, rightness and prices of `scored` (fit_adaptive's arguments)."""
    speeds = None if costs else priced_speeds(specs, speeds)
    if speeds:
        latency, weights = LatencyModel(round_overhead_s, unit_speed(speeds)), {}
    else:
        latency, weights = costs or measured_latency(scored, seconds, round_overhead_s)
    latency = replace(latency, early_first=early_first or latency.early_first)
    run = pool_run(scored, specs, metrics, equal_vote(specs, metric_names, pooling), weights, speeds)
    return PricedRun(run, tuple(specs), latency, weights, speeds)


def fit_on_run(priced: PricedRun, tolerance: float = 0.005, calibration: str | None = DEFAULT_METHOD,
               first_reply_vs: str | None = None, overhead_by: str | None = None) -> AdaptiveFit:
    """fit_adaptive on a priced run: the layouts compared by CV (grouped by passage), the chosen one
    refitted on every question of the run."""
    run, specs, latency, weights, speeds = priced.run, list(priced.specs), priced.latency, priced.weights, priced.speeds
    acc = {s: float(run.right[:, m].mean()) for m, s in enumerate(specs)}
    cost = {s: float(np.mean([run.cost(i, (frozenset({s}),)) for i in range(len(run))])) for s in specs}
    folds, C, seed = CV_FOLDS, SCORER_C, CV_SEED
    fits = [fit_layout(run, lay, latency, folds=folds, C=C, tolerance=tolerance, seed=seed, calibration=calibration)
            for lay in candidate_layouts(list(specs), acc, cost)]
    bound, widen_to = None, None
    if first_reply_vs is not None:
        if first_reply_vs not in specs:
            raise ValueError(f"--first-reply-vs {first_reply_vs}: not a member of the pool fitted")
        one = (frozenset({first_reply_vs}),)
        reply_s = float(np.mean([latency.seconds(1, run.cost(i, one)) for i in range(len(run))]))
        bound = (first_reply_vs, reply_s, LATENCY_CAP * reply_s)
        quick = quick_member(specs, acc, cost)

        def with_previews(within: float) -> list[LayoutFit]:  # those that miss the bound, again with a quick preview
            fitted = {(f.layout, f.preview) for f in fits}
            return [fit_layout(run, lay, latency, folds=folds, C=C, tolerance=tolerance, seed=seed,
                               calibration=calibration, preview=(quick,))
                    for lay in preview_candidates(fits, quick, within, reply_s) if (lay, (quick,)) not in fitted]

        if quick is not None:
            fits += with_previews(tolerance)
        if not any(f.first_reply_s <= reply_s and f.latency_s <= bound[2] for f in acceptable(fits, tolerance)):
            widen_to = max(tolerance, anchor_se(fits, len(run)))  # the bounds bind: the anchor within its own error
            if quick is not None:
                fits += with_previews(widen_to)
    chosen = choose_layout(fits, tolerance, *((None, None) if bound is None else bound[1:]), widen_to=widen_to)
    record = fit_record(chosen, fits, latency, tolerance=tolerance, C=C, folds=folds, seed=seed,
                        calibration=calibration, first_reply=bound)
    if widen_to is not None:
        record["tolerance_widened_to"] = round(widen_to, 4)
    if overhead_by:
        record["round_overhead_by"] = overhead_by
    if speeds:  # what each reader's prompt token and decode step were taken to cost
        record["reader_speed"] = {r or "default": {"prefill_tok_s": round(v.prefill_tok_s, 1),
                                                   "decode_tok_s": round(v.decode_tok_s, 1)} for r, v in speeds.items()}
    elif set(weights) - {""}:  # what a token of each reader was taken to cost
        record["reader_cost_per_token"] = {r: round(w, 4) for r, w in weights.items()}
    return AdaptiveFit(fit_model(run, chosen, C, record), chosen, fits, run, latency, acc, weights, speeds)
