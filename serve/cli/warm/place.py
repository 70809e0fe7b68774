"""Where the warm reader of an $EOR_HOME lives, and whether it is alive: $EOR_HOME/warm/ (0700)
holds its socket (0600), its lock, the clients' start lock and its state file.

The reader holds a POSIX record lock on `reader.lock` for its whole life: the kernel drops it
when the process ends, however it ends, and a fork (vLLM's engine process) does not inherit it,
so "the lock is held" is "a reader is alive" and F_GETLK names its pid. A socket or state file
without a live holder is what a killed reader left: `clear_stale` removes it, with the engine
process such a reader may have left behind. Linux (F_GETLK's struct, /proc)."""
from __future__ import annotations

import fcntl
import json
import os
import signal
import socket
import struct
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from serve.cli.warm.procs import process_start
from serve.paths import eor_home

_FLOCK = "hhqqi4x"  # struct flock on 64-bit Linux: l_type, l_whence, l_start, l_len, l_pid
_SHORT_PATH = 100  # bytes; a socket address holds 107


@dataclass(frozen=True)
class WarmPlace:
    root: Path

    @classmethod
    def of_home(cls) -> "WarmPlace":
        return cls(eor_home().resolve() / "warm")

    @property
    def socket_path(self) -> Path:
        return self.root / "reader.sock"

    @property
    def lock_path(self) -> Path:
        return self.root / "reader.lock"

    @property
    def state_path(self) -> Path:
        return self.root / "reader.json"

    def ensure(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(self.root, 0o700)

    def holder(self) -> int | None:
        """The pid of the live reader (the holder of its lock), or None."""
        try:
            fd = os.open(self.lock_path, os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            probe = struct.pack(_FLOCK, fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0)
            kind, _, _, _, pid = struct.unpack(_FLOCK, fcntl.fcntl(fd, fcntl.F_GETLK, probe))
        finally:
            os.close(fd)
        return None if kind == fcntl.F_UNLCK else pid

    def hold(self) -> int | None:
        """The reader takes its lock: the open descriptor to keep for life (closing any
        descriptor of the file in this process drops it), or None when another reader holds it."""
        self.ensure()
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return None
        return fd

    @contextmanager
    def starting(self):
        """Held by a client while it looks for a reader and starts one: two `eor ask`s at the
        same time start one reader, not two (flock: threads of one process exclude each other too)."""
        self.ensure()
        fd = os.open(self.root / "start.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def state(self) -> dict | None:
        try:
            return json.loads(self.state_path.read_text())
        except (FileNotFoundError, ValueError):
            return None

    def write_state(self, state: dict) -> None:
        tmp = self.state_path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(state, f)
        os.replace(tmp, self.state_path)

    def remove_files(self) -> None:
        """The reader's socket and state file (the reader itself on its way out, before it
        drops its lock)."""
        for path in (self.socket_path, self.state_path):
            path.unlink(missing_ok=True)

    def clear_stale(self) -> str | None:
        """What a killed reader left, removed (call only when `holder()` is None): a line
        saying what, or None when nothing was left."""
        state = self.state()
        if state is None and not self.socket_path.exists():
            return None
        stopped = [c["pid"] for c in (state or {}).get("children", ()) if _same_process(c)]
        for pid in stopped:
            os.kill(pid, signal.SIGTERM)
        self.remove_files()
        what = "the socket of a warm reader that was killed"
        if state is not None:
            what = f"the socket of the warm reader pid {state.get('pid')}, which was killed"
        return what + (f" (and stopped its engine process {', '.join(map(str, stopped))})" if stopped else "")

    def listen(self) -> socket.socket:
        """The reader's socket, bound with 0600 permissions, listening."""
        self.socket_path.unlink(missing_ok=True)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)
        try:
            with _address(self.socket_path) as address:
                sock.bind(address)
        finally:
            os.umask(old)
        os.chmod(self.socket_path, 0o600)
        sock.listen(16)
        return sock

    def connect(self, timeout_s: float) -> socket.socket | None:
        """A connection to the reader's socket, or None when nothing listens there."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout_s)
        try:
            with _address(self.socket_path) as address:
                sock.connect(address)
        except OSError:
            sock.close()
            return None
        return sock


@contextmanager
def _address(path: Path):
    """A socket address for `path`: itself, or through a descriptor of its folder when it is
    longer than a socket address holds (a deep $EOR_HOME)."""
    if len(os.fsencode(path)) < _SHORT_PATH:
        yield str(path)
        return
    fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        yield f"/proc/self/fd/{fd}/{path.name}"
    finally:
        os.close(fd)


def _same_process(child: dict) -> bool:
    return process_start(child["pid"]) == child.get("start")
