"""Reads kept in the repository (`reads/`), so that a new machine never reads them again: each run
log's answers, log-probabilities, confidences and token counts, gzipped, without the prompts, the
passages' text or the question text (the question file holds it; a hash checks it).

A run log is keyed by the question file's path on this machine; a kept file by the file's content
(sha256), the reader model and the pool's fingerprint, so any checkout finds it. `eor run --keep`
(bench/grow_runs.sh passes it) writes the kept file after each step; `run_log_for` restores what a
kept file has that the run log lacks before any question is read.
"""
from __future__ import annotations

import gzip
import hashlib
import json
import os
from pathlib import Path
from typing import Any

from serve.offline.runlog import RunKey, RunLog

FORMAT = "eor-reads/1"
KEPT_DIR = Path(__file__).resolve().parents[2] / "reads"
_CANDIDATE_KEYS = ("retriever", "answer", "error", "error_kind", "tokens", "shared", "cached_from", "confidence")


def kept_dir() -> Path:
    """Where kept reads live: the checkout's `reads/` ($EOR_READS moves it: tests)."""
    return Path(os.environ.get("EOR_READS", KEPT_DIR))


def _sha(text: str, n: int = 16) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:n]


def kept_path(key: RunKey, questions_sha256: str) -> Path:
    """The kept file of a run log: named by the question file's content, reader model and pool."""
    name = _sha(json.dumps([questions_sha256, key.reader_model, key.pool_hash]))
    return kept_dir() / f"{name}.jsonl.gz"


def _slim(result: dict[str, Any]) -> dict[str, Any]:
    cands = []
    for c in result["candidates"]:
        d = {k: c.get(k) for k in _CANDIDATE_KEYS}
        lps = c.get("logprobs")
        d["logprobs"] = None if lps is None else [round(float(x), 4) for x in lps]
        cands.append(d)
    return {"candidates": cands, "shared_tokens": result.get("shared_tokens") or {}}


def keep(log: RunLog, questions_file: str | Path) -> tuple[Path, int]:
    """Write `log`'s finished questions to its kept file (replacing it), with what the kept file
    had that the log lacks; (its path, questions kept)."""
    from voter.weights_io import file_sha256

    questions_sha256 = file_sha256(questions_file)
    path = kept_path(log.key, questions_sha256)
    rows = {rec["qid"]: rec for rec in _kept_records(path)}
    if log.path.exists():
        with log.path.open(encoding="utf-8") as f:
            for line in f:
                try:
                    rec = json.loads(line)
                    result = rec["result"]
                    rows[rec["qid"]] = {"qid": rec["qid"], "question_sha": _sha(result["question"].strip()),
                                        **{k: rec[k] for k in ("seconds", "cold") if k in rec},
                                        "result": _slim(result)}
                except (json.JSONDecodeError, KeyError, TypeError):
                    continue  # a torn line: the log redoes it, and the next keep takes it
    path.parent.mkdir(parents=True, exist_ok=True)
    head = {"format": FORMAT, "questions_sha256": questions_sha256,
            "questions_name": Path(questions_file).name, "reader_model": log.key.reader_model,
            "pool_hash": log.key.pool_hash}
    tmp = path.with_suffix(".tmp")
    lines = [json.dumps(head)] + [json.dumps(rows[q], ensure_ascii=False, separators=(",", ":")) for q in sorted(rows)]
    with tmp.open("wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=9, mtime=0) as f:
        f.write(("\n".join(lines) + "\n").encode())  # mtime 0: the same reads make the same bytes (git sees no change)
    os.replace(tmp, path)
    return path, len(rows)


def _kept_records(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    with gzip.open(path, "rt", encoding="utf-8") as f:
        head = json.loads(f.readline())
        if head.get("format") != FORMAT:
            raise ValueError(f"{path}: kept reads of format {head.get('format')!r}; this eor reads {FORMAT}")
        return [json.loads(line) for line in f if line.strip()]


def restore(log: RunLog, questions_file: str | Path) -> int:
    """Append to `log` the kept questions it lacks whose question text is still the file's; how many."""
    from serve.offline.dataset import read_questions
    from voter.weights_io import file_sha256

    if not kept_dir().is_dir() or not Path(questions_file).is_file():
        return 0
    path = kept_path(log.key, file_sha256(questions_file))
    if not path.exists():
        return 0
    have = set(log.load())
    text = {q.qid: q.question.strip() for q in read_questions(questions_file)}
    new = [rec for rec in _kept_records(path)
           if rec["qid"] not in have and rec["qid"] in text and rec["question_sha"] == _sha(text[rec["qid"]])]
    if new:
        log.append_records([(rec["qid"], {"question": text[rec["qid"]], **rec["result"]},
                             {k: rec[k] for k in ("seconds", "cold") if k in rec}) for rec in new])
    return len(new)
