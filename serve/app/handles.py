"""Remote calls of the service, each bounded by the Ask's Deadline (serve/deadline.py).

From the event loop (the ingress), `ServiceCrew`: the orchestrator's crew (serve/orchestrator.py)
whose work is done by the deployments: one `run` per retriever group per round, source
searches, the vote; every call awaited with `bounded` and cancelled past the deadline.

Inside a thin retriever actor (or the Voter), pool components backed by Serve handles, so the
ordinary `RetrieverPool` runs while the heavy parts live once elsewhere:

- `RemoteSource`  -> a source deployment's `search(queries, k)` (Wiki: faiss; SE: Lucene/HTTP; ...)
- `RemoteEncoder` -> the first source deployment's `encode(texts)` (the @RR reranker)
- `RemoteReader`  -> a reader deployment (one per served reader): typed prompts (`PromptText`) go as they are; the
  Reader formats them (it holds the tokenizer and chat template), deduplicates, caches and
  counts their tokens: one cache and dedup layer, on the reader's side.

These are called from the worker thread that runs the pool (never from the event loop), under
the Deadline of the Ask it works for (`working_for`); the time spent in each kind of call is
accumulated per thread for the stage metrics.
"""
from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from contextvars import ContextVar
from typing import Any, Iterator, Mapping, Sequence

from ray import exceptions as ray_exceptions

from retrievers.groundwork import Groundwork, RoundRun
from retrievers.reader import Generation, PromptText, SamplingParams
from retrievers.sources.base import PASSAGES
from retrievers.types import ERROR, TIMEOUT, Candidate, Failure, Passage, QuestionResult
from serve.app import metrics
from serve.app.errors import reader_unavailable, status_of, unwrapped
from serve.deadline import Deadline
from serve.ensemble import VoteDeadline
from serve.orchestrator import RoundInput
from voter.cascade import Cascade
from voter.decision import Decision


async def bounded(response: Any, deadline: Deadline | None) -> Any:
    """A Ray Serve response awaited until `deadline` (None: no limit). Past it, or when the
    awaiting task is cancelled (the client went away), the request is cancelled too (Ray does
    not do that by itself): a cancelled reader call aborts its engine requests, and the calls a
    retriever actor makes wait no longer than the same deadline (`working_for`). TimeoutError
    past the deadline."""
    async def wait():
        return await response
    try:
        return await asyncio.wait_for(wait(), None if deadline is None else deadline.left())
    except (asyncio.TimeoutError, asyncio.CancelledError):
        response.cancel()
        raise


def _ran_late(exc: BaseException) -> bool:
    """A vote that raised VoteDeadline in the Voter (Ray hands it back as its cause)."""
    return isinstance(unwrapped(exc), VoteDeadline)


class ServiceCrew:
    """The orchestrator's crew in the service: retriever groups, sources (`shapes`: each configured
    source's hit shape) and the Voter (the Ask's voter, `voter_key`) behind Serve handles. A group
    that errors, crashes or misses the deadline does not fail the Ask: its specs come back as
    failed candidates (the reader being down does: UNAVAILABLE, with the reader's own line)."""

    def __init__(self, groups: Sequence[tuple[tuple[str, ...], Any]], sources: dict[str, Any],
                 shapes: Mapping[str, str], voter: Any, voter_key: str):
        self.groups = list(groups)
        self.shapes = {name: shape for name, shape in shapes.items() if name in sources}  # those it can search
        self._handles, self._voter, self._key = dict(sources), voter, voter_key

    async def search(self, src: str, queries: list[str], k: int, deadline: Deadline | None):
        waited = deadline.left() if deadline is not None else 0.0
        try:
            return await bounded(self._handles[src].search.remote(queries, k), deadline)
        except asyncio.TimeoutError:
            return Failure(TIMEOUT, f"{src} search timed out after {waited:g} s")
        except Exception as exc:
            return Failure(ERROR, f"{src} search failed: {status_of(exc)[1]}")

    async def run(self, worker: Any, round_: RoundInput) -> RoundRun:
        waited = round_.deadline.left() if round_.deadline is not None else 0.0
        try:
            out = await bounded(worker.run.remote(round_), round_.deadline)
        except Exception as exc:
            if reader_unavailable(exc):
                raise  # nothing can be read: UNAVAILABLE, with the reader's own line
            why = (Failure(TIMEOUT, f"timed out after {waited:g} s") if isinstance(exc, asyncio.TimeoutError)
                   else Failure(ERROR, f"retriever actor failed: {type(exc).__name__}"))
            out = RoundRun([QuestionResult(q, tuple(Candidate.failed(s, why) for s in round_.specs))
                            for q in round_.questions], [Groundwork() for _ in round_.questions])
        for c in (c for r in out.results for c in r.candidates if c.error_kind is not None):  # each failed answer
            metrics.inc("eor_retriever_timeouts" if c.error_kind == TIMEOUT else "eor_retriever_errors",
                        retriever=c.retriever)
        return out

    async def decide(self, results: list[QuestionResult], cascade: Cascade, k: int,
                     deadline: Deadline | None) -> list[Decision]:
        t = time.perf_counter()
        try:
            out = await bounded(self._voter.decide.remote([r.for_vote() for r in results], self._key, cascade, k,
                                                          deadline), deadline)
        except Exception as exc:
            if _ran_late(exc) or (isinstance(exc, asyncio.TimeoutError)
                                  and not isinstance(exc, ray_exceptions.RayError)):  # a RayError: the voter failed
                raise VoteDeadline from None
            raise
        metrics.observe("eor_stage_seconds", time.perf_counter() - t, stage="vote")
        return out


class StageClock:
    """Seconds spent in remote calls, per stage, for the calling thread."""

    _local = threading.local()

    @classmethod
    def reset(cls) -> None:
        cls._local.spent = {}

    @classmethod
    def add(cls, stage: str, seconds: float) -> None:
        spent = getattr(cls._local, "spent", None)
        if spent is None:
            spent = cls._local.spent = {}
        spent[stage] = spent.get(stage, 0.0) + seconds

    @classmethod
    def spent(cls) -> dict[str, float]:
        return dict(getattr(cls._local, "spent", {}) or {})


_WORKING_FOR: ContextVar[Deadline | None] = ContextVar("eor_deadline", default=None)


@contextlib.contextmanager
def working_for(deadline: Deadline | None) -> Iterator[None]:
    """Run a block for an Ask with this Deadline: a remote call made in it never waits past the
    deadline, and one that would is cancelled, so the deployment behind it stops (the reader
    aborts its engine requests)."""
    token = _WORKING_FOR.set(deadline)
    try:
        yield
    finally:
        _WORKING_FOR.reset(token)


def _call(stage: str, method: Any, *args: Any, timeout_s: float | None = None) -> Any:
    t = time.perf_counter()
    deadline = _WORKING_FOR.get()
    if deadline is not None:
        timeout_s = deadline.left() if timeout_s is None else min(timeout_s, deadline.left())
    resp = method.remote(*args)
    try:
        return resp.result(timeout_s=timeout_s)
    except TimeoutError:
        resp.cancel()  # the work behind a missed deadline stops too
        raise
    finally:
        StageClock.add(stage, time.perf_counter() - t)


class RemoteSource:
    def __init__(self, name: str, handle: Any, timeout_s: float | None = None, shape: str = PASSAGES):
        self.name = name
        self.handle = handle
        self.timeout_s = timeout_s
        self.shape = shape  # the configured source's (serve/builder.py: source_shapes)

    def load(self) -> "RemoteSource":
        return self

    def search(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        return _call("retrieve", self.handle.search, list(queries), int(k), timeout_s=self.timeout_s)


class RemoteIndexShards:
    """A dense index split over index-shard actors, searched as one faiss index: every shard
    asked at once, each query's top k merged (retrievers/sources/knn.py: merge_topk)."""

    def __init__(self, handles: Sequence[Any], index_dir: str = ""):
        self.handles = list(handles)
        self.index_dir = index_dir  # the base the shards search ("": the one each loaded first)

    def search(self, vectors, k: int):
        from retrievers.sources.knn import merge_topk

        t = time.perf_counter()
        pending = [h.search.remote(vectors, int(k), self.index_dir) for h in self.handles]
        try:
            return merge_topk([resp.result() for resp in pending], k)
        finally:
            StageClock.add("retrieve", time.perf_counter() - t)


class RemoteEncoder:
    def __init__(self, handle: Any, timeout_s: float | None = None):
        self.handle = handle
        self.timeout_s = timeout_s

    def load(self) -> "RemoteEncoder":
        return self

    def encode(self, texts: Sequence[str], show_progress: bool = False):
        return _call("retrieve", self.handle.encode, list(texts), timeout_s=self.timeout_s)


class RemoteReader:
    """A `PromptReader` whose calls go to a reader deployment, under the request's deadline: the
    pool's readers and the voter's in a thin actor."""

    def __init__(self, handle: Any, model_id: str = "remote-reader", timeout_s: float | None = None):
        self.handle = handle
        self.model_id = model_id
        self.timeout_s = timeout_s

    def generate(self, prompts: Sequence[PromptText], params: SamplingParams) -> list[str]:
        return _call("read", self.handle.generate, list(prompts), params, timeout_s=self.timeout_s)

    def generate_counted(self, prompts: Sequence[PromptText], params: SamplingParams) -> list[Generation]:
        return _call("read", self.handle.generate_counted, list(prompts), params, timeout_s=self.timeout_s)
