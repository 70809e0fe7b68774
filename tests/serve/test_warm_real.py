"""Issue 34, acceptance 2, with the real reader (Qwen2.5-Coder-0.5B on vLLM, CPU), the encoder
and indexes over 200 documents of the embedded corpus: the second `eor ask` right after the first
answers in <= 10 s through the warm reader, with the answers an in-process ask gives; a third
after the idle timeout starts again; nothing is left running after the timeout or `eor stop`.
The reader cache is off, so every ask runs its engine. Prints the timings (-s)."""
from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    from serve.engine.models import models_dir

    model = models_dir() / "qwen2.5-coder-0.5b"  # resolved before EOR_HOME moves to the temp folder
    if not (model / "config.json").exists():
        pytest.fail("reader model not prepared: run ./setup.sh (eor models prepare qwen2.5-coder-0.5b)")
    home = tmp_path_factory.mktemp("warm-home")
    mp = pytest.MonkeyPatch()
    mp.setenv("EOR_HOME", str(home))
    from retrievers.corpus import read_corpus
    from retrievers.encoder import Encoder
    from serve.builder import build_indexes

    build_indexes(list(itertools.islice(read_corpus(None), 200)), "t", Encoder(), show_progress=False)
    from retrievers.spec import PAPER_POOL

    (home / "eor.yaml").write_text(f"reader:\n  model: {model}\nindex:\n  name: t\ncache:\n  enabled: false\n"
                                   f"pool:\n  specs: {list(PAPER_POOL)}\n")  # one reader: the voter's fallback
    yield home
    subprocess.run([sys.executable, "-m", "serve.cli", "stop"], env=_env(home), cwd=ROOT)
    mp.undo()


def _env(home: Path) -> dict:
    env = dict(os.environ, EOR_HOME=str(home), PYTHONPATH=str(ROOT))
    env.pop("EOR_KEEP_WARM", None)
    return env


def eor(home: Path, *argv: str) -> tuple[subprocess.CompletedProcess, float]:
    t = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "serve.cli", *argv], env=_env(home), cwd=ROOT,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr
    return done, time.perf_counter() - t


def ask(home: Path, question: str, *flags: str):
    done, seconds = eor(home, "ask", question, "--config", str(home / "eor.yaml"), "--json", *flags)
    return json.loads(done.stdout), done.stderr, seconds


def same_answers(a: dict, b: dict) -> tuple:
    return ((a["answer"], a["retriever"], [(c["retriever"], c["answer"]) for c in a["candidates"]])
            == (b["answer"], b["retriever"], [(c["retriever"], c["answer"]) for c in b["candidates"]]), a, b)


def test_the_second_ask_answers_in_seconds_with_the_in_process_answers(home):
    from serve.cli.warm.place import WarmPlace
    from serve.cli.warm.procs import process_start

    place = WarmPlace(home / "warm")
    _, err1, first_s = ask(home, "who painted the mona lisa")
    assert "reader kept warm for 5 min" in err1
    pid = place.holder()
    engines = place.state()["children"]
    warm, err2, second_s = ask(home, "who wrote hamlet")
    assert place.holder() == pid and f"(pid {pid})" in err2
    # answered by the engine the first ask started, still the same process (how long it took: a benchmark's)
    assert engines and all(c in place.state()["children"] for c in engines)
    here, _, here_s = ask(home, "who wrote hamlet", "--no-warm")
    status = json.loads(eor(home, "status", "--json")[0].stdout)["warm_reader"]
    print(f"\nfirst ask (starts the warm reader) {first_s:.1f} s; second (warm) {second_s:.1f} s; "
          f"in-process --no-warm {here_s:.1f} s; warm reader memory {status['memory_bytes'] / 2**30:.2f} GiB")
    assert same_answers(warm, here)[0], same_answers(warm, here)[1:]

    # the idle timeout: the next ask sets it; then nothing is left, and the ask after starts again
    _, err, _ = ask(home, "who discovered penicillin", "--keep-warm", "3s")
    assert "reader kept warm for 3 s" in err
    engine = place.state()["children"]
    assert engine, "the reader's engine process is recorded"
    deadline = time.monotonic() + 120
    while place.holder() is not None:
        assert time.monotonic() < deadline
        time.sleep(0.5)
    assert all(process_start(c["pid"]) != c["start"] for c in engine) and not place.socket_path.exists()
    _, err, third_s = ask(home, "who painted the mona lisa")
    new = place.holder()
    assert new not in (None, pid)
    print(f"third ask, after the idle timeout: {third_s:.1f} s")

    engine = place.state()["children"]
    stopped, _ = eor(home, "stop")
    assert stopped.stdout == f"stopped the warm reader (pid {new})\n" and place.holder() is None
    assert all(process_start(c["pid"]) != c["start"] for c in engine)
