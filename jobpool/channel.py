"""The two one-way pipes between the supervisor and one child (R6's pipes).

A slot's child and the supervisor talk over two pipes, one each way, not over one
two-way socket pair. On a socket pair both directions share one wait queue: each
time the supervisor reads a child's reply, freeing the reply's buffer wakes whatever
waits on that socket, which is the child itself, asleep in its read for the next
job; and each message costs a socket buffer's allocation. A pipe wakes its reader
when data comes and its writer only when it was full (BENCHMARKS.md, the slots' pipes).

Each end is a ``Channel``: it reads from one pipe and writes to the other, with the
calls of a ``multiprocess`` connection that the pool uses (``recv_bytes``,
``send_bytes``, ``poll``, ``fileno`` for the side a selector waits on, ``close``), and
the same bytes on the wire: multiprocessing's framing, a 4-byte big-endian length (-1
then 8 bytes for a message over 2 GiB) before each message. The hot reads and writes
are ``core``'s, in C; these are the rest (a job's requests, an interrupt), read with
``os.readv`` here, so a pool's start does not load ``multiprocess`` and its pickler for
them (a fifth of what a pool imports). Closing an end closes both its descriptors: the
other side reads end-of-file, and a write to it fails with ``OSError`` (EPIPE).

A job may close or reuse the child's descriptors (``os.closerange(3, ...)``, then files
of its own on the freed numbers). The child's end knows what its pipes were
(``identities``) and the supervisor's descriptors, so the child can open new ends onto
the same pipes (``mend``, through ``/proc``) and still report the job's outcome, never
writing onto, or reading from, a number that is now the job's file (R43).
"""
from __future__ import annotations

import os
import select
import struct
import time

from jobpool import bounds


class PipeLost(OSError):
    """A job took the numbers of its child's pipes and no new end could be opened."""


class Channel:
    """One side of a slot's pipes: reads what the other side writes, and back."""

    __slots__ = ("_read_fd", "_write_fd", "_peer", "_pipes")

    def __init__(self, read_fd: int, write_fd: int, peer: tuple[int, int, int] | None = None) -> None:
        """``read_fd`` and ``write_fd``: the reading end of one pipe and the writing
        end of the other; ``peer``: the process at the other end and its descriptors
        (the one it reads what this end writes from, the one it writes with), which a
        child's end knows of its supervisor's (``mend``)."""
        self._read_fd = read_fd
        self._write_fd = write_fd
        self._peer = peer
        #: ``(device, inode)`` of the pipe read and of the pipe written.
        self._pipes = tuple((st.st_dev, st.st_ino) for st in map(os.fstat, self.descriptors()))

    def fileno(self) -> int:
        """The descriptor to read from (what a selector waits on)."""
        if self._read_fd < 0:
            raise OSError("the channel is closed")
        return self._read_fd

    def write_fileno(self) -> int:
        """The descriptor to write to."""
        if self._write_fd < 0:
            raise OSError("the channel is closed")
        return self._write_fd

    def descriptors(self) -> tuple[int, int]:
        """Both descriptors: the one read, the one written (what a forked child keeps, R43)."""
        return self._read_fd, self._write_fd

    def identities(self) -> list[tuple[int, int, int]]:
        """``(descriptor, device, inode)`` of both pipes as they were made, for
        ``core.OpenFiles`` to tell cheaply whether a job moved them."""
        return [(fd, *pipe) for fd, pipe in zip(self.descriptors(), self._pipes)]

    def mend(self) -> None:
        """Replace each descriptor of this end that no longer holds its pipe (a job
        closed it, or opened a file of its own on the number) by a new one onto the same
        pipe, opened through the other process's descriptor in ``/proc``; the old number
        is left to whoever holds it now (R43). Raises ``PipeLost`` when that cannot be
        had (no ``/proc``, the other end gone)."""
        for index, (fd, pipe) in enumerate(zip(self.descriptors(), self._pipes)):
            try:
                st = os.fstat(fd)
                if (st.st_dev, st.st_ino) == pipe:
                    continue
            except OSError:
                pass
            if self._peer is None:
                raise PipeLost(f"descriptor {fd} no longer holds the pool's pipe")
            pid, peer_read, peer_write = self._peer
            path = f"/proc/{pid}/fd/{peer_write if index == 0 else peer_read}"
            try:
                new = os.open(path, (os.O_RDONLY if index == 0 else os.O_WRONLY) | os.O_CLOEXEC)
            except OSError as exc:
                raise PipeLost(f"descriptor {fd} no longer holds the pool's pipe, and {path} "
                               f"cannot be opened: {exc.strerror}") from None
            st = os.fstat(new)
            if (st.st_dev, st.st_ino) != pipe:
                os.close(new)
                raise PipeLost(f"{path} is no longer the pool's pipe")
            if index == 0:
                self._read_fd = new
            else:
                self._write_fd = new

    # A job's own calls (a request, a progress report, a look for an interrupt) come
    # here, in the child, while the job runs: its end is mended first, so they never
    # read or write a file the job opened on a number the pipes had. The child's own
    # loop reads and writes in ``core`` and looks after each job (``child_main``).

    def recv_bytes(self) -> bytes:
        """The next message's bytes; EOFError when the other end closed between two."""
        if self._peer is not None:
            self.mend()
        fd = self.fileno()
        (size,) = struct.unpack("!i", _read_exactly(fd, 4, False))
        if size == -1:
            (size,) = struct.unpack("!Q", _read_exactly(fd, 8, True))
        if not 0 <= size <= bounds.MAX_MESSAGE_BYTES:
            raise ValueError(f"a message length of {size}")  # R65: no message
        return _read_exactly(fd, size, True)

    def send_bytes(self, data: bytes) -> None:
        # ``core`` loaded here, not with this module: a child loads it only once it has
        # forked (see ``child_main``; R43 keeps the store's modules out of a child).
        from jobpool import core
        if self._peer is not None:
            self.mend()
        core.write_message(self, data)

    def poll(self, timeout: float | None = 0.0) -> bool:
        """Whether a read would not wait (a message, or the other end's close), waiting
        up to ``timeout`` seconds (None: until then)."""
        if self._peer is not None:
            self.mend()
        waiter = select.poll()
        waiter.register(self.fileno(), select.POLLIN)
        return bool(waiter.poll(None if timeout is None else max(0.0, timeout) * 1000))

    def close(self) -> None:
        for fd in self.descriptors():
            if fd >= 0:
                os.close(fd)
        self._read_fd = self._write_fd = -1


def _read_exactly(fd: int, size: int, begun: bool) -> bytes:
    """``size`` bytes of ``fd``: EOFError at the other end's close before a message
    (``begun`` False and nothing read), OSError at one inside it. On an end that does
    not block (the supervisor's) it waits for the bytes, inside a message at most
    ``bounds.MESSAGE_STALL`` seconds in all (R65: then ValueError, no message)."""
    data = bytearray(size)
    view = memoryview(data)
    got = 0
    give_up: float | None = None
    while got < size:
        try:
            n = os.readv(fd, [view[got:]])
        except BlockingIOError:
            waiter = select.poll()
            waiter.register(fd, select.POLLIN)
            if not (begun or got):
                waiter.poll()  # before a message: as long as a blocking read would wait
                continue
            if give_up is None:
                stall = bounds.MESSAGE_STALL
                give_up = time.monotonic() + stall
            left = give_up - time.monotonic()
            if left <= 0 or not waiter.poll(left * 1000):
                raise ValueError(f"a message stalled: {got} of its {size} bytes came "
                                 f"within {stall:g} s") from None
            continue
        if n == 0:
            if not begun and got == 0:
                raise EOFError
            raise OSError("got end of file during message")
        got += n
    return bytes(data)


def pair() -> tuple[Channel, Channel]:
    """The supervisor's end and the child's end of a new slot's pipes."""
    to_child_read, to_child_write = os.pipe()
    to_parent_read, to_parent_write = os.pipe()
    # R65: the supervisor's reads never block on a child: a message that stops mid-way
    # is waited for at most bounds.MESSAGE_STALL seconds (``_read_exactly``, and the
    # core's).
    os.set_blocking(to_parent_read, False)
    parent = Channel(to_parent_read, to_child_write)
    child = Channel(to_child_read, to_parent_write, peer=(os.getpid(), to_parent_read, to_child_write))
    return parent, child
