"""The deployed path's abstaining row (`--min-confidence`): one Ask per instance gives both deployed
rows; an abstention is a right refusal exactly where the suite's judge accepts one."""
from __future__ import annotations

from pathlib import Path

import pytest

from bench.robust import abstention, query_level, rare, sure
from bench.robust.client import Deployed, abstaining, is_ensemble
from bench.robust.report import write_report
from bench.robust.runner import is_single, run_suite, systems_of
from bench.robust.store import ResultStore
from tests.bench.fakes import ITEMS, FakeClient, keep_all, perturber

ROW = abstaining(0.7)


def _rare(client, **kw):
    p = perturber({"shout": "shout", "no_answer": "drop_answer", "back_translate": "generated"}, client)
    return rare.RareSuite(ITEMS, query_perturbations=("shout",), perturber=p, **kw)


def _run(suite, client, path):
    run_suite(suite, client, ResultStore(path), batch_size=4, progress=False)
    return suite.score(ResultStore(path).records())


# ---------------------------------------------------------------------------- the rule
@pytest.mark.parametrize("deployed,bar,expected", [
    ({"confidence": 0.6, "abstained": False, "min_confidence": 0.0}, 0.7, True),  # asked at 0: judged by the rule
    ({"confidence": 0.9, "abstained": False, "min_confidence": 0.0}, 0.7, False),
    ({"confidence": 0.7, "abstained": False, "min_confidence": 0.0}, 0.7, False),  # at the bar: answered
    ({"confidence": None, "abstained": False, "min_confidence": 0.0}, 0.7, True),  # unknown while a bar is set
    ({"confidence": 0.9, "abstained": True, "min_confidence": 0.7}, 0.7, True),  # the service's own flag wins
    ({"confidence": 0.6, "abstained": True, "min_confidence": 0.7}, 0.0, False),  # no bar: always answers
    ({"answer": "x", "voter": "v"}, 0.7, None),  # recorded before the service reported a confidence
])
def test_abstains_by_the_service_flag_else_by_its_rule(deployed, bar, expected):
    assert abstention.abstains(deployed, bar) is expected


def test_the_abstaining_row_is_an_ensemble_row_and_never_a_single():
    assert ROW == "deployed, abstains below 0.7" and is_ensemble(ROW) and not is_single(ROW)
    assert systems_of([{"Wiki@10": "a", ROW: "", "EoR": "a", "deployed": "a"}]) == ["deployed", ROW, "EoR", "Wiki@10"]


# ---------------------------------------------------------------------------- RARE
@pytest.mark.parametrize("setting,cb,robust", [
    ("gt", True, False), ("gt", False, False), ("back_translate", True, False),  # only a correct answer counts
    ("no_answer", True, True), ("no_answer", False, True), ("retrieval", True, True), ("retrieval", False, True),
])
def test_rare_counts_an_abstention_a_safe_refusal_where_table3_does(setting, cb, robust):
    # the withheld guess is right, but the caller saw no answer: never "correct"
    assert rare.judge("", ["Paris"], setting, cb, abstained=True) is robust
    assert rare.judge("", ["Paris"], setting, cb) is False  # an empty answer is a failure, not a refusal


def test_rare_abstaining_row_from_the_same_asks_and_every_other_row_kept(tmp_path):
    plain, withheld = FakeClient(), FakeClient()
    before = _run(_rare(plain), plain, tmp_path / "plain")
    m = _run(_rare(withheld, min_confidence=0.7), withheld, tmp_path / "abstain")
    assert withheld.ask_calls == plain.ask_calls and set(withheld.bars) == {0.7}  # no extra Ask: the bar rides on it
    assert m["systems"][:3] == ["deployed", ROW, "EoR"] and m["best_single"] == before["best_single"]
    assert {s: v for s, v in m["per_system"].items() if s != ROW} == before["per_system"]
    d, row = m["per_system"]["deployed"]["grid"], m["per_system"][ROW]["grid"]
    # the fake cascade is 0.6 sure where Wiki@10 and SE@1 disagree (answer-deleted documents, plain
    # queries' own retrieval) and abstains there at 0.7: a safe refusal; elsewhere it answers as before
    assert row["original"]["no_answer"] == row["shout"]["no_answer"] == 1.0 and d["original"]["no_answer"] == 0.5
    assert row["original"]["retrieval"] == 1.0 and d["original"]["retrieval"] == 0.5
    assert row["shout"]["retrieval"] == d["shout"]["retrieval"] == 0.0  # sure (0.9) of "wrong": answered
    assert all(row[q][s] == d[q][s] for q in row for s in ("gt", "back_translate"))
    assert m["per_system"][ROW]["overall"] > m["per_system"]["deployed"]["overall"]
    assert m["per_system"][ROW]["refusal"] == pytest.approx(12 / 32)
    a = m["abstention"]
    assert (a["system"], a["asked"], a["abstained"], a["no_confidence"]) == (ROW, 32, 12, 0)
    assert a["by"]["no_answer"]["rate"] == 1.0 and a["by"]["gt"]["rate"] == 0.0 and a["by"]["retrieval"]["abstained"] == 4
    recs = [r for r in ResultStore(tmp_path / "abstain").records() if r["variant"] == "no_answer"]
    assert all(r["deployed"]["abstained"] and r["deployed"]["answer"] == "" and r["deployed"]["guess"] for r in recs)
    assert all(r["answers"]["deployed"] == r["deployed"]["guess"] for r in recs)  # the deployed row: the voted answer
    # the regression's unit judges the row the same way
    assert rare.outcomes(ResultStore(tmp_path / "abstain").records(), 0.7)[recs[0]["id"]][ROW] is True


def test_a_bar_above_every_confidence_refuses_everywhere_and_is_right_nowhere(tmp_path):
    client = FakeClient()
    m = _run(_rare(client, min_confidence=0.95), client, tmp_path)
    row = m["per_system"][abstaining(0.95)]
    assert row["correct"] == 0.0 and row["refusal"] == 1.0
    assert row["grid"]["original"] == {"gt": 0.0, "no_answer": 1.0, "back_translate": 0.0, "retrieval": 1.0}


def test_a_resumed_run_scores_the_row_from_the_recorded_confidence(tmp_path):
    """Records asked without a bar carry P(right): the row needs no new Ask; records from before
    the service reported one have no answer in it, and the report says how many."""
    client = FakeClient()
    run_suite(_rare(client), client, ResultStore(tmp_path), batch_size=4, progress=False)
    recs = ResultStore(tmp_path).records()
    asked = FakeClient()
    m = _run(_rare(asked, min_confidence=0.7), asked, tmp_path)
    assert asked.ask_calls == 0 and m["abstention"]["abstained"] == 12
    old = [{**r, "deployed": {k: v for k, v in r["deployed"].items() if k not in ("confidence", "abstained")}}
           if r["variant"] == "gt" else r for r in recs]
    m = rare.score(old, 0.7)
    assert m["abstention"]["no_confidence"] == 8 and m["per_system"][ROW]["n"] == 24
    md = Path(write_report(m, tmp_path / "r", {}, plots=False)["markdown"]).read_text()
    assert "8 asked instances were recorded before the service reported a confidence" in md


# ---------------------------------------------------------------------------- SURE
def _sure_rec(qid, pert, kind, deployed, confidence, refree="Paris"):
    return {"id": f"{qid}/{pert}/{kind}", "suite": "sure", "qid": qid, "perturbation": pert, "variant": kind,
            "seed": 0, "gold": ["Paris"], "kept": True, "reason": "", "missing": [],
            "answers": {"deployed": deployed, "EoR": deployed, "ReFree": refree},
            "deployed": Deployed(deployed, confidence=confidence).to_dict()}


def test_sure_credits_no_refusal_an_abstention_is_y0():
    recs = [_sure_rec("q1", "original", "golden", "Paris", 0.9), _sure_rec("q1", "format_json", "golden", "Paris", 0.4),
            _sure_rec("q1", "original", "noise", "Rome", 0.3), _sure_rec("q1", "format_json", "noise", "no such info", 0.3),
            _sure_rec("q2", "original", "noise", "Rome", 0.3, refree="Lyon"),
            _sure_rec("q2", "format_json", "noise", "Lyon", 0.8, refree="Lyon")]
    m = sure.score(recs, ["format_json"], min_confidence=0.5)
    ps = m["per_system"]
    row, d = ps[abstaining(0.5)]["format_json"], ps["deployed"]["format_json"]
    assert d["K-G"]["RR"] == 1.0 and row["K-G"]["LR"] == 1.0  # right, then withheld: lost, as SURE scores NO-RES
    assert d["K-N"]["RR"] == row["K-N"]["RR"] == 1.0  # wrong then refused, withheld twice: both Y = 0, no credit
    assert d["U-N"] == row["U-N"]  # a wrong answer withheld scores as the wrong answer given: Y = 0
    assert ps["EoR"] == sure.score(recs, ["format_json"])["per_system"]["EoR"]
    assert m["abstention"]["by"]["K-N"] == {"asked": 2, "abstained": 2, "rate": 1.0}
    assert m["abstention"]["by"]["U-N"]["abstained"] == 1


def test_sure_end_to_end_abstaining_row(tmp_path):
    client = FakeClient()
    p = perturber({"format_html": "html"}, client)
    suite = sure.SureSuite(ITEMS, types=("format_html",), perturber=p, preserve=keep_all, min_confidence=0.7)
    m = _run(suite, client, tmp_path)
    assert m["systems"][:3] == ["deployed", ROW, "EoR"] and m["best_single"] not in ("deployed", ROW, "EoR")
    assert m["mean_rr"][ROW] is not None and m["abstention"]["asked"] == 16
    md = Path(write_report(m, tmp_path / "r", {}, plots=False)["markdown"]).read_text()
    assert f"## {ROW}: LR / RR / WR per subset" in md and "an abstention is Y = 0" in md


# ---------------------------------------------------------------------------- query level
def _q_rec(pert, variant, rag, rag_conf, oracle, oracle_conf=None):
    rec = {"id": f"q1/{pert}/{variant}", "suite": "query", "qid": "q1", "perturbation": pert, "variant": str(variant),
           "seed": 0, "kept": True, "gold": ["Paris"], "gold_pids": ["g"], "hits": {},
           "question": f"q {pert} {variant}",
           "rag": {"deployed": rag, "EoR": rag, "ReFree": "Lyon"}, "rag_missing": [],
           "oracle": {"deployed": oracle, "EoR": oracle, "ReFree": "Lyon"}, "oracle_missing": [],
           "deployed": Deployed(rag, confidence=rag_conf).to_dict()}
    if oracle_conf is not None:
        rec["oracle_deployed"] = Deployed(oracle, confidence=oracle_conf).to_dict()
    return rec


def test_query_level_match_credits_no_abstention():
    recs = [_q_rec("original", 0, "Paris", 0.9, "Paris", 0.9), _q_rec("formal", 0, "Paris", 0.4, "Paris", 0.9),
            _q_rec("typo10", 0, "Paris", 0.4, "Paris")]  # recorded before the oracle's reply was kept
    m = query_level.score(recs, 0.5)
    bp = m["by_perturbation"]
    assert bp["formal"]["rag"]["deployed"] == 1.0 and bp["formal"]["rag"][abstaining(0.5)] == 0.0
    assert bp["formal"]["oracle"][abstaining(0.5)] == 1.0 and bp["typo10"]["oracle"][abstaining(0.5)] is None
    assert m["mean_rag_perturbed"][abstaining(0.5)] == 0.0 and m["abstention"]["abstained"] == 2
    assert query_level.outcomes(recs, 0.5)["q1/formal/0"] == {"deployed": True, "EoR": True, "ReFree": False,
                                                              abstaining(0.5): False}


def test_query_level_records_the_oracle_asks_deployed_reply(tmp_path):
    client = FakeClient()
    suite = query_level.QueryLevelSuite(ITEMS, perturbations=("shout",), variants=1, min_confidence=0.7,
                                        perturber=perturber({"shout": "shout"}, client))
    m = _run(suite, client, tmp_path)
    recs = ResultStore(tmp_path).records()
    assert all(r["oracle_deployed"]["min_confidence"] == 0.7 for r in recs if r["kept"])
    assert m["systems"][:3] == ["deployed", ROW, "EoR"] and m["mean_rag_perturbed"][ROW] is not None


# ---------------------------------------------------------------------------- on the wire
def test_the_client_sends_the_bar_to_the_deployed_ask_and_zero_to_the_named_one():
    from bench.robust.client import BenchClient
    from tests.bench.grpc_fake import FakeServer

    pool = ("Wiki@10", "SE@1", "PK", "ReFree")
    questions = ["who wrote hamlet", "who painted the mona lisa"]
    docs = [list(ITEMS[0].gold), [ITEMS[2].noise]]  # the answer, and none: the fake is 0.9 and 0.6 sure
    fake = FakeServer()
    with fake as address:
        client = BenchClient(address)
        try:
            sure_one, unsure = client.ask(questions, documents=docs, retrievers=pool, min_confidence=0.7)
            plain = client.ask(questions[1:], documents=docs[1:], retrievers=pool)[0]
        finally:
            client.close()
    assert fake.servicer.bars == [0.7, 0.0, 0.0, 0.0]  # a service default never moves the rows
    d = unsure.deployed
    assert (d.abstained, d.answer, d.confidence, d.min_confidence) == (True, "", 0.6, 0.7)
    assert d.guess == d.voted == plain.deployed.answer and unsure.by_system()["deployed"] == d.guess
    assert not plain.deployed.abstained and plain.deployed.confidence == 0.6
    assert not sure_one.deployed.abstained and sure_one.deployed.answer == "Shakespeare"
    assert unsure.answer == plain.answer  # EoR's row is the same
