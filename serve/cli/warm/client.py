"""`eor ask` through the warm reader: find the one of this $EOR_HOME (or start it), hand it the
question and this process's output pipes, copy what it writes to this terminal, and say on the
last line that it stays warm and how to end it."""
from __future__ import annotations

import json
import os
import re
import select
import subprocess
import sys
import time

from serve.cli.warm.place import WarmPlace
from serve.cli.warm.wire import Channel

WORKER_MODULE = "serve.cli.warm.worker"  # what `python -m` runs in the background
REPLY_S = 10.0  # a live reader's accepting thread answers at once, whatever it is busy with
START_S = 60.0  # for a starting reader to listen (imports), or an ending one to exit
FINISH_S = 600.0  # for a reader that ends (another config's ask replaced it) to finish its questions
ENV_KEEP_WARM = "EOR_KEEP_WARM"


class WarmUnavailable(Exception):
    """No warm reader could take the ask (it answers in this process instead)."""


def parse_duration(text: str) -> float:
    """Seconds from "300", "90s", "5m", "1h" (0: none)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(s|m|min|h)?\s*", str(text))
    if not m:
        raise ValueError(f"not a duration: {text!r} (e.g. 300, 90s, 5m, 1h)")
    return float(m.group(1)) * {None: 1, "s": 1, "m": 60, "min": 60, "h": 3600}[m.group(2)]


def format_duration(seconds: float) -> str:
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{seconds / 3600:g} h"
    if seconds >= 60 and seconds % 60 == 0:
        return f"{seconds / 60:g} min"
    if seconds >= 60:
        return f"{int(seconds // 60)} min {int(seconds % 60)} s"
    return f"{seconds:.0f} s"


def keep_warm_seconds(args, config) -> float:
    """--no-warm / --keep-warm, else $EOR_KEEP_WARM, else the config's ask.keep_warm_s."""
    if getattr(args, "no_warm", False):
        return 0.0
    for given, where in ((getattr(args, "keep_warm", None), "--keep-warm"), (os.environ.get(ENV_KEEP_WARM), ENV_KEEP_WARM)):
        if given not in (None, ""):
            try:
                return parse_duration(given)
            except ValueError as exc:
                raise ValueError(f"{where}: {exc}") from None
    return float(config.ask.keep_warm_s)


def ask_warm(args) -> int | None:
    """The exit status of the ask the warm reader answered, or None: answer in this process
    (--local, --no-warm, --verbose: library logs on this terminal; or no reader could start)."""
    from retrievers.pool import check_question
    from serve.cli.common import _config
    from serve.cli.warm.identity import about, reader_key

    config = _config(args)
    keep = keep_warm_seconds(args, config)
    if getattr(args, "local", False) or getattr(args, "verbose", False) or keep <= 0:
        return None
    for q in args.question:
        check_question(q)  # refuse bad input before starting anything
    place = WarmPlace.of_home()
    hello = {"op": "ask", "key": reader_key(config), "cwd": os.getcwd(), "keep_warm_s": keep,
             "args": {k: v for k, v in vars(args).items() if k != "func"}, "terminal": os.isatty(2)}
    for _ in range(3):  # again when the reader ended before it began this ask (idle timeout, eor stop)
        try:
            channel = _open(place, hello, about(config))
        except WarmUnavailable as exc:
            print(f"eor: warning: {exc}; answering in this process", file=sys.stderr)
            return None
        with channel:
            final = _hand_over(channel)
        if final is None or "refused" not in final:
            break
    if final is None or "refused" in final:
        print(f"eor: error: the warm reader ended before it answered; its log: {_log()}", file=sys.stderr)
        return 1
    if final.get("error"):
        print(f"eor: error: {final['error']}", file=sys.stderr)
    if final.get("warm"):
        print(f"reader kept warm for {format_duration(keep)} (pid {final['pid']}): `eor stop` ends it",
              file=sys.stderr)
    return int(final["rc"])


def _open(place: WarmPlace, hello: dict, about: dict) -> Channel:
    """A channel to the reader, ready for this ask's output pipes; the reader is started when
    there is none, and replaced when it holds another config."""
    for _ in range(4):
        channel = _greet(place, hello)
        if isinstance(channel, Channel):
            return channel
        if channel == "other-config":
            print("eor: the warm reader holds another reader, index, config or code; replacing it", file=sys.stderr)
            request(place, "retire")
        with place.starting():
            _start(place, hello, about)
    raise WarmUnavailable("the warm reader did not take the question")


def _greet(place: WarmPlace, hello: dict) -> "Channel | str | None":
    """The channel when the reader takes the ask; why not when it refuses ("other-config",
    "stopping"); None when none answers."""
    sock = place.connect(REPLY_S)
    if sock is None:
        return None
    channel = Channel(sock)
    try:
        channel.send(**hello)
        reply = channel.receive(REPLY_S)
    except OSError:  # socket.timeout: a socket nobody accepts on (its reader was killed)
        reply = None
    if reply is not None and "send" in reply:
        return channel
    channel.close()
    return None if reply is None else reply.get("refused")


def _start(place: WarmPlace, hello: dict, about: dict) -> None:
    """Under the start lock: wait for a live reader to listen, or for an ending one to exit;
    with none alive, remove what a killed one left and start one."""
    proc, waited, deadline = None, False, time.monotonic() + START_S
    while True:
        pid = place.holder()
        if pid is None:
            if proc is not None and proc.poll() is not None:
                raise WarmUnavailable(f"the warm reader did not start (exit status {proc.returncode}); its log: {_log()}")
            if proc is None:
                stale = place.clear_stale()
                if stale:
                    print(f"eor: removed {stale}", file=sys.stderr)
                proc = _spawn(place, ["--key", hello["key"], "--keep-warm-s", str(hello["keep_warm_s"]),
                                      "--about", json.dumps(about)])
        elif (place.state() or {}).get("pid") == pid and place.socket_path.exists():
            return  # listening
        elif proc is None and not waited:  # a reader that is ending: it finishes its questions first
            waited, deadline = True, time.monotonic() + FINISH_S
            print("eor: waiting for the warm reader to finish its question and end...", file=sys.stderr)
        if time.monotonic() > deadline:
            raise WarmUnavailable(f"the warm reader (pid {pid}) neither listens nor ends")
        time.sleep(0.05)


def _spawn(place: WarmPlace, argv: list[str]) -> subprocess.Popen:
    """The reader, in the background: a session of its own (the terminal's Ctrl-C and hangup
    do not reach it), this code first on its path, output to the log."""
    from serve.cli.warm.identity import code_root

    log = _log()
    log.parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, EOR_HOME=str(place.root.parent))
    env["PYTHONPATH"] = os.pathsep.join([str(code_root()), *filter(None, [os.environ.get("PYTHONPATH")])])
    with open(log, "ab") as out:
        return subprocess.Popen([sys.executable, "-m", WORKER_MODULE, *argv], stdin=subprocess.DEVNULL,
                                stdout=out, stderr=out, cwd=place.root, env=env, start_new_session=True)


def _hand_over(channel: Channel) -> dict | None:
    """Pass the reader this ask's output pipes and copy what comes through them to this
    process's stdout and stderr until the reader's last message (None: it ended first)."""
    pipes = [os.pipe(), os.pipe()]
    try:
        channel.send_fds([w for _, w in pipes])
    finally:
        for _, w in pipes:
            os.close(w)
    sys.stdout.flush()
    sys.stderr.flush()
    copy = {pipes[0][0]: 1, pipes[1][0]: 2}
    try:
        final = _relay(channel, copy)
    finally:
        for r, _ in pipes:
            os.close(r)
    return final


def _relay(channel: Channel, copy: dict[int, int]) -> dict | None:
    final, done = None, False
    while not done:
        ready, _, _ = select.select([channel, *copy], [], [])
        for src in ready:
            if src is channel:
                messages = channel.arrived()
                done = messages is None
                for m in messages or ():
                    if "rc" in m or "refused" in m:
                        final, done = m, True
                    elif m.get("ahead"):
                        print(f"eor: the warm reader answers {m['ahead']} other ask(s) first", file=sys.stderr,
                              flush=True)
            elif not _copy(src, copy):
                del copy[src]
    while copy and (ready := select.select(list(copy), [], [], 0)[0]):  # what it wrote before its last message
        for src in ready:
            if not _copy(src, copy):
                del copy[src]
    return final


def _copy(src: int, copy: dict[int, int]) -> bool:
    data = os.read(src, 65536)
    view = memoryview(data)
    while view:
        view = view[os.write(copy[src], view):]
    return bool(data)


def request(place: WarmPlace, op: str) -> dict | None:
    """One control message to the live reader ("status", "stop", "retire") and its reply; None
    when no reader answers."""
    sock = place.connect(REPLY_S)
    if sock is None:
        return None
    with Channel(sock) as channel:
        try:
            channel.send(op=op)
            return channel.receive(REPLY_S)
        except OSError:  # socket.timeout too
            return None


def _log():
    from serve.cli.console import log_path

    return log_path()
