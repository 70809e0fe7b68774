"""splits/: the one seeded fit/eval split, read by the server's offline tools and by the suites
(whose environment has none of the server's packages): standard library only."""
from __future__ import annotations

import ast
import sys
from pathlib import Path

import splits

SPLITS_DIR = Path(splits.__file__).resolve().parent


def test_splits_imports_the_standard_library_only():
    for f in SPLITS_DIR.rglob("*.py"):
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module else [])
            for m in names:
                assert m.split(".")[0] in sys.stdlib_module_names or m == "__future__", f"{f.name} imports {m}"


def test_the_split_is_seeded_disjoint_and_independent_of_order():
    qids = [f"q{i}" for i in range(101)]
    part = splits.split_assignment(qids)
    assert part == splits.split_assignment(reversed(qids))
    assert sum(v == "fit" for v in part.values()) == round(splits.DEFAULT_FIT_FRACTION * 101)
    assert set(part.values()) == {"fit", "eval"} and part != splits.split_assignment(qids, seed=1)


def test_the_offline_tools_read_the_same_split():
    from serve.offline import dataset

    assert dataset.split_assignment is splits.split_assignment and dataset.SPLITS == splits.SPLITS
