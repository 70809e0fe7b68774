"""One Ask's deadline: an absolute time, made once at the front and carried to every call.

Within a process it is a `time.monotonic()` value. Pickled (a Ray call to another actor,
perhaps on another node) it travels as wall-clock time and is a monotonic time again where it
lands, so every actor stops at the same instant. Core-safe: no Ray, no gRPC.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass

MAX_DEADLINE_S = 3600.0  # the longest deadline a request may ask for


class InvalidDeadline(ValueError):
    """A deadline a caller asked for that cannot be kept (one line: the service's INVALID_ARGUMENT)."""


def _landed(wall_at: float, seconds: float) -> "Deadline":
    """A pickled Deadline, back on this process's monotonic clock."""
    return Deadline(time.monotonic() + (wall_at - time.time()), seconds)


@dataclass(frozen=True)
class Deadline:
    at: float  # time.monotonic() when it passes
    seconds: float  # the budget it was made with: for messages, and the share a vote keeps

    @classmethod
    def after(cls, seconds: float) -> "Deadline":
        return cls(time.monotonic() + seconds, seconds)

    def left(self) -> float:
        """Seconds until it passes (0 once it has)."""
        return max(0.0, self.at - time.monotonic())

    @property
    def passed(self) -> bool:
        return time.monotonic() >= self.at

    def earliest(self, other: "Deadline | None") -> "Deadline":
        return self if other is None or self.at <= other.at else other

    def at_least(self, seconds: float) -> "Deadline":
        """This deadline, or `seconds` from now if that is later (a vote always gets its reserve)."""
        floor = time.monotonic() + seconds
        return self if self.at >= floor else Deadline(floor, self.seconds)

    def share(self, fraction: float) -> "Deadline":
        """The first `fraction` of the time left: a step that must leave time for the ones after it."""
        left = self.left() * fraction
        return Deadline(time.monotonic() + left, left)

    def __reduce__(self):  # across processes: wall-clock time
        return _landed, (self.at - time.monotonic() + time.time(), self.seconds)


def checked_seconds(seconds: float, name: str = "deadline_s") -> float:
    """A deadline a caller asked for, in seconds: finite, above 0, at most MAX_DEADLINE_S."""
    s = float(seconds)
    if not math.isfinite(s) or s <= 0 or s > MAX_DEADLINE_S:
        raise InvalidDeadline(f"{name} must be above 0 and at most {MAX_DEADLINE_S:g} seconds "
                              f"(leave it unset for the server's default), got {s:g}")
    return s


def ask_deadline(asked_s: float | None, default_s: float, transport: Deadline | None = None) -> Deadline:
    """The one deadline of an Ask: the seconds it asked for (None: not given, the service's
    default), never later than the transport's (the client's gRPC deadline, less the time the
    reply needs). The shortest wins."""
    seconds = default_s if asked_s is None else checked_seconds(asked_s)
    return Deadline.after(seconds).earliest(transport)
