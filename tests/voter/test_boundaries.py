"""voter/ is core: it never imports the serving stack (Ray, vLLM)."""
import ast
import subprocess
import sys
from pathlib import Path

VOTER = Path(__file__).resolve().parents[2] / "voter"
FORBIDDEN = {"ray", "vllm"}


def imported_modules(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_no_voter_module_imports_ray_or_vllm():
    files = sorted(VOTER.glob("**/*.py"))
    assert len(files) >= 8
    bad = {f.name: sorted(m for m in imported_modules(f) if m.split(".")[0] in FORBIDDEN) for f in files}
    assert not any(bad.values()), bad
    for f in files:  # also plain text, in case of importlib tricks
        for line in f.read_text().splitlines():
            words = line.strip().split()
            if words[:1] in (["import"], ["from"]) and len(words) > 1:
                assert words[1].split(".")[0] not in FORBIDDEN, f"{f.name}: {line}"


def test_importing_voter_loads_no_heavy_library():
    code = (
        "import sys, voter, voter.nli, voter.bertscore, voter.weights_io;"
        "heavy = [m for m in ('torch', 'transformers', 'bert_score', 'ray', 'vllm', 'scipy') if m in sys.modules];"
        "print(heavy); sys.exit(1 if heavy else 0)"
    )
    res = subprocess.run([sys.executable, "-c", code], cwd=VOTER.parent, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
