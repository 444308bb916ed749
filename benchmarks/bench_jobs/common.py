"""Job bodies shared by every system, and the completion counter they all write.

Counter: every job appends one fixed-size record with a single ``os.write`` to
the file named by ``$BENCH_COUNTER``, opened with ``O_APPEND`` (so concurrent
writers from any number of processes never interleave a record). "Jobs done" is
the file size divided by ``RECORD.size``; the harness reads the records back for
CPU time (W2) and pickup latency (W3).

Record: ``(tag, value, t)`` as three little-endian doubles, where ``t`` is
``time.time()`` when the body ran and ``value`` is 0 (noop), the CPU seconds the
body spent (cpu) or ``t - t_enqueued`` in seconds (stamp).
"""
from __future__ import annotations

import os
import struct
import time

RECORD = struct.Struct("<ddd")
NOOP, CPU, STAMP = 0.0, 1.0, 2.0

_fd = -1
_fd_pid = 0


def _counter_fd() -> int:
    """This process's descriptor on the counter file (reopened after a fork)."""
    global _fd, _fd_pid
    if _fd < 0 or _fd_pid != os.getpid():
        _fd = os.open(os.environ["BENCH_COUNTER"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        _fd_pid = os.getpid()
    return _fd


def record(tag: float, value: float, t: float) -> None:
    os.write(_counter_fd(), RECORD.pack(tag, value, t))


def burn(loops: int) -> int:
    """Pure-Python CPU work: holds the GIL, touches no memory to speak of."""
    x = 0
    for i in range(loops):
        x += i * i % 7
    return x


def loops_per_ms() -> int:
    """Set by the harness from one calibration, so every system does the same work."""
    return int(os.environ.get("BENCH_LOOPS_PER_MS", "20000"))


def calibrate(target_ms: float = 20.0, rounds: int = 7) -> int:
    """Loops of ``burn`` per CPU millisecond on this machine (best of ``rounds``)."""
    loops = 200_000
    best = float("inf")
    for _ in range(rounds):
        c0 = time.process_time()
        burn(loops)
        best = min(best, time.process_time() - c0)
    return max(1, int(loops / (best * 1000.0)))


def noop_body(i) -> None:
    record(NOOP, 0.0, time.time())


def cpu_body(ms) -> None:
    c0 = time.process_time()
    burn(int(loops_per_ms() * ms))
    record(CPU, time.process_time() - c0, time.time())


def stamp_body(t_enqueued) -> None:
    t = time.time()
    record(STAMP, t - float(t_enqueued), t)


def read_records(path: str) -> list[tuple[float, float, float]]:
    with open(path, "rb") as fh:
        data = fh.read()
    usable = len(data) - len(data) % RECORD.size
    return [RECORD.unpack_from(data, off) for off in range(0, usable, RECORD.size)]


def count(path: str) -> int:
    try:
        return os.stat(path).st_size // RECORD.size
    except FileNotFoundError:
        return 0
