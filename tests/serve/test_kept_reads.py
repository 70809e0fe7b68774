"""Reads kept in the repository: a run log's answers and log-probabilities survive a new machine."""
import gzip
import json

import pytest

from serve.offline.dataset import read_questions
from serve.offline.kept_reads import keep, kept_path, restore
from serve.offline.results_io import result_to_record
from serve.offline.runlog import RunKey, RunLog, run_questions
from tests.serve.conftest import FakePool

SPECS = ["Wiki@10", "SE@1", "PK"]


def answers(q):
    n = q.split()[-1]
    return {"Wiki@10": f"wiki {n}", "SE@1": RuntimeError("SE search failed"), "PK": f"pk {n}"}


@pytest.fixture
def questions_file(tmp_path):
    path = tmp_path / "questions.jsonl"
    path.write_text("".join(json.dumps({"qid": f"q{i}", "dataset": "d", "question": f"question number {i}",
                                        "answers": [f"a{i}"]}) + "\n" for i in range(6)))
    return path


def slim(rec):
    """What a kept read holds of a result record: no passages, no documents."""
    return [{k: v for k, v in c.items() if k not in ("passages", "document")} for c in rec["candidates"]]


def test_kept_reads_round_trip_on_a_new_machine(tmp_path, monkeypatch, questions_file):
    monkeypatch.setenv("EOR_READS", str(tmp_path / "reads"))
    qs = read_questions(questions_file)
    monkeypatch.setenv("EOR_HOME", str(tmp_path / "machine-1"))
    key = RunKey.create(questions_file, "fake-reader", SPECS, {"index": "default"})
    first = run_questions(FakePool(SPECS, answers), qs, RunLog(key), progress=False)
    seconds = RunLog(key).seconds()
    path, n = keep(RunLog(key), questions_file)
    assert n == 6 and path == kept_path(key, __import__("voter.weights_io").weights_io.file_sha256(questions_file))
    text = gzip.open(path, "rt").read()
    assert "question number" not in text  # no question text, no prompts: the question file holds them
    assert keep(RunLog(key), questions_file)[0].read_bytes() == path.read_bytes()  # the same reads, the same bytes

    moved = tmp_path / "elsewhere" / "questions.jsonl"  # a new machine: another path, an empty EOR_HOME
    moved.parent.mkdir()
    moved.write_bytes(questions_file.read_bytes())
    monkeypatch.setenv("EOR_HOME", str(tmp_path / "machine-2"))
    key2 = RunKey.create(moved, "fake-reader", SPECS, {"index": "default"})
    assert key2.digest != key.digest and restore(RunLog(key2), moved) == 6
    assert restore(RunLog(key2), moved) == 0  # nothing twice
    pool = FakePool(SPECS, answers)
    again = run_questions(pool, read_questions(moved), RunLog(key2), progress=False)
    assert pool.calls == [] and pool.loads == 0  # nothing read again
    assert [slim(result_to_record(r)) for _, r in again] == [slim(result_to_record(r)) for _, r in first]
    assert [r.question for _, r in again] == [q.question for q in qs]
    assert RunLog(key2).seconds() == pytest.approx(seconds) and len(seconds) == 6  # timings kept for pricing


def test_an_edited_question_file_restores_nothing(tmp_path, monkeypatch, questions_file):
    monkeypatch.setenv("EOR_READS", str(tmp_path / "reads"))
    monkeypatch.setenv("EOR_HOME", str(tmp_path / "a"))
    key = RunKey.create(questions_file, "fake-reader", SPECS, {"index": "default"})
    run_questions(FakePool(SPECS, answers), read_questions(questions_file), RunLog(key), progress=False)
    keep(RunLog(key), questions_file)
    monkeypatch.setenv("EOR_HOME", str(tmp_path / "b"))
    edited = questions_file.read_text().replace("question number 2", "an edited question")
    other = tmp_path / "edited.jsonl"
    other.write_text(edited)
    # another file's content is another kept file: nothing to restore
    assert restore(RunLog(RunKey.create(other, "fake-reader", SPECS, {"index": "default"})), other) == 0
