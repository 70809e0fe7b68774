"""Cross-validation grouped by passage: a fold never cuts a group of questions sharing a gold passage."""
import numpy as np

from fitting.pool_run import cv_folds, question_groups
from serve.offline.dataset import Question


def test_folds_keep_each_group_whole_and_cover_every_question_once():
    groups = [f"g{i // 4}" for i in range(40)] + [f"s{i}" for i in range(13)]
    folds = cv_folds(len(groups), 5, seed=3, groups=groups)
    assert sorted(np.concatenate(folds).tolist()) == list(range(len(groups)))
    where = {i: f for f, fold in enumerate(folds) for i in fold}
    for g in set(groups):
        assert len({where[i] for i, x in enumerate(groups) if x == g}) == 1
    assert max(map(len, folds)) - min(map(len, folds)) <= 4  # balanced to within one group


def test_singleton_groups_fold_as_by_question():
    groups = [f"q{i}" for i in range(20)]
    by_q = cv_folds(20, 5, seed=0)
    assert [f.tolist() for f in cv_folds(20, 5, seed=0, groups=groups)] == [f.tolist() for f in by_q]


def test_question_groups_join_questions_through_their_gold_passages():
    qs = [Question("a", "x", "q", ("1",), ("p1",)), Question("b", "x", "q", ("1",), ("p1", "p2")),
          Question("c", "x", "q", ("1",), ("p2",)), Question("d", "x", "q", ("1",))]
    g = question_groups(qs)
    assert g[0] == g[1] == g[2] and g[3] not in g[:3]
