"""Read only what a cascade reads: round 1 (and the members named beside it) for every question,
each later round for the questions the stop rule sends there, as the service does.

`eor eval --reads cascade`. On 2 cores the whole pool costs ~70 s a question through both
readers, and a cascade that stops after round 1 reads two or three of its 23 members: an eval
of the shipped voter on many more eval questions for the same reader time. Each round is a
pool of its own members (RetrieverPool.subset), with its own resumable run logs (one per
reader, keyed by those members), so an interrupted eval resumes round by round. What it cannot
give: rows for members no round read on every question (EoR pruned, EoR-all, the best single
of the whole pool); `eor eval` without the flag reads the whole pool for those.
"""
from __future__ import annotations

from typing import Callable, Sequence, TextIO

from retrievers.spec import by_reader
from retrievers.types import QuestionResult
from serve.builder import close_engines
from serve.offline.dataset import Question
from serve.offline.reader_runs import ReaderRuns
from serve.offline.runlog import DEFAULT_BATCH_SIZE

Scored = list[tuple[Question, QuestionResult]]


def round_members(layout: Sequence[Sequence[str]], beside: Sequence[str] = ()) -> list[list[str]]:
    """Each round's members to read. `beside` (the baseline) is read for every question: in round 1,
    and not again in the later round that has it (the voter's own rounds decide its stops, not these)."""
    first = [*layout[0], *(s for s in beside if s not in layout[0])] if layout else []
    return [first] + [[s for s in r if s not in beside] for r in layout[1:]]


def read_cascade(pool, config, questions_file: str, questions: Sequence[Question],
                 rounds: Sequence[Sequence[str]], stops: Callable[[Scored], Sequence[int]],
                 batch_size: int = DEFAULT_BATCH_SIZE, progress: bool = True,
                 stream: TextIO | None = None) -> tuple[Scored, list[int]]:
    """(question, result with the rounds it reached), and how many questions read each round.
    `stops(scored)`: the round (0-based) each question stops after, judged on what is read so
    far: a stop after round k looks only at rounds 1..k, so rounds not read yet change nothing."""
    read: dict[str, list[QuestionResult]] = {}
    todo = list(questions)
    counts: list[int] = []
    scored: Scored = []
    for k, members in enumerate(rounds):
        if not todo:
            break
        counts.append(len(todo))
        if members:  # a later round that held only the baseline has nothing left to read
            for q, r in ReaderRuns(config, pool.subset(members), questions_file).run(todo, batch_size, progress,
                                                                                     stream):
                read.setdefault(q.qid, []).append(r)
            # stop the readers the next round does not use: a round read by the 0.5B alone and the next
            # by the 1.5B alone would otherwise hold both engines in memory
            close_engines(pool, keep=set(by_reader(next((r for r in rounds[k + 1:] if r), ()))))
        scored = [(q, QuestionResult.joined(read[q.qid][0].question, read[q.qid], pool.specs))
                  for q in questions if q.qid in read]
        if k + 1 < len(rounds):
            after = {q.qid: s for (q, _), s in zip(scored, stops(scored))}
            todo = [q for q in todo if after.get(q.qid, -1) > k]
    return scored, counts
