"""`eor ask`: the voted answer first, then the candidates; failed retrievers excluded; the
shipped voter by default, its stages, the dropped retrievers never run."""
import json
import math

import pytest

from retrievers.groundwork import Groundwork
from serve.cli import main
from voter.question_vote import equal_weights
from tests.serve.conftest import FakePool
from voter.cascade import Cascade
from voter.voting import VoterWeights
from voter.weights_io import Provenance, save_weights

SPECS = ["Wiki@10", "SE@1", "PK", "ReFree"]
Q = "who painted the mona lisa"


def answers(question):
    return {"Wiki@10": "Leonardo da Vinci", "SE@1": "Leonardo da Vinci.", "PK": "Michelangelo",
            "ReFree": TimeoutError("deadline exceeded")}


def ask(capsys, *args):
    rc = main(["ask", Q, *args])
    out = capsys.readouterr()
    assert rc == 0, out.err
    return out.out


@pytest.mark.slow
def test_ask_json_with_default_metrics_and_a_failed_retriever(eor_home, use_pool, capsys, one_torch_thread):
    pool = FakePool(SPECS, answers)
    use_pool(pool)
    d = json.loads(ask(capsys, "--json", "--equal-weights", "--metrics", "em,bertscore,nli"))  # real BERTScore, fake NLI judge
    assert list(d)[:11] == ["question", "answer", "confidence", "confidence_kind", "abstained", "guess", "retriever",
                            "score", "margin", "candidates", "failed"]
    assert (d["confidence"], d["confidence_kind"], d["abstained"], d["guess"]) == (None, "none", False, None)
    assert d["voter"]["source"] == "equal weights" and d["ran"] == SPECS
    assert d["question"] == Q and d["answer"] == "Leonardo da Vinci" and d["retriever"] == "Wiki@10"
    assert d["failed"] == ["ReFree"]
    cands = {c["retriever"]: c for c in d["candidates"]}
    assert list(cands) == SPECS
    for c in d["candidates"]:
        assert list(c) == ["retriever", "answer", "score", "passages", "document", "error", "error_kind", "tokens",
                           "shared", "cached_from", "logprobs", "confidence"]
    assert cands["ReFree"]["score"] is None and cands["ReFree"]["error"] == "TimeoutError: deadline exceeded"
    assert cands["ReFree"]["error_kind"] == "timeout" and cands["Wiki@10"]["error_kind"] is None
    assert cands["Wiki@10"]["passages"] == [{"id": "Wiki@10-p1", "title": "Title for Wiki@10", "source": "Wiki",
                                             "score": 0.0}]
    assert cands["PK"]["document"] == f"background on {Q}" and cands["PK"]["passages"] == []
    assert d["score"] == cands["Wiki@10"]["score"] == cands["SE@1"]["score"]  # the same answer, twice
    assert 0 < cands["PK"]["score"] < d["score"]
    assert d["margin"] == pytest.approx(d["score"] - cands["PK"]["score"])  # over the best *different* answer
    judged = "\n".join(pool.reader.engine.prompts)
    assert "Michelangelo" in judged and "deadline" not in judged  # NLI went through the reader, not for ReFree


def test_ask_prints_the_vote_first_and_uses_fitted_weights(tmp_path, eor_home, use_pool, capfd):
    capsys = capfd  # progress and warnings go to the terminal's file descriptor 2
    use_pool(FakePool(SPECS, answers))
    text = ask(capsys, "--equal-weights", "--metrics", "em")
    lines = text.splitlines()
    assert lines[0] == f"Q: {Q}" and lines[1] == "A: Leonardo da Vinci"
    assert lines[2].startswith("   from Wiki@10, score ") and "margin" in lines[2]
    assert lines[3] == "   P(right) unknown (this voter has no answer scorer)"  # equal weights: no answer scorer
    assert lines[4] == "   evidence: Title for Wiki@10"
    assert "FAILED" not in text  # the per-retriever table is for --verbose
    assert "voter: equal weights (4 retrievers, no fit); metrics em" in text
    verbose = ask(capsys, "--equal-weights", "--metrics", "em", "--verbose")
    assert "ReFree               FAILED: TimeoutError: deadline exceeded" in verbose

    # fitted weights that drop both da Vinci retrievers: PK wins
    base = equal_weights(SPECS, ["em"])
    fitted = type(base)(base.pool, base.metrics, base.pooling, base.threshold,
                        VoterWeights.from_arrays([0.5], [0.0, 0.05, 0.4, 0.3], 0.1),
                        Provenance("q.jsonl", 10, "other-reader", 0.5))
    save_weights(tmp_path / "w.json", fitted)
    assert main(["ask", Q, "--json", "--weights", str(tmp_path / "w.json")]) == 0
    out = capsys.readouterr()
    assert "fitted with reader 'other-reader', this system reads with 'fake-reader'" in out.err
    d = json.loads(out.out)
    assert (d["answer"], d["retriever"], d["margin"]) == ("Michelangelo", "PK", None)  # no rival can win
    # the dropped retrievers did not run: PK and ReFree only (ReFree failed)
    assert {c["retriever"]: c["score"] for c in d["candidates"]} == {"PK": 0.0, "ReFree": None}
    assert d["not_run"] == ["Wiki@10", "SE@1"] and d["voter"]["source"] == str(tmp_path / "w.json")

    save_weights(tmp_path / "bad.json", equal_weights(SPECS[:2], ["em"]))
    assert main(["ask", Q, "--weights", str(tmp_path / "bad.json")]) == 2
    assert "different retriever pool" in capsys.readouterr().err
    assert main(["ask", Q, "--weights", str(tmp_path / "w.json"), "--metrics", "em,bertscore"]) == 2
    assert "different metric list" in capsys.readouterr().err


def test_ask_several_questions_and_a_subset(eor_home, use_pool, capsys):
    use_pool(FakePool(SPECS, answers))
    rc = main(["ask", Q, "another question", "--json", "--equal-weights", "--metrics", "em", "--retrievers", "PK,ReFree"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and isinstance(out, list) and len(out) == 2
    assert all(d["retriever"] == "PK" and d["failed"] == ["ReFree"] for d in out)
    assert all([c["retriever"] for c in d["candidates"]] == ["PK", "ReFree"] for d in out)


def _fitted(cascade=None, kept_weights=(0.4, 0.3, 0.0, 0.2)):
    base = equal_weights(SPECS, ["em"])
    return type(base)(base.pool, base.metrics, base.pooling, base.threshold,
                      VoterWeights.from_arrays([0.5], list(kept_weights), 0.1),
                      Provenance("q.jsonl", 60, "fake-reader", 0.5, extra={"split": "fit"}), cascade=cascade)


def test_ask_uses_the_shipped_voter_and_stops_when_the_vote_is_settled(eor_home, use_pool, shipped_voter, capsys):
    """Shipped voter: PK dropped; stage 1 = Wiki@10 + SE@1 (they agree: settled), stage 2 = ReFree."""
    pool = FakePool(SPECS, answers)
    use_pool(pool)
    saved = shipped_voter(_fitted(Cascade((("Wiki@10", "SE@1"), ("ReFree",)), (0.0,))))
    d = json.loads(ask(capsys, "--json"))
    assert d["answer"] == "Leonardo da Vinci" and d["retriever"] == "Wiki@10"
    assert d["voter"]["source"] == "shipped" and d["voter"]["id"] != "equal-weights"
    assert "fitted voter" in d["voter"]["description"] and "3 of 4 retrievers in 2 stages" in d["voter"]["description"]
    assert d["ran"] == ["Wiki@10", "SE@1"] and (d["stopped_at_stage"], d["stages"]) == (1, 2)
    assert d["not_run"] == ["PK", "ReFree"]
    assert pool.spec_calls == [["Wiki@10", "SE@1"]]  # PK (dropped) never reached the pool, nor ReFree
    assert saved.exists()


def test_ask_runs_the_next_stage_when_the_vote_is_open(eor_home, use_pool, shipped_voter, capsys):
    """Stage 1 disagrees (margin below the threshold): stage 2 runs and decides."""
    def split(question):
        return {"Wiki@10": "Paris", "SE@1": "Lyon", "PK": "Nice", "ReFree": "Lyon"}
    pool = FakePool(SPECS, split)
    use_pool(pool)
    shipped_voter(_fitted(Cascade((("Wiki@10", "SE@1"), ("ReFree",)), (0.5,))))
    d = json.loads(ask(capsys, "--json"))
    assert pool.spec_calls == [["Wiki@10", "SE@1"], ["ReFree"]]
    assert d["answer"] == "Lyon" and (d["stopped_at_stage"], d["stages"]) == (2, 2)
    assert d["ran"] == ["Wiki@10", "SE@1", "ReFree"]
    # one plan per question: stage 2 got what stage 1 found (nothing sent back to merge), both the whole plan
    (w1, plan1), (w2, plan2) = pool.round_calls
    assert w1 == (Groundwork(),) and w2 == (Groundwork(read=(("prompt 1", "fake"),)),)
    assert plan1 == plan2 == ["Wiki@10", "SE@1", "ReFree"]


def test_a_voter_for_another_pool_or_a_malformed_voter_file_is_refused(tmp_path, eor_home, use_pool, shipped_voter,
                                                                      capsys):
    pool = FakePool(SPECS, answers)
    use_pool(pool)
    shipped_voter(equal_weights(["Wiki@10", "PK"], ["em"]))
    assert main(["ask", Q]) == 2
    err = capsys.readouterr().err
    assert "different retriever pool" in err and "Traceback" not in err
    for bad in ("[]", "null", "1", '{"format": "eor-voter/2"}', "{not json"):
        (tmp_path / "bad.json").write_text(bad)
        assert main(["ask", Q, "--weights", str(tmp_path / "bad.json")]) == 2
        err = capsys.readouterr().err
        assert "bad.json" in err and "Traceback" not in err, err
    assert pool.spec_calls == []  # refused before any retriever ran


def test_the_cascade_ends_with_the_vote_it_has_when_the_time_runs_out():
    import asyncio

    from serve.ensemble import answer_async
    from voter.decision import Decision
    from voter.question_vote import Vote

    cascade = Cascade((("A", "B"), ("C",), ("D",)), (math.inf, math.inf))
    ran: list[list[str]] = []
    clock = iter([1.0, -1.0])

    async def run_round(open_, specs):
        from retrievers.types import Candidate, Context, QuestionResult

        ran.append(specs)
        return [QuestionResult("q", tuple(Candidate(s, "x", Context(s)) for s in specs)) for _ in open_]

    async def vote(results, stage):
        return [Decision(Vote("A", "x", 0.1, None), False, None, 0.0) for _ in results]

    [a] = asyncio.run(answer_async(["q"], cascade, run_round, vote, time_left=lambda: next(clock)))
    assert ran == [["A", "B"], ["C"]] and a.out_of_time and (a.rounds_run, a.n_rounds) == (2, 3)
    assert a.ran == ["A", "B", "C"] and a.vote.answer == "x"


def test_a_vote_that_misses_the_deadline_ends_with_the_last_vote_and_a_first_one_raises():
    import asyncio

    import pytest

    from retrievers.types import Candidate, Context, QuestionResult
    from serve.ensemble import VoteDeadline, answer_async
    from voter.decision import Decision
    from voter.question_vote import Vote

    cascade = Cascade((("A", "B"), ("C",), ("D",)), (math.inf, math.inf))

    async def run_round(open_, specs):
        return [QuestionResult("q", tuple(Candidate(s, s.lower(), Context(s)) for s in specs)) for _ in open_]

    def voting(fail_at: int):
        calls = []

        async def vote(results, stage):
            calls.append(1)
            if len(calls) == fail_at:
                raise VoteDeadline
            return [Decision(Vote("A", "a", 0.1, None), False, None, 0.0) for _ in results]
        return vote

    [a] = asyncio.run(answer_async(["q"], cascade, run_round, voting(fail_at=2)))
    assert a.out_of_time and a.rounds_run == 1 and a.vote.answer == "a" and a.ran == ["A", "B", "C"]
    with pytest.raises(VoteDeadline):
        asyncio.run(answer_async(["q"], cascade, run_round, voting(fail_at=1)))
