"""Question files for `eor fit` / `eor eval`, and the seeded fit/eval split.

A question file is JSONL: `{"qid", "dataset", "question", "answers": [...]}`, optionally
`"gold_pids": [...]` (the passages that answer it; other keys are ignored). Fit and eval must see
disjoint questions of the *same* file, so the split is decided over every qid in the file --
before any `--dataset` filter -- by a seeded shuffle: the first `fit_fraction` of the shuffled
qids are "fit", the rest "eval". `group_by="passage"` (the CLI's default) shuffles whole groups of
questions that share a gold passage (splits.passage_groups), so no passage is on both sides.
Any dataset filter or limit applied afterwards keeps the two parts disjoint.

`--limit N` takes the first N selected questions *in the shuffled order*: a random sample
across datasets, and a larger N extends a smaller one (so the run log is reused).
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

# the split itself lives in `splits` (shared with the robustness bench); re-exported here
from splits import (DEFAULT_FIT_FRACTION, DEFAULT_SPLIT_SEED, GROUPINGS, SPLITS, passage_groups,  # noqa: F401
                    shuffled_qids, split_assignment)


@dataclass(frozen=True)
class Question:
    qid: str
    dataset: str
    question: str
    answers: tuple[str, ...]
    gold_pids: tuple[str, ...] = ()


@dataclass(frozen=True)
class Selection:
    """Which questions of a file to use; recorded in the weights' provenance."""

    path: str
    dataset: str | None = None  # None: every dataset in the file
    split: str = "all"  # "fit", "eval" or "all"
    limit: int | None = None
    seed: int = DEFAULT_SPLIT_SEED
    fit_fraction: float = DEFAULT_FIT_FRACTION
    group_by: str = "question"  # "passage": whole groups sharing a gold passage (a record without it: question)

    def __post_init__(self) -> None:
        if self.split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {self.split!r}")
        if self.limit is not None and self.limit < 1:
            raise ValueError(f"limit must be >= 1, got {self.limit}")
        if not 0.0 < self.fit_fraction < 1.0:
            raise ValueError(f"fit_fraction must lie in (0, 1), got {self.fit_fraction}")
        if self.group_by not in GROUPINGS:
            raise ValueError(f"the split is grouped by one of {GROUPINGS}, got {self.group_by!r}")

    def describe(self) -> dict:
        return {"questions_file": str(Path(self.path).resolve()), "dataset": self.dataset,
                "split": self.split, "split_seed": self.seed, "fit_fraction": self.fit_fraction,
                "limit": self.limit, "split_by": self.group_by}


def _field(obj: dict, key: str, where: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{where}: {key!r} must be a non-empty string")
    return value


def read_questions(path: str | Path) -> list[Question]:
    """Every question of a file, in file order; a bad line is an error naming the line."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"questions file not found: {path}")
    out: list[Question] = []
    seen: set[str] = set()
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{where}: not JSON ({exc.msg})") from None
            if not isinstance(obj, dict):
                raise ValueError(f"{where}: expected a JSON object")
            qid = str(obj.get("qid", "")).strip()
            if not qid:
                raise ValueError(f"{where}: missing 'qid'")
            if qid in seen:
                raise ValueError(f"{where}: duplicate qid {qid!r}")
            answers = obj.get("answers")
            if not isinstance(answers, list) or not answers or not all(isinstance(a, str) for a in answers):
                raise ValueError(f"{where}: 'answers' must be a non-empty list of strings")
            gold = obj.get("gold_pids") or []
            if not isinstance(gold, list) or not all(isinstance(g, str) for g in gold):
                raise ValueError(f"{where}: 'gold_pids' must be a list of passage ids")
            seen.add(qid)
            out.append(Question(qid, str(obj.get("dataset") or "default"), _field(obj, "question", where),
                                tuple(answers), tuple(gold)))
    return out


def select_questions(sel: Selection) -> list[Question]:
    """Split over the whole file, then filter by dataset, then limit (shuffled order)."""
    questions = read_questions(sel.path)
    if not questions:
        raise ValueError(f"questions file {sel.path} has no questions")
    by_qid = {q.qid: q for q in questions}
    groups = passage_groups({q.qid: q.gold_pids for q in questions}) if sel.group_by == "passage" else None
    order = shuffled_qids(by_qid, sel.seed, groups)
    if sel.split != "all":
        part = split_assignment(by_qid, sel.seed, sel.fit_fraction, groups)
        order = [q for q in order if part[q] == sel.split]
    if sel.dataset is not None:
        known = sorted({q.dataset for q in questions})
        if sel.dataset not in known:
            raise ValueError(f"dataset {sel.dataset!r} is not in {sel.path}; datasets there: {', '.join(known)}")
        order = [q for q in order if by_qid[q].dataset == sel.dataset]
    if sel.limit is not None:
        order = order[: sel.limit]
    if not order:
        raise ValueError(f"no questions selected from {sel.path} ({sel.describe()})")
    return [by_qid[q] for q in order]


def qids_digest(questions: Sequence[Question]) -> str:
    """A short fingerprint of exactly which questions were used (for provenance)."""
    return hashlib.sha256("\n".join(sorted(q.qid for q in questions)).encode()).hexdigest()[:16]
