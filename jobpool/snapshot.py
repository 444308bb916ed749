"""What the dashboard shows (R29), read from the store in one consistent pass.

The dashboard is pure render functions over a :class:`Snapshot` plus one Live
loop (STYLE habit 8); :func:`read_snapshot` is the only place it touches the
store. Every query here walks an index and never the whole ``jobs`` table, so a
refresh stays cheap on a store holding a day of finished jobs.
"""
from __future__ import annotations

import math
import sqlite3
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from jobpool import core, liveness
from jobpool.errors import StoreError
from jobpool.store import sql

if TYPE_CHECKING:
    from jobpool.store.sqlite import SQLiteStore

#: Recent failures are looked for among this many newest attempts only, so a
#: store whose last failure is a million attempts ago costs no scan to say so.
FAILURE_WINDOW = 10_000

#: Outcomes that are not failures: success, and the steering outcomes a job or an
#: operator chose (Defer, Reschedule, a graceful stop's release).
QUIET_OUTCOMES = ("done", "deferred", "rescheduled", "released")

#: R29: per-queue counts of the live statuses. Ready rows are counted from the
#: claim-order index alone (it carries ``run_at``, so due and scheduled split
#: without visiting the table); running and dead rows through ``jobs_status``,
#: which stays small (running: at most the slots; dead: ``dead_letter_limit``).
#: Done rows are left out: no index leads with (queue, status), so a GROUP BY
#: over every row scans the table (0.75-1.3 s on 1 000 000 rows).
QUEUE_COUNTS = """
SELECT queue, 'ready', count(*), total(run_at > :now)
  FROM jobs INDEXED BY jobs_claim_order WHERE status = 'ready' GROUP BY queue
UNION ALL
SELECT queue, status, count(*), 0
  FROM jobs INDEXED BY jobs_status WHERE status IN ('running', 'dead') GROUP BY queue, status
"""

#: R29: all done rows, counted in ``jobs_status`` without visiting the table.
DONE_COUNT = "SELECT count(*) FROM jobs INDEXED BY jobs_status WHERE status = 'done'"

#: R29 done/min: the rows finished in the last minute, a short range of
#: ``jobs_status (status, finished_at)``.
DONE_SINCE = """
SELECT queue, count(*) FROM jobs INDEXED BY jobs_status
 WHERE status = 'done' AND finished_at > :since GROUP BY queue
"""

#: R29 recent failures: newest attempts first by rowid (the table's own order,
#: no sort), bounded to the last FAILURE_WINDOW attempts. LEFT JOIN because
#: retention may have swept the job while its attempt row is still read.
RECENT_FAILURES = f"""
SELECT a.job_id, j.name, a.attempt, a.outcome, a.ended_at, a.error
  FROM attempts AS a LEFT JOIN jobs AS j ON j.id = a.job_id
 WHERE a.rowid > (SELECT coalesce(max(rowid), 0) FROM attempts) - :window
   AND a.outcome NOT IN ({", ".join(f"'{o}'" for o in QUIET_OUTCOMES)})
 ORDER BY a.rowid DESC LIMIT :limit
"""

#: R29 slots: the running rows, read with the counts so a slot row never lags
#: them. The heartbeat's slot list is up to a beat old (a job dispatched since
#: is missing from it); it still gives each slot's pid and RSS, which only the
#: supervisor knows. A short range of ``jobs_status``: running rows are at most
#: the live pools' slots, plus leases of dead pools not yet reclaimed.
RUNNING_JOBS = """
SELECT id, name, lease_owner, attempts, started_at, timeout, progress, stage
  FROM jobs INDEXED BY jobs_status WHERE status = 'running'
"""

#: Every statement read_snapshot runs, for the test that checks their query plans.
SNAPSHOT_QUERIES = (QUEUE_COUNTS, DONE_COUNT, DONE_SINCE, RECENT_FAILURES, RUNNING_JOBS,
                    sql.READY_BY_NAME)


@dataclass(frozen=True)
class SlotView:
    """One child slot of a live pool: its job as the ``jobs`` table has it at
    ``Snapshot.taken_at``, its ``pid`` and ``rss`` as the supervisor's last
    heartbeat reported them.

    ``pool`` is the index of the slot's pool in ``Snapshot.pools``; ``elapsed``
    is seconds since the job started, as of ``Snapshot.taken_at``; ``rss`` is
    in bytes; ``progress`` is 0-100 (R22). Job fields are None on an idle slot.
    """

    pool: int
    slot: int
    pid: int | None = None
    job_id: int | None = None
    name: str | None = None
    attempt: int | None = None
    started: float | None = None
    elapsed: float | None = None
    timeout: float | None = None
    progress: float | None = None
    stage: str | None = None
    rss: int | None = None

    @property
    def busy(self) -> bool:
        return self.job_id is not None


@dataclass(frozen=True)
class QueueView:
    """One queue's line: due (``ready``) and future (``scheduled``) rows, rows
    running and dead, and jobs finished in the last minute."""

    queue: str
    ready: int = 0
    scheduled: int = 0
    running: int = 0
    dead: int = 0
    done_per_min: int = 0


@dataclass(frozen=True)
class FailureView:
    """One failed attempt; ``reason`` is the first line of its error (the line
    that names the cause; the traceback follows it in the store)."""

    job_id: int
    name: str | None
    attempt: int
    outcome: str
    ended_at: float
    reason: str


@dataclass(frozen=True)
class DrainView:
    """A pool in a graceful stop (R25): its jobs still running, as of its last
    heartbeat, and when it stops waiting for them (a Unix time; None when its
    drain has no end)."""

    running: int
    drain_ends_at: float | None


@dataclass(frozen=True)
class PoolView:
    """One supervisor with a heartbeat in the ``pools`` table (R29a counters).

    ``stopping`` is set while the pool drains; ``counters`` holds the integer
    counters only (not ``stopping``, nor ``scale_refused``'s text).
    """

    owner: str
    host: str
    pid: int
    procs: int
    queues: tuple[str, ...]
    core: str
    started_at: float
    heartbeat_at: float
    counters: Mapping[str, int] = field(default_factory=dict)
    stopping: DrainView | None = None

    @property
    def busy(self) -> int:
        return int(self.counters.get("busy", 0))


def _zero_totals() -> dict[str, int]:
    return dict.fromkeys(("ready", "scheduled", "running", "done", "dead"), 0)


@dataclass(frozen=True)
class Snapshot:
    """Everything one dashboard frame shows, read at ``taken_at``.

    ``pools`` and ``slots`` are the live pools only; ``stale_pools`` counts the
    rows of pools that are dead (``jobpool.liveness``: process gone, or no
    heartbeat for ``DEAD_AFTER``) and not yet buried by a running pool.
    ``totals`` has the keys ready, scheduled, running, done, dead (as
    ``store.stats()``); ``done_per_min`` is the jobs finished in the minute before
    ``taken_at``; ``unserved`` the ready jobs no live pool serves (R28).
    """

    taken_at: float
    store: str
    core: str
    pools: tuple[PoolView, ...] = ()
    slots: tuple[SlotView, ...] = ()
    queues: tuple[QueueView, ...] = ()
    failures: tuple[FailureView, ...] = ()
    totals: Mapping[str, int] = field(default_factory=_zero_totals)
    done_per_min: int = 0
    stale_pools: int = 0
    unserved: tuple[UnservedView, ...] = ()


@dataclass(frozen=True)
class UnservedView:
    """Ready jobs of one name and queue that no live pool serves."""

    queue: str
    name: str
    count: int


def read_snapshot(store: SQLiteStore, now: float | None = None, *,
                  failures: int = 5) -> Snapshot:
    """Read one frame's worth of state in a single read transaction.

    One transaction so the counts agree with each other (a job moving from
    ready to running between two statements is not counted twice); under WAL
    it blocks no writer.

    Cost, measured once on generated 1 000 000-row stores (SQLite 3.40, warm
    page cache, 2 cores shared with other work, so ranges): with 860 000 done,
    130 000 ready, 10 000 dead and 16 running rows, 150-230 ms a read
    (DONE_COUNT 60-105 ms, QUEUE_COUNTS 30-80 ms, the rest under 1 ms); with
    1 000 000 ready rows (a backlog), 230-430 ms, nearly all of it counting the
    claim-order index. The plain ``GROUP BY queue, status`` scans the table:
    750-1330 ms on either store. ``run_top`` spaces its reads so that reading
    never takes more than a third of a core.
    """
    now = time.time() if now is None else now
    conn = store.conn
    try:
        with _read_transaction(conn):
            counts = conn.execute(QUEUE_COUNTS, {"now": now}).fetchall()
            done = conn.execute(DONE_COUNT).fetchone()[0]
            recent = dict(conn.execute(DONE_SINCE, {"since": now - 60.0}).fetchall())
            failed = conn.execute(RECENT_FAILURES, {"window": FAILURE_WINDOW,
                                                    "limit": failures}).fetchall()
            running = conn.execute(RUNNING_JOBS).fetchall()
            rows = store.pools(now)
            live = liveness.live_pools(rows)
            # Only with a live pool: with none, nothing is served and the header says so.
            ready = conn.execute(sql.READY_BY_NAME).fetchall() if live else []
    except sqlite3.Error as exc:
        raise StoreError(f"reading the dashboard snapshot failed: {exc}") from exc
    pools = tuple(_pool_view(p) for p in live)
    queues = _queue_views(counts, recent, [q for p in pools for q in p.queues])
    totals = _totals(queues, done)
    return Snapshot(taken_at=now, store=store.path, core=_core_name(pools), pools=pools,
                    slots=tuple(_slot_views(live, running, now)), queues=queues,
                    failures=tuple(_failure_view(r) for r in failed), totals=totals,
                    done_per_min=sum(recent.values()), stale_pools=len(rows) - len(live),
                    unserved=tuple(UnservedView(**u) for u in liveness.unserved(ready, live)))


@contextmanager
def _read_transaction(conn: sqlite3.Connection) -> Iterator[None]:
    conn.execute("BEGIN")
    try:
        yield
    finally:
        conn.execute("COMMIT")


def _pool_view(row: Mapping[str, Any]) -> PoolView:
    counters = row["counters"]
    return PoolView(owner=row["owner"], host=row["host"], pid=row["pid"], procs=row["procs"],
                    queues=tuple(q for q in row["queues"].split(",") if q), core=row["core"],
                    started_at=row["started_at"], heartbeat_at=row["heartbeat_at"],
                    counters={k: v for k, v in counters.items()
                              if isinstance(v, int) and not isinstance(v, bool)},
                    stopping=_drain_view(counters.get("stopping")))


def _drain_view(value: Any) -> DrainView | None:
    """The ``stopping`` counter a stopping supervisor writes (R25); a value of
    another shape (a row from another version) reads as not stopping."""
    if not isinstance(value, Mapping):
        return None
    running, ends = value.get("running"), value.get("drain_ends_at")
    if not isinstance(running, int) or isinstance(running, bool):
        return None
    if isinstance(ends, bool) or not isinstance(ends, int | float) or not math.isfinite(ends):
        ends = None  # ``--drain inf``: the pool waits for its jobs however long they take
    return DrainView(running=running, drain_ends_at=ends)


def _slot_views(pools: Sequence[Mapping[str, Any]], running: Sequence[tuple],
                now: float) -> Iterator[SlotView]:
    """Each live pool's slots, with the jobs its running rows say they run.

    A running row goes to the slot the heartbeat put its job in; the rows the
    heartbeat has not seen yet (dispatched since) go to the slots it reported
    idle or running a job that is no longer running, in slot order. A slot whose
    job finished since the heartbeat and that has no new row is idle.
    """
    by_owner: dict[str, dict[int, tuple]] = {}
    for job in running:
        by_owner.setdefault(job[2], {})[job[0]] = job
    for index, pool in enumerate(pools):
        rows = by_owner.get(pool["owner"], {})
        reported = {s["job_id"]: s for s in pool["slots"] if s.get("job_id") in rows}
        unseen = sorted((r for r in rows.values() if r[0] not in reported),
                        key=lambda r: (r[4] or 0.0, r[0]))
        for s in pool["slots"]:
            job_id = s.get("job_id")
            row: tuple | None = rows.get(job_id) if reported.get(job_id) is s else None
            if row is None and unseen:
                row = unseen.pop(0)
            yield _slot_view(index, s["slot"], s, row, now)
        # Rows left over run in slots the heartbeat did not list: one a scale-up
        # added since, or one retiring after a scale-down (its job still runs).
        last = max((s["slot"] for s in pool["slots"]), default=-1)
        for extra, left in enumerate(unseen, last + 1):
            yield _slot_view(index, extra, {}, left, now)


def _slot_view(pool: int, slot: int, beat: Mapping[str, Any], row: tuple | None,
               now: float) -> SlotView:
    if row is None:
        return SlotView(pool=pool, slot=slot, pid=beat.get("pid"), rss=beat.get("rss"))
    job_id, name, _owner, attempt, started, timeout, progress, stage = row
    if (beat.get("job_id"), beat.get("attempt")) != (job_id, attempt):
        # Progress reaches the row at a heartbeat; this attempt has had none yet,
        # so what the row holds is the last report of an earlier attempt (R22).
        progress = stage = None
    return SlotView(pool=pool, slot=slot, pid=beat.get("pid"), job_id=job_id, name=name,
                    attempt=attempt, started=started,
                    elapsed=None if started is None else max(0.0, now - started),
                    timeout=timeout, progress=progress, stage=stage, rss=beat.get("rss"))


def _queue_views(counts: Sequence[tuple], recent: Mapping[str, int],
                 served: Sequence[str]) -> tuple[QueueView, ...]:
    """Queues with live rows, recent completions, or a live pool serving them:
    an empty queue someone serves is worth a row that says it is empty."""
    fields: dict[str, dict[str, int]] = {q: {} for q in (*served, *recent)}
    for queue, status, count, scheduled in counts:
        row = fields.setdefault(queue, {})
        if status == "ready":
            row["ready"], row["scheduled"] = count - int(scheduled), int(scheduled)
        else:
            row[status] = count
    return tuple(QueueView(queue=q, done_per_min=recent.get(q, 0), **fields[q])
                 for q in sorted(fields))


def _totals(queues: tuple[QueueView, ...], done: int) -> dict[str, int]:
    return {"ready": sum(q.ready for q in queues), "scheduled": sum(q.scheduled for q in queues),
            "running": sum(q.running for q in queues), "done": done,
            "dead": sum(q.dead for q in queues)}


def _failure_view(row: tuple) -> FailureView:
    job_id, name, attempt, outcome, ended_at, error = row
    lines = (error or "").strip().splitlines()
    return FailureView(job_id=job_id, name=name, attempt=attempt, outcome=outcome,
                       ended_at=ended_at, reason=lines[0] if lines else outcome)


def _core_name(pools: tuple[PoolView, ...]) -> str:
    """The core the live pools run; this install's when none runs."""
    names = sorted({p.core for p in pools})
    return "/".join(names) if names else core.NAME
