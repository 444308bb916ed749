"""The PostgreSQL store: one queue shared by pools on many hosts (DESIGN section 7).

``connect("postgresql://user@host/db")`` opens it. The store keeps its tables in a
schema of its own (``jobpool``, or ``?schema=NAME`` in the URL), creates and
upgrades them itself under an advisory lock, and takes every time it writes from
the server's clock (R7a), so hosts whose clocks disagree still agree on run_at,
leases and deadlines. Every statement is in ``store/postgres/statements.py``; the supervisor's
hot path is the engine (``jobpool/engine.py``) over ``store/postgres/driver.py``.

Needs psycopg 3 (``pip install 'jobpool[postgres]'``), imported only when a
``postgresql://`` URL is opened, so the SQLite default never loads it.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import select
import time
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any, Callable

from jobpool import bounds, lifecycle, liveness, rollups
from jobpool.errors import (JobNotFound, ReadOnlyStoreError,
                            StoreError)
from jobpool.handles import Handle, Handles
from jobpool.serialize import MAX_PAYLOAD_BYTES
from jobpool.store.async_enqueue import AsyncEnqueue
from jobpool.store.common import SharedStore
from jobpool.store.connections import PerThread
from jobpool.store.postgres.connection import (Target, close_quietly, ensure_schema, first_line,
                                         open_connection, parse_url, scope)
from jobpool.store import row_codec, rows
from jobpool.store.postgres import finish_wait
from jobpool.store.postgres import statements as pg_sql
from jobpool.store.records import (COUNT_MOST, OPEN_BATCHES_SHOWN, DashboardRows, Heartbeat, ProgressReport,
                                   QueueMetrics, Requests, SWEEP_BATCH, unserved_groups)

try:
    import psycopg
    import psycopg.rows
    from psycopg import sql as pgsql
except ImportError:  # pragma: no cover - exercised by the one-line error below
    psycopg = None  # type: ignore[assignment]

log = logging.getLogger(__name__)


#: R33/R47: every periodic job's last enqueued occurrence (one row a periodic name).
LIST_PERIODIC = "SELECT name, last_occurrence FROM periodic ORDER BY name"
#: R11c: for this long after a plain enqueue's notification committed, this process's
#: next plain enqueues of jobs due now into the same queue send none (each ``pg_notify``
#: holds the server's one notification lock until its commit, so producers enqueuing
#: at once would otherwise commit one at a time), seconds.
NOTIFY_QUIET = 0.005
#: R11c: a pool woken by a notification claims again this long after it (the
#: listener's ``look_again``), so it finds what enqueues that notification covered
#: committed by then; an enqueue that went without one and committed later than this
#: after it sends one of its own after all, seconds.
LOOK_AGAIN = 0.025
#: How many times a transaction the server ended to break a deadlock is run in all, and
#: the pause before each run again (times the runs so far), seconds.
DEADLOCK_TRIES = 3
DEADLOCK_PAUSE = 0.05

#: R47: how the listing's key, batch and searched filters (``rows.more_filters``) are
#: written here (fragments of ``pg_sql.list_jobs``' conditions): ``strpos`` is a
#: case-sensitive "contains"; the payload's bytes are searched for the text's UTF-8
#: bytes; the id past the newest is two index steps, one down each table's primary key.
LISTING_DIALECT = rows.ListingDialect(
    mark=lambda key: f"%({key})s",
    contains=lambda column, param: f"strpos({column}, {param}) > 0",
    payload_contains=lambda param: f"position(convert_to({param}, 'UTF8') in payload) > 0",
    past_newest="(SELECT coalesce(greatest((SELECT max(id) FROM jobs), "
                "(SELECT max(id) FROM finished_jobs)), 0) + 1)",
    # R54: containment, which each table's GIN index on ``meta`` serves.
    meta_matches=lambda pairs, mark: ([pg_sql.META_CONTAINS], {"meta": json.dumps(pairs)}),
    meta_indexed=True,
)


def chain_condition(chain: str) -> str:
    """R47: a chain's rows as the ids its first job and the chain indexes of both tables
    give, read first (an InitPlan): an ``id = … OR chain_root = …`` left the planner
    free to walk a table's primary key in the listing's order instead, to the chain's
    first id. ``chain``: the placeholder of the chain's first id."""
    return (f"id = ANY(ARRAY(SELECT {chain}::bigint UNION ALL "
            f"SELECT id FROM all_jobs WHERE chain_root = {chain}::bigint))")


class PostgresStore(SharedStore, AsyncEnqueue):
    """Where jobs live when many hosts share them (see the module docstring)."""

    #: Every statement it runs (``SharedStore`` runs its share of them through it).
    statements = pg_sql
    #: R54: ``list_jobs(meta=...)`` is read through a GIN index (``meta @> …``).
    meta_indexed = True

    @staticmethod
    def list_param(values: list) -> list:
        """A list as this dialect's statements take it: an array."""
        return list(values)

    def __init__(self, url: str, *, create: bool = True, max_payload: int = MAX_PAYLOAD_BYTES,
                 readonly: bool = False, durability: str | None = None) -> None:
        self.target = parse_url(url, durability)
        #: What operators see: the URL without its password.
        self.path = self.target.shown
        self.max_payload = max_payload
        self._create = create and not readonly
        #: Every store that may write brings an older schema up to date (as SQLite's).
        self._upgrade = not readonly
        self._connections: PerThread[Any] = PerThread(self._open, close_quietly)
        #: R11c: when (``time.monotonic``) a plain enqueue's notification into each
        #: queue last committed, in this process.
        self._notified: dict[str, float] = {}
        #: R11c: ``NOTIFY_QUIET`` (0 sends every notification).
        self.notify_quiet = NOTIFY_QUIET
        _ = self.conn  # connect now, so a bad URL is reported at connect()

    # -- connections ----------------------------------------------------------------------

    @property
    def conn(self) -> Any:
        """This thread's connection (R42: a store is used from many threads at once;
        a connection has one transaction state); a fork opens its own."""
        conn = self._connections.get()
        if conn.closed:
            self._connections.drop_current()
            conn = self._connections.get()
        return conn

    def _open(self) -> Any:
        conn = open_connection(self.target)
        try:
            ensure_schema(conn, self.target, create=self._create, upgrade=self._upgrade)
        except psycopg.Error as exc:
            conn.close()
            raise StoreError(f"opening the store at {self.path} failed: "
                             f"{first_line(exc)}") from exc
        except BaseException:
            conn.close()
            raise
        return conn

    def close(self) -> None:
        self._connections.close_all()

    def transaction(self, what: str, fn: Callable[[Any], Any]) -> Any:
        """Run ``fn(conn)`` in one transaction; StoreError naming ``what`` on failure.
        A broken connection is dropped, so the next call reconnects (R26).

        A transaction the server chose to end a deadlock is run again whole, up to
        ``DEADLOCK_TRIES`` times: it was rolled back whole, and no ``fn`` here writes
        anything but rows. An operator's many-row call (``cancel_many``, a dead retry, a
        batch cancel) takes rows in the order given while pools' turns take theirs in
        their own, and the server breaks such a cycle by failing one of them; a pool's
        turn is retried by its pool (R26), and this is the caller's retry.

        A transaction ``fn`` leaves failed (a statement failed and ``fn`` went on
        without a savepoint round it) is rolled back and raises, where its commit would
        have been a rollback the caller never heard of."""
        attempt = 1
        while True:
            try:
                conn = self.conn
                outermost = conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
                with conn.transaction():
                    scope(conn, self.target)
                    answer = fn(conn)
                    if conn.info.transaction_status == psycopg.pq.TransactionStatus.INERROR:
                        # A statement failed and ``fn`` went on: the server would turn the
                        # commit into a rollback, and the answer would describe writes
                        # that were never kept.
                        raise StoreError(f"{what} failed: a statement in it failed, and "
                                         f"nothing of it was kept")
                return answer
            except psycopg.Error as exc:
                if (isinstance(exc, psycopg.errors.DeadlockDetected) and outermost
                        and attempt < DEADLOCK_TRIES):
                    log.info("%s was ended by the server to break a deadlock; running it again",
                             what)
                    time.sleep(DEADLOCK_PAUSE * attempt)
                    attempt += 1
                    continue
                self._drop_if_broken()
                raise StoreError(f"{what} failed: {self.target.scrub(first_line(exc))}") from exc

    def statement(self, what: str, fn: Callable[[Any], Any]) -> Any:
        """Run ``fn(conn)``, whose statements each commit as they run (autocommit: for
        work that is one statement, or whose statements stand alone); behind a pooler,
        in a transaction, which sets the schema. StoreError naming ``what`` on failure."""
        if self.target.pooler:
            return self.transaction(what, fn)
        try:
            return fn(self.conn)
        except psycopg.Error as exc:
            self._drop_if_broken()
            raise StoreError(f"{what} failed: {self.target.scrub(first_line(exc))}") from exc

    def read(self, what: str, query: str, params: Any = None) -> list[tuple]:
        """One query's rows, outside any transaction of ours (``statement``)."""
        return self.statement(what, lambda conn: conn.execute(query, params).fetchall())

    def read_rows(self, what: str, query: str, params: Any = None) -> list[tuple]:
        """``read`` under the name the stores' shared helpers call (``StoreBatches``)."""
        return self.read(what, query, params)

    def _drop_if_broken(self) -> None:
        conn = self._connections.current()
        if conn is not None and (conn.closed or conn.broken):
            self._connections.drop_current()

    @staticmethod
    def server_now(conn: Any) -> float:
        """R7a: the server's clock (the transaction's start, inside one)."""
        return conn.execute(pg_sql.SERVER_NOW).fetchone()[0]

    def clock(self) -> float:
        """R7a: the server's time (see ``Store.clock``)."""
        return self.transaction("reading the server's clock", self.server_now)

    # -- enqueue (R1-R5) ---------------------------------------------------------------------

    def enqueue_with(self, name: str, *, args: tuple | list = (), kwargs: dict | None = None,
                     key: str | None = None, delay: float | timedelta | None = None,
                     priority: int | None = None, deadline: datetime | float | None = None,
                     max_attempts: int | None = None, queue: str | None = None,
                     timeout: float | None = None, then: Any = None, connection: Any = None,
                     now: float | None = None, batch: int | None = None,
                     key_period: float | timedelta | None = None, group: Any = None,
                     meta: dict[str, Any] | None = None) -> Handle:
        """Queue one job (see ``Store.enqueue_with``). Its run_at is the server's now
        plus ``delay`` (R7a); ``now`` is accepted for the protocol (checked as SQLite
        checks it) and ignored."""
        bounds.now_or(now)
        rows.check_batch_options(batch, key=key, connection=connection)
        period = rows.key_period(key_period, key)
        meta, then = rows.stamp_call(name, args, kwargs, meta, then)  # R55
        # Validated on a clock of 0: the row takes the server's time when it is written.
        job = rows.new_job(name, args, kwargs, key, delay, priority, deadline, max_attempts,
                           queue, timeout, 0.0, rows.chain_json(then, self.max_payload, name),
                           self.max_payload, group, meta)._replace(batch_id=batch)
        if connection is not None:
            rows.check_connection(connection)
            # R5: inside the caller's own transaction, on its connection (whose
            # search_path is its own: the table is named with the store's schema).
            try:
                return self._insert(connection, job, qualified=True, period=period)
            except psycopg.Error as exc:
                raise StoreError(f"enqueue of {name} on the caller's connection failed: "
                                 f"{first_line(exc)}") from exc

        if batch is None and period is None:
            # Issue 25: the row and its notification are one statement, atomic alone:
            # committed as it runs, one round trip instead of BEGIN, it and COMMIT.
            return self._plain_enqueue(job)

        def insert(conn: Any) -> Handle:
            handle = self._insert(conn, job, period=period)
            if batch is not None:
                self.batches.join(conn, batch, [handle.id])
            return handle
        return self.transaction(f"enqueue of {name}", insert)

    def _plain_enqueue(self, job: rows.NewJob) -> Handle:
        """R11c: one statement; without its notification when one into the same queue
        was sent less than ``notify_quiet`` ago, which a woken pool's second look
        (``LOOK_AGAIN`` after it) covers, as long as this one commits within that of
        the notifying one's sending."""
        queue = job.queue
        last = self._notified.get(queue)
        sent = time.monotonic()
        quiet = job.run_at == 0 and last is not None and sent - last < self.notify_quiet
        if not quiet:
            handle = self.statement(f"enqueue of {job.name}", lambda conn: self._insert(conn, job))
            if job.run_at == 0:
                # Counted from before the statement went: a pool can wake on its
                # notification before this process has read the reply, and its second look
                # (``LOOK_AGAIN`` after it wakes) must not come before the time a quiet
                # enqueue counts on below.
                self._notified[queue] = sent
            return handle
        handle = self.statement(f"enqueue of {job.name}",
                                lambda conn: self._insert(conn, job, quiet=True))
        if time.monotonic() - last >= LOOK_AGAIN:
            # Committed too long after the notification it counted on: wake the pools.
            self.statement(f"enqueue of {job.name}",
                           lambda conn: self.notify_ready(conn, queue))
        return handle

    def insert_job(self, conn: Any, row: rows.NewJob) -> int:
        """Write one validated row in ``conn``'s transaction; its id (a batch
        member's add: it has no key, so it is never a duplicate)."""
        return self._insert(conn, row).id

    def take_lanes(self, conn: Any, jobs: Sequence[rows.NewJob]) -> None:
        """R35: before a write inserts several rows, the lanes of those that carry a
        group of a limited name, taken in key order (``LANES_OF_GROUPS``): each row's
        insert makes its lane as it goes in, and rows of two groups written in opposite
        orders by two transactions deadlocked."""
        grouped = [(job.queue, job.priority, job.name, job.grp) for job in jobs
                   if job.grp is not None]
        if len(grouped) < 2:
            return  # one row takes one lane: no order to keep
        queues, priorities, names, groups = (list(column) for column in zip(*grouped))
        conn.execute(pg_sql.LANES_OF_GROUPS, {"queues": queues, "priorities": priorities,
                                              "names": names, "groups": groups})

    def _insert(self, conn: Any, job: rows.NewJob, *, qualified: bool = False,
                period: float | None = None, quiet: bool = False) -> Handle:
        """Write one row; a live job with its key (or, with ``period``, one that
        finished within it: a period reaches no further back than the sweep of
        done and dead rows) makes it a duplicate of that job."""
        if qualified:
            # The caller's connection may make rows of any shape; read tuples here.
            conn = conn.cursor(row_factory=psycopg.rows.tuple_row)
        finished = f"{self.target.schema}.finished_jobs" if qualified else "finished_jobs"
        if period is not None:
            found = conn.execute(pg_sql.FIND_RECENT_KEY_IN.format(finished=finished), {
                "name": job.name, "key": job.key, "period": period}).fetchone()
            if found is not None:
                return Handle(found[0], duplicate=True, store=self)
        params = dict(_job_params(job), channel=channel_name(self.target.schema))
        jobs = f"{self.target.schema}.jobs" if qualified else "jobs"
        limits = f"{self.target.schema}.jobpool_limits"
        statement = (pg_sql.INSERT_JOB_INTO.format(jobs=jobs, limits=limits) if qualified
                     else pg_sql.INSERT_JOB_QUIET if quiet else pg_sql.INSERT_JOB)
        row = conn.execute(statement, params).fetchone()
        if row is not None and period is not None:
            # The live job with the key may have finished since the look above: look
            # again (a new snapshot sees it), and take the row back if it did.
            found = conn.execute(pg_sql.FIND_RECENT_KEY_IN.format(finished=finished), {
                "name": job.name, "key": job.key, "period": period}).fetchone()
            if found is not None:
                conn.execute(pg_sql.DELETE_NEW_JOB_IN.format(jobs=jobs), {"id": row[0]})
                return Handle(found[0], duplicate=True, store=self)
        if row is not None:
            return Handle(row[0], store=self)
        # R3: a live job holds this key; hand back its id and write nothing.
        existing = conn.execute(pg_sql.FIND_LIVE_KEY_IN.format(jobs=jobs),
                                {"name": job.name, "key": job.key}).fetchone()
        if existing is None:
            raise StoreError(f"enqueue of {job.name}: key {job.key!r} was held and then freed "
                             f"mid-enqueue; try again")
        return Handle(existing[0], duplicate=True, store=self)

    def enqueue_many(self, name: str, items: Iterable[Any], *, delay: float | None = None,
                     priority: int | None = None, queue: str | None = None,
                     max_attempts: int | None = None, keys: Iterable[str | None] | None = None,
                     now: float | None = None, batch: int | None = None,
                     meta: dict[str, Any] | None = None) -> Handles:
        """Queue many in one transaction, all or nothing (R4): JSON arguments as one
        array the server splits, anything else streamed with COPY. The ids come
        back in item order; they need not be consecutive."""
        bounds.now_or(now)  # checked as SQLite checks it; the server's clock dates the rows
        rows.check_batch_options(batch, key=keys)
        options = rows.enqueue_options(name, delay, priority, None, max_attempts, queue, None,
                                       0.0)._replace(batch_id=batch)
        items = rows.item_list(items)
        checked_keys = rows.check_keys(keys, len(items))
        with_meta = rows.carries_meta(meta)
        if checked_keys is not None:
            keyed = rows.new_jobs(options, items, self.max_payload, checked_keys, meta, hooks=True)

            def insert_keyed(conn: Any) -> list[Handle]:
                self.take_lanes(conn, keyed)
                return [self._insert(conn, job) for job in keyed]
            handles = self.transaction(f"enqueue_many of {name}", insert_keyed)
            return Handles([h.id for h in handles], store=self,
                           duplicates=frozenset(i for i, h in enumerate(handles) if h.duplicate))
        # A per-group job's rows each take their group from their own arguments;
        # rows with metadata (R54, R55) each carry their own.
        as_json = (rows.json_batch(items, name) if options.serializer == "json"
                   and options.group_by is None and not with_meta else None)
        if as_json is not None:
            rows.check_items(options, items, as_json[1])  # R1: new_jobs checks its own
        if as_json is not None and len(as_json[0].encode()) + 5 <= self.max_payload:
            # No element can be longer than the whole: every payload is within the limit.
            return self._insert_json_batch(options, len(items), *as_json)
        new_jobs = rows.new_jobs(options, items, self.max_payload, meta=meta, hooks=True)
        wait = options.run_at  # the delay, on the validation clock of 0

        def insert(conn: Any) -> list[int]:
            server_now = self.server_now(conn)
            ids = [r[0] for r in conn.execute(pg_sql.RESERVE_IDS, {"count": len(new_jobs)})]
            self.take_lanes(conn, new_jobs)
            with conn.cursor().copy(pg_sql.COPY_JOBS) as copy:
                for job_id, job in zip(ids, new_jobs):
                    copy.write_row((job_id, job.queue, job.name, None, _bytes(job.payload),
                                    job.serializer, job.priority, "ready", server_now + wait,
                                    server_now + wait, job.max_attempts, None, job.timeout,
                                    server_now, None, batch, job.grp, job.meta))
            # R35: what COPY could not compute: the group of a limited name's rows.
            conn.execute(pg_sql.ADOPT_BULK, {"ids": ids, "name": name})
            if batch is not None:
                self.batches.join(conn, batch, ids)
            self.notify_ready(conn, options.queue)
            return ids
        ids = self.transaction(f"enqueue_many of {name}", insert) if new_jobs else []
        return Handles(ids, store=self)

    def _insert_json_batch(self, options: rows.EnqueueOptions, count: int, batch: str,
                           args_only: bool) -> Handles:
        def insert(conn: Any) -> list[int]:
            server_now = self.server_now(conn)
            written = conn.execute(pg_sql.INSERT_BATCH, {
                "queue": options.queue, "name": options.name, "args_only": args_only,
                "priority": options.priority, "run_at": server_now + options.run_at,
                "max_attempts": options.max_attempts, "timeout": options.timeout,
                "now": server_now, "batch": batch, "batch_id": options.batch_id}).fetchall()
            ids = sorted(job_id for job_id, _limited in written)
            if len(ids) != count:
                raise StoreError(f"enqueue_many of {options.name}: {len(ids)} rows written "
                                 f"for {count} items")  # rolls the batch back
            if written and written[0][1]:
                # R35: a limited name's rows were written without their groups.
                conn.execute(pg_sql.ADOPT_BULK, {"ids": ids, "name": options.name})
            if options.batch_id is not None:
                self.batches.join(conn, options.batch_id, ids)
            self.notify_ready(conn, options.queue)
            return ids
        ids = self.transaction(f"enqueue_many of {options.name}", insert) if count else []
        return Handles(ids, store=self)

    # -- batches (R34) -----------------------------------------------------------------------

    # -- checkpoints (R37) -----------------------------------------------------------------

    def add_to_own_batch(self, owner: str, job_id: int, attempt: int, first_position: int,
                         jobs: list[rows.NewJob]) -> list[tuple[int, bool]]:
        """R34: a running member's adds to its batch (``StoreBatches.add_from_member``),
        made on a clock of 0 like every row here (they take the server's time); each
        insert wakes the listening pools itself."""
        return self.batches.add_from_member(owner, job_id, attempt, first_position, jobs)

    # -- reading ---------------------------------------------------------------------------

    def get(self, job_id: int, *, raw_result: bool = False) -> dict[str, Any]:
        found = self.read(f"reading job {job_id}", pg_sql.GET_JOB, {"id": bounds.row_id(job_id)})
        if not found:
            raise JobNotFound(f"no job with id {job_id}")
        return self.job(found[0], raw_result=raw_result)

    def waiting_steps(self, job_id: int) -> list[dict[str, Any]]:
        found = self.read(f"reading the chain of job {job_id}", pg_sql.WAITING_STEPS,
                          {"id": bounds.row_id(job_id)})
        return rows.waiting_steps(found[0][0] if found else None)

    _COLUMNS = [c.strip() for c in pg_sql.JOB_COLUMNS.split(",")]

    def job(self, row: tuple, *, raw_result: bool = False) -> dict[str, Any]:
        """A row of ``pg_sql.JOB_COLUMNS`` as ``get`` returns it."""
        job = rows.job_dict(self._COLUMNS, row, raw_result=raw_result)
        for field in ("payload", "result"):
            if isinstance(job.get(field), memoryview):
                job[field] = bytes(job[field])
        return job

    def list_jobs(self, *, status: str | None = None, name: str | None = None,
                  queue: str | None = None, chain: int | None = None, limit: int = 100,
                  newest_first: bool = False, after: int | None = None,
                  now: float | None = None, **more: Any) -> list[dict[str, Any]]:
        """Jobs in id order, or the newest first, from past ``after`` (see
        ``Store.list_jobs``), scheduled judged on the server's clock."""
        limit = rows.listing_limit(limit)
        bounds.now_or(now)  # checked as SQLite checks it; the server's clock judges
        rows.check_listed_status(status)
        where, params = rows.listing_filters(name, queue, chain, lambda key: f"%({key})s",
                                             after=after, newest_first=newest_first,
                                             chain_of=chain_condition)
        searched, found = rows.more_filters(LISTING_DIALECT, status, name, after=after,
                                            newest_first=newest_first, **more)
        where, params = where + searched, dict(params, **found)
        # R54: a metadata filter newest first is read near the keyset, then far below it.
        query = pg_sql.list_jobs(status, where, newest_first=newest_first,
                                 meta_near=newest_first and pg_sql.META_CONTAINS in where,
                                 after=after is not None)
        jobs = []
        for row in self._list("listing jobs", query, dict(params, limit=limit)):
            job = self.job(row[:-1])
            if job["status"] == "ready" and job["run_at"] is not None and job["run_at"] > row[-1]:
                job["status"] = "scheduled"
            jobs.append(job)
        return jobs

    def count_jobs(self, *, status: str | None = None, name: str | None = None,
                   queue: str | None = None, chain: int | None = None, at_most: int,
                   newest_first: bool = False, after: int | None = None,
                   now: float | None = None, **more: Any) -> int:
        """How many jobs ``list_jobs`` with these filters could list, counting at most
        ``at_most`` (R28)."""
        at_most = rows.listing_limit(at_most, "at_most")
        bounds.now_or(now)  # checked as SQLite checks it; the server's clock judges
        rows.check_listed_status(status)
        where, params = rows.listing_filters(name, queue, chain, lambda key: f"%({key})s",
                                             after=after, newest_first=newest_first,
                                             chain_of=chain_condition)
        searched, found = rows.more_filters(LISTING_DIALECT, status, name, after=after,
                                            newest_first=newest_first, **more)
        where, params = where + searched, dict(params, **found)
        ((count,),) = self._list("counting jobs", pg_sql.count_jobs(status, where),
                                 dict(params, most=at_most))
        return count

    def _list(self, what: str, query: str, params: dict[str, Any]) -> list[tuple]:
        def read(conn: Any) -> list[tuple]:
            conn.execute(pg_sql.LISTING_PLANS)
            return conn.execute(query, params).fetchall()
        return self.transaction(what, read)

    @property
    def dead(self) -> Any:
        """Dead letters: list, retry, delete, purge (R32)."""
        from jobpool.store.postgres.retention import PgDeadLetters
        return PgDeadLetters(self)

    def stats(self, now: float | None = None) -> dict[str, Any]:
        """Counts by status (``ready``: due now by the server's clock; ``scheduled``:
        later) and each live pool's counters (R29a)."""
        bounds.now_or(now)  # checked as SQLite checks it; the server's clock counts

        def read(conn: Any) -> tuple[dict, int, float]:
            server_now = self.server_now(conn)
            counts = dict.fromkeys(rows.STATUSES, 0)
            scheduled = 0
            for status, count, later in conn.execute(pg_sql.COUNT_LIVE, {"now": server_now}):
                counts[status] = count
                if status == "ready":
                    scheduled = later
            counts.update(dict(conn.execute(pg_sql.COUNT_FINISHED).fetchall()))
            return counts, scheduled, server_now
        counts, scheduled, server_now = self.transaction("reading stats", read)
        return {"ready": counts["ready"] - scheduled, "scheduled": scheduled,
                "running": counts["running"], "done": counts["done"], "dead": counts["dead"],
                "supervisors": [dict(p["counters"], owner=p["owner"], procs=p["procs"],
                                     heartbeat_at=p["heartbeat_at"])
                                for p in liveness.live_pools(self.pools(server_now))]}

    def pools(self, now: float | None = None, *,
              dead_after: float = liveness.DEAD_AFTER) -> list[dict[str, Any]]:
        """Every pool row, each judged dead or alive on the server's clock (R7a):
        heartbeats are dated by the server, so a host whose own clock runs ahead
        never takes a live pool's beat for a stale one. ``now`` is ignored (once checked
        as SQLite checks it)."""
        bounds.now_or(now)
        names = ("owner", "host", "pid", "procs", "queues", "core", "started_at", "heartbeat_at",
                 "counters", "slots", "stop_requested", "desired_procs", "names")

        def read(conn: Any) -> tuple[float, list[tuple]]:
            return self.server_now(conn), conn.execute(pg_sql.LIST_POOLS).fetchall()
        server_now, found = self.transaction("reading pools", read)
        return [rows.pool_dict(names, row, server_now, dead_after) for row in found]

    def dashboard(self, now: float, *, failures: int = 5) -> DashboardRows:
        """R29: one frame's rows, read in one transaction (REPEATABLE READ would be
        stricter; the counts of one statement are consistent with each other). R47:
        each read is bounded (counts to ``COUNT_MOST + 1``), so the transaction plans
        without sequential scans, as listings do: one stops at its bound only where
        the rows it wants are dense. R7a: the rows are judged by the server's clock,
        which dated them (``now`` is checked, as elsewhere, and the frame is dated by
        the server's time: a viewer whose clock is off shows what the pools see)."""
        bounds.now_or(now)
        failures = rows.listing_limit(failures, "failures")
        def read(conn: Any) -> DashboardRows:
            conn.execute(pg_sql.LISTING_PLANS)
            server_now = self.server_now(conn)
            most = {"most": COUNT_MOST + 1}
            counts = conn.execute(pg_sql.DASHBOARD_QUEUE_COUNTS,
                                  {"now": server_now, **most}).fetchall()
            done = conn.execute(pg_sql.DONE_COUNT, most).fetchone()[0]
            since = conn.execute(pg_sql.DONE_SINCE, {"since": server_now - 60.0}).fetchall()
            failed = conn.execute(pg_sql.RECENT_FAILURES, {
                "limit": failures, "window": pg_sql.FAILURE_WINDOW}).fetchall()
            running = conn.execute(pg_sql.RUNNING_JOBS).fetchall()
            paused = [row[0] for row in conn.execute(pg_sql.PAUSED_QUEUES)]
            batches = conn.execute(pg_sql.OPEN_BATCHES, {"limit": OPEN_BATCHES_SHOWN}).fetchall()
            return DashboardRows(queue_counts=counts, done=done, done_since=since,
                                 failures=failed, running=running, pools=[], unserved=[],
                                 paused=paused, batches=batches, now=server_now)
        snapshot = self.transaction("reading the dashboard snapshot", read)
        pools = self.pools()
        return snapshot._replace(pools=pools, unserved=self._unserved(liveness.live_pools(pools)))

    def queue_metrics(self, now: float) -> QueueMetrics:
        """Per-queue counts and the oldest due job, dated by the server (R7a)."""
        def read(conn: Any) -> QueueMetrics:
            server_now = self.server_now(conn)
            counts = conn.execute(pg_sql.QUEUE_COUNTS, {"now": server_now}).fetchall()
            oldest = conn.execute(pg_sql.OLDEST_DUE, {"now": server_now}).fetchall()
            paused = [row[0] for row in conn.execute(pg_sql.PAUSED_QUEUES)]
            return QueueMetrics(now=server_now, counts=counts, oldest_due=oldest, paused=paused)
        return self.transaction("reading queue metrics", read)

    def unserved(self, now: float | None = None) -> list[dict[str, Any]]:
        return self._unserved(liveness.live_pools(self.pools(now)))

    def _unserved(self, live: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """R28, R47: the (queue, name) pairs of ready rows, a step of
        ``jobs_ready_pairs`` each, and the ready rows of those no live pool serves, each
        counted to its bound (``records.unserved_groups``), in one transaction, with the
        listing's settings and no bitmap (a pair's count stops at its bound in the
        index's order: a scan would stop there only where the pair's rows are dense, a
        bitmap never). Nothing is read while no pool is live."""
        if not live:
            return []
        most = COUNT_MOST + 1

        def read(conn: Any) -> list[dict[str, Any]]:
            conn.execute(pg_sql.LISTING_PLANS)
            conn.execute(pg_sql.PAIR_PLANS)
            return unserved_groups(
                conn.execute(pg_sql.READY_BY_NAME).fetchall(), live,
                lambda queue, name: conn.execute(pg_sql.READY_PAIR_COUNT, {
                    "queue": queue, "name": name, "most": most}).fetchone()[0])
        return self.transaction("reading ready jobs", read)

    def next_due(self, names: Iterable[str], queues: Iterable[str]) -> float | None:
        queues = list(queues)
        if not queues:
            return None  # every queue paused (R38), say: nothing is due
        found = self.read("reading the queue", pg_sql.NEXT_READY,
                          {"names": list(names), "queues": queues})
        # R44: a NaN or infinite due time is never due: no job to wait for.
        return found[0][0] if found and row_codec.is_time(found[0][0]) else None

    # -- operators (R25, R27, R31) -----------------------------------------------------------

    def cancel(self, job_id: int, now: float | None = None) -> str:
        """R31 (see ``Store.cancel``), through ``lifecycle.decide`` like every transition."""
        bounds.now_or(now)  # checked as SQLite checks it; the server's clock dates it
        bound = bounds.row_id(job_id)

        def cancel(conn: Any) -> str:
            what = self._cancel_one(conn, bound, self.server_now(conn))
            if what is None:
                raise JobNotFound(f"no job with id {job_id}")
            return what
        return self.transaction(f"cancelling job {job_id}", cancel)

    def cancel_many(self, ids: Iterable[int], now: float | None = None) -> dict[int, str]:
        """R31 (see ``Store.cancel_many``)."""
        bounds.now_or(now)
        ids = rows.job_ids(ids, "cancel_many")

        bound = [bounds.row_id(job_id) for job_id in ids]  # 0 for an id no row can have

        def cancel(conn: Any) -> dict[int, str]:
            params = {"ids": bound, "error": _cancel_reason(), "now": self.server_now(conn)}
            for status in ("ready", "running"):  # the order turns take them in (statements)
                conn.execute(pg_sql.LOCK_NAMED, {**params, "status": status})
            cancelled = {row[0] for row in conn.execute(pg_sql.CANCEL_READY_MANY, params)}
            requested = {row[0] for row in conn.execute(pg_sql.REQUEST_CANCEL_MANY, params)}
            rest = [b for b in bound if b not in cancelled and b not in requested]
            statuses = self.statuses_of(conn, rest)
            return {job_id: "cancelled" if b in cancelled else "requested" if b in requested
                    else statuses.get(b, rows.NO_SUCH_JOB) for job_id, b in zip(ids, bound)}
        return self.transaction("cancelling jobs", cancel)

    def _cancel_one(self, conn: Any, bound: int, now: float) -> str | None:
        """One job's cancel in ``conn``'s transaction; None when there is no such job."""
        params = {"id": bound, "error": _cancel_reason(), "now": now}
        if conn.execute(pg_sql.CANCEL_READY, params).fetchone():
            return "cancelled"
        if conn.execute(pg_sql.REQUEST_CANCEL, params).fetchone():
            return "requested"
        row = conn.execute(pg_sql.JOB_STATUS, params).fetchone()
        return None if row is None else row[0]

    @staticmethod
    def statuses_of(conn: Any, ids: list[int]) -> dict[int, str]:
        """The status of each row of ``ids`` there is (``all_jobs``), by id, in
        ``conn``'s transaction; nothing is read for no ids."""
        return dict(conn.execute(pg_sql.STATUSES_OF, {"ids": ids}).fetchall()) if ids else {}

    def _made_due(self, conn: Any, moved: list) -> set[int]:
        """R51: wake the pools of the queues whose jobs a run-now moved (R11)."""
        for queue in {queue for _job_id, queue in moved}:
            self.notify_ready(conn, queue)
        return {job_id for job_id, _queue in moved}

    def run_now(self, ids: Iterable[int], now: float | None = None) -> dict[int, str]:
        """R51 (see ``Store.run_now``); ``now`` is the server's unless given."""
        ids = rows.job_ids(ids, "run_now")
        bound = [bounds.row_id(i) for i in ids]  # 0 for an id no row can have
        when = bounds.now_or(now) if now is not None else None

        def run_now(conn: Any) -> dict[int, str]:
            params = {"ids": bound, "now": self.server_now(conn) if when is None else when}
            made_due = self._made_due(conn, conn.execute(pg_sql.RUN_NOW, params).fetchall())
            statuses = self.statuses_of(conn, bound)
            return rows.run_now_answers(ids, made_due, statuses)
        return self.transaction("making jobs due now", run_now)

    def run_now_matching(self, *, name: str | None = None, queue: str | None = None,
                         now: float | None = None) -> int:
        """R51 (see ``Store.run_now_matching``)."""
        rows.filter_text("name", name)
        queue = None if queue is None else rows.queue_name(queue)

        def run_now(conn: Any) -> int:
            params = {"name": name, "queue": queue,
                      "now": self.server_now(conn) if now is None else bounds.now_or(now)}
            return len(self._made_due(conn, conn.execute(pg_sql.RUN_NOW_MATCHING,
                                                         params).fetchall()))
        return self.transaction("making jobs due now", run_now)

    # -- a supervisor's side --------------------------------------------------------------------

    def claimer(self, owner: str, names: Sequence[str], queues: Sequence[str],
                policies: dict[str, lifecycle.Policy]) -> Any:
        """The hot path: the engine (``jobpool.engine``) over this dialect's driver
        (``store/postgres/driver.py``), on a connection of its own."""
        from jobpool.engine import Claimer
        from jobpool.store.postgres.driver import PgDriver
        return Claimer(PgDriver(self.target), owner, names, queues, policies)

    def check_writable(self) -> None:
        """Raise ReadOnlyStoreError if this role may not write the store's tables."""
        try:
            conn = self.conn
            with conn.transaction(force_rollback=True):
                scope(conn, self.target)
                conn.execute(pg_sql.PROBE_WRITE)
        except psycopg.errors.InsufficientPrivilege as exc:
            raise ReadOnlyStoreError(f"{self.path} cannot be written by this role: "
                                     f"{first_line(exc)}") from exc
        except psycopg.Error as exc:
            raise StoreError(f"checking {self.path} failed: {first_line(exc)}") from exc

    def heartbeat(self, beat: Heartbeat, progress: Iterable[ProgressReport],
                  now: float) -> Requests:
        """One transaction: the pool's row (dated by the server, R7a), its progress,
        and the operators' requests for it, each taken once."""
        progress = list(progress)  # read again if the transaction is run again

        def write(conn: Any) -> Requests:
            # A beat lost to a crash is written again a second later: it need not
            # wait for its WAL to reach the disk (claims and settles do).
            conn.execute(pg_sql.COMMIT_ASYNC)
            server_now = self.server_now(conn)
            params = {"owner": beat.owner, "host": beat.host, "pid": beat.pid,
                      "procs": beat.procs, "queues": ",".join(beat.queues),
                      "names": ",".join(beat.names), "core": beat.core,
                      "now": server_now, "counters": beat.counters_json,
                      "slots": beat.slots_json}
            beat_row = conn.execute(pg_sql.UPSERT_POOL, params).fetchone()
            _write_progress(conn, beat.owner, progress)
            if beat.rollups:
                # Sorted by name (``Rollups.rows``): pools beating at once lock a
                # minute's rows in one order, so they wait for each other, never deadlock.
                with conn.cursor() as cur:
                    cur.executemany(pg_sql.UPSERT_ROLLUP,
                                    rollups.params(beat.rollups, server_now))
                conn.execute(pg_sql.TRIM_ROLLUPS, {"before": server_now - rollups.KEEP})
            return self.requests_read(conn, beat.owner, *beat_row)
        return self.transaction("heartbeat", write)

    def rollups(self, since: float) -> list[dict[str, Any]]:
        """R56: the per-minute rollups from the minute of ``since`` on (a key range)."""
        return rollups.as_dicts(self.read("reading rollups", pg_sql.READ_ROLLUPS,
                                     {"since": rollups.minute_of(since)}))

    def rollup_totals(self, since: float, *, by: str,
                      name: str | None = None) -> list[dict[str, Any]]:
        rows.filter_text("name", name)
        return rollups.as_dicts(self.read(
            "reading rollups", pg_sql.ROLLUPS_BY_MINUTE if rollups.by_minute(by)
            else pg_sql.ROLLUPS_BY_NAME, {"since": rollups.minute_of(since), "name": name}))

    def set_progress(self, owner: str, progress: Iterable[ProgressReport]) -> None:
        progress = list(progress)  # read again if the transaction is run again

        def write(conn: Any) -> None:
            conn.execute(pg_sql.COMMIT_ASYNC)  # a report, not a transition: see heartbeat
            _write_progress(conn, owner, progress)
        self.transaction("writing progress", write)

    def pending_hooks(self, names: Iterable[str]) -> list[int]:
        return [r[0] for r in self.read("reading pending on_dead hooks", pg_sql.PENDING_HOOKS,
                                        {"names": list(names)})]

    def enqueue_occurrence(self, name: str, occurrence: float) -> Handle | None:
        """R33: the occurrence once across every host: the ``periodic`` row and the
        job are written in one transaction."""
        occurrence = bounds.now_or(occurrence)  # a key and a time: a finite number
        job = rows.new_job(name, (), None, f"{name}@{occurrence:.3f}", None, None, None, None,
                           None, None, 0.0, None, self.max_payload)

        def advance(conn: Any) -> Handle | None:
            if conn.execute(pg_sql.ADVANCE_PERIODIC,
                            {"name": name, "occurrence": occurrence}).fetchone() is None:
                return None
            return self._insert(conn, job)
        return self.transaction(f"enqueueing periodic {name}", advance)

    def periodic_occurrences(self) -> dict[str, float]:
        return dict(self.read("reading periodic jobs", LIST_PERIODIC))

    def sweep(self, now: float, *, result_ttl: float, dead_letter_limit: int) -> int:
        """R32: one bounded batch of each retention rule, on the server's clock."""
        now, result_ttl, dead_letter_limit = rows.sweep_settings(now, result_ttl,
                                                                 dead_letter_limit)

        def sweep(conn: Any) -> int:
            server_now = self.server_now(conn)
            removed = conn.execute(pg_sql.PURGE_FINISHED, {
                "status": "done", "before": server_now - result_ttl, "limit": SWEEP_BATCH}).fetchone()[0]
            cutoff = conn.execute(pg_sql.DEAD_CUTOFF, {"keep": dead_letter_limit}).fetchone()
            if cutoff is not None:
                removed += conn.execute(pg_sql.PURGE_FINISHED, {
                    "status": "dead", "before": cutoff[0] + 1e-6, "limit": SWEEP_BATCH}).fetchone()[0]
            self.limits.purge_groups(conn, server_now)  # R35/R36: idle groups, not jobs
            return removed + self.batches.purge_in(conn, server_now - result_ttl)
        return self.transaction("retention sweep", sweep)

    def maintenance(self) -> None:
        """PostgreSQL keeps itself (autovacuum); no helper process."""
        return None

    def replaced(self) -> str | None:
        """R45 is about files: a database is not moved under a running pool."""
        return None

    def on_store_error(self, error: BaseException) -> None:
        """Nothing to do here: the server keeps its own disk (R26 pauses and retries)."""

    def contended(self, error: BaseException) -> bool:
        """R26: never on PostgreSQL, whose row locks a turn passes over (``SKIP
        LOCKED``) or waits for without a busy timeout: every error backs off."""
        return False

    def finish_waiter(self, job_id: int, poll: float) -> Any:
        """R69: told of the job's end by a notification (``finish_wait``)."""
        return finish_wait.finish_waiter(self.target, job_id, poll)

    def listener(self) -> "Listener | PollOnly":
        """R11a: a LISTEN on the store's channel, so an enqueue on any host wakes the
        pool; behind a transaction-mode pooler (``?pooler=transaction``) LISTEN
        cannot work, and the pool polls."""
        if self.target.pooler:
            return PollOnly()
        return Listener(self.target)

    def notify_ready(self, conn: Any, queue: str) -> None:
        """R11a: wake the pools listening, once this transaction commits. One per
        transaction and queue: an enqueue_many of 100 000 rows sends one."""
        conn.execute(pg_sql.NOTIFY_READY, {"channel": channel_name(self.target.schema),
                                           "queue": queue})


def channel_name(schema: str) -> str:
    """The NOTIFY channel of a store: channels are database-wide, so the schema
    picks it (hashed to fit the 63-byte limit), and two deployments in one
    database never wake each other."""
    return "jobpool_" + hashlib.sha256(schema.encode()).hexdigest()[:24]


class Listener:
    """A connection of its own that LISTENs on the store's channel; the supervisor
    waits on its socket with everything else (R11a).

    A dropped connection (a restart, ``pg_terminate_backend``) is noticed as the
    socket turns readable and fails to read: the listener lets go of it
    (``sock`` None) and reconnects at the pool's next heartbeat (``move_down``),
    after which the pool claims once, so a job enqueued in the gap waits at most
    that long, and the poll stays the fallback."""

    #: R11c: after a wake-up, the pool claims once more this long after it.
    look_again: float | None = LOOK_AGAIN

    def __init__(self, target: Target) -> None:
        self.target = target
        #: What the supervisor's selector watches (None while disconnected).
        self.sock: Watched | None = None
        self._conn: Any = None
        self._connect()

    def _connect(self) -> None:
        try:
            conn = open_connection(self.target, application="jobpool-listener")
        except StoreError:
            return  # the store is down: the poll finds jobs meanwhile
        try:
            conn.execute(pgsql.SQL("LISTEN {}").format(
                pgsql.Identifier(channel_name(self.target.schema))))
        except psycopg.Error:
            conn.close()
            return
        self._conn, self.sock = conn, Watched(os.dup(conn.fileno()))

    def drain(self) -> None:
        """Read the notifications that woke us; on a dropped connection, let go of it."""
        conn = self._conn
        if conn is None:
            return
        try:
            for _notify in conn.notifies(timeout=0):
                pass
            readable = select.poll()
            readable.register(conn.fileno(), select.POLLIN)
            if readable.poll(0):
                # Still readable with nothing left to read: the server hung up (psycopg
                # sees it only when it next talks), or sent a notice; a query tells which.
                conn.execute("SELECT 1")
        except psycopg.Error:
            self.close()

    def move_down(self) -> None:
        """Reconnect a dropped listener (the supervisor calls this every heartbeat)."""
        if self._conn is None:
            self._connect()
        return None

    def close(self) -> None:
        """Let go of the connection. The watched descriptor stays open until the
        supervisor has unregistered it (it closes the old one as it rewires), so
        the selector never holds a registration it cannot remove."""
        conn, self._conn, self.sock = self._conn, None, None
        if conn is not None:
            conn.close()


class Watched:
    """What a supervisor's selector watches for a listener: a duplicate of the
    connection's socket that this object owns. libpq closes its own socket when the
    server hangs up; the duplicate stays valid until it is unregistered and closed,
    so no registration is ever left on a closed (or reused) descriptor number."""

    __slots__ = ("fd",)

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def fileno(self) -> int:
        return self.fd

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class PollOnly:
    """A listener with nothing to listen on: the pool's poll is its only wake-up."""

    sock = None
    look_again = None

    def drain(self) -> None:
        pass

    def move_down(self) -> None:
        return None

    def close(self) -> None:
        pass


def _cancel_reason() -> str:
    """R31: a ready job's cancel as ``lifecycle.decide`` decides it (no attempt runs:
    dead, "cancelled"), the one transition spec every way into a state goes through."""
    return lifecycle.decide(
        lifecycle.Lease(0, "", 0, 1, 0, None, 0.0, False),
        lifecycle.Outcome(0, 0, lifecycle.CANCEL, lifecycle.CANCELLED),
        lifecycle.DEFAULT_POLICY, 0.0, None, lambda _job_id: []).reason


def _bytes(payload: bytes | str) -> bytes:
    return payload.encode() if isinstance(payload, str) else payload


def _job_params(job: rows.NewJob) -> dict[str, Any]:
    return {"queue": job.queue, "name": job.name, "key": job.key, "payload": _bytes(job.payload),
            "serializer": job.serializer, "priority": job.priority, "delay": job.run_at,
            "max_attempts": job.max_attempts, "deadline": job.deadline, "timeout": job.timeout,
            "chain": job.chain, "batch_id": job.batch_id, "grp": job.grp, "meta": job.meta}


def _write_progress(conn: Any, owner: str, progress: Iterable[ProgressReport]) -> None:
    for report in progress:
        conn.execute(pg_sql.SET_PROGRESS, {"id": report.job_id, "owner": owner,
                                           "attempt": report.attempt,
                                           "progress": report.percent, "stage": report.stage})


def connect(url: str, *, create: bool = True, readonly: bool = False,
            durability: str | None = None) -> PostgresStore:
    """Open the PostgreSQL store at ``url`` (see the module docstring); ``durability``
    as the URL's ``?durability=`` (R26a)."""
    return PostgresStore(url, create=create, readonly=readonly, durability=durability)
