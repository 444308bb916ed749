"""Named records that cross between the supervisor and a store.

Plain, immutable values (named tuples: cheap to define at import, read by
name): the supervisor builds them from its slots and counters, a store writes
them, and the answers come back as records too, so no caller reads a positional
tuple through an index.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from jobpool import bounds, liveness, serialize
from jobpool.rollups import Rollup

#: R32: dead rows kept, newest first (each store's sweep; the CLI's default).
DEAD_LETTER_LIMIT = 10_000
#: R32: how long done rows (and their results) are kept, seconds.
RESULT_TTL = 24 * 3600.0
#: R32: the most rows of one kind a sweep deletes, in a transaction of their own (each
#: store's retention), so it never holds locks for long; a sweep that deleted this many
#: may have left more, and its pool sweeps again at its next heartbeat.
SWEEP_BATCH = 500


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
    #: R56: what the pool counted by job name since its last beat that was written,
    #: added to the store's row of the beat's minute.
    rollups: tuple[Rollup, ...] = ()


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
    #: R35/R36: the store's limits (``jobpool_limits`` rows, ``LimitRow`` fields).
    limit_rows: tuple[tuple, ...] = ()


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

    #: (queue, status, count, scheduled) per queue and status (ready, running, dead),
    #: counted to ``COUNT_MOST + 1`` (R47): each queue's first ready rows in claim
    #: order, every running row, the newest dead rows.
    queue_counts: list[tuple]
    #: Done rows, counted to ``COUNT_MOST + 1``.
    done: int
    #: (queue, count) of jobs finished in the minute before ``now``.
    done_since: list[tuple]
    #: (job_id, name, attempt, outcome, ended_at, error), newest first.
    failures: list[tuple]
    #: (id, name, lease_owner, attempts, started_at, timeout, progress, stage).
    running: list[tuple]
    #: ``Store.pools()`` rows.
    pools: list[dict]
    #: R28: the ready jobs no live pool serves (``unserved_groups``), only when some
    #: pool is live.
    unserved: list[dict]
    #: R38: the paused queues.
    paused: tuple[str, ...] | list[str] = ()
    #: R34: the newest open batches (rows of ``BATCH_COLUMNS``), at most ``OPEN_BATCHES_SHOWN``.
    batches: list[tuple] | tuple = ()
    #: The time the rows were read by: where a server dates the rows (PostgreSQL,
    #: R7a), its clock, so a dashboard on a host whose clock is off still splits ready
    #: from scheduled, counts the last minute and ages the running jobs by the clock
    #: the rows were written by; else the caller's ``now``.
    now: float | None = None


#: How many open batches a dashboard frame reads (it shows fewer on a small terminal).
OPEN_BATCHES_SHOWN = 5
#: R47: the most rows of a queue's ready rows, of dead rows and of done rows a dashboard
#: frame counts; it reads one more, and a count past this one is shown "10 000+"
#: (``jobpool.snapshot``), so a frame of a million-row store reads thousands of index
#: entries, not a million. ``store.stats()`` counts exactly.
COUNT_MOST = 10_000


def unserved_groups(pairs: Iterable[tuple[Any, Any]], live: list[dict[str, Any]],
                    count: Callable[[Any, Any], int]) -> list[dict[str, Any]]:
    """R28, R47: of the ``(queue, name)`` pairs of ready rows (each found by one step of
    an index), those no live pool serves (``liveness.unserved``), largest first, as
    ``{queue, name, count, capped}``. ``count(queue, name)`` counts a pair's ready rows
    to ``COUNT_MOST + 1``; past ``COUNT_MOST`` the count is that bound, ``capped``
    (shown "10 000+"). Only pairs no pool serves are counted: a backlog every pool
    serves costs a step per pair, however many rows it holds."""
    groups = []
    for queue, name in liveness.unserved(pairs, live):
        counted = count(queue, name)
        groups.append({"queue": queue, "name": name, "count": min(counted, COUNT_MOST),
                       "capped": counted > COUNT_MOST})
    # stable: pairs of one count stay in the index's order, by queue and name
    return sorted(groups, key=lambda group: -group["count"])


class BatchStatus(NamedTuple):
    """R34: where a batch stands, as ``store.batch_status(id)`` answers. Counts are
    the store's own (kept in the transactions that end members); cancelled members
    count as dead. ``finished``: the callbacks have fired (or, cancelled, the last
    member ended); ``success_job`` and ``complete_job`` are the jobs they became."""

    id: int
    total: int
    pending: int
    done: int
    dead: int
    closed: bool
    cancelled: bool
    finished: bool
    created_at: float | None   # None: the row holds no time there (R44)
    closed_at: float | None
    finished_at: float | None
    on_success: str | None    # the callback's job name
    on_complete: str | None
    success_job: int | None
    complete_job: int | None

    @classmethod
    def from_row(cls, row: tuple) -> "BatchStatus":
        """A row of ``BATCH_COLUMNS`` (both stores select the same columns)."""
        (batch_id, created_at, total, done, dead, closed_at, cancelled_at, finished_at,
         on_success, on_complete, success_job, complete_job) = row
        # A batch's row is data (R44): a count that is no whole number reads as 0.
        total, done, dead = (n if bounds.whole_within(n, 0, 1 << 62) else 0
                             for n in (total, done, dead))
        closed, cancelled, finished = (at is not None for at in (closed_at, cancelled_at,
                                                                 finished_at))
        # Its times alike: one that is no time reads as none (its flag is kept).
        created_at, closed_at, finished_at = (at if bounds.finite_number(at) else None
                                              for at in (created_at, closed_at, finished_at))
        return cls(batch_id, total, total - done - dead, done, dead, closed, cancelled,
                   finished, created_at, closed_at, finished_at, _callback_name(on_success),
                   _callback_name(on_complete), success_job, complete_job)

    def as_dict(self) -> dict:
        return self._asdict()


def _callback_name(spec: object) -> str | None:
    """The job name in a stored callback (text in SQLite, already decoded by psycopg)."""
    if spec is None:
        return None
    if isinstance(spec, str):
        try:
            spec = serialize.loads(spec)
        except (ValueError, RecursionError):
            return None  # a row written by hand (R44): no callback anyone can name
    name = spec.get("name") if isinstance(spec, dict) else None
    return name if isinstance(name, str) else None


class UnfollowedMembers(NamedTuple):
    """Retried members of one batch that no callback of the batch follows (R34)."""

    batch_id: int
    members: list[int]
    cancelled: bool  # the batch was cancelled: they count in it again; else it finished


class RetryReport(NamedTuple):
    """``store.dead.retry_report``: what ``retry`` answers (id -> what happened), and the
    retried members no batch callback follows (R34), by batch id, as the retry's own
    transaction found them: ``alone``, members of finished batches (their callbacks
    fired, or, cancelled, every member had ended), which run outside them; ``cancelled``,
    members of batches cancelled while a member still ran, counted again (the batch
    ends when they do) and followed by no callback either."""

    answers: dict[int, str]
    alone: dict[int, list[int]]
    cancelled: dict[int, list[int]]

    def unfollowed(self) -> list[UnfollowedMembers]:
        """Both kinds, a record a batch: finished batches' first, then cancelled ones'
        (what an operator is told of, one line or note a batch)."""
        return [*(UnfollowedMembers(b, m, False) for b, m in self.alone.items()),
                *(UnfollowedMembers(b, m, True) for b, m in self.cancelled.items())]


class MemberResult(NamedTuple):
    """R60: a batch member's stored result as the store keeps it (not decoded: the
    reader's registration decides how, R39)."""

    id: int
    name: str
    serializer: str     # the row's (its payload's); a pickle job's result may be a pickle
    result: bytes | str


class LimitRow(NamedTuple):
    """One row of ``jobpool_limits`` (R35, R36): a job name's declared limits, or a
    queue's (``scope`` 'queue': ``max_running`` only)."""

    scope: str
    target: str
    max_running: int | None
    rate: str | None
    burst: int
    group_by: str | None
    set_by: str
    set_at: float
