"""The warm reader: a background process that keeps the pool of an in-process `eor ask` loaded
(reader engine, encoder, indexes, the voter's metric models) for the next ask, and answers it
exactly as that ask would in its own process: the same code (`answer_here`) writing to the
asking process's stdout and stderr.

One per $EOR_HOME (its lock); asks run one at a time, in arrival order; a thread answers
`eor status` and `eor stop` at once, whatever the reader is busy with. It ends after its idle
time (the last ask's --keep-warm), on `eor stop`, SIGTERM or SIGINT, when an ask for another
config replaces it (after the questions it took), and when its pool did not load or broke; it
removes its socket and state file and stops its engine as it goes, and says why in the log.

    python -m serve.cli.warm.worker --key K --keep-warm-s S --about JSON   (started by `eor ask`)
"""
from __future__ import annotations

import argparse
import errno
import json
import os
import queue
import signal
import sys
import threading
import time
import traceback
from contextlib import contextmanager
from dataclasses import dataclass

from serve.app.errors import engine_died, engine_stopped
from serve.cli.common import _quiet_logs, stop_on_sigterm
from serve.cli.console import for_terminal, log_path
from serve.cli.warm.client import format_duration
from serve.cli.warm.place import WarmPlace
from serve.cli.warm.pools import Kept
from serve.cli.warm.procs import children, descendants, process_start, rss_bytes, stop_processes
from serve.cli.warm.wire import Channel

ENGINE_EXIT_S = 30.0  # how long the engine's processes may take to end after its shutdown before they are killed

_GONE = (errno.EPIPE, errno.EIO, errno.ECONNRESET)  # writing to an ask that has ended


@dataclass
class Ask:
    channel: Channel
    hello: dict
    fds: list[int]  # the asking process's stdout and stderr (pipes)

    def finish(self, **reply) -> None:
        try:
            self.channel.send(**reply)
        except OSError:
            pass  # the ask has ended
        self.channel.close()
        for fd in self.fds:
            try:
                os.close(fd)
            except OSError:
                pass
        self.fds = []


class Worker:
    def __init__(self, place: WarmPlace, key: str, about: dict, keep_warm_s: float):
        self.place, self.key, self.about, self.keep_warm_s = place, key, about, keep_warm_s
        self.pools = Kept()
        self.asks: queue.Queue[Ask | None] = queue.Queue()
        self.lock = threading.Lock()  # accepting / retiring, against the queue
        self.accepting, self.retiring, self.stop_asked, self.broken, self.gone = True, False, False, False, False
        self.started, self.answered = time.time(), 0
        self.deadline = time.monotonic() + keep_warm_s
        self.busy_since: float | None = None
        self.log_fd = os.dup(2)  # the log this process was started with
        self.listener = None

    def run(self) -> int:
        stop_on_sigterm()
        reason = "ended"
        try:
            self.listener = self.place.listen()
            self._write_state()
            threading.Thread(target=self._accept, name="warm-accept", daemon=True).start()
            self.log(f"started for {self.about}")
            reason = self._serve()
        except KeyboardInterrupt:
            reason = "stopped by `eor stop`" if self.stop_asked else "stopped by a signal (SIGTERM or SIGINT)"
        finally:
            self._close()
            self.log(reason)
        return 0

    def _serve(self) -> str:
        while True:
            with self.lock:
                if self.retiring and self.asks.empty():
                    self.accepting = False
                    return "ended: an ask for another config replaces it"
            try:
                ask = self.asks.get(timeout=max(0.0, self.deadline - time.monotonic()))
            except queue.Empty:
                with self.lock:
                    if not self.asks.empty():
                        continue
                    self.accepting = False
                return f"ended after {format_duration(self.keep_warm_s)} idle"
            if ask is None:  # woken: retiring
                continue
            self._answer(ask)
            self.deadline = time.monotonic() + self.keep_warm_s
            if self.broken or not self.pools.warm:
                with self.lock:
                    self.accepting = False
                if self.broken:
                    return "ended: its pool broke"
                return "ended: the ask ended before the pool was ready" if self.gone else "ended: nothing loaded to keep"

    def _answer(self, ask: Ask) -> None:
        from serve.cli import run_reporting_errors
        from serve.cli.ask import answer_here

        rc, error = 1, None
        self.busy_since = time.monotonic()
        try:
            self.keep_warm_s = float(ask.hello.get("keep_warm_s", self.keep_warm_s))
            args = argparse.Namespace(**ask.hello["args"])

            def command() -> int:
                os.chdir(ask.hello["cwd"])  # relative paths as the ask gave them (a missing folder: its error)
                return answer_here(args, self.pools)
            with self._streams(ask):
                rc = run_reporting_errors(command)
        except KeyboardInterrupt:
            ask.finish(rc=130, error="the warm reader was stopped before it answered", warm=False, pid=os.getpid())
            raise
        except Exception as exc:
            if isinstance(exc, OSError) and exc.errno in _GONE:  # only writing failed: the pool is fine
                self.gone = not self.pools.warm
                self.log("the ask ended before its answer was written")
            else:
                self.broken = True
                self.log(f"an ask failed:\n{traceback.format_exc()}")
                what = engine_stopped(exc) if engine_died(exc, pipes=False) else f"{type(exc).__name__}: {exc}"
                error = f"the warm reader failed: {what} (details in {log_path()})"
        finally:
            self.busy_since = None
        self.answered += 1
        ask.finish(rc=rc, error=error, pid=os.getpid(), keep_warm_s=self.keep_warm_s,
                   warm=self.pools.warm and not self.broken and not self.retiring)
        self._write_state()

    @contextmanager
    def _streams(self, ask: Ask):
        """This process's stdout and stderr are the ask's while it answers, then the log again."""
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(ask.fds[0], 1)
        os.dup2(ask.fds[1], 2)
        try:
            with for_terminal(bool(ask.hello.get("terminal"))):
                yield
                sys.stdout.flush()
                sys.stderr.flush()
        finally:
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except OSError:
                    pass
            os.dup2(self.log_fd, 1)
            os.dup2(self.log_fd, 2)

    # ---- the accepting thread ---------------------------------------------------------
    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self.listener.accept()
            except OSError:
                return  # closed: the reader is ending
            threading.Thread(target=self._greet, args=(Channel(sock),), daemon=True).start()

    def _greet(self, channel: Channel) -> None:
        try:
            if channel.peer_uid() not in (None, os.getuid()):
                channel.close()
                return
            hello = channel.receive(10.0) or {}
            op = hello.get("op")
            if op == "ask":
                self._take(channel, hello)
                return
            if op == "status":
                channel.send(**self.status())
            elif op == "stop":
                channel.send(stopping=os.getpid())
                self.stop_asked = True
                os.kill(os.getpid(), signal.SIGTERM)
            elif op == "retire":
                with self.lock:
                    self.retiring = True
                    self.place.remove_files()  # new asks start the next reader once this one has ended
                self.asks.put(None)
                channel.send(retiring=os.getpid())
            channel.close()
        except OSError:
            channel.close()

    def _take(self, channel: Channel, hello: dict) -> None:
        """Queue an ask: its output pipes come once it is known to be this reader's."""
        with self.lock:
            refused = "stopping" if not self.accepting or self.retiring else None
        if refused is None and hello.get("key") != self.key:
            refused = "other-config"
        if refused:
            channel.send(refused=refused, pid=os.getpid())
            channel.close()
            return
        channel.send(send="fds")
        ask = Ask(channel, hello, channel.receive_fds(2, 10.0))
        with self.lock:
            if not self.accepting or self.retiring:
                ask.finish(refused="stopping", pid=os.getpid())
                return
            ask.channel.send(ahead=self.asks.qsize() + (self.busy_since is not None))
            self.asks.put(ask)

    # ---- state --------------------------------------------------------------------------
    def status(self) -> dict:
        now = time.monotonic()
        busy = self.busy_since is not None
        return {"pid": os.getpid(), "about": self.about, "started": self.started, "answered": self.answered,
                "keep_warm_s": self.keep_warm_s, "warm": self.pools.warm, "retiring": self.retiring,
                "busy_s": round(now - self.busy_since, 1) if busy else None, "queued": self.asks.qsize(),
                "idle_left_s": None if busy else round(max(0.0, self.deadline - now), 1),
                "memory_bytes": rss_bytes(os.getpid())}

    def _write_state(self) -> None:
        """pid and what it holds (`eor status` without asking it), and its engine process, which
        `clear_stale` stops should this reader be killed."""
        with self.lock:
            if self.retiring or not self.accepting:
                return
            kids = [{"pid": p, "start": process_start(p)} for p in children(os.getpid())]
            self.place.write_state({"pid": os.getpid(), "start": process_start(os.getpid()), "about": self.about,
                                    "started": self.started, "children": kids})

    def _close(self) -> None:
        """Refuse what is queued, remove the socket and state file, stop the engine; the lock
        goes with the process."""
        with self.lock:
            self.accepting = False
            self.place.remove_files()
        if self.listener is not None:
            try:
                self.listener.shutdown(2)  # wakes the accepting thread
            except OSError:
                pass
            self.listener.close()
        while not self.asks.empty():
            ask = self.asks.get_nowait()
            if ask is not None:
                ask.finish(refused="stopping", pid=os.getpid())
        engine = [(p, process_start(p)) for p in descendants(os.getpid())]
        self.pools.close()
        killed = stop_processes(engine, ENGINE_EXIT_S)  # gone before the lock is: no orphaned engine
        if killed:
            self.log(f"stopped {len(killed)} engine process(es) still running {ENGINE_EXIT_S:g} s after its shutdown")

    def log(self, message: str) -> None:
        line = f"{time.strftime('%Y-%m-%d %H:%M:%S')} eor warm reader pid {os.getpid()}: {message}\n"
        os.write(self.log_fd, line.encode())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m serve.cli.warm.worker", description=__doc__.splitlines()[0])
    p.add_argument("--key", required=True, help="what the pool is made of (serve/cli/warm/identity.py)")
    p.add_argument("--keep-warm-s", type=float, required=True, help="idle seconds before it ends")
    p.add_argument("--about", default="{}", help="JSON: what `eor status` shows it holds")
    args = p.parse_args(argv)
    _quiet_logs()
    place = WarmPlace.of_home()
    if place.hold() is None:
        print(f"eor warm reader: another one holds {place.lock_path}; not starting", file=sys.stderr)
        return 3
    return Worker(place, args.key, json.loads(args.about), args.keep_warm_s).run()


if __name__ == "__main__":
    sys.exit(main())
