"""The suites' metric definitions, pinned on hand-made cases."""
from __future__ import annotations

import pytest

from bench.robust import query_level, rare, sure
from bench.robust.client import Hit
from bench.robust.qa import exact_match, is_refusal, match, normalize_answer
from bench.robust.runner import run_cost


# ---------------------------------------------------------------------------- answers
def test_normalize_and_exact_match():
    assert normalize_answer("The  Eiffel Tower.") == "eiffel tower"
    assert exact_match("the eiffel tower!", ["Eiffel Tower"])
    assert not exact_match("eiffel tower in paris", ["Eiffel Tower"])
    assert not exact_match("", [""])


def test_match_is_containment_after_normalisation():
    assert match("It was William Shakespeare.", ["Shakespeare"])
    assert match("in 1990", ["1"])  # BERGEN's Match: a plain substring
    assert not match("in 1990", ["1"], word_boundary=True)
    assert not match("Marlowe", ["Shakespeare"])
    assert not match("anything", [""])


@pytest.mark.parametrize("text", ["no such info", "No such information.", "Unknown", "I don't know",
                                  "The passage does not mention the owner.", "not mentioned", "N/A",
                                  "I cannot answer that", "There is no information about it", "None",
                                  "It cannot be determined from the passage"])
def test_refusals(text):
    assert is_refusal(text)


@pytest.mark.parametrize("text", ["", "Paris", "Donald Trump", "none other than Cyrus the Great", "8"])
def test_not_refusals(text):
    assert not is_refusal(text)


# ---------------------------------------------------------------------------- SURE
def test_lr_rr_wr():
    # (original correct, perturbed correct): C = 1 lose, 0 same, -1 win
    pairs = [(True, False), (True, True), (False, False), (False, True), (False, False)]
    assert sure.lr_rr_wr(pairs) == {"LR": 0.2, "RR": 0.6, "WR": 0.2, "n": 5}
    assert sure.lr_rr_wr([]) == {"LR": None, "RR": None, "WR": None, "n": 0}


def _rec(qid, pert, kind, answers, kept=True, gold=("Paris",)):
    return {"id": f"{qid}/{pert}/{kind}", "suite": "sure", "qid": qid, "perturbation": pert, "variant": kind,
            "seed": 0, "gold": list(gold), "kept": kept, "reason": "" if kept else "lost the answer",
            "answers": answers, "missing": []}


def test_sure_score_subsets_known_by_closed_book():
    recs = [
        # q1 known (ReFree right); golden: EoR right -> wrong after (lose); noise: stays wrong
        _rec("q1", "original", "golden", {"EoR": "Paris", "Wiki@10": "Paris", "ReFree": "Paris"}),
        _rec("q1", "format_json", "golden", {"EoR": "Rome", "Wiki@10": "Paris", "ReFree": "Paris"}),
        _rec("q1", "original", "noise", {"EoR": "Rome", "Wiki@10": "Rome", "ReFree": "Paris"}),
        _rec("q1", "format_json", "noise", {"EoR": "Rome", "Wiki@10": "Paris", "ReFree": "Paris"}),
        # q2 unknown; golden: EoR wrong -> right (win); the noise pair was filtered out
        _rec("q2", "original", "golden", {"EoR": "Rome", "Wiki@10": "Paris", "ReFree": "Lyon"}),
        _rec("q2", "format_json", "golden", {"EoR": "Paris", "Wiki@10": "Paris", "ReFree": "Lyon"}),
        _rec("q2", "original", "noise", {"EoR": "Rome", "Wiki@10": "Rome", "ReFree": "Lyon"}),
        _rec("q2", "format_json", "noise", {}, kept=False),
    ]
    m = sure.score(recs, ["format_json"])
    e = m["per_system"]["EoR"]["format_json"]
    assert e["K-G"] == {"LR": 1.0, "RR": 0.0, "WR": 0.0, "n": 1}
    assert e["K-N"] == {"LR": 0.0, "RR": 1.0, "WR": 0.0, "n": 1}
    assert e["U-G"] == {"LR": 0.0, "RR": 0.0, "WR": 1.0, "n": 1}
    assert e["U-N"]["n"] == 0
    assert e["Total"] == {"LR": pytest.approx(1 / 3), "RR": pytest.approx(1 / 3), "WR": pytest.approx(1 / 3), "n": 3}
    w = m["per_system"]["Wiki@10"]["format_json"]["Total"]
    assert (w["RR"], w["WR"]) == (pytest.approx(2 / 3), pytest.approx(1 / 3))
    assert m["known"] == 1 and m["unknown"] == 1
    assert m["preservation"]["format_json"] == {"kept": 3, "dropped": 1, "reasons": {"lost the answer": 1}}
    assert m["category_rr"]["EoR"] == {"format": pytest.approx(1 / 3)}
    assert m["best_single"] == "Wiki@10"  # ReFree reads no documents: never "best"


# ---------------------------------------------------------------------------- RARE
@pytest.mark.parametrize("setting,cb,answer,robust", [
    ("gt", True, "Paris", True), ("gt", False, "no such info", False),
    ("back_translate", False, "Paris", True), ("back_translate", True, "Rome", False),
    # lexically similar, no answer: correct or refusal if closed-book answerable, else only refusal
    ("no_answer", True, "Paris", True), ("no_answer", True, "no such info", True), ("no_answer", True, "Rome", False),
    ("no_answer", False, "Paris", False), ("no_answer", False, "unknown", True), ("no_answer", False, "Rome", False),
    ("retrieval", False, "Paris", True), ("retrieval", False, "I don't know", True), ("retrieval", True, "Rome", False),
])
def test_rare_judge_table3(setting, cb, answer, robust):
    assert rare.judge(answer, ["Paris"], setting, cb) is robust


def test_rare_scores():
    def r(q, d, ans, qid="q1"):
        return {"id": f"{qid}{q}{d}", "suite": "rare", "qid": qid, "perturbation": q, "variant": d, "seed": 0,
                "gold": ["Paris"], "kept": True, "answers": ans, "missing": []}
    recs = [
        r("original", "gt", {"EoR": "Paris", "ReFree": "Lyon"}),  # cb = 0
        r("original", "no_answer", {"EoR": "Paris", "ReFree": "Lyon"}),  # not a refusal: not robust
        r("original", "back_translate", {"EoR": "Paris", "ReFree": "Lyon"}),
        r("original", "retrieval", {"EoR": "no such info", "ReFree": "Lyon"}),
        r("typo", "gt", {"EoR": "Rome", "ReFree": "Lyon"}),
        r("typo", "retrieval", {"EoR": "Paris", "ReFree": "Lyon"}),
    ]
    m = rare.score(recs)
    e = m["per_system"]["EoR"]
    assert e["query"] == 0.0 and e["document"] == 0.5 and e["retrieval"] == 1.0
    assert e["overall"] == pytest.approx(4 / 6)
    assert m["closed_book_correct"] == 0


# ---------------------------------------------------------------------------- query level
def test_recall_at_k_counts_chunks_and_pages():
    gold = {"nqgold-1": "Alpha beta gamma.", "nqgold-2": "Delta epsilon."}
    hits = [Hit("vital-9", "t", "nothing", "Wiki"), Hit("nqgold-1#2", "t", "a chunk", "Wiki"),
            Hit("page-3", "t", "intro\nDelta   epsilon.\nmore", "SE")]
    ranks = [query_level.gold_matches(h, gold) for h in hits]
    assert ranks == [[], ["nqgold-1"], ["nqgold-2"]]
    assert query_level.recall_at(ranks, 2, 1) == 0.0
    assert query_level.recall_at(ranks, 2, 2) == 0.5
    assert query_level.recall_at(ranks, 2, 5) == 1.0


def test_pearson_and_sources():
    assert query_level.pearson([0, 1, 2], [0, 2, 4]) == pytest.approx(1.0)
    assert query_level.pearson([0, 1, 2], [4, 2, 0]) == pytest.approx(-1.0)
    assert query_level.pearson([1, 1, 1], [0, 1, 0]) is None
    assert query_level.pearson([1], [1]) is None
    assert query_level.source_of("Wiki@10") == "Wiki" and query_level.source_of("SE@RR@10@CP") == "SE"
    assert query_level.source_of("SE@2&Wiki@5") == "Any" and query_level.source_of("HB@RR@10") == "Any"
    assert query_level.source_of("EoR") == "Any" and query_level.source_of("PK") is None


def test_query_level_deltas_and_correlation():
    def r(qid, p, v, wiki_hit, rag, cb, oracle):
        return {"id": f"{qid}{p}{v}", "suite": "query", "qid": qid, "perturbation": p, "variant": str(v), "seed": 0,
                "gold": ["Paris"], "gold_pids": ["g"], "hits": {"Wiki": [["g"] if wiki_hit else []]},
                "rag": {"EoR": rag, "Wiki@10": rag, "ReFree": cb}, "rag_missing": [],
                "oracle": {"EoR": oracle, "Wiki@10": oracle, "ReFree": cb}, "oracle_missing": []}
    recs = [r("q1", "original", 0, True, "Paris", "Paris", "Paris"),
            r("q2", "original", 0, True, "Paris", "Rome", "Paris"),
            r("q1", "typo10", 0, False, "Rome", "Rome", "Paris"),  # recall drop, RAG drop
            r("q1", "typo10", 1, True, "Paris", "Paris", "Paris"),
            r("q2", "typo10", 0, True, "Paris", "Rome", "Paris")]
    m = query_level.score(recs)
    bp = m["by_perturbation"]
    assert bp["original"]["recall"]["Wiki"]["@5"] == 1.0
    assert bp["typo10"]["recall"]["Wiki"]["@1"] == pytest.approx(2 / 3)
    assert bp["typo10"]["rag"]["EoR"] == pytest.approx(2 / 3) and bp["typo10"]["closed_book"] == pytest.approx(1 / 3)
    c = m["correlations"]["typo10"]["Wiki@10"]
    assert c["RET"] == pytest.approx(1.0) and c["CB"] == pytest.approx(1.0)
    assert c["OR"] is None  # oracle never changed
    assert c["n"] == 3


def test_run_cost_per_asked_instance_includes_dropped_generate_time():
    recs = [{"perturbation": "original", "kept": True, "reader_s": 2.0, "wall_s": 1.0},
            {"perturbation": "style", "kept": True, "reader_s": 5.0, "wall_s": 3.0},
            {"perturbation": "style", "kept": False, "reader_s": 1.0, "wall_s": 1.0},  # Generate share only
            {"perturbation": "noop", "kept": False, "reader_s": 0.0, "wall_s": 0.0}]
    c = run_cost(recs)
    assert c["per_perturbation"]["style"] == {"instances": 2, "asked": 1, "reader_s": 6.0, "wall_s": 4.0,
                                              "reader_s_per_asked": 6.0, "wall_s_per_asked": 4.0}
    assert c["per_perturbation"]["noop"]["reader_s_per_asked"] is None  # nothing asked: no per-instance cost
    assert c["total"]["instances"] == 4 and c["total"]["asked"] == 2 and c["total"]["reader_s"] == 8.0
    assert c["total"]["reader_s_per_asked"] == 4.0


def test_sure_flags_source_llm_and_source_self_written_by_one_model():
    from bench.robust.report import _md_sure

    def rec(t, q, doc):
        return {"perturbation": t, "qid": q, "variant": "golden", "doc": doc}

    same = [rec("source_llm", "q1", "a"), rec("source_self", "q1", "a"),
            rec("source_llm", "q2", "b"), rec("source_self", "q2", "b")]
    assert sure.same_source_docs(same) == (2, 2)
    differ = same[:3] + [rec("source_self", "q2", "c"), rec("source_llm", "q3", "only one type")]
    assert sure.same_source_docs(differ) == (1, 2)
    assert sure.same_source_docs([rec("style_simple", "q1", "a")]) == (0, 0)
    m = {"best_single": None, "per_system": {}, "types": [], "preservation": {}, "known": 0, "unknown": 0,
         "category_rr": {}, "systems": []}
    assert "the two rows measure one perturbation" in _md_sure({**m, "same_source_docs": (2, 2)})
    assert "in 1 of 2 instances" in _md_sure({**m, "same_source_docs": (1, 2)})
    assert "source_llm and source_self" not in _md_sure({**m, "same_source_docs": (0, 2)})


def test_row_best_names_the_top_single_system_and_its_ties():
    from bench.robust.report import _row_best

    row = {"EoR": 0.9, "SE@1": 0.5, "Wiki@10": 0.7, "HB@RR@10": 0.7, "PK": 1.0, "SE@4": None}
    assert _row_best(row, exclude=("PK",)) == "HB@RR@10 70.0 (+1 tied)"  # EoR and excluded PK never count
    assert _row_best(row) == "PK 100.0"
    assert _row_best({"EoR": 0.4, "SE@1": None}) == "–"
