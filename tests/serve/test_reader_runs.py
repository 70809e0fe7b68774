"""A pool of (retriever, reader) pairs run as one pool per reader (serve/offline/reader_runs.py):
the joined results are those of the joined pool, each part is the run log `eor run --model`
grows, a finished question is never run again; the fit weighs each reader's tokens by what
they cost (fitting/pool_run.py) and compares escalation layouts (fitting/layout_choice.py)."""
from __future__ import annotations

from dataclasses import replace

import pytest

from retrievers.pool import PoolConfig, RetrieverPool
from retrievers.reader import CachedReader
from retrievers.types import QuestionResult, ReaderTokens
from serve.config import config_from_dict
from serve.offline.dataset import Question
from retrievers.spec import by_reader
from serve.offline.reader_runs import ReaderRuns, renamed
from serve.offline.runlog import run_log_for
from tests.retrievers.fakes import SE_PAGES, WIKI_PASSAGES, FakeEngine, FakeSource

BASE = ["Wiki@10", "SE@1", "PK", "SE@1@CP", "ReFree"]
JOINED = BASE + [f"{s}~1.5B" for s in BASE]


class NoEncoder:
    """No member here reranks: the pool needs an encoder only to load it."""

    def load(self):
        return self


def make_pool(specs=JOINED):
    small, big = FakeEngine("small"), FakeEngine("big")
    pool = RetrieverPool(PoolConfig(specs=tuple(specs)),
                         {"SE": FakeSource("SE", SE_PAGES), "Wiki": FakeSource("Wiki", WIKI_PASSAGES)},
                         NoEncoder(), CachedReader(small), readers={"1.5B": CachedReader(big)})
    return pool, small, big


QUESTIONS = [Question(f"q{i}", "nq", f"who painted picture number {i}", ("x",)) for i in range(3)]


def test_the_joined_runs_are_the_joined_pools_results(eor_home):
    direct, _, _ = make_pool()
    want = direct.run([q.question for q in QUESTIONS])
    pool, small, big = make_pool()
    got = [r for _, r in ReaderRuns(config_from_dict({}), pool, "questions.jsonl").run(QUESTIONS)]
    assert small.calls and big.calls
    for w, g in zip(want, got):
        assert [c.retriever for c in g.candidates] == JOINED
        assert [(c.answer, c.shared, c.tokens.prompt, c.tokens.generated) for c in g.candidates] == \
            [(c.answer, c.shared, c.tokens.prompt, c.tokens.generated) for c in w.candidates]
        assert g.shared_tokens.keys() == w.shared_tokens.keys() == {"PK", "PK~1.5B"}
        assert {c.cached_from for c in g.candidates if c.retriever.endswith("~1.5B")} <= \
            {None, *[s for s in JOINED if s.endswith("~1.5B")]}  # a prefix is owed to its own reader only


def test_each_reader_has_the_run_log_eor_run_model_grows_and_nothing_runs_twice(eor_home):
    config = config_from_dict({})
    pool, small, big = make_pool()
    runs = ReaderRuns(config, pool, "questions.jsonl")
    plain_big = RetrieverPool(replace(pool.config, specs=tuple(BASE)), pool.sources, pool.reranker, pool.readers["1.5B"])
    assert runs.logs["1.5B"].path == run_log_for(config, plain_big, "questions.jsonl").path
    assert runs.logs[""].path != runs.logs["1.5B"].path
    runs.run(QUESTIONS[:2])
    calls = (len(small.calls), len(big.calls))
    again = ReaderRuns(config, pool, "questions.jsonl")
    assert set(again.load()) == {"q0", "q1"} and len(again.run(QUESTIONS[:2])) == 2
    assert (len(small.calls), len(big.calls)) == calls  # both logs had them: no engine call
    assert set(again.seconds()) == {"", "1.5B"} and set(again.seconds()["1.5B"]) == {"q0", "q1"}


def test_a_pool_of_one_reader_is_its_own_only_part(eor_home):
    pool, _, _ = make_pool(BASE)
    runs = ReaderRuns(config_from_dict({}), pool, "questions.jsonl")
    assert list(runs.parts) == [""] and runs.parts[""] is pool
    assert runs.log.path == run_log_for(config_from_dict({}), pool, "questions.jsonl").path


def test_members_by_reader_and_renaming():
    assert by_reader(["PK~1.5B", "SE@1", "PK"]) == {"": ["SE@1", "PK"], "1.5B": ["PK~1.5B"]}
    pool, _, _ = make_pool(BASE)
    (r,) = pool.run([QUESTIONS[0].question])
    big = renamed(r, "1.5B")
    assert [c.retriever for c in big.candidates] == [f"{s}~1.5B" for s in BASE]
    assert big.shared_tokens.keys() == {"PK~1.5B"} and big.candidates[2].shared == ("PK~1.5B",)
    assert renamed(r, "") is r


def test_the_fit_weighs_each_readers_tokens_by_its_measured_cost():
    from fitting.pricing import measured_latency, weighted_tokens

    pool, _, _ = make_pool()
    (r,) = pool.run([QUESTIONS[0].question])
    small_t = r.reader_tokens({s for s in JOINED if "~" not in s}).computed
    big_t = r.reader_tokens({s for s in JOINED if "~" in s}).computed
    assert weighted_tokens(r, JOINED, {"": 1.0, "1.5B": 2.5}) == pytest.approx(small_t + 2.5 * big_t)
    assert weighted_tokens(r, JOINED) == pytest.approx(small_t + big_t)
    q = QUESTIONS[0]
    latency, cost = measured_latency([(q, r)], {"": {q.qid: 1.0}, "1.5B": {q.qid: 5.0}}, 1.0)
    assert latency.tokens_per_s == pytest.approx(small_t)  # the default reader's tokens per second
    assert cost[""] == pytest.approx(1.0) and cost["1.5B"] == pytest.approx(small_t / (big_t / 5.0))


def test_escalation_layouts_and_a_reader_feature():
    from fitting.layout_choice import candidate_layouts
    from voter.selector import feature_names

    pool = ["SE@1", "Wiki@10", "PK", "SE@1~1.5B", "Wiki@10~1.5B", "PK~1.5B"]
    acc = {"SE@1": 0.4, "Wiki@10": 0.3, "PK": 0.1, "SE@1~1.5B": 0.5, "Wiki@10~1.5B": 0.45, "PK~1.5B": 0.2}
    cost = {s: 100.0 * (2.4 if "~" in s else 1.0) for s in pool}
    layouts = candidate_layouts(pool, acc, cost)
    assert (("SE@1",), ("SE@1~1.5B",), ("Wiki@10", "PK", "Wiki@10~1.5B", "PK~1.5B")) in layouts
    assert (("SE@1", "Wiki@10"), ("SE@1~1.5B", "Wiki@10~1.5B"), ("PK", "PK~1.5B")) in layouts
    strong = ("SE@1~1.5B", "Wiki@10~1.5B", "PK~1.5B")
    assert (strong,) in layouts and (("SE@1~1.5B",), ("Wiki@10~1.5B", "PK~1.5B")) in layouts  # the 1.5B alone
    assert (("SE@1",), strong) in layouts  # escalate to every 1.5B member, none of the small reader's rest
    assert (("SE@1",), ("SE@1~1.5B",), ("Wiki@10~1.5B", "PK~1.5B")) in layouts
    # a quick first answer, then a 1.5B layout with a middle round: SE@1 | SE@1~1.5B | Wiki@10~1.5B | PK~1.5B
    assert (("SE@1",), ("SE@1~1.5B",), ("Wiki@10~1.5B",), ("PK~1.5B",)) in layouts
    # one round is the whole pool or one reader's own vote, never a subset (an anchor of its own)
    assert [lay for lay in layouts if len(lay) == 1] == [(tuple(pool),), (("SE@1", "Wiki@10", "PK"),), (strong,)]
    lone = candidate_layouts(["SE@1", "Wiki@10", "SE@1~1.5B"], acc, cost)  # one 1.5B member: never alone
    assert all(lay[0] != ("SE@1~1.5B",) or len(lay) > 1 for lay in lone) and (("SE@1~1.5B",),) not in lone
    assert feature_names(pool)[-1] == "reader:1.5B" and not any(f.startswith("reader:") for f in feature_names(pool[:3]))
    one = candidate_layouts(pool[:3], acc, cost)  # one reader: the layouts as before, no escalation
    assert all(len({"~" in s for r in lay for s in r}) == 1 for lay in one)


def synthetic(n=40):
    """n questions over a small pool of pairs: the strong reader right on 3 in 4, the default on 1 in 2."""
    from retrievers.types import Candidate, Context
    from serve.offline.dataset import Question

    out = []
    for i in range(n):
        q = Question(f"q{i}", "nq" if i % 2 else "hotpotqa", f"question {i}", (f"gold{i}",))
        cands = []
        for s in ["SE@1", "Wiki@10", "SE@1~1.5B", "Wiki@10~1.5B"]:
            strong = "~" in s
            right = (i % 4 != 0) if strong else (i % 2 == 0)
            answer = f"gold{i}" if right else f"wrong {s} {i}"
            cands.append(Candidate(s, answer, Context(s), tokens=ReaderTokens(100, 4), logprobs=(-0.1 if right else -1.5,)))
        out.append((q, QuestionResult(q.question, tuple(cands))))
    return out


def test_the_frontier_compares_each_reader_alone_and_the_cascade_by_cv():
    from serve.config import STRONG_SPECS
    from serve.offline.reader_frontier import compare, format_frontier, systems
    from voter.question_vote import MetricOptions, build_metrics
    from retrievers.spec import PAPER_POOL

    assert "Wiki@10@CP" not in STRONG_SPECS and "ReFree" in STRONG_SPECS
    assert list(config_from_dict(__import__("yaml").safe_load(open("deploy/eor-cascade-fit.yaml"))).pool.specs) \
        == systems(PAPER_POOL, STRONG_SPECS, "1.5B")["cascade over both"]
    scored = synthetic()
    seconds = {"": {q.qid: 0.5 for q, _ in scored}, "1.5B": {q.qid: 1.25 for q, _ in scored}}
    pools = systems(["SE@1", "Wiki@10"], ["SE@1", "Wiki@10"], "1.5B")
    doc = compare(scored, seconds, pools, build_metrics(MetricOptions.parse("em"), None), ["em"], "mean",
                  calibration=None)
    got = doc["systems"]
    assert list(got) == ["default reader only", "1.5B only", "cascade over both"]
    assert got["cascade over both"]["reader_cost_per_token"]["1.5B"] == pytest.approx(2.5)
    assert got["1.5B only"]["chosen"]["cv_match"] > got["default reader only"]["chosen"]["cv_match"]
    assert got["cascade over both"]["best_single"].endswith("~1.5B")
    assert "cascade over both" in format_frontier(doc)


def test_the_frontier_a_voter_keeps_groups_its_layouts_by_reader_without_any_run_log(tmp_path, capsys):
    from serve.offline.reader_frontier import main, stored_frontier

    def layout(rounds, match, latency, first, chosen=False):
        return {"rounds": rounds, "cv_match": match, "latency_s": latency, "first_reply_s": first, "chosen": chosen}

    record = {"latency_cap_s": 10.0, "first_reply_bound_s": 3.0, "layouts": [
        layout([["SE@1"]], 0.45, 3.0, 2.0), layout([["SE@1"], ["Wiki@10"]], 0.44, 4.0, 2.0),  # slower, less: off
        layout([["SE@1"], ["Wiki@10", "PK"]], 0.49, 5.0, 2.0),
        layout([["SE@1~1.5B"], ["SE@4~1.5B"]], 0.65, 9.0, 2.5, chosen=True),
        layout([["SE@1~1.5B", "SE@4~1.5B"]], 0.67, 14.0, 14.0),  # more accurate, past the cap
        layout([["SE@1"], ["SE@1~1.5B"]], 0.53, 7.0, 2.0), layout([["SE@1", "SE@1~1.5B"]], 0.60, 8.0, 8.0)]}
    doc = stored_frontier(record)
    small, strong, both = (doc["systems"][k] for k in ("default reader only", "1.5B only", "cascade over both"))
    assert [x["cv_match"] for x in small["pareto"]] == [0.45, 0.49] and small["chosen"]["cv_match"] == 0.49
    assert strong["shipped"] and strong["chosen"]["cv_match"] == 0.65  # the voter's own choice in its group
    assert [x["cv_match"] for x in strong["pareto"]] == [0.65, 0.67]
    assert both["chosen"]["cv_match"] == 0.53  # 0.60's first reply is past the bound
    with pytest.raises(ValueError, match="no fit record"):
        stored_frontier({})
    # the shipped voter's own record, through the CLI (and a file that is no voter: one line, exit 2)
    assert main(["--voter", "voter/data/voter.json", "--plot", str(tmp_path / "f.png")]) == 0
    out = capsys.readouterr().out
    assert "1.5B only" in out and "(shipped)" in out and (tmp_path / "f.png").stat().st_size > 0
    (tmp_path / "bad.json").write_text("{}")
    assert main(["--voter", str(tmp_path / "bad.json")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("eor: ") and "Traceback" not in err and err.count("\n") == 1
