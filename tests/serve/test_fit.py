"""`eor fit` over fake pool results: one retriever is always right, two others agree on
wrong answers (so plain similarity voting follows them); the fit must learn to follow the
right one and write weights with provenance."""
import json

import pytest

from serve.cli import main
from serve.offline.dataset import Selection, select_questions
from voter.decision import vote
from voter.question_vote import build_metrics
from tests.serve.conftest import FakePool, write_questions
from voter.weights_io import load_weights

SPECS = ["Wiki@10", "SE@1", "PK", "ReFree"]
N = 12


def answers(question):
    i = int(question.split()[-1].rstrip("?"))
    return {"Wiki@10": f"answer {i}",  # always right
            "SE@1": f"wrong {i}",
            "PK": f"answer {i}" if i % 3 == 0 else f"wrong {i}",  # agrees with SE@1 2/3 of the time
            "ReFree": f"other {i}"}


def question_file(tmp_path):
    return write_questions(tmp_path / "train.jsonl", [
        {"qid": f"t{i}", "dataset": "toy", "question": f"what is number {i}?", "answers": [f"answer {i}"]}
        for i in range(N)])


def test_fit_follows_the_always_right_retriever_and_records_provenance(tmp_path, eor_home, use_pool, capsys):
    qfile = question_file(tmp_path)
    pool = FakePool(SPECS, answers)
    use_pool(pool)
    out = tmp_path / "w.json"
    rc = main(["fit", "--questions", str(qfile), "--split", "all", "--split-seed", "5", "--metrics", "em",
               "--out", str(out), "--no-progress", "--batch-size", "4"])
    captured = capsys.readouterr()
    printed = captured.out
    assert rc == 0, captured.err
    assert [len(c) for c in pool.calls] == [4, 4, 4]  # 4 questions per pool run

    saved = load_weights(out, pool=SPECS, metrics=["em"])
    w = dict(zip(saved.pool, saved.weights.retriever_weights))
    kept = dict(zip(saved.pool, saved.weights.kept))
    assert kept["Wiki@10"] and not (kept["SE@1"] and kept["PK"])  # the wrong majority is broken up
    p = saved.provenance
    assert p.objective == 1.0 and p.n_questions == N and p.reader_model == "fake-reader"
    assert p.questions_file == qfile.name  # a name: the voter file records no path of the machine
    assert p.extra["split"] == "all" and p.extra["split_seed"] == 5 and p.extra["correctness"] == "match-tokens"
    assert p.extra["split_by"] == "passage" and p.extra["commit"]  # the checkout's commit (this is one)
    assert p.extra["nli_backend"] == "llm" and len(p.extra["qids_sha256"]) == 16
    assert set(p.extra["seconds"]) == {"pool", "similarity", "fit"}
    assert p.extra["best_single"] == "Wiki@10"  # the fit split's best single: `eor eval` pairs EoR with it
    doc = json.loads(out.read_text())
    assert doc["format"] == "eor-voter/2" and len(p.extra["questions_sha256"]) == 64
    # the cascade: the kept retrievers, cheapest first, thresholds fitted to >= 98% agreement
    c = saved.cascade_to_run
    assert sorted(c.specs) == sorted(saved.kept_specs()) and len(c.thresholds) == len(c.rounds) - 1
    assert c.fit_agreement >= 0.98 and sum(c.fit_stop_rate) == pytest.approx(1.0)
    assert "cascade (" in printed and "adaptive answer = all-kept vote on" in printed

    # the fitted voter picks the always-right answer on every training question
    qs = select_questions(Selection(str(qfile)))
    votes = vote(FakePool(SPECS, answers).run([q.question for q in qs]), saved,
                 build_metrics(saved_options(saved), pool.reader))
    assert [v.answer for v in votes] == [answers(q.question)["Wiki@10"] for q in qs]

    assert "train Match: EoR 1.000; equal weights 0.333" in printed
    assert f"Wiki@10              {w['Wiki@10']:.3f}" in printed and "dropped (omega_r < 0.1):" in printed
    assert "time: pool" in printed and f"weights written to {out}" in printed


def saved_options(saved):
    from voter.question_vote import MetricOptions

    return MetricOptions(saved.metrics)


def _closed_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_fit_resumes_from_the_run_log_and_a_bad_push_target_fails_clearly(tmp_path, eor_home, use_pool, capsys):
    qfile = question_file(tmp_path)
    first = FakePool(SPECS, answers)
    use_pool(first)
    args = ["fit", "--questions", str(qfile), "--split", "fit", "--metrics", "em", "--no-progress",
            "--out", str(tmp_path / "w.json")]
    assert main(args) == 0
    assert sum(len(c) for c in first.calls) == round(0.6 * N)
    second = FakePool(SPECS, answers)
    use_pool(second)
    assert main(args) == 0 and second.calls == []  # all answers come from the run log

    # the held-out 40% is judged; the whole file holds the voter's own fit questions: refused, in one line
    ev = ["eval", "--questions", str(qfile), "--weights", str(tmp_path / "w.json"), "--no-progress",
          "--out-dir", str(tmp_path / "ev")]
    capsys.readouterr()
    assert main(ev) == 0 and "warning" not in capsys.readouterr().err
    ran = FakePool(SPECS, answers)
    use_pool(ran)
    assert main(ev + ["--split", "all"]) == 2 and ran.calls == []
    err = capsys.readouterr().err.strip()
    assert err.startswith("eor: error: ") and "\n" not in err and "the voter" in err and "fitted" in err

    made = use_pool(FakePool(SPECS, answers))
    capsys.readouterr()
    assert main(args + ["--push", "no-port"]) == 2
    assert "--push expects HOST:PORT" in capsys.readouterr().err
    assert made == []  # refused before any work
    (tmp_path / "w.json").unlink()
    port = _closed_port()
    assert main(args + ["--push", f"127.0.0.1:{port}"]) == 1  # nobody listens there: the gate cannot ask
    err = capsys.readouterr().err
    assert "push gate could not ask" in err and "UNAVAILABLE" in err and "nothing pushed" in err
    assert "Traceback" not in err
    assert main(args + ["--push", f"127.0.0.1:{port}", "--force"]) == 1  # no gate; the push itself fails
    err = capsys.readouterr().err
    assert "push to 127.0.0.1:" in err and "UNAVAILABLE" in err and "Traceback" not in err
    assert (tmp_path / "w.json").exists()  # the fitted weights are kept (the live push: test_service_fake)
    assert main(["fit", "--questions", str(qfile), "--metrics", "em,nope"]) == 2
    assert "unknown similarity metric" in capsys.readouterr().err


def test_fit_adds_the_confidence_aware_rounds_by_default_from_20_questions(tmp_path, eor_home, use_pool, capsys):
    qfile = write_questions(tmp_path / "q30.jsonl", [
        {"qid": f"t{i}", "dataset": "toy", "question": f"what is number {i}?", "answers": [f"answer {i}"]}
        for i in range(30)])
    use_pool(FakePool(SPECS, answers))
    base = ["fit", "--questions", str(qfile), "--split", "all", "--metrics", "em", "--no-progress"]
    assert main(base + ["--out", str(tmp_path / "v4.json")]) == 0
    printed = capsys.readouterr().out
    assert "confidence-aware rounds:" in printed and "CV Match" in printed
    assert "on platt-per-round-calibrated P(right), cross-validated ECE of the answers delivered" in printed
    v4 = load_weights(tmp_path / "v4.json", pool=SPECS, metrics=["em"])
    assert json.loads((tmp_path / "v4.json").read_text())["format"] == "eor-voter/4"  # the calibrator is in the file
    assert v4.adaptive is not None and sorted(s for r in v4.adaptive.layout for s in r) == sorted(SPECS)
    assert v4.adaptive.calibrator.method == "platt-per-round" and v4.confidence_kind == "calibrated"
    assert v4.adaptive.calibrator.n_rounds == len(v4.adaptive.layout)  # a line per round
    # the file says how the adaptive block was fitted: settings, the latency model, every candidate layout
    fit = json.loads((tmp_path / "v4.json").read_text())["adaptive"]["fit"]
    assert (fit["tolerance"], fit["C"], fit["cv_folds"], fit["cv_seed"], fit["calibration"]) == (0.005, 1.0, 5, 0,
                                                                                               "platt-per-round")
    assert fit["tokens_per_s"] > 0 and fit["round_overhead_s"] == 1.0  # never measured here: the default, said so
    assert isinstance(fit["early_answer_first"], bool)  # whether round 1's early answer was priced as alone
    assert fit["early_answer_first"] == ("(the quick reader first)" in printed)
    assert fit["round_overhead_by"].startswith("the default: never measured") and "1.00 s a round" in printed
    assert sum(lay["chosen"] for lay in fit["layouts"]) == 1 and len(fit["layouts"]) >= 2
    assert all(0 <= lay["cv_match"] <= 1 and lay["latency_s"] > 0 for lay in fit["layouts"])
    assert [list(r) for r in v4.adaptive.layout] == next(lay["rounds"] for lay in fit["layouts"] if lay["chosen"])
    assert v4.adaptive.fit == fit  # loaded back as written
    # a stream's first reply held to Wiki@10's alone (the one-retriever service), at most 3x its mean; said and kept
    assert fit["first_reply_vs"] == "Wiki@10" and fit["latency_cap_s"] == pytest.approx(3 * fit["first_reply_bound_s"])
    assert isinstance(fit["first_reply_met"], bool) and all(lay["first_reply_s"] > 0 for lay in fit["layouts"])
    assert ("(within Wiki@10 alone" if fit["first_reply_met"] else "(NOT within") in printed
    under = [lay for lay in fit["layouts"] if lay["latency_s"] <= fit["latency_cap_s"]]
    if not fit["first_reply_met"] and under:  # the trade beside the choice: the most accurate layout within the cap
        best = max(under, key=lambda lay: (lay["cv_match"], -lay["latency_s"]))
        assert f"most accurate within the cap: CV Match {best['cv_match']:.3f}" in printed
    assert main(base + ["--out", str(tmp_path / "free.json"), "--first-reply-vs", "none"]) == 0
    assert "(no first-reply bound)" in capsys.readouterr().out
    assert main(base + ["--out", str(tmp_path / "bad.json"), "--first-reply-vs", "HB@RR@10"]) == 2
    err = capsys.readouterr().err
    assert "--first-reply-vs HB@RR@10: not a member of the pool" in err and "Traceback" not in err
    # a round priced as the service measured it here (bench.load_test compare), or as told
    from serve.offline.reader_speed import save_overhead

    save_overhead(0.25, "bench.load_test compare: Wiki@10 over 20 never-asked questions")
    assert main(base + ["--out", str(tmp_path / "measured.json")]) == 0
    assert "0.25 s a round beyond it (measured " in capsys.readouterr().out
    measured = json.loads((tmp_path / "measured.json").read_text())["adaptive"]["fit"]
    assert measured["round_overhead_s"] == 0.25 and "by bench.load_test compare" in measured["round_overhead_by"]
    assert main(base + ["--out", str(tmp_path / "told.json"), "--round-overhead", "0.5"]) == 0
    assert "0.50 s a round beyond it (--round-overhead)" in capsys.readouterr().out
    assert main(base + ["--out", str(tmp_path / "neg.json"), "--round-overhead", "-1"]) == 2
    assert "--round-overhead -1.0: not a non-negative number of seconds" in capsys.readouterr().err
    assert main(base + ["--out", str(tmp_path / "v3.json"), "--calibration", "none"]) == 0
    assert "on the scorer's raw P(right) (not calibrated)" in capsys.readouterr().out
    v3 = load_weights(tmp_path / "v3.json", pool=SPECS, metrics=["em"])
    assert json.loads((tmp_path / "v3.json").read_text())["format"] == "eor-voter/3" and v3.confidence_kind == "raw"
    assert main(base + ["--out", str(tmp_path / "v2.json"), "--no-adaptive"]) == 0
    assert "not fitted (--no-adaptive)" in capsys.readouterr().out
    assert json.loads((tmp_path / "v2.json").read_text())["format"] == "eor-voter/2"
    few = ["fit", "--questions", str(question_file(tmp_path)), "--split", "all", "--metrics", "em", "--no-progress",
           "--out", str(tmp_path / "few.json")]
    assert main(few) == 0 and "not fitted: 12 questions, fewer than 20" in capsys.readouterr().out
    assert main(few + ["--adaptive"]) == 2
    err = capsys.readouterr().err
    assert "--adaptive needs at least 20 questions, the selection has 12" in err and "Traceback" not in err


def test_a_missed_bound_names_the_most_accurate_layouts_within_the_cap():
    """Where the chosen rounds miss the first-reply bound or the cap, the printout names the most
    accurate layout the fit tried within the cap, and within both, beside it."""
    from serve.cli.fit import _first_reply_bound

    def lay(rounds, match, latency, reply):
        return {"rounds": rounds, "cv_match": match, "latency_s": latency, "first_reply_s": reply, "chosen": False}

    record = {"first_reply_vs": "Wiki@10", "first_reply_bound_s": 3.0, "latency_cap_s": 9.0, "first_reply_met": False,
              "layouts": [lay([["A~1.5B", "B~1.5B"], ["C~1.5B"]], 0.67, 14.0, 1.8),
                          lay([["A~1.5B"], ["B~1.5B"]], 0.657, 9.0, 4.5),
                          lay([["A"], ["B", "A~1.5B"]], 0.54, 7.0, 1.8),
                          lay([["A"]], 0.40, 3.0, 3.0)]}
    said = _first_reply_bound(record)
    assert "most accurate within the cap: CV Match 0.657 at 9.0 s, first reply 4.5 s (A~1.5B | B~1.5B)" in said
    assert "most accurate within both: CV Match 0.540 at 7.0 s, first reply 1.8 s (A | B, A~1.5B)" in said
    assert _first_reply_bound(record | {"layouts": record["layouts"][:1]}).endswith("no layout tried keeps the cap)")
    assert _first_reply_bound(record | {"first_reply_met": True}) == " (within Wiki@10 alone: 3.0 s)"
    widened = record | {"tolerance": 0.005, "tolerance_widened_to": 0.028}
    assert "no layout within 2.8% of the anchor's accuracy (one standard error) met both" in _first_reply_bound(widened)
    assert _first_reply_bound(widened | {"first_reply_met": True}) == (
        " (within Wiki@10 alone: 3.0 s; none within 0.5% of the anchor's accuracy met both: the most accurate within "
        "2.8% of the anchor's accuracy (one standard error))")


def test_nested_cv_judges_the_fit_without_writing_a_voter(tmp_path, eor_home, use_pool, capsys):
    qfile = write_questions(tmp_path / "nested.jsonl", [
        {"qid": f"t{i}", "dataset": "toy" if i % 2 else "other", "question": f"what is number {i}?",
         "answers": [f"answer {i}"], "gold_pids": [f"para{i // 2}"]} for i in range(40)])
    use_pool(FakePool(SPECS, answers))
    out = tmp_path / "nested.json"
    rc = main(["fit", "--questions", str(qfile), "--split", "all", "--metrics", "em", "--nested-cv", "3",
               "--out", str(out), "--no-progress", "--calibration", "none", "--first-reply-vs", "none"])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    doc = json.loads(out.read_text())
    assert doc["outer_folds"] == 3 and sum(f["questions"] for f in doc["folds"]) == 40
    assert set(doc["datasets"]) == {"other", "toy", "all"} and doc["selection"]["split_by"] == "passage"
    whole = doc["datasets"]["all"]
    assert whole["n"] == 40 and all(f["pair"] == "Wiki@10" for f in doc["folds"])  # always right
    assert whole["match"]["pair"] == 1.0 and whole["match"]["voter"] <= 1.0
    assert "nested cross-validation grouped by passage" in captured.out and not (eor_home / "weights" / "voter.json").exists()
