"""A child started to yield the CPU: its niceness, and its own session's group at the same niceness."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.common import at_niceness


def test_the_child_runs_niced_in_a_session_and_autogroup_of_its_own():
    out = subprocess.run([sys.executable, "-c", "import os; print(os.nice(0), os.getsid(0), os.getpid())"],
                         capture_output=True, text=True, check=True, start_new_session=True,
                         preexec_fn=at_niceness(7)).stdout.split()
    nice, sid, pid = map(int, out)
    assert nice == min(19, os.nice(0) + 7)
    assert sid == pid != os.getsid(0)


@pytest.mark.skipif(not Path("/proc/self/autogroup").exists(), reason="this kernel has no autogroup")
def test_the_childs_autogroup_is_niced_not_this_ones():
    before = Path("/proc/self/autogroup").read_text()
    out = subprocess.run([sys.executable, "-c", "print(open('/proc/self/autogroup').read())"], capture_output=True,
                         text=True, check=True, start_new_session=True, preexec_fn=at_niceness(7)).stdout
    assert out.strip().endswith("nice 7")
    assert Path("/proc/self/autogroup").read_text() == before
