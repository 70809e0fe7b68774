"""The serving app's modules stay under 400 lines each: a module that grows past it holds more
than one concern and is split (ARCHITECTURE.md: one home per concept)."""
from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MODULES = sorted((ROOT / "serve" / "app").glob("*.py")) + [ROOT / "bench" / "http_vs_grpc.py"]


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_module_is_under_400_lines(path):
    lines = len(path.read_text(encoding="utf-8").splitlines())
    assert lines < 400, f"{path.relative_to(ROOT)} has {lines} lines"
