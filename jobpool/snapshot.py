"""What the dashboard shows (R29), made from one consistent read of the store.

The dashboard is pure render functions over a :class:`Snapshot` plus one Live
loop (STYLE habit 8); :func:`read_snapshot` is the only place it asks the store
anything (``Store.dashboard``, whose queries walk indexes and never the whole
``jobs`` table, so a refresh stays cheap on a store holding a day of finished jobs).
"""
from __future__ import annotations

import math
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from jobpool import bounds, core, liveness, serialize
from jobpool.store import row_codec
from jobpool.store.records import COUNT_MOST, BatchStatus

if TYPE_CHECKING:
    from jobpool.store.base import Store


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
    #: R67: the job's metadata (R54), as its row holds it; None without any.
    meta: Mapping[str, Any] | None = None
    #: R63: rows of the slot's chunk claimed with its job and waiting behind it, as
    #: the heartbeat listed them and still running in the store; 0 without a chunk.
    waiting: int = 0

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
    paused: bool = False   # R38: no pool claims from it
    #: R47: the counts that stopped at their bound: each is at least its number.
    capped: frozenset[str] = frozenset()


@dataclass(frozen=True)
class FailureView:
    """One failed attempt; ``reason`` is the first line of its error (the line
    that names the cause; the traceback follows it in the store)."""

    job_id: int
    name: str | None
    attempt: int | None
    outcome: str
    ended_at: float | None   # None: the attempt's row holds no time (R44)
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
    pid: int | None      # None, and the times: the row holds no such value there (R44)
    procs: int | None
    queues: tuple[str, ...]
    core: str
    started_at: float | None
    heartbeat_at: float | None
    counters: Mapping[str, int] = field(default_factory=dict)
    stopping: DrainView | None = None

    @property
    def busy(self) -> int:
        return int(self.counters.get("busy", 0))


def _zero_totals() -> dict[str, int]:
    return dict.fromkeys(("ready", "scheduled", "running", "done", "dead"), 0)


@dataclass(frozen=True)
class BatchView:
    """An open batch (R34): its members' ends so far, whether it is closed (its
    callbacks armed), and whether it was cancelled (open until its running members
    end, its callbacks never to fire)."""

    id: int
    total: int
    done: int
    dead: int
    closed: bool
    callbacks: str   # the callbacks' job names, comma-separated
    cancelled: bool = False

    @property
    def ended(self) -> int:
        return self.done + self.dead


@dataclass(frozen=True)
class Snapshot:
    """Everything one dashboard frame shows, read at ``taken_at``.

    ``pools`` and ``slots`` are the live pools only; ``stale_pools`` counts the
    rows of pools that are dead (``jobpool.liveness``: process gone, or no
    heartbeat for ``DEAD_AFTER``) and not yet buried by a running pool.
    ``totals`` has the keys ready, scheduled, running, done, dead (as
    ``store.stats()``); ``done_per_min`` is the jobs finished in the minute before
    ``taken_at``; ``unserved`` the ready jobs no live pool serves (R28).
    ``capped``: the totals that are at least their number, not exact (R47: the
    frame stops counting at ``COUNT_MOST``; ``store.stats()`` counts exactly).
    ``taken_at`` is on the store's clock, which dated the rows (R7a: PostgreSQL's);
    ``read_at`` on the viewer's, for the clock a frame shows and "read 2 s ago".
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
    batches: tuple[BatchView, ...] = ()
    capped: frozenset[str] = frozenset()
    read_at: float | None = None

    @property
    def viewer_time(self) -> float:
        """When the viewer read the frame, by its own clock."""
        return self.taken_at if self.read_at is None else self.read_at


@dataclass(frozen=True)
class UnservedView:
    """Ready jobs of one name and queue that no live pool serves."""

    queue: str
    name: str
    count: int
    #: R47: ``count`` is only a bound ("10 000+").
    capped: bool = False


def read_snapshot(store: Store, now: float | None = None, *, failures: int = 5) -> Snapshot:
    """One frame's worth of state: the store reads it in one transaction
    (``Store.dashboard``: its cost is measured there); this makes the views.
    ``run_top`` spaces its reads so that reading never takes more than a third of
    a core."""
    read_at = now = time.time() if now is None else now
    rows = store.dashboard(now, failures=failures)
    if rows.now is not None:
        now = rows.now  # the clock the store dated its rows by (R7a)
    live = liveness.live_pools(rows.pools)
    counts, recent, running = rows.queue_counts, dict(rows.done_since), rows.running
    pools = tuple(_pool_view(p) for p in live)
    queues = queue_views(counts, recent, [q for p in pools for q in p.queues], rows.paused)
    totals, capped = _totals(queues, rows.done)
    return Snapshot(taken_at=now, store=store.path, core=_core_name(pools), pools=pools,
                    slots=tuple(_slot_views(live, running, now)), queues=queues,
                    failures=tuple(_failure_view(r) for r in rows.failures), totals=totals,
                    done_per_min=sum(recent.values()), stale_pools=len(rows.pools) - len(live),
                    unserved=tuple(UnservedView(**u) for u in rows.unserved),
                    batches=tuple(_batch_view(r) for r in rows.batches), capped=capped,
                    read_at=read_at)


def _batch_view(row: tuple) -> BatchView:
    status = BatchStatus.from_row(row)
    return BatchView(status.id, status.total, status.done, status.dead, status.closed,
                     ", ".join(n for n in (status.on_success, status.on_complete) if n),
                     status.cancelled)


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
    if not bounds.finite_number(ends):
        ends = None  # ``--drain inf``: the pool waits for its jobs however long they take
    return DrainView(running=running, drain_ends_at=ends)


def _slot_views(pools: Sequence[Mapping[str, Any]], running: Sequence[tuple],
                now: float) -> Iterator[SlotView]:
    """Each live pool's slots, with the jobs its running rows say they run.

    A running row goes to the slot the heartbeat put its job in; the rows the
    heartbeat has not seen yet (dispatched since) go to the slots it reported
    idle or running a job that is no longer running, in slot order. A slot whose
    job finished since the heartbeat and that has no new row is idle.

    R63: the rows a slot's chunk holds behind its job are running rows too; the
    heartbeat lists them by slot, so they count as that slot's ``waiting`` rows
    and never fill another slot. When the slot's job has finished since the
    beat, the first of them still running is the one its child runs now. (Rows of
    a chunk claimed since the beat are not listed yet: until the next beat they
    are placed as any row the beat has not seen.)
    """
    by_owner: dict[str, dict[int, tuple]] = {}
    for job in map(_running_row, running):
        by_owner.setdefault(job[2], {})[job[0]] = job
    for index, pool in enumerate(pools):
        rows = by_owner.get(pool["owner"], {})
        beats = pool["slots"]
        waiting_of = [[i for i in _waiting_ids(s) if i in rows] for s in beats]
        in_chunks = {i for ids in waiting_of for i in ids}
        reported = {s["job_id"]: s for s in beats
                    if s.get("job_id") in rows and s["job_id"] not in in_chunks}
        placed = reported.keys() | in_chunks
        unseen = sorted((r for r in rows.values() if r[0] not in placed),
                        key=lambda r: (r[4] or 0.0, r[0]))
        for s, waiting in zip(beats, waiting_of):
            job_id = s.get("job_id")
            row: tuple | None = rows.get(job_id) if reported.get(job_id) is s else None
            if row is None and waiting:
                row, waiting = rows[waiting[0]], waiting[1:]  # its chunk's next row runs now
            if row is None and unseen:
                row = unseen.pop(0)
            yield _slot_view(index, s["slot"], s, row, now, len(waiting))
        # Rows left over run in slots the heartbeat did not list: one a scale-up
        # added since, or one retiring after a scale-down (its job still runs).
        last = max((s["slot"] for s in pool["slots"]), default=-1)
        for extra, left in enumerate(unseen, last + 1):
            yield _slot_view(index, extra, {}, left, now)


def _waited(beat: Mapping[str, Any], most: float) -> float:
    """R63: how long the beat's job waited in its chunk before it started (0 for a job
    claimed on its own). R44: a pools row is data: anything but a number from 0 to
    ``most`` (the row's whole time since its claim) reads as 0."""
    waited = beat.get("waited")
    if type(waited) not in (int, float) or not 0 <= waited <= most:
        return 0.0
    return float(waited)


def _waiting_ids(beat: Mapping[str, Any]) -> list[int]:
    """R63: the ids a heartbeat's slot lists as its chunk's rows waiting behind its job.
    R44: a pools row is data: a list that is not of job ids reads as none."""
    ids = beat.get("waiting")
    if (not isinstance(ids, list) or len(ids) > bounds.MAX_CHUNK
            or not all(type(i) is int for i in ids)):
        return []
    return ids


#: The columns of a running row (``RUNNING_JOBS``), in order.
_RUNNING_COLUMNS = ("id", "name", "lease_owner", "attempts", "started_at", "timeout", "progress",
                    "stage", "meta")


def _running_row(row: tuple) -> tuple:
    """R44: a running row with each column that holds what it should not set to None,
    and last a flag naming them (the slot shows it for its stage), or None."""
    job = dict(zip(_RUNNING_COLUMNS, row))
    found = row_codec.problems(job)
    if not found:
        return (*row, None)
    for column in found:
        job[column] = None
    return (*(job[c] for c in _RUNNING_COLUMNS), f"{row_codec.MALFORMED}: {', '.join(found)}")


def _count(value: Any) -> int | None:
    """A heartbeat's pid or RSS (R44: a pools row is data): a whole number from 0 that a
    float holds, else none."""
    return value if bounds.whole_within(value, 0, 1 << 62) else None


def _slot_view(pool: int, slot: int, beat: Mapping[str, Any], row: tuple | None,
               now: float, waiting: int = 0) -> SlotView:
    pid, rss = _count(beat.get("pid")), _count(beat.get("rss"))
    if row is None:
        return SlotView(pool=pool, slot=slot, pid=pid, rss=rss)
    job_id, name, _owner, attempt, started, timeout, progress, stage, meta, malformed = row
    if (beat.get("job_id"), beat.get("attempt")) != (job_id, attempt):
        # Progress reaches the row at a heartbeat; this attempt has had none yet,
        # so what the row holds is the last report of an earlier attempt (R22).
        progress = stage = None
    elif started is not None:
        # R63: the row's started_at is its chunk's claim; it ran from its own start.
        started += _waited(beat, now - started)
    stage = malformed or stage
    return SlotView(pool=pool, slot=slot, pid=pid, job_id=job_id, name=name,
                    attempt=attempt, started=started,
                    elapsed=None if started is None else max(0.0, now - started),
                    timeout=timeout, progress=progress, stage=stage, rss=rss,
                    # The codec checked it is a JSON object's text (R44: else None).
                    meta=None if meta is None else serialize.loads(meta), waiting=waiting)


def queue_views(counts: Sequence[tuple], recent: Mapping[str, int],
                 served: Sequence[str], paused: Sequence[str] = (),
                 most: int | None = COUNT_MOST) -> tuple[QueueView, ...]:
    """Queues with live rows, recent completions, a live pool serving them, or
    paused: an empty queue someone serves (or paused) is worth a row saying so.

    R47: ``counts`` stop at ``most + 1`` rows (``None``: exact counts): a queue's
    ready rows past it make its due and scheduled counts "at least" (``capped``);
    dead rows past it in all make every queue's dead count so (they are the newest
    ones, by queue)."""
    fields: dict[str, dict[str, Any]] = {q: {} for q in (*served, *map(_queue_name, recent),
                                                           *paused)}
    bound = math.inf if most is None else most
    dead_capped = sum(count for _, status, count, _ in counts if status == "dead") > bound
    for queue, status, count, scheduled in counts:
        row = fields.setdefault(_queue_name(queue), {})
        if status == "ready":
            row["ready"], row["scheduled"] = count - int(scheduled), int(scheduled)
            if count > bound:  # each at least as many as seen, shown at most the bound
                row["ready"], row["scheduled"] = (min(row["ready"], bound),
                                                  min(row["scheduled"], bound))
                row["capped"] = row.get("capped", frozenset()) | {"ready", "scheduled"}
        else:
            row[status] = count
    if dead_capped:
        for row in fields.values():
            row["dead"] = min(row.get("dead", 0), bound)
            row["capped"] = row.get("capped", frozenset()) | {"dead"}
    done = {}
    for queue, count in recent.items():
        done[_queue_name(queue)] = done.get(_queue_name(queue), 0) + count
    return tuple(QueueView(queue=q, done_per_min=done.get(q, 0), paused=q in paused,
                           **fields[q])
                 for q in sorted(fields))


def _queue_name(queue: Any) -> str:
    """R44: a queue as a row names it; one that is not text is shown flagged."""
    if row_codec.text(queue) is None:
        return queue
    return f"[{row_codec.MALFORMED}: {row_codec.shown(queue)}]"


def _totals(queues: tuple[QueueView, ...], done: int) -> tuple[dict[str, int], frozenset[str]]:
    """The totals, and which of them are at least their number (R47): a capped
    queue's, or done rows past ``COUNT_MOST`` (shown as that bound)."""
    capped = frozenset(key for q in queues for key in q.capped)
    if done > COUNT_MOST:
        done, capped = COUNT_MOST, capped | {"done"}
    dead = sum(q.dead for q in queues)  # of the newest dead rows: the bound when capped
    return ({"ready": sum(q.ready for q in queues),
             "scheduled": sum(q.scheduled for q in queues),
             "running": sum(q.running for q in queues), "done": done,
             "dead": min(dead, COUNT_MOST) if "dead" in capped else dead}, capped)


def at_least(count: int, capped: bool) -> str:
    """A count as the dashboards write it: thousands apart, and a ``+`` when it is
    only a bound (R47: "10 000+")."""
    return f"{count:,}".replace(",", " ") + ("+" if capped else "")


def _failure_view(row: tuple) -> FailureView:
    job_id, name, attempt, outcome, ended_at, error = row
    # R44: an attempt's row is data too: what is not what it should be shows as unknown.
    name = name if row_codec.text(name) is None else None
    outcome = outcome if row_codec.text(outcome) is None else "?"
    error = error if row_codec.text(error) is None else None
    lines = (error or "").strip().splitlines()
    return FailureView(job_id=job_id, name=name,
                       attempt=attempt if row_codec.COUNT(attempt) is None else None,
                       outcome=outcome,
                       ended_at=ended_at if row_codec.is_time(ended_at) else None,
                       reason=lines[0] if lines else outcome)


def _core_name(pools: tuple[PoolView, ...]) -> str:
    """The core the live pools run; this install's when none runs."""
    names = sorted({p.core for p in pools})
    return "/".join(names) if names else core.NAME
