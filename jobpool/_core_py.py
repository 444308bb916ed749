"""The pure-Python twin of ``jobpool._core``: SQLite through the ``sqlite3`` module.

The compiled core (``_core.pyx``) has the same names, signatures and behaviour;
``tests/test_core.py`` runs against both and a parity test compares the rows
they leave behind. Neither decides anything about a job's life: both apply
``jobpool.lifecycle.decide`` and carry its named records (``Claimed``,
``Lease``, ``Outcome``, ``Settled``). What the cores own is the SQLite side:
the claim, the fenced statements, the transaction per turn, the slot table.

Time (``now``) and randomness (``rng``, anything with ``.random()``) are
parameters so backoff, leases and deadlines are testable without sleeping.
"""
from __future__ import annotations

import json
import math
import os
import sqlite3

from jobpool.errors import StoreError
from jobpool.lifecycle import (CANCEL, CRASH, DEADLINE_PASSED, DEFAULT_POLICY, DEFER, DONE, ERROR,
                               EXPIRED, FOLLOW_ALL, FOLLOW_ENDS, FOLLOW_LANE,
                               FATAL, KIND_NAMES, LEASE_SLACK, OWNER_DIED, RELEASE, RESCHEDULE,
                               RETRY, TIMEOUT, Lease, Outcome, Policy, Settled, backoff,
                               decide, with_reason)
from jobpool.limits import charge, plan_claim, sooner
from jobpool.queueplan import claim_in_shares
from jobpool.store import row_codec, rows
from jobpool.store.sqlite import statements as sql
from jobpool.store.limit_claim import LimitedClaim, SqlLimitedSource, sqlite_limited_claim

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


class Core:
    """Claims and settles jobs for one supervisor over its own connection.

    Every write is one ``BEGIN IMMEDIATE`` transaction; a failure rolls back and
    raises ``StoreError`` with nothing applied, so the caller can keep its
    outcomes and try again (R26).
    """

    #: What claims, as ``pools`` shows it (the Claimer protocol).
    name = "pure"

    def __init__(self, path: str, owner: str, names, queues, policies=None, *,
                 busy_timeout: float = 5.0, synchronous: str = "NORMAL",
                 wal_autocheckpoint: int = 1000, journal_size_limit: int = sql.WAL_KEEP_BYTES) -> None:
        self.owner = owner
        self.queues = tuple(queues)
        # Named once here, not per settle (a caller may pass plain 5-tuples).
        self.policies = {name: Policy(*policy) for name, policy in (policies or {}).items()}
        self._names = tuple(names)
        self._claim_sql = sql.claim_sql(names, self.policies, DEFAULT_POLICY)
        self._inflight: dict[int, Lease] = {}
        #: R35/R36: the limits this pool obeys (``set_limits``); None: the ordinary claim.
        self._limits: LimitedClaim | None = None
        self._limit_source: SqlLimitedSource | None = None
        #: R36: after a turn, the seconds until a group its claim passed over for want
        #: of a token has one (the Claimer protocol); None: no such group.
        self.token_wait: float | None = None
        if not os.path.exists(path):
            # Like the compiled core (SQLITE_OPEN_READWRITE): never create a store here.
            raise StoreError(f"cannot open store {path}: unable to open database file")
        self._opening: tuple | None = (path, busy_timeout, synchronous, int(wal_autocheckpoint),
                                       int(journal_size_limit))
        self._conn: sqlite3.Connection | None = None
        self._db  # noqa: B018 - open now, so a bad path is reported here

    @property
    def _db(self) -> sqlite3.Connection:
        """The connection, opened again on first use after ``release_before_fork``."""
        if self._conn is None:
            if self._opening is None:
                raise sqlite3.ProgrammingError("Cannot operate on a closed database.")
            self._conn = self._connect(*self._opening)
        return self._conn

    @staticmethod
    def _connect(path: str, busy_timeout: float, synchronous: str,
                 autocheckpoint: int, journal_size_limit: int) -> sqlite3.Connection:
        try:
            db = sqlite3.connect(path, isolation_level=None, check_same_thread=False,
                                 timeout=busy_timeout)
            db.execute(f"PRAGMA synchronous={synchronous}")
            db.execute("PRAGMA mmap_size=0")
            # 0 hands checkpoints to the supervisor's checkpointer process, so the
            # fsyncs of a checkpoint never stall a claim or a settle (R26a).
            db.execute(f"PRAGMA wal_autocheckpoint={autocheckpoint}")
            # This connection is the one that starts the WAL over after a checkpoint,
            # so its limit is the one that trims a file a burst grew.
            db.execute(f"PRAGMA journal_size_limit={journal_size_limit}")
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open store {path}: {exc}") from exc
        return db

    def release_before_fork(self) -> None:
        """R42/R43: close the connection before the process forks, so the child
        inherits no SQLite state of the store; it reopens on next use. Never
        inside a transaction (a fork happens between turns)."""
        if self._conn is not None and not self._conn.in_transaction:
            self._conn.close()
            self._conn = None

    # -- claiming (R6-R10) ----------------------------------------------------------

    def claim(self, n: int, now: float):
        """A turn with nothing to settle: ``(claimed, expired)``."""
        _settled, claimed, expired = self.turn((), n, now, None)
        return claimed, expired

    def set_limits(self, plan) -> None:
        """R35/R36: the part of the store's limits this pool obeys from now on
        (``limits.LimitPlan.for_pool``); None: the ordinary claim."""
        if plan == (self._limits.plan if self._limits else None):
            return
        if plan is None:
            self._limits = self._limit_source = None
            return
        limited = sqlite_limited_claim(plan, self._names, self.policies, DEFAULT_POLICY)
        self._limits = limited
        self._limit_source = SqlLimitedSource(
            sql, lambda text, params: self._db.execute(text, params).fetchall(), limited)

    def _claim_all(self, db, n, now, claimed, expired, shares) -> None:
        claim_in_shares(shares, self.queues, n, claimed,
                        lambda queue, want: self._claim_queue(db, queue, want, now, claimed,
                                                              expired))

    def _claim_queue(self, db, queue, want, now, claimed, expired) -> int:
        limited, source = self._limits, self._limit_source
        if limited is None or source is None:
            found = self._fetch_rows(db, self._claim_sql, {
                "owner": self.owner, "now": now, "slack": LEASE_SLACK,
                "queue": queue, "limit": want})
        else:
            # The page's counts are exact here (one writer at a time): no caps, and
            # the claim takes every row picked.
            picked = plan_claim(source, limited.plan, queue, want, now, limited.has_unlimited)
            charge(source, picked, None, now)
            self.token_wait = sooner(self.token_wait, picked.token_wait)
            ids = picked.ids
            found = self._fetch_rows(db, limited.claim_ids, {
                "owner": self.owner, "now": now, "slack": LEASE_SLACK,
                "ids": json.dumps(ids)}) if ids else []
        # R44: every row through the codec; those it refuses are dead at once. The
        # rest in claim order (R7): RETURNING has none.
        decoded, refused = row_codec.decode_claims(found, queue, now)
        for bad in refused:
            expired.append(row_codec.settle_malformed(self._query, sql, bad, self.owner, now))
        for lease, job, _priority, _line_at in decoded:
            if job.deadline is not None and job.deadline < now:
                # R10: claimed after its deadline, it is retired without running.
                self._settle_one(db, lease, Outcome(job.job_id, job.attempt, FATAL,
                                                    DEADLINE_PASSED),
                                 now, None, expired, log_as="deadline")
                continue
            self._inflight[job.job_id] = lease
            claimed.append(job)
        return len(found)

    @staticmethod
    def _fetch_rows(db, text, params) -> list:
        """R44: a claim's (or reclaim's) rows with text that is not UTF-8 kept as it is
        (``row_codec.lenient_text``), for the codec to name, instead of failing the turn."""
        db.text_factory = row_codec.lenient_text
        try:
            return db.execute(text, params).fetchall()
        finally:
            db.text_factory = str

    def _query(self, text, params) -> list:
        return self._db.execute(text, params).fetchall()

    # -- settling (section 4) --------------------------------------------------------

    def settle(self, outcomes, now: float, rng):
        """A turn that claims nothing: what became of each outcome."""
        return self.turn(outcomes, 0, now, rng)[0]

    def turn(self, outcomes, n: int, now: float, rng, shares=None):
        """One loop turn in one transaction: settle ``outcomes`` (``lifecycle.Outcome``
        records), then claim up to ``n``, shared among queues by ``shares``
        (``queueplan.Share`` records; None: ``queues`` in order).

        Returns ``(settled, claimed, expired)``. Sharing the commit halves what a
        job costs the store; on a failure nothing is applied and the caller keeps
        its outcomes (R26).
        """
        settled: list[tuple] = []
        taken: list[int] = []
        claimed: list[tuple] = []
        expired: list[tuple] = []
        self.token_wait = None
        if not outcomes and n <= 0:
            return settled, claimed, expired
        dropped: dict[int, Lease | None] = {}
        db = self._db
        try:
            db.execute("BEGIN IMMEDIATE")
            try:
                self._settle_all(db, outcomes, now, rng, settled, taken)
                # A job settled back to ready may be claimed again in this turn:
                # its old lease goes before the claim records the new one.
                for job_id in taken:
                    dropped[job_id] = self._inflight.pop(job_id, None)
                self._claim_all(db, n, now, claimed, expired, shares)
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
            lease = self._inflight.get(job_id)
            if lease is None or lease.attempt != outcome[1]:
                settled.append(Settled(job_id, lease.name if lease else "", outcome[1], "lost",
                                       "not leased by this supervisor"))
                continue
            taken.append(job_id)
            self._settle_one(db, lease, outcome, now, rng, settled)

    def _settle_one(self, db, lease: Lease, outcome, now, rng, out, log_as=None, owner=None):
        """Apply ``lifecycle.decide`` to one attempt: the fenced UPDATE it names, the
        chain's next step (R12), and the attempt's line in the log (R19a)."""
        policy = self.policies.get(lease.name, DEFAULT_POLICY)
        decision = decide(lease, outcome, policy, now, rng, self.crash_causes)
        owner = owner or self.owner   # a reclaim settles another owner's lease
        params = {"id": lease.job_id, "owner": owner, "attempt": lease.attempt, "now": now,
                  "result": outcome.result, "error": decision.reason,
                  "crashes": decision.crashes, "run_at": now + decision.delay}
        cursor = db.execute(sql.SETTLE[decision.statement], params)
        if cursor.rowcount != 1:
            out.append(Settled(lease.job_id, lease.name, lease.attempt, "lost", "lease lost"))
            return
        if lease.follow_ups & FOLLOW_ENDS:
            if decision.successor:
                self._enqueue_successor(db, lease.job_id, now)
            if decision.status in ("done", "dead"):
                # R34: its batch counts its end in this transaction.
                db.execute(sql.MEMBER_DONE if decision.status == "done" else sql.MEMBER_DEAD,
                           {"id": lease.job_id, "now": now})
        if lease.follow_ups & FOLLOW_LANE and decision.status == "ready":
            # R35: a limited row back in line is in its lane again.
            db.execute(sql.LANE_READY, {"id": lease.job_id})
        db.execute(sql.INSERT_ATTEMPT, rows.attempt_params(lease, outcome, owner, now, log_as))
        out.append(Settled(lease.job_id, lease.name, lease.attempt, decision.status,
                           decision.reason))

    @staticmethod
    def _enqueue_successor(db, job_id, now) -> None:
        """R12: the chain's next step, with its lane (R35) when its name is limited.

        R44: the claim checked the chain; should the row's chain have changed since,
        and its step not fit the row it makes, the insert fails alone (SQLite rolls
        back that statement, not the transaction): the job's end stands and its row
        says why the chain stopped, so the turn commits."""
        try:
            db.execute(sql.ENQUEUE_SUCCESSOR, {"id": job_id, "now": now})
        except sqlite3.Error as exc:
            if not sql.statement_failed_alone(exc, db.in_transaction):
                raise
            db.execute(sql.CHAIN_STOPPED, {"id": job_id,
                                           "error": f"{row_codec.CHAIN_STOPPED} ({exc})"})
            return
        db.execute(sql.LANE_OF_LAST_ROW)  # R35: the step's lane, if limited

    def crash_causes(self, job_id: int) -> list[str]:
        """R19a: the errors of this job's earlier child deaths, oldest first."""
        return [r[0] or "?" for r in self._db.execute(sql.CRASH_CAUSES, (job_id,))]

    # -- recovery (R23, R24) ----------------------------------------------------------

    def reclaim(self, now: float):
        """Expired leases of any owner go back to ready, or dead without attempts (R23)."""
        return self._recover(sql.RECLAIMABLE_EXPIRED, {"now": now}, EXPIRED,
                             lambda owner: f"lease expired (owner {owner})", now)

    def reclaim_owner(self, owner: str, reason: str, now: float):
        """A dead supervisor's leases come back at once (R24)."""
        if owner == self.owner:
            raise ValueError("a supervisor cannot reclaim its own leases")
        return self._recover(sql.RECLAIMABLE_OWNER, {"now": now, "owner": owner}, OWNER_DIED,
                             lambda _owner: reason, now)

    def lease_owners(self) -> list[str]:
        try:
            return [r[0] for r in self._db.execute(sql.LEASE_OWNERS)]
        except sqlite3.Error as exc:
            raise StoreError(f"reading lease owners failed: {exc}") from exc

    def _recover(self, query, params, kind, reason_of, now):
        """Settle leases nobody will settle through ``lifecycle.decide``, like any
        attempt's end, fenced by their old owner; one transaction."""
        db = self._db
        settled: list[Settled] = []
        try:
            db.execute("BEGIN IMMEDIATE")
            try:
                for row in self._fetch_rows(db, query, params):
                    # Follow-ups always: a reclaim may end a batch member (dead) or put a
                    # limited row back in line, and reclaims are rare enough not to ask
                    # the row whether it is either.
                    lease = row_codec.decode_lease(row, FOLLOW_ALL)
                    owner = row[7]
                    if isinstance(lease, row_codec.Malformed):  # R44
                        settled.append(row_codec.settle_malformed(self._query, sql, lease, owner,
                                                                  now))
                        continue
                    self._settle_one(db, lease, Outcome(lease.job_id, lease.attempt, kind,
                                                        reason_of(owner)),
                                     now, None, settled, owner=owner)
                db.execute("COMMIT")
            except BaseException:
                self._rollback()
                raise
        except sqlite3.Error as exc:
            raise StoreError(f"reclaim failed: {exc}") from exc
        return settled

    # -- bookkeeping ----------------------------------------------------------------

    @property
    def inflight(self) -> int:
        return len(self._inflight)

    def _rollback(self) -> None:
        try:
            self._db.execute("ROLLBACK")
        except sqlite3.Error:
            pass  # no transaction open: the failure happened before BEGIN took hold

    def close(self) -> None:
        self._opening = None
        if self._conn is not None:
            self._conn.close()
            self._conn = None
