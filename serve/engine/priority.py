"""CPU priority of a reader engine's processes: the quick reader first.

On a machine whose cores every engine shares, an engine whose processes run at a higher
niceness takes the cores only when a lower one's engine leaves them idle. The strong reader's
engine runs niced (serve/config.py: DEFAULT_READERS), so the default reader's early answer
(voter/cascade.py: early_members) reads as if alone while the rest of round 1 reads beside it,
and the round itself ends no later (the same work on the same cores). Measured on 2 cores
(bench/reader_priority.py; docs/notes/2026-11-26-session-26.md): the 0.5B's answer beside the
1.5B's two prompts in 1.26 s with the 1.5B at nice 10 against 2.73 s at 0 (0.93 s alone); the
1.5B's two in 9.23 vs 9.61 s.

Niceness on Linux belongs to each thread, so every thread of every process is set; threads
started later inherit it from the thread that starts them. Raising one's own processes'
niceness needs no privilege.
"""
from __future__ import annotations

import os
from typing import Iterable, Iterator

import psutil

MAX_NICE = 19


def child_pids() -> set[int]:
    """This process's descendants now (an engine's processes are the ones its start adds)."""
    return {c.pid for c in psutil.Process().children(recursive=True)}


def _threads(pids: Iterable[int]) -> Iterator[int]:
    """The thread ids of these processes (a process that ended meanwhile has none)."""
    for pid in pids:
        try:
            threads = psutil.Process(pid).threads()
        except psutil.Error:
            continue
        yield from (t.id for t in threads)


def set_nice(pids: Iterable[int], nice: int) -> int:
    """Every thread of these processes at `nice`; how many threads were set (a process or
    thread that ended meanwhile is skipped, and so is one whose niceness this process may not
    lower: that needs root or CAP_SYS_NICE; raising it never does)."""
    if not 0 <= nice <= MAX_NICE:
        raise ValueError(f"niceness must be 0 to {MAX_NICE}, got {nice}")
    done = 0
    for tid in _threads(pids):
        try:
            os.setpriority(os.PRIO_PROCESS, tid, nice)
            done += 1
        except (ProcessLookupError, PermissionError):
            continue
    return done


def niceness(pids: Iterable[int]) -> set[int]:
    """The niceness of every thread of these processes (those that still run)."""
    out = set()
    for tid in _threads(pids):
        try:
            out.add(os.getpriority(os.PRIO_PROCESS, tid))
        except ProcessLookupError:
            continue
    return out
