"""splits/: the one seeded fit/eval split, read by the server's offline tools and by the suites
(whose environment has none of the server's packages): standard library only."""
from __future__ import annotations

from pathlib import Path

import splits
from tests.stdlib_only import non_stdlib_imports

SPLITS_DIR = Path(splits.__file__).resolve().parent


def test_splits_imports_the_standard_library_only():
    assert non_stdlib_imports(SPLITS_DIR) == []


def test_the_split_is_seeded_disjoint_and_independent_of_order():
    qids = [f"q{i}" for i in range(101)]
    part = splits.split_assignment(qids)
    assert part == splits.split_assignment(reversed(qids))
    assert sum(v == "fit" for v in part.values()) == round(splits.DEFAULT_FIT_FRACTION * 101)
    assert set(part.values()) == {"fit", "eval"} and part != splits.split_assignment(qids, seed=1)


def test_the_offline_tools_read_the_same_split():
    from serve.offline import dataset

    assert dataset.split_assignment is splits.split_assignment and dataset.SPLITS == splits.SPLITS
