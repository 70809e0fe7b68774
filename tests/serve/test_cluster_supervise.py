"""The node loss's supervisor (bench/cluster.py: supervise): a start that fails is cleaned up and
tried again, as systemd or KubeRay would, until its deadline; each try is on the timeline."""
from __future__ import annotations

import subprocess
import time

from bench.cluster import supervise
from bench.common import Timeline


def test_a_failed_start_is_tried_again_and_each_try_is_noted():
    timeline, tries, cleaned = Timeline(), [], []

    def start():
        tries.append(1)
        if len(tries) < 3:  # Ray 2.60's raylet on a busy machine: the dashboard agent's port file came late
            raise subprocess.CalledProcessError(1, ["ray", "start"], stderr=b"...\nThe current node timed out during startup.")

    assert supervise(start, lambda: cleaned.append(1) or [], timeline.note, time.time() + 60, retry_after_s=0.01)
    kinds = [(e["kind"], e["tries"]) for e in timeline.events]
    assert kinds == [("rejoin_failed", 1), ("rejoin_failed", 2), ("rejoined", 3)] and len(cleaned) == 2
    assert timeline.events[0]["detail"] == "The current node timed out during startup."


def test_the_supervisor_gives_up_at_its_deadline():
    timeline = Timeline()

    def start():
        raise subprocess.TimeoutExpired(["ray", "start"], 300)

    assert not supervise(start, lambda: [], timeline.note, time.time() + 0.05, retry_after_s=0.02)
    assert {e["kind"] for e in timeline.events} == {"rejoin_failed"}
    assert timeline.events[0]["detail"] == "TimeoutExpired"
