"""bench/soak.py: production batches alone, then beside a bench that finishes its rounds."""
from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from bench import soak


class FakeClient:
    """Answers every Ask after 10 ms; each reply says it waited 0.25 s on the reader."""

    def __init__(self):
        self.asked, self.lock = [], threading.Lock()

    def ask(self, question, retrievers=()):
        time.sleep(0.01)
        with self.lock:
            self.asked.append(question)
        return SimpleNamespace(latency_s=1.0 + len(self.asked) % 3, reader_s=0.25)


def bench_script(out: Path, rounds: int, reader_s: float, rc: int = 0) -> list[str]:
    """A stand-in bench process: writes `rounds` finished round reports, a little apart."""
    code = (
        "import json, pathlib, sys, time\n"
        f"out = pathlib.Path({str(out)!r}) / 'runs'\n"
        f"for i in range({rounds}):\n"
        "    time.sleep(0.2)\n"
        "    d = out / f'r{i}'; d.mkdir(parents=True)\n"
        f"    (d / 'report.json').write_text(json.dumps({{'meta': {{}}, 'metrics': {{'cost': {{'total': "
        f"{{'reader_s': {reader_s}}}}}}}}}))\n"
        f"sys.exit({rc})\n")
    return [sys.executable, "-c", code]


def test_soak_reports_both_phases_the_rounds_and_the_bench_share(tmp_path):
    out = tmp_path / "bench"
    (out / "runs" / "old").mkdir(parents=True)  # a round of an earlier soak is not counted
    (out / "runs" / "old" / "report.json").write_text(json.dumps({"metrics": {"cost": {"total": {"reader_s": 99}}}}))
    questions = [f"q{i}" for i in range(400)]
    client = FakeClient()
    report = soak.soak(client, questions, n=4, concurrency=2, distinct=2,
                       command=bench_script(out, rounds=3, reader_s=10.0), bench_out=out, log=tmp_path / "bench.log")
    assert report["failed_production_asks"] == 0
    assert report["alone"]["asks"] == 4 and report["alone"]["ok"] == 4
    assert report["bench"]["rc"] == 0 and report["bench"]["rounds_finished"] == 3 and "old" not in report["bench"]["rounds"]
    batches = report["with_bench"]["batches"]
    assert batches >= 1 and report["with_bench"]["asks"] == 4 * batches
    prod = 0.25 * 4 * batches
    assert report["bench_share_of_reader_s"] == pytest.approx(30.0 / (30.0 + prod), abs=1e-3)
    # each batch asks its own fresh questions: the alone phase's pool, then the next ones
    assert sorted(client.asked[:4]) == ["q0", "q0", "q1", "q1"] and set(client.asked[4:8]) == {"q2", "q3"}


def test_a_failing_bench_is_reported_not_hidden(tmp_path):
    out = tmp_path / "bench"
    report = soak.soak(FakeClient(), [f"q{i}" for i in range(400)], n=2, concurrency=1, distinct=1,
                       command=bench_script(out, rounds=0, reader_s=0.0, rc=3), bench_out=out,
                       log=tmp_path / "bench.log")
    assert report["bench"]["rc"] == 3 and report["bench"]["rounds_finished"] == 0
    assert report["bench_share_of_reader_s"] == 0.0


def test_too_few_questions_is_a_clear_error(tmp_path):
    with pytest.raises(SystemExit, match="never-asked questions"):
        soak.soak(FakeClient(), ["q0", "q1"], n=2, concurrency=1, distinct=2, command=["true"],
                  bench_out=tmp_path, log=tmp_path / "log")


def test_the_bench_command_is_eor_bench_with_back_to_back_rounds(tmp_path):
    cmd = soak.bench_command("127.0.0.1:50051", "query", 2, 3, tmp_path, ["--variants", "2"])
    assert cmd[1:4] == ["-m", "serve.cli", "bench"]
    assert cmd[cmd.index("--every") + 1] == "1s" and cmd[cmd.index("--rounds") + 1] == "3"
    assert cmd[-2:] == ["--variants", "2"]
