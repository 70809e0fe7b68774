"""Resumable results: one JSONL line per finished instance, keyed by a stable instance id.

An instance is one unit of a suite's work, named by (suite, qid, perturbation, variant,
seed); its id is a hash of those five, so a restarted run with the same seed recognises what
it already did. Lines are appended and flushed as each batch finishes; a line cut short by an
interruption is ignored on reading (that instance simply runs again).
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator


@dataclass(frozen=True)
class Instance:
    suite: str
    qid: str
    perturbation: str  # "original" for the unperturbed instance
    variant: str  # what else tells instances apart (SURE's doc kind, RARE's doc setting, ...)
    seed: int

    @property
    def id(self) -> str:
        return instance_id(self.suite, self.qid, self.perturbation, self.variant, self.seed)

    def key(self) -> dict:
        return {"id": self.id, "suite": self.suite, "qid": self.qid, "perturbation": self.perturbation,
                "variant": self.variant, "seed": self.seed}


def instance_id(suite: str, qid: str, perturbation: str, variant: str, seed: int) -> str:
    raw = json.dumps([suite, str(qid), perturbation, str(variant), int(seed)], separators=(",", ":"))
    return hashlib.sha1(raw.encode("utf-8")).hexdigest()[:20]


class ResultStore:
    """`results.jsonl` under `out_dir`: finished instances, appended as they finish."""

    FILE = "results.jsonl"

    def __init__(self, out_dir: str | os.PathLike):
        self.dir = Path(out_dir)
        self.path = self.dir / self.FILE
        self._records: dict[str, dict] = {}
        if self.path.exists():
            _drop_partial_tail(self.path)
            for rec in _read_lines(self.path):
                self._records[rec["id"]] = rec

    def __contains__(self, instance_id: str) -> bool:
        return instance_id in self._records

    def __len__(self) -> int:
        return len(self._records)

    def done(self) -> set[str]:
        return set(self._records)

    def records(self, suite: str | None = None) -> list[dict]:
        return [r for r in self._records.values() if suite is None or r.get("suite") == suite]

    def add(self, records: Iterable[dict]) -> None:
        records = list(records)
        if not records:
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as f:
            for rec in records:
                if "id" not in rec:
                    raise ValueError("a result record needs its instance 'id'")
                f.write(json.dumps(rec, ensure_ascii=False) + "\n")
            f.flush()
            os.fsync(f.fileno())
        for rec in records:
            self._records[rec["id"]] = rec


def _drop_partial_tail(path: Path) -> None:
    """Cut a last line left unterminated by an interruption, so the next append starts clean."""
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        with open(path, "r+b") as f:
            f.truncate(data.rfind(b"\n") + 1)


def _read_lines(path: Path) -> Iterator[dict]:
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut short by an interruption: that instance runs again
            if isinstance(rec, dict) and "id" in rec:
                yield rec
