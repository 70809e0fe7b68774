"""`eor eval`: EoR against every single retriever, per dataset (the paper's Table 1 + Figure 5).

For each dataset (and "all" when there are several): EM, token F1 and Match of EoR and of
every retriever; MRLR (eq. 3, Match-correctness) over the pool of single retrievers with
EoR as one more column, so EoR's MRLR is comparable with the best single retriever's; the
oracle upper bound of the pool (a question counts if any retriever gets it right); the RWR
matrix behind the Figure 1 heatmap. A failed retriever, or EoR with no answer, scores 0.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from serve.fitting import CORRECTNESS, Scored
from serve.voting import Vote, answer_grid
from voter.qa_metrics import exact_match, match, mrlr, oracle_upper_bound, rwr_matrix, token_f1
from voter.weights_io import SavedWeights

EOR = "EoR"
ALL = "all"


def _clean(x: float) -> float | None:
    return None if x is None or not math.isfinite(x) else round(float(x), 6)


@dataclass(frozen=True)
class SystemScores:
    em: float
    f1: float
    match: float
    mrlr: float  # NaN when the system got nothing wrong (MRLR undefined)

    def to_dict(self) -> dict[str, float | None]:
        return {"em": _clean(self.em), "f1": _clean(self.f1), "match": _clean(self.match), "mrlr": _clean(self.mrlr)}


@dataclass(frozen=True)
class DatasetReport:
    dataset: str
    n: int
    systems: dict[str, SystemScores]  # EoR first, then the pool in order
    best_single: str  # highest Match, ties to the earlier retriever in the pool
    oracle: float
    rwr_labels: tuple[str, ...]  # the pool, then EoR
    rwr: np.ndarray = field(repr=False)  # [M+1, M+1], RWR(row, column)

    def to_dict(self) -> dict[str, Any]:
        eor, best = self.systems[EOR], self.systems[self.best_single]
        return {
            "n": self.n,
            "systems": {k: v.to_dict() for k, v in self.systems.items()},
            "best_single": self.best_single,
            "eor_vs_best_single": {"match": [_clean(eor.match), _clean(best.match)],
                                   "mrlr": [_clean(eor.mrlr), _clean(best.mrlr)]},
            "oracle": _clean(self.oracle),
            "rwr": {"labels": list(self.rwr_labels),
                    "matrix": [[_clean(x) for x in row] for row in self.rwr]},
        }


def _dataset_report(name: str, golds: list[Sequence[str]], answers: list[list[str]], pool: Sequence[str]) -> DatasetReport:
    """answers[i] = [answer of each pool retriever..., EoR's answer] ('' when none)."""
    labels = (*pool, EOR)
    n = len(golds)
    table = {fn.__name__: np.array([[fn(a, g) for a in row] for row, g in zip(answers, golds)],
                                   dtype=np.float64).reshape(n, len(labels))
             for fn in (exact_match, token_f1, match)}
    ok = table["match"]
    mr = mrlr(ok)
    per = {lab: SystemScores(table["exact_match"][:, j].mean(), table["token_f1"][:, j].mean(),
                             ok[:, j].mean(), mr[j]) for j, lab in enumerate(labels)}
    systems = {EOR: per[EOR], **{s: per[s] for s in pool}}
    best = max(pool, key=lambda s: (per[s].match, -list(pool).index(s)))
    return DatasetReport(name, n, systems, best, oracle_upper_bound(ok[:, : len(pool)]), labels, rwr_matrix(ok))


def evaluate(scored: Scored, votes: Sequence[Vote], pool: Sequence[str]) -> list[DatasetReport]:
    """One report per dataset (sorted), then "all" if there is more than one dataset."""
    if len(scored) != len(votes):
        raise ValueError(f"{len(votes)} votes for {len(scored)} questions")
    pool = list(pool)
    grid = answer_grid([r for _, r in scored], pool)  # None: failed / no answer -> scores 0
    rows = [[a or "" for a in answers] + [v.answer] for answers, v in zip(grid, votes)]
    groups: dict[str, list[int]] = {}
    for i, (q, _) in enumerate(scored):
        groups.setdefault(q.dataset, []).append(i)
    names = sorted(groups) + ([ALL] if len(groups) > 1 else [])
    groups[ALL] = list(range(len(scored)))
    return [_dataset_report(name, [scored[i][0].answers for i in groups[name]], [rows[i] for i in groups[name]], pool)
            for name in names]


def weights_summary(saved: SavedWeights, source: str) -> dict[str, Any]:
    w = saved.weights
    return {"source": source, "metrics": list(saved.metrics), "pooling": saved.pooling,
            "metric_weights": dict(zip(saved.metrics, w.metric_weights)),
            "retriever_weights": dict(zip(saved.pool, w.retriever_weights)),
            "dropped": saved.dropped_specs()}


def report_dict(reports: Sequence[DatasetReport], saved: SavedWeights, source: str,
                plots: Sequence[str] = (), selection: dict | None = None) -> dict[str, Any]:
    return {"correctness": CORRECTNESS, "selection": selection or {}, "weights": weights_summary(saved, source),
            "datasets": {r.dataset: r.to_dict() for r in reports}, "plots": list(plots)}


def _fmt(x: float) -> str:
    return "   -  " if not math.isfinite(x) else f"{x:6.3f}"


def format_table(report: DatasetReport) -> str:
    lines = [f"dataset {report.dataset} (n={report.n})",
             f"  {'system':<20} {'EM':>6} {'F1':>6} {'Match':>6} {'MRLR':>6}"]
    for name, s in report.systems.items():
        mark = " *" if name == report.best_single else ""
        lines.append(f"  {name:<20} {_fmt(s.em)} {_fmt(s.f1)} {_fmt(s.match)} {_fmt(s.mrlr)}{mark}")
    eor, best = report.systems[EOR], report.systems[report.best_single]
    lines.append(f"  EoR vs best single ({report.best_single}, *): Match {_fmt(eor.match).strip()} vs "
                 f"{_fmt(best.match).strip()}, MRLR {_fmt(eor.mrlr).strip()} vs {_fmt(best.mrlr).strip()}; "
                 f"oracle of the pool {_fmt(report.oracle).strip()}")
    return "\n".join(lines)
