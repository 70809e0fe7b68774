"""Each suite end to end against the fake service, with simple perturbations."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.robust import query_level, rare, sure
from bench.robust.report import write_report
from bench.robust.runner import run_suite
from bench.robust.store import ResultStore
from tests.bench.fakes import ITEMS, FakeClient, keep_all, perturber


def _sure(client, **kw):
    p = perturber({"logic_reverse": "reverse", "format_html": "html", "source_llm": "generated"}, client)
    return sure.SureSuite(ITEMS, seed=0, types=("logic_reverse", "format_html", "source_llm"),
                          perturber=p, **{"preserve": keep_all, **kw})


def test_sure_end_to_end(tmp_path):
    client = FakeClient()
    suite = _sure(client)
    stats = run_suite(suite, client, ResultStore(tmp_path), batch_size=3, progress=False)
    assert stats.planned == 4 * 2 * 4 and stats.ran == stats.planned  # 4 questions × 2 docs × (orig + 3)
    m = suite.score(ResultStore(tmp_path).records())
    assert m["known"] == 2 and m["unknown"] == 2
    # SE@1 is confused by HTML: right on every golden doc before, wrong after -> LR on golden
    html = m["per_system"]["SE@1"]["format_html"]
    assert html["K-G"]["LR"] == 1.0 and html["U-G"]["LR"] == 1.0 and html["K-N"]["RR"] == 1.0
    assert m["per_system"]["Wiki@10"]["format_html"]["Total"]["RR"] == 1.0
    assert all(m["per_system"]["SE@1"][t]["Total"]["RR"] == 1.0 for t in ("logic_reverse", "source_llm"))
    assert m["best_single"] == "Wiki@10"
    assert m["category_rr"]["SE@1"]["format"] == 0.5  # golden pairs lost, noise pairs stay wrong
    recs = ResultStore(tmp_path).records()
    # Generate time of the "LLM" perturbation is charged to its instances, plus the asks' reader time
    gen = [r for r in recs if r["perturbation"] == "source_llm"]
    assert all(r["generate_s"] > 0 and r["reader_s"] == pytest.approx(0.5 + r["generate_s"]) for r in gen)
    assert all(r["reader_s"] == 0.5 for r in recs if r["perturbation"] == "original")
    paths = write_report(m, tmp_path / "report", {"seed": 0})
    md = Path(paths["markdown"]).read_text()
    assert "format_html" in md and "K-G LR" in md
    # the cost table: every instance of the suite, per perturbation and in total
    cost = m["cost"]
    assert cost["total"]["instances"] == 32 and cost["total"]["reader_s"] == pytest.approx(sum(r["reader_s"] for r in recs))
    assert cost["per_perturbation"]["original"]["reader_s_per_asked"] == pytest.approx(0.5)
    assert "## Cost: reader seconds per instance" in md and "| **total** | 32 | 32 |" in md
    assert Path(paths["radar"]).stat().st_size > 1000 and Path(paths["bars"]).exists()
    assert json.loads(Path(paths["json"]).read_text())["metrics"]["suite"] == "sure"


def test_sure_causal_feature_filter(tmp_path):
    client = FakeClient()
    p = perturber({"drop": "drop_answer", "llm": "generated"}, client)

    def nli_rejects_q3(originals, perturbed, contexts, generator):
        return [(c["question"] != "who painted the mona lisa", "not equivalent") for c in contexts]

    suite = sure.SureSuite(ITEMS, types=("drop", "llm"), perturber=p, preserve=nli_rejects_q3, nli="all")
    run_suite(suite, client, ResultStore(tmp_path), batch_size=8, progress=False)
    recs = {(r["qid"], r["perturbation"], r["variant"]): r for r in ResultStore(tmp_path).records()}
    for q in ("q1", "q2", "q3", "q4"):
        assert recs[(q, "drop", "golden")]["reason"] == "golden document lost the answer"  # golden docs must keep it
        assert recs[(q, "drop", "noise")]["reason"] == "not applicable (unchanged)"  # nothing to delete
    assert recs[("q3", "llm", "golden")]["reason"] == recs[("q3", "llm", "noise")]["reason"] == "not equivalent"
    assert recs[("q1", "llm", "noise")]["kept"] and recs[("q1", "llm", "golden")]["kept"]
    asked_docs = [d for _, d in client.asked if d is not None]
    assert len(asked_docs) == 8 + 6  # the originals, and the kept rewrites
    m = suite.score(ResultStore(tmp_path).records())
    assert m["preservation"]["drop"]["dropped"] == 8 and m["preservation"]["llm"] == {
        "kept": 6, "dropped": 2, "reasons": {"not equivalent": 2}}


def test_sure_entailment_judges_the_llm_rewrites_by_default(tmp_path):
    client = FakeClient()
    judged = []

    def spy(originals, perturbed, contexts, generator):
        judged.extend(perturbed)
        return [(True, "") for _ in originals]

    suite = _sure(client, preserve=spy)
    run_suite(suite, client, ResultStore(tmp_path), batch_size=8, progress=False)
    assert judged and all(t.endswith("(rewritten)") for t in judged)  # source_llm only
    with pytest.raises(ValueError, match="nli must be"):
        _sure(client, nli="some")


def test_sure_reader_judge_is_bidirectional_nli():
    class Judge:
        def __init__(self, outs):
            self.outs, self.prompts = outs, []

        def generate(self, prompts, max_tokens=128, temperature=0.0):
            self.prompts += prompts
            return self.outs

    j = Judge(["Entailment.", "entailment", "entailment", "Neutral"])
    res = sure.JUDGES["reader"](["a", "b"], ["a2", "b2"], [{}, {}], j)
    assert res[0] == (True, "") and res[1][0] is False and "not equivalent" in res[1][1]
    assert "Premise: a\nHypothesis: a2" in j.prompts[0] and "Premise: a2\nHypothesis: a" in j.prompts[2]


def test_rare_end_to_end(tmp_path):
    client = FakeClient()
    p = perturber({"shout": "shout", "no_answer": "drop_answer", "back_translate": "generated"}, client)
    suite = rare.RareSuite(ITEMS, query_perturbations=("shout",), perturber=p)
    stats = run_suite(suite, client, ResultStore(tmp_path), batch_size=4, progress=False)
    assert stats.ran == 4 * 2 * 4
    m = suite.score(ResultStore(tmp_path).records())
    w = m["per_system"]["Wiki@10"]
    # gt and back-translated docs answered; no-answer docs give "unknown" (a refusal); its own
    # retrieval answers plain queries
    assert w["document"] == 1.0 and w["retrieval"] == 1.0 and w["query"] == 1.0
    assert w["grid"]["shout"]["retrieval"] == 0.0  # shouted queries retrieve nothing: "wrong"
    se = m["per_system"]["SE@1"]
    # "Rome" on a doc without the answer is neither right nor a refusal; real retrieval wrong
    assert se["retrieval"] == 0.0 and se["document"] == 0.5
    assert m["closed_book_correct"] == 2
    paths = write_report(m, tmp_path, {})
    assert "Robustness scores" in Path(paths["markdown"]).read_text() and Path(paths["radar"]).exists()


def test_query_level_end_to_end(tmp_path):
    client = FakeClient()
    p = perturber({"shout": "shout", "suffix": "suffix"}, client)
    suite = query_level.QueryLevelSuite(ITEMS, perturbations=("shout", "suffix"), variants=3, perturber=p)
    stats = run_suite(suite, client, ResultStore(tmp_path), batch_size=4, progress=False)
    assert stats.ran == 4 * (1 + 2 * 3)
    m = suite.score(ResultStore(tmp_path).records())
    bp = m["by_perturbation"]
    assert bp["original"]["recall"]["Wiki"]["@1"] == 1.0 and bp["shout"]["recall"]["Wiki"]["@5"] == 0.0
    assert bp["original"]["recall"]["SE"]["@1"] == 0.0 and bp["original"]["recall"]["SE"]["@5"] == 1.0
    assert bp["shout"]["rag"]["Wiki@10"] == 0.0 and bp["original"]["rag"]["Wiki@10"] == 1.0
    assert bp["shout"]["oracle"]["Wiki@10"] == 1.0  # gold documents: typos don't matter
    assert bp["original"]["closed_book"] == 0.5 and bp["shout"]["closed_book"] == 0.0
    # recall drops exactly when the RAG answer does: r = 1 cannot be computed (constant deltas) ...
    assert m["correlations"]["shout"]["Wiki@10"]["RET"] is None
    # ... and the suffix variants differ by seed
    sfx = [r["question"] for r in ResultStore(tmp_path).records() if r["perturbation"] == "suffix" and r["qid"] == "q1"]
    assert len(sfx) == 3
    paths = write_report(m, tmp_path, {})
    assert "Recall@5" in Path(paths["markdown"]).read_text()


def test_unchanged_queries_are_no_samples(tmp_path):
    client = FakeClient()
    p = perturber({"some": "suffix_some", "shout": "shout", "no_answer": "drop_answer"}, client)
    q = query_level.QueryLevelSuite(ITEMS, perturbations=("some",), variants=2, perturber=p)
    stats = run_suite(q, client, ResultStore(tmp_path / "q"), progress=False)
    assert stats.ran == 4 * 3 and len(client.asked) == 2 * (4 + 3 * 2)  # RAG + oracle, spider never perturbed
    m = q.score(ResultStore(tmp_path / "q").records())
    assert m["unchanged"] == {"some": 2} and m["by_perturbation"]["some"]["n"] == 6
    r = rare.RareSuite(ITEMS, query_perturbations=("some",), doc_settings=("gt", "no_answer"), perturber=p)
    run_suite(r, client, ResultStore(tmp_path / "r"), progress=False)
    recs = {(x["qid"], x["perturbation"], x["variant"]): x for x in ResultStore(tmp_path / "r").records()}
    assert recs[("q4", "some", "gt")]["reason"] == "query unchanged (not applicable)"
    assert recs[("q1", "some", "no_answer")]["kept"]
    assert rare.score(list(recs.values()))["dropped"] == {"gt": {"query unchanged (not applicable)": 1},
                                                          "no_answer": {"query unchanged (not applicable)": 1}}


def test_suites_pass_a_retriever_subset_plus_refree(tmp_path):
    client = FakeClient()
    p = perturber({"shout": "shout"}, client)
    suite = query_level.QueryLevelSuite(ITEMS[:1], perturbations=("shout",), variants=1, perturber=p,
                                        retrievers=("Wiki@10",))
    run_suite(suite, client, ResultStore(tmp_path), progress=False)
    rec = ResultStore(tmp_path).records()[0]
    assert set(rec["rag"]) == {"deployed", "EoR", "Wiki@10", "ReFree"}  # production's path asked beside them


def test_suites_with_the_registered_rule_based_perturbations(tmp_path):
    """The real registry's rule-based perturbations through the suites (context keys, flags)."""
    from bench.robust.perturb import names
    from bench.robust.runner import Perturber

    wanted = {"format_json", "logic_reverse", "meta_source_wiki", "answer_sentence_delete"}
    if not wanted <= set(names()):
        pytest.skip("the document perturbations are not registered")
    client = FakeClient()
    s = sure.SureSuite(ITEMS, types=("format_json", "logic_reverse", "meta_source_wiki"), preserve=keep_all)
    run_suite(s, client, ResultStore(tmp_path / "s"), progress=False)
    recs = ResultStore(tmp_path / "s").records()
    fj = [r for r in recs if r["perturbation"] == "format_json" and r["variant"] == "golden"]
    assert all(r["kept"] and json.loads(r["doc"])["title"] for r in fj)
    assert s.score(recs)["per_system"]["Wiki@10"]["format_json"]["Total"]["RR"] == 1.0
    r = rare.RareSuite(ITEMS, query_perturbations=(), doc_settings=("gt", "no_answer"),
                       perturber=Perturber({"no_answer": ("answer_sentence_delete", {})}, generator=client))
    run_suite(r, client, ResultStore(tmp_path / "r"), progress=False)
    na = [x for x in ResultStore(tmp_path / "r").records() if x["variant"] == "no_answer"]
    assert len(na) == 4 and all(x["kept"] and "Shakespeare" not in " ".join(x["docs"]) for x in na)


def test_a_variant_repeating_an_earlier_one_is_no_new_sample(tmp_path):
    """An LLM that wrote one rewrite gives every seed that line: variants 1.. repeat variant 0."""
    client = FakeClient()
    p = perturber({"shout": "shout"}, client)  # deterministic: every seed gives the same query
    suite = query_level.QueryLevelSuite(ITEMS, perturbations=("shout",), variants=3, perturber=p)
    stats = run_suite(suite, client, ResultStore(tmp_path), progress=False)
    assert stats.ran == 4 * (1 + 3)
    assert len(client.asked) == 2 * (4 + 4)  # RAG + oracle for the originals and variant 0 only
    recs = {(r["qid"], r["variant"]): r for r in ResultStore(tmp_path).records() if r["perturbation"] == "shout"}
    assert recs[("q1", "0")]["kept"] and not recs[("q1", "2")]["kept"]
    assert recs[("q1", "2")]["reason"] == "same query as variant 0"
    m = suite.score(ResultStore(tmp_path).records())
    assert m["by_perturbation"]["shout"]["n"] == 4 and m["repeated"] == {"shout": 8} and m["unchanged"] == {}


def test_scoring_drops_repeats_recorded_as_kept_by_older_runs():
    base = {"suite": "query", "qid": "q1", "perturbation": "formal", "kept": True, "gold": ["x"], "gold_pids": ["p"],
            "hits": {}, "rag": {"EoR": "x"}, "rag_missing": [], "oracle": {"EoR": "x"}, "oracle_missing": []}
    recs = [{**base, "id": "o", "perturbation": "original", "variant": "0", "question": "who"},
            {**base, "id": "a", "variant": "0", "question": "Who, formally?"},
            {**base, "id": "b", "variant": "1", "question": "Who, formally? "},
            {**base, "id": "c", "variant": "2", "question": "Who, most formally?"}]
    assert query_level.repeated_variants(recs) == {"b"}
    m = query_level.score(recs)
    assert m["by_perturbation"]["formal"]["n"] == 2 and m["repeated"] == {"formal": 1}


@pytest.mark.parametrize("name", ["sure", "rare", "query"])
def test_every_suite_scores_the_deployed_path_first_with_its_cost(tmp_path, name):
    """The deployed row (the question asked as production asks it) heads each suite's systems,
    scored like any other, is never the "best single", and its cost is reported."""
    client = FakeClient()
    if name == "sure":
        suite = _sure(client)
    elif name == "rare":
        suite = rare.RareSuite(ITEMS, query_perturbations=("shout",),
                               perturber=perturber({"shout": "shout", "no_answer": "drop_answer",
                                                    "back_translate": "generated"}, client))
    else:
        suite = query_level.QueryLevelSuite(ITEMS, perturbations=("shout",), variants=1,
                                            perturber=perturber({"shout": "shout"}, client))
    run_suite(suite, client, ResultStore(tmp_path), batch_size=4, progress=False)
    m = suite.score(ResultStore(tmp_path).records())
    assert m["systems"][:2] == ["deployed", "EoR"] and m["best_single"] not in ("deployed", "EoR")
    d = m["cost"]["deployed"]
    assert d["voter"] == "fake cascade" and 1 <= d["rounds"] <= 2 and 300 <= d["tokens"] <= 900
    assert 0 <= d["first_round_share"] <= 1
    md = Path(write_report(m, tmp_path / "r", {}, plots=False)["markdown"]).read_text()
    assert md.index("**deployed**") < md.index("**EoR**") and "Cost of the deployed path" in md


def test_ask_asks_the_deployed_path_unless_told_not_to():
    """Production's answer comes from its own Ask (no retrievers named), beside the named ones'."""
    client = FakeClient()
    out = client.ask(["who wrote hamlet"], retrievers=("Wiki@10", "SE@1", "PK", "ReFree"))[0]
    assert out.deployed is not None and out.by_system()["deployed"] == out.deployed.answer
    assert client.ask(["who wrote hamlet"], retrievers=("Wiki@10",), deployed=False)[0].deployed is None
