"""The warm reader's processes (serve/cli/warm/procs.py): its engine never outlives it."""
from __future__ import annotations

import subprocess
import sys
import time

from serve.cli.warm.procs import process_start, stop_processes


def _child(seconds: float) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", f"import time; time.sleep({seconds})"])


def test_a_process_that_outlives_the_wait_is_killed_and_one_that_ends_in_time_is_not():
    stuck, quick = _child(60), _child(0.2)
    try:
        procs = [(p.pid, process_start(p.pid)) for p in (stuck, quick)]
        t = time.monotonic()
        assert stop_processes(procs, wait_s=1.5) == [stuck.pid]
        assert time.monotonic() - t >= 1.4  # it waited for the engine's own shutdown first
        assert stuck.wait(timeout=10) == -9 and quick.wait(timeout=10) == 0
    finally:
        stuck.kill()


def test_a_reused_pid_or_a_gone_process_is_never_killed():
    other = _child(60)
    try:
        start = process_start(other.pid)
        assert stop_processes([(other.pid, start + 1), (other.pid, None)], wait_s=0.2) == []
        assert other.poll() is None  # another process with that pid: left alone
    finally:
        other.kill()
        other.wait()
    assert stop_processes([(other.pid, start)], wait_s=0.2) == []  # gone already
