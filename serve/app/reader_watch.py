"""What the ingress knows of its readers between Asks: each reader deployment's requests in its
engine (running + waiting: the load signal the stop rule reads, voter/cascade.py: LoadRule) and
whether it is down or restarting (an Ask then runs the voter's single-reader fallback: degraded,
not UNAVAILABLE). One `Reader.queue()` call per reader at most every FRESH_S, shared by every Ask
of the ingress replica, each bounded by QUEUE_S: a reader that does not answer in time counts as
down (its replica restarting)."""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any, Collection, Mapping

from serve.app.errors import one_line

FRESH_S = 0.5  # a reading this recent is reused
QUEUE_S = 1.0  # the longest a reading waits for a reader


@dataclass(frozen=True)
class ReaderState:
    in_flight: int
    down: str | None  # why it is down or restarting; None: up


class ReaderWatch:
    """`handles`: reader name ("" the default, "1.5B", ...) -> its deployment's handle."""

    def __init__(self, handles: Mapping[str, Any]):
        self.handles = dict(handles)
        self._seen: dict[str, tuple[float, ReaderState]] = {}
        self._reading: dict[str, asyncio.Future] = {}

    async def _read(self, name: str) -> ReaderState:
        try:
            got = await asyncio.wait_for(self._call(name), QUEUE_S)
            state = ReaderState(int(got.get("in_flight") or 0), got.get("down") or None)
        except Exception as exc:  # noqa: BLE001 - a reader that does not answer is down for now
            why = "not answering in time" if isinstance(exc, asyncio.TimeoutError) else one_line(exc)
            state = ReaderState(0, f"reader not answering ({why})")
        self._seen[name] = (time.monotonic(), state)
        return state

    async def _call(self, name: str) -> dict:
        return await self.handles[name].queue.remote()

    async def state(self, name: str, fresh: bool = False) -> ReaderState:
        """The reader's state, at most FRESH_S old (`fresh`: read now); concurrent Asks share one read."""
        seen = self._seen.get(name)
        if seen is not None and not fresh and time.monotonic() - seen[0] < FRESH_S:
            return seen[1]
        if name not in self._reading or self._reading[name].done():
            self._reading[name] = asyncio.ensure_future(self._read(name))
        return await asyncio.shield(self._reading[name])

    async def down(self, names: Collection[str], fresh: bool = False) -> dict[str, str]:
        """Of the readers `names`, those down or restarting, with why."""
        known = [n for n in names if n in self.handles]
        states = await asyncio.gather(*[self.state(n, fresh) for n in known])
        return {n: s.down for n, s in zip(known, states) if s.down}

    async def in_flight(self, names: Collection[str]) -> int:
        """The busiest of the readers `names`: its requests running + waiting (0 without readers)."""
        known = [n for n in names if n in self.handles]
        states = await asyncio.gather(*[self.state(n) for n in known])
        return max((s.in_flight for s in states), default=0)
