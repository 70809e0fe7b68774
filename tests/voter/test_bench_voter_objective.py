"""bench/voter_objective.py runs end to end (at a small size) and prints its numbers."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_bench_script_runs_small():
    res = subprocess.run(
        [sys.executable, "bench/voter_objective.py", "--questions", "100", "--retrievers", "5", "--evals", "5", "--restarts", "1"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert res.returncode == 0, res.stderr
    lines = dict(line.split(": ", 1) for line in res.stdout.strip().splitlines())
    assert float(lines["objective_eval_ms_median"]) > 0 and float(lines["fit_s"]) >= 0
    assert 0 <= float(lines["fit_accuracy"]) <= 1
