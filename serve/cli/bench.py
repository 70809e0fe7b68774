"""`eor bench`: the robustness suites, a gRPC client in their own environment (.venv-bench)."""
from __future__ import annotations

import sys
from pathlib import Path

BENCH_PYTHON = Path(__file__).resolve().parents[2] / ".venv-bench" / "bin" / "python"


def cmd_bench(args) -> int:
    """The bench is a separate gRPC client with its own environment (TextAttack needs
    transformers < 5, vLLM >= 5): run it there, in a child process."""
    return run_bench(args.rest)


def run_bench(rest: list[str]) -> int:
    import subprocess

    python = str(BENCH_PYTHON) if BENCH_PYTHON.exists() else sys.executable
    if python == sys.executable:
        print(f"eor: note: {BENCH_PYTHON} not found (bench/setup.sh creates it); running the bench here, "
              "where the TextAttack perturbations are unavailable", file=sys.stderr)
    return subprocess.call([python, "-m", "bench.robust", *rest], cwd=BENCH_PYTHON.parents[2])

