"""A round compared with its baseline round, paired on the same instances.

Rounds of `--every` re-run the same plan (same questions, seed and perturbations, so the
same instance ids and perturbed texts): each instance is a pair (robust in the baseline
round, robust now) per system. A drop is reported only when it is real: more instances lost
than gained, and a two-sided exact sign test over the instances that changed says p < alpha.
The regression gauges and the alert rules (deploy/alerts.yml) read this; and
`confidence_drop`: the deployed path's mean P(right) on the same instances, baseline minus now
(a drop on unchanged inputs is calibration drift, or a changed system).

    drop = compare(suite_module.outcomes(baseline_records), suite_module.outcomes(records))
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Mapping, Sequence

from fitting.paired import sign_test  # SciPy's exact test; the one home, shared with the fit's reports

ALPHA = 0.05  # the sign test's level for calling a drop real


@dataclass(frozen=True)
class Drop:
    """One system's change from the baseline round, over the instances both rounds scored."""

    system: str
    paired: int  # instances scored in both rounds
    lost: int  # robust in the baseline, not now
    gained: int  # the other way
    baseline: float  # share robust in the baseline round (paired instances)
    current: float
    p_value: float  # two-sided exact sign test, lost vs gained
    regression: bool  # a real drop: lost > gained and p < alpha

    @property
    def points(self) -> float:
        """Baseline minus current, in percentage points (> 0: worse now)."""
        return 100.0 * (self.baseline - self.current)

    def to_dict(self) -> dict:
        return {**asdict(self), "points": self.points}


def compare(baseline: Mapping[str, Mapping[str, bool]], current: Mapping[str, Mapping[str, bool]],
            alpha: float = ALPHA) -> dict[str, Drop]:
    """Per system, its paired change (instance id -> system -> robust, as `outcomes` gives)."""
    systems = sorted({s for per in current.values() for s in per})
    out = {}
    for s in systems:
        pairs = [(baseline[i][s], current[i][s]) for i in current if i in baseline and s in baseline[i] and s in current[i]]
        lost = sum(1 for b, c in pairs if b and not c)
        gained = sum(1 for b, c in pairs if c and not b)
        n = len(pairs)
        p = sign_test(lost, gained)
        out[s] = Drop(s, n, lost, gained, sum(b for b, _ in pairs) / n if n else 0.0,
                      sum(c for _, c in pairs) / n if n else 0.0, p, lost > gained and p < alpha)
    return out


def confidence_drop(baseline: Sequence[Mapping], current: Sequence[Mapping]) -> dict:
    """The deployed path's mean confidence over the instances both rounds asked with one
    (records by instance id: `id`, else qid/perturbation/variant), baseline minus current."""
    def by_id(records: Sequence[Mapping]) -> dict[str, float]:
        return {r.get("id") or f"{r['qid']}/{r['perturbation']}/{r['variant']}": float(r["deployed"]["confidence"])
                for r in records if (r.get("deployed") or {}).get("confidence") is not None}
    base, cur = by_id(baseline), by_id(current)
    paired = sorted(set(base) & set(cur))
    if not paired:
        return {"paired": 0, "baseline": None, "current": None, "drop": 0.0}
    b, c = sum(base[i] for i in paired) / len(paired), sum(cur[i] for i in paired) / len(paired)
    return {"paired": len(paired), "baseline": b, "current": c, "drop": b - c}


def baseline_round(out: Path, current: Path) -> Path | None:
    """The round a round is compared with: `OUT/baseline` when it holds a finished round (a
    copy or a link an operator set), else the first finished round under OUT/runs."""
    pinned = out / "baseline"
    if (pinned / "results.jsonl").exists() and pinned.resolve() != current.resolve():
        return pinned
    runs = out / "runs"
    if not runs.exists():
        return None
    done = sorted(p for p in runs.iterdir() if p.is_dir() and (p / "report.json").exists() and p != current)
    return done[0] if done else None
