"""Acceptance: nothing under bench/ imports the server's packages (it is a gRPC client with
its own environment; it may import `protos` and `bench`)."""
from __future__ import annotations

import ast
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"
FORBIDDEN = {"serve", "retrievers", "voter"}


def server_imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import of a server package in the file, at any depth."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            mods = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            mods = [node.module]
        elif (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) in
              ("import_module", "__import__") and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)):
            mods = [node.args[0].value]  # importlib.import_module("serve.app")
        else:
            continue
        found += [(node.lineno, m) for m in mods if m.split(".")[0] in FORBIDDEN]
    return found


def test_the_scan_sees_imports_inside_functions(tmp_path):
    f = tmp_path / "x.py"
    f.write_text("import os\ndef f():\n    from serve.app import X\n    import voter.estimator\n"
                 "    importlib.import_module('retrievers.pool')\n    from protos import eor_pb2\n")
    assert server_imports(f) == [(3, "serve.app"), (4, "voter.estimator"), (5, "retrievers.pool")]


def test_no_module_under_bench_imports_the_server():
    files = sorted(BENCH.rglob("*.py"))
    assert files
    assert [f"{f.relative_to(BENCH.parent)}:{line} imports {mod}"
            for f in files for line, mod in server_imports(f)] == []
