"""`python -m serve.offline.adaptive` on a run log made by `eor run` with a fake pool.

Pool Wiki@10, SE@1, ReFree; 60 questions, every answer known in advance:
  i % 4 == 0: SE@1 wrong, Wiki@10 and ReFree right;
  i % 4 == 1: ReFree wrong, Wiki@10 and SE@1 right;
  otherwise:  Wiki@10 wrong, SE@1 and ReFree right.
So on every question two of the three agree on the right answer and nothing else agrees: the
vote over all of them is always right, SE@1 and ReFree alone are right about 3 times in 4,
Wiki@10 half the time. The stop rule is fitted to stay within 0.5 pt of the all-kept vote.
"""
import json

import pytest

from serve.cli import main
from tests.serve.conftest import FakePool, write_questions

SPECS = ["Wiki@10", "SE@1", "ReFree"]
N = 60


def gold(i: int) -> str:
    return f"answer number {i}"


def answers(question: str) -> dict[str, str]:
    i = int(question.split()[1])
    wrong = {0: "SE@1", 1: "ReFree"}.get(i % 4, "Wiki@10")
    return {s: f"wrong {s} {i}" if s == wrong else gold(i) for s in SPECS}


@pytest.fixture
def qfile(tmp_path):
    return write_questions(tmp_path / "q.jsonl", [
        {"qid": f"q{i}", "dataset": "nq", "question": f"question {i} ?", "answers": [gold(i)]} for i in range(N)])


@pytest.fixture
def voter_file(tmp_path):
    from voter.question_vote import equal_weights
    from voter.weights_io import save_weights

    return save_weights(tmp_path / "equal.json", equal_weights(SPECS, ["em"]))


def test_report_on_a_run_log(qfile, voter_file, tmp_path, eor_home, use_pool, capsys):
    from serve.offline import adaptive
    from serve.offline.dataset import Selection, select_questions

    use_pool(FakePool(SPECS, answers))
    assert main(["run", "--questions", str(qfile), "--split", "all", "--index", "shared", "--no-progress"]) == 0
    capsys.readouterr()
    out = tmp_path / "adaptive.json"
    assert adaptive.main(["--questions", str(qfile), "--index", "shared", "--voter", str(voter_file),
                          "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    doc = json.loads(out.read_text())

    held = [int(q.qid[1:]) for q in select_questions(Selection(str(qfile), None, "eval", None))]
    fit = [int(q.qid[1:]) for q in select_questions(Selection(str(qfile), None, "fit", None))]
    assert (doc["fit_questions"], doc["eval_questions"]) == (len(fit), len(held)) == (36, 24)

    def best(rows):  # ties go to the earlier retriever in the pool
        se, refree = sum(i % 4 == 0 for i in rows), sum(i % 4 == 1 for i in rows)
        return ("SE@1", se) if se <= refree else ("ReFree", refree)

    fit_best, _ = best(fit)
    assert doc["fit_best_single"] == fit_best and doc["fit_datasets"] == {"nq": 36}
    assert doc["fit_single_match"]["Wiki@10"] == pytest.approx(sum(i % 4 < 2 for i in fit) / len(fit))

    ev = doc["eval"]
    assert list(ev) == ["nq", "all"] and ev["nq"]["n"] == len(held)
    s = ev["all"]["systems"]
    wrong = {s: sum(i % 4 == k for i in held) for s, k in (("SE@1", 0), ("ReFree", 1))}
    assert s["SE@1"]["match"] == pytest.approx(1 - wrong["SE@1"] / len(held))
    assert s["Wiki@10"]["match"] == pytest.approx(sum(i % 4 < 2 for i in held) / len(held))
    assert s["EoR-all equal"]["match"] == 1.0 and s["adaptive (confidence)"]["match"] == 1.0
    assert s["SE@1"]["rounds"] == 1.0 and 1.0 <= s["adaptive (confidence)"]["rounds"] <= len(doc["chosen"]["rounds"])
    v = ev["all"]["vs_best_single"]  # against the fit split's best single
    assert (v["best_single"], v["adaptive_only_right"], v["best_single_only_right"]) == (fit_best, wrong[fit_best], 0)
    assert v["sign_test_p"] == pytest.approx(min(1.0, 2 * 0.5 ** wrong[fit_best]))
    e = ev["all"]["vs_eval_best_single"]  # the best single on these very questions, picked after the fact
    eval_best, n_wrong = best(held)
    assert (e["best_single"], e["adaptive_only_right"], e["best_single_only_right"]) == (eval_best, n_wrong, 0)
    assert doc["frontier_eval"][-1]["threshold"] is None and doc["frontier_eval"][-1]["match"] == 1.0
    assert f"adaptive vs {fit_best}: {wrong[fit_best]} vs 0 questions right only by one" in printed


def test_report_refuses_a_run_log_too_small(qfile, voter_file, eor_home, use_pool, capsys):
    from serve.offline import adaptive

    use_pool(FakePool(SPECS, answers))
    assert main(["run", "--questions", str(qfile), "--split", "all", "--limit", "10", "--index", "shared",
                 "--no-progress"]) == 0
    with pytest.raises(SystemExit, match="grow it first"):
        adaptive.main(["--questions", str(qfile), "--index", "shared", "--voter", str(voter_file)])
