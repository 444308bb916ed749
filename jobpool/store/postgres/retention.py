"""Dead letters on PostgreSQL (R32): list, retry, delete and purge, as ``store.dead``.

The same operations and answers as SQLite's (``store/sqlite/retention.py``); what
differs is where the rows are: dead rows live in ``finished_jobs``, and a retry
moves one back to the hot table under its own id.
"""
from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any, Iterable, List  # List: a method here is named list

from jobpool import bounds
from jobpool.store import rows
from jobpool.store.postgres import statements as pg_sql
from jobpool.store.records import RetryReport, SWEEP_BATCH as BATCH
if TYPE_CHECKING:
    from jobpool.store.postgres.store import PostgresStore

try:
    import psycopg
except ImportError:  # pragma: no cover - the store refused to open first
    psycopg = None  # type: ignore[assignment]



class PgDeadLetters:
    """``store.dead`` of a PostgreSQL store."""

    def __init__(self, store: "PostgresStore") -> None:
        self.store = store

    def list(self, *, name: str | None = None, limit: int = 100) -> "list[dict[str, Any]]":
        rows.filter_text("name", name)
        limit = rows.listing_limit(limit)
        query = pg_sql.LIST_DEAD.format(columns=pg_sql.JOB_COLUMNS,
                                        name_filter="AND name = %(name)s" if name is not None
                                        else "")
        return [self.store.job(row) for row in
                self.store.read("listing dead jobs", query, {"name": name, "limit": limit})]

    def ids(self, *, name: str | None = None) -> List[int]:
        rows.filter_text("name", name)
        query = pg_sql.DEAD_IDS.format(name_filter="AND name = %(name)s" if name is not None
                                       else "")
        return [r[0] for r in self.store.read("listing dead jobs", query, {"name": name})]

    def retry(self, ids: Iterable[int], now: float | None = None, *,
              reset_state: bool = False) -> dict[int, str]:
        """Put dead jobs back in line with fresh attempts, keeping a saved state (R37)
        unless ``reset_state``; returns id -> what happened."""
        return self.retry_report(ids, now, reset_state=reset_state).answers

    def retry_report(self, ids: Iterable[int], now: float | None = None, *,
                     reset_state: bool = False) -> RetryReport:
        """``retry``, with the retried members no batch callback follows (R34: those
        of finished batches run alone; those of cancelled ones count again), as the
        retry's own transaction found them.

        Locks are taken in the order turns, members' ends and a batch cancel take them:
        first the lanes of the rows' groups of limited names, in key order (R35); then the
        rows dead in no batch, which take no shard, in two statements (those without a
        key, then those with one under a savepoint, R3); then the shards of every dead
        member of a batch named, by shard, then batch, in one statement, before the
        members without a key move together and any other row alone (a reopen on a
        shard already held); and only then is each batch reopened read, once, FOR
        SHARE. Reading a batch between
        two reopens held its row while the retry waited for a shard a member's end held,
        an end that waited for that row: a deadlock, with several members of a batch
        retried at once (``dead retry --all``); so did two batches' members of one shard
        retried in the other order."""
        ids = rows.job_ids(ids, "dead.retry")
        bounds.now_or(now)  # checked as SQLite checks it; the server's clock dates it

        def retry(conn: Any) -> RetryReport:
            server_now = self.store.server_now(conn)
            outcome: dict[int, str] = {}
            alone: dict[int, list[int]] = {}
            reopened: dict[int, list[int]] = {}
            woken: set[str] = set()  # R11a: the queues whose pools are woken, once each
            bound_ids = {job_id: bounds.row_id(job_id) for job_id in ids}
            conn.execute(pg_sql.DEAD_LANES, {"ids": list(bound_ids.values())})
            found = conn.execute(pg_sql.DEAD_ROWS, {"ids": list(bound_ids.values())}).fetchall()
            batch_of = {row_id: batch for row_id, batch, _, _ in found if batch is not None}
            # Only a row with a key can meet a live job holding it (R3), so a dead row
            # without one (it keeps none: a job's key never changes) is moved without a
            # savepoint, a round trip each way; any other id (one live now may be dead,
            # and its key taken, by the time its turn comes) takes one.
            unkeyed = {row_id for row_id, _, keyless_dead, _ in found if keyless_dead}
            # Those in no batch take no shard either: all of them in one statement.
            loose = [row_id for row_id in unkeyed if row_id not in batch_of]
            revived: set[int] = set()

            def woke(moved: Any) -> None:
                for row_id, queue in moved:
                    revived.add(row_id)
                    if queue not in woken:
                        woken.add(queue)
                        self.store.notify_ready(conn, queue)
            params = {"now": server_now, "reset_state": reset_state}
            if loose:
                woke(conn.execute(pg_sql.RETRY_DEAD_LOOSE, {"ids": loose, **params}))
            # Dead with a key and in no batch: together under one savepoint; any row that
            # stays (its key held, shared, or taken meanwhile) is moved alone below.
            keyed = [row_id for row_id, batch, _, keyed_dead in found
                     if keyed_dead and batch is None]
            if keyed:
                try:
                    with conn.transaction():
                        moved = conn.execute(pg_sql.RETRY_DEAD_KEYED,
                                             {"ids": keyed, **params}).fetchall()
                except psycopg.errors.UniqueViolation:
                    moved = []  # an enqueue took a key meanwhile: each row alone, below
                woke(moved)
            # Members of batches: every shard they count in locked first, in order; those
            # without a key then move together, any other alone, below.
            members = [row_id for row_id in unkeyed if row_id in batch_of]
            if batch_of:
                conn.execute(pg_sql.LOCK_DEAD_MEMBERS_SHARDS, {"ids": list(batch_of)})
            if members:
                counted = conn.execute(pg_sql.RETRY_DEAD_MEMBERS,
                                       {"ids": members, **params}).fetchall()
                woke((row_id, queue) for row_id, queue, _, _ in counted)
                for row_id, _, batch_id, reopen in counted:
                    # Counted in its batch again (unless it finished since), or run alone.
                    (reopened if reopen else alone).setdefault(batch_id, []).append(row_id)
            loose_ids = set(loose) | set(members)
            missed = self.store.statuses_of(
                conn, [b for b in loose_ids if b not in revived])

            def lock_order(job_id: int) -> tuple[int, int, int]:
                bound = bound_ids[job_id]
                return bound % pg_sql.BATCH_SHARDS, batch_of.get(bound, 0), bound
            for job_id in sorted(ids, key=lock_order):
                bound = bound_ids[job_id]
                if bound in loose_ids:
                    outcome[job_id] = "retried" if bound in revived else _not_dead(missed.get(bound))
                    continue
                if bound in revived:  # dead with a key, moved with the others
                    outcome[job_id] = "retried"
                    continue
                guarded = bound not in unkeyed
                try:
                    # A savepoint where the key may be held: one refusal spoils no other.
                    with conn.transaction() if guarded else contextlib.nullcontext():
                        moved = conn.execute(pg_sql.RETRY_DEAD, {
                            "id": bound, "now": server_now,
                            "reset_state": reset_state}).fetchone()
                except psycopg.errors.UniqueViolation:
                    if not guarded:
                        raise  # not a held key: the whole retry fails, nothing kept
                    outcome[job_id] = "key held by a live job"
                    continue
                if moved:
                    if moved[1] not in woken:
                        woken.add(moved[1])
                        self.store.notify_ready(conn, moved[1])
                    batch_id = moved[2]
                    if moved[3]:  # counted in its batch again, unless it finished since
                        reopened.setdefault(batch_id, []).append(job_id)
                    elif batch_id is not None:  # R34: it runs alone
                        alone.setdefault(batch_id, []).append(job_id)
                outcome[job_id] = "retried" if moved else _why_not(conn, bound)
            cancelled: dict[int, list[int]] = {}
            for batch_id, members in sorted(reopened.items()):
                finished, was_cancelled = conn.execute(
                    pg_sql.BATCH_FINISHED_SINCE, {"batch": batch_id}).fetchone()
                if finished:
                    for job_id in members:
                        conn.execute(pg_sql.REOPEN_TAKEN_BACK,
                                     {"batch": batch_id, "id": bounds.row_id(job_id)})
                    alone.setdefault(batch_id, []).extend(members)
                elif was_cancelled:
                    cancelled[batch_id] = members
            given = {job_id: place for place, job_id in enumerate(ids)}  # as SQLite answers
            return RetryReport({job_id: outcome[job_id] for job_id in ids},
                               {b: sorted(m, key=given.__getitem__) for b, m in alone.items()},
                               {b: sorted(m, key=given.__getitem__) for b, m in cancelled.items()})
        return self.store.transaction("retrying dead jobs", retry)

    def delete(self, ids: Iterable[int]) -> dict[int, str]:
        ids = rows.job_ids(ids, "dead.delete")
        bound = [bounds.row_id(job_id) for job_id in ids]  # 0 for an id no row can have

        def delete(conn: Any) -> dict[int, str]:
            gone = {row[0] for row in conn.execute(pg_sql.DELETE_DEAD, {"ids": bound})}
            statuses = self.store.statuses_of(conn, [b for b in bound if b not in gone])
            return {job_id: "deleted" if b in gone else _not_dead(statuses.get(b))
                    for job_id, b in zip(ids, bound)}
        return self.store.transaction("deleting dead jobs", delete)

    def purge(self, older_than: float, now: float | None = None, progress=None) -> int:
        """Delete dead jobs finished more than ``older_than`` seconds ago (server clock)."""
        older_than = rows.age(older_than, "older_than")
        bounds.now_or(now)  # checked as SQLite checks it; the server's clock dates the age
        total = 0
        while True:
            def purge(conn: Any) -> int:
                before = self.store.server_now(conn) - older_than
                return conn.execute(pg_sql.PURGE_FINISHED, {
                    "status": "dead", "before": before, "limit": BATCH}).fetchone()[0]
            done = self.store.transaction("purging dead jobs", purge)
            total += done
            if progress is not None:
                progress(done)
            if done < BATCH:
                return total


def _why_not(conn: Any, job_id: int) -> str:
    row = conn.execute(pg_sql.JOB_STATUS, {"id": job_id}).fetchone()
    return _not_dead(None if row is None else row[0])


def _not_dead(status: str | None) -> str:
    """The answer of a call on dead rows for a row it did not take, by the row's status
    (None: no such row)."""
    return rows.NO_SUCH_JOB if status is None else f"not dead ({status})"
