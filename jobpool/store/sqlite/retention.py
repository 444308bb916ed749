"""Dead letters and retention (R32): list, retry, delete and purge finished rows.

Kept apart from enqueue and reading: these are operator actions and the
supervisor's periodic sweep, not the application's path. Every delete takes a
bounded batch per transaction so a sweep never stalls claims for long.
"""
from __future__ import annotations

import sqlite3
from typing import Any, Callable, Iterable, List, Protocol  # List: a method here is named list

from jobpool import bounds
from jobpool.errors import JobNotFound
from jobpool.store import rows
from jobpool.store.sqlite import statements as sql
from jobpool.store.records import DEAD_LETTER_LIMIT, RESULT_TTL, RetryReport, SWEEP_BATCH as BATCH


class Session(Protocol):
    """What this module needs of an SQLite store: its transactions and reads, each
    failure a ``StoreError`` naming what was being done."""

    def transaction(self, what: str, fn: Callable[[sqlite3.Connection], Any]) -> Any: ...

    def select_jobs(self, query: str, params: Any) -> list[dict[str, Any]]: ...

    def read_rows(self, what: str, query: str, params: Any = ()) -> list[tuple]: ...

    def notify_ready(self) -> None: ...


class DeadLetters:
    """``store.dead``: what operators do with jobs that will not run again."""

    def __init__(self, store: Session) -> None:
        self.store = store

    def list(self, *, name: str | None = None, limit: int = 100) -> "list[dict[str, Any]]":
        rows.filter_text("name", name)
        limit = rows.listing_limit(limit)
        query = sql.LIST_DEAD.format(columns=sql.JOB_COLUMNS,
                                     name_filter="AND name = :name" if name is not None else "")
        return self.store.select_jobs(query, {"name": name, "limit": limit})

    def ids(self, *, name: str | None = None) -> List[int]:
        rows.filter_text("name", name)
        query = sql.DEAD_IDS.format(name_filter="AND name = :name" if name is not None else "")
        return [r[0] for r in self.store.read_rows("listing dead jobs", query, {"name": name})]

    def retry(self, ids: Iterable[int], now: float | None = None, *,
              reset_state: bool = False) -> dict[int, str]:
        """Put dead jobs back in line with fresh attempts, keeping a saved state (R37)
        unless ``reset_state``; returns id -> what happened."""
        return self.retry_report(ids, now, reset_state=reset_state).answers

    def retry_report(self, ids: Iterable[int], now: float | None = None, *,
                     reset_state: bool = False) -> RetryReport:
        """``retry``, with the retried members no batch callback follows (R34: those
        of finished batches run alone; those of cancelled ones count again), found in
        the retry's own transaction."""
        now = bounds.now_or(now)
        ids = rows.job_ids(ids, "dead.retry")

        def retry(conn):
            outcome: dict[int, str] = {}
            alone: dict[int, list[int]] = {}
            cancelled: dict[int, list[int]] = {}
            for job_id in ids:
                bound = bounds.row_id(job_id)
                try:
                    moved = conn.execute(sql.RETRY_DEAD, {"id": bound, "now": now,
                                                          "reset_state": reset_state}).fetchone()
                except sqlite3.IntegrityError:
                    outcome[job_id] = "key held by a live job"
                    continue
                if moved:
                    batch_id = moved[0]
                    # R34: a member is counted again while its batch is unfinished, else
                    # it runs alone.
                    if batch_id is not None:
                        reopened = conn.execute(sql.MEMBER_REOPENED, {"id": bound}).fetchone()
                        if reopened is None:
                            alone.setdefault(batch_id, []).append(job_id)
                        elif reopened[0]:
                            cancelled.setdefault(batch_id, []).append(job_id)
                    conn.execute(sql.LANE_READY, {"id": bound})  # R35: back in its lane
                outcome[job_id] = "retried" if moved else self._why_not(conn, bound)
            return RetryReport(outcome, alone, cancelled)
        result = self.store.transaction("retrying dead jobs", retry)
        if "retried" in result.answers.values():
            self.store.notify_ready()
        return result

    def delete(self, ids: Iterable[int]) -> dict[int, str]:
        ids = rows.job_ids(ids, "dead.delete")
        outcome: dict[int, str] = {}

        def delete(conn):
            for job_id in ids:
                bound = bounds.row_id(job_id)
                if conn.execute(sql.DELETE_DEAD, {"id": bound}).fetchall():
                    conn.execute(sql.DELETE_ATTEMPTS, (bound,))
                    outcome[job_id] = "deleted"
                else:
                    outcome[job_id] = self._why_not(conn, bound)
            return outcome
        return self.store.transaction("deleting dead jobs", delete)

    def purge(self, older_than: float, now: float | None = None, progress=None) -> int:
        """Delete dead jobs finished more than ``older_than`` seconds ago."""
        older_than = rows.age(older_than, "older_than")
        now = bounds.now_or(now)
        return purge_finished(self.store, "dead", now - older_than, progress=progress)

    @staticmethod
    def _why_not(conn, job_id: int) -> str:
        row = conn.execute(sql.JOB_STATUS, (job_id,)).fetchone()
        if row is None:
            return rows.NO_SUCH_JOB
        return f"not dead ({row[0]})"


def purge_finished(store: Session, status: str, before: float, *, limit: int | None = None,
                   progress=None) -> int:
    """Delete ``status`` rows finished before ``before``, a batch per transaction."""
    total = 0
    while limit is None or total < limit:
        batch = BATCH if limit is None else min(BATCH, limit - total)

        def purge(conn, batch: int = batch):
            ids = [r[0] for r in conn.execute(sql.PURGE_FINISHED, {
                "status": status, "before": before, "limit": batch}).fetchall()]
            conn.executemany(sql.DELETE_ATTEMPTS, [(i,) for i in ids])
            return len(ids)
        done = store.transaction(f"purging {status} jobs", purge)
        total += done
        if progress is not None:
            progress(done)
        if done < batch:
            break
    return total


def sweep(store: Session, now: float, *, result_ttl: float = RESULT_TTL,
          dead_letter_limit: int = DEAD_LETTER_LIMIT) -> int:
    """The supervisor's periodic sweep: one bounded batch of each kind per call."""
    removed = purge_finished(store, "done", now - result_ttl, limit=BATCH)
    rows = store.read_rows("reading dead-letter retention", sql.DEAD_CUTOFF,
                           {"keep": dead_letter_limit})
    if rows:
        row = rows[0]
        # Everything at or before the first row past the limit goes, oldest first.
        removed += purge_finished(store, "dead", row[0] + 1e-6, limit=BATCH)
    return removed


__all__ = ["DeadLetters", "JobNotFound", "sweep", "purge_finished"]
