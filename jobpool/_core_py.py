"""The supervisor's slot table, the pipes' reader and writer of messages and a child's
look after every job, in Python: the readable twins of ``_core.SlotTable``,
``_core.read_message``, ``_core.write_message``, ``_core.OpenFiles``, ``_core.Limits``,
``_core.has_children`` and ``_core.JobEnd``.

``tests/test_core.py`` runs the slot table's tests against both. (The SQLite
driver's compiled parts have their pure twins beside the driver they serve:
``store/sqlite/driver.PythonConnection`` and ``store/row_codec.decode_claims``.)
"""
from __future__ import annotations

import _signal
import math
import os
import resource
import signal
import struct
import sys
from typing import Any

from jobpool.protocol import success_fields

#: The API the compiled module mirrors name for name (tests/test_core.py).
__all__ = ["SlotTable", "read_message", "write_message", "OpenFiles", "Limits", "has_children",
           "JobEnd", "WAL_VFS"]

#: The SQLite VFS a store's connections open through: SQLite's own here (None); the
#: compiled module's gathers each commit's WAL writes into one (``_walbuf.h``).
WAL_VFS: str | None = None


def read_message(conn: Any) -> bytes | tuple[int, int, int, float, bool]:
    """One message of a pipe (a child's to the supervisor, R68, or the supervisor's
    to a child): a success frame's fields
    (``protocol.success_fields``), or any other message's bytes; ValueError for a
    malformed frame, what ``recv_bytes`` raises for a lost pipe. ``_core.read_message``
    reads it in C (tests/test_parity.py holds the two equal)."""
    data = conn.recv_bytes()
    fields = success_fields(data)
    return data if fields is None else fields


def write_message(conn: Any, data: bytes) -> None:
    """One message onto a child's or the supervisor's pipe (``conn`` a
    ``channel.Channel``: to its ``write_fileno``), framed as ``Connection.send_bytes``
    frames it (a 4-byte big-endian length; -1 then 8 bytes for one over 2 GiB);
    ``_core.write_message`` writes the same bytes in one system call."""
    fd = conn.write_fileno()
    size = len(data)
    header = struct.pack("!i", size) if size <= 0x7fffffff else struct.pack("!iQ", -1, size)
    view = memoryview(header + data) if size <= 16384 else None
    for part in ((view,) if view is not None else (memoryview(header), memoryview(data))):
        while part:
            part = part[os.write(fd, part):]


class SlotTable:
    """Which job each slot runs and when its hard timeout falls (R6, R20).

    A slot is reserved (``assign``) for a job the moment it is dispatched, and the
    supervisor claims at most ``len(free_slots())`` rows, so no lease is ever held
    for a job that waits for a child.
    """

    def __init__(self, size: int) -> None:
        self._jobs: list[tuple[int, int] | None] = [None] * size
        self._deadlines: list[float] = [math.inf] * size

    @property
    def size(self) -> int:
        return len(self._jobs)

    def resize(self, size: int) -> None:
        """Grow at once; shrink only over idle slots at the end (R27)."""
        while len(self._jobs) < size:
            self._jobs.append(None)
            self._deadlines.append(math.inf)
        while len(self._jobs) > size and self._jobs[-1] is None:
            self._jobs.pop()
            self._deadlines.pop()

    def free_slots(self) -> list[int]:
        return [i for i, job in enumerate(self._jobs) if job is None]

    def busy_count(self) -> int:
        return sum(1 for job in self._jobs if job is not None)

    def assign(self, slot: int, job_id: int, attempt: int, deadline: float) -> None:
        if self._jobs[slot] is not None:
            raise ValueError(f"slot {slot} is busy")
        self._jobs[slot] = (job_id, attempt)
        self._deadlines[slot] = deadline

    def clear(self, slot: int) -> tuple[int, int] | None:
        job = self._jobs[slot]
        self._jobs[slot] = None
        self._deadlines[slot] = math.inf
        return job

    def extend_deadline(self, slot: int, deadline: float) -> None:
        self._deadlines[slot] = deadline

    def next_deadline(self) -> float:
        return min(self._deadlines, default=math.inf)

    def overdue(self, now: float) -> list[int]:
        return [i for i, d in enumerate(self._deadlines) if d <= now]


# -- a child's checks after each job (R40, R43) -------------------------------------------

class OpenFiles:
    """The files some descriptors had when this was made (their device and inode): R43's
    question after every job, whether the job pointed one elsewhere or closed it.
    ``identities``: ``(fd, st_dev, st_ino)`` each."""

    def __init__(self, identities: list[tuple[int, int, int]]) -> None:
        self._identities = tuple(identities)

    def changed(self) -> tuple[int, ...]:
        """The descriptors that no longer name their file (closed, or another file),
        in the order given; empty when none did."""
        moved = []
        for fd, dev, ino in self._identities:
            try:
                st = os.fstat(fd)
            except OSError:
                moved.append(fd)
                continue
            if st.st_dev != dev or st.st_ino != ino:
                moved.append(fd)
        return tuple(moved)


class Limits:
    """The resource limits some resources had when this was made: the child's question
    after every job (R20), whether the job changed one. ``resources``: ``RLIMIT_*``
    numbers."""

    def __init__(self, resources: list[int]) -> None:
        self._limits = tuple((r, resource.getrlimit(r)) for r in resources)

    def changed(self) -> tuple[int, ...]:
        """The resources whose limits are not what they were, in the order given."""
        return tuple(r for r, limits in self._limits if resource.getrlimit(r) != limits)


def wake(sock: Any, addresses: tuple[bytes, ...]) -> None:
    """One byte to each of ``addresses`` in order from the unbound datagram socket
    ``sock``, stopping at the first place nobody listens on (``store/sqlite/wakeup.py``,
    R11); a full buffer is passed over (that supervisor is awake anyway)."""
    for address in addresses:
        try:
            sock.sendto(b"!", address)
        except (ConnectionRefusedError, FileNotFoundError):
            return
        except OSError:
            pass


def has_children() -> bool:
    """Whether this process has any child, running or not yet reaped (R40): ``waitid``
    with ``WNOWAIT`` only looks, and fails with ECHILD when there is none."""
    try:
        os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return False
    return True


class JobEnd:
    """A child's look after each job (R20, R40, R43) in one call: what it puts back every
    time, and the flags of what else the job changed, which the caller puts back itself
    (``child.run_job``; a job rarely changes any). Made once a child has started, from
    what its jobs find (``child.SignalState``, ``child.ProcessSettings``, the pipes'
    ``OpenFiles``).

    Every time, in this order: the real-time timer disarmed if the job left it running,
    the signal mask set back, the handlers compared (``HANDLERS``), a child of the child
    looked for (``STRAYS``), the CPU time read (``cpu``: ``clock``'s reading), the pipes'
    files compared (``PIPES``), the file mode mask and the working directory set back (a
    directory removed meanwhile is left as the job left it), the resource limits
    compared (``LIMITS``), the standard streams' files and ``sys`` objects compared
    (``STREAMS``), and the peak RSS read (``peak_rss``, bytes). ``_core.JobEnd``
    makes the same calls in C, with no Python step between them: the children share the
    cores with the supervisor, so what a child spends between two jobs is the pool's
    time too."""

    HANDLERS, STRAYS, PIPES, LIMITS, STREAMS = 1, 2, 4, 8, 16

    def __init__(self, mask: Any, handlers: Any, pipes: OpenFiles, limits: Limits, umask: int,
                 cwd: str | None, streams: Any = None) -> None:
        """``mask``: the signals blocked between jobs; ``handlers``: ``(signum, handler)``
        pairs a job finds (those with no Python handler, None, are not looked at);
        ``streams``: the standard streams a job finds (``child.StandardStreams``: its
        ``files``, an ``OpenFiles``, and its ``objects``, the ``sys`` stream objects by
        name, both read at each look, since a hang-up or a reopened stream replaces them)."""
        self._mask = frozenset(int(signum) for signum in mask)
        self._handlers = tuple((int(signum), handler) for signum, handler in handlers
                               if handler is not None)
        self._pipes = pipes
        self._limits = limits
        self._umask = umask
        self._cwd = cwd
        self._streams = streams
        #: What the last ``look`` read: seconds of CPU, and the peak RSS in bytes.
        self.cpu = 0.0
        self.peak_rss = 0

    def look(self) -> int:
        """After a job: put back what is put back every time, and answer the flags of
        what the caller must look at (0: nothing)."""
        flags = 0
        if signal.getitimer(signal.ITIMER_REAL)[0]:
            signal.setitimer(signal.ITIMER_REAL, 0)
        _signal.pthread_sigmask(signal.SIG_SETMASK, self._mask)
        getsignal = _signal.getsignal
        for signum, handler in self._handlers:
            if getsignal(signum) != handler:
                flags |= self.HANDLERS
                break
        if has_children():
            flags |= self.STRAYS
        self.cpu = self.clock()
        if self._pipes.changed():
            flags |= self.PIPES
        os.umask(self._umask)
        if self._cwd is not None:
            try:
                os.chdir(self._cwd)
            except OSError:
                pass
        if self._limits.changed():
            flags |= self.LIMITS
        streams = self._streams
        if streams is not None:
            if streams.files.changed():
                flags |= self.STREAMS
            else:
                for name, stream in streams.objects.items():
                    if getattr(sys, name, None) is not stream or stream is None or stream.closed:
                        flags |= self.STREAMS
                        break
        # ru_maxrss is in KiB on Linux.
        self.peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        return flags

    @staticmethod
    def clock() -> float:
        """This process's CPU time and its reaped processes' (a job's subprocesses), as
        the kernel counts a child at its exit: an attempt's CPU is the difference between
        two readings, and the supervisor can tell a killed attempt's from the child's
        total (R19a)."""
        times = os.times()
        return times.user + times.system + times.children_user + times.children_system
