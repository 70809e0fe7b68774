"""`eor ask`: the voted answer first, then the candidates; failed retrievers excluded."""
import json

import pytest

from serve.cli import main
from serve.voting import equal_weights
from tests.serve.conftest import FakePool
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
    d = json.loads(ask(capsys, "--json"))  # em + real BERTScore + LLM-judged NLI (fake judge)
    assert list(d) == ["question", "answer", "retriever", "score", "margin", "candidates", "failed"]
    assert d["question"] == Q and d["answer"] == "Leonardo da Vinci" and d["retriever"] == "Wiki@10"
    assert d["failed"] == ["ReFree"]
    cands = {c["retriever"]: c for c in d["candidates"]}
    assert list(cands) == SPECS
    for c in d["candidates"]:
        assert list(c) == ["retriever", "answer", "score", "passages", "document", "error"]
    assert cands["ReFree"]["score"] is None and cands["ReFree"]["error"] == "TimeoutError: deadline exceeded"
    assert cands["Wiki@10"]["passages"] == [{"id": "Wiki@10-p1", "title": "Title for Wiki@10", "source": "Wiki"}]
    assert cands["PK"]["document"] == f"background on {Q}" and cands["PK"]["passages"] == []
    assert d["score"] == cands["Wiki@10"]["score"] == cands["SE@1"]["score"]  # the same answer, twice
    assert 0 < cands["PK"]["score"] < d["score"]
    assert d["margin"] == pytest.approx(d["score"] - cands["PK"]["score"])  # over the best *different* answer
    judged = "\n".join(pool.reader.engine.prompts)
    assert "Michelangelo" in judged and "deadline" not in judged  # NLI went through the reader, not for ReFree


def test_ask_prints_the_vote_first_and_uses_fitted_weights(tmp_path, eor_home, use_pool, capsys):
    use_pool(FakePool(SPECS, answers))
    text = ask(capsys, "--metrics", "em")
    lines = text.splitlines()
    assert lines[0] == f"Q: {Q}" and lines[1] == "A: Leonardo da Vinci"
    assert lines[2].startswith("   from Wiki@10, score ") and "margin" in lines[2]
    assert "ReFree               FAILED: TimeoutError: deadline exceeded" in text
    assert "voter: equal weights, metrics em" in text

    # fitted weights that drop both da Vinci retrievers: PK wins
    base = equal_weights(SPECS, ["em"])
    fitted = type(base)(base.pool, base.metrics, base.pooling, base.threshold,
                        VoterWeights.from_arrays([0.5], [0.0, 0.05, 0.4, 0.3], 0.1),
                        Provenance("q.jsonl", 10, "other-reader", 0.5))
    save_weights(tmp_path / "w.json", fitted)
    assert main(["ask", Q, "--json", "--weights", str(tmp_path / "w.json")]) == 0
    out = capsys.readouterr()
    assert "fitted with reader 'other-reader', this pool reads with 'fake-reader'" in out.err
    d = json.loads(out.out)
    assert (d["answer"], d["retriever"], d["margin"]) == ("Michelangelo", "PK", None)  # no rival can win
    assert {c["retriever"]: c["score"] for c in d["candidates"]} == {
        "Wiki@10": None, "SE@1": None, "PK": 0.0, "ReFree": None}

    save_weights(tmp_path / "bad.json", equal_weights(SPECS[:2], ["em"]))
    assert main(["ask", Q, "--weights", str(tmp_path / "bad.json")]) == 2
    assert "different retriever pool" in capsys.readouterr().err
    assert main(["ask", Q, "--weights", str(tmp_path / "w.json"), "--metrics", "em,bertscore"]) == 2
    assert "different metric list" in capsys.readouterr().err


def test_ask_several_questions_and_a_subset(eor_home, use_pool, capsys):
    use_pool(FakePool(SPECS, answers))
    rc = main(["ask", Q, "another question", "--json", "--metrics", "em", "--retrievers", "PK,ReFree"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and isinstance(out, list) and len(out) == 2
    assert all(d["retriever"] == "PK" and d["failed"] == ["ReFree"] for d in out)
    assert all([c["retriever"] for c in d["candidates"]] == ["PK", "ReFree"] for d in out)
