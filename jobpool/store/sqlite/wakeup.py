"""Same-host wake-ups: an enqueue pokes idle supervisors of its store (R11).

Each supervisor binds one Unix datagram socket in Linux's abstract namespace,
named after the store's real path, in the lowest free of ``SLOTS`` numbered
places; an enqueue sends one byte to each place in order after it commits, and
stops at the first place nobody listens on. Nothing is written to disk, and a
lost datagram costs only latency: the poll interval remains the fallback.

Stopping at the first empty place is what keeps a wake-up cheap: with one
supervisor an enqueue makes two ``sendto`` calls, not ``SLOTS`` (each refused
one cost ~5 us, a quarter of a non-durable enqueue). It relies on the places
in use having no gap. A new supervisor fills the lowest gap; when one exits
below another, the one above moves down at its next heartbeat
(``Listener.move_down``), so a gap lasts at most a second, and an enqueue
that meets it wakes that supervisor at its poll tick instead.
"""
from __future__ import annotations

import atexit
import os
import socket
import sys

from jobpool import core

#: How many supervisors of one store on one host can be woken directly.
SLOTS = 8

_SUPPORTED = sys.platform.startswith("linux")


try:
    # CPython's own SHA-1: the same digest as hashlib's, without loading OpenSSL (a
    # tenth of a producer's or a pool's imports here, ~2.5 ms, for one path's name).
    from _sha1 import sha1 as _sha1
except ImportError:  # another Python
    from hashlib import sha1 as _sha1


def _addresses(path: str) -> list[bytes]:
    digest = _sha1(os.path.realpath(path).encode()).hexdigest()[:20]
    return [b"\0jobpool-" + digest.encode() + b"-%d" % i for i in range(SLOTS)]


_send_sock: socket.socket | None = None
_send_pid = 0


def _sender() -> socket.socket:
    """One unbound sending socket per process, shared by every store it opens (closed
    at exit, so the interpreter's teardown has no open socket to warn about)."""
    global _send_sock, _send_pid
    if _send_sock is None or _send_pid != os.getpid():
        if _send_sock is None:
            atexit.register(_close_sender)
        _send_sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        _send_sock.setblocking(False)
        _send_pid = os.getpid()
    return _send_sock


def _close_sender() -> None:
    global _send_sock
    if _send_sock is not None and _send_pid == os.getpid():
        _send_sock.close()
    _send_sock = None


class Notifier:
    """Sends wake-ups for one store; cheap enough to call after every commit."""

    def __init__(self, path: str) -> None:
        self._addresses = tuple(_addresses(path)) if _SUPPORTED else ()

    def notify(self) -> None:
        """Wake the supervisors listening, up to the first place nobody does (in C when
        the core is built: a refused ``sendto`` raised and caught an exception in
        Python on every enqueue)."""
        if self._addresses:
            core.wake(_sender(), self._addresses)


class Listener:
    """The supervisor's end: a socket to select on, drained on each wake."""

    #: Every enqueue wakes the pools itself: no second look after a wake-up.
    look_again: float | None = None

    def __init__(self, path: str) -> None:
        self.sock: socket.socket | None = None
        #: The place bound, or None when every place is taken (poll only).
        self.place: int | None = None
        self._addresses = _addresses(path) if _SUPPORTED else []
        self._bind_lowest(len(self._addresses))

    def _bind_lowest(self, below: int) -> socket.socket | None:
        """Bind the lowest free place under ``below``; return the socket it replaced."""
        for place, address in enumerate(self._addresses[:below]):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            try:
                sock.bind(address)
            except OSError:
                sock.close()
                continue
            sock.setblocking(False)
            replaced, self.sock, self.place = self.sock, sock, place
            return replaced
        return None

    def move_down(self) -> socket.socket | None:
        """Take a lower place if one came free, so enqueuers find no gap below us.

        Returns the socket given up (the caller unregisters, then closes it), or
        None when nothing moved.
        """
        if self.place is None or self.place == 0:
            return None
        return self._bind_lowest(self.place)

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
