"""What a person sees on the terminal: one line per step, with its time; library noise (vLLM,
torch, transformers warnings and progress bars, from this process and its children) goes to
$EOR_HOME/logs/eor.log instead, unless --verbose.

It works on file descriptors 1 and 2, not on `sys.stdout`/`sys.stderr`: the engine's worker
processes and C++ libraries write there directly, and vLLM logs to standard output (which
would also corrupt `--json`). Results are printed after the `with` block, on the real stdout.
"""
from __future__ import annotations

import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

from serve.paths import eor_home


_TERMINAL: bool | None = None  # set while the warm reader writes for a client (for_terminal)


def log_path() -> Path:
    return eor_home() / "logs" / "eor.log"


@contextmanager
def for_terminal(is_terminal: bool):
    """Progress lines shaped for the `eor ask` the warm reader answers for (a terminal or not),
    whatever its own standard error is (a pipe to that ask)."""
    global _TERMINAL
    _TERMINAL = is_terminal
    try:
        yield
    finally:
        _TERMINAL = None


def _interactive(stream: TextIO) -> bool:
    return getattr(stream, "isatty", lambda: False)() if _TERMINAL is None else _TERMINAL


class Console:
    """`with Console(verbose) as con:` ... `con.step("starting the reader")` ... `con.done()`."""

    def __init__(self, verbose: bool = False, stream: TextIO | None = None):
        self.verbose = verbose
        self._stream = stream
        self._saved_fds: tuple[int, int] | None = None
        self.out: TextIO = stream or sys.stderr
        self._t0 = time.perf_counter()
        self._open: tuple[str, float] | None = None

    def __enter__(self) -> "Console":
        if self.verbose or self._stream is not None:
            return self
        path = log_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        sys.stdout.flush()
        sys.stderr.flush()
        self._saved_fds = (os.dup(1), os.dup(2))
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        self.out = os.fdopen(os.dup(self._saved_fds[1]), "w", buffering=1)
        return self

    def __exit__(self, *exc) -> None:
        try:
            self.done()
        finally:  # also when the terminal went away (a warm reader's client that ended)
            self._restore()

    def _restore(self) -> None:
        if self._saved_fds is not None:
            sys.stdout.flush()
            sys.stderr.flush()
            for target, saved in zip((1, 2), self._saved_fds):
                os.dup2(saved, target)
                os.close(saved)
            self._saved_fds = None
            try:
                self.out.close()
            except OSError:  # the reader of its pipe went away: closed all the same
                pass
            self.out = sys.stderr

    def step(self, what: str) -> None:
        """Start a step; the previous one is closed with its time."""
        self.done()
        self._open = (what, time.perf_counter())
        interactive = _interactive(self.out)
        self.out.write(f"{what}..." + ("" if interactive else "\n"))
        self.out.flush()

    def done(self) -> None:
        if self._open is None:
            return
        what, t = self._open
        self._open = None
        interactive = _interactive(self.out)
        took = f"{time.perf_counter() - t:.1f} s"
        self.out.write(f" {took}\n" if interactive else f"  {what}: {took}\n")
        self.out.flush()

    def note(self, message: str) -> None:
        """A line of its own between steps (a provisional answer)."""
        self.done()
        self.out.write(f"{message}\n")
        self.out.flush()

    def warn(self, message: str) -> None:
        self.done()
        self.out.write(f"eor: warning: {message}\n")
        self.out.flush()
