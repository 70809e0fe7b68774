"""bench/autoscale.py's reading of a run: when the second Reader replica came and went, and goodput
before and after it ran (the two-node run itself: `python -m bench.autoscale`, docs/benchmarks.md)."""
from bench.autoscale import first_at, goodput, only_one, summarize


def poll(t, running, starting=0):
    return {"t": t, "states": {"RUNNING": running, **({"STARTING": starting} if starting else {})}}


def test_the_second_replica_is_dated_and_goodput_split_where_it_began_to_run():
    timeline = [poll(0, 1), poll(10, 1, 1), poll(40, 2), poll(70, 1, 1), poll(90, 2), poll(130, 1)]  # one lost at 70
    answers = [{"sent": 0, "t": t, "ok": True, "code": "OK"} for t in (5, 15, 25, 35, 45, 50, 55, 60, 70, 80, 90)]
    answers.append({"sent": 60, "t": 95, "ok": False, "code": "RESOURCE_EXHAUSTED"})
    s = summarize(timeline, answers, load_end=100)
    assert (s["second_replica_asked_at_s"], s["second_replica_running_at_s"], s["back_to_one_at_s"]) == (10, 40, 130)
    # before: the answers after the first (5 s), until the second replica runs (40 s)
    assert s["goodput_before_per_s"] == round(3 / 35, 4) and s["goodput_after_per_s"] == round(7 / 60, 4)
    assert (s["asks"], s["ok"], s["not_ok"]) == (12, 11, ["RESOURCE_EXHAUSTED"])


def test_without_a_second_replica_goodput_spans_the_whole_load():
    s = summarize([poll(0, 1), poll(50, 1)], [{"sent": 0, "t": 10, "ok": True, "code": "OK"}], load_end=50)
    assert s["second_replica_running_at_s"] is None and s["goodput_after_per_s"] is None
    assert s["goodput_before_per_s"] == 0.0  # one answer opens the window; none after it
    assert goodput([], 5, 5) is None and first_at([poll(0, 1)], 2) is None
    assert only_one({"RUNNING": 1}) and not only_one({}) and not only_one({"RUNNING": 1, "STOPPING": 1})
    late = summarize([poll(0, 1), poll(80, 2), poll(90, 1)], [{"sent": 0, "t": 10, "ok": True, "code": "OK"}], 50)
    assert late["goodput_after_per_s"] is None  # the second ran only after the load: no "after" window
