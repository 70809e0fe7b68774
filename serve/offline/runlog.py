"""Run the pool over many questions resumably: finished questions are never retrieved again.

Results go to `$EOR_HOME/runs/<digest>.jsonl`, one line per question, appended after every
batch. The file is keyed by (questions file, reader model, pool fingerprint) and each line
by qid, so an interrupted `eor fit` / `eor eval` restarts with only the unfinished
questions. The reader cache already makes repeated prompts free; the run log also skips
the retrieval work and the engine start when nothing is left to do.

Questions go to `pool.run` a few at a time (`batch_size`) so the reader batches their
prompts together while a crash loses at most one batch.
"""
from __future__ import annotations

import hashlib
import json
import logging
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterator, Protocol, Sequence, TextIO

from retrievers.pool import QuestionError, check_question
from retrievers.types import QuestionResult
from serve.offline.dataset import Question
from serve.paths import eor_home
from serve.offline.results_io import result_from_record, result_to_record

log = logging.getLogger(__name__)

DEFAULT_BATCH_SIZE = 4
COLD_SHARE = 0.9  # a batch whose engine generated fewer of its prompts than this was mostly cached


class Pool(Protocol):
    """What the runner needs of `retrievers.pool.RetrieverPool`."""

    @property
    def specs(self) -> list[str]: ...

    @property
    def reader(self) -> Any: ...  # a CachedReader: its `stats` count prompts asked and generated

    def load(self) -> Any: ...

    def run(self, questions: Sequence[str], specs: Sequence[str] | None = None) -> list[QuestionResult]: ...


def _digest(obj: Any, n: int = 16) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:n]


def pool_fingerprint(specs: Sequence[str], settings: dict[str, Any] | None = None) -> str:
    """Hash of the pool's spec strings (in order) and any settings that change its answers
    (processing sizes, index name, search backend)."""
    return _digest({"specs": list(specs), "settings": settings or {}})


@dataclass(frozen=True)
class RunKey:
    questions_file: str  # resolved path
    reader_model: str
    pool_hash: str

    @classmethod
    def create(cls, questions_file: str | Path, reader_model: str, specs: Sequence[str],
               settings: dict[str, Any] | None = None) -> "RunKey":
        return cls(str(Path(questions_file).resolve()), reader_model, pool_fingerprint(specs, settings))

    @property
    def digest(self) -> str:
        return _digest(asdict(self))


def runs_dir() -> Path:
    return eor_home() / "runs"


class RunLog:
    """Append-only JSONL of finished questions for one RunKey."""

    def __init__(self, key: RunKey, root: Path | None = None):
        self.key = key
        self.path = (root or runs_dir()) / f"{key.digest}.jsonl"

    def _write_meta(self) -> None:
        meta = self.path.with_suffix(".meta.json")
        if not meta.exists():
            meta.write_text(json.dumps(asdict(self.key), indent=2) + "\n")

    def load(self) -> dict[str, QuestionResult]:
        """qid -> result. A torn last line (a crash mid-write) is ignored and redone."""
        done: dict[str, QuestionResult] = {}
        if not self.path.exists():
            return done
        with self.path.open(encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                try:
                    rec = json.loads(line)
                    done[rec["qid"]] = result_from_record(rec["result"])
                except (json.JSONDecodeError, KeyError, TypeError):
                    log.warning("%s:%d: unreadable run-log line skipped (will be redone)", self.path, lineno)
        return done

    def seconds(self) -> dict[str, float]:
        """qid -> wall seconds the pool spent on it (its batch's time shared equally), for the
        questions whose batch the engine read cold: a batch the reader cache answered (`cold`,
        the share of its prompts the engine generated, below COLD_SHARE) took less than its
        tokens cost, and would flatter the reader's speed. Lines written before `cold` was
        recorded count as cold."""
        out: dict[str, float] = {}
        if self.path.exists():
            with self.path.open(encoding="utf-8") as f:
                for line in f:
                    try:
                        rec = json.loads(line)
                        if "seconds" in rec and float(rec.get("cold", 1.0)) >= COLD_SHARE:
                            out[rec["qid"]] = float(rec["seconds"])
                    except (json.JSONDecodeError, KeyError, TypeError, ValueError):
                        continue
        return out

    def append(self, items: Sequence[tuple[Question, QuestionResult]], seconds: float | None = None,
               cold: float | None = None) -> None:
        """`seconds`: wall time of the batch, recorded per question; `cold`: the share of the
        batch's prompts the engine generated (the rest came from the reader cache)."""
        per = {"seconds": round(seconds / len(items), 3)} if seconds is not None and items else {}
        if per and cold is not None:
            per["cold"] = round(cold, 3)
        self._write([{"qid": q.qid, **per, "result": result_to_record(r)} for q, r in items])

    def append_records(self, records: Sequence[tuple[str, dict[str, Any], dict[str, Any]]]) -> None:
        """(qid, result record, its seconds and cold share): kept reads restored (kept_reads.py)."""
        self._write([{"qid": qid, **extra, "result": rec} for qid, rec, extra in records])

    def _write(self, lines: Sequence[dict[str, Any]]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._write_meta()
        torn = False  # a torn last line (crash mid-write) must not swallow the next record
        if self.path.exists() and self.path.stat().st_size:
            with self.path.open("rb") as f:
                f.seek(-1, 2)
                torn = f.read(1) != b"\n"
        with self.path.open("a", encoding="utf-8") as f:
            if torn:
                f.write("\n")
            for line in lines:
                f.write(json.dumps(line, ensure_ascii=False) + "\n")
            f.flush()


def run_log_for(config: Any, pool: Any, questions_file: str | Path) -> RunLog:
    """The run log of this pool (its specs, processing settings and reader) and index over a
    question file: the one `eor run`, `eor fit` and `eor eval` all append to and read."""
    pool_config = asdict(getattr(pool, "config", config.pool))
    for unused in ("specs", "max_question_chars"):  # the specs are keyed on their own; the limit changes no answer
        pool_config.pop(unused, None)
    index = asdict(config.index)
    index.pop("merge_above", None)  # when a generation is merged changes no answer
    key = RunKey.create(questions_file, pool.reader.model_id, pool.specs, {"pool": pool_config, "index": index})
    runlog = RunLog(key)
    from serve.offline.kept_reads import restore

    restored = restore(runlog, questions_file)  # reads kept in the repository: never read again
    if restored:
        log.info("%d questions restored into %s from the reads kept in the repository", restored, runlog.path)
    return runlog


def _reader_counts(pool: Pool) -> tuple[int, int]:
    """(prompts asked, prompts the engine generated) of the pool's reader so far."""
    return pool.reader.stats.prompts, pool.reader.stats.engine_prompts


def _cold_share(before: tuple[int, int], after: tuple[int, int]) -> float | None:
    """The share of the prompts asked between the two counts that the engine generated."""
    asked = after[0] - before[0]
    return (after[1] - before[1]) / asked if asked else None


def _batches(items: Sequence[Question], size: int) -> Iterator[list[Question]]:
    for i in range(0, len(items), size):
        yield list(items[i : i + size])


def run_questions(pool: Pool, questions: Sequence[Question], runlog: RunLog,
                  batch_size: int = DEFAULT_BATCH_SIZE, progress: bool = True,
                  stream: TextIO | None = None) -> list[tuple[Question, QuestionResult]]:
    """(question, result) for every question the pool accepts, in the given order.

    Questions already in the run log (same qid and question text) are not run again; the
    pool is only loaded when something is left. Questions the pool refuses (empty, too
    long) are skipped with a warning.
    """
    if batch_size < 1:
        raise ValueError("batch_size must be >= 1")
    done = runlog.load()
    valid: list[Question] = []
    for q in questions:
        try:
            check_question(q.question)
            valid.append(q)
        except QuestionError as exc:
            log.warning("question %s skipped: %s", q.qid, exc)
    todo = [q for q in valid if q.qid not in done or done[q.qid].question != q.question.strip()]
    if todo:
        from tqdm import tqdm

        pool.load()
        bar = tqdm(total=len(valid), initial=len(valid) - len(todo), desc="pool", unit="q",
                   file=stream or sys.stderr, disable=not progress)
        try:
            for batch in _batches(todo, batch_size):
                t = time.perf_counter()
                before = _reader_counts(pool)
                results = pool.run([q.question for q in batch])
                if len(results) != len(batch):
                    raise RuntimeError(f"pool returned {len(results)} results for {len(batch)} questions")
                runlog.append(list(zip(batch, results)), time.perf_counter() - t, _cold_share(before, _reader_counts(pool)))
                done.update({q.qid: r for q, r in zip(batch, results)})
                bar.update(len(batch))
        finally:
            bar.close()
    return [(q, done[q.qid]) for q in valid]
