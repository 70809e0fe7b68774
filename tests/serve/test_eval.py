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
    assert doc["weights"]["source"] == "equal weights" and doc["correctness"] == "match"
    assert list(doc["datasets"]) == ["a", "b", "all"]

    a = doc["datasets"]["a"]
    s = a["systems"]
    # equal weights: adaptive = pruned = all retrievers, one stage
    assert a["n"] == 4 and list(s) == ["EoR", "EoR pruned", "EoR-16 equal", *SPECS]
    assert s["EoR"] == s["EoR pruned"] and s["EoR"]["match"] == s["EoR-16 equal"]["match"]
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
    for name in pngs:
        assert (out_dir / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads((out_dir / "eval.json").read_text())["datasets"]["a"]["oracle"] == 0.75


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
    assert out.count("paired on these questions: 0 right only by EoR, 1 only by Wiki@10; sign test p = 1.000") == 2
    assert "; 1.00 rounds per question" in out


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
    from voter.adaptive import AdaptiveModel
    from voter.question_vote import equal_weights
    from voter.selector import AnswerScorer, feature_names
    from voter.weights_io import Provenance, SavedWeights, save_weights

    names = feature_names(SPECS)
    coef = [0.0] * len(names)
    coef[names.index("mean_logprob")] = 5.0
    scorer = AnswerScorer.from_dict({"features": list(names), "mean": [0.0] * len(names),
                                     "scale": [1.0] * len(names), "coef": coef, "intercept": 2.5}, names)
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
    assert doc["index"] == "tiny" and doc["documents"] == 3 and doc["wiki_passages"] >= 3
    assert main(["index", "--corpus", str(corpus), "--index", "tiny2", "--json", "--verbose"]) == 0
    assert json.loads(capfd.readouterr().out)["index"] == "tiny2"
