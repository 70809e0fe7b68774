"""bench/http_vs_grpc.py with stand-in fronts: each question asked over both, the order
alternating, the means of each front and of the first and second asks."""
from __future__ import annotations

import time

from bench.http_vs_grpc import compare


def test_each_question_goes_to_both_fronts_alternating_which_is_first():
    asked = []

    def front(name, latency_s):
        def ask(q):
            asked.append((name, q))
            time.sleep(latency_s / 100)
            return {"latency_s": latency_s, "answer": f"answer to {q}"}
        return ask
    report = compare(["q1", "q2", "q3", "q4"], front("grpc", 1.0), front("http", 2.0))
    assert asked[:2] == [("grpc", "who painted the mona lisa"), ("http", "who painted the mona lisa")]  # warm-up
    del asked[:2]
    assert asked == [("grpc", "q1"), ("http", "q1"), ("http", "q2"), ("grpc", "q2"),
                     ("grpc", "q3"), ("http", "q3"), ("http", "q4"), ("grpc", "q4")]
    assert report["questions"] == 4 and report["same_answers"] == 4
    assert report["mean_server_s"] == {"grpc": 1.0, "http": 2.0}
    assert report["mean_wall_s"]["http"] > report["mean_wall_s"]["grpc"] > 0.005 and report["http_vs_grpc"] > 0.5
    assert [r["first"] for r in report["rows"]] == ["grpc", "http", "grpc", "http"]
