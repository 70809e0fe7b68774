"""`eor calibrate`: the voter's lines fitted again on fit-split questions it never saw, read as its
cascade reads them; the same rounds, answers and stops. A fake pool whose answers and
log-probabilities are known (P(right) = sigmoid(5 * log-prob + 2.5), the log-prob scorer): question
i's SE@1 has log-prob -0.1 * (i % 4), P 0.924 / 0.881 / 0.818 / 0.731, right always / on two in three /
on one in three / always; the last is under the 0.8 threshold and reads round 2 (Wiki@10 and ReFree,
log-prob -0.9: SE@1's answer stays the pick). The shipped identity lines are over-confident there."""
import json

import pytest

from serve.cli import main
from serve.offline.dataset import Selection, qids_digest, select_questions
from tests.serve.conftest import FakePool, write_questions

SPECS = ["Wiki@10", "SE@1", "ReFree"]


def se_right(i: int) -> bool:
    return {0: True, 1: i % 3 != 0, 2: i % 3 == 0, 3: True}[i % 4]


def answers(question: str) -> dict:
    i = int(question[1:-1])
    return {"SE@1": f"g{i}" if se_right(i) else f"n{i}", "Wiki@10": f"w{i}", "ReFree": f"f{i}"}


def logprob(question: str, spec: str) -> float:
    return -0.1 * (int(question[1:-1]) % 4) if spec == "SE@1" else -0.9


class LogprobPool(FakePool):
    def run(self, questions, specs=None, **kw):
        from dataclasses import replace

        out = super().run(questions, specs, **kw)
        return [type(r)(r.question, tuple(c if c.error else replace(c, logprobs=(logprob(r.question, c.retriever),))
                                          for c in r.candidates)) for r in out]


def questions(path, n: int):
    return write_questions(path, [{"qid": f"c{i}", "dataset": "c", "question": f"c{i}?", "answers": [f"g{i}"]}
                                  for i in range(n)])


@pytest.fixture
def qfile(tmp_path):
    return questions(tmp_path / "q150.jsonl", 150)  # 90 in the fit split


def voter_file(tmp_path, qfile, sha: str | None = None, qids: str | None = None, calibrator: dict | None = None,
               name: str = "v.json"):
    """A voter fitted (says its provenance) on the fit split's first 20 questions of `qfile`: SE@1 first,
    then Wiki@10 and ReFree where P(right) < 0.8; identity calibration lines (or `calibrator`)."""
    from tests.voter.conftest import logprob_scorer
    from voter.adaptive_model import AdaptiveModel
    from voter.calibration import Calibrator
    from voter.question_vote import equal_weights
    from voter.weights_io import Provenance, SavedWeights, file_sha256, save_weights

    own = select_questions(Selection(str(qfile), split="fit", limit=20))
    extra = {"split": "fit", "split_seed": 0, "fit_fraction": 0.6, "limit": 20, "dataset": None,
             "questions_sha256": sha or file_sha256(qfile), "qids_sha256": qids or qids_digest(own)}
    base = equal_weights(SPECS, ["em"])
    line = {"a": 1.0, "b": 0.0}
    cal = Calibrator.from_dict(calibrator or {"method": "platt-per-round", **line, "rounds": [line, line]})
    saved = SavedWeights(base.pool, base.metrics, base.pooling, base.threshold, base.weights,
                         Provenance(qfile.name, 20, "r", 0.5, extra=extra),
                         adaptive=AdaptiveModel((("SE@1",), ("Wiki@10", "ReFree")), logprob_scorer(SPECS), (0.8,), cal))
    return save_weights(tmp_path / name, saved), {q.question for q in own}


def calibrate(capsys, *args):
    rc = main(["calibrate", *args, "--metrics", "em", "--no-progress"])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_calibrate_reads_only_new_fit_questions_and_keeps_every_stop(tmp_path, eor_home, use_pool, qfile, capsys):
    from voter.weights_io import load_weights

    voter, own = voter_file(tmp_path, qfile)
    pool = LogprobPool(SPECS, answers)
    use_pool(pool)
    rc, out, err = calibrate(capsys, "--questions", str(qfile), "--limit", "100", "--weights", str(voter),
                             "--out", str(tmp_path / "new.json"), "--json")
    assert rc == 0, err
    doc = json.loads(out)
    asked = {q for call in pool.calls for q in call}
    fit90 = {q.question for q in select_questions(Selection(str(qfile), split="fit"))}
    assert asked == fit90 - own and len(asked) == 70  # never the voter's own 20, never the eval split
    late = sorted(q for q in asked if int(q[1:-1]) % 4 == 3)  # P 0.731 < 0.8: round 2 read for these alone
    assert doc["questions"] == 70 and doc["left_out"] == 20 and doc["questions_per_round"] == [70, len(late)]
    assert sorted(q for call, specs in zip(pool.calls, pool.spec_calls) if "Wiki@10" in specs for q in call) == late
    share = sum(se_right(int(q[1:-1])) for q in asked) / 70
    assert doc["match"] == pytest.approx(share, abs=1e-4)
    before, after = doc["mean_confidence_before"], doc["mean_confidence_after"]
    assert before > share + 0.05 and abs(after - share) < abs(before - share) / 2
    assert doc["cv_after"]["log_loss"] < doc["before"]["log_loss"] and doc["better"] is True
    assert doc["cv_after"]["ece"] < doc["before"]["ece"]
    old, new = load_weights(voter), load_weights(tmp_path / "new.json")
    assert new.adaptive.layout == old.adaptive.layout and new.adaptive.thresholds != old.adaptive.thresholds
    # every question's stop, on the line and threshold as the file holds them: SE@1's four P are all there is
    for p in (0.9241, 0.8808, 0.8176, 0.7311):
        assert (new.adaptive.confidence(p, 0) >= new.adaptive.thresholds[0]) == (p >= 0.8)
    rec = new.adaptive.fit["recalibrated"]
    assert rec["questions"] == 70 and rec["selection"]["split"] == "fit"
    by = {m: x["log_loss"] for m, x in rec["cv_by_method"].items()}  # kept: the lower cross-validated log loss
    assert set(by) == {"platt-per-round", "platt"}
    assert rec["method"] == min(by, key=lambda m: (by[m], m != "platt-per-round"))
    assert doc["recalibrated"] == new.describe() and new.digest != old.digest

    rc, out, _ = calibrate(capsys, "--questions", str(qfile), "--limit", "100", "--weights", str(voter),
                           "--out", str(tmp_path / "new2.json"))
    assert rc == 0 and "70 fit questions the voter never saw (20 it has seen left out)" in out
    assert "the same rounds, answers and stops; thresholds 0.800 -> " in out
    assert "as shipped / recalibrated (5-fold CV on these questions): log loss" in out
    assert "better than the shipped lines here" in out and "NO better" not in out
    assert main(["calibrate", "--questions", str(qfile), "--limit", "100", "--weights", str(voter), "--metrics", "em",
                 "--no-progress", "--method", "platt", "--out", str(tmp_path / "p.json"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["cv_by_method"].keys() == {"platt"}


def test_a_second_calibration_leaves_out_the_first_ones_questions(tmp_path, eor_home, use_pool, capsys):
    from voter.weights_io import load_weights

    qfile = questions(tmp_path / "q250.jsonl", 250)  # 150 in the fit split
    voter, own = voter_file(tmp_path, qfile)
    use_pool(LogprobPool(SPECS, answers))
    rc, out, err = calibrate(capsys, "--questions", str(qfile), "--limit", "80", "--weights", str(voter),
                             "--out", str(tmp_path / "once.json"), "--json")
    assert rc == 0, err
    first = json.loads(out)
    pool = LogprobPool(SPECS, answers)
    use_pool(pool)
    rc, out, err = calibrate(capsys, "--questions", str(qfile), "--limit", "150", "--weights",
                             str(tmp_path / "once.json"), "--out", str(tmp_path / "twice.json"), "--json")
    assert rc == 0, err
    second = json.loads(out)
    asked = {q for call in pool.calls for q in call}
    fit150 = {q.question for q in select_questions(Selection(str(qfile), split="fit"))}
    fit80 = {q.question for q in select_questions(Selection(str(qfile), split="fit", limit=80))}
    assert first["questions"] == 60 and asked == fit150 - fit80 and second["questions"] == 70
    assert second["left_out"] == 80 and own < fit80
    rec = load_weights(tmp_path / "twice.json").adaptive.fit["recalibrated"]
    assert rec["earlier"]["questions"] == 60 and rec["earlier"]["qids_sha256"] == first["qids_sha256"]


def test_calibrate_refuses_what_it_cannot_do_in_one_line(tmp_path, eor_home, use_pool, qfile, capsys):
    from voter.question_vote import equal_weights
    from voter.weights_io import Provenance, SavedWeights, file_sha256, save_weights

    voter, _ = voter_file(tmp_path, qfile)
    use_pool(LogprobPool(SPECS, answers))
    errors = []

    def refused(*args) -> str:
        rc, _, err = calibrate(capsys, "--questions", str(qfile), *args)
        errors.append(err)
        assert rc == 2, err
        return err
    assert "fit-split questions only" in refused("--split", "eval", "--weights", str(voter))
    err = refused("--limit", "60", "--weights", str(voter))
    assert "40 of the selected questions are new to the voter" in err and "raise --limit" in err
    assert "use --split-seed 0" in refused("--split-seed", "1", "--weights", str(voter))
    other, _ = voter_file(tmp_path, qfile, sha="0" * 64, name="other.json")
    assert "was not fitted on" in refused("--weights", str(other))
    moved, _ = voter_file(tmp_path, qfile, qids="f" * 16, name="moved.json")
    assert "cannot be rebuilt" in refused("--weights", str(moved))
    iso, _ = voter_file(tmp_path, qfile, calibrator={"method": "isotonic", "x": [0.0, 1.0], "y": [0.0, 1.0]},
                        name="iso.json")
    assert "isotonic" in refused("--weights", str(iso))
    base = equal_weights(SPECS, ["em"])
    plain = save_weights(tmp_path / "plain.json", SavedWeights(
        base.pool, base.metrics, base.pooling, base.threshold, base.weights,
        Provenance(qfile.name, 20, "r", 0.5, extra={"split": "fit", "questions_sha256": file_sha256(qfile)})))
    assert "no answer scorer to calibrate" in refused("--weights", str(plain))
    with pytest.raises(SystemExit):  # argparse: exit 2 and its usage line
        main(["calibrate", "--questions", str(qfile), "--weights", str(voter), "--method", "isotonic"])
    errors.append(capsys.readouterr().err)
    assert "invalid choice: 'isotonic'" in errors[-1]
    lines = [[x for x in e.splitlines() if not x.startswith("eor: warning:")] for e in errors[:-1]]
    assert all(len(x) == 1 and x[0].startswith("eor: error: ") for x in lines), lines  # one line each, no traceback
