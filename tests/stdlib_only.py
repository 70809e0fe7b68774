"""For the packages both environments import (splits/, answers/): which imports leave the standard library."""
from __future__ import annotations

import ast
import sys
from pathlib import Path


def non_stdlib_imports(package: Path) -> list[str]:
    """'file: module' for each absolute import in the package's files outside the standard library."""
    found = []
    for f in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module else [])
            found += [f"{f.name}: {m}" for m in names
                      if m.split(".")[0] not in sys.stdlib_module_names and m != "__future__"]
    return found
