"""`eor fit`: pool results -> similarity tensor + correctness -> fitted voter weights (§4.2).

Correctness g is *Match* (a gold answer contained in the normalised output, BERGEN /
the query-level robustness paper), not the paper's BEM or EM: the small readers this system
runs (SmolLM2, Gemma-3-270M) answer in sentences ("The Mona Lisa was painted by Leonardo da
Vinci."), which EM scores 0 and Match scores 1; BEM needs a model no package ships. A failed
retriever or an empty answer counts as wrong and takes no part in the vote.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from retrievers.types import QuestionResult
from serve.dataset import Question
from serve.voting import (DEFAULT_POOLING, MetricOptions, answer_grid, equal_weights,
                          similarity_inputs)
from voter.estimator import EoRVoter, chosen_correctness
from voter.qa_metrics import match
from voter.similarity import PairSimilarity
from voter.weights_io import Provenance, SavedWeights

CORRECTNESS = "match"

Scored = Sequence[tuple[Question, QuestionResult]]


@dataclass(frozen=True)
class FitConfig:
    """The voter's fit settings (paper: mean pooling, bounds [0, 0.6], drop below t = 0.1)."""

    metrics: MetricOptions = field(default_factory=MetricOptions)
    pooling: str = DEFAULT_POOLING
    threshold: float = 0.1
    upper_bound: float = 0.6
    n_restarts: int = 6
    seed: int = 0

    def __post_init__(self) -> None:
        self.voter().config  # validates pooling, bounds, threshold now, not after the pool ran

    def voter(self) -> EoRVoter:
        return EoRVoter(pooling=self.pooling, threshold=self.threshold, upper_bound=self.upper_bound,
                        n_restarts=self.n_restarts, seed=self.seed)


def correctness(scored: Scored, pool: Sequence[str],
                g: Callable[[str, Sequence[str]], float] = match) -> np.ndarray:
    """y [N, M]: g(answer of retriever m, gold answers of question i); 0 where it cannot vote."""
    grid = answer_grid([r for _, r in scored], pool)
    return np.array([[g(a, q.answers) if a is not None else 0.0 for a in row]
                     for (q, _), row in zip(scored, grid)], dtype=np.float64).reshape(len(scored), len(pool))


@dataclass(frozen=True)
class FitReport:
    saved: SavedWeights
    train_accuracy: float  # Match of the voted answer with the fitted weights
    equal_weights_accuracy: float  # ... with equal weights (plain similarity voting)
    single_accuracy: dict[str, float]  # Match of every single retriever
    seconds: dict[str, float]


def fit_weights(scored: Scored, pool: Sequence[str], metrics: Sequence[PairSimilarity], config: FitConfig,
                questions_file: str, reader_model: str, extra: dict[str, Any] | None = None) -> FitReport:
    """Fit omega_s, omega_r on `scored` and package them with provenance.

    `extra` goes into the provenance (selection, seeds, time spent running the pool)."""
    if not scored:
        raise ValueError("no questions to fit on")
    pool = list(pool)
    t0 = time.perf_counter()
    X = similarity_inputs([r for _, r in scored], answer_grid([r for _, r in scored], pool), metrics)
    t1 = time.perf_counter()
    y = correctness(scored, pool)
    voter = config.voter().fit(X, y)
    t2 = time.perf_counter()
    seconds = {**(extra or {}).get("seconds", {}), "similarity": round(t1 - t0, 3), "fit": round(t2 - t1, 3)}
    prov = Provenance(
        questions_file=questions_file,
        n_questions=len(scored),
        reader_model=reader_model,
        objective=float(voter.objective_),
        extra={**(extra or {}), "correctness": CORRECTNESS, "nli_backend": config.metrics.nli_backend,
               "voter": {"n_restarts": config.n_restarts, "seed": config.seed}, "seconds": seconds},
    )
    saved = SavedWeights.from_voter(voter, pool, config.metrics.names, prov)
    base = equal_weights(pool, config.metrics.names, config.pooling, config.upper_bound, config.threshold)
    base_acc = float(chosen_correctness(base.voter().predict(X), y).mean())
    return FitReport(saved, float(voter.objective_), base_acc,
                     {spec: float(y[:, m].mean()) for m, spec in enumerate(pool)}, seconds)


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
    lines.append("time: " + ", ".join(f"{k} {v:.1f} s" for k, v in report.seconds.items()))
    return "\n".join(lines)
