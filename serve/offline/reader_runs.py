"""A pool whose members are read by several readers, run as one pool per reader and joined.

Each reader's members run as that reader's own pool, in its own run log: the log
`eor run --model MODEL` grows (bench/grow_runs.sh with EOR_MODELS), so the 16 retrievers run
through the 1.5B once and serve every later fit. Per question, the parts are joined with
each member named as the joined pool names it (`Wiki@10~1.5B`; retrievers/spec.py). That is
what running the joined pool gives (each member's prompts go to its reader, a reader writes
its own PK document, prefix-cache costs never cross readers), without paying twice.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Sequence, TextIO

from retrievers.pool import RetrieverPool
from retrievers.spec import DEFAULT_READER_NAME, by_reader, with_reader
from retrievers.types import Candidate, Context, QuestionResult
from serve.offline.dataset import Question
from serve.offline.runlog import DEFAULT_BATCH_SIZE, RunLog, run_log_for, run_questions


def reader_pools(pool: RetrieverPool) -> dict[str, RetrieverPool]:
    """reader name -> the pool of its members as plain specs, read by that reader as its default.
    A pool read by its default reader alone is its own only part."""
    groups = by_reader(pool.specs)
    if set(groups) == {DEFAULT_READER_NAME}:
        return {DEFAULT_READER_NAME: pool}
    return {name: pool.part(name) for name in groups}


def renamed(result: QuestionResult, reader: str) -> QuestionResult:
    """One reader's result with every name the joined pool gives it: members, the documents they
    share (PK -> PK~1.5B) and the member whose prefix they reuse."""
    if reader == DEFAULT_READER_NAME:
        return result

    def cand(c: Candidate) -> Candidate:
        return replace(c, retriever=with_reader(c.retriever, reader),
                       context=Context(with_reader(c.context.spec, reader), c.context.passages, c.context.document),
                       shared=tuple(with_reader(s, reader) for s in c.shared),
                       cached_from=None if c.cached_from is None else with_reader(c.cached_from, reader))
    return QuestionResult(result.question, tuple(cand(c) for c in result.candidates),
                          {with_reader(k, reader): t for k, t in result.shared_tokens.items()})


def joined_result(parts: dict[str, QuestionResult], order: Sequence[str]) -> QuestionResult:
    """One question's per-reader results as the joined pool's: members in `order`."""
    named = [renamed(r, name) for name, r in parts.items()]
    return QuestionResult.joined(named[0].question, named, order)


class ReaderRuns:
    """The run logs of a pool's readers over one question file: load, grow, seconds."""

    def __init__(self, config: Any, pool: RetrieverPool, questions_file: str):
        self.pool = pool
        self.parts = reader_pools(pool)
        self.logs: dict[str, RunLog] = {name: run_log_for(config, part, questions_file)
                                        for name, part in self.parts.items()}

    @property
    def log(self) -> RunLog:
        """The default reader's run log (the key `eor fit` records)."""
        return next(iter(self.logs.values()))

    def load(self) -> dict[str, QuestionResult]:
        """qid -> the joined result, for the questions every reader's log has finished."""
        done = {name: log.load() for name, log in self.logs.items()}
        common = set.intersection(*(set(d) for d in done.values()))
        return {qid: joined_result({n: d[qid] for n, d in done.items()}, self.pool.specs)
                for qid in next(iter(done.values())) if qid in common}

    def seconds(self) -> dict[str, dict[str, float]]:
        """reader name -> qid -> cold pool seconds of its part (runlog.RunLog.seconds)."""
        return {name: log.seconds() for name, log in self.logs.items()}

    def run(self, questions: Sequence[Question], batch_size: int = DEFAULT_BATCH_SIZE, progress: bool = True,
            stream: TextIO | None = None) -> list[tuple[Question, QuestionResult]]:
        """Each reader's part over the questions, one after another (each engine is stopped when
        its part is done, so two never hold memory at once), joined."""
        runs = {}
        for name, part in self.parts.items():
            try:
                runs[name] = dict((q.qid, r) for q, r in run_questions(part, questions, self.logs[name], batch_size,
                                                                       progress, stream))
            finally:
                if len(self.parts) > 1:  # the caller stops the last one, as with one reader
                    part.reader.engine.close()
        first = next(iter(runs.values()))
        return [(q, joined_result({n: r[q.qid] for n, r in runs.items()}, self.pool.specs))
                for q in questions if q.qid in first and all(q.qid in r for r in runs.values())]
