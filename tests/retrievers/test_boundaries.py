"""retrievers/ is core: it never imports the serving stack (Ray, vLLM), and importing the pool
loads no heavy library (models and indexes load in an explicit load())."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RETRIEVERS = REPO / "retrievers"
IMPORT_LINE = re.compile(r"^\s*(?:from\s+(?P<from>[\w.]+)\s+import\b|import\s+(?P<names>[\w.]+(?:\s*,\s*[\w.]+)*))",
                         re.M)


def imported_top_levels(source: str) -> set[str]:
    tops = set()
    for m in IMPORT_LINE.finditer(source):
        if m.group("from"):
            tops.add(m.group("from").split(".")[0])
        else:
            tops |= {n.strip().split(".")[0] for n in m.group("names").split(",")}
    return tops


def test_the_scanner_sees_imports():
    src = "import os, vllm.engine\nfrom ray import serve\n    import numpy as np\nx = 'import nothing'\n"
    assert imported_top_levels(src) == {"os", "vllm", "numpy", "ray"}


def test_no_retrievers_module_imports_ray_or_vllm():
    files = sorted(RETRIEVERS.rglob("*.py"))
    assert len(files) >= 14
    bad = {str(f.relative_to(REPO)): sorted(imported_top_levels(f.read_text()) & {"ray", "vllm"}) for f in files}
    assert not any(bad.values()), bad
    for f in files:  # no other route in either (importlib with a literal name, __import__)
        assert not re.search(r"""(import_module|__import__)\(\s*['"](ray|vllm)\b""", f.read_text()), f


def _modules_after(code: str) -> set[str]:
    res = subprocess.run([sys.executable, "-c", code + "\nimport sys; print(' '.join(sorted(sys.modules)))"],
                         cwd=REPO, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    return set(res.stdout.split())


def test_importing_the_pool_loads_neither_vllm_nor_ray_nor_heavy_backends():
    loaded = _modules_after("import retrievers.pool, retrievers.registry, retrievers.sources.web_search")
    assert "retrievers.pool" in loaded
    roots = {m.split(".")[0] for m in loaded}
    assert not roots & {"vllm", "ray"}, sorted(roots & {"vllm", "ray"})
    heavy = roots & {"torch", "sentence_transformers", "transformers", "faiss", "jnius", "pyserini"}
    assert not heavy, f"import-time load of {sorted(heavy)}: load models and indexes in load()"
