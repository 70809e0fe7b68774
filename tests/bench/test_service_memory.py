"""The service's memory by role: every process under the given one, PSS summed (a real child process)."""
from __future__ import annotations

import subprocess
import sys
import time

import psutil
import pytest

from bench import service_memory as sm


@pytest.mark.parametrize("title, role", [
    ("VLLM::EngineCore", "reader engines"), ("VLLM::Worker", "reader engines"),
    ("ray::ServeReplica:eor:IndexShard-0", "index"), ("ray::ServeReplica:eor:Source-Wiki", "index"),
    ("ray::ServeReplica:eor:RetrieverGroup", "retriever groups"), ("/x/raylet --node", "ray"),
    ("ray::ServeReplica:eor:Reader-1.5B", "rest"), ("python eor serve", "rest")])
def test_a_process_role_comes_from_its_title(title, role):
    assert sm.role(title) == role


def test_the_sum_covers_the_process_and_its_children():
    child = subprocess.Popen([sys.executable, "-c", "import time; b = bytearray(64 << 20); time.sleep(60)"])
    try:
        deadline = time.time() + 20
        while psutil.Process(child.pid).memory_info().rss < 64 << 20 and time.time() < deadline:
            time.sleep(0.1)
        result = sm.measure(psutil.Process().pid)
    finally:
        child.kill()
        child.wait()
    assert child.pid in {r["pid"] for r in result["each"]}
    assert result["processes"] >= 2
    assert result["pss_gib"] >= 64 / 1024  # the child's bytearray, its own pages
    assert result["pss_gib"] <= result["rss_gib"] + 0.01
    assert sum(v["processes"] for v in result["by_role"].values()) == result["processes"]


def test_a_pid_that_is_gone_is_said_in_words():
    with pytest.raises(SystemExit, match="no process"):
        sm.main(["--pid", "999999999"])
