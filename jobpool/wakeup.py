"""Same-host wake-ups: an enqueue pokes idle supervisors of its store (R11).

Each supervisor binds one Unix datagram socket in Linux's abstract namespace,
named after the store's real path, in one of ``SLOTS`` numbered places; an
enqueue sends one byte to every place after it commits. Nothing is written to
disk, a place nobody listens on refuses at once, and a lost datagram costs only
latency: the poll interval remains the fallback.
"""
from __future__ import annotations

import hashlib
import os
import socket
import sys

#: How many supervisors of one store on one host can be woken directly.
SLOTS = 8

_SUPPORTED = sys.platform.startswith("linux")


def _addresses(path: str) -> list[bytes]:
    digest = hashlib.sha1(os.path.realpath(path).encode()).hexdigest()[:20]
    return [b"\0jobpool-" + digest.encode() + b"-%d" % i for i in range(SLOTS)]


_send_sock: socket.socket | None = None
_send_pid = 0


def _sender() -> socket.socket:
    """One unbound sending socket per process, shared by every store it opens."""
    global _send_sock, _send_pid
    if _send_sock is None or _send_pid != os.getpid():
        _send_sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        _send_sock.setblocking(False)
        _send_pid = os.getpid()
    return _send_sock


class Notifier:
    """Sends wake-ups for one store; cheap enough to call after every commit."""

    def __init__(self, path: str) -> None:
        self._addresses = _addresses(path) if _SUPPORTED else []

    def notify(self) -> None:
        if not self._addresses:
            return
        sock = _sender()
        for address in self._addresses:
            try:
                sock.sendto(b"!", address)
            except OSError:
                pass  # nobody listening there, or its buffer is full: it is awake anyway


class Listener:
    """The supervisor's end: a socket to select on, drained on each wake."""

    def __init__(self, path: str) -> None:
        self.sock: socket.socket | None = None
        if not _SUPPORTED:
            return
        for address in _addresses(path):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            try:
                sock.bind(address)
            except OSError:
                sock.close()
                continue
            sock.setblocking(False)
            self.sock = sock
            break

    def fileno(self) -> int:
        return self.sock.fileno() if self.sock is not None else -1

    def drain(self) -> None:
        if self.sock is None:
            return
        try:
            while True:
                self.sock.recv(64)
        except (BlockingIOError, InterruptedError):
            pass

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None
