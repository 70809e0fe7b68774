"""The house rules a newcomer reads the code by (issue 56), held by tests rather than by review:
no hand-written module over 400 lines; the serving path (voter/, serve/app/) never reaches the
fitting code (fitting/); nobody probes a reader engine with `hasattr` (retrievers/engine.py
declares what an engine has)."""
from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 400
LOCAL = {"retrievers", "voter", "fitting", "serve", "protos", "splits", "answers", "bench"}
SERVING = ("voter", "serve/app")  # what a served Ask runs: the Voter deployment and its neighbours


def hand_written_modules() -> list[Path]:
    """Every tracked Python file outside tests/, but the generated gRPC stubs."""
    try:
        names = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True,
                               check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):  # not a git checkout: the files on disk
        names = [str(p.relative_to(ROOT)) for p in ROOT.rglob("*.py")
                 if not any(part.startswith(".") or part == "var" for part in p.relative_to(ROOT).parts)]
    return [ROOT / n for n in names if not n.startswith("tests/") and not re.search(r"_pb2(_grpc)?\.py$", n)
            and (ROOT / n).is_file()]


def test_no_hand_written_module_is_over_400_lines():
    files = hand_written_modules()
    assert ROOT / "voter" / "adaptive_model.py" in files and not any("_pb2" in f.name for f in files)
    long = {str(f.relative_to(ROOT)): n for f in files if (n := len(f.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert long == {}, f"split these along their concepts (at most {MAX_LINES} lines a module)"


# ---- the serving path never reaches the fitting code --------------------------------------------
def module_file(name: str) -> Path | None:
    path = ROOT.joinpath(*name.split("."))
    if (path / "__init__.py").is_file():
        return path / "__init__.py"
    return path.with_suffix(".py") if path.with_suffix(".py").is_file() else None


def local_imports(name: str) -> set[str]:
    """The repository's modules `name` imports, at any depth (a function's imports too), with the
    packages above each."""
    path = module_file(name)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            found |= {base} | {f"{base}.{a.name}" for a in node.names}
    out = set()
    for mod in found:
        parts = mod.split(".")
        if parts[0] in LOCAL:
            out |= {".".join(parts[:i]) for i in range(1, len(parts) + 1) if module_file(".".join(parts[:i]))}
    return out


def closure(starts: list[str]) -> dict[str, str]:
    """Every module the starts reach through imports: module -> the module that imports it."""
    via: dict[str, str] = dict.fromkeys(starts, "")
    todo = list(starts)
    while todo:
        mod = todo.pop()
        for dep in sorted(local_imports(mod) - set(via)):
            via[dep] = mod
            todo.append(dep)
    return via


def serving_modules() -> list[str]:
    files = [f for d in SERVING for f in sorted((ROOT / d).glob("*.py"))]
    return [".".join(f.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__") for f in files]


def test_the_walk_follows_imports_inside_functions():
    via = closure(["serve.app.deployments"])
    assert "voter.decision" in via and "voter.weights_io" in via  # imported inside the Voter's methods
    assert "fitting.search" in closure(["serve.offline.adaptive"])  # the walk would see a reach


def test_the_serving_path_never_reaches_the_fitting_code():
    starts = serving_modules()
    assert "serve.app.deployments" in starts and "voter.adaptive_model" in starts
    via = closure(starts)

    def chain(mod: str) -> str:
        out = [mod]
        while via.get(out[-1]):
            out.append(via[out[-1]])
        return " <- ".join(out)
    bad = [chain(m) for m in via if m.split(".")[0] == "fitting" or m.startswith(("serve.offline", "serve.cli"))]
    assert bad == []


def test_importing_the_voter_deployment_loads_no_fitting_module():
    pytest.importorskip("ray")
    code = ("import sys, voter.decision, voter.weights_io, voter.question_vote, serve.app.deployments;"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] == 'fitting' or m.startswith('serve.offline'));"
            "print(bad); sys.exit(1 if bad else 0)")
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr


# ---- no hasattr probe on an engine ----------------------------------------------------------------
ENGINE = re.compile(r"engine", re.IGNORECASE)


def engine_probes(path: Path) -> list[str]:
    """`hasattr(<an engine>, ...)` and `getattr(<an engine>, name, default)` calls: what an engine
    has is declared (retrievers/engine.py: ReaderEngine), never probed."""
    text = path.read_text(encoding="utf-8")
    out = []
    for node in ast.walk(ast.parse(text, filename=str(path))):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.args
                and (node.func.id == "hasattr" or node.func.id == "getattr" and len(node.args) == 3)
                and ENGINE.search(ast.get_source_segment(text, node.args[0]) or "")):
            where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name
            out.append(f"{where}:{node.lineno}: {ast.get_source_segment(text, node)}")
    return out


def test_the_probe_scan_finds_a_probe(tmp_path):
    f = tmp_path / "probe.py"
    f.write_text("def f(self, engine):\n    if hasattr(self.engine, 'x'): pass\n"
                 "    y = getattr(engine, 'stats', None)\n    hasattr(socket, 'SO_PEERCRED')\n")
    assert [p.split(": ", 1)[0] for p in engine_probes(f)] == ["probe.py:2", "probe.py:3"]


def test_nobody_probes_a_reader_engine_with_hasattr():
    files = [f for d in ("serve", "retrievers") for f in sorted((ROOT / d).rglob("*.py"))]
    assert len(files) > 30
    assert [p for f in files for p in engine_probes(f)] == []
