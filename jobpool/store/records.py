"""Named records that cross between the supervisor and a store.

Plain, immutable values (named tuples: cheap to define at import, read by
name): the supervisor builds them from its slots and counters, a store writes
them, and the answers come back as records too, so no caller reads a positional
tuple through an index.
"""
from __future__ import annotations

from typing import NamedTuple


class ProgressReport(NamedTuple):
    """R22: how far one running attempt is; written fenced like a settle, so a
    report for an attempt that is no longer this pool's changes nothing."""

    job_id: int
    attempt: int
    percent: float | None
    stage: str | None


class Heartbeat(NamedTuple):
    """R24b, R29: what a pool says about itself once a beat (its row in ``pools``)."""

    owner: str
    host: str
    pid: int
    procs: int
    queues: tuple[str, ...]
    names: tuple[str, ...]
    core: str
    counters_json: str
    slots_json: str


class Requests(NamedTuple):
    """What operators asked of one pool since its last beat (R25, R27, R31), and
    whether its row had to be made anew (R24b)."""

    stop: bool
    procs: int | None
    #: (job id, attempt) of its running jobs to cancel.
    cancels: tuple[tuple[int, int], ...]
    #: The pool had no row: its first beat, or another pool judged it dead, took
    #: its leases back and removed its row.
    registered_anew: bool = False
    #: R38: every paused queue of the store (a pool claims from none of its own).
    paused: frozenset[str] = frozenset()


class QueueMetrics(NamedTuple):
    """What ``jobpool metrics`` exports of a store, read in one transaction."""

    #: The store's clock at the read (the server's, on PostgreSQL: R7a).
    now: float
    #: (queue, status, count, scheduled), as ``DashboardRows.queue_counts``.
    counts: list[tuple]
    #: (queue, run_at of its oldest due ready job).
    oldest_due: list[tuple]
    #: R38: the paused queues.
    paused: list[str]


class DashboardRows(NamedTuple):
    """One consistent read of what the dashboard shows (R29), as rows; the
    dashboard's ``snapshot`` module makes its views from them."""

    #: (queue, status, count, scheduled) per queue and live status.
    queue_counts: list[tuple]
    done: int
    #: (queue, count) of jobs finished in the minute before ``now``.
    done_since: list[tuple]
    #: (job_id, name, attempt, outcome, ended_at, error), newest first.
    failures: list[tuple]
    #: (id, name, lease_owner, attempts, started_at, timeout, progress, stage).
    running: list[tuple]
    #: ``Store.pools()`` rows.
    pools: list[dict]
    #: (queue, name, count) of ready jobs, only when some pool is live.
    ready_by_name: list[tuple]
    #: R38: the paused queues.
    paused: tuple[str, ...] | list[str] = ()
