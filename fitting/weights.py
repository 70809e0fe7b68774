"""`eor fit`'s first part: pool results -> similarity tensor + correctness -> fitted voter
weights (§4.2), and the margin cascade over the kept retrievers (rounds by measured cost, stop
thresholds fitted: fitting/thresholds.py).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from fitting.questions import CORRECTNESS, Scored, correctness
from fitting.thresholds import build_trace, evaluate_rule, fit_thresholds, order_rounds
from retrievers.types import QuestionResult
from voter.cascade import DEFAULT_TARGET, UNANIMOUS_ONLY, Cascade
from voter.estimator import EoRVoter, VoterConfig, chosen_correctness
from voter.question_vote import MetricOptions, answer_grid, equal_weights, similarity_inputs
from voter.similarity import PairSimilarity
from voter.weights_io import Provenance, SavedWeights


@dataclass(frozen=True)
class FitConfig:
    """The fit's settings: the similarity metrics, the voter's own (`VoterConfig`, its one home:
    paper's mean pooling, bounds [0, 0.6], drop below t = 0.1) and the cascade's."""

    metrics: MetricOptions = field(default_factory=MetricOptions)
    voter: VoterConfig = field(default_factory=VoterConfig)  # validated on construction
    cascade_target: float = DEFAULT_TARGET  # adaptive stop rule: agreement with the all-kept vote
    first_round: int = 2  # retrievers in the cascade's first round (a vote needs two answers)


@dataclass(frozen=True)
class FitReport:
    saved: SavedWeights
    train_accuracy: float  # Match of the voted answer with the fitted weights
    equal_weights_accuracy: float  # ... with equal weights (plain similarity voting)
    single_accuracy: dict[str, float]  # Match of every single retriever
    seconds: dict[str, float]


def fit_weights(scored: Scored, pool: Sequence[str], metrics: Sequence[PairSimilarity], config: FitConfig,
                questions_file: str, reader_model: str, extra: dict[str, Any] | None = None,
                readers: Mapping[str, str] | None = None) -> FitReport:
    """Fit omega_s, omega_r on `scored` and package them with provenance.

    `extra` goes into the provenance (selection, seeds, time spent running the pool); `readers`
    (the pool's, name -> model id) into the voter file, which names the readers it needs."""
    if not scored:
        raise ValueError("no questions to fit on")
    pool = list(pool)
    t0 = time.perf_counter()
    X = similarity_inputs([r for _, r in scored], answer_grid([r for _, r in scored], pool), metrics)
    t1 = time.perf_counter()
    y = correctness(scored, pool)
    voter = EoRVoter.from_config(config.voter).fit(X, y)
    t2 = time.perf_counter()
    seconds = {**(extra or {}).get("seconds", {}), "similarity": round(t1 - t0, 3), "fit": round(t2 - t1, 3)}
    prov = Provenance(
        questions_file=questions_file,
        n_questions=len(scored),
        reader_model=reader_model,
        objective=float(voter.objective_),
        extra={**(extra or {}), "correctness": CORRECTNESS, "nli_backend": config.metrics.nli_backend,
               "voter": {"n_restarts": config.voter.n_restarts, "seed": config.voter.seed}, "seconds": seconds},
    )
    saved = SavedWeights.from_voter(voter, pool, config.metrics.names, prov, readers)
    results = [r for _, r in scored]
    saved = saved.with_cascade(fit_cascade(voter, X, pool, results, saved.kept_specs(), config))
    base = equal_weights(pool, config.metrics.names, config.voter.pooling, config.voter.upper_bound,
                         config.voter.threshold)
    base_acc = float(chosen_correctness(base.voter().predict(X), y).mean())
    return FitReport(saved, float(voter.objective_), base_acc,
                     {spec: float(y[:, m].mean()) for m, spec in enumerate(pool)}, seconds)


def retriever_costs(results: Sequence[QuestionResult], specs: Sequence[str]) -> dict[str, float]:
    """Mean reader tokens per question of each retriever alone (its shared documents included;
    alone it has no prefix-cache partner, so this is what it computes)."""
    n = max(len(results), 1)
    return {s: sum(r.reader_tokens({s}).total for r in results) / n for s in specs}


def fit_cascade(voter: EoRVoter, X: tuple[np.ndarray, np.ndarray], pool: Sequence[str],
                results: Sequence[QuestionResult], kept: Sequence[str], config: FitConfig) -> Cascade | None:
    """Rounds of the kept retrievers by measured cost and the stop thresholds (fitting/thresholds.py);
    None when the fit kept no retriever (the voter then runs the whole pool, one round)."""
    if not kept:
        return None
    rounds = order_rounds(kept, retriever_costs(results, kept), config.first_round)
    sim, mask = X
    grid = answer_grid(results, pool)
    upto = [set(s for st in rounds[: k + 1] for s in st) for k in range(len(rounds))]
    cum = np.array([[r.reader_tokens(u).computed for u in upto] for r in results], dtype=np.float64)
    trace = build_trace(voter, sim, mask, pool, grid, rounds, cum)
    tau = fit_thresholds(trace, config.cascade_target)
    agree, _, stop = evaluate_rule(trace, tau)
    rates = tuple(float((stop == k).mean()) for k in range(len(rounds)))
    added = np.diff(np.concatenate([np.zeros((len(results), 1)), cum], axis=1), axis=1).mean(axis=0)
    return Cascade(rounds, tau, config.cascade_target, agree, rates, tuple(float(x) for x in added))


def format_report(report: FitReport) -> str:
    """The fitted weights, dropped retrievers, train accuracy and time, for the terminal."""
    s = report.saved
    w = s.weights
    lines = [f"fitted on {s.provenance.n_questions} questions (reader {s.provenance.reader_model}, "
             f"correctness: {CORRECTNESS})",
             "metric weights:    " + ", ".join(f"{m}={x:.3f}" for m, x in zip(s.metrics, w.metric_weights)),
             "retriever weights:"]
    for spec, x, kept in zip(s.pool, w.retriever_weights, w.kept):
        single = report.single_accuracy.get(spec, float("nan"))
        lines.append(f"  {spec:<20} {x:.3f}{'' if kept else '  (dropped)'}   single Match {single:.3f}")
    dropped = s.dropped_specs()
    lines.append(f"dropped (omega_r < {s.threshold}): {', '.join(dropped) if dropped else 'none'}")
    best = max(report.single_accuracy.items(), key=lambda kv: kv[1])
    lines.append(f"train Match: EoR {report.train_accuracy:.3f}; equal weights {report.equal_weights_accuracy:.3f}; "
                 f"best single {best[0]} {best[1]:.3f}")
    c = s.cascade_to_run
    lines.append(f"cascade ({len(c.rounds)} stages, cheapest first; stop when the answer margin reaches the "
                 f"stage's threshold):")
    for k, members in enumerate(c.rounds):
        tau = c.thresholds[k] if k < len(c.thresholds) else None
        rule = "last stage" if tau is None else ("never stops here" if tau == float("inf") else
                                                  "stop if unanimous" if tau >= UNANIMOUS_ONLY else
                                                  f"stop if margin >= {tau:.4f} (or unanimous)")
        rate = f", stops {c.fit_stop_rate[k]:.0%}" if k < len(c.fit_stop_rate) else ""
        toks = f", +{c.round_tokens[k]:.0f} tokens" if k < len(c.round_tokens) else ""
        lines.append(f"  {k + 1}. {' + '.join(members)}: {rule}{rate}{toks}")
    if c.fit_agreement is not None:
        lines.append(f"  adaptive answer = all-kept vote on {c.fit_agreement:.1%} of fit questions (target {c.target:.0%})")
    lines.append("time: " + ", ".join(f"{k} {v:.1f} s" for k, v in report.seconds.items()))
    return "\n".join(lines)
