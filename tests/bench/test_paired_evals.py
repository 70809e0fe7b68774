"""bench.paired_evals: two evals' questions.jsonl paired question by question, by hand."""
from __future__ import annotations

import json

import pytest

from bench.paired_evals import main


def write(path, rows):
    path.write_text("".join(json.dumps({"qid": q, "dataset": "nq", "answers": {},
                                        "match": {"S": m, "W": w}, "em": {"S": m, "W": 0.0}, "f1": {"S": m, "W": w}})
                            + "\n" for q, m, w in rows))
    return path


def test_two_runs_pair_question_by_question(tmp_path, capsys):
    a = write(tmp_path / "a.jsonl", [("q1", 1.0, 1.0), ("q2", 1.0, 0.0), ("q3", 0.0, 0.0), ("q4", 1.0, 1.0)])
    b = write(tmp_path / "b.jsonl", [("q4", 0.0, 1.0), ("q3", 0.0, 1.0), ("q2", 0.0, 0.0), ("q1", 1.0, 1.0)])
    report = main([str(a), str(b), "--system", "S", "--out", str(tmp_path / "r.json")])
    s = report["systems"]["S"]["match"]
    assert report["questions"] == 4 and (s["a"], s["b"], s["a_higher"], s["b_higher"]) == (0.75, 0.25, 2, 0)
    assert s["sign_test_p"] == 0.5 and json.loads((tmp_path / "r.json").read_text()) == report
    both = main([str(a), str(b)])["systems"]
    assert list(both) == ["S", "W"] and (both["W"]["match"]["a_higher"], both["W"]["match"]["b_higher"]) == (0, 1)


def test_other_questions_or_a_missing_system_are_refused(tmp_path):
    a = write(tmp_path / "a.jsonl", [("q1", 1.0, 1.0), ("q2", 1.0, 0.0)])
    b = write(tmp_path / "b.jsonl", [("q1", 1.0, 1.0), ("q9", 1.0, 0.0)])
    with pytest.raises(ValueError, match="other questions"):
        main([str(a), str(b)])
    with pytest.raises(ValueError, match="no system 'X'"):
        main([str(a), str(a), "--system", "X"])
