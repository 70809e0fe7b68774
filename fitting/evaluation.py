"""`eor eval`'s tables: EoR against every single retriever, per dataset (the paper's Table 1 + Figure 5).

For each dataset (and "all" when there are several): EM, token F1, Match (whole tokens: what is
fitted and judged) and BERGEN's substring Match (the papers' figure, beside) of EoR and of
every retriever; MRLR (eq. 3, Match-correctness) over the pool of single retrievers with
EoR as one more column, so EoR's MRLR is comparable with the best single retriever's; the
oracle upper bound of the pool (a question counts if any retriever gets it right); the RWR
matrix behind the Figure 1 heatmap. A failed retriever, or EoR with no answer, scores 0.

And how sure EoR is (`confidence_report`): the reliability bins and ECE of the confidence its
answers carry, and the risk-coverage table (Match of the answers kept when only the most
confident 100/80/50/20% are answered) beside the best single retriever's, ranked by its own
mean token log-probability.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from fitting.measures import (COVERAGES, ECE_BINS, ece_interval, ece_sampling_floor, expected_calibration_error,
                              reliability, risk_coverage)
from fitting.paired import sign_test
from fitting.questions import CORRECTNESS, Scored, right, substring_match
from retrievers.types import ReaderTokens
from voter.qa_metrics import exact_match, mrlr, oracle_upper_bound, rwr_matrix, token_f1
from voter.question_vote import Vote, answer_grid
from voter.weights_io import SavedWeights

if TYPE_CHECKING:
    from fitting.replay import EnsembleRuns


EOR = "EoR"  # what the voter gives by default: adaptive EoR (its cascade, early stop)
EOR_PRUNED = "EoR pruned"  # every kept retriever, no early stop
EOR_ALL = "EoR-all equal"  # every pool member, equal weights (the unfitted paper ensemble: EoR-16 on its pool)
ALL = "all"


def _clean(x: float) -> float | None:
    return None if x is None or not math.isfinite(x) else round(float(x), 6)


@dataclass(frozen=True)
class SystemScores:
    em: float
    f1: float
    match: float  # whole tokens
    mrlr: float  # NaN when the system got nothing wrong (MRLR undefined)
    tokens: ReaderTokens | None = None  # mean reader tokens per question (None: not recorded)
    match_substring: float = math.nan  # BERGEN's

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"em": _clean(self.em), "f1": _clean(self.f1), "match": _clean(self.match),
                             "match_substring": _clean(self.match_substring), "mrlr": _clean(self.mrlr)}
        if self.tokens is not None:
            t = self.tokens
            d["tokens"] = {"prompt": t.prompt, "cached": t.cached, "generated": t.generated, "computed": t.computed}
        return d


@dataclass(frozen=True)
class DatasetReport:
    dataset: str
    n: int
    systems: dict[str, SystemScores]  # EoR first, then the pool in order
    best_single: str  # highest Match, ties to the earlier retriever in the pool
    oracle: float
    rwr_labels: tuple[str, ...]  # the pool, then EoR
    rwr: np.ndarray = field(repr=False)  # [M+1, M+1], RWR(row, column)
    # metric (em, f1, match, match_substring) -> [questions, systems] per-question scores, columns as `labels`
    scores: dict[str, np.ndarray] = field(repr=False)
    labels: tuple[str, ...]
    baseline: str | None = None  # a pair named before the run (the fit split's best single)

    def versus(self, other: str) -> dict[str, dict[str, Any]]:
        """EoR against `other`, paired on these questions, for each of EM, F1 and both Matches: the
        questions where EoR scored higher, where `other` did, and the two-sided sign test."""
        eor, j = self.labels.index(EOR), self.labels.index(other)
        out = {}
        for metric, table in self.scores.items():
            wins, losses = int((table[:, eor] > table[:, j]).sum()), int((table[:, j] > table[:, eor]).sum())
            out[metric] = {"eor": _clean(float(table[:, eor].mean())), "other": _clean(float(table[:, j].mean())),
                           "eor_higher": wins, "other_higher": losses, "sign_test_p": _clean(sign_test(wins, losses))}
        return out

    @property
    def paired(self) -> tuple[int, int]:
        """Questions only EoR got right, only the best single got right (Match)."""
        v = self.versus(self.best_single)["match"]
        return v["eor_higher"], v["other_higher"]

    @property
    def sign_test_p(self) -> float:
        """EoR vs the best single, paired on the same questions (the best single is picked on
        these very questions, so the test is against the hardest baseline there is)."""
        return sign_test(*self.paired)

    def to_dict(self) -> dict[str, Any]:
        eor, best = self.systems[EOR], self.systems[self.best_single]
        return {
            "n": self.n,
            "systems": {k: v.to_dict() for k, v in self.systems.items()},
            "best_single": self.best_single,
            "eor_vs_best_single": {"match": [_clean(eor.match), _clean(best.match)],
                                   "mrlr": [_clean(eor.mrlr), _clean(best.mrlr)],
                                   "eor_only_right": self.paired[0], "best_single_only_right": self.paired[1],
                                   "sign_test_p": _clean(self.sign_test_p)},
            "eor_vs": {name: self.versus(name) for name in dict.fromkeys(
                [self.best_single, *([self.baseline] if self.baseline else [])])},
            "baseline": self.baseline,
            "oracle": _clean(self.oracle),
            "rwr": {"labels": list(self.rwr_labels),
                    "matrix": [[_clean(x) for x in row] for row in self.rwr]},
        }


def _mean_tokens(rows: Sequence[ReaderTokens]) -> ReaderTokens | None:
    if not rows or not any(t.total for t in rows):
        return None
    n = len(rows)
    return ReaderTokens(round(sum(t.prompt for t in rows) / n), round(sum(t.generated for t in rows) / n),
                        round(sum(t.cached for t in rows) / n))


def _dataset_report(name: str, golds: list[Sequence[str]], answers: list[list[str]], pool: Sequence[str],
                    ensembles: Sequence[str] = (EOR,),
                    tokens: dict[str, list[ReaderTokens]] | None = None, baseline: str | None = None) -> DatasetReport:
    """answers[i] = [answer of each pool retriever..., then each ensemble's answer] ('' when none).
    MRLR of a single retriever is over the pool and the first ensemble (adaptive EoR); of an
    ensemble, over the pool and that ensemble."""
    labels = (*pool, *ensembles)
    n, m = len(golds), len(pool)
    table = {name: np.array([[fn(a, g) for a in row] for row, g in zip(answers, golds)],
                            dtype=np.float64).reshape(n, len(labels))
             for name, fn in (("em", exact_match), ("f1", token_f1), ("match", right),
                              ("match_substring", substring_match))}
    ok = table["match"]
    main_cols = list(range(m + 1))
    mr = {lab: v for lab, v in zip(labels[: m + 1], mrlr(ok[:, main_cols]))}
    for j, lab in enumerate(ensembles[1:], m + 1):
        mr[lab] = mrlr(ok[:, list(range(m)) + [j]])[-1]
    tokens = tokens or {}
    per = {lab: SystemScores(table["em"][:, j].mean(), table["f1"][:, j].mean(),
                             ok[:, j].mean(), mr[lab], _mean_tokens(tokens.get(lab, ())),
                             table["match_substring"][:, j].mean())
           for j, lab in enumerate(labels)}
    systems = {**{e: per[e] for e in ensembles}, **{s: per[s] for s in pool}}
    best = max(pool, key=lambda s: (per[s].match, -list(pool).index(s)))
    return DatasetReport(name, n, systems, best, oracle_upper_bound(ok[:, :m]), labels[: m + 1],
                         rwr_matrix(ok[:, main_cols]), table, labels, baseline)


def evaluate(scored: Scored, votes: Sequence[Vote] | dict[str, Sequence[str]], pool: Sequence[str],
             ensemble_tokens: dict[str, Sequence[ReaderTokens]] | None = None,
             baseline: str | None = None) -> list[DatasetReport]:
    """One report per dataset (sorted), then "all" if there is more than one dataset.

    `votes`: EoR's votes, or {ensemble name: its answer per question} (adaptive first);
    `ensemble_tokens`: reader tokens per question of each ensemble (singles come from the results);
    `baseline`: a pool member named before the run (the fit split's best single), paired with EoR
    beside the best single picked after the fact."""
    if baseline is not None and baseline not in pool:
        raise ValueError(f"baseline {baseline!r} is not in the pool")
    ensembles = {EOR: [v.answer for v in votes]} if not isinstance(votes, dict) else dict(votes)
    for name, answers in ensembles.items():
        if len(answers) != len(scored):
            raise ValueError(f"{len(answers)} {name} answers for {len(scored)} questions")
    pool = list(pool)
    rows = _answer_rows(scored, ensembles, pool)
    tokens: dict[str, list[ReaderTokens]] = {s: [r.reader_tokens({s}) for _, r in scored] for s in pool}
    tokens.update({k: list(v) for k, v in (ensemble_tokens or {}).items()})
    groups: dict[str, list[int]] = {}
    for i, (q, _) in enumerate(scored):
        groups.setdefault(q.dataset, []).append(i)
    names = sorted(groups) + ([ALL] if len(groups) > 1 else [])
    groups[ALL] = list(range(len(scored)))
    return [_dataset_report(name, [scored[i][0].answers for i in groups[name]], [rows[i] for i in groups[name]], pool,
                            tuple(ensembles), {k: [v[i] for i in groups[name]] for k, v in tokens.items()}, baseline)
            for name in names]


def _answer_rows(scored: Scored, ensembles: dict[str, Sequence[str]], pool: Sequence[str]) -> list[list[str]]:
    """Each question's answers: the pool's in order ('' where it failed or gave none), then each ensemble's."""
    grid = answer_grid([r for _, r in scored], list(pool))
    return [[a or "" for a in answers] + [ensembles[e][i] for e in ensembles] for i, answers in enumerate(grid)]


def question_records(scored: Scored, votes: dict[str, Sequence[str]], pool: Sequence[str]) -> list[dict[str, Any]]:
    """One record a question (`eor eval`'s questions.jsonl): its id and dataset, each system's answer and Match,
    EM and F1, so that two evals of the same questions (two indexes, two configurations) can be paired."""
    labels = [*pool, *votes]
    out = []
    for (q, _), row in zip(scored, _answer_rows(scored, dict(votes), pool)):
        out.append({"qid": q.qid, "dataset": q.dataset, "answers": dict(zip(labels, row)),
                    **{name: {lab: _clean(fn(a, q.answers)) for lab, a in zip(labels, row)}
                       for name, fn in (("match", right), ("em", exact_match), ("f1", token_f1))}})
    return out


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
    lines = [f"dataset {report.dataset} (n={report.n}); reader tokens per question: prompt (prefix-cache hits), "
             "generated",
             f"  {'system':<20} {'EM':>6} {'F1':>6} {'Match':>6} {'substr':>6} {'MRLR':>6} {'prompt':>7} {'(hits)':>7} "
             f"{'gen':>5}"]
    for name, s in report.systems.items():
        mark = " *" if name == report.best_single else ""
        t = s.tokens
        toks = f" {t.prompt:>7} {f'({t.cached})':>7} {t.generated:>5}" if t is not None else ""
        lines.append(f"  {name:<20} {_fmt(s.em)} {_fmt(s.f1)} {_fmt(s.match)} {_fmt(s.match_substring)} "
                     f"{_fmt(s.mrlr)}{toks}{mark}")
    eor, best = report.systems[EOR], report.systems[report.best_single]
    lines.append(f"  EoR vs best single ({report.best_single}, *): Match {_fmt(eor.match).strip()} vs "
                 f"{_fmt(best.match).strip()}, MRLR {_fmt(eor.mrlr).strip()} vs {_fmt(best.mrlr).strip()}; "
                 f"oracle of the pool {_fmt(report.oracle).strip()}")
    others = {report.best_single: "best single after the fact"}
    if report.baseline:
        others[report.baseline] = ", ".join(filter(None, [others.get(report.baseline), "named before the run"]))
    for other, why in others.items():
        vs = report.versus(other)
        lines.append(f"  EoR vs {other} ({why}), paired: " + "; ".join(
            f"{m} {v['eor_higher']} higher vs {v['other_higher']}, p = {v['sign_test_p']:.3g}"
            for m, v in (("Match", vs["match"]), ("EM", vs["em"]), ("F1", vs["f1"]))))
    return "\n".join(lines)


def confidence_report(scored: Scored, runs: EnsembleRuns, best_single: str,
                      rows: Sequence[int] | None = None) -> dict[str, Any]:
    """How sure EoR is, on these questions (`rows` of them: one dataset's): reliability bins and
    ECE of its confidence (when the voter gives one), and the risk-coverage table beside
    `best_single`'s, that retriever's answers ranked by its own mean token log-probability
    (unknown: least sure)."""
    rows = list(range(len(scored))) if rows is None else list(rows)
    answers = [runs.answers[EOR][i] for i in rows]
    conf = None if runs.confidence is None else [runs.confidence[i] for i in rows]
    scored = [scored[i] for i in rows]
    golds = [q.answers for q, _ in scored]
    ok = [right(a, g) for a, g in zip(answers, golds)]
    single = [{c.retriever: c for c in r.candidates}.get(best_single) for _, r in scored]
    single_right = [right(c.answer, g) if c is not None and c.error is None else 0.0 for c, g in zip(single, golds)]
    single_conf = [c.confidence if c is not None and c.error is None else None for c in single]
    eor_rc = risk_coverage(conf, ok) if conf is not None else None
    single_rc = risk_coverage(single_conf, single_right)
    doc: dict[str, Any] = {"n": len(scored), "confidence_kind": runs.confidence_kind, "ece": None, "bins": ECE_BINS,
                           "reliability": [], "best_single": best_single, "risk_coverage": []}
    if conf is not None:
        known = [(c, y) for c, y in zip(conf, ok) if c is not None]
        p_known, y_known = [c for c, _ in known], [y for _, y in known]
        doc["ece"] = _clean(expected_calibration_error(p_known, y_known))
        doc["ece_sampling_floor"] = _clean(ece_sampling_floor(p_known))  # a calibrated P's, at this n
        doc["ece_interval_95"] = [_clean(x) for x in ece_interval(p_known, y_known)] if known else None
        doc["answered_with_confidence"] = len(known)
        doc["reliability"] = [{"low": b.low, "high": b.high, "n": b.n, "confidence": _clean(b.confidence),
                               "accuracy": _clean(b.accuracy)} for b in reliability(p_known, y_known)] if known else []
    if runs.early is not None:  # a stream's first reply: its own P, measured like the answer's
        e_right = [right(runs.early["answers"][i], q.answers) for i, (q, _) in zip(rows, scored)]
        e_known = [(c, y) for c, y in zip((runs.early["confidence"][i] for i in rows), e_right) if c is not None]
        doc["early_answer"] = {"members": runs.early["members"], "n": len(e_known),
                               "match": _clean(float(np.mean(e_right))) if e_right else None,
                               "mean_confidence": _clean(float(np.mean([c for c, _ in e_known]))) if e_known else None,
                               "ece": _clean(expected_calibration_error(*map(list, zip(*e_known)))) if e_known else None}
    for k, cov in enumerate(COVERAGES):
        doc["risk_coverage"].append({"coverage": cov,
                                     "eor_answered": eor_rc[k].answered if eor_rc else None,
                                     "eor_match": _clean(eor_rc[k].match) if eor_rc else None,
                                     "single_answered": single_rc[k].answered, "single_match": _clean(single_rc[k].match)})
    return doc


def format_confidence(doc: dict[str, Any]) -> str:
    kind = {"calibrated": "calibrated P(right)", "raw": "the answer scorer's raw P(right) (no calibrator)",
            "none": "none (this voter has no answer scorer)"}[doc["confidence_kind"]]
    lines = [f"confidence of EoR's answers: {kind}" + (
        f"; ECE ({doc['bins']} bins) {doc['ece']:.3f} over {doc['answered_with_confidence']} answers"
        + (f" (95% bootstrap interval {doc['ece_interval_95'][0]:.3f}-{doc['ece_interval_95'][1]:.3f})"
           if doc.get("ece_interval_95") else "")
        + f" (a perfectly calibrated P would show {doc['ece_sampling_floor']:.3f} at this n)"
        if doc["ece"] is not None else "")]
    early = doc.get("early_answer")
    if early and early["ece"] is not None:
        lines.append(f"  a stream's first reply ({'+'.join(early['members'])}, voted alone): Match "
                     f"{early['match']:.3f}, mean P {early['mean_confidence']:.3f}, ECE {early['ece']:.3f} "
                     f"over {early['n']}")
    lines.append(f"  answered only when most sure: Match of the answers kept, EoR by its confidence vs "
                 f"{doc['best_single']} by its mean token log-probability")
    for p in doc["risk_coverage"]:
        eor = "   -  " if p["eor_match"] is None else f"{p['eor_match']:6.3f}"
        single = "   -  " if p["single_match"] is None else f"{p['single_match']:6.3f}"
        lines.append(f"  coverage {p['coverage']:4.0%}: EoR {eor}  {doc['best_single']} {single}  "
                     f"({p['single_answered']} answered)")
    return "\n".join(lines)
