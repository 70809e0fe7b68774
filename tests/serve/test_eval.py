"""`eor eval --json` on a hand-made result set; every number below is worked out by hand.

Pool W=Wiki@10, S=SE@1, F=ReFree; EM similarity, equal weights, mean pooling (ties go to
the earlier retriever). Dataset "a":
  q1 gold paris: W Paris,  S Paris,   F London  -> EoR Paris (W)        Match W1 S1 F0 E1
  q2 gold 1990:  W 1991,   S in 1990, F 1990    -> all differ: EoR 1991  Match W0 S1 F1 E0
  q3 gold blue:  W failed, S red,     F red     -> EoR red               Match W0 S0 F0 E0
  q4 gold cat:   W cat,    S dog,     F dog     -> EoR dog               Match W1 S0 F0 E0
Dataset "b": q5 everyone says X-ray (right); q6 gold seven: W seven, S six, F eight -> EoR seven.
"""
import json
import math
from pathlib import Path

import pytest

from serve.cli import main
from tests.serve.conftest import FakePool, write_questions

SPECS = ["Wiki@10", "SE@1", "ReFree"]
CASES = {  # question: (dataset, gold, {spec: answer})
    "q1?": ("a", "paris", ("Paris", "Paris", "London")),
    "q2?": ("a", "1990", ("1991", "in 1990", "1990")),
    "q3?": ("a", "blue", (RuntimeError("index down"), "red", "red")),
    "q4?": ("a", "cat", ("cat", "dog", "dog")),
    "q5?": ("b", "x-ray", ("X-ray", "X-ray", "X-ray")),
    "q6?": ("b", "seven", ("seven", "six", "eight")),
}


def answers(question):
    return dict(zip(SPECS, CASES[question][2]))


@pytest.fixture
def qfile(tmp_path):
    return write_questions(tmp_path / "hand.jsonl", [
        {"qid": q[:-1], "dataset": d, "question": q, "answers": [gold]} for q, (d, gold, _) in CASES.items()])


def run_eval(capsys, *args):
    rc = main(["eval", *args, "--split", "all", "--metrics", "em", "--no-progress", "--json",
              *([] if "--weights" in args else ["--equal-weights"])])
    out = capsys.readouterr()
    assert rc == 0, out.err
    return json.loads(out.out)


def test_eval_numbers_by_hand_and_plots(qfile, tmp_path, eor_home, use_pool, capsys):
    use_pool(FakePool(SPECS, answers))
    out_dir = tmp_path / "report"
    doc = run_eval(capsys, "--questions", str(qfile), "--out-dir", str(out_dir))
    assert doc["weights"]["source"] == "equal weights" and doc["correctness"] == "match-tokens"
    assert list(doc["datasets"]) == ["a", "b", "all"]

    a = doc["datasets"]["a"]
    s = a["systems"]
    # equal weights: adaptive = pruned = all retrievers, one stage
    assert a["n"] == 4 and list(s) == ["EoR", "EoR pruned", "EoR-all equal", *SPECS]
    assert s["EoR"] == s["EoR pruned"] and s["EoR"]["match"] == s["EoR-all equal"]["match"]
    s = {k: v for k, v in s.items() if k in ("EoR", *SPECS)}
    assert {k: v["match"] for k, v in s.items()} == {"EoR": 0.25, "Wiki@10": 0.5, "SE@1": 0.5, "ReFree": 0.25}
    assert {k: v["em"] for k, v in s.items()} == {"EoR": 0.25, "Wiki@10": 0.5, "SE@1": 0.25, "ReFree": 0.25}
    assert s["SE@1"]["f1"] == pytest.approx((1 + 2 / 3) / 4, abs=1e-6)  # "in 1990" vs "1990": F1 2/3
    # MRLR over [W, S, F, EoR]: column W (wrong q2,q3) S 1/2, F 1/2, EoR 0 -> 1/3; column EoR
    # (wrong q2,q3,q4) W 1/3, S 1/3, F 1/3 -> 1/3; column S (wrong q3,q4) W 1/2 -> 1/6;
    # column F (wrong q1,q3,q4) W 2/3, S 1/3, EoR 1/3 -> 4/9.
    assert {k: v["mrlr"] for k, v in s.items()} == pytest.approx(
        {"EoR": 1 / 3, "Wiki@10": 1 / 3, "SE@1": 1 / 6, "ReFree": 4 / 9}, abs=1e-6)
    assert a["best_single"] == "Wiki@10"  # ties with SE@1 on Match: the earlier one
    assert a["eor_vs_best_single"]["mrlr"] == pytest.approx([1 / 3, 1 / 3], abs=1e-6)
    # paired on the same questions: q1 both right, q4 only Wiki@10 -> 0 vs 1, sign test p = 1
    v = a["eor_vs_best_single"]
    assert (v["eor_only_right"], v["best_single_only_right"], v["sign_test_p"]) == (0, 1, 1.0)
    assert a["oracle"] == 0.75  # q1, q2, q4 have a right retriever; q3 none
    assert a["rwr"]["labels"] == [*SPECS, "EoR"]
    assert a["rwr"]["matrix"][0][2] == pytest.approx(2 / 3, abs=1e-6)  # RWR(W, F)

    b = doc["datasets"]["b"]["systems"]
    assert b["EoR"]["match"] == 1.0 and b["SE@1"]["match"] == 0.5
    assert b["Wiki@10"]["mrlr"] is None and b["EoR"]["mrlr"] is None  # never wrong: undefined
    assert b["SE@1"]["mrlr"] == pytest.approx(2 / 3, abs=1e-6)  # q6: W and EoR fix it, F does not
    assert doc["datasets"]["b"]["oracle"] == 1.0
    assert doc["datasets"]["all"]["n"] == 6 and doc["datasets"]["all"]["systems"]["EoR"]["match"] == 0.5

    pngs = {p.split("/")[-1] for p in doc["plots"]}
    assert pngs == {"rwr_a.png", "rwr_b.png", "rwr_all.png", "retriever_weights.png", "match_vs_tokens.png"}
    assert doc["cascade"]["stop_rate"] == [1.0] and doc["cascade"]["stages"] == [SPECS]
    assert doc["cascade"]["mean_rounds"] == 1.0
    # words per answer of every system ("in 1990" is two); one reader: every token is the default's
    words = {k: v["words_per_answer"] for k, v in doc["systems"].items()}
    assert words["ReFree"] == 1.0 and words["SE@1"] == pytest.approx(7 / 6, abs=0.01) and words["Wiki@10"] == pytest.approx(1.0)
    assert set(doc["systems"]["EoR"]["tokens_by_reader"]) == {""} and doc["readers"] == {"": "fake-reader"}
    for name in pngs:
        assert (out_dir / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads((out_dir / "eval.json").read_text())["datasets"]["a"]["oracle"] == 0.75
    records = {r["qid"]: r for r in map(json.loads, (out_dir / "questions.jsonl").read_text().splitlines())}
    assert sorted(records) == ["q1", "q2", "q3", "q4", "q5", "q6"] and records["q5"]["dataset"] == "b"
    q2, q3 = records["q2"], records["q3"]
    assert q2["answers"] == {"Wiki@10": "1991", "SE@1": "in 1990", "ReFree": "1990", "EoR": "1991",
                             "EoR pruned": "1991", "EoR-all equal": "1991"}
    assert (q2["match"]["SE@1"], q2["em"]["SE@1"], q2["f1"]["SE@1"]) == (1.0, 0.0, pytest.approx(2 / 3, abs=1e-6))
    assert q3["answers"]["Wiki@10"] == "" and q3["match"]["Wiki@10"] == 0.0  # failed: no answer, scores 0
    for system, figure in (("EoR", 0.25), ("Wiki@10", 0.5)):  # the records add up to the table
        assert sum(records[q]["match"][system] for q in ("q1", "q2", "q3", "q4")) / 4 == figure


def test_eval_with_fitted_weights_and_a_wrong_weights_file(qfile, tmp_path, eor_home, use_pool, capsys):
    from voter.question_vote import equal_weights
    from voter.voting import VoterWeights
    from voter.weights_io import save_weights

    use_pool(FakePool(SPECS, answers))
    saved = equal_weights(SPECS, ["em"])
    # drop Wiki@10: EoR then only chooses between SE@1 and ReFree (SE@1 wins ties)
    dropped = type(saved)(saved.pool, saved.metrics, saved.pooling, saved.threshold,
                          VoterWeights.from_arrays([0.3], [0.0, 0.3, 0.3], 0.1), saved.provenance)
    save_weights(tmp_path / "w.json", dropped)
    doc = run_eval(capsys, "--questions", str(qfile), "--weights", str(tmp_path / "w.json"),
                   "--out-dir", str(tmp_path / "r"))
    assert doc["weights"]["dropped"] == ["Wiki@10"]
    assert doc["datasets"]["a"]["systems"]["EoR"]["match"] == 0.5  # = SE@1's answers
    assert doc["datasets"]["b"]["systems"]["EoR"]["match"] == 0.5

    save_weights(tmp_path / "other.json", equal_weights(["Wiki@10", "PK"], ["em"]))
    pool = FakePool(SPECS, answers)
    use_pool(pool)
    rc = main(["eval", "--questions", str(qfile), "--weights", str(tmp_path / "other.json"), "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 2 and "fitted for a different retriever pool" in err and "['PK']" in err
    assert pool.calls == []  # refused before running anything


class NoisyPool(FakePool):
    """Writes to the process's standard output file descriptors as vLLM's engine workers do."""

    def run(self, questions, specs=None, **kw):
        import os

        os.write(1, b"INFO vllm worker: noise on stdout\n")
        os.write(2, b"WARNING torch: noise on stderr\n")
        return super().run(questions, specs, **kw)


def test_eval_prints_the_paired_test_and_rounds(qfile, tmp_path, eor_home, use_pool, capsys):
    use_pool(FakePool(SPECS, answers))
    rc = main(["eval", "--questions", str(qfile), "--split", "all", "--metrics", "em", "--no-progress",
               "--equal-weights", "--out-dir", str(tmp_path / "r")])
    out = capsys.readouterr().out
    assert rc == 0
    # dataset a: q4 right only by Wiki@10; "all" adds q6, right by both
    assert out.count("EoR vs Wiki@10 (best single after the fact), paired: Match 0 higher vs 1, p = 1") == 2
    assert "; 1.00 rounds per question" in out
    rc = main(["eval", "--questions", str(qfile), "--split", "all", "--metrics", "em", "--no-progress",
               "--equal-weights", "--out-dir", str(tmp_path / "r"), "--baseline", "SE@1", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0 and doc["datasets"]["all"]["baseline"] == "SE@1"
    vs = doc["datasets"]["all"]["eor_vs"]
    assert set(vs) == {"Wiki@10", "SE@1"} and set(vs["SE@1"]) == {"em", "f1", "match", "match_substring"}
    assert set(vs["SE@1"]["match"]) == {"eor", "other", "eor_higher", "other_higher", "sign_test_p"}
    assert main(["eval", "--questions", str(qfile), "--split", "all", "--metrics", "em", "--no-progress",
                 "--equal-weights", "--baseline", "HB@1"]) == 2
    assert "--baseline 'HB@1' is not in the pool" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["eval", "fit", "run"])
def test_json_is_alone_on_stdout_whatever_the_libraries_print(command, qfile, tmp_path, eor_home, use_pool, capfd):
    use_pool(NoisyPool(SPECS, answers))
    extra = {"eval": ["--equal-weights", "--metrics", "em", "--out-dir", str(tmp_path / "r"), "--json"],
             "fit": ["--metrics", "em", "--out", str(tmp_path / "w.json"), "--json"], "run": ["--json"]}[command]
    rc = main([command, "--questions", str(qfile), "--split", "all", "--no-progress", *extra])
    out = capfd.readouterr()
    assert rc == 0, out.err
    assert "noise" not in out.out and "noise" not in out.err  # in $EOR_HOME/logs/eor.log instead
    json.loads(out.out)
    assert "noise on stdout" in (eor_home / "logs" / "eor.log").read_text()


def test_eval_replays_a_confidence_aware_voter(qfile, tmp_path, eor_home, use_pool, capsys):
    """A v3 voter's EoR row is its rounds and stop rule (the scorer trusts the reader's
    confidence; these fake answers carry none, so nothing is sure and every round runs)."""
    from voter.adaptive_model import AdaptiveModel
    from voter.question_vote import equal_weights
    from tests.voter.conftest import logprob_scorer
    from voter.weights_io import Provenance, SavedWeights, save_weights

    scorer = logprob_scorer(SPECS)
    base = equal_weights(SPECS, ["em"])
    saved = SavedWeights(base.pool, base.metrics, base.pooling, base.threshold, base.weights,
                         Provenance("other.jsonl", 10, "r", 0.5),
                         adaptive=AdaptiveModel((("SE@1",), ("Wiki@10", "ReFree")), scorer, (0.8,)))
    save_weights(tmp_path / "v3.json", saved)
    use_pool(FakePool(SPECS, answers))
    doc = run_eval(capsys, "--questions", str(qfile), "--out-dir", str(tmp_path / "r"),
                   "--weights", str(tmp_path / "v3.json"))
    assert doc["cascade"]["stages"] == [["SE@1"], ["Wiki@10", "ReFree"]] and doc["cascade"]["stop_rate"] == [0.0, 1.0]
    assert doc["cascade"]["mean_rounds"] == 2.0
    s = doc["datasets"]["all"]["systems"]
    assert s["EoR"] == s["EoR pruned"] and s["EoR"]["match"] is not None


@pytest.mark.slow
def test_index_json_is_alone_on_stdout(tmp_path, eor_home, capfd):
    """`eor index --json` (and --verbose with it: library output then goes to stderr)."""
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps({"id": f"d{i}", "title": f"T{i}", "text": f"text number {i} " * 30}) + "\n"
                              for i in range(3)))
    assert main(["index", "--corpus", str(corpus), "--index", "tiny", "--json"]) == 0
    doc = json.loads(capfd.readouterr().out)
    assert doc["index"] == "tiny" and doc["sources"]["Wiki"]["passages"] >= 3 and doc["sources"]["SE"]["pages"] == 3
    assert main(["index", "--corpus", str(corpus), "--index", "tiny2", "--json", "--verbose"]) == 0
    assert json.loads(capfd.readouterr().out)["index"] == "tiny2"


@pytest.mark.slow
def test_index_sources_builds_se_first_and_the_rest_after(tmp_path, eor_home, capfd):
    """What setup does: `eor index --sources SE` (Lucene, seconds), then `eor index` for the rest;
    the index is whole (index.json) after the second only."""
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps({"id": f"d{i}", "title": f"T{i}", "text": f"text number {i} " * 30}) + "\n"
                              for i in range(3)))
    assert main(["index", "--corpus", str(corpus), "--index", "t", "--sources", "SE", "--json"]) == 0
    doc = json.loads(capfd.readouterr().out)
    root = eor_home / "indexes" / "t"
    assert list(doc["sources"]) == ["SE"] and not (root / "index.json").exists() and not (root / "wiki").exists()
    assert main(["index", "--corpus", str(corpus), "--index", "t", "--json"]) == 0
    doc = json.loads(capfd.readouterr().out)
    assert set(doc["sources"]) == {"Wiki", "SE"} and (root / "index.json").exists()
    assert main(["index", "--corpus", str(corpus), "--index", "t", "--sources", "Wikki"]) == 2
    assert "--sources: Wikki not configured; index.sources: Wiki, SE" in capfd.readouterr().err


# ---- how sure EoR is: a calibrated voter on answers whose log-probabilities are known -------------
# P(right) = sigmoid(5 * mean log-prob + 2.5) (the scorer; a Platt calibrator with a = 1, b = 0
# leaves it as it is); the scorer answers with the most confident retriever:
#   log-prob  0.0 -> 0.924, -0.1 -> 0.881, -0.3 -> 0.731, -0.5 -> 0.5, -0.7 -> 0.269, -0.9 -> 0.119
SURE = {  # question: (gold, {spec: (answer, log-prob) or an error})
    "s1?": ("g1", {"Wiki@10": ("w1", -0.9), "SE@1": ("g1", 0.0), "ReFree": ("f1", -0.9)}),  # SE@1 right 0.924
    "s2?": ("g2", {"Wiki@10": ("w2", -0.9), "SE@1": ("g2", -0.1), "ReFree": ("f2", -0.9)}),  # SE@1 right 0.881
    "s3?": ("g3", {"Wiki@10": ("w3", -0.1), "SE@1": ("n3", -0.9), "ReFree": ("f3", -0.9)}),  # Wiki wrong 0.881
    "s4?": ("g4", {"Wiki@10": ("w4", -0.9), "SE@1": ("n4", -0.9), "ReFree": ("g4", -0.3)}),  # ReFree right 0.731
    "s5?": ("g5", {"Wiki@10": ("w5", -0.5), "SE@1": ("n5", -0.9), "ReFree": ("f5", -0.9)}),  # Wiki wrong 0.5
    "s6?": ("g6", {"Wiki@10": ("w6", -0.9), "SE@1": ("g6", -0.7), "ReFree": ("f6", -0.9)}),  # SE@1 right 0.269
    "s7?": ("g7", {"Wiki@10": ("w7", -0.7), "SE@1": ("n7", -0.9), "ReFree": ("f7", -0.9)}),  # Wiki wrong 0.269
    "s8?": ("g8", {"Wiki@10": RuntimeError("down"), "SE@1": ("n8", -0.9), "ReFree": RuntimeError("down")}),
}


class LoggedPool(FakePool):
    def run(self, questions, specs=None, **kw):
        from dataclasses import replace

        out = super().run(questions, specs, **kw)
        return [type(r)(r.question, tuple(c if c.error else replace(c, logprobs=(SURE[r.question][1][c.retriever][1],))
                                          for c in r.candidates)) for r in out]


def sure_eval(tmp_path, use_pool, dataset, calibrator: dict | None = None) -> tuple[Path, Path]:
    """(questions file, voter file) for SURE: each question in `dataset(question)`, a voter whose P(right)
    is the log-prob scorer's (a Platt calibrator with a = 1, b = 0, or `calibrator`), the pool answering as
    SURE says."""
    from voter.adaptive_model import AdaptiveModel
    from voter.calibration import Calibrator
    from voter.question_vote import equal_weights
    from tests.voter.conftest import logprob_scorer
    from voter.weights_io import Provenance, SavedWeights, save_weights

    qfile = write_questions(tmp_path / "sure.jsonl", [{"qid": q[:-1], "dataset": dataset(q), "question": q,
                                                       "answers": [g]} for q, (g, _) in SURE.items()])
    base = equal_weights(SPECS, ["em"])
    saved = SavedWeights(base.pool, base.metrics, base.pooling, base.threshold, base.weights,
                         Provenance("other.jsonl", 10, "r", 0.5),
                         adaptive=AdaptiveModel((tuple(SPECS),), logprob_scorer(SPECS), (),
                                                Calibrator.from_dict(calibrator or {"method": "platt", "a": 1.0,
                                                                                    "b": 0.0})))
    voter = save_weights(tmp_path / "v4.json", saved)
    use_pool(LoggedPool(SPECS, lambda q: {s: (a if isinstance(a, Exception) else a[0])
                                          for s, a in SURE[q][1].items()}))
    return qfile, voter


def test_eval_reports_calibration_and_risk_coverage_by_hand(tmp_path, eor_home, use_pool, capsys):
    qfile, voter = sure_eval(tmp_path, use_pool, lambda q: "c")
    out_dir = tmp_path / "r"
    doc = run_eval(capsys, "--questions", str(qfile), "--out-dir", str(out_dir), "--weights", str(voter))
    c = doc["confidence"]
    p = {lp: 1 / (1 + math.exp(-(5 * lp + 2.5))) for lp in (0.0, -0.1, -0.3, -0.5, -0.7, -0.9)}
    # bins: 9 {s1 right}, 8 {s2 right, s3 wrong}, 7 {s4 right}, 5 {s5 wrong}, 2 {s6 right, s7 wrong}, 1 {s8 wrong}
    ece = (abs(1 - p[0.0]) + 2 * abs(0.5 - p[-0.1]) + abs(1 - p[-0.3]) + abs(0 - p[-0.5]) + 2 * abs(0.5 - p[-0.7])
           + abs(0 - p[-0.9])) / 8
    assert c["confidence_kind"] == "calibrated" and c["n"] == 8 and c["answered_with_confidence"] == 8
    assert c["ece"] == pytest.approx(ece, abs=1e-6) and c["bins"] == 10
    lo, hi = c["ece_interval_95"]  # resampled questions: around the ECE, never beyond [0, 1]
    assert 0.0 <= lo <= ece <= hi <= 1.0 and hi > lo
    assert [b["n"] for b in c["reliability"]] == [0, 1, 2, 0, 0, 1, 0, 1, 2, 1]
    assert c["reliability"][8]["accuracy"] == 0.5 and c["reliability"][8]["confidence"] == pytest.approx(p[-0.1])
    # EoR most sure first: s1 R, s2 R, s3 W (the tie: the earlier first), s4 R, s5 W, s6 R, s7 W, s8 W.
    # SE@1 (the best single: right on s1, s2, s6) by its own log-prob: s1 R, s2 R, s6 R, then -0.9 each, all wrong
    assert c["best_single"] == "SE@1"
    table = [(x["coverage"], x["eor_answered"], x["eor_match"], x["single_match"]) for x in c["risk_coverage"]]
    assert table == [(1.0, 8, 0.5, 0.375), (0.8, 6, pytest.approx(4 / 6), 0.5), (0.5, 4, 0.75, 0.75),
                     (0.2, 2, 1.0, 1.0)]
    assert (out_dir / "reliability.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert str(out_dir / "reliability.png") in doc["plots"]
    assert main(["eval", "--questions", str(qfile), "--split", "all", "--no-progress", "--out-dir", str(out_dir),
                 "--weights", str(voter)]) == 0
    printed = capsys.readouterr().out
    assert f"confidence of EoR's answers: calibrated P(right); ECE (10 bins) {ece:.3f} over 8 answers" in printed
    assert f"(95% bootstrap interval {lo:.3f}-{hi:.3f})" in printed
    assert "coverage  50%: EoR  0.750  SE@1  0.750  (4 answered)" in printed


def test_eval_reports_each_datasets_confidence(tmp_path, eor_home, use_pool, capsys):
    qfile, voter = sure_eval(tmp_path, use_pool, lambda q: "a" if int(q[1]) <= 4 else "b")
    doc = run_eval(capsys, "--questions", str(qfile), "--out-dir", str(tmp_path / "r"), "--weights", str(voter))
    by = doc["confidence_by_dataset"]
    assert set(by) == {"a", "b"} and by["a"]["n"] == 4 and by["b"]["n"] == 4
    # a: s1 R, s2 R, s3 W, s4 R; b: s5 W, s6 R, s7 W, s8 W (the whole split's table is doc["confidence"])
    assert by["a"]["risk_coverage"][0]["eor_match"] == 0.75 and by["b"]["risk_coverage"][0]["eor_match"] == 0.25
    assert by["a"]["risk_coverage"][2]["eor_answered"] == 2 and by["a"]["risk_coverage"][2]["eor_match"] == 1.0


def test_eval_replays_the_calibrator_the_voter_ships_with(tmp_path, eor_home, use_pool, capsys):
    """A calibrator that is not the identity (sigmoid(0.5 logit(P) + 0.5)): the confidence eval scores is
    the calibrated P every reply carries, not the scorer's raw P (eval dropped the calibrator until
    session 23)."""
    qfile, voter = sure_eval(tmp_path, use_pool, lambda q: "c", {"method": "platt", "a": 0.5, "b": 0.5})
    doc = run_eval(capsys, "--questions", str(qfile), "--out-dir", str(tmp_path / "r"), "--weights", str(voter))
    raw = {lp: 1 / (1 + math.exp(-(5 * lp + 2.5))) for lp in (0.0, -0.1, -0.3, -0.5, -0.7, -0.9)}
    cal = {lp: 1 / (1 + math.exp(-(0.5 * math.log(p / (1 - p)) + 0.5))) for lp, p in raw.items()}
    total = sum(b["n"] * b["confidence"] for b in doc["confidence"]["reliability"] if b["n"])
    answers = (0.0, -0.1, -0.1, -0.3, -0.5, -0.7, -0.7, -0.9)  # s1 .. s8's log-probs, as above
    assert total == pytest.approx(sum(cal[lp] for lp in answers), abs=1e-5)
    assert abs(total - sum(raw[lp] for lp in answers)) > 0.3  # not the raw P


def test_reading_only_the_cascades_rounds_gives_the_whole_pools_eor(tmp_path, eor_home, use_pool, capsys):
    """`--reads cascade`: round 1 (SE@1) for every question, round 2 only for the six whose P(right)
    after round 1 is under 0.8 (s1 and s2 stop: SE@1's log-probs 0.0 and -0.1 give 0.924 and
    0.881); EoR's answers, P(right) and rounds are those of reading the whole pool."""
    from voter.adaptive_model import AdaptiveModel
    from voter.calibration import Calibrator
    from voter.question_vote import equal_weights
    from tests.voter.conftest import logprob_scorer
    from voter.weights_io import Provenance, SavedWeights, save_weights

    qfile = write_questions(tmp_path / "sure.jsonl", [{"qid": q[:-1], "dataset": "c", "question": q, "answers": [g]}
                                                      for q, (g, _) in SURE.items()])
    base = equal_weights(SPECS, ["em"])
    saved = SavedWeights(base.pool, base.metrics, base.pooling, base.threshold, base.weights,
                         Provenance("other.jsonl", 10, "r", 0.5),
                         adaptive=AdaptiveModel((("SE@1",), ("Wiki@10", "ReFree")), logprob_scorer(SPECS), (0.8,),
                                                Calibrator.from_dict({"method": "platt", "a": 1.0, "b": 0.0})))
    voter = save_weights(tmp_path / "v.json", saved)
    answers = lambda q: {s: (a if isinstance(a, Exception) else a[0]) for s, a in SURE[q][1].items()}  # noqa: E731
    use_pool(LoggedPool(SPECS, answers))
    whole = run_eval(capsys, "--questions", str(qfile), "--out-dir", str(tmp_path / "a"), "--weights", str(voter))
    pool = LoggedPool(SPECS, answers)
    use_pool(pool)
    read = run_eval(capsys, "--questions", str(qfile), "--out-dir", str(tmp_path / "b"), "--weights", str(voter),
                    "--reads", "cascade", "--baseline", "ReFree")
    assert read["reads"] == {"what": "cascade", "questions_per_round": [8, 6]}
    assert pool.spec_calls == [["SE@1", "ReFree"]] * 2 + [["Wiki@10"]] * 2  # batches of 4: s3-s6, s7-s8
    assert [len(c) for c in pool.calls] == [4, 4, 4, 2]
    assert read["cascade"]["stop_rate"] == whole["cascade"]["stop_rate"] == [0.25, 0.75]
    got, want = read["datasets"]["c"]["systems"], whole["datasets"]["c"]["systems"]
    assert list(got) == ["EoR", "SE@1", "ReFree"]  # the members every question read
    for system in ("EoR", "SE@1"):  # (MRLR is over the singles beside it: fewer here)
        assert {k: got[system][k] for k in ("em", "f1", "match")} == {k: want[system][k] for k in ("em", "f1", "match")}
    assert read["confidence"]["ece"] == whole["confidence"]["ece"] and read["confidence"]["reliability"] == \
        whole["confidence"]["reliability"]
    assert read["systems"]["EoR"]["words_per_answer"] == whole["systems"]["EoR"]["words_per_answer"]
    assert read["datasets"]["c"]["baseline"] == "ReFree" and "threshold_sweep" in read["cascade"]


def test_reading_the_cascade_needs_a_voter_with_rounds(qfile, tmp_path, eor_home, use_pool, capsys):
    use_pool(FakePool(SPECS, answers))
    rc = main(["eval", "--questions", str(qfile), "--split", "all", "--metrics", "em", "--no-progress",
               "--equal-weights", "--reads", "cascade", "--out-dir", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert rc != 0 and "--reads cascade needs a voter with rounds" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
