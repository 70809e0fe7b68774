"""Helpers shared by the bench scripts: question and corpus files, timing."""
from __future__ import annotations

import errno
import json
import os
import subprocess
import threading
import time
from contextlib import contextmanager
from pathlib import Path

from splits import SPLITS, split_assignment

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
DEFAULT_QUESTIONS = str(SHARED_DATA / "questions.dev.jsonl")
DEFAULT_CORPUS = str(SHARED_DATA / "corpus.jsonl")


def read_questions(path: str = DEFAULT_QUESTIONS, dataset: str | None = "nq-open-oracle",
                   limit: int | None = None, split: str = "all") -> list[dict]:
    """The file's questions of `dataset` (None: all) in file order, of the offline `split` only
    ("eval": questions no voter was fitted on; the split is `splits`', over the whole file)."""
    if not os.path.exists(path):
        raise SystemExit(f"questions file not found: {path}")
    if split not in SPLITS:
        raise SystemExit(f"split must be one of {', '.join(SPLITS)}, got {split!r}")
    with open(path, encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    part = split_assignment(str(r["qid"]) for r in rows) if split != "all" else {}
    out = []
    for r in rows:
        if (dataset and r.get("dataset") != dataset) or (part and part[str(r["qid"])] != split):
            continue
        out.append(r)
        if limit and len(out) >= limit:
            break
    return out


def read_corpus(path: str = DEFAULT_CORPUS) -> dict[str, dict]:
    """A `{"id","title","text","source"}` JSONL corpus as {id: record}, in file order; a bad
    line is an error naming the line."""
    if not os.path.exists(path):
        raise SystemExit(f"corpus file not found: {path}")
    out: dict[str, dict] = {}
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                r = json.loads(line)
                out[str(r["id"])] = {"id": str(r["id"]), "title": str(r.get("title", "")),
                                     "text": str(r["text"]), "source": str(r.get("source", ""))}
            except (json.JSONDecodeError, KeyError, TypeError) as exc:
                raise SystemExit(f"{path}:{lineno}: not a corpus record ({exc!r})") from exc
    return out


def start_niced(cmd: list[str], nice: int, **popen) -> subprocess.Popen:
    """Start a command that must yield the CPU to a service started elsewhere. Linux with autogroup
    (`/proc/sys/kernel/sched_autogroup_enabled`) shares the CPU between sessions first and by niceness
    only inside one: `nice -n 19` alone does not yield to a service another shell started. The command
    runs niced, in a session of its own (so Ctrl-C here does not reach it: stop it with `proc.send_signal`),
    whose group this process then nices too."""
    proc = subprocess.Popen(["nice", "-n", str(nice), *cmd], start_new_session=True, **popen)
    set_autogroup_nice(proc.pid, nice)
    return proc


def set_autogroup_nice(pid: int, nice: int, tries: int = 5) -> bool:
    """Nice the autogroup of `pid`'s session; False where the kernel has none or the process ended. The
    kernel refuses a second write within 100 ms (EAGAIN) without CAP_SYS_ADMIN: wait and write again."""
    path = Path(f"/proc/{pid}/autogroup")
    for _ in range(tries):
        try:
            path.write_text(str(nice))
            return True
        except OSError as exc:
            if exc.errno != errno.EAGAIN:
                return False
            time.sleep(0.11)
    return False


def write_json(report: dict, out: Path) -> str:
    """`report` as JSON in `out` (its folder made), by rename: a reader never sees half a file. Returns the text."""
    text = json.dumps(report, indent=1)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(text + "\n")
    tmp.replace(out)
    return text


def emit_json(report: dict, out: Path | None) -> None:
    """A bench's report: printed as JSON on stdout, and written to `out` too when given."""
    print(write_json(report, out) if out else json.dumps(report, indent=1))


@contextmanager
def timer(into: dict, key: str):
    t = time.perf_counter()
    yield
    into[key] = time.perf_counter() - t


class Timeline:
    """Events stamped with the seconds since it began, noted from many threads: the fault
    benches' record of Asks, Health polls, kills and rejoins (`events` is the timeline)."""

    def __init__(self) -> None:
        self.events: list[dict] = []
        self.t0 = time.time()
        self._lock = threading.Lock()

    def note(self, **event) -> None:
        with self._lock:
            self.events.append({"t": round(time.time() - self.t0, 2), **event})

    def elapsed(self) -> float:
        return time.time() - self.t0
