"""The rounds of one Ask: the one orchestrator of `eor ask` (in-process) and the service.

A round: each source its retrievers read is searched once per question, at the depth the
question's whole plan needs (retrievers/groundwork.py: `pending_searches`), unless an earlier round
did; then ONE call per retriever group that holds the round's specs (as soon as the searches
its specs read are done: a slow source holds up only its readers), with an immutable
`RoundInput` (the questions, the specs, each question's `Groundwork`: what its earlier rounds
found; the Deadline). A group answers with its results and what it found (`RoundRun`), which
the next round's groundwork includes: nothing is shipped out to be changed and merged back.
Then the voter decides (voter/decision.py: the answer, settled?, P(right)), and
serve/ensemble.py (`answer_async`) stops the questions it settled.

Who does the work is a `Crew`: the pool in this process (`LocalCrew`) or the service's
deployments behind Serve handles (serve/app/handles.py: `ServiceCrew`). Core-safe: no Ray.
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping, Protocol, Sequence

from retrievers.pool import PoolConfig

from retrievers.groundwork import Groundwork, RoundRun, pending_searches, reads_of, search_depths, search_found
from retrievers.spec import parse_spec
from retrievers.types import Failure, Passage, QuestionResult
from serve.deadline import Deadline
from serve.ensemble import EnsembleAnswer, OnProvisional, ReadLoad, VoteDeadline, answer_async, cascade_for
from voter.cascade import Cascade, LoadRule, early_answer, early_cascade
from voter.decision import Decision, decide
from voter.question_vote import VoterChoice
from voter.similarity import PairSimilarity

# (results so far, the cascade being run, its 0-based round k) -> the voter's decisions (voter/decision.py)
Decide = Callable[[list[QuestionResult], Cascade, int], list[Decision]]
# a search may take at most this share of the time left, so that a source that hangs leaves the
# retrievers reading it time to fail at once, and those in the same actor time to answer
SEARCH_SHARE = 0.5


@dataclass(frozen=True)
class RoundInput:
    """What one retriever group gets for one round (it answers with a `RoundRun`)."""

    questions: tuple[str, ...]
    specs: tuple[str, ...]  # the round's specs this group holds
    work: tuple[Groundwork, ...]  # per question: what its earlier rounds found
    plan_specs: tuple[str, ...]  # every retriever the questions may run (the depth of a search)
    top_k: int = 0  # 0: the pool's default
    documents: tuple[tuple[Passage, ...] | None, ...] | None = None  # per question: given, not searched
    deadline: Deadline | None = None


class Crew(Protocol):
    """Who does the work of an Ask's rounds."""

    groups: Sequence[tuple[tuple[str, ...], Any]]  # (the specs a worker holds, in its order; the worker)
    shapes: Mapping[str, str]  # the sources the rounds search, each with its hits' shape (search depths)

    async def search(self, src: str, queries: list[str], k: int,
                     deadline: Deadline | None) -> list[list[Passage]] | Failure:
        """One source's hits per query, or why there are none (it does not raise)."""

    async def run(self, worker: Any, round_: RoundInput) -> RoundRun:
        """One worker's part of a round."""

    async def decide(self, results: list[QuestionResult], cascade: Cascade, k: int,
                     deadline: Deadline | None) -> list[Decision]:
        """The voter's decisions (answer, settled?, P(right)) over each question's results so far,
        after 0-based round `k` of `cascade`; VoteDeadline past `deadline`."""


class LocalCrew:
    """The in-process pool as the crew: it searches, runs and (with `decide`) votes here. Its
    async methods run the pool's blocking calls on the event loop on purpose: the in-process
    reader is one synchronous engine (`VLLMEngine`; two threads must not share it), so its
    calls run one at a time either way, and `answer` asks for no early answer that would need
    them to overlap."""

    def __init__(self, pool: Any, decide: Decide, holds: Sequence[str]):
        self.pool = pool
        self.groups = [(tuple(holds), pool)]  # the cascade's order: a round's specs run as the round lists them
        self.shapes = dict(pool.shapes)
        self._decide = decide

    async def search(self, src: str, queries: list[str], k: int, deadline: Deadline | None):
        return self.pool.search(src, queries, k)

    async def run(self, worker: Any, round_: RoundInput) -> RoundRun:
        return worker.run_round(round_.questions, round_.specs, round_.work, round_.documents, round_.plan_specs)

    async def decide(self, results: list[QuestionResult], cascade: Cascade, k: int,
                     deadline: Deadline | None) -> list[Decision]:
        return self._decide(results, cascade, k)


class AskRounds:
    """One Ask's questions through the cascade's rounds. `deadline` (None: none) bounds every
    call; a round starts only with time left for the vote after it (`vote_reserve_s`, at most a
    quarter of the deadline), and that vote gets at least that long. `early_answer` (a stream):
    the cascade's preview, read beside round 1 and voted on its own (never in a round's vote: a
    preview that fails costs the round nothing), else round 1's quick members (voter/cascade.py:
    early_members: the default reader's one-step reads beside a slower reader's, or the one-step
    reads beside two-step ones), read and voted on their own first while the rest of round 1 reads
    beside them, give the first provisional answer (`rounds_run = 0`). `under_load` with `load` (the
    readers' requests in flight): depth that follows the load (serve/ensemble.py, voter/cascade.py)."""

    def __init__(self, questions: Sequence[str], cascade: Cascade, crew: Crew, config: PoolConfig,
                 deadline: Deadline | None = None, documents: Sequence[Sequence[Passage] | None] | None = None,
                 top_k: int = 0, vote_reserve_s: float = 30.0, early_answer: bool = False,
                 under_load: LoadRule | None = None, load: ReadLoad | None = None):
        self.questions = list(questions)
        self.cascade, self.crew, self.deadline, self.top_k = cascade, crew, deadline, top_k
        self.documents = None if documents is None else [tuple(d) if d else None for d in documents]
        self.config = replace(config, default_k=top_k) if top_k else config
        self.preview = list(cascade.preview) if early_answer else []  # a unary Ask never reads it
        self.plan = (*cascade.specs, *self.preview)
        self.deep = search_depths([parse_spec(s) for s in self.plan], self.config, crew.shapes)
        self.work = [Groundwork() for _ in self.questions]  # per question: what its rounds found so far
        self.reserve = min(vote_reserve_s, deadline.seconds / 4) if deadline is not None else 0.0
        self.early_answer = early_answer
        self.under_load, self.load = under_load, load
        self.reader_s = 0.0  # seconds the groups waited on the reader, over every round
        self._on_provisional: OnProvisional | None = None

    async def answer(self, on_round: Callable[[int, int, list[str]], None] | None = None,
                     on_provisional: OnProvisional | None = None) -> list[EnsembleAnswer]:
        self._on_provisional = on_provisional
        time_left = None if self.deadline is None else (lambda: self.deadline.left() - self.reserve)
        return await answer_async(self.questions, self.cascade, self._round, self._vote, on_round, time_left,
                                  on_provisional, self.under_load, self.load)

    async def _vote(self, results: list[QuestionResult], k: int, cascade: Cascade | None = None) -> list[Decision]:
        if cascade is None and self.preview:  # a round's vote: without the preview (its own vote is early_cascade's)
            results = [QuestionResult.joined(r.question, (r,),
                                             [c.retriever for c in r.candidates if c.retriever not in self.preview])
                       for r in results]
        return await self.crew.decide(results, cascade or self.cascade, k,
                                      None if self.deadline is None else self.deadline.at_least(self.reserve))

    async def _round(self, open_: list[int], specs: list[str]) -> list[QuestionResult]:
        first = list(specs) == list(self.cascade.rounds[0])
        preview = self.preview if first else []
        searches = self._search(open_, specs + preview)
        quick = list(early_answer(specs) or ())
        later = None
        try:
            if preview:  # the Ask's result holds it (its tokens, its answer); no round's vote reads it (_vote)
                later = asyncio.ensure_future(self._fan_out(open_, specs, searches))
                seen = await self._preview(open_, preview, searches)
                late = await later
                return late if seen is None else [QuestionResult.joined(a.question, (a, b), [*specs, *preview])
                                                  for a, b in zip(late, seen)]
            if not (self.early_answer and first and quick):
                return await self._fan_out(open_, specs, searches)
            later = asyncio.ensure_future(self._fan_out(open_, [s for s in specs if s not in quick], searches))
            early = await self._fan_out(open_, quick, searches)
            await self._early_answer(open_, early)
            late = await later
            return [QuestionResult.joined(a.question, (a, b), specs) for a, b in zip(early, late)]
        finally:
            for task in [later, *searches.values()]:
                if task is not None:
                    task.cancel()  # done already, unless the round ended in an error

    async def _preview(self, open_: list[int], preview: list[str],
                       searches: dict[str, asyncio.Future]) -> list[QuestionResult] | None:
        """Read the preview and stream its answer where it has one; a preview that fails (its reader
        gone: None; its call failed or past the deadline: a failed candidate) gives no early answer
        and leaves the round as it is."""
        try:
            results = await self._fan_out(open_, preview, searches)
        except Exception:  # noqa: BLE001 - the round's own members answer the Ask
            return None
        said = [j for j, r in enumerate(results) if any(c.answer and c.error is None for c in r.candidates)]
        if said:
            await self._early_answer([open_[j] for j in said], [results[j] for j in said])
        return results

    async def _early_answer(self, open_: list[int], results: list[QuestionResult]) -> None:
        try:
            decisions = await self._vote(results, 0, early_cascade(self.cascade))  # its own P line
        except VoteDeadline:  # no early answer; the round's own vote still runs
            return
        if self._on_provisional is not None:
            n = len(self.cascade.rounds)
            await self._on_provisional([EnsembleAnswer.of(r, d, 0, n) for r, d in zip(results, decisions)], open_)

    def _search(self, open_: list[int], specs: list[str]) -> dict[str, asyncio.Future]:
        """Start each search the round needs: a source, once, for the open questions that lack it
        (not those given documents). Each records its hits, or why it failed (its retrievers
        report that at once), in the questions' work. Source -> its task."""
        given = {j for j, i in enumerate(open_) if self.documents is not None and self.documents[i]}
        need = search_depths([parse_spec(s) for s in specs], self.config, self.crew.shapes)
        by = None if self.deadline is None else self.deadline.share(SEARCH_SHARE)

        async def search(src: str, todo: list[int], k: int) -> None:
            out = await self.crew.search(src, [self.questions[open_[j]] for j in todo], k, by)
            for j, found in search_found(src, todo, k, out).items():
                self.work[open_[j]] = self.work[open_[j]].plus(found)
        return {src: asyncio.ensure_future(search(src, todo, k))
                for src, todo, k in pending_searches([self.work[i] for i in open_], need, self.deep, given)
                if src in self.crew.shapes}

    async def _fan_out(self, open_: list[int], specs: list[str],
                       searches: dict[str, asyncio.Future]) -> list[QuestionResult]:
        """One call per worker holding any of `specs`, once the searches its specs read are done;
        the results in `specs` order."""
        wanted = set(specs)
        qs = tuple(self.questions[i] for i in open_)
        docs = None if self.documents is None else tuple(self.documents[i] for i in open_)

        async def call(sub: tuple[str, ...], worker: Any) -> RoundRun:
            keys, readers, pk_readers = reads_of([parse_spec(s) for s in sub], self.config, self.crew.shapes)
            await asyncio.gather(*[task for src, task in searches.items() if src in keys])
            work = tuple(self.work[i].only(keys, readers, pk_readers) for i in open_)  # what its members read
            return await self.crew.run(worker, RoundInput(qs, sub, work, self.plan, self.top_k, docs, self.deadline))

        calls = [(sub, worker) for held, worker in self.crew.groups if (sub := tuple(s for s in held if s in wanted))]
        runs = await asyncio.gather(*[call(sub, w) for sub, w in calls], return_exceptions=True)
        for run in runs:  # every call ends first (each is bounded by the deadline); then the first error
            if isinstance(run, BaseException):
                raise run
        for run in runs:
            self.reader_s += run.reader_s
            for j, found in enumerate(run.found):
                self.work[open_[j]] = self.work[open_[j]].plus(found)
        return [QuestionResult.joined(q, [run.results[j] for run in runs], specs) for j, q in enumerate(qs)]


def answer(questions: Sequence[str], choice: VoterChoice, pool: Any,
           metrics: Sequence[PairSimilarity], specs: Sequence[str] | None = None,
           on_round: Callable[[int, int, list[str]], None] | None = None,
           on_provisional: Callable[[list[EnsembleAnswer], list[int]], None] | None = None) -> list[EnsembleAnswer]:
    """In-process (`eor ask`): the rounds above with `pool` (a RetrieverPool)
    doing the work and the vote here; each source is searched once per question (at the depth
    the whole cascade needs), PK written once, chunks embedded once."""
    cascade = cascade_for(choice.saved.cascade_to_run, specs)

    def decided(results: list[QuestionResult], run: Cascade, k: int) -> list[Decision]:
        return decide(results, choice.saved, metrics, run, k)

    async def provisional(answers: list[EnsembleAnswer], positions: list[int]) -> None:
        if on_provisional is not None:
            on_provisional(answers, positions)

    rounds = AskRounds(questions, cascade, LocalCrew(pool, decided, holds=cascade.asked), pool.config)
    return asyncio.run(rounds.answer(on_round, provisional))
