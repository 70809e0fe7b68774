"""What /proc says about the warm reader's processes: which process a pid is (its start
time), its children (vLLM's engine process) and the memory they hold. Linux."""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Sequence


def process_start(pid: int) -> int | None:
    """The process's start time (clock ticks since boot), or None when it is gone or a zombie:
    with the pid it names one process (a pid is reused, a pid and a start time are not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rpartition(")")[2].split()
    return None if fields[0] in ("Z", "X") else int(fields[19])


def children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            out += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            pass
    return out


def descendants(pid: int) -> list[int]:
    found, todo = [], children(pid)
    while todo:
        p = todo.pop()
        found.append(p)
        todo += children(p)
    return found


def rss_bytes(pid: int) -> int:
    """Resident memory of the process and its descendants (pages they share count twice: an
    upper bound)."""
    total = 0
    for p in [pid, *descendants(pid)]:
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
        except OSError:
            pass
    return total


def stop_processes(procs: Sequence[tuple[int, int | None]], wait_s: float) -> list[int]:
    """Wait up to `wait_s` for these (pid, start time) processes to end, then SIGKILL each still
    the same process; the pids killed. A reader's engine must not outlive it: an orphaned
    engine holds its memory (GiBs) with nothing left to stop it (vLLM's own shutdown waits a
    few seconds, which a loaded machine can outlast)."""
    left = [(p, s) for p, s in procs if s is not None]
    deadline = time.monotonic() + wait_s
    while True:
        left = [(p, s) for p, s in left if process_start(p) == s]
        if not left or time.monotonic() >= deadline:
            break
        time.sleep(0.1)
    killed = []
    for p, s in left:
        if process_start(p) == s:
            try:
                os.kill(p, signal.SIGKILL)
                killed.append(p)
            except OSError:
                pass
    return killed
