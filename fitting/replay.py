"""A voter's ensembles replayed on a run of the whole pool (`eor eval`, the adaptive report, the
push gate): EoR as it ships (its cascade, early stop), pruned EoR (every kept retriever) and the
equal-weights vote over the pool, each question's answer, reader tokens and the members it ran;
for a confidence-aware voter its P(right) and a stream's first reply too. Rounds are prefixes of
the cascade, so a stop after round k sees exactly the answers rounds 1..k would have given.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Sequence

import numpy as np

from fitting.evaluation import EOR, EOR_ALL, EOR_PRUNED
from fitting.held_out import apply_model
from fitting.pool_run import early_views, equal_vote, picks, pool_run
from fitting.questions import Scored
from fitting.thresholds import build_trace, evaluate_rule
from retrievers.spec import by_reader
from retrievers.types import ReaderTokens
from voter.calibration import EARLY
from voter.cascade import early_view, stop_rounds
from fitting.questions import right
from voter.question_vote import answer_grid, equal_weights, similarity_inputs
from voter.weights_io import SavedWeights


@dataclass(frozen=True)
class EnsembleRuns:
    """The three ensembles replayed from one run of the whole pool (rounds are prefixes of the
    cascade, so a stop after round k sees exactly the answers rounds 1..k would have given)."""

    answers: dict[str, list[str]]  # EoR (adaptive), EoR pruned, EoR-all equal: answer per question
    tokens: dict[str, list[ReaderTokens]]
    stop_rate: list[float]  # share of questions stopped after each round
    rounds: list[list[str]]
    sweep: list[dict[str, float]]  # thresholds x scale: Match and computed tokens per question
    confidence: list[float | None] | None = None  # EoR's P(right) per question; None: the voter gives none
    confidence_kind: str = "none"  # "calibrated", "raw" or "none" (SavedWeights.confidence_kind)
    ran: dict[str, list[set[str]]] = field(default_factory=dict)  # ensemble -> the members each question ran
    # round 1's early answer (a stream's first reply), where the layout has one: its members, and per
    # question its answer and the confidence it carries
    early: dict[str, Any] | None = None


def per_system(scored: Scored, runs: EnsembleRuns, pool: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Each system's mean words per answer (Match is a substring test: longer answers are
    rewarded) and mean reader tokens computed per question by each reader ("" the default)."""
    results = [r for _, r in scored]
    ran = {**runs.ran, **{s: [{s}] * len(results) for s in pool}}
    everything = [set(pool)] * len(results)  # a system that records no members ran the whole pool
    grid = answer_grid(results, list(pool))
    answers = {**runs.answers, **{s: [row[m] or "" for row in grid] for m, s in enumerate(pool)}}
    out = {}
    for name, said in answers.items():
        words = [len(a.split()) for a in said if a]
        tokens: dict[str, float] = {}  # reader name -> mean tokens computed per question
        for i, r in enumerate(results):
            for reader, members in by_reader(sorted(ran.get(name, everything)[i])).items():
                tokens[reader] = tokens.get(reader, 0.0) + r.reader_tokens(set(members)).computed / len(results)
        out[name] = {"words_per_answer": round(float(np.mean(words)), 2) if words else None,
                     "tokens_by_reader": {k: round(v, 1) for k, v in tokens.items()}}
    return out


SWEEP_SCALES = (0.0, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 4.0, math.inf)


def cascade_stops(scored: Scored, saved: SavedWeights, metrics: Sequence[Any]) -> list[int]:
    """The round (0-based) a confidence-aware voter stops after on each question, from what was
    read (serve/offline/cascade_reads.py: its rounds read as the service reads them)."""
    pool = list(saved.pool)
    run = pool_run(scored, pool, metrics, equal_vote(pool, saved.metrics, saved.pooling))
    return [int(k) for k in apply_model(run, saved.adaptive).stop]


def replay_confident(scored: Scored, saved: SavedWeights, metrics: Sequence[Any],
                     whole_pool: bool = True) -> EnsembleRuns:
    """The ensembles of a confidence-aware voter (eor-voter/3): EoR is its rounds with the
    scorer's stop rule, pruned EoR every round, EoR-16 the equal-weights vote over all 16.
    `whole_pool` False (only the rounds each question reached were read: `eor eval --reads
    cascade`): EoR alone, and no threshold sweep (a lower threshold reads what was not read)."""
    model = saved.adaptive
    results = [r for _, r in scored]
    pool = list(saved.pool)
    run = pool_run(scored, pool, metrics, equal_vote(pool, saved.metrics, saved.pooling))
    upto = [set(x for r in model.layout[: k + 1] for x in r) for k in range(len(model.layout))]

    def replay(thresholds) -> tuple[list[str], list[ReaderTokens], Any]:
        out = apply_model(run, replace(model, thresholds=tuple(thresholds)))  # its calibrator too, as it ships
        answers = [(run.answers[i][w] or "") if w >= 0 else "" for i, w in enumerate(out.picked)]
        return answers, [r.reader_tokens(upto[k]) for r, k in zip(results, out.stop)], out
    answers, tokens = {}, {}
    answers[EOR], tokens[EOR], out = replay(model.thresholds)
    stop = out.stop
    rates = [float((stop == k).mean()) for k in range(len(model.layout))]
    confidence = [float(c) if w >= 0 else None for c, w in zip(out.confidence, out.picked)]
    early = early_answers(run, model)
    if not whole_pool:
        return EnsembleRuns(answers, tokens, rates, [list(r) for r in model.layout], [], confidence,
                            saved.confidence_kind, {EOR: [upto[k] for k in out.stop]}, early)
    answers[EOR_PRUNED], tokens[EOR_PRUNED], _ = replay([math.inf] * len(model.thresholds))
    win = equal_weights_voter(saved).predict((run.sim, run.mask))
    answers[EOR_ALL] = [(run.answers[i][w] or "") if w >= 0 else "" for i, w in enumerate(win)]
    tokens[EOR_ALL] = [r.reader_tokens() for r in results]
    golds = [q.answers for q, _ in scored]
    sweep = []
    for scale in SWEEP_SCALES:
        tau = [math.inf if not math.isfinite(scale) else t * scale for t in model.thresholds]
        a, t, _ = replay(tau)
        sweep.append({"scale": scale, "match": float(np.mean([right(x, g) for x, g in zip(a, golds)])) if golds else 0.0,
                      "computed_tokens": float(np.mean([x.computed for x in t])) if t else 0.0})
    ran = {EOR: [upto[k] for k in out.stop], EOR_PRUNED: [upto[-1]] * len(results), EOR_ALL: [set(pool)] * len(results)}
    return EnsembleRuns(answers, tokens, rates, [list(r) for r in model.layout], sweep, confidence,
                        saved.confidence_kind, ran, early)


def early_answers(run: Any, model: Any) -> dict[str, Any] | None:
    """The first reply on each question (a stream's: the preview, else round 1's early answer; its
    members voted alone, voter/cascade.py: early_view) and the confidence it carries; None where
    there is none."""
    members = early_view(model.layout, model.preview)
    if members is None:
        return None
    p, _, who = picks(early_views(run, model.layout, model.preview), run.right, run.pool, model.scorer,
                      range(len(run)))
    said = [(run.answers[i][w] or "") if w >= 0 else "" for i, w in enumerate(who[:, 0])]
    conf = [float(model.confidence(float(x), EARLY)) if w >= 0 else None for x, w in zip(p[:, 0], who[:, 0])]
    return {"members": list(members), "answers": said, "confidence": conf}


def equal_weights_voter(saved: SavedWeights):
    return equal_weights(list(saved.pool), saved.metrics, saved.pooling).voter()


def replay_ensembles(scored: Scored, saved: SavedWeights, metrics: Sequence[Any],
                     whole_pool: bool = True) -> EnsembleRuns:
    """`whole_pool` False: only the rounds each question reached were read (a confidence-aware
    voter's cascade: replay_confident)."""
    if saved.adaptive is not None:
        return replay_confident(scored, saved, metrics, whole_pool)
    if not whole_pool:
        raise ValueError("only a confidence-aware voter (eor-voter/3 or later) reads its rounds alone")
    results = [r for _, r in scored]
    pool = list(saved.pool)
    grid = answer_grid(results, pool)
    sim, mask = similarity_inputs(results, grid, metrics)
    cascade = saved.cascade_to_run
    rounds = [list(s) for s in cascade.rounds]
    upto = [set(x for st in rounds[: k + 1] for x in st) for k in range(len(rounds))]
    cum = np.array([[r.reader_tokens(u).computed for u in upto] for r in results], dtype=np.float64)
    trace = build_trace(saved.voter(), sim, mask, pool, grid, rounds, cum)
    stop = stop_rounds(trace.stats, cascade.thresholds)
    answers = {EOR: [trace.answers[i][k] for i, k in enumerate(stop)],
               EOR_PRUNED: [row[-1] for row in trace.answers]}
    tokens = {EOR: [r.reader_tokens(upto[k]) for r, k in zip(results, stop)],
              EOR_PRUNED: [r.reader_tokens(upto[-1]) for r in results]}
    equal = equal_weights(pool, saved.metrics, saved.pooling)
    win = equal.voter().predict((sim, mask))
    answers[EOR_ALL] = [(grid[i][w] or "") if w >= 0 else "" for i, w in enumerate(win)]
    tokens[EOR_ALL] = [r.reader_tokens() for r in results]
    golds = [q.answers for q, _ in scored]
    sweep = []
    for scale in SWEEP_SCALES:
        tau = [math.inf if not math.isfinite(scale) else (t * scale if math.isfinite(t) else t)
               for t in cascade.thresholds]
        _, cost, st = evaluate_rule(trace, tau)
        ok = np.mean([right(trace.answers[i][k], g) for i, (k, g) in enumerate(zip(st, golds))]) if golds else 0.0
        sweep.append({"scale": scale, "match": float(ok), "computed_tokens": cost})
    rates = [float((stop == k).mean()) for k in range(len(rounds))]
    ran = {EOR: [upto[k] for k in stop], EOR_PRUNED: [upto[-1]] * len(results), EOR_ALL: [set(pool)] * len(results)}
    return EnsembleRuns(answers, tokens, rates, rounds, sweep, ran=ran)
