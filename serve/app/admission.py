"""Admission control at the ingress (issue 57; the design card's "Traffic beyond capacity"): a
bounded queue in front of the Asks an ingress replica runs, and a refusal at once, with a retry
pushback, for an Ask that finds the queue full, would wait too long, or could not be answered
before its deadline.

Why here and not only in Ray Serve's queues (`max_queued_requests`, also set: a backstop): only
the ingress knows an Ask's Deadline, and a refusal must come before any reader time is spent.

The estimate, kept simple: `running` Asks run at once (`service.max_asks_running`); the others wait
in order, at most `service.max_asks_queued`. S is the service time (slot taken to slot given back)
of the last RECENT Asks that ended without an error or ran out of time (those took at least that
long: leaving them out made S too short under overload, so Asks were let in to fail at their
deadline). With the slots all taken and `q` Asks waiting, a new Ask starts after about
(q + 1) * mean(S) / running seconds (a slot frees every mean(S) / running seconds) and is answered
within S's TAIL quantile after that: the arrival's decision reads the tail, not the mean, so that
an Ask let in rarely finds at its turn that it cannot finish (a refusal then comes a whole wait
after it arrived). It is refused at once (RESOURCE_EXHAUSTED) when that wait is over
`service.max_wait_s` ("wait"), or the wait plus S's tail is over its time left ("deadline"); an
Ask that starts at once always runs (its Deadline bounds it as before). One whose turn comes with
less than mean(S) left is refused then ("deadline"), and one that waits past its deadline all the
same is refused ("expired"): neither is started, and the slot goes to the next. Before any Ask has
ended (a fresh service) at most `running` Asks wait. S is the service's as it runs now: when Asks
start ending degraded (a reader down, the fallback answering) or whole again, the times before are
dropped (they measured another service: after a restart, the fallback's short times let Asks in to
miss their deadline, session 42). An Ask refused or made to wait marks the
service as overflowing for a mean S (`overflowing`: the under-load rule's signal). The pushback a
refusal carries is the wait a new Ask would have, within [MIN_PUSHBACK_S, MAX_PUSHBACK_S]. Limits
are per ingress replica. Core-safe: asyncio only.
"""
from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections import deque
from typing import AsyncIterator

from serve.app import metrics
from serve.app.errors import Overloaded
from serve.deadline import Deadline

RECENT = 32  # service times the estimate reads
TAIL = 0.9  # the quantile of them an arriving Ask's own service time is taken at
MIN_PUSHBACK_S = 0.5
MAX_PUSHBACK_S = 60.0
UNKNOWN_PUSHBACK_S = 1.0  # before any Ask has finished: no service time to go by
REASONS = ("queue_full", "wait", "deadline", "expired")  # the refusal metric's label values


class Served:
    """What the Ask holding a slot turned out to be, set by the caller before the slot is given back
    (None: not known, an Ask that ran out of time: it counts as the service is now)."""

    degraded: bool | None = None


class Admission:
    """One ingress replica's bounded queue. `running` 0: no limit (admission off); `queued` 0: no
    queue (an Ask that finds every slot taken is refused)."""

    def __init__(self, running: int, queued: int, max_wait_s: float = 0.0, recent: int = RECENT):
        if running < 0 or queued < 0 or max_wait_s < 0:
            raise ValueError("service.max_asks_running, max_asks_queued and max_wait_s must be >= 0 "
                             "(0 running: no limit; 0 s: only the deadline bounds the wait)")
        self.limit, self.queue_limit, self.max_wait_s = running, queued, max_wait_s
        self.running = 0
        self._waiting: deque[asyncio.Future] = deque()
        self._times: deque[float] = deque(maxlen=recent)
        self._overflow_at: float | None = None  # when an Ask last was refused or had to wait
        self._degraded = False  # whether the service times in `_times` are of degraded Asks

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def overflowing(self) -> bool:
        """Demand past capacity: an Ask waits now, or one was refused or had to wait within the
        last mean service time (the span in which a slot freed sooner serves one of them)."""
        if self._waiting:
            return True
        s = self.service_s()
        return self._overflow_at is not None and s is not None and time.monotonic() - self._overflow_at < s

    def service_s(self) -> float | None:
        """The mean service time of the last Asks that ended well (None: none yet)."""
        return sum(self._times) / len(self._times) if self._times else None

    def tail_s(self) -> float | None:
        """The TAIL quantile of the same service times (nearest rank; None: none yet)."""
        if not self._times:
            return None
        ranked = sorted(self._times)
        return ranked[max(0, math.ceil(TAIL * len(ranked)) - 1)]

    def wait_s(self, ahead: int | None = None) -> float:
        """Seconds until a new Ask (behind `ahead` waiting ones; default: those waiting now) gets a
        slot: 0 while one is free."""
        if not self.limit or (self.running < self.limit and not self._waiting):
            return 0.0
        s = self.service_s()
        if s is None:
            return UNKNOWN_PUSHBACK_S
        return ((self.waiting if ahead is None else ahead) + 1) * s / self.limit

    def pushback_s(self) -> float:
        return min(MAX_PUSHBACK_S, max(MIN_PUSHBACK_S, self.wait_s()))

    def _refuse(self, reason: str, why: str) -> Overloaded:
        self._overflow_at = time.monotonic()
        metrics.inc("eor_refusals", reason=reason)
        pushback = self.pushback_s()
        return Overloaded(f"{why}; try again in {pushback:.1f} s (the retry pushback)", pushback, reason)

    def check(self, deadline: Deadline | None) -> None:
        """Refuse now (Overloaded) what cannot be served: a full queue, or an Ask that would wait and
        then not be answered before its deadline."""
        if not self.limit or (self.running < self.limit and not self._waiting):
            return
        if self.waiting >= self.queue_limit:
            raise self._refuse("queue_full", f"the service is at capacity: {self.running} Asks running and "
                                             f"{self.waiting} waiting (service.max_asks_queued {self.queue_limit})")
        tail, wait = self.tail_s(), self.wait_s()
        if tail is None:  # no Ask has ended yet: nothing to estimate by, so the queue is kept to one round of slots
            if self.waiting >= self.limit:
                raise self._refuse("wait", f"the service is starting: {self.running} Asks running and "
                                           f"{self.waiting} waiting, with no service time to go by yet")
            return
        if self.max_wait_s and wait > self.max_wait_s:
            raise self._refuse("wait", f"the service is busy: this Ask would wait about {wait:.1f} s for its turn, "
                                       f"over the service's {self.max_wait_s:g} s (service.max_wait_s)")
        if deadline is not None and wait + tail > deadline.left():
            raise self._refuse("deadline", f"the service is busy: this Ask would wait about {wait:.1f} s and take up "
                                           f"to {tail:.1f} s more, past its {deadline.left():.1f} s deadline")

    @contextlib.asynccontextmanager
    async def slot(self, deadline: Deadline | None) -> AsyncIterator[Served]:
        """Hold one of the running slots for an Ask: at once, after waiting in order, or not at all
        (Overloaded). The Ask's service time counts toward the estimate when it ends without an error;
        the caller marks the yielded Served degraded when the Ask was answered so."""
        self.check(deadline)
        if self.limit and (self.running >= self.limit or self._waiting):
            await self._wait(deadline)
        else:
            self.running += 1
            metrics.set_gauge("eor_asks_waiting", self.waiting)  # 0 waiting is a reading too (the dashboard's)
        t = time.monotonic()
        ok, served = False, Served()
        try:
            yield served
            ok = True
        finally:
            if ok or (deadline is not None and deadline.left() <= 0):  # done, or took all its time
                self._record(time.monotonic() - t, served.degraded)
            self._release()

    def _record(self, seconds: float, degraded: bool | None) -> None:
        if degraded is not None and degraded != self._degraded:  # a reader went down or came back: another service
            self._times.clear()
            self._degraded = degraded
        self._times.append(seconds)

    async def _wait(self, deadline: Deadline | None) -> None:
        turn = asyncio.get_running_loop().create_future()
        self._waiting.append(turn)
        self._overflow_at = time.monotonic()
        metrics.set_gauge("eor_asks_waiting", self.waiting)
        try:
            await asyncio.wait_for(asyncio.shield(turn), None if deadline is None else deadline.left())
        except asyncio.TimeoutError:
            if turn.done() and not turn.cancelled():  # given a slot as the time ran out: hand it on
                self._release()
            raise self._refuse("expired", "the Ask waited in the service's queue until its deadline passed; "
                                          "it was not started") from None
        except BaseException:  # the caller went away while waiting
            if turn.done() and not turn.cancelled():
                self._release()
            raise
        finally:
            if turn in self._waiting:
                self._waiting.remove(turn)
            if not turn.done():
                turn.cancel()
            metrics.set_gauge("eor_asks_waiting", self.waiting)
        s = self.service_s()  # the slot is this Ask's now
        if deadline is not None and s is not None and deadline.left() < s:  # it would run out of time: hand it on
            self._release()
            raise self._refuse("deadline", f"this Ask's turn came with {deadline.left():.1f} s left, less than the "
                                           f"{s:.1f} s an Ask takes now; it was not started")

    def _release(self) -> None:
        """Give the slot to the first Ask still waiting (it stays taken), else free it."""
        while self._waiting:
            turn = self._waiting.popleft()
            if not turn.done():
                turn.set_result(None)
                return
        self.running -= 1
