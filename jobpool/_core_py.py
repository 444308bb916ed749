"""The pure SQLite core: the engine (``jobpool.engine.Claimer``) over the SQLite
driver (``store/sqlite/driver.py``, the ``sqlite3`` module), and the slot table.

The compiled core (``_core.pyx``) has the same names, signatures and behaviour;
``tests/test_core.py`` runs against both and a parity test compares the rows
they leave behind. Neither decides anything about a job's life: both apply
``jobpool.lifecycle.decide`` and carry its named records (``Claimed``,
``Lease``, ``Outcome``, ``Settled``).

Time (``now``) and randomness (``rng``, anything with ``.random()``) are
parameters so backoff, leases and deadlines are testable without sleeping.
"""
from __future__ import annotations

import math

from jobpool.engine import Claimer
from jobpool.lifecycle import (CANCEL, CRASH, DEFAULT_POLICY, DEFER, DONE, ERROR, FATAL,
                               KIND_NAMES, LEASE_SLACK, RELEASE, RESCHEDULE, RETRY, TIMEOUT,
                               backoff, with_reason)
from jobpool.store.sqlite import statements as sql
from jobpool.store.sqlite.driver import SqliteDriver

#: The API the compiled core mirrors name for name (tests/test_core.py).
__all__ = ["Core", "SlotTable", "backoff", "with_reason", "LEASE_SLACK", "KIND_NAMES",
           "DEFAULT_POLICY", "DONE", "ERROR", "FATAL", "CRASH", "TIMEOUT", "RETRY", "DEFER",
           "RESCHEDULE", "RELEASE", "CANCEL"]


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


class Core(Claimer):
    """Claims and settles jobs for one supervisor over its own connection.

    Every write is one ``BEGIN IMMEDIATE`` transaction; a failure rolls back and
    raises ``StoreError`` with nothing applied, so the caller can keep its
    outcomes and try again (R26).
    """

    def __init__(self, path: str, owner: str, names, queues, policies=None, *,
                 busy_timeout: float = 5.0, synchronous: str = "NORMAL",
                 wal_autocheckpoint: int = 1000, journal_size_limit: int = sql.WAL_KEEP_BYTES) -> None:
        self._sqlite = SqliteDriver(path, busy_timeout=busy_timeout, synchronous=synchronous,
                                    wal_autocheckpoint=wal_autocheckpoint,
                                    journal_size_limit=journal_size_limit)
        super().__init__(self._sqlite, owner, names, queues, policies)

    def release_before_fork(self) -> None:
        """R42/R43: the connection closed before a fork (``SqliteDriver``)."""
        self._sqlite.release_before_fork()

    def crash_causes(self, job_id: int) -> list[str]:
        """R19a: the errors of this job's earlier child deaths, oldest first."""
        return self._sqlite.crash_causes(job_id)
