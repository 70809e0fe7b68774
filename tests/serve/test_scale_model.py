"""bench/scale_model.py (an in-process bench, so its test runs in .venv): reader tokens per
question from a run log, and what per-call routing over R reader replicas does to the prefix
cache's hits, on a run with known tokens."""
from __future__ import annotations

import json

import pytest

from bench.scale_model import main, reader_cost, read_run, table
from retrievers.types import Candidate, Context, QuestionResult, ReaderTokens
from serve.offline.results_io import result_to_record


def _result(i: int) -> QuestionResult:
    return QuestionResult(f"q{i}", (
        Candidate("Wiki@10@CP", "a", Context("Wiki@10@CP"), tokens=ReaderTokens(1000, 50, 0)),
        Candidate("Wiki@10", "a", Context("Wiki@10"), tokens=ReaderTokens(900, 5, 800), cached_from="Wiki@10@CP"),
        Candidate("SE@1", "b", Context("SE@1"), tokens=ReaderTokens(300, 5, 0))))


def test_hits_survive_all_with_affinity_and_one_in_r_per_call(tmp_path):
    run = tmp_path / "run.jsonl"
    run.write_text("".join(json.dumps({"qid": str(i), "result": result_to_record(_result(i))}) + "\n"
                           for i in range(4)) + '{"qid": "torn', encoding="utf-8")
    cost = reader_cost(read_run(run))
    assert (cost.questions, cost.prompt, cost.cached, cost.generated) == (4, 2200, 800, 60)
    assert cost.computed(4, affinity=True) == 2200 - 800 + 60
    assert cost.computed(4, affinity=False) == 2200 - 200 + 60  # a quarter of the hits land together
    assert reader_cost(read_run(run), ["Wiki@10", "SE@1"]).cached == 0  # its partner did not run
    rows = table(cost, [1, 2], tokens_per_s=1460)
    assert rows[0]["cold_asks_per_s_affinity"] == 1.0 and rows[1]["cold_asks_per_s_affinity"] == 2.0
    assert rows[1]["cold_asks_per_s_per_call"] == pytest.approx(2 * 1460 / 1860, abs=1e-3)
    assert main(["--run", str(run), "--json"]) == 0
    assert main(["--run", str(tmp_path / "none.jsonl")]) == 2
