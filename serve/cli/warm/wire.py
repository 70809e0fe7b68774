"""The warm reader's wire: one JSON object per line over its Unix socket, and an ask's output
pipes passed as descriptors (SCM_RIGHTS), so the reader writes straight to the `eor ask` that
asked, and nothing more once that ask has gone (a closed pipe)."""
from __future__ import annotations

import json
import os
import socket
import struct


class Channel:
    def __init__(self, sock: socket.socket):
        self.sock = sock
        self._buf = b""

    def __enter__(self) -> "Channel":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def fileno(self) -> int:
        return self.sock.fileno()

    def send(self, **message) -> None:
        self.sock.sendall(json.dumps(message).encode() + b"\n")

    def receive(self, timeout_s: float | None) -> dict | None:
        """The next message, or None when the other side closed (socket.timeout after timeout_s)."""
        self.sock.settimeout(timeout_s)
        while b"\n" not in self._buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                return None
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return json.loads(line)

    def arrived(self) -> list[dict] | None:
        """The messages that arrived (call when the socket is readable); None once it is closed."""
        self.sock.settimeout(None)
        chunk = self.sock.recv(65536)
        if not chunk:
            return None
        self._buf += chunk
        out = []
        while b"\n" in self._buf:
            line, _, self._buf = self._buf.partition(b"\n")
            out.append(json.loads(line))
        return out

    def send_fds(self, fds: list[int]) -> None:
        socket.send_fds(self.sock, [b"F"], fds)

    def receive_fds(self, count: int, timeout_s: float) -> list[int]:
        self.sock.settimeout(timeout_s)
        data, fds, _, _ = socket.recv_fds(self.sock, 1, count)
        if data != b"F" or len(fds) != count:
            for fd in fds:
                _close(fd)
            raise ConnectionError("expected the ask's output descriptors")
        return fds

    def peer_uid(self) -> int | None:
        """The uid of the process at the other end (None where the platform cannot say)."""
        if not hasattr(socket, "SO_PEERCRED"):
            return None
        _, uid, _ = struct.unpack("3i", self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                                 struct.calcsize("3i")))
        return uid

    def close(self) -> None:
        self.sock.close()


def _close(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass
