"""A warm reader with a stand-in pool, for tests/serve/test_warm.py (no model, no index).

    python -m tests.serve.warm_fakes ARGS...          the reader (serve.cli.warm.worker), its
                                                      pool conftest.py's FakePool
    python -m tests.serve.warm_fakes client ARGS...   `eor ARGS...` that starts such a reader

The pool writes what happens to it to $EOR_HOME/fake-events (one "event pid" line each: make,
load, close); its first load sleeps $EOR_FAKE_LOAD_S seconds (an engine start), and fails as a
missing index does with $EOR_FAKE_NO_INDEX=1; a question starting "slowly" takes SLOW_S seconds.
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from tests.serve.conftest import FakeEngine, FakePool

SPECS = ["Wiki@10", "SE@1", "PK", "ReFree"]
SLOW_S = 3.0


def answers(question):
    return {"Wiki@10": "Leonardo da Vinci", "SE@1": "Leonardo da Vinci.", "PK": "Michelangelo",
            "ReFree": TimeoutError("deadline exceeded")}


def record(event: str) -> None:
    home = Path(os.environ["EOR_HOME"])
    home.mkdir(parents=True, exist_ok=True)
    with open(home / "fake-events", "a") as f:
        f.write(f"{event} {os.getpid()}\n")


def events(home: Path) -> list[str]:
    path = home / "fake-events"
    return [line.split()[0] for line in path.read_text().splitlines()] if path.exists() else []


class ClosingEngine(FakeEngine):
    def close(self) -> None:
        record("close")


class EventPool(FakePool):
    def __init__(self):
        super().__init__(SPECS, answers)
        self.reader.engine = ClosingEngine()
        self.loaded = False

    def load(self) -> "EventPool":
        if os.environ.get("EOR_FAKE_NO_INDEX") == "1":
            from retrievers.sources.base import MissingIndexError

            raise MissingIndexError("no Wiki (dense) index at /nowhere: build it with `eor index`")
        if not self.loaded:
            time.sleep(float(os.environ.get("EOR_FAKE_LOAD_S", "0")))
            self.loaded = True
            record("load")
        return super().load()


    def run(self, questions, *args, **kwargs):
        if any(q.startswith("slowly") for q in questions):
            time.sleep(SLOW_S)
        return super().run(questions, *args, **kwargs)


def make_pool(config, engine=None) -> EventPool:
    record("make")
    return EventPool()


def use_fake_reader() -> None:
    """This process's `eor ask` starts the stand-in reader (this module) instead of the real one."""
    import serve.cli.warm.client

    serve.cli.warm.client.WORKER_MODULE = "tests.serve.warm_fakes"


if __name__ == "__main__":
    if sys.argv[1:2] == ["client"]:
        from serve.cli import main

        use_fake_reader()
        sys.exit(main(sys.argv[2:]))
    import serve.builder
    from serve.cli.warm.worker import main

    serve.builder.make_pool = make_pool
    sys.exit(main(sys.argv[1:]))
