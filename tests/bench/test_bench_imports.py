"""Acceptance: the robustness bench imports none of the server's packages (it is a gRPC client
with its own environment; it may import `protos`, `bench`, the standard-library-only `splits` and
`answers`, and of `fitting` the sign test alone, `fitting.paired`: SciPy, which .venv-bench installs).

The other scripts in bench/ are component benchmarks that measure the server's parts
in-process (recall of the sources, reader batching, model choice, the voter's objective,
the load test's `--start` mode): importing those parts is what they are for. They are
listed here by name, so a new bench module is a client unless someone says otherwise."""
from __future__ import annotations

import ast
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"
FORBIDDEN = {"serve", "retrievers", "voter", "fitting"}
SHARED = {"fitting.paired"}  # a server-side module the bench shares: standard library and SciPy only
IN_PROCESS = {"autoscale.py", "scale_paper.py", "cluster.py", "delivered_calibration.py", "encoder_alternatives.py", "encoder_backends.py", "engine_settings.py", "group_bytes.py", "load_curve.py", "load_test.py", "logprob_agreement.py", "model_compare.py", "prefix_share.py", "reader_batching.py", "reader_priority.py", "retrieval_recall.py", "scale_corpus.py", "scale_index.py", "scale_model.py", "verifier_probe.py",
              "voter_objective.py"}


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
            mods = [node.args[0].value]  # importlib.import_module("serve.app.application")
        else:
            continue
        found += [(node.lineno, m) for m in mods if m.split(".")[0] in FORBIDDEN and m not in SHARED]
    return found


def test_the_scan_sees_imports_inside_functions(tmp_path):
    f = tmp_path / "x.py"
    f.write_text("import os\ndef f():\n    from serve.app.application import X\n    import voter.estimator\n"
                 "    importlib.import_module('retrievers.pool')\n    from protos import eor_pb2\n")
    assert server_imports(f) == [(3, "serve.app.application"), (4, "voter.estimator"), (5, "retrievers.pool")]


def test_no_client_module_under_bench_imports_the_server():
    files = sorted(f for f in BENCH.rglob("*.py") if f.parent != BENCH or f.name not in IN_PROCESS)
    assert BENCH / "robust" / "sure.py" in files and BENCH / "common.py" in files
    assert [f"{f.relative_to(BENCH.parent)}:{line} imports {mod}"
            for f in files for line, mod in server_imports(f)] == []


def test_the_load_tests_client_path_needs_no_server_package():
    """Against a running server (`--server`), the load test imports serve only lazily (for
    --start and the group specs of the fault test)."""
    top = [n for n in ast.parse((BENCH / "load_test.py").read_text()).body
           if isinstance(n, (ast.Import, ast.ImportFrom))]
    assert not [n for n in top if (getattr(n, "module", None) or n.names[0].name).split(".")[0] in FORBIDDEN]


def all_imports(path: Path) -> set[str]:
    """Every absolute import in the file, at any depth."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return {m for n in ast.walk(tree) for m in
            ([a.name for a in n.names] if isinstance(n, ast.Import) else
             [n.module] if isinstance(n, ast.ImportFrom) and n.level == 0 and n.module else [])}


def test_the_modules_the_bench_shares_import_only_the_standard_library_and_scipy():
    import sys

    for name in SHARED:
        mods = {m.split(".")[0] for m in all_imports(BENCH.parent / (name.replace(".", "/") + ".py"))}
        assert mods <= set(sys.stdlib_module_names) | {"__future__", "scipy"}, (name, mods)
    assert not all_imports(BENCH.parent / "fitting" / "__init__.py")  # importing the package imports nothing
