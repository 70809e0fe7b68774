"""Helpers shared by the bench scripts: question files and timing."""
from __future__ import annotations

import json
import os
import time
from contextlib import contextmanager
from pathlib import Path

DEFAULT_QUESTIONS = str(Path(__file__).resolve().parents[2] / "shared" / "data" / "questions.dev.jsonl")


def read_questions(path: str = DEFAULT_QUESTIONS, dataset: str | None = "nq-open-oracle",
                   limit: int | None = None) -> list[dict]:
    if not os.path.exists(path):
        raise SystemExit(f"questions file not found: {path}")
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            r = json.loads(line)
            if dataset and r.get("dataset") != dataset:
                continue
            out.append(r)
            if limit and len(out) >= limit:
                break
    return out


@contextmanager
def timer(into: dict, key: str):
    t = time.perf_counter()
    yield
    into[key] = time.perf_counter() - t
