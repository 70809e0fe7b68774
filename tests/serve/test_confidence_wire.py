"""P(right) and abstention end to end: a real gRPC server (the ingress's own rpc methods, as
Ray Serve's proxy calls them) over stand-in retriever and voter handles, with a calibrated
confidence-aware voter; `eor ask --server` against it, and `eor ask` in process.

The voter: round 1 is SE@1 alone, round 2 the rest. Its scorer's P(right) is
sigmoid(5 * mean log-prob + 2.5) and its calibrator sigmoid(0.5 logit(P) + 0.5), so an
answer read at log-prob -0.05 carries P(right) 0.84 and stops the rounds (threshold 0.7 on the
calibrated P); one at -0.7 carries 0.50 and goes on to round 2.
"""
from __future__ import annotations

import asyncio
import json
import threading
from contextlib import contextmanager

import grpc
import pytest

from protos import eor_pb2, eor_pb2_grpc
from retrievers.spec import PAPER_POOL
from retrievers.types import Candidate, Context, QuestionResult
from retrievers.groundwork import Groundwork, RoundRun
from serve.app.deployments import VoterPlan
from serve.cli import main
from tests.serve.conftest import FakePool
from tests.serve.test_reader_recovery import _Handle
from tests.voter.conftest import logprob_scorer
from voter.adaptive_model import AdaptiveModel
from voter.calibration import Calibrator
from voter.decision import decide
from voter.question_vote import equal_weights
from voter.similarity import create_metric
from voter.weights_io import Provenance, SavedWeights

POOL = tuple(PAPER_POOL)
SURE, UNSURE = "who painted the mona lisa, surely", "who painted the mona lisa, maybe"


def calibrated_voter(pool=POOL) -> SavedWeights:
    model = AdaptiveModel(((pool[1],), tuple(s for s in pool if s != pool[1])), logprob_scorer(pool), (0.7,),
                          Calibrator.from_dict({"method": "platt", "a": 0.5, "b": 0.5}))
    base = equal_weights(list(pool), ["em"])
    return SavedWeights(base.pool, base.metrics, base.pooling, base.threshold, base.weights,
                        Provenance("q.jsonl", 40, "fake-reader", 0.5), adaptive=model)


def logprob(question: str, spec: str) -> float:
    return -0.05 if "surely" in question or spec != "SE@1" else -0.7


def candidates(question: str, specs) -> tuple[Candidate, ...]:
    return tuple(Candidate(s, "Leonardo da Vinci", Context(s), logprobs=(logprob(question, s),)) for s in specs)


@contextmanager
def serving(min_confidence: float = 0.0):
    """A gRPC server on a free port whose rpcs are the ingress's own (Ray Serve's proxy's way)."""
    from serve.app.grpc_service import add_eor_servicer
    from serve.app.ingress import EorIngress
    from serve.config import config_from_dict

    saved = calibrated_voter()
    plan = VoterPlan("k", saved.cascade_to_run, saved.describe())
    voter = _Handle(plan=lambda: plan,
                    decide=lambda results, key, cascade, stage, deadline: decide(results, saved, [create_metric("em")],
                                                                                 cascade, stage))
    group = _Handle(run=lambda r: RoundRun([QuestionResult(q, candidates(q, r.specs)) for q in r.questions],
                                           [Groundwork() for _ in r.questions]))
    settings = config_from_dict({"service": {"min_confidence": min_confidence}})
    ingress = EorIngress.func_or_class(settings, [group], [list(POOL)], voter, _Handle())
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()

    async def start():
        server = grpc.aio.server()
        add_eor_servicer(ingress, server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        return server, port
    server, port = asyncio.run_coroutine_threadsafe(start(), loop).result(30)
    try:
        yield f"127.0.0.1:{port}"
    finally:
        asyncio.run_coroutine_threadsafe(server.stop(0), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)


@pytest.fixture(scope="module")
def address():
    with serving() as addr:
        yield addr


@pytest.fixture(scope="module")
def stub(address):
    with grpc.insecure_channel(address) as ch:
        yield eor_pb2_grpc.EorStub(ch)


def test_ask_and_ask_batch_carry_the_calibrated_confidence(stub):
    sure = stub.Ask(eor_pb2.AskRequest(question=SURE), timeout=30)
    assert sure.answer == "Leonardo da Vinci" and sure.confidence == pytest.approx(0.835, abs=1e-3)
    assert sure.confidence_kind == "calibrated" and not sure.abstained and sure.guess == ""
    assert sure.stopped_at_stage == 1 and list(sure.ran) == ["SE@1"]  # 0.84 >= 0.7: settled after round 1
    assert sure.score == pytest.approx(0.905, abs=1e-3)  # `score` keeps its meaning: the scorer's raw P
    unsure = stub.Ask(eor_pb2.AskRequest(question=UNSURE), timeout=30)
    assert unsure.stopped_at_stage == 2 and unsure.confidence == pytest.approx(0.835, abs=1e-3)  # round 2 is sure
    batch = stub.AskBatch(eor_pb2.AskBatchRequest(questions=[SURE, UNSURE], min_confidence=0.9), timeout=30)
    assert [(r.abstained, r.answer, r.guess) for r in batch.replies] == [(True, "", "Leonardo da Vinci")] * 2


def test_below_min_confidence_the_reply_is_an_abstention_with_the_guess_beside_it(stub):
    r = stub.Ask(eor_pb2.AskRequest(question=SURE, min_confidence=0.9), timeout=30)
    assert r.abstained and r.answer == "" and r.guess == "Leonardo da Vinci"  # never in `answer`
    assert r.confidence == pytest.approx(0.835, abs=1e-3) and r.retriever == "SE@1"  # what the guess is
    assert not stub.Ask(eor_pb2.AskRequest(question=SURE, min_confidence=0.8), timeout=30).abstained


def test_ask_stream_gives_each_provisional_answer_its_own_confidence(stub):
    replies = list(stub.AskStream(eor_pb2.AskRequest(question=UNSURE, min_confidence=0.6), timeout=30))
    assert [(r.final, r.stopped_at_stage) for r in replies] == [(False, 1), (True, 2)]
    first, final = replies
    assert first.confidence == pytest.approx(0.5, abs=1e-3) and first.abstained and first.guess == "Leonardo da Vinci"
    assert final.confidence == pytest.approx(0.835, abs=1e-3) and not final.abstained and final.answer


@pytest.mark.parametrize("bad", [float("nan"), -0.1, 1.5, float("inf")])
def test_a_bad_min_confidence_is_invalid_argument_in_one_line(stub, bad):
    for call in (lambda: stub.Ask(eor_pb2.AskRequest(question=SURE, min_confidence=bad), timeout=30),
                 lambda: stub.AskBatch(eor_pb2.AskBatchRequest(questions=[SURE], min_confidence=bad), timeout=30),
                 lambda: list(stub.AskStream(eor_pb2.AskRequest(question=SURE, min_confidence=bad), timeout=30))):
        with pytest.raises(grpc.RpcError) as err:
            call()
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert err.value.details().startswith("min_confidence must be a number in [0, 1]")
        assert "\n" not in err.value.details()


def test_the_service_config_sets_the_default_and_a_request_overrides_it(capsys):
    with serving(min_confidence=0.9) as addr, grpc.insecure_channel(addr) as ch:
        stub = eor_pb2_grpc.EorStub(ch)
        assert stub.Ask(eor_pb2.AskRequest(question=SURE), timeout=30).abstained  # unset: the config's 0.9
        assert not stub.Ask(eor_pb2.AskRequest(question=SURE, min_confidence=0.0), timeout=30).abstained
        assert main(["ask", "--server", addr, SURE]) == 0
        assert "A: not sure (P(right) 0.84, below the server's min_confidence); best guess: Leonardo da Vinci" in \
            capsys.readouterr().out
    from serve.config import config_from_dict

    with pytest.raises(ValueError, match=r"service.min_confidence must be a number in \[0, 1\]"):
        config_from_dict({"service": {"min_confidence": 1.5}})


def test_eor_ask_server_prints_not_sure_with_the_guess_and_its_p(address, capsys):
    assert main(["ask", "--server", address, SURE, "--min-confidence", "0.9"]) == 0
    out = capsys.readouterr()
    assert "A: not sure (P(right) 0.84, below 0.9); best guess: Leonardo da Vinci" in out.out
    assert main(["ask", "--server", address, UNSURE]) == 0
    out = capsys.readouterr()
    assert "after stage 1/2: provisional answer 'Leonardo da Vinci' from SE@1 (P(right) 0.50)" in out.err
    assert "A: Leonardo da Vinci\n" in out.out and "   P(right) 0.84\n" in out.out
    assert main(["ask", "--server", address, SURE, "--min-confidence", "0.9", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert (d["answer"], d["guess"], d["abstained"], d["confidence_kind"]) == ("", "Leonardo da Vinci", True,
                                                                              "calibrated")
    assert d["confidence"] == pytest.approx(0.835, abs=1e-3)


@pytest.mark.parametrize("bad", ["2", "nan", "abc", "-0.5"])
def test_eor_ask_refuses_a_bad_min_confidence_in_one_line(address, capsys, bad):
    assert main(["ask", "--server", address, SURE, "--min-confidence", bad]) == 2
    err = capsys.readouterr().err
    assert err.startswith("eor: error: min_confidence must be a number in [0, 1]") and err.count("\n") == 1


class LoggedPool(FakePool):
    """FakePool whose answers carry the reader's log-probabilities."""

    def run(self, questions, specs=None, documents=None):
        from dataclasses import replace

        return [QuestionResult(r.question, tuple(replace(c, logprobs=(logprob(r.question, c.retriever),))
                                                 for c in r.candidates))
                for r in super().run(questions, specs, documents)]


def test_eor_ask_in_process_says_how_sure_and_what_kind_of_number(eor_home, use_pool, shipped_voter, capsys, tmp_path):
    specs = ("Wiki@10", "SE@1", "ReFree")
    use_pool(LoggedPool(specs, lambda q: {s: "Leonardo da Vinci" for s in specs}))
    shipped_voter(calibrated_voter(specs))
    assert main(["ask", SURE]) == 0
    assert "A: Leonardo da Vinci\n" in (out := capsys.readouterr().out) and "   P(right) 0.84\n" in out
    assert main(["ask", UNSURE, "--min-confidence", "0.9"]) == 0
    assert "A: not sure (P(right) 0.84, below 0.9); best guess: Leonardo da Vinci" in capsys.readouterr().out
    assert main(["ask", SURE, "--json", "--min-confidence", "0.5"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert (d["answer"], d["abstained"], d["guess"], d["confidence_kind"]) == ("Leonardo da Vinci", False, None,
                                                                              "calibrated")
    raw = calibrated_voter(specs)
    from dataclasses import replace

    shipped_voter(replace(raw, adaptive=replace(raw.adaptive, calibrator=None)))  # a v3 file: the raw P, said so
    assert main(["ask", SURE]) == 0
    assert "P(right) 0.90 (uncalibrated: the answer scorer's own P; this voter file has no calibrator)" in \
        capsys.readouterr().out
    assert main(["ask", SURE, "--min-confidence", "nan"]) == 2
    assert capsys.readouterr().err.startswith("eor: error: min_confidence must be a number in [0, 1]")
