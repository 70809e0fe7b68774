"""Fitted voter weights as JSON, with the pool they belong to and where they came from.

Weights are positional (omega_r[m] belongs to the m-th retriever spec), so a file records
the pool's spec strings in order and loading it for another pool is refused: silently
applying Wiki@10's weight to SE@1 would be a wrong answer, not an error. The same dict is
what `eor fit` pushes into the voter deployment's `user_config`.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Sequence

from voter.estimator import EoRVoter
from voter.voting import VoterWeights

FORMAT = "eor-voter-weights/1"


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


@dataclass(frozen=True)
class Provenance:
    """Where the weights came from."""

    questions_file: str
    n_questions: int
    reader_model: str
    objective: float  # training mean correctness of the voted answer
    date: str = field(default_factory=_now)
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class SavedWeights:
    """Everything needed to vote with fitted weights on a given pool."""

    pool: tuple[str, ...]
    metrics: tuple[str, ...]
    pooling: str
    threshold: float
    weights: VoterWeights
    provenance: Provenance
    sim_threshold: float = 0.5
    dropped_vote: bool = False
    upper_bound: float = 0.6

    def __post_init__(self) -> None:
        if len(set(self.pool)) != len(self.pool):
            raise ValueError(f"duplicate retriever specs in pool: {list(self.pool)}")
        if self.weights.n_retrievers != len(self.pool):
            raise ValueError(f"{self.weights.n_retrievers} retriever weights for a pool of {len(self.pool)}")
        if self.weights.n_metrics != len(self.metrics):
            raise ValueError(f"{self.weights.n_metrics} metric weights for metrics {list(self.metrics)}")

    @classmethod
    def from_voter(cls, voter: EoRVoter, pool: Sequence[str], metrics: Sequence[str], provenance: Provenance) -> "SavedWeights":
        w = voter._weights()
        return cls(
            pool=tuple(pool),
            metrics=tuple(metrics),
            pooling=voter.pooling,
            threshold=float(voter.threshold),
            weights=w,
            provenance=provenance,
            sim_threshold=float(voter.sim_threshold),
            dropped_vote=bool(voter.dropped_vote),
            upper_bound=float(voter.upper_bound),
        )

    def kept_specs(self) -> list[str]:
        """The retrievers that vote (omega_r >= threshold), in pool order."""
        return [s for s, k in zip(self.pool, self.weights.kept) if k]

    def dropped_specs(self) -> list[str]:
        return [s for s, k in zip(self.pool, self.weights.kept) if not k]

    def voter(self) -> EoRVoter:
        """A ready-to-vote EoRVoter carrying these weights."""
        return EoRVoter.from_weights(
            self.weights,
            pooling=self.pooling,
            threshold=self.threshold,
            sim_threshold=self.sim_threshold,
            dropped_vote=self.dropped_vote,
            upper_bound=self.upper_bound,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "pool": list(self.pool),
            "metrics": list(self.metrics),
            "pooling": self.pooling,
            "threshold": self.threshold,
            "sim_threshold": self.sim_threshold,
            "dropped_vote": self.dropped_vote,
            "upper_bound": self.upper_bound,
            "weights": {
                "metric_weights": list(self.weights.metric_weights),
                "retriever_weights": list(self.weights.retriever_weights),
                "kept": list(self.weights.kept),
            },
            "provenance": asdict(self.provenance),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "SavedWeights":
        if d.get("format") != FORMAT:
            raise ValueError(f"not a voter weights file (format {d.get('format')!r}, expected {FORMAT!r})")
        w = d["weights"]
        return cls(
            pool=tuple(d["pool"]),
            metrics=tuple(d["metrics"]),
            pooling=d["pooling"],
            threshold=float(d["threshold"]),
            weights=VoterWeights(
                metric_weights=tuple(float(x) for x in w["metric_weights"]),
                retriever_weights=tuple(float(x) for x in w["retriever_weights"]),
                kept=tuple(bool(x) for x in w["kept"]),
            ),
            provenance=Provenance(**d["provenance"]),
            sim_threshold=float(d.get("sim_threshold", 0.5)),
            dropped_vote=bool(d.get("dropped_vote", False)),
            upper_bound=float(d.get("upper_bound", 0.6)),
        )


def _differences(what: str, saved: Sequence[str], current: Sequence[str]) -> str | None:
    saved, current = list(saved), list(current)
    if saved == current:
        return None
    parts = []
    missing = [s for s in saved if s not in current]
    extra = [s for s in current if s not in saved]
    if missing:
        parts.append(f"fitted on but not in this {what}: {missing}")
    if extra:
        parts.append(f"in this {what} but not fitted: {extra}")
    if not missing and not extra:
        moved = [f"{i}: fitted {a!r}, now {b!r}" for i, (a, b) in enumerate(zip(saved, current)) if a != b]
        parts.append(f"same entries in a different order ({'; '.join(moved)})")
    return f"the weights were fitted for a different {what}: " + "; ".join(parts)


def check_compatible(saved: SavedWeights, pool: Sequence[str] | None = None, metrics: Sequence[str] | None = None) -> None:
    """Raise ValueError naming the differences if `pool` / `metrics` differ from the saved ones."""
    problems = []
    if pool is not None:
        problems.append(_differences("retriever pool", saved.pool, pool))
    if metrics is not None:
        problems.append(_differences("metric list", saved.metrics, metrics))
    problems = [p for p in problems if p]
    if problems:
        raise ValueError(". ".join(problems) + ". Refit the voter (eor fit) for this configuration.")


def save_weights(path: str | Path, saved: SavedWeights) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(saved.to_dict(), indent=2) + "\n")
    tmp.replace(path)  # atomic: a running system never reads half a file
    return path


def load_weights(
    path: str | Path, pool: Sequence[str] | None = None, metrics: Sequence[str] | None = None
) -> SavedWeights:
    """Load weights; with `pool` / `metrics` given, refuse (ValueError) if they differ."""
    saved = SavedWeights.from_dict(json.loads(Path(path).read_text()))
    check_compatible(saved, pool, metrics)
    return saved
