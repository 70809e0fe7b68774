"""bench/load_curve.py against a fake eor.v1 server on loopback (a real gRPC server, a few tenths of
a second a rate): open-loop Poisson arrivals, refusals with their pushback read from the trailers,
goodput, percentiles, Match, rounds, the readers' tokens against a measured speed, the plot."""
from __future__ import annotations

import json
import random
import threading
import time
from concurrent import futures
from types import SimpleNamespace

import grpc
import pytest

from bench.load_curve import arrivals, curve, offer, plot, summarize
from protos import eor_pb2, eor_pb2_grpc
from protos.client import EorClient


class Busy(eor_pb2_grpc.EorServicer):
    """Serves `slots` Asks at once (SERVICE_S each) and refuses the rest with a 1.5 s pushback; the
    answer is the question's last word (gold for every other question); the reader counts tokens."""

    SERVICE_S = 0.05

    def __init__(self, slots: int = 2):
        self.free = threading.Semaphore(slots)
        self.lock = threading.Lock()
        self.tokens = 0
        self.asked: list[tuple[str, tuple[str, ...]]] = []

    def Ask(self, request, context):  # noqa: N802
        with self.lock:
            self.asked.append((request.question, tuple(request.retrievers)))
        if not self.free.acquire(blocking=False):
            context.set_trailing_metadata((("grpc-retry-pushback-ms", "1500"),))
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "the service is at capacity")
        try:
            time.sleep(self.SERVICE_S)
            with self.lock:
                self.tokens += 100
            return eor_pb2.AskReply(question=request.question, answer=request.question.split()[-1], final=True,
                                    stopped_at_stage=1 if request.retrievers else 2, under_load=not request.retrievers,
                                    latency_s=self.SERVICE_S, reader_s=0.02, prompt_tokens=100,
                                    cached_prompt_tokens=25)
        finally:
            self.free.release()

    def Health(self, request, context):  # noqa: N802
        with self.lock:
            t = self.tokens
        return eor_pb2.HealthReply(status=eor_pb2.HealthReply.SERVING, readers=[eor_pb2.ReaderHealth(
            deployment="Reader", model="fake-model", prompt_tokens=t, cached_tokens=t // 4, generated_tokens=t // 10)])


@pytest.fixture
def server():
    servicer = Busy()
    srv = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
    eor_pb2_grpc.add_EorServicer_to_server(servicer, srv)
    port = srv.add_insecure_port("127.0.0.1:0")
    srv.start()
    yield servicer, f"127.0.0.1:{port}"
    srv.stop(grace=None)


def questions(n: int) -> list:
    return [SimpleNamespace(question=f"question {i} word{i}", answers=(f"word{i}",) if i % 2 == 0 else ("other",))
            for i in range(n)]


def test_arrivals_are_poisson_at_the_rate():
    times = arrivals(50.0, 20.0, random.Random(1))
    assert times == sorted(times) and all(0 <= t < 20 for t in times)
    assert len(times) == pytest.approx(1000, rel=0.1)


def test_an_open_loop_past_capacity_gets_refusals_with_their_pushback_and_never_hangs(server):
    servicer, address = server
    with EorClient(address) as client:
        rows = offer(client.stub, questions(200), rate=150.0, seconds=0.4, grace_s=2.0)
    s = summarize(rows, 150.0, 0.4)
    assert s["asked"] == len(rows) == len(servicer.asked) and s["hung"] == 0 and s["ok_empty"] == 0
    assert s["answered"] >= 2 and s["not_ok"].get("RESOURCE_EXHAUSTED", 0) > 0  # 2 slots, 0.05 s each
    assert s["pushback_mean_s"] == 1.5 and s["refused_over_1s"] == 0
    assert s["p50_s"] <= s["p95_s"] <= s["p99_s"] and s["p50_s"] >= Busy.SERVICE_S
    assert 0 < s["goodput_per_s"] <= 2 / Busy.SERVICE_S * 1.2
    ok = next(r for r in rows if r["code"] == "OK")  # the service's own account, to tell waiting from reading
    assert (ok["service_s"], ok["reader_s"], ok["prompt_tokens"], ok["cached_prompt_tokens"]) == (0.05, 0.02, 100, 25)
    assert s["match_answered"] == pytest.approx(sum(r["match"] for r in rows if r["code"] == "OK") / s["answered"], abs=1e-3)


def test_the_curve_runs_both_systems_on_fresh_questions_and_plots(server, tmp_path, monkeypatch):
    from serve.offline.reader_speed import ReaderSpeed, save_speed

    monkeypatch.setenv("EOR_HOME", str(tmp_path))
    save_speed("fake-model", ReaderSpeed(1000.0, 100.0))
    servicer, address = server
    with EorClient(address) as client:
        report = curve(client, questions(400), rates=[20.0, 60.0], seconds=0.4, grace_s=2.0, settle_s=1.0)
    asked = [q for q, _ in servicer.asked]
    assert len(asked) == len(set(asked))  # none asked twice
    assert {spec for _, spec in servicer.asked} == {(), ("Wiki@10",)}
    cascade, single = report["systems"]["cascade"], report["systems"]["Wiki@10"]
    assert [r["offered_rate"] for r in cascade] == [20.0, 60.0] and len(single) == 2
    assert [a["question"] for a in cascade[0]["asks"]] == asked[:len(cascade[0]["asks"])]
    assert cascade[0]["rounds_mean"] == 2 and single[0]["rounds_mean"] == 1 and cascade[0]["under_load_share"] == 1
    reader = cascade[-1]["reader"]["Reader"]
    assert reader["model"] == "fake-model" and reader["measured"] == {"prefill_tok_s": 1000.0, "decode_tok_s": 100.0}
    assert reader["prefill_tok_s"] > 0 and reader["busy_share_at_measured_speed"] > 0
    report["capacity_per_s"] = 20.0
    png = plot(report, tmp_path / "curve.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_curves_run_apart_merge_into_one_report_by_rate(tmp_path):
    from bench.load_curve import main, merged

    def row(rate, p50):
        return {"offered_rate": rate, "p50_s": p50, "p95_s": p50 * 2, "goodput_per_s": rate}
    first = {"systems": {"cascade": [row(0.1, 5.0)], "Wiki@10": [row(0.3, 1.0), row(0.1, 1.0)]}, "capacity_per_s": 0.1}
    later = {"systems": {"Wiki@10": [row(0.2, 2.0), row(0.1, 3.0)]}, "capacity_per_s": 0.2}
    report = merged([first, later])
    assert [r["offered_rate"] for r in report["systems"]["Wiki@10"]] == [0.1, 0.2, 0.3]
    assert report["systems"]["Wiki@10"][0]["p50_s"] == 3.0 and report["capacity_per_s"] == 0.1  # the later run's
    paths = []
    for i, r in enumerate((first, later)):
        paths.append(tmp_path / f"{i}.json")
        paths[-1].write_text(json.dumps(r))
    assert main(["merge", *map(str, paths), "--out", str(tmp_path / "all")]) == 0
    assert (tmp_path / "all" / "load-curve.png").stat().st_size > 0
    assert json.loads((tmp_path / "all" / "load-curve.json").read_text())["merged_from"] == 2


def test_a_capacity_past_the_splits_end_is_refused_not_reported_as_zero(tmp_path):
    from bench.load_curve import main, never_asked
    from tests.shared_data import QUESTIONS_FILE

    rows = len(never_asked(str(QUESTIONS_FILE), 0, "fit"))
    with pytest.raises(SystemExit, match=rf"the fit split has 2 questions past row {rows - 2}, 4 asked for"):
        main(["capacity", "--questions", str(QUESTIONS_FILE), "--split", "fit", "--offset", str(rows - 2), "-n", "4",
              "--out", str(tmp_path)])
    assert not list(tmp_path.iterdir())  # no report of nothing
