"""The warm reader `eor ask` leaves (serve/cli/warm/): started by the first ask, reused by the
next, ended by its idle time, SIGTERM and `eor stop`; one for two asks at the same time; what a
killed one left is found and removed; its answers are the in-process ones. Its pool is the
stand-in of tests/serve/warm_fakes.py, in a process of its own."""
from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from serve.cli import main
from serve.cli.warm.place import WarmPlace
from tests.serve.warm_fakes import events, make_pool

Q = "who painted the mona lisa"
VOTE = ["--equal-weights", "--metrics", "em"]
ROOT = Path(__file__).resolve().parents[2]


def wait_until(condition, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@pytest.fixture
def warm(eor_home, monkeypatch):
    """This test's $EOR_HOME, its `eor ask` starting the stand-in reader; the reader is ended after."""
    monkeypatch.delenv("EOR_KEEP_WARM", raising=False)
    monkeypatch.delenv("EOR_FAKE_LOAD_S", raising=False)
    use_fake_reader_here(monkeypatch)
    place = WarmPlace.of_home()
    yield place
    pid = place.holder()
    if pid is not None:
        os.kill(pid, signal.SIGTERM)
        wait_until(lambda: place.holder() is None)


def use_fake_reader_here(monkeypatch) -> None:
    import serve.cli.warm.client

    monkeypatch.setattr(serve.cli.warm.client, "WORKER_MODULE", "tests.serve.warm_fakes")


def ask(capfd, *args: str, rc: int = 0):
    code = main(["ask", Q, *VOTE, *args])
    out = capfd.readouterr()
    assert code == rc, out.err
    return out


def kept_pid(err: str) -> int:
    m = re.search(r"reader kept warm for .* \(pid (\d+)\): `eor stop` ends it\n\Z", err)
    assert m, err
    return int(m.group(1))


def test_the_first_ask_starts_the_warm_reader_and_the_next_ask_is_answered_by_it(warm, eor_home, capfd):
    first = ask(capfd)
    assert "A: Leonardo da Vinci" in first.out and "stage 1/1: Wiki@10, SE@1, PK, ReFree" in first.err
    pid = kept_pid(first.err)
    assert first.err.endswith("reader kept warm for 5 min (pid %d): `eor stop` ends it\n" % pid)  # its last line
    assert warm.holder() == pid and events(eor_home) == ["make", "load"]
    assert oct(warm.socket_path.stat().st_mode & 0o777) == "0o600" and oct(warm.root.stat().st_mode & 0o777) == "0o700"

    second = ask(capfd, "--json")
    assert kept_pid(second.err) == pid and json.loads(second.out)["answer"] == "Leonardo da Vinci"
    assert events(eor_home) == ["make", "load"]  # the same pool: nothing built or loaded again

    assert main(["status"]) == 0
    status = capfd.readouterr().out
    assert f"warm reader: pid {pid}, readers qwen2.5-coder-0.5b, qwen2.5-coder-1.5b, index default; idle, ends in " in status
    assert "2 asks answered" in status and "`eor stop` ends it" in status
    assert main(["status", "--json"]) == 0
    doc = json.loads(capfd.readouterr().out)["warm_reader"]
    assert doc["running"] and doc["pid"] == pid and doc["answered"] == 2 and 0 < doc["idle_left_s"] <= 300
    assert doc["memory_bytes"] > 10 * 2**20


def test_answers_through_the_warm_reader_are_the_in_process_answers(warm, eor_home, capfd, monkeypatch):
    import serve.builder

    warm_json, warm_text = ask(capfd, "--json").out, ask(capfd, "--retrievers", "PK,SE@1").out
    monkeypatch.setattr(serve.builder, "make_pool", make_pool)  # the same stand-in pool, in this process
    here_json, here_text = ask(capfd, "--json", "--no-warm").out, ask(capfd, "--retrievers", "PK,SE@1", "--local").out
    assert warm_json == here_json
    timeless = lambda text: re.sub(r"\(\d+\.\d s;", "(T s;", text)  # noqa: E731
    assert timeless(warm_text) == timeless(here_text) and "A: Leonardo da Vinci." in warm_text


def test_no_warm_local_and_keep_warm_0_leave_nothing_running(warm, eor_home, capfd, monkeypatch):
    import serve.builder

    monkeypatch.setattr(serve.builder, "make_pool", make_pool)
    for flags in (["--no-warm"], ["--local"], ["--keep-warm", "0"]):
        out = ask(capfd, *flags)
        assert "kept warm" not in out.err and warm.holder() is None
    monkeypatch.setenv("EOR_KEEP_WARM", "0")
    assert "kept warm" not in ask(capfd).err and warm.holder() is None
    assert events(eor_home) == ["make", "load", "close"] * 4  # each in this process, its engine stopped


def test_it_ends_after_its_idle_time(warm, eor_home, capfd):
    err = ask(capfd, "--keep-warm", "1s").err
    assert "reader kept warm for 1 s" in err
    wait_until(lambda: warm.holder() is None)
    assert events(eor_home)[-1] == "close" and not warm.socket_path.exists() and not warm.state_path.exists()
    assert "ended after 1 s idle" in (eor_home / "logs" / "eor.log").read_text()


def test_sigterm_ends_it_cleanly_even_mid_question(warm, eor_home, capfd):
    pid = kept_pid(ask(capfd).err)
    os.kill(pid, signal.SIGTERM)
    wait_until(lambda: warm.holder() is None)
    assert events(eor_home) == ["make", "load", "close"] and not warm.socket_path.exists()
    assert "stopped by a signal" in (eor_home / "logs" / "eor.log").read_text()

    # a question under way: its ask hears why, and nothing stays behind
    client = _client(eor_home, "ask", Q, *VOTE, load_s=30)
    wait_until(lambda: events(eor_home)[3:] == ["make"] and _busy(warm))  # loading (30 s)
    os.kill(warm.holder(), signal.SIGTERM)
    out, err = client.communicate(timeout=30)
    assert client.returncode == 130 and "the warm reader was stopped before it answered" in err
    wait_until(lambda: warm.holder() is None)
    assert events(eor_home)[3:] == ["make", "close"] and not warm.state_path.exists()


def test_an_ask_that_goes_away_mid_answer_leaves_the_reader_warm(warm, eor_home, capfd):
    pid = kept_pid(_client(eor_home, "ask", Q, *VOTE).communicate(timeout=60)[1])  # the same key as the next
    client = _client(eor_home, "ask", "slowly: who painted the mona lisa", *VOTE)
    wait_until(lambda: _busy(warm))
    client.kill()  # Ctrl-C or a closed terminal: its pipes close
    client.wait()
    log = eor_home / "logs" / "eor.log"
    wait_until(lambda: "the ask ended before its answer was written" in log.read_text())
    assert warm.holder() == pid and events(eor_home) == ["make", "load"]
    assert kept_pid(_client(eor_home, "ask", Q, *VOTE).communicate(timeout=60)[1]) == pid


def test_eor_stop_ends_it_and_status_says_so(warm, eor_home, capfd):
    pid = kept_pid(ask(capfd).err)
    assert main(["stop"]) == 0
    assert capfd.readouterr().out == f"stopped the warm reader (pid {pid})\n"
    assert warm.holder() is None and events(eor_home)[-1] == "close"
    assert main(["stop"]) == 0 and capfd.readouterr().out == "no warm reader running\n"
    assert main(["status"]) == 0
    assert capfd.readouterr().out.startswith("warm reader: none; the next `eor ask` starts one\n")


def test_two_asks_at_the_same_time_start_one_reader(warm, eor_home):
    clients = [_client(eor_home, "ask", Q, *VOTE, "--json", load_s=2) for _ in range(2)]
    outs = [c.communicate(timeout=60) for c in clients]
    assert [c.returncode for c in clients] == [0, 0], outs
    assert all(json.loads(out)["answer"] == "Leonardo da Vinci" for out, _ in outs)
    pids = {kept_pid(err) for _, err in outs}
    assert len(pids) == 1 and events(eor_home) == ["make", "load"]  # one reader, one pool


def test_a_killed_reader_is_found_and_replaced(warm, eor_home, capfd, monkeypatch):
    pid = kept_pid(ask(capfd).err)
    os.kill(pid, signal.SIGKILL)  # no cleanup: its socket and state file stay
    wait_until(lambda: warm.holder() is None)
    assert warm.socket_path.exists() and warm.state_path.exists()
    assert main(["status"]) == 0
    assert f"removed the socket of the warm reader pid {pid}, which was killed" in capfd.readouterr().out
    assert not warm.socket_path.exists()

    # a socket something still listens on, nobody answering (a killed reader's engine process kept it)
    import serve.cli.warm.client

    monkeypatch.setattr(serve.cli.warm.client, "REPLY_S", 1.0)
    orphan = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    orphan.bind(str(warm.socket_path))
    orphan.listen(4)
    try:
        out = ask(capfd)
    finally:
        orphan.close()
    new = kept_pid(out.err)
    assert new != pid and "A: Leonardo da Vinci" in out.out and "eor: removed the socket" in out.err


def test_an_ask_for_another_config_replaces_the_reader(warm, eor_home, capfd):
    pid = kept_pid(ask(capfd).err)
    out = ask(capfd, "--index", "other")
    assert "the warm reader holds another reader, index, config or code; replacing it" in out.err
    new = kept_pid(out.err)
    assert new != pid and events(eor_home) == ["make", "load", "close", "make", "load"]
    assert main(["status", "--json"]) == 0
    assert json.loads(capfd.readouterr().out)["warm_reader"]["about"]["index"] == "other"


def test_errors_are_the_in_process_ones_and_a_reader_without_a_pool_ends(warm, eor_home, capfd, monkeypatch):
    assert main(["ask", "   ", *VOTE]) == 2  # a blank question: refused before anything starts
    err = capfd.readouterr().err
    assert "eor: error:" in err and warm.holder() is None and events(eor_home) == []
    monkeypatch.setenv("EOR_FAKE_NO_INDEX", "1")
    err = ask(capfd, rc=2).err
    assert "eor: error: no Wiki (dense) index at /nowhere: build it with `eor index`" in err
    assert "kept warm" not in err and "Traceback" not in err
    wait_until(lambda: warm.holder() is None)  # nothing loaded: nothing to keep
    monkeypatch.delenv("EOR_FAKE_NO_INDEX")
    pid = kept_pid(ask(capfd).err)
    err = ask(capfd, "--retrievers", "Wiki@10,Nope@1", rc=2).err
    assert "eor: error:" in err and kept_pid(err) == pid  # a loaded reader stays for the next ask


def test_a_deep_eor_home_gets_a_socket_too(tmp_path, monkeypatch, capfd):
    home = tmp_path / ("d" * 60) / ("e" * 60)
    monkeypatch.setenv("EOR_HOME", str(home))
    use_fake_reader_here(monkeypatch)
    place = WarmPlace.of_home()
    assert len(str(place.socket_path)) > 108
    try:
        pid = kept_pid(ask(capfd).err)
        assert kept_pid(ask(capfd).err) == pid and events(home) == ["make", "load"]
    finally:
        assert main(["stop"]) == 0


def _client(home: Path, *argv: str, load_s: float = 0) -> subprocess.Popen:
    env = dict(os.environ, EOR_HOME=str(home), EOR_FAKE_LOAD_S=str(load_s), PYTHONPATH=str(ROOT))
    env.pop("EOR_KEEP_WARM", None)
    return subprocess.Popen([sys.executable, "-m", "tests.serve.warm_fakes", "client", *argv], env=env, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _busy(place: WarmPlace) -> bool:
    from serve.cli.status import warm_status

    return warm_status(place).get("busy_s") is not None


def test_keep_warm_comes_from_the_flag_else_the_environment_else_the_config(tmp_path, monkeypatch):
    from argparse import Namespace

    from serve.cli.warm.client import format_duration, keep_warm_seconds, parse_duration
    from serve.config import load_config

    assert [parse_duration(t) for t in ("300", "90s", "5m", "1.5 h", "0")] == [300, 90, 300, 5400, 0]
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration("soon")
    assert [format_duration(s) for s in (300, 90, 3600, 1, 59)] == ["5 min", "1 min 30 s", "1 h", "1 s", "59 s"]
    cfg = tmp_path / "eor.yaml"
    cfg.write_text("ask:\n  keep_warm_s: 42\n")
    config = load_config(cfg)
    monkeypatch.delenv("EOR_KEEP_WARM", raising=False)
    assert keep_warm_seconds(Namespace(), load_config()) == 300 and keep_warm_seconds(Namespace(), config) == 42
    monkeypatch.setenv("EOR_KEEP_WARM", "2m")
    assert keep_warm_seconds(Namespace(), config) == 120
    assert keep_warm_seconds(Namespace(keep_warm="10s"), config) == 10
    assert keep_warm_seconds(Namespace(keep_warm="10s", no_warm=True), config) == 0
    monkeypatch.setenv("EOR_KEEP_WARM", "later")
    with pytest.raises(ValueError, match="EOR_KEEP_WARM: not a duration"):
        keep_warm_seconds(Namespace(), config)


def test_the_readers_key_changes_with_what_the_pool_is_made_of(eor_home, tmp_path, monkeypatch):
    from dataclasses import replace

    from serve.cli.warm.identity import reader_key
    from serve.config import AskConfig, load_config

    monkeypatch.delenv("EOR_CPU_BF16", raising=False)  # the key below is this machine's own class
    config = load_config()
    key = reader_key(config)
    assert reader_key(replace(config, ask=AskConfig(keep_warm_s=1))) == key  # how long it stays is not the pool
    assert reader_key(load_config(None, {"index": {"name": "other"}})) != key
    assert reader_key(load_config(None, {"reader": {"model": "smollm2-135m"}})) != key
    monkeypatch.setenv("EOR_CPU_BF16", "0")  # the reader's arithmetic
    fp32 = reader_key(config)
    monkeypatch.setenv("EOR_CPU_BF16", "1")
    assert fp32 != reader_key(config)  # either class differs from the other, whichever this CPU is
    monkeypatch.delenv("EOR_CPU_BF16")
    index = eor_home / "indexes" / "default"
    index.mkdir(parents=True)
    (index / "index.json").write_text("{}")  # `eor index` rebuilt it
    assert reader_key(config) != key
    key = reader_key(config)
    monkeypatch.chdir(tmp_path)  # relative paths resolve elsewhere
    assert reader_key(config) != key


def test_kept_pools_keep_the_pool_and_metrics_and_count_each_ask(eor_home, monkeypatch):
    import serve.builder
    from serve.cli.warm.pools import Kept
    from serve.config import load_config
    from voter.question_vote import MetricOptions

    monkeypatch.setattr(serve.builder, "make_pool", make_pool)
    kept = Kept()
    config = load_config(None, {"index": {"name": "a"}})
    pool = kept.get(config)
    assert events(eor_home) == ["make"] and not kept.warm
    pool.reader.stats.calls = 5
    kept.release(pool)
    again = kept.get(config)
    assert again is pool and kept.warm and again.reader.stats.calls == 0  # each ask counts its own reader calls
    em = kept.metrics(MetricOptions(("em",)), pool.reader)
    assert kept.metrics(MetricOptions(("em",)), pool.reader) is em
    other = kept.get(load_config(None, {"index": {"name": "b"}}))
    assert other is not pool and events(eor_home) == ["make", "close", "make"] and not kept.warm
    kept.close()
    assert events(eor_home)[-1] == "close"
