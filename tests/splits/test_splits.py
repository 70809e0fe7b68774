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


def test_questions_sharing_a_passage_form_one_group_even_through_others():
    gold = {"h1": ["p1", "p2"], "h2": ["p2", "p3"], "x1": ["p9"], "x2": ["p9"], "n1": ["p5"], "lone": []}
    groups = splits.passage_groups(gold)
    assert groups["h1"] == groups["h2"] == "h1"  # a HotpotQA-like chain through p2
    assert groups["x1"] == groups["x2"] == "x1"  # two questions over one paragraph
    assert groups["n1"] == "n1" and groups["lone"] == "lone"


def test_the_grouped_split_never_cuts_a_group():
    gold = {f"q{i}": [f"para{i // 5}"] for i in range(100)}  # 20 paragraphs of 5 questions
    groups = splits.passage_groups(gold)
    part = splits.split_assignment(gold, groups=groups)
    for key in set(groups.values()):
        assert len({part[q] for q in gold if groups[q] == key}) == 1
    assert sum(v == "fit" for v in part.values()) == 60  # 12 whole paragraphs
    order = splits.shuffled_qids(gold, groups=groups)
    assert sorted(order) == sorted(gold) and order != splits.shuffled_qids(gold)


def test_without_shared_passages_the_grouped_split_is_the_split_by_question():
    qids = [f"q{i}" for i in range(101)]
    groups = splits.passage_groups({q: [f"p-{q}"] for q in qids})
    assert splits.split_assignment(qids, groups=groups) == splits.split_assignment(qids)
    assert splits.shuffled_qids(qids, groups=groups) == splits.shuffled_qids(qids)


def test_on_the_shared_questions_no_gold_passage_is_on_both_sides():
    import pytest

    from tests.shared_data import QUESTIONS_FILE

    if not QUESTIONS_FILE.exists():
        pytest.skip("the shared data is not beside this checkout")
    from serve.offline.dataset import Selection, select_questions

    def passages(split, group_by):
        return {p for q in select_questions(Selection(str(QUESTIONS_FILE), split=split, group_by=group_by))
                for p in q.gold_pids}
    assert passages("fit", "passage").isdisjoint(passages("eval", "passage"))
    assert not passages("fit", "question").isdisjoint(passages("eval", "question"))  # what the old split shared
