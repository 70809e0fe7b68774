"""A command started to yield the CPU: niced, in a session of its own, that session's group niced too."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.common import set_autogroup_nice, start_niced

REPORT = "import os, time; time.sleep(0.5); print(os.nice(0), os.getsid(0), os.getpid())"


def test_the_command_runs_niced_in_a_session_of_its_own():
    proc = start_niced([sys.executable, "-c", REPORT], 7, stdout=subprocess.PIPE, text=True)
    nice, sid, pid = map(int, proc.communicate()[0].split())
    assert nice == min(19, os.nice(0) + 7)
    assert sid == pid == proc.pid and sid != os.getsid(0)


@pytest.mark.skipif(not Path("/proc/self/autogroup").exists(), reason="this kernel has no autogroup")
def test_its_sessions_group_is_niced_and_this_ones_is_not():
    before = Path("/proc/self/autogroup").read_text()
    proc = start_niced([sys.executable, "-c", "import time; time.sleep(0.5); print(open('/proc/self/autogroup').read())"],
                       7, stdout=subprocess.PIPE, text=True)
    assert proc.communicate()[0].strip().endswith("nice 7")
    assert Path("/proc/self/autogroup").read_text() == before


def test_a_process_that_ended_is_no_error():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    assert set_autogroup_nice(proc.pid, 7) is False


def test_a_report_is_printed_and_written_the_same(tmp_path, capsys):
    import json

    from bench.common import emit_json

    emit_json({"a": 1}, tmp_path / "deep" / "r.json")
    assert json.loads(capsys.readouterr().out) == {"a": 1} == json.loads((tmp_path / "deep" / "r.json").read_text())
    emit_json({"b": 2}, None)
    assert json.loads(capsys.readouterr().out) == {"b": 2}
