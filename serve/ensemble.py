"""Adaptive EoR for a batch of questions: run the voter's rounds in order, ask the voter after
each, stop a question as soon as the voter says it is settled (voter/decision.py).

One loop for every entry point; a round's work is done by the one orchestrator both use
(serve/orchestrator.py: `AskRounds`, with the in-process pool or the service's deployments),
which calls this loop; this module imports nothing of it.
Retrievers the voter dropped are not in any round, so they never run; the dropped ones reach
the reader only when a caller names them explicitly (`--retrievers`,
`AskRequest.retrievers`), and then they run as one round. A round's index is 0-based (`k`);
a count of rounds (`rounds_run`, the wire's `stopped_at_stage`) is 1-based.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Awaitable, Callable, Sequence

from retrievers.types import QuestionResult
from voter.decision import Confidence, Decision
from voter.question_vote import Vote
from voter.cascade import Cascade, LoadRule, ServiceLoad


@dataclass(frozen=True)
class EnsembleAnswer:
    """One question's answer and how the cascade got there."""

    result: QuestionResult  # the candidates of every round that ran, in run order
    vote: Vote
    rounds_run: int  # rounds run before the vote was settled (or the time ran out); 0: a stream's first reply
    n_rounds: int  # rounds in the cascade
    settle: float  # the stop statistic at the stop
    out_of_time: bool = False  # the deadline ended the cascade before the vote was settled
    confidence: Confidence | None = None  # P(right) of the answer (voter/decision.py)
    under_load: bool = False  # stopped early: the service was loaded and P(right) cleared the lower bar

    @classmethod
    def of(cls, result: QuestionResult, decision: Decision, rounds_run: int, n_rounds: int,
           out_of_time: bool = False, under_load: bool = False) -> "EnsembleAnswer":
        return cls(result, decision.vote, rounds_run, n_rounds, decision.stat, out_of_time, decision.confidence,
                   under_load)

    @property
    def ran(self) -> list[str]:
        return [c.retriever for c in self.result.candidates]


def cascade_for(voter_cascade: Cascade, specs: Sequence[str] | None = None) -> Cascade:
    """The voter's cascade, or the caller's explicit retrievers as one round (the rule for
    `eor ask --retrievers` and `AskRequest.retrievers` alike)."""
    return Cascade.single_round(list(specs)) if specs else voter_cascade


class VoteDeadline(Exception):
    """Raised by an `AsyncVote` whose vote missed the request's deadline (the service's)."""


# (positions of the open questions in the batch, specs) -> their results
AsyncRunRound = Callable[[list[int], list[str]], Awaitable[list[QuestionResult]]]
# (results so far, 0-based round k) -> the voter's decisions (voter/decision.py: decide)
AsyncVote = Callable[[list[QuestionResult], int], Awaitable[list[Decision]]]
# the service's load now (voter/cascade.py: ServiceLoad; LoadRule reads it)
ReadLoad = Callable[[], Awaitable[ServiceLoad]]
# after a vote, the questions it did not settle: their provisional answers (progressive replies)
OnProvisional = Callable[[list["EnsembleAnswer"], list[int]], Awaitable[None]]


async def answer_async(questions: Sequence[str], cascade: Cascade, run_round: AsyncRunRound,
                       vote: AsyncVote, on_round: Callable[[int, int, list[str]], None] | None = None,
                       time_left: Callable[[], float] | None = None,
                       on_provisional: OnProvisional | None = None, under_load: LoadRule | None = None,
                       load: ReadLoad | None = None) -> list[EnsembleAnswer]:
    """The orchestration: every question through the cascade; each round is one `run_round`
    call for the questions still open (so the reader batches their prompts together), then
    one vote over everything each open question has so far. When `time_left()` is <= 0 before
    a round, or a vote raises VoteDeadline after one, the open questions end with the vote they
    have (`out_of_time`; their result also lists the last round's answers, which did not vote);
    a first vote that misses the deadline raises. `on_provisional` hears, after each vote, the
    answers of the questions it left open (with their positions), before the next round runs.
    `under_load` with `load`: a question the vote left open whose P(right) clears the rule's lower
    bar stops too when the service is loaded (read once per round, only when such a question is
    there), and its answer says so (`under_load`)."""
    qs = list(questions)
    merged: list[QuestionResult | None] = [None] * len(qs)
    last: dict[int, Decision] = {}
    done: dict[int, EnsembleAnswer] = {}
    n_rounds = len(cascade.rounds)
    for k, members in enumerate(cascade.rounds):
        todo = [i for i in range(len(qs)) if i not in done]
        if not todo:
            break
        if k > 0 and time_left is not None and time_left() <= 0:
            for i in todo:
                done[i] = EnsembleAnswer.of(merged[i], last[i], k, n_rounds, out_of_time=True)
            break
        if on_round is not None:
            on_round(k + 1, n_rounds, list(members))
        results = await run_round(todo, list(members))
        if len(results) != len(todo):
            raise RuntimeError(f"round {k + 1} returned {len(results)} results for {len(todo)} questions")
        for i, r in zip(todo, results):
            merged[i] = QuestionResult.joined(r.question, [m for m in (merged[i], r) if m is not None])
        try:
            decisions = await vote([merged[i] for i in todo], k)
        except VoteDeadline:  # end with the last vote; the round's answers are returned but did not vote
            if k == 0:
                raise
            for i in todo:
                done[i] = EnsembleAnswer.of(merged[i], last[i], k, n_rounds, out_of_time=True)
            break
        for i, d in zip(todo, decisions):
            last[i] = d
            if d.settled:
                done[i] = EnsembleAnswer.of(merged[i], d, k + 1, n_rounds)
        early = [i for i, d in zip(todo, decisions) if i not in done and d.confidence is not None
                 and under_load is not None and under_load.settled(k, d.stat, cascade.thresholds)]
        if early and load is not None and under_load.loaded(await load()):
            for i in early:
                done[i] = EnsembleAnswer.of(merged[i], last[i], k + 1, n_rounds, under_load=True)
        still = [i for i in todo if i not in done]
        if on_provisional is not None and still:
            await on_provisional([EnsembleAnswer.of(merged[i], last[i], k + 1, n_rounds) for i in still], still)
    return [done[i] for i in range(len(qs))]
