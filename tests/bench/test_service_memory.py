"""The service's memory by role: every process under the given one, PSS summed (a real child process)."""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from bench import service_memory as sm

ROOT = Path(__file__).resolve().parents[2]


REPLICA = "ray::ServeReplica:eor:"


@pytest.mark.parametrize("title, role", [
    ("VLLM::EngineCore", "reader engines"), ("VLLM::Worker", "reader engines"),
    (REPLICA + "Source_Wiki", "index"), (REPLICA + "Source_Wiki_shard0", "index"), (REPLICA + "Source_SE", "index"), (REPLICA + "Retrievers_0", "retriever groups"),
    ("/x/raylet --node", "ray"), (REPLICA + "Reader_1.5B", "rest"), (REPLICA + "Voter", "rest"),
    ("python eor serve", "rest")])
def test_a_process_role_comes_from_its_title(title, role):
    assert sm.role(title) == role


def test_the_deployment_names_are_the_applications():
    """The names the roles match are those the server gives its deployments (read as text: this bench runs in an
    environment without the server's packages)."""
    text = (ROOT / "serve" / "app" / "application.py").read_text()
    assert 'f"Retrievers_{i}"' in text and 'f"{source_deployment(name)}_shard{k}"' in text
    assert 'return f"Source_{name}"' in (ROOT / "serve" / "config.py").read_text()


def test_the_sum_covers_the_process_and_its_children():
    child = subprocess.Popen([sys.executable, "-c", "import time; b = bytearray(64 << 20); time.sleep(60)"])
    try:
        deadline = time.time() + 20
        while psutil.Process(child.pid).memory_info().rss < 64 << 20:
            assert time.time() < deadline, "the child never held its 64 MiB"
            time.sleep(0.1)
        result = sm.measure(psutil.Process().pid)
    finally:
        child.kill()
        child.wait()
    row = next(r for r in result["each"] if r["pid"] == child.pid)
    assert row["pss_gib"] >= 60 / 1024  # its bytearray: pages of its own
    if "Pss_Anon" in Path("/proc/self/smaps_rollup").read_text():  # kernels that split PSS by kind (Linux 5.x on)
        assert row["anon_gib"] >= 60 / 1024 and row["anon_gib"] + row["file_gib"] + row["shmem_gib"] == \
            pytest.approx(row["pss_gib"], abs=0.02)
    assert result["processes"] >= 2
    assert result["pss_gib"] <= result["rss_gib"] + 0.01
    assert sum(v["processes"] for v in result["by_role"].values()) == result["processes"]


def test_a_pid_that_is_gone_is_said_in_words():
    with pytest.raises(SystemExit, match="no process"):
        sm.main(["--pid", "999999999"])


def test_watching_a_job_reports_its_largest_moment_until_it_ends(tmp_path):
    """A parent that starts a child holding 96 MiB for a while, then ends: the peak is the sum at that time."""
    child = "import time; b = bytearray(96 << 20); time.sleep(2)"
    job = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time; time.sleep(0.5); "
                            f"subprocess.run([sys.executable, '-c', {child!r}]); time.sleep(0.5)"])
    out = tmp_path / "peak.json"
    result = sm.watch(job.pid, 0.2, out)
    job.wait()
    assert result["processes"] == 2 and result["pss_gib"] >= 90 / 1024 and result["samples"] >= 5
    assert json.loads(out.read_text())["pss_gib"] == result["pss_gib"]  # written as it came


def test_watching_a_pid_that_is_gone_is_said_in_words():
    with pytest.raises(SystemExit, match="no process"):
        sm.main(["--pid", "999999999", "--watch", "1"])
