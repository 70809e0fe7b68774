"""Pool components backed by Serve deployment handles, so a thin retriever actor can run
the ordinary `RetrieverPool` staged logic while the heavy parts live once elsewhere:

- `RemoteSource`  -> a source deployment's `search(queries, k)` (Wiki: faiss; SE: Lucene/HTTP; ...)
- `RemoteEncoder` -> the first source deployment's `encode(texts)` (the @RR reranker)
- `RemoteReader`  -> the reader deployment: typed prompts (`PromptText`) go as they are; the
  Reader formats them (it holds the tokenizer and chat template), deduplicates, caches and
  counts their tokens: one cache and dedup layer, on the reader's side.

These are called from the worker thread that runs `pool.run` (never from the event loop);
the time spent in each kind of call is accumulated per thread for the stage metrics.
`bounded` is the event loop's counterpart (the ingress): a handle's response awaited under a
deadline, and cancelled past it.
"""
from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Sequence

from retrievers.reader import Counted, PromptText, SamplingParams
from retrievers.sources.base import PASSAGES
from retrievers.types import Passage


async def bounded(response: Any, timeout: float) -> Any:
    """A Ray Serve response awaited at most `timeout` s. Past it, or when the awaiting task is
    cancelled (the client went away), the request is cancelled too (Ray does not do that by
    itself); the reader calls a retriever actor makes are bounded by the same deadline
    (`CallDeadline`), and a cancelled reader call aborts its engine requests. TimeoutError past
    the deadline."""
    async def wait():
        return await response
    try:
        return await asyncio.wait_for(wait(), timeout)
    except (asyncio.TimeoutError, asyncio.CancelledError):
        response.cancel()
        raise


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


class CallDeadline:
    """The deadline of the request the calling thread works for (a monotonic time; None: only
    each call's own timeout). A remote call never waits past it, and one that would is
    cancelled, so the deployment behind it stops (the reader aborts its engine requests)."""

    _local = threading.local()

    @classmethod
    def set(cls, seconds: float | None) -> None:
        cls._local.at = None if seconds is None else time.monotonic() + max(0.0, seconds)

    @classmethod
    def left(cls) -> float | None:
        at = getattr(cls._local, "at", None)
        return None if at is None else max(0.0, at - time.monotonic())


def _call(stage: str, method: Any, *args: Any, timeout_s: float | None = None) -> Any:
    t = time.perf_counter()
    left = CallDeadline.left()
    if left is not None:
        timeout_s = left if timeout_s is None else min(timeout_s, left)
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


class RemoteEncoder:
    def __init__(self, handle: Any, timeout_s: float | None = None):
        self.handle = handle
        self.timeout_s = timeout_s

    def load(self) -> "RemoteEncoder":
        return self

    def encode(self, texts: Sequence[str], show_progress: bool = False):
        return _call("retrieve", self.handle.encode, list(texts), timeout_s=self.timeout_s)


class RemoteReader:
    """A `PromptReader` whose calls go to the shared reader deployment, under the request's
    deadline: the pool's and the voter's reader in a thin actor."""

    def __init__(self, handle: Any, model_id: str = "remote-reader", timeout_s: float | None = None):
        self.handle = handle
        self.model_id = model_id
        self.timeout_s = timeout_s

    def generate(self, prompts: Sequence[PromptText], params: SamplingParams) -> list[str]:
        return _call("read", self.handle.generate, list(prompts), params, timeout_s=self.timeout_s)

    def generate_counted(self, prompts: Sequence[PromptText], params: SamplingParams) -> list[Counted]:
        return _call("read", self.handle.generate_counted, list(prompts), params, timeout_s=self.timeout_s)
