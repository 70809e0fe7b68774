"""Each reader's measured prefill and decode speed, and the cascade fit pricing rounds by them."""
from __future__ import annotations

import json

import pytest

from retrievers.types import Candidate, Context, QuestionResult, ReaderTokens
from fitting.pricing import priced_seconds, round_work
from serve.offline.reader_speed import ReaderSpeed, load_speeds, measure, save_speed, speed_key
from tests.retrievers.fakes import FakeEngine


def result() -> QuestionResult:
    """Two readers: SE@1 (100 prompt tokens, 3 generated), PK (its 200-token document, then 4),
    and SE@1~1.5B (100 tokens, 5 generated; a prefix-cache hit of 20 from a prompt that did not run)."""
    cands = (Candidate("SE@1", "a", Context("SE@1"), tokens=ReaderTokens(100, 3)),
             Candidate("PK", "b", Context("PK"), tokens=ReaderTokens(250, 4), shared=("PK",)),
             Candidate("SE@1~1.5B", "c", Context("SE@1~1.5B"), tokens=ReaderTokens(100, 5, 20)))
    return QuestionResult("q", cands, {"PK": ReaderTokens(50, 200)})


def test_a_round_waits_for_its_longest_decode_and_a_document_is_written_once():
    r = result()
    one = round_work(r, (frozenset({"SE@1", "PK", "SE@1~1.5B"}),))
    assert one == {"": (100 + 250 + 50, 204), "1.5B": (100, 5)}  # PK's document, then its answer
    two = round_work(r, (frozenset({"SE@1"}), frozenset({"PK"})))
    assert two[""] == (400, 3 + 204)  # one decode per round: rounds run one after the other
    speeds = {"": ReaderSpeed(1000, 25), "1.5B": ReaderSpeed(300, 15)}
    cp = Candidate("SE@1@CP", "d", Context("SE@1@CP"), tokens=ReaderTokens(300, 150))  # summary and answer
    staged = QuestionResult("q", (*r.candidates, cp), r.shared_tokens)
    assert round_work(staged, (frozenset({"PK", "SE@1@CP"}),))[""][1] == 200 + 150  # documents, then the rest
    assert priced_seconds(r, (frozenset({"SE@1~1.5B"}),), speeds) == pytest.approx(100 / 300 + 5 / 15)


def test_the_fit_prices_rounds_by_measured_speed_and_says_so():
    from serve.offline.reader_frontier import compare, systems
    from tests.serve.test_reader_runs import synthetic
    from voter.question_vote import MetricOptions, build_metrics

    scored = synthetic()
    seconds = {"": {q.qid: 0.5 for q, _ in scored}, "1.5B": {q.qid: 1.25 for q, _ in scored}}
    pools = systems(["SE@1", "Wiki@10"], ["SE@1", "Wiki@10"], "1.5B")
    speeds = {"": ReaderSpeed(1000.0, 25.0), "1.5B": ReaderSpeed(300.0, 15.0)}
    doc = compare(scored, seconds, pools, build_metrics(MetricOptions.parse("em"), None), ["em"], "mean",
                  calibration=None, speeds=speeds)
    got = doc["systems"]["cascade over both"]
    assert got["reader_speed"] == {"default": [1000, 25.0], "1.5B": [300, 15.0]}
    # 100 prompt tokens and 4 decoded per member: a 1.5B member costs 100/300 + 4/15 s, in 0.5B prefill tokens
    one = [f for f in got["layouts"] if f["rounds"] == [["SE@1~1.5B", "Wiki@10~1.5B"]]][0]
    assert one["tokens"] == pytest.approx(1000 * (200 / 300 + 4 / 15), abs=0.1)
    # a reader without a measured speed: the run logs' price per token, for every system alike
    partial = compare(scored, seconds, pools, build_metrics(MetricOptions.parse("em"), None), ["em"], "mean",
                      calibration=None, speeds={"": speeds[""]})
    assert all(s["reader_speed"] == {} for s in partial["systems"].values())


def test_a_layout_may_stop_before_the_rest_but_is_never_a_lone_subset():
    from fitting.layout_choice import candidate_layouts

    pool = ["SE@1", "Wiki@10", "PK", "ReFree"]
    acc = {"SE@1": 0.4, "Wiki@10": 0.3, "PK": 0.2, "ReFree": 0.1}
    layouts = candidate_layouts(pool, acc, {s: 100.0 for s in pool}, firsts=(1,), seconds=(0, 2))
    assert (("SE@1",), ("Wiki@10", "PK")) in layouts  # PK's decode need not be paid for
    assert (("SE@1",), ("Wiki@10", "PK"), ("ReFree",)) in layouts
    assert [lay for lay in layouts if len(lay) == 1] == [(tuple(pool),)]  # the anchor stays the whole vote
    every = candidate_layouts(pool, acc, {s: 100.0 for s in pool})
    assert (("SE@1",), ("Wiki@10",)) in every and (("SE@1",), ("Wiki@10",), ("PK", "ReFree")) in every  # one more


def test_speeds_are_kept_by_model_and_a_broken_file_is_named(tmp_path):
    path = tmp_path / "reader-speed.json"
    assert load_speeds(path) == {}
    save_speed("m:a:bfloat16", ReaderSpeed(1021.64, 28.31), path)
    save_speed("m:b:bfloat16", ReaderSpeed(300.0, 14.7), path)
    a, b = speed_key("m:a:bfloat16"), speed_key("m:b:bfloat16")
    assert a.startswith("m:a:bfloat16@cpu-")  # one measurement per model and CPU kind
    assert load_speeds(path) == {a: ReaderSpeed(1021.64, 28.31), b: ReaderSpeed(300.0, 14.7)}
    path.write_text(json.dumps({"m": {"prefill_tok_s": 1}}))
    with pytest.raises(ValueError, match="reader-speed.json do not parse.*eor models speed"):
        load_speeds(path)
    path.write_text("{not json")
    with pytest.raises(ValueError, match="reader-speed.json do not parse"):
        save_speed("m", ReaderSpeed(1.0, 1.0), path)
    path.write_text(json.dumps({"m": {"prefill_tok_s": 100, "decode_tok_s": 0}}))
    with pytest.raises(ValueError, match="m not a positive speed"):
        load_speeds(path)


def test_the_service_round_overhead_is_kept_per_cpu_kind_and_a_broken_file_is_named(tmp_path):
    from serve.offline.reader_speed import load_overhead, measured_overhead, save_overhead

    path = tmp_path / "round-overhead.json"
    assert load_overhead(path) is None  # never measured here
    speed = ReaderSpeed(1000.0, 25.0)
    # 1.44 s for 1,167 computed tokens and 13 decode steps: 1.167 + 0.52 s of reading, nothing left (never below 0)
    assert measured_overhead(1.44, 1167, 13, speed) == 0.0
    assert measured_overhead(2.0, 1000, 10, speed) == pytest.approx(0.6)
    save_overhead(0.6, "bench.load_test compare: Wiki@10 over 20 never-asked questions", path)
    got = load_overhead(path)
    assert got.seconds == 0.6 and got.by.startswith("bench.load_test compare") and got.measured
    (key,) = json.loads(path.read_text())
    assert key.startswith("cpu-")  # one figure per kind of CPU, like the readers' speeds
    with pytest.raises(ValueError, match="not a non-negative number"):
        save_overhead(float("nan"), "x", path)
    path.write_text(json.dumps({key: {"round_overhead_s": -1}}))
    with pytest.raises(ValueError, match="not a non-negative number of seconds"):
        load_overhead(path)
    path.write_text(json.dumps({key: {"seconds": 1}}))
    with pytest.raises(ValueError, match="round overheads .* do not parse.*bench.load_test compare"):
        load_overhead(path)
    path.write_text("[]")
    with pytest.raises(ValueError, match="round overheads .* do not parse"):
        load_overhead(path)


def test_the_probe_measures_prefill_and_decode_apart():
    engine = FakeEngine()
    speed = measure(engine, n=4)
    assert speed.prefill_tok_s > 0 and speed.decode_tok_s > 0
    (warm,), batch, (doc,) = [c[0] for c in engine.calls[:1]], engine.calls[1][0], engine.calls[2][0]
    assert len(batch) == 3 and engine.calls[1][1].max_tokens == 1  # prefill: read, one token out
    assert doc.startswith("Generate a background document") and engine.calls[2][1].max_tokens == 200


def test_a_probe_that_cannot_time_the_decode_says_so():
    from retrievers.reader import Generation

    class Silent(FakeEngine):
        def generate(self, prompts, params):
            return [Generation("", None, ReaderTokens(10, 0)) for _ in prompts]

    with pytest.raises(RuntimeError, match="could not time the decode"):
        measure(Silent(), n=2)


@pytest.mark.slow
def test_the_real_reader_prefills_faster_than_it_decodes():
    from serve.engine.models import models_dir
    from serve.engine.vllm_engine import VLLMConfig, VLLMEngine

    if not (models_dir() / "qwen2.5-coder-0.5b" / "config.json").exists():
        pytest.fail("reader model not prepared: run ./setup.sh (eor models prepare qwen2.5-coder-0.5b)")
    engine = VLLMEngine(VLLMConfig(model="qwen2.5-coder-0.5b", enforce_eager=True)).load()
    try:
        speed = measure(engine, n=4)
    finally:
        engine.close()
    assert speed.prefill_tok_s > 5 * speed.decode_tok_s > 0  # a batch of prompts vs one token at a time


def make_fake_engine(config):
    """service.engine_factory: a stand-in engine named after the reader's model."""
    engine = FakeEngine(f"{config.reader.model}:fake")
    engine.load = lambda: engine
    engine.close = lambda: None
    return engine


def test_eor_models_speed_measures_every_configured_reader(eor_home, tmp_path, capsys):
    import yaml

    from serve.cli import main

    path = tmp_path / "eor.yaml"
    path.write_text(yaml.safe_dump({
        "pool": {"specs": ["SE@1", "PK", "SE@1~1.5B"]}, "readers": {"1.5B": {"model": "big-fake"}},
        "service": {"engine_factory": f"{__name__}:make_fake_engine"}}))
    assert main(["models", "speed", "--config", str(path), "--json"]) == 0
    got = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert set(got) == {"default", "1.5B"} and got["1.5B"]["model"] == "big-fake:fake"
    assert set(load_speeds(eor_home / "reader-speed.json")) == {speed_key("qwen2.5-coder-0.5b:fake"),
                                                                speed_key("big-fake:fake")}
    assert main(["models", "speed", "3B", "--config", str(path)]) != 0
    assert "no reader named '3B'" in capsys.readouterr().err


def test_the_fit_holds_round_one_to_the_one_retriever_service_and_records_it():
    from fitting.search import fit_adaptive
    from tests.serve.test_reader_runs import synthetic
    from voter.question_vote import MetricOptions, build_metrics

    scored = synthetic()
    specs = ["SE@1", "Wiki@10", "SE@1~1.5B", "Wiki@10~1.5B"]
    speeds0 = {"": ReaderSpeed(1000.0, 25.0), "1.5B": ReaderSpeed(300.0, 15.0)}
    with pytest.raises(ValueError, match="not a member"):
        fit_adaptive(scored, specs, build_metrics(MetricOptions.parse("em"), None), ["em"], "mean", {},
                     calibration=None, speeds=speeds0, first_reply_vs="HB@RR@10")
    speeds = {"": ReaderSpeed(1000.0, 25.0), "1.5B": ReaderSpeed(300.0, 15.0)}
    metrics = build_metrics(MetricOptions.parse("em"), None)

    def fit(**kw):
        return fit_adaptive(scored, specs, metrics, ["em"], "mean", {}, calibration=None, speeds=speeds, **kw)

    free, held = fit(), fit(first_reply_vs="Wiki@10")
    assert "first_reply_vs" not in free.model.fit
    assert held.model.fit["first_reply_vs"] == "Wiki@10"
    # one round's overhead (1 s) + Wiki@10 alone: 100 prompt tokens and 4 decoded at the 0.5B's speed
    bound = 1.0 + (100 + 4 * 1000 / 25) / 1000
    assert held.model.fit["first_reply_bound_s"] == pytest.approx(bound, abs=1e-3)
    assert held.model.fit["latency_cap_s"] == pytest.approx(3 * bound, abs=1e-3)
    assert held.chosen.first_reply_s <= bound < free.chosen.first_reply_s  # the bound changed the choice
    assert held.model.fit["first_reply_met"] is True
    first = {tuple(map(tuple, f["rounds"])): f["first_reply_s"] for f in held.model.fit["layouts"]}
    # a 1.5B member first: its 100 prompt tokens and 4 decoded at the 1.5B's speed, in 0.5B prefill tokens
    assert first[(("SE@1~1.5B",), ("Wiki@10~1.5B",))] == pytest.approx(1.0 + (100 / 300 + 4 / 15), abs=1e-3)
    # the 0.5B's SE@1 beside it answers first (its early answer), sharing the cores with the 1.5B's
    # longer read: twice its own work (260 of the unit's tokens), over the bound
    assert first[(("SE@1", "SE@1~1.5B"), ("Wiki@10~1.5B",))] == pytest.approx(1.0 + 2 * 0.26, abs=1e-3)
    assert first[(("SE@1",), ("SE@1~1.5B",), ("Wiki@10~1.5B",))] == pytest.approx(bound, abs=1e-3)  # alone
    # the quick reader first (the 1.5B's engine niced): that early answer as alone, and the file says so
    quick = fit(first_reply_vs="Wiki@10", early_first=True)
    assert quick.model.fit["early_answer_first"] is True and held.model.fit["early_answer_first"] is False
    first = {tuple(map(tuple, f["rounds"])): f["first_reply_s"] for f in quick.model.fit["layouts"]}
    assert first[(("SE@1", "SE@1~1.5B"), ("Wiki@10~1.5B",))] == pytest.approx(1.0 + 0.26, abs=1e-3)
    assert "tolerance_widened_to" not in held.model.fit  # met within the tolerance: never widened
    # a 1.5B ten times slower: no layout near the anchor keeps the cap, the target widens to its standard error
    speeds["1.5B"] = ReaderSpeed(30.0, 1.5)
    slow = fit(first_reply_vs="Wiki@10")
    anchor = max(f["cv_match"] for f in slow.model.fit["layouts"] if len(f["rounds"]) == 1)
    assert slow.model.fit["tolerance_widened_to"] == pytest.approx(
        max(0.005, (anchor * (1 - anchor) / len(scored)) ** 0.5), abs=1e-4)
