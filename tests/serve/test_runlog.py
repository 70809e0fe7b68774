"""Running the pool over many questions resumably."""
import json

import pytest

from serve.offline.dataset import Question
from serve.offline.results_io import result_from_record, result_to_record
from serve.offline.runlog import RunKey, RunLog, run_questions
from tests.serve.conftest import FakePool

SPECS = ["Wiki@10", "SE@1", "PK", "ReFree"]


def answers(q):
    return {"Wiki@10": f"wiki {q}", "SE@1": RuntimeError("SE search failed"), "PK": f"pk {q}", "ReFree": "dunno"}


def questions(n):
    return [Question(f"q{i}", "d", f"question number {i}", (f"a{i}",)) for i in range(n)]


def key(model="fake-reader", specs=SPECS):
    return RunKey.create("/data/questions.jsonl", model, specs, {"index": "default"})


def test_interrupted_run_resumes_with_only_the_rest(eor_home):
    qs = questions(10)
    crashing = FakePool(SPECS, answers, fail_after=5)  # crashes inside the third batch of 2
    with pytest.raises(RuntimeError, match="simulated crash"):
        run_questions(crashing, qs, RunLog(key()), batch_size=2, progress=False)
    assert crashing.calls == [[q.question for q in qs[0:2]], [q.question for q in qs[2:4]]]

    restarted = FakePool(SPECS, answers)
    got = run_questions(restarted, qs, RunLog(key()), batch_size=2, progress=False)
    ran = [q for call in restarted.calls for q in call]
    assert ran == [q.question for q in qs[4:]]  # the 4 finished questions were not redone
    assert all(len(c) <= 2 for c in restarted.calls)
    assert [q.qid for q, _ in got] == [q.qid for q in qs]
    clean = FakePool(SPECS, answers).run([q.question for q in qs])
    assert [result_to_record(r) for _, r in got] == [result_to_record(r) for r in clean]
    assert got[0][1].failed == ["SE@1"] and "SE search failed" in got[0][1].candidates[1].error

    again = FakePool(SPECS, answers)
    assert len(run_questions(again, qs, RunLog(key()), progress=False)) == 10
    assert again.calls == [] and again.loads == 0  # nothing left: the pool is not even loaded


def test_run_log_is_keyed_by_model_pool_and_question_text(eor_home):
    qs = questions(3)
    run_questions(FakePool(SPECS, answers), qs, RunLog(key()), progress=False)
    assert RunLog(key()).path.parent == eor_home / "runs"
    assert RunLog(key(model="other")).path != RunLog(key()).path
    assert RunLog(key(specs=SPECS[:3])).path != RunLog(key()).path
    assert RunKey.create("/data/questions.jsonl", "m", SPECS, {"index": "a"}).digest != \
        RunKey.create("/data/questions.jsonl", "m", SPECS, {"index": "b"}).digest
    changed = [qs[0], Question("q1", "d", "an edited question", ("x",)), qs[2]]
    pool = FakePool(SPECS, answers)
    got = run_questions(pool, changed, RunLog(key()), progress=False)
    assert pool.calls == [["an edited question"]] and got[1][1].question == "an edited question"


def test_torn_last_line_is_redone_and_refused_questions_skipped(eor_home):
    qs = questions(3)
    log = RunLog(key())
    run_questions(FakePool(SPECS, answers), qs, log, progress=False)
    lines = log.path.read_text().splitlines()
    log.path.write_text("\n".join(lines[:2]) + "\n" + lines[2][:40])  # a crash mid-write
    pool = FakePool(SPECS, answers)
    got = run_questions(pool, qs + [Question("empty", "d", "   ", ("x",))], log, progress=False)
    assert pool.calls == [[qs[2].question]] and [q.qid for q, _ in got] == ["q0", "q1", "q2"]


def test_records_round_trip_without_passage_text():
    r = FakePool(SPECS, answers).run(["who?"])[0]
    back = result_from_record(json.loads(json.dumps(result_to_record(r))))
    assert [c.answer for c in back.candidates] == [c.answer for c in r.candidates]
    assert back.failed == ["SE@1"] and back.candidates[2].context.document == "background on who?"
    assert back.candidates[0].context.passages[0].pid == "Wiki@10-p1"


def test_records_keep_logprobs_and_passage_scores():
    from retrievers.types import Candidate, Context, Passage, QuestionResult

    c = Candidate("Wiki@10", "Paris", Context("Wiki@10", (Passage("p1", "T", "text", "Wiki", 0.73125),)),
                  logprobs=(-0.01, -0.5))
    old = Candidate("SE@1", "Rome", Context("SE@1"))
    back = result_from_record(json.loads(json.dumps(result_to_record(QuestionResult("q", (c, old))))))
    assert back.candidates[0].logprobs == (-0.01, -0.5)
    assert back.candidates[0].confidence == pytest.approx(-0.255)
    assert back.candidates[0].context.passages[0].score == pytest.approx(0.73125)
    assert back.candidates[1].logprobs is None  # records from before log-probabilities: unknown, not zero


def test_a_batch_the_reader_cache_answered_gives_no_seconds(tmp_path):
    """The fit reads the reader's speed from the run log's seconds: a batch answered from the
    reader cache took less than its tokens cost, so it is recorded as such and left out."""
    from serve.offline.runlog import _cold_share

    log = RunLog(key(), tmp_path)
    qs = questions(3)
    empty = [result_from_record({"question": q.question, "candidates": []}) for q in qs]
    log.append([(qs[0], empty[0])], 4.0, cold=1.0)
    log.append([(qs[1], empty[1])], 0.5, cold=0.0)
    log.append([(qs[2], empty[2])], 3.0)  # written before `cold` was recorded: counts as cold
    assert log.seconds() == {"q0": 4.0, "q2": 3.0}
    assert [json.loads(x).get("cold") for x in log.path.read_text().splitlines()] == [1.0, 0.0, None]
    assert _cold_share((10, 4), (20, 13)) == 0.9 and _cold_share((10, 4), (10, 4)) is None
