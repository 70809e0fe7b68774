"""The service's errors, typed, and what a caller is told: one line, never a traceback."""
from __future__ import annotations

import re


class ReaderUnavailable(RuntimeError):
    """The reader engine is down (and restarting): callers get UNAVAILABLE with this one line."""


def engine_died(exc: BaseException) -> bool:
    """vLLM's own signal that its engine core is gone (EngineDeadError; a worker killed under
    it surfaces the same way), or the pipe to it broke. EngineGenerateError is not: vLLM calls
    it recoverable (one bad request), and it must not restart the engine for everyone."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:  # the error itself, or what it wraps
        seen.add(id(exc))
        if {t.__name__ for t in type(exc).__mro__} & {"EngineDeadError", "BrokenPipeError", "ConnectionResetError"}:
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def one_line(exc: BaseException) -> str:
    """A message a user can read: the first line, no terminal colour codes, no traceback."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc)).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".strip()[:300]
