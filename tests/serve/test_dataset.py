"""Question files and the seeded fit/eval split."""
from pathlib import Path

import pytest

from serve.offline.dataset import Selection, qids_digest, read_questions, select_questions, split_assignment
from tests.serve.conftest import write_questions

from tests.shared_data import QUESTIONS_FILE as DEV


def rows(n, datasets=("a", "b")):
    return [{"qid": f"q{i}", "dataset": datasets[i % len(datasets)], "question": f"question {i}?",
             "answers": [f"ans{i}"], "gold_pids": []} for i in range(n)]


def qids(sel):
    return [q.qid for q in select_questions(sel)]


def test_split_is_deterministic_60_40_and_disjoint(tmp_path):
    f = write_questions(tmp_path / "q.jsonl", rows(50))
    fit = qids(Selection(str(f), split="fit", seed=7))
    ev = qids(Selection(str(f), split="eval", seed=7))
    assert (len(fit), len(ev)) == (30, 20)
    assert not set(fit) & set(ev) and set(fit) | set(ev) == {f"q{i}" for i in range(50)}
    assert qids(Selection(str(f), split="fit", seed=7)) == fit  # same seed, same questions, same order
    assert set(qids(Selection(str(f), split="fit", seed=8))) != set(fit)  # the seed matters


def test_split_ignores_line_order_and_survives_filters(tmp_path):
    r = rows(40)
    a = write_questions(tmp_path / "a.jsonl", r)
    b = write_questions(tmp_path / "b.jsonl", list(reversed(r)))
    assert split_assignment([x["qid"] for x in r], 3) == split_assignment([x["qid"] for x in reversed(r)], 3)
    assert set(qids(Selection(str(a), split="fit"))) == set(qids(Selection(str(b), split="fit")))
    # fitting on one dataset and evaluating on all never overlaps: the split is over the whole file
    fit_a = qids(Selection(str(a), dataset="a", split="fit"))
    ev_all = qids(Selection(str(a), split="eval"))
    assert fit_a and not set(fit_a) & set(ev_all)
    assert all(int(q[1:]) % 2 == 0 for q in fit_a)  # dataset "a" = even qids
    # --limit takes a prefix of the shuffled order: a larger limit extends a smaller one
    assert qids(Selection(str(a), split="fit", limit=10))[:5] == qids(Selection(str(a), split="fit", limit=5))


def test_dev_file_splits_disjointly():
    if not DEV.exists():
        pytest.skip("shared data not present")
    fit = select_questions(Selection(str(DEV), split="fit"))
    ev = select_questions(Selection(str(DEV), split="eval"))
    everything = read_questions(DEV)
    assert len(fit) + len(ev) == len(everything) and len(fit) == round(0.6 * len(everything))
    assert not {q.qid for q in fit} & {q.qid for q in ev}
    nq = select_questions(Selection(str(DEV), dataset="nq-open-oracle", split="eval", limit=20))
    assert len(nq) == 20 and {q.dataset for q in nq} == {"nq-open-oracle"}
    assert qids_digest(fit) != qids_digest(ev)


def test_bad_files_fail_clearly(tmp_path):
    f = tmp_path / "bad.jsonl"
    f.write_text('{"qid": "1", "question": "q?", "answers": ["a"]}\n{"qid": "2", "question": "q?"}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:2: 'answers'"):
        read_questions(f)
    f.write_text('{"qid": "1", "question": "q?", "answers": ["a"]}\n{"qid": "1", "question": "r?", "answers": ["b"]}\n')
    with pytest.raises(ValueError, match="duplicate qid"):
        read_questions(f)
    good = write_questions(tmp_path / "good.jsonl", rows(4))
    with pytest.raises(ValueError, match="dataset 'zz' is not in"):
        select_questions(Selection(str(good), dataset="zz"))
    with pytest.raises(ValueError, match="split must be"):
        Selection(str(good), split="train")
    with pytest.raises(FileNotFoundError):
        read_questions(tmp_path / "missing.jsonl")
