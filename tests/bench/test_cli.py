"""`python -m bench.robust`: argument checks, clear errors, a full run and the continuous mode."""
from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from bench.robust import cli, query_level, runner
from bench.robust.data import load_items, tokens
from splits import split_assignment
from bench.robust.qa import contains_answer
from tests.shared_data import CORPUS_FILE, QUESTIONS_FILE
from tests.bench.fakes import FAKE, ITEMS, FakeClient, fake_get

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def registry(monkeypatch):
    """Every name the suites use counts as registered (the real modules may not be installed)."""
    from bench.robust import rare, sure

    used = {n for _, n, _ in sure.TYPES.values()} | {n for n, _ in rare.QUERY_PERTURBATIONS.values()}
    used |= {n for n, _ in rare.DOC_PERTURBATIONS.values()} | {n for n, _ in query_level.PERTURBATIONS.values()}
    monkeypatch.setattr(runner, "default_names", lambda: sorted(used | set(FAKE)))


@pytest.fixture
def data_files(tmp_path):
    """The fake items as question and corpus files (plus distractors for noise picking)."""
    q = tmp_path / "questions.jsonl"
    c = tmp_path / "corpus.jsonl"
    q.write_text("".join(json.dumps({"qid": it.qid, "dataset": "toy", "question": it.question,
                                     "answers": list(it.answers), "gold_pids": list(it.gold_pids)}) + "\n"
                         for it in ITEMS))
    docs = [d for it in ITEMS for d in (*it.gold, it.noise)]
    c.write_text("".join(json.dumps({"id": d.id, "title": d.title, "text": d.text, "source": "x"}) + "\n" for d in docs))
    return q, c


@pytest.fixture
def fake_service(monkeypatch):
    clients = []

    def connect(args):
        clients.append(FakeClient())
        return clients[-1], {"status": "SERVING", "model": "fake", "retrievers": ["Wiki@10", "SE@1", "PK", "ReFree"]}

    monkeypatch.setattr(cli, "connect", connect)
    monkeypatch.setattr(runner, "default_get", fake_get)
    monkeypatch.setitem(query_level.PERTURBATIONS, "shout", ("shout", {}))
    monkeypatch.setitem(query_level.PERTURBATIONS, "suffix", ("suffix", {}))
    return clients


def test_parse_duration():
    assert cli.parse_duration("6h") == 21600 and cli.parse_duration("30m") == 1800
    assert cli.parse_duration("1h30m") == 5400 and cli.parse_duration("90") == 90
    for bad in ("soon", "0s", "-1h", "6x"):
        with pytest.raises(argparse.ArgumentTypeError):
            cli.parse_duration(bad)


def test_missing_questions_file_is_a_clear_error(tmp_path):
    with pytest.raises(SystemExit, match="--questions: file not found"):
        cli.main(["rare", "--server", "127.0.0.1:1", "--questions", str(tmp_path / "nope.jsonl"), "--out", str(tmp_path)])


def test_metrics_port_needs_every(tmp_path):
    with pytest.raises(SystemExit, match="--metrics-port needs --every"):
        cli.main(["rare", "--server", "127.0.0.1:1", "--metrics-port", "9000", "--out", str(tmp_path)])


@pytest.mark.parametrize("extra", [["--rounds", "3"], ["--every", "1h", "--rounds", "0"]])
def test_rounds_needs_every_and_a_count(tmp_path, extra):
    with pytest.raises(SystemExit, match="--rounds needs --every"):
        cli.main(["rare", "--server", "127.0.0.1:1", "--out", str(tmp_path), *extra])


def test_unreachable_server_is_a_clear_error(tmp_path, data_files):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once we leave: nobody listens there
    q, c = data_files
    with pytest.raises(SystemExit, match=f"cannot reach the eor service at 127.0.0.1:{port}"):
        cli.main(["query", "--server", f"127.0.0.1:{port}", "--questions", str(q), "--corpus", str(c),
                  "--dataset", "toy", "--split", "all", "--out", str(tmp_path / "out"), "--timeout", "5", "--perturbations", "formal"])


def test_bad_address_and_unknown_perturbation(tmp_path, data_files):
    q, c = data_files
    with pytest.raises(SystemExit, match="bad --server"):
        cli.main(["query", "--server", "nohostport", "--questions", str(q), "--corpus", str(c), "--dataset", "toy", "--split", "all",
                  "--perturbations", "formal", "--out", str(tmp_path)])
    with pytest.raises(SystemExit, match="unknown query-level perturbation"):
        cli.main(["query", "--server", "127.0.0.1:1", "--questions", str(q), "--corpus", str(c), "--dataset", "toy", "--split", "all",
                  "--perturbations", "nonsense", "--out", str(tmp_path)])


def test_unregistered_perturbations_are_a_clear_error(tmp_path, data_files, monkeypatch):
    monkeypatch.setattr(runner, "default_names", lambda: ["typo"])
    q, c = data_files
    with pytest.raises(SystemExit, match="perturbation.s. ambiguity, formal, redundancy are not registered"):
        cli.main(["query", "--server", "127.0.0.1:1", "--questions", str(q), "--corpus", str(c), "--dataset", "toy", "--split", "all",
                  "--out", str(tmp_path)])


def test_missing_backend_is_a_clear_error(tmp_path, data_files, fake_service, monkeypatch):
    def get(name, **kw):
        class NeedsTextAttack:
            target = "query"

            def apply(self, texts, seed=0, context=None):
                raise ImportError("TextAttack is not installed here; run bench/setup.sh")
        return NeedsTextAttack()

    monkeypatch.setattr(runner, "default_get", get)
    q, c = data_files
    with pytest.raises(SystemExit, match="a perturbation cannot run here: TextAttack is not installed"):
        cli.main(["query", "--server", "127.0.0.1:1", "--questions", str(q), "--corpus", str(c), "--dataset", "toy", "--split", "all",
                  "--perturbations", "typo10", "--out", str(tmp_path)])


def test_load_items_picks_a_noise_passage_without_the_answer():
    if not CORPUS_FILE.exists():
        pytest.skip(f"{CORPUS_FILE} not present (../shared/data beside the checkout, or $EOR_TEST_DATA_DIR)")
    items = load_items(str(QUESTIONS_FILE), str(CORPUS_FILE), "nq-open-oracle", 8, noise=True)
    assert len(items) == 8
    with open(QUESTIONS_FILE, encoding="utf-8") as f:
        part = split_assignment(json.loads(line)["qid"] for line in f if line.strip())
    assert {part[it.qid] for it in items} == {"eval"}  # by default, questions no voter was fitted on
    for it in items:
        assert it.golden is not None and it.golden.id in it.gold_pids
        assert it.noise is not None and it.noise.id not in it.gold_pids
        assert not contains_answer(it.noise.text, it.answers)
        # lexically similar: it shares a content word with the question
        assert set(tokens(it.question)) & set(tokens(it.noise.title + " " + it.noise.text))


def test_the_suites_draw_the_eval_split_by_default(tmp_path):
    """The split is the offline one (`splits`, over the whole file): `--split eval` (the default)
    keeps exactly the file's eval-split questions, in file order; `all` keeps every one."""
    q = tmp_path / "q.jsonl"
    c = tmp_path / "c.jsonl"
    rows = [{"qid": f"t-{i}", "dataset": "toy", "question": f"what is {i}", "answers": [str(i)],
             "gold_pids": [f"p{i}"]} for i in range(20)]
    q.write_text("".join(json.dumps(r) + "\n" for r in rows))
    c.write_text("".join(json.dumps({"id": f"p{i}", "title": "t", "text": f"it is {i}", "source": "x"}) + "\n"
                         for i in range(20)))
    part = split_assignment(r["qid"] for r in rows)
    assert [it.qid for it in load_items(str(q), str(c), "toy")] == [r["qid"] for r in rows if part[r["qid"]] == "eval"]
    assert [it.qid for it in load_items(str(q), str(c), "toy", split="fit")] == \
        [r["qid"] for r in rows if part[r["qid"]] == "fit"]
    assert len(load_items(str(q), str(c), "toy", split="all")) == 20
    with pytest.raises(SystemExit, match="split must be one of"):
        load_items(str(q), str(c), "toy", split="test")


def test_full_run_resumes_and_writes_reports(tmp_path, data_files, fake_service, capsys):
    q, c = data_files
    out = tmp_path / "out"
    argv = ["query", "--server", "127.0.0.1:1", "--questions", str(q), "--corpus", str(c), "--dataset", "toy", "--split", "all",
            "--limit", "3", "--perturbations", "shout,suffix", "--variants", "2", "--out", str(out), "--quiet"]
    assert cli.main(argv) == 0
    for f in ("results.jsonl", "report.json", "report.md", "radar.png", "bars.png", "manifest.json"):
        assert (out / f).exists(), f
    assert "3 questions" in (out / "report.md").read_text()
    assert cli.main(argv) == 0  # again: everything is done, nothing asked
    assert fake_service[-1].ask_calls == 0
    assert "0 instances run, 15 already done" in capsys.readouterr().out


@pytest.fixture
def rare_every_hour(data_files, fake_service, monkeypatch, tmp_path):
    """RARE's perturbations as the fakes (shout, drop the answer, "rewrite"); the continuous
    mode's arguments for OUT = tmp_path, plus any given."""
    from bench.robust import rare

    monkeypatch.setitem(rare.QUERY_PERTURBATIONS, "shout", ("shout", {}))
    monkeypatch.setitem(rare.DOC_PERTURBATIONS, "no_answer", ("drop_answer", {}))
    monkeypatch.setitem(rare.DOC_PERTURBATIONS, "back_translate", ("generated", {}))
    q, c = data_files
    return lambda *extra: cli.build_parser().parse_args(
        ["rare", "--server", "127.0.0.1:1", "--questions", str(q), "--corpus", str(c), "--dataset", "toy", "--split", "all",
         "--perturbations", "shout", "--out", str(tmp_path), "--every", "1h", "--metrics-port", "0",
         "--quiet", "--no-plots", *extra])


def test_continuous_mode_rounds_and_gauges(tmp_path, data_files, fake_service, rare_every_hour):
    from prometheus_client import generate_latest

    q, c = data_files
    args = rare_every_hour("--limit", "2")
    slept = []
    exporter = cli.run_forever(args, load_items(str(q), str(c), "toy", 2, split="all"), rounds=2, sleep=slept.append)
    assert len(slept) == 1 and slept[0] > 3500
    rounds = sorted((tmp_path / "runs").iterdir())
    assert len(rounds) == 2 and all((r / "report.json").exists() for r in rounds)
    assert len(fake_service) == 2 and all(c.ask_calls > 0 for c in fake_service)  # each round asks afresh
    assert (tmp_path / "latest" / "report.md").exists() and not (tmp_path / "latest" / "results.jsonl").exists()
    text = generate_latest(exporter.registry).decode()
    assert 'eor_bench_score{metric="overall",suite="rare",system="EoR"}' in text
    assert "eor_bench_last_success_timestamp_seconds" in text


def test_each_round_is_compared_with_the_baseline_and_a_real_drop_is_exported(tmp_path, data_files, fake_service,
                                                                             monkeypatch, capsys):
    """Three rounds: the second equals the first (no drop), the third runs after a degraded
    voter was pushed (the deployed row loses instances): regression.json and the gauges say so.
    (--alpha 0.3: the toy slice has too few instances for 0.05; the test's unit is the wiring.)"""
    from prometheus_client import generate_latest

    clients = []

    def connect(args):
        clients.append(FakeClient(degraded=len(clients) >= 2))
        return clients[-1], {"status": "SERVING", "model": "fake", "retrievers": ["Wiki@10", "SE@1", "PK", "ReFree"]}

    monkeypatch.setattr(cli, "connect", connect)
    q, c = data_files
    args = cli.build_parser().parse_args(
        ["query", "--server", "127.0.0.1:1", "--questions", str(q), "--corpus", str(c), "--dataset", "toy", "--split", "all",
         "--limit", "4", "--perturbations", "suffix", "--variants", "2", "--out", str(tmp_path), "--every", "1h",
         "--metrics-port", "0", "--alpha", "0.3", "--quiet", "--no-plots"])
    exporter = cli.run_forever(args, load_items(str(q), str(c), "toy", 4, split="all"), rounds=3, sleep=lambda s: None)
    rounds = sorted((tmp_path / "runs").iterdir())
    assert len(rounds) == 3 and not (rounds[0] / "regression.json").exists()  # the first round is the baseline
    second = json.loads((rounds[1] / "regression.json").read_text())["systems"]["deployed"]
    third = json.loads((rounds[2] / "regression.json").read_text())["systems"]["deployed"]
    assert (second["lost"], second["gained"], second["regression"]) == (0, 0, False)
    assert third["lost"] >= 3 and third["gained"] == 0 and third["regression"] and third["points"] > 0
    assert json.loads((rounds[2] / "regression.json").read_text())["baseline"].endswith(rounds[0].name)
    text = generate_latest(exporter.registry).decode()
    assert 'eor_bench_regression{suite="query",system="deployed"} 1.0' in text
    assert 'eor_bench_regression{suite="query",system="EoR"} 0.0' in text  # the named pool's vote did not move
    confidence = [json.loads((r / "regression.json").read_text())["confidence"] for r in rounds[1:]]
    assert confidence[0]["drop"] == 0.0 and confidence[0]["paired"] > 0  # the same answers, equally sure
    assert confidence[1]["drop"] > 0.25 and confidence[1]["current"] == pytest.approx(0.3)  # the degraded voter
    assert f'eor_bench_confidence_drop{{suite="query"}} {confidence[1]["drop"]}' in text
    assert "REGRESSION" in capsys.readouterr().out


@pytest.mark.parametrize("bad", ["0", "1.5", "-0.2", "nan", "sure"])
def test_min_confidence_must_be_a_probability_above_zero(tmp_path, bad, capsys):
    with pytest.raises(SystemExit):
        cli.main(["rare", "--server", "127.0.0.1:1", "--out", str(tmp_path), "--min-confidence", bad])
    err = capsys.readouterr().err
    assert "--min-confidence" in err and ("at most 1" in err or "not a probability" in err)
    assert cli.parse_min_confidence("1") == 1.0 and cli.build_parser().parse_args(
        ["rare", "--server", "x:1", "--out", "o"]).min_confidence is None  # off by default


def test_min_confidence_adds_the_abstaining_row_to_reports_gauges_and_the_regression(tmp_path, data_files,
                                                                                   fake_service, rare_every_hour,
                                                                                   capsys):
    from prometheus_client import generate_latest

    q, c = data_files
    args = rare_every_hour("--limit", "4", "--min-confidence", "0.7")
    exporter = cli.run_forever(args, load_items(str(q), str(c), "toy", 4, split="all"), rounds=2, sleep=lambda s: None)
    assert all(set(client.bars) == {0.7} for client in fake_service)
    row = "deployed, abstains below 0.7"
    report = json.loads((tmp_path / "latest" / "report.json").read_text())
    m = report["metrics"]
    assert report["meta"]["min_confidence"] == 0.7 and m["systems"][:3] == ["deployed", row, "EoR"]
    assert m["abstention"]["rate"] == pytest.approx(12 / 32) and m["per_system"][row]["overall"] > m["per_system"]["deployed"]["overall"]
    md = (tmp_path / "latest" / "report.md").read_text()
    assert f"| **{row}** |" in md and "## Abstention of the deployed path below P(right) 0.7" in md
    assert "| no_answer | 8 | 8 | 100.0 |" in md and "a safe refusal" in md
    assert f"{row} " in capsys.readouterr().out
    regression = json.loads((sorted((tmp_path / "runs").iterdir())[1] / "regression.json").read_text())
    assert regression["systems"][row]["paired"] == 32
    text = generate_latest(exporter.registry).decode()
    assert f'eor_bench_abstention_rate{{suite="rare",system="{row}"}} 0.375' in text
    assert f'eor_bench_score{{metric="overall",suite="rare",system="{row}"}}' in text


def test_continuous_mode_survives_a_failed_round(tmp_path, data_files, monkeypatch, capsys):
    def down(args):
        raise SystemExit("cannot reach the eor service at 127.0.0.1:1: UNAVAILABLE")

    monkeypatch.setattr(cli, "connect", down)
    q, c = data_files
    args = cli.build_parser().parse_args(["query", "--server", "127.0.0.1:1", "--questions", str(q), "--corpus", str(c),
                                          "--dataset", "toy", "--split", "all", "--out", str(tmp_path), "--every", "1s", "--quiet",
                                          "--perturbations", "typo10"])
    cli.run_forever(args, load_items(str(q), str(c), "toy", 1, split="all"), rounds=2, sleep=lambda s: None)
    assert capsys.readouterr().err.count("round failed (cannot reach") == 2


def test_bench_imports_no_server_package():
    code = ("import sys, bench.robust.cli, bench.robust.report, bench.robust.sure, bench.robust.rare, "
            "bench.robust.query_level, bench.robust.data, bench.robust.runner;"
            "bad = [m for m in sys.modules if m.split('.')[0] in ('serve', 'retrievers', 'voter', 'textattack')];"
            "print(bad); sys.exit(1 if bad else 0)")
    res = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr


def test_module_entry_point_help():
    res = subprocess.run([sys.executable, "-m", "bench.robust", "--help"], cwd=REPO, capture_output=True, text=True)
    assert res.returncode == 0 and "--every" in res.stdout and "{query,rare,sure}" in res.stdout


def test_cli_over_grpc_end_to_end(tmp_path, data_files, monkeypatch):
    """The real client and CLI against a loopback gRPC server (the fake service behind it)."""
    from bench.robust import sure
    from tests.bench.grpc_fake import FakeServer

    monkeypatch.setattr(runner, "default_get", fake_get)
    monkeypatch.setattr(sure, "TYPES", {"format_html": ("format", "html", {}), "logic_reverse": ("logic", "reverse", {}),
                                        "source_llm": ("source", "generated", {})})
    q, c = data_files
    # the toy noise docs share no word with q1's question: add a distractor that does
    with open(c, "a") as f:
        f.write(json.dumps({"id": "vital-9", "title": "Hamlet (film)", "text": "Hamlet is a 1948 film.", "source": "x"}) + "\n")
    with FakeServer() as address:
        argv = ["sure", "--server", address, "--questions", str(q), "--corpus", str(c), "--dataset", "toy", "--split", "all",
                "--out", str(tmp_path / "out"), "--quiet", "--batch", "3", "--judge", "reader"]
        assert cli.main(argv) == 0
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    m = report["metrics"]
    assert report["meta"]["model"] == "fake" and m["questions"] == 4
    assert m["per_system"]["SE@1"]["format_html"]["K-G"]["LR"] == 1.0
    # q3 shares no word with any non-gold passage: no noise document, so 4 golden + 3 noise
    assert m["instances"] == 7 * 4
    assert m["preservation"]["source_llm"]["kept"] == 7  # the NLI judge (Generate) said entailment
    recs = [json.loads(line) for line in (tmp_path / "out" / "results.jsonl").read_text().splitlines()]
    assert all(r["reader_s"] >= 0.5 for r in recs if r["kept"])
    # the deployed row: the same questions asked as production asks them, first in every table
    assert m["systems"][:2] == ["deployed", "EoR"]
    asked = [r for r in recs if r["kept"]]
    assert asked and all(r["deployed"]["voter"] == "fake cascade" and r["deployed"]["rounds"] in (1, 2) for r in asked)
    cost = m["cost"]["deployed"]
    assert cost["asked"] == len(asked) and 300 <= cost["tokens"] <= 900  # 100 prefix-cache hits not counted
    md = (tmp_path / "out" / "report.md").read_text()
    assert "| **deployed** |" in md and "Cost of the deployed path" in md


def test_a_restarted_continuous_run_resumes_its_unfinished_round(tmp_path):
    done, unfinished = tmp_path / "runs" / "20260101T000000Z", tmp_path / "runs" / "20260101T060000Z"
    done.mkdir(parents=True)
    (done / "report.json").write_text("{}")
    unfinished.mkdir()
    (unfinished / "results.jsonl").write_text("")
    assert cli.round_dir(tmp_path) == unfinished
    (unfinished / "report.json").write_text("{}")
    fresh = cli.round_dir(tmp_path)
    assert fresh.parent == tmp_path / "runs" and fresh not in (done, unfinished)
