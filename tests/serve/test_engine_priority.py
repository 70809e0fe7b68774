"""The quick reader first (serve/engine/priority.py): an engine's processes, every thread, niced;
the real vLLM engine's processes in tests/serve/test_reader_15b.py."""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from serve.engine.priority import child_pids, niceness, set_nice

# a process with four threads (the main one and three sleepers)
THREADED = ("import threading, time\n"
            "[threading.Thread(target=time.sleep, args=(30,), daemon=True).start() for _ in range(3)]\ntime.sleep(30)")


def nices(pid: int) -> set[int]:
    """The niceness of each of the process's threads (field 19 of /proc/PID/task/TID/stat)."""
    return {int(Path(f"/proc/{pid}/task/{t.id}/stat").read_text().rsplit(")", 1)[1].split()[16])
            for t in psutil.Process(pid).threads()}


@pytest.fixture
def threaded():
    proc = subprocess.Popen([sys.executable, "-c", THREADED])
    try:
        for _ in range(100):
            if psutil.Process(proc.pid).num_threads() >= 4:
                break
            time.sleep(0.02)
        yield proc
    finally:
        proc.kill()
        proc.wait()


def test_every_thread_of_the_process_is_niced(threaded):
    assert threaded.pid in child_pids()
    assert set_nice([threaded.pid], 10) >= 4
    assert nices(threaded.pid) == {10} == niceness([threaded.pid])


def test_a_process_that_ended_is_skipped_and_a_bad_niceness_refused(threaded):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    assert set_nice([gone.pid], 5) == 0
    with pytest.raises(ValueError, match="0 to 19"):
        set_nice([threaded.pid], 20)


def test_an_engine_nices_the_processes_its_start_adds_and_no_others(monkeypatch, threaded):
    from serve.engine import vllm_engine
    from serve.engine.vllm_engine import VLLMConfig, VLLMEngine

    started = []

    def start(self):
        started.append(subprocess.Popen([sys.executable, "-c", THREADED]))
        return object()
    monkeypatch.setattr(vllm_engine, "resolve_model", lambda name: Path("/m"))
    monkeypatch.setattr(vllm_engine, "is_chat_model", lambda path: False)
    monkeypatch.setattr(VLLMEngine, "_start", start)
    try:
        VLLMEngine(VLLMConfig(device="cpu", dtype="float32", cpu_nice=7, compile_cache=False)).load()
        assert nices(started[0].pid) == {7}
        assert nices(threaded.pid) == {0}  # there before the engine started: not its
    finally:
        for p in started:
            p.kill()
            p.wait()


def test_an_engine_whose_processes_cannot_be_niced_starts_and_says_so(monkeypatch, caplog):
    from serve.engine import vllm_engine
    from serve.engine.vllm_engine import VLLMConfig, VLLMEngine

    monkeypatch.setattr(vllm_engine, "resolve_model", lambda name: Path("/m"))
    monkeypatch.setattr(vllm_engine, "is_chat_model", lambda path: False)
    monkeypatch.setattr(vllm_engine, "set_nice", lambda pids, nice: 0)  # e.g. a sandbox that refuses setpriority
    monkeypatch.setattr(VLLMEngine, "_start", lambda self: object())
    engine = VLLMEngine(VLLMConfig(device="cpu", dtype="float32", cpu_nice=7, compile_cache=False)).load()
    assert engine._llm is not None
    assert "could not be set to nice 7; they share the cores" in caplog.text
