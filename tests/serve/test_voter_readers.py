"""The voter names the readers it needs (voter/weights_io.py, eor-voter/5): `eor fit` records the
pool's, and `eor ask` and the service refuse a voter naming a reader they lack, in one line, or
run its single-reader fallback and say so (voter/question_vote.py: choose_voter)."""
from __future__ import annotations

import json
from dataclasses import replace

import pytest

from retrievers.pool import PoolConfig
from retrievers.reader import CachedReader
from serve.cli import main
from serve.config import EorConfig, VoterSelection
from serve.config_readers import reader_models
from tests.serve.conftest import FakeEngine, FakePool, write_questions
from tests.voter.conftest import ONE_READER_POOL, TWO_READER_POOL, reader_voter
from voter.weights_io import FORMAT_V5, load_weights, save_weights

STRONG_ID = "qwen2.5-coder-1.5b:qwen2.5-coder-1.5b:float32"  # what the 1.5B engine calls itself


def two_reader_pool(specs=TWO_READER_POOL) -> FakePool:
    pool = FakePool(specs, lambda q: {s: ("paris" if s.startswith("Wiki") else "lyon") for s in specs})
    strong = FakeEngine()
    strong.model_id = STRONG_ID
    pool.other_readers["1.5B"] = CachedReader(strong)
    return pool


def test_fit_records_the_pools_readers_and_ask_refuses_it_without_them(tmp_path, eor_home, use_pool, capsys):
    qfile = write_questions(tmp_path / "q.jsonl", [
        {"qid": f"t{i}", "dataset": "toy", "question": f"capital {i}?", "answers": ["paris"]} for i in range(6)])
    use_pool(two_reader_pool())
    out = tmp_path / "v.json"
    rc = main(["fit", "--questions", str(qfile), "--split", "all", "--metrics", "em", "--out", str(out),
               "--no-progress"])
    assert rc == 0, capsys.readouterr().err
    doc = json.loads(out.read_text())
    assert doc["format"] == FORMAT_V5 and doc["readers"] == {"": "fake-reader", "1.5B": STRONG_ID}
    assert load_weights(out).readers == {"": "fake-reader", "1.5B": STRONG_ID}
    # the single-reader fallback: the same fit over the default reader's members alone
    assert doc["fallback"]["pool"] == [s for s in TWO_READER_POOL if "~" not in s]
    assert load_weights(out).fallback.readers == {"": "fake-reader"}
    assert "single-reader fallback (3 members through fake-reader): fit Match" in capsys.readouterr().out
    use_pool(FakePool(ONE_READER_POOL, lambda q: dict.fromkeys(ONE_READER_POOL, "paris")))  # no 1.5B
    assert main(["ask", "--weights", str(out), "capital?"]) == 0  # its fallback runs, and says so
    assert f"[{out}, single-reader fallback]" in capsys.readouterr().out
    bare = save_weights(tmp_path / "bare.json", replace(load_weights(out), fallback=None))  # no fallback: refused
    assert main(["ask", "--weights", str(bare), "capital?"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("eor: error: voter ")
    assert "this system does not run reader 1.5B (qwen2.5-coder-1.5b)" in err


def test_fit_gives_a_two_reader_voter_a_fitted_single_reader_fallback_with_its_own_rounds(tmp_path, eor_home,
                                                                                          use_pool, capsys):
    qfile = write_questions(tmp_path / "q.jsonl", [
        {"qid": f"t{i}", "dataset": "toy", "question": f"capital {i}?", "answers": ["paris" if i % 2 else "lyon"]}
        for i in range(24)])
    use_pool(two_reader_pool())
    out = tmp_path / "v.json"
    assert main(["fit", "--questions", str(qfile), "--split", "all", "--metrics", "em", "--out", str(out),
                 "--no-progress"]) == 0, capsys.readouterr().err
    saved = load_weights(out)
    fb = saved.fallback
    assert saved.adaptive is not None and fb is not None and fb.adaptive is not None
    assert "~" not in " ".join(s for r in fb.adaptive.layout for s in r)  # its rounds read the default reader only
    assert "Wiki@10~1.5B" in saved.pool and list(fb.pool) == [s for s in TWO_READER_POOL if "~" not in s]
    use_pool(FakePool(ONE_READER_POOL, lambda q: dict.fromkeys(ONE_READER_POOL, "paris")))  # no 1.5B: the fallback
    capsys.readouterr()
    assert main(["ask", "--weights", str(out), "capital?"]) == 0, capsys.readouterr().err
    assert f"[{out}, single-reader fallback]" in capsys.readouterr().out


def test_the_service_checks_the_configured_readers_and_runs_the_fallback(tmp_path, eor_home):
    from serve.app.deployments import Voter

    fallback = reader_voter(ONE_READER_POOL, readers={})
    path = save_weights(tmp_path / "v.json", reader_voter(fallback=fallback))
    one = EorConfig(pool=PoolConfig(specs=ONE_READER_POOL), voter=VoterSelection(weights=str(path)))
    assert reader_models(one) == {"": "qwen2.5-coder-0.5b"}  # the pool names no other reader: none runs
    v = Voter.func_or_class(one, None)
    assert v.choice.saved == fallback and v.choice.source == f"{path}, single-reader fallback"
    two = EorConfig(pool=PoolConfig(specs=TWO_READER_POOL), readers={"1.5B": "qwen2.5-coder-3b"},
                    voter=VoterSelection(weights=str(save_weights(tmp_path / "plain.json", reader_voter()))))
    assert reader_models(two) == {"": "qwen2.5-coder-0.5b", "1.5B": "qwen2.5-coder-3b"}
    with pytest.raises(ValueError, match="reader 1.5B is qwen2.5-coder-3b here, the voter was fitted with "
                                         "qwen2.5-coder-1.5b"):
        Voter.func_or_class(two, None)
    right = EorConfig(pool=PoolConfig(specs=TWO_READER_POOL), voter=VoterSelection(weights=str(path)))
    assert Voter.func_or_class(right, None).choice.saved == reader_voter(fallback=fallback)


def test_a_pushed_voter_is_checked_against_the_services_readers(tmp_path, eor_home):
    from protos import eor_pb2
    from serve.app.deployments import Voter
    from serve.app.wire import InvalidArgument, parse_weights
    from serve.paths import pushed_voter_path

    one = EorConfig(pool=PoolConfig(specs=ONE_READER_POOL), voter=VoterSelection(weights="equal", metrics=("em",)))
    fallback = reader_voter(ONE_READER_POOL, readers={})
    pushed = reader_voter(fallback=fallback)
    request = eor_pb2.SetVoterWeightsRequest(weights_json=json.dumps(pushed.to_dict()))
    assert parse_weights(request, ONE_READER_POOL, reader_models(one)) == fallback
    plain = eor_pb2.SetVoterWeightsRequest(weights_json=json.dumps(reader_voter().to_dict()))
    with pytest.raises(InvalidArgument, match="this system does not run reader 1.5B"):
        parse_weights(plain, ONE_READER_POOL, reader_models(one))
    v = Voter.func_or_class(one, None)
    v.reconfigure({"weights": pushed.to_dict()})
    assert v.choice.saved == fallback and v.choice.source == "pushed, single-reader fallback"
    assert load_weights(pushed_voter_path()) == pushed  # what was pushed is kept, fallback and all


def test_a_reader_not_prepared_here_leaves_its_members_out_and_the_fallback_answers(tmp_path, eor_home, use_pool,
                                                                                    capfd, monkeypatch):
    import serve.engine.models
    from serve.builder import runnable_config

    config = EorConfig(pool=PoolConfig(specs=TWO_READER_POOL))
    runnable, notes = runnable_config(config)  # nothing prepared in this EOR_HOME
    assert runnable.pool.specs == ONE_READER_POOL
    assert notes == ["reader 1.5B (qwen2.5-coder-1.5b) is not prepared on this machine: its 1 retriever left out "
                     "(`eor models prepare qwen2.5-coder-1.5b` adds them)"]
    real = serve.engine.models.resolve_model
    monkeypatch.setattr(serve.engine.models, "resolve_model", lambda name: tmp_path)  # prepared: all stay
    assert runnable_config(config) == (config, [])
    only = EorConfig(pool=PoolConfig(specs=("SE@1~1.5B", "Wiki@10~1.5B")))
    monkeypatch.setattr(serve.engine.models, "resolve_model", real)
    assert runnable_config(only) == (only, [])  # nothing would be left: the engine's own clear error instead

    fallback = reader_voter(ONE_READER_POOL, readers={})
    weights = save_weights(tmp_path / "v.json", reader_voter(fallback=fallback))
    cfg = tmp_path / "eor.yaml"
    cfg.write_text("pool:\n  specs: [" + ", ".join(TWO_READER_POOL) + "]\n")
    made = use_pool(FakePool(ONE_READER_POOL, lambda q: dict.fromkeys(ONE_READER_POOL, "paris")))
    assert main(["ask", "--config", str(cfg), "--weights", str(weights), "capital?"]) == 0
    out, err = capfd.readouterr()
    assert made[-1].pool.specs == ONE_READER_POOL and "single-reader fallback]" in out
    assert "eor: warning: reader 1.5B (qwen2.5-coder-1.5b) is not prepared on this machine" in err
    assert "Traceback" not in err


def test_a_fallback_that_does_not_fit_either_says_first_why_it_was_taken():
    from voter.question_vote import checked_choice

    with_fallback = reader_voter(fallback=reader_voter(ONE_READER_POOL, readers={}))
    other_model = {"": "qwen2.5-coder-0.5b", "1.5B": "qwen2.5-coder-0.5b"}  # the 1.5B slot on another model
    with pytest.raises(ValueError, match=r"reader 1\.5B is qwen2\.5-coder-0\.5b here, the voter was fitted with "
                                         r"qwen2\.5-coder-1\.5b; its single-reader fallback does not fit this pool "
                                         r"either \(the weights were fitted for a different retriever pool"):
        checked_choice(with_fallback, "shipped", TWO_READER_POOL, other_model)
    assert checked_choice(with_fallback, "shipped", ONE_READER_POOL, other_model).source == \
        "shipped, single-reader fallback"


def test_a_shipped_voter_that_does_not_fit_stops_eor_serve_in_one_line_before_ray_starts(tmp_path, eor_home, capsys,
                                                                                       monkeypatch):
    import serve.app.application
    import serve.builder

    from serve.app.deployments import voter_from_files

    readers = {"": "qwen2.5-coder-0.5b", "1.5B": "qwen2.5-coder-0.5b"}
    pool = list(EorConfig().pool.specs)
    with pytest.raises(ValueError, match="^the shipped voter does not fit this service: voter [0-9a-f]+ \\[shipped\\]: "
                                         "reader 1.5B is qwen2.5-coder-0.5b here"):
        voter_from_files(pool, readers, None)  # no voter pushed in this EOR_HOME: the shipped one is named
    monkeypatch.setattr(serve.builder, "runnable_config", lambda c: (c, []))  # as if both readers were prepared
    monkeypatch.setattr(serve.app.application.LocalService, "start",
                        lambda self: pytest.fail("Ray started for a voter that does not fit"))
    config = tmp_path / "lean.yaml"
    config.write_text("readers:\n  1.5B: {model: qwen2.5-coder-0.5b}\n")
    assert main(["serve", "--config", str(config), "--no-http"]) == 2
    err = capsys.readouterr().err
    assert "eor: error: the shipped voter does not fit this service" in err and "Traceback" not in err
