"""The pure-Python twin of ``jobpool._core``: the readable specification.

The compiled core (``_core.pyx``) has the same names, signatures and behaviour;
``tests/test_core.py`` runs against both and a parity test compares the rows
they leave behind. This module talks to SQLite through the ``sqlite3`` module;
the compiled one uses SQLite's C API directly.

Data crossing this API is plain tuples, so the compiled core can build them
without per-row Python objects beyond the tuple itself:

* claimed job: ``(id, name, payload, serializer, attempt, timeout, deadline)``
* outcome:     ``(id, attempt, kind, error, delay, result, pid, exit_status, peak_rss, cpu_s)``
* settled:     ``(id, name, attempt, status, reason)`` where status is one of
  ``done``, ``ready``, ``dead`` or ``lost`` (the fenced guard matched no row).

Time (``now``) and randomness (``rng``, anything with ``.random()``) are
parameters so backoff, leases and deadlines are testable without sleeping.
"""
from __future__ import annotations

import math
import os
import sqlite3

from jobpool.errors import StoreError
from jobpool.outcomes import (CANCEL, CRASH, DEFAULT_POLICY, DEFER, DONE, ERROR, FATAL,
                              KIND_NAMES, LEASE_SLACK, RELEASE, RESCHEDULE, RETRY, TIMEOUT,
                              with_reason)
from jobpool.store import sql

#: The API the compiled core mirrors name for name (tests/test_core.py).
__all__ = ["Core", "SlotTable", "backoff", "with_reason", "LEASE_SLACK", "KIND_NAMES",
           "DEFAULT_POLICY", "DONE", "ERROR", "FATAL", "CRASH", "TIMEOUT", "RETRY", "DEFER",
           "RESCHEDULE", "RELEASE", "CANCEL"]

def backoff(attempts: int, base: float, cap: float, u: float) -> float:
    """Delay before retry number ``attempts`` (R13).

    ``base * 2**(attempts-1)`` capped at ``cap``, then jitter that only subtracts
    up to 25 % (``u`` in [0, 1)), so ``cap`` is an honest ceiling. The exponent is
    bounded before it is computed, so huge attempt counts cannot overflow.
    """
    if base <= 0:
        return 0.0
    exponent = attempts - 1 if attempts > 1 else 0
    if exponent >= 1023 or base * math.ldexp(1.0, exponent) >= cap:
        delay = cap
    else:
        delay = base * math.ldexp(1.0, exponent)
    return delay - delay * 0.25 * u


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

    def job_of(self, slot: int) -> tuple[int, int] | None:
        return self._jobs[slot]

    def extend_deadline(self, slot: int, deadline: float) -> None:
        self._deadlines[slot] = deadline

    def next_deadline(self) -> float:
        return min(self._deadlines, default=math.inf)

    def overdue(self, now: float) -> list[int]:
        return [i for i, d in enumerate(self._deadlines) if d <= now]


class Core:
    """Claims and settles jobs for one supervisor over its own connection.

    Every write is one ``BEGIN IMMEDIATE`` transaction; a failure rolls back and
    raises ``StoreError`` with nothing applied, so the caller can keep its
    outcomes and try again (R26).
    """

    def __init__(self, path: str, owner: str, names, queues, policies=None, *,
                 busy_timeout: float = 5.0, synchronous: str = "NORMAL",
                 wal_autocheckpoint: int = 1000) -> None:
        self.owner = owner
        self.queues = tuple(queues)
        self.policies = dict(policies or {})
        self._claim_sql = sql.claim_sql(names, self.policies, DEFAULT_POLICY)
        self._inflight: dict[int, tuple] = {}
        autocheckpoint = int(wal_autocheckpoint)
        if not os.path.exists(path):
            # Like the compiled core (SQLITE_OPEN_READWRITE): never create a store here.
            raise StoreError(f"cannot open store {path}: unable to open database file")
        try:
            self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False,
                                       timeout=busy_timeout)
            self._db.execute(f"PRAGMA synchronous={synchronous}")
            self._db.execute("PRAGMA mmap_size=0")
            # 0 hands checkpoints to the supervisor's checkpointer thread, so the
            # fsyncs of a checkpoint never stall a claim or a settle (R26a).
            self._db.execute(f"PRAGMA wal_autocheckpoint={autocheckpoint}")
            # This connection is the one that starts the WAL over after a checkpoint,
            # so its limit is the one that trims a file a burst grew.
            self._db.execute(f"PRAGMA journal_size_limit={sql.WAL_KEEP_BYTES}")
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open store {path}: {exc}") from exc

    # -- claiming (R6-R10) ----------------------------------------------------------

    def claim(self, n: int, now: float):
        """Claim up to ``n`` due jobs, queues in order of preference.

        Returns ``(claimed, expired)``: jobs to run, and jobs found past their
        deadline (R10) which were settled dead in the same transaction.
        """
        claimed: list[tuple] = []
        expired: list[tuple] = []
        if n <= 0:
            return claimed, expired
        db = self._db
        try:
            db.execute("BEGIN IMMEDIATE")
            try:
                self._claim_all(db, n, now, claimed, expired)
                db.execute("COMMIT")
            except BaseException:
                self._rollback()
                for job in claimed:
                    self._inflight.pop(job[0], None)
                raise
        except sqlite3.Error as exc:
            raise StoreError(f"claim failed: {exc}") from exc
        return claimed, expired

    def _claim_all(self, db, n, now, claimed, expired) -> None:
        for queue in self.queues:
            want = n - len(claimed)
            if want <= 0:
                break
            rows = db.execute(self._claim_sql, {
                "owner": self.owner, "now": now, "slack": LEASE_SLACK,
                "queue": queue, "limit": want}).fetchall()
            # RETURNING has no order; dispatch in claim order (R7).
            rows.sort(key=lambda r: (-r[9], r[10], r[0]))
            for (job_id, name, payload, serializer, attempt, max_attempts, crashes,
                 timeout, deadline, _priority, _line_at, chained) in rows:
                # The lease: what settling this attempt needs, started now.
                lease = (job_id, name, attempt, max_attempts, crashes, deadline, now, chained)
                if deadline is not None and deadline < now:
                    self._settle_one(db, lease, (job_id, attempt, FATAL, "deadline passed",
                                                 None, None, None, None, None, None),
                                     now, None, expired, log_as="deadline")
                    continue
                self._inflight[job_id] = lease
                if isinstance(payload, str):
                    payload = payload.encode()
                claimed.append((job_id, name, payload, serializer, attempt, float(timeout),
                                deadline))

    # -- settling (section 4) --------------------------------------------------------

    def settle(self, outcomes, now: float, rng):
        """Settle finished attempts in one transaction; return what became of each."""
        settled: list[tuple] = []
        taken: list[int] = []
        if not outcomes:
            return settled
        db = self._db
        try:
            db.execute("BEGIN IMMEDIATE")
            try:
                self._settle_all(db, outcomes, now, rng, settled, taken)
                db.execute("COMMIT")
            except BaseException:
                self._rollback()
                raise
        except sqlite3.Error as exc:
            raise StoreError(f"settle failed: {exc}") from exc
        # Only leases this batch settled are done with; a stale outcome for another
        # attempt of a job must not drop the live lease of the current one.
        for job_id in taken:
            self._inflight.pop(job_id, None)
        return settled

    def turn(self, outcomes, n: int, now: float, rng):
        """One loop turn in one transaction: settle ``outcomes``, then claim up to ``n``.

        Returns ``(settled, claimed, expired)``. Sharing the commit halves what a
        job costs the store; on a failure nothing is applied and the caller keeps
        its outcomes (R26).
        """
        settled: list[tuple] = []
        taken: list[int] = []
        claimed: list[tuple] = []
        expired: list[tuple] = []
        if not outcomes and n <= 0:
            return settled, claimed, expired
        dropped: dict[int, tuple | None] = {}
        db = self._db
        try:
            db.execute("BEGIN IMMEDIATE")
            try:
                self._settle_all(db, outcomes, now, rng, settled, taken)
                # A job settled back to ready may be claimed again in this turn:
                # its old lease goes before the claim records the new one.
                for job_id in taken:
                    dropped[job_id] = self._inflight.pop(job_id, None)
                self._claim_all(db, n, now, claimed, expired)
                db.execute("COMMIT")
            except BaseException:
                self._rollback()
                for job in claimed:
                    self._inflight.pop(job[0], None)
                for job_id, lease in dropped.items():
                    if lease is not None:
                        self._inflight[job_id] = lease
                raise
        except sqlite3.Error as exc:
            raise StoreError(f"turn failed: {exc}") from exc
        return settled, claimed, expired

    def _settle_all(self, db, outcomes, now, rng, settled, taken) -> None:
        for outcome in outcomes:
            job_id = outcome[0]
            info = self._inflight.get(job_id)
            if info is None or info[2] != outcome[1]:
                settled.append((job_id, info[1] if info else "", outcome[1], "lost",
                                "not leased by this supervisor"))
                continue
            taken.append(job_id)
            self._settle_one(db, info, outcome, now, rng, settled)

    def _settle_one(self, db, job, outcome, now, rng, out, log_as=None):
        job_id, name, attempt, max_attempts, crashes, deadline, started_at, chained = job
        kind = outcome[2]
        error = outcome[3]
        delay = outcome[4]
        base, cap, max_crashes = self.policies.get(name, DEFAULT_POLICY)[:3]
        params = {"id": job_id, "owner": self.owner, "attempt": attempt, "now": now}
        log_outcome = log_as or KIND_NAMES[kind]
        if kind == DONE:
            params["result"] = outcome[5]
            stmt, status = sql.SETTLE_DONE, "done"
        elif kind == DEFER:
            run_at = now + (delay or 0.0)
            if deadline is not None and run_at > deadline:
                params.update(error=with_reason(error or "deferred", "deferred past its deadline"),
                              crashes=crashes)
                stmt, status = sql.SETTLE_DEAD, "dead"
            else:
                params["run_at"] = run_at
                stmt, status = sql.SETTLE_DEFER, "ready"
        elif kind == RESCHEDULE:
            params["run_at"] = now + (delay or 0.0)
            stmt, status = sql.SETTLE_RESCHEDULE, "ready"
        elif kind == RELEASE:
            stmt, status = sql.SETTLE_RELEASE, "ready"
        elif kind in (FATAL, CANCEL):
            params.update(error=error, crashes=crashes)
            stmt, status = sql.SETTLE_DEAD, "dead"
        else:  # ERROR, CRASH, TIMEOUT, RETRY: a retry unless a budget is spent
            if kind == CRASH:
                crashes += 1
            params["crashes"] = crashes
            stmt, status = sql.SETTLE_DEAD, "dead"
            if kind == CRASH and crashes >= max_crashes:
                causes = [r[0] or "?" for r in db.execute(sql.CRASH_CAUSES, (job_id,))] + [error or "?"]
                params["error"] = (f"quarantined: killed its child {crashes} times ("
                                   + "; ".join(causes[-crashes:]) + ")")
            elif attempt >= max_attempts:
                params["error"] = with_reason(error, f"no attempts left after {max_attempts}")
            else:
                if kind == RETRY and delay is not None:
                    wait = delay
                else:
                    wait = backoff(attempt, base, cap, rng.random() if rng is not None else 0.0)
                run_at = now + wait
                if deadline is not None and run_at > deadline:
                    params["error"] = with_reason(error, "retry would fall past its deadline")
                else:
                    params.update(error=error, run_at=run_at)
                    stmt, status = sql.SETTLE_RETRY, "ready"
        cursor = db.execute(stmt, params)
        if cursor.rowcount != 1:
            out.append((job_id, name, attempt, "lost", "lease lost"))
            return
        if status == "done" and chained:
            db.execute(sql.ENQUEUE_SUCCESSOR, {"id": job_id, "now": now})
        db.execute(sql.INSERT_ATTEMPT, {
            "id": job_id, "attempt": attempt, "owner": self.owner, "pid": outcome[6],
            "started_at": started_at, "now": now, "outcome": log_outcome, "error": error,
            "exit_status": outcome[7], "peak_rss": outcome[8], "cpu_s": outcome[9]})
        reason = params.get("error") if status == "dead" else error
        out.append((job_id, name, attempt, status, reason))

    # -- recovery (R23, R24) ----------------------------------------------------------

    def reclaim(self, now: float):
        """Expired leases of any owner go back to ready, or dead without attempts (R23)."""
        return self._recover(sql.LOG_RECLAIM_EXPIRED, sql.RECLAIM_EXPIRED, {"now": now})

    def reclaim_owner(self, owner: str, reason: str, now: float):
        """A dead supervisor's leases come back at once (R24)."""
        if owner == self.owner:
            raise ValueError("a supervisor cannot reclaim its own leases")
        return self._recover(sql.LOG_RECLAIM_OWNER, sql.RECLAIM_OWNER,
                             {"now": now, "owner": owner, "reason": reason})

    def lease_owners(self) -> list[str]:
        try:
            return [r[0] for r in self._db.execute(sql.LEASE_OWNERS)]
        except sqlite3.Error as exc:
            raise StoreError(f"reading lease owners failed: {exc}") from exc

    def _recover(self, log_stmt, stmt, params):
        db = self._db
        try:
            db.execute("BEGIN IMMEDIATE")
            try:
                db.execute(log_stmt, params)
                rows = db.execute(stmt, params).fetchall()
                db.execute("COMMIT")
            except BaseException:
                self._rollback()
                raise
        except sqlite3.Error as exc:
            raise StoreError(f"reclaim failed: {exc}") from exc
        return [tuple(row) for row in rows]  # (id, name, attempt, status, reason)

    # -- bookkeeping ----------------------------------------------------------------

    @property
    def inflight(self) -> int:
        return len(self._inflight)

    def forget(self, job_id: int) -> None:
        """Drop a job from the lease table without writing (its lease was lost)."""
        self._inflight.pop(job_id, None)

    def _rollback(self) -> None:
        try:
            self._db.execute("ROLLBACK")
        except sqlite3.Error:
            pass  # no transaction open: the failure happened before BEGIN took hold

    def close(self) -> None:
        self._db.close()
