"""The voter file: everything the live ensemble needs, as one versioned JSON document.

`eor-voter/5` is `eor-voter/4` (adaptive model and calibrator optional, as in /2 to /4) that names
its readers: `readers` maps every reader its members name (`Wiki@10~1.5B`: reader "1.5B",
retrievers/spec.py) to the model it was fitted with, the default reader under "" (the
provenance's reader_model), and `fallback` optionally holds a complete single-reader voter (the
body of a voter file whose members are all read by the default reader) that a system lacking one
of those readers may run instead (voter/question_vote.py: choose_voter). A voter read by the
default reader alone, without a fallback, is still written in its older format, so its id does
not change; older files read as readers {"": provenance.reader_model}.

`eor-voter/4` is `eor-voter/3` whose adaptive model has a calibrator (voter/calibration.py) and
stop thresholds on the calibrated P; a new format, so that a service that cannot calibrate
refuses it rather than reading those thresholds against the raw P.

`eor-voter/3` is `eor-voter/2` plus, optionally, the confidence-aware adaptive model
(voter/adaptive_model.py: its rounds, its answer scorer and its stop thresholds); a voter without one
is still written and read as `eor-voter/2`, so its id does not change.

`eor-voter/2`: w_s per metric, w_r per retriever with the kept ones (w_r >= t; the others
never run), pooling, the metric list, the cascade (kept retrievers in rounds and the fitted
stop thresholds, voter/cascade.py), the reader it was fitted with, and what it was fitted on
(question file and its sha256, split, seed, n). `eor-voter-weights/1` files (no cascade)
still load: their kept retrievers run as one round.

Weights are positional (omega_r[m] belongs to the m-th retriever spec), so a file records
the pool's spec strings in order and loading it for another pool is refused: silently
applying Wiki@10's weight to SE@1 would be a wrong answer, not an error. The same dict is
what `eor fit` pushes into the voter deployment's `user_config`.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping, Sequence

from retrievers.spec import DEFAULT_READER_NAME, split_reader
from voter.adaptive_model import AdaptiveModel
from voter.cascade import Cascade
from voter.estimator import EoRVoter, VoterConfig
from voter.voting import VoterWeights

# The voter the repository ships: fitted on ../shared/data's NQ dev rows (fit split) with the
# default reader, by `eor fit` (docs/benchmarks.md). Every entry point uses it by default.
SHIPPED_VOTER = Path(__file__).resolve().parent / "data" / "voter.json"

FORMAT_V5 = "eor-voter/5"  # naming readers besides the default one, or with a single-reader fallback
FORMAT_V4 = "eor-voter/4"  # with an adaptive model and the calibrator of its P(right)
FORMAT = "eor-voter/3"  # with an adaptive model
FORMAT_V2 = "eor-voter/2"  # without one
FORMATS = (FORMAT_V5, FORMAT_V4, FORMAT, FORMAT_V2, "eor-voter-weights/1")


def member_readers(pool: Sequence[str]) -> list[str]:
    """The readers a pool's members name, the default ("") first, then in pool order."""
    return list(dict.fromkeys([DEFAULT_READER_NAME, *(split_reader(s)[1] for s in pool)]))


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
    sim_threshold: float = VoterConfig.sim_threshold
    dropped_vote: bool = VoterConfig.dropped_vote
    upper_bound: float = VoterConfig.upper_bound
    cascade: Cascade | None = None  # None: the kept retrievers in one round
    # the confidence-aware model: when set, its rounds are the cascade's and its scorer votes and stops
    adaptive: AdaptiveModel | None = None
    # reader name -> model id, for the readers its members name that it knows ("": the default
    # reader, always provenance.reader_model); others given are dropped
    readers: Mapping[str, str] = field(default_factory=dict)
    fallback: "SavedWeights | None" = None  # a single-reader voter to run where a reader is missing

    def __post_init__(self) -> None:
        self._check_readers()
        if self.cascade is not None:
            kept = set(self.kept_specs())
            if set(self.cascade.specs) != kept:
                raise ValueError(f"the cascade's retrievers {sorted(self.cascade.specs)} are not the kept "
                                 f"retrievers {sorted(kept)}")
        if len(set(self.pool)) != len(self.pool):
            raise ValueError(f"duplicate retriever specs in pool: {list(self.pool)}")
        if self.weights.n_retrievers != len(self.pool):
            raise ValueError(f"{self.weights.n_retrievers} retriever weights for a pool of {len(self.pool)}")
        if self.weights.n_metrics != len(self.metrics):
            raise ValueError(f"{self.weights.n_metrics} metric weights for metrics {list(self.metrics)}")

    def _check_readers(self) -> None:
        """Normalise `readers` (the default reader from the provenance, only readers the members
        name, in their order) and check that a fallback is a single-reader voter."""
        default = self.provenance.reader_model
        given = dict(self.readers)
        if not all(isinstance(n, str) and isinstance(m, str) for n, m in given.items()):
            raise ValueError("readers must map reader names to model ids (strings)")
        if given.get(DEFAULT_READER_NAME, default) != default:
            raise ValueError(f"readers[''] is {given[DEFAULT_READER_NAME]!r}, but the voter was fitted with reader "
                             f"{default!r} (provenance.reader_model)")
        given[DEFAULT_READER_NAME] = default
        object.__setattr__(self, "readers", {n: given[n] for n in member_readers(self.pool) if n in given})
        fb = self.fallback
        if fb is not None and (fb.fallback is not None or member_readers(fb.pool) != [DEFAULT_READER_NAME]):
            raise ValueError("fallback: a single-reader voter (members read by the default reader, no fallback of "
                             "its own)")

    @property
    def named_readers(self) -> list[str]:
        """The readers its members name ("" : the default), whether or not it records their models."""
        return member_readers(self.pool)

    @classmethod
    def from_voter(cls, voter: EoRVoter, pool: Sequence[str], metrics: Sequence[str], provenance: Provenance,
                   readers: Mapping[str, str] | None = None) -> "SavedWeights":
        """`readers`: the models of the readers it was fitted with (the pool's, by name)."""
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
            readers=dict(readers or {}),
        )

    def kept_specs(self) -> list[str]:
        """The retrievers that vote (omega_r >= threshold), in pool order."""
        return [s for s, k in zip(self.pool, self.weights.kept) if k]

    def dropped_specs(self) -> list[str]:
        return [s for s, k in zip(self.pool, self.weights.kept) if not k]

    @property
    def cascade_to_run(self) -> Cascade:
        """The cascade to run: the adaptive model's rounds and stop thresholds (on its confidence),
        else the fitted margin cascade, else every kept retriever in one round (the whole pool
        when none is kept: the vote's own fallback is every retriever that answered). Which
        statistic the thresholds read is voter/decision.py's business."""
        if self.adaptive is not None:
            return self.adaptive.cascade
        return self.cascade or Cascade.single_round(self.kept_specs() or self.pool)

    @property
    def confidence_kind(self) -> str:
        """What `confidence` is with this voter: "calibrated", "raw" (the scorer's P, a voter
        file without a calibrator) or "none" (no answer scorer: a margin-cascade voter)."""
        if self.adaptive is None:
            return "none"
        return "raw" if self.adaptive.calibrator is None else "calibrated"

    def with_cascade(self, cascade: Cascade | None) -> "SavedWeights":
        return replace(self, cascade=cascade)

    @property
    def digest(self) -> str:
        """Short content hash: names this voter in replies, logs and metrics."""
        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()[:12]

    @property
    def fitted(self) -> bool:
        return self.provenance.n_questions > 0

    def describe(self) -> str:
        """One line a user reads: which voter answered."""
        if not self.fitted:
            return f"equal weights ({len(self.pool)} retrievers, no fit)"
        p = self.provenance
        reader = ", ".join(f"{n} {m}" if n else m for n, m in self.readers.items())  # "M, 1.5B M15"
        rounds = len(self.cascade_to_run.rounds)
        if self.adaptive is not None:
            n = len(self.cascade_to_run.specs)
            kind = "confidence-aware, calibrated" if self.adaptive.calibrator is not None else "confidence-aware"
            seen = f", {'+'.join(self.adaptive.preview)} as a stream's preview" if self.adaptive.preview else ""
            return (f"fitted voter {self.digest} (reader {reader}, {p.n_questions} questions; {kind}: "
                    f"{n} of {len(self.pool)} retrievers in {rounds} round{'s' * (rounds > 1)}{seen})")
        return (f"fitted voter {self.digest} (reader {reader}, {p.n_questions} questions; "
                f"{len(self.kept_specs())} of {len(self.pool)} retrievers in {rounds} stage{'s' * (rounds > 1)})")

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

    @property
    def records_readers(self) -> bool:
        """Whether it needs the readers section (eor-voter/5): another reader, or a fallback."""
        return list(self.readers) != [DEFAULT_READER_NAME] or self.fallback is not None

    def to_dict(self) -> dict[str, Any]:
        d = {
            "format": FORMAT_V5 if self.records_readers else FORMAT_V2 if self.adaptive is None
            else FORMAT if self.adaptive.calibrator is None else FORMAT_V4,
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
            "cascade": self.cascade.to_dict() if self.cascade else None,
            "provenance": asdict(self.provenance),
        }
        if self.adaptive is not None:
            d["adaptive"] = self.adaptive.to_dict(self.pool)
        if self.records_readers:
            d["readers"] = dict(self.readers)
        if self.fallback is not None:
            d["fallback"] = self.fallback.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: Any) -> "SavedWeights":
        """A voter dict, checked: anything that is not one is a ValueError naming what is wrong."""
        if not isinstance(d, dict):
            raise ValueError(f"a voter file is a JSON object, got {type(d).__name__}")
        if d.get("format") not in FORMATS:
            raise ValueError(f"not a voter file (format {d.get('format')!r}, expected one of {list(FORMATS)})")
        try:
            return cls._from_dict(d)
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"malformed voter file: {type(exc).__name__}: {exc}") from None
        except ValueError as exc:
            raise ValueError(f"malformed voter file: {exc}") from None

    @classmethod
    def _from_dict(cls, d: dict[str, Any]) -> "SavedWeights":
        import math

        from voter.voting import VoteRule

        w = d["weights"]
        cascade = d.get("cascade")
        numbers = [*w["metric_weights"], *w["retriever_weights"], d["threshold"], d.get("sim_threshold", 0.5),
                   d.get("upper_bound", 0.6)]
        if not all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in numbers):
            raise ValueError("weights and thresholds must be finite numbers")
        if not all(isinstance(x, str) for x in (*d["pool"], *d["metrics"])) or not isinstance(d["pooling"], str):
            raise ValueError("pool, metrics and pooling must be strings")
        VoteRule(d["pooling"])  # an unknown pooling fails here, not on the first vote
        p = d["provenance"]
        if not (isinstance(p.get("n_questions"), int) and isinstance(p.get("reader_model"), str)
                and isinstance(p.get("questions_file"), str) and isinstance(p.get("extra", {}), dict)):
            raise ValueError("provenance: n_questions must be an integer, reader_model and questions_file "
                             "strings, extra an object")
        kept = [float(x) >= float(d["threshold"]) for x in w["retriever_weights"]]
        if [bool(x) for x in w["kept"]] != kept:
            raise ValueError("'kept' does not match the retriever weights and the threshold")
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
            cascade=Cascade.from_dict(cascade) if cascade is not None else None,
            adaptive=AdaptiveModel.from_dict(d["adaptive"], d["pool"]) if d.get("adaptive") is not None else None,
            **cls._readers_from_dict(d),
        )

    @classmethod
    def _readers_from_dict(cls, d: dict[str, Any]) -> dict[str, Any]:
        """An eor-voter/5 file's readers (every reader its members name, with its model) and
        fallback; nothing for older formats (their readers: the provenance's reader alone)."""
        if d["format"] != FORMAT_V5:
            return {}
        readers = d["readers"]
        if not isinstance(readers, dict):
            raise ValueError("readers must map reader names to model ids")
        unknown = [n for n in member_readers(d["pool"]) if n and n not in readers]
        if unknown:
            raise ValueError(f"readers: no model recorded for reader(s) {unknown} its retrievers name")
        fallback = None
        if d.get("fallback") is not None:
            try:
                fallback = cls.from_dict(d["fallback"])
            except ValueError as exc:
                raise ValueError(f"fallback: {str(exc).removeprefix('malformed voter file: ')}") from None
        return {"readers": readers, "fallback": fallback}


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
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not JSON ({exc})") from None
    try:
        saved = SavedWeights.from_dict(data)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None
    check_compatible(saved, pool, metrics)
    return saved


def file_sha256(path: str | Path) -> str:
    """What a voter records of the question file it was fitted on."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()
