"""The two one-way pipes between the supervisor and one child (R6's pipes).

A slot's child and the supervisor talk over two pipes, one each way, not over one
two-way socket pair. On a socket pair both directions share one wait queue: each
time the supervisor reads a child's reply, freeing the reply's buffer wakes whatever
waits on that socket, which is the child itself, asleep in its read for the next
job; and each message costs a socket buffer's allocation. A pipe wakes its reader
when data comes and its writer only when it was full (BENCHMARKS.md, the slots' pipes).

Each end is a ``Channel``: it reads from one pipe and writes to the other, with the
calls of a ``multiprocess`` connection that the pool uses (``recv_bytes``,
``send_bytes``, ``poll``, ``fileno`` for the side a selector waits on, ``close``), so
the bytes on the wire are the same as before (``core.read_message`` and
``core.write_message`` read and write them in C, through ``fileno`` and
``write_fileno``). Closing an end closes both its pipes' descriptors: the other side
reads end-of-file, and a write to it fails with ``OSError`` (EPIPE), as on a socket.
"""
from __future__ import annotations

from typing import Any


class Channel:
    """One side of a slot's pipes: reads what the other side writes, and back."""

    __slots__ = ("_reader", "_writer")

    def __init__(self, reader: Any, writer: Any) -> None:
        self._reader = reader
        self._writer = writer

    def fileno(self) -> int:
        """The descriptor to read from (what a selector waits on)."""
        return self._reader.fileno()

    def write_fileno(self) -> int:
        """The descriptor to write to."""
        return self._writer.fileno()

    def descriptors(self) -> tuple[int, int]:
        """Both descriptors (what a forked child keeps, R43)."""
        return self._reader.fileno(), self._writer.fileno()

    def recv_bytes(self) -> bytes:
        return self._reader.recv_bytes()

    def send_bytes(self, data: bytes) -> None:
        self._writer.send_bytes(data)

    def poll(self, timeout: float | None = 0.0) -> bool:
        return self._reader.poll(timeout)

    @property
    def closed(self) -> bool:
        return self._reader.closed

    def close(self) -> None:
        try:
            self._reader.close()
        finally:
            self._writer.close()


def pair(context: Any) -> tuple[Channel, Channel]:
    """The supervisor's end and the child's end of a new slot's pipes, from a
    ``multiprocess`` context (its one-way ``Pipe``)."""
    to_child_read, to_child_write = context.Pipe(duplex=False)
    to_parent_read, to_parent_write = context.Pipe(duplex=False)
    return (Channel(to_parent_read, to_child_write), Channel(to_child_read, to_parent_write))
