"""The SQLite driver under the engine (``jobpool.engine``, the ``Driver`` protocol of
``store/base.py``): the SQLite side of a supervisor's hot path.

It owns the connection (opened again after ``release_before_fork``), one ``BEGIN
IMMEDIATE`` transaction per turn or reclaim, and the statements of
``store/sqlite/statements.py``: the claim, the fenced settles and what follows a
settle in its transaction on SQLite (R12's next step, R34's batch counts, R35's
lane, the attempt's line, R19a). SQLite answers each settle at once (one writer at a
time), so a batch of settles is the statements one after the other.

Its road to SQLite is a connection with four calls (``PythonConnection`` below, over
Python's ``sqlite3`` module); the compiled driver (``store/sqlite/compiled.py``) is
this class over the compiled connection of ``jobpool/_core.pyx``, with the claim's
codec answered in C: the driver's logic exists once.
"""
from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from jobpool.errors import StoreError
from jobpool.lifecycle import (DEFAULT_POLICY, FOLLOW_ALL, FOLLOW_ENDS, FOLLOW_LANE, LEASE_SLACK,
                               Lease, Policy, Settled)
from jobpool.limits import LimitPlan, Picked
from jobpool.store import row_codec, rows
from jobpool.store.base import Answer, Fenced
from jobpool.store.limit_claim import LimitedClaim, SqlLimitedSource, sqlite_limited_claim
from jobpool.store.sqlite import statements as sql


class PythonConnection:
    """A driver's connection through Python's ``sqlite3`` module: the pure road, and
    the specification of the compiled ``_core.Connection`` (the same four calls;
    a failure is an ``sqlite3.Error`` carrying SQLite's result code)."""

    __slots__ = ("_db",)

    def __init__(self, path: str, busy_timeout: float) -> None:
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False,
                                   timeout=busy_timeout)

    def rows(self, text: str, params: Any = ()) -> list:
        """Run one statement; its rows as tuples."""
        return self._db.execute(text, params).fetchall()

    def lenient_rows(self, text: str, params: Any = ()) -> list:
        """R44: ``rows``, with text that is not UTF-8 kept as it is
        (``row_codec.lenient_text``) for the codec to name, instead of failing."""
        db = self._db
        db.text_factory = row_codec.lenient_text
        try:
            return db.execute(text, params).fetchall()
        finally:
            db.text_factory = str

    def changes(self, text: str, params: Any = ()) -> int:
        """Run one statement; how many rows it changed."""
        return max(self._db.execute(text, params).rowcount, 0)

    @property
    def in_transaction(self) -> bool:
        return self._db.in_transaction

    def close(self) -> None:
        self._db.close()


class SqliteDriver:
    """SQLite for one claimer (see the module docstring); it is also its own ``Turn``:
    ``now`` is the running transaction's."""

    #: What claims, as ``pools`` shows it.
    name = "pure"
    #: The road to SQLite (the compiled driver's is ``_core.Connection``).
    connection: type[Any] = PythonConnection
    #: R44: the claim's codec (the compiled driver answers it in C, never differently).
    decode_claims = staticmethod(row_codec.decode_claims)
    #: A reclaim may end a batch member (dead) or put a limited row back in line, and
    #: reclaims are rare enough not to ask the row whether it is either.
    reclaim_follow_ups = FOLLOW_ALL

    def __init__(self, path: str, *, busy_timeout: float = 5.0, synchronous: str = "NORMAL",
                 wal_autocheckpoint: int = 1000,
                 journal_size_limit: int = sql.WAL_KEEP_BYTES) -> None:
        self.now = 0.0
        self.owner = ""
        #: The claim of this supervisor's names (``statements.claim_sql``), set by ``serve``.
        self.claim_text = sql.ClaimText("", "")
        #: R63: the claim of one name's rows (a chunk's rest), by name, made on first use.
        self._name_claims: dict[str, sql.ClaimText] = {}
        self._names: tuple[str, ...] = ()
        self._policies: dict[str, Policy] = {}
        self._source: tuple[LimitedClaim, SqlLimitedSource] | None = None
        if not os.path.exists(path):
            # Never create a store here: only a store makes one (R39's mode, its schema).
            raise StoreError(f"cannot open store {path}: unable to open database file")
        self._opening: tuple | None = (path, busy_timeout, synchronous, int(wal_autocheckpoint),
                                       int(journal_size_limit))
        self._conn: Any = None
        self._db  # noqa: B018 - open now, so a bad path is reported here

    def serve(self, owner: str, names: Sequence[str], policies: dict[str, Policy]) -> None:
        self.owner = owner
        self._names = tuple(names)
        self._policies = policies
        self.claim_text = sql.claim_sql(names, policies, DEFAULT_POLICY)
        self._name_claims = {}

    # -- the connection ----------------------------------------------------------------------

    @property
    def _db(self) -> Any:
        """The connection, opened again on first use after ``release_before_fork``."""
        if self._conn is None:
            if self._opening is None:
                raise StoreError("the claimer's connection is closed")
            self._conn = self._connect(*self._opening)
        return self._conn

    def _connect(self, path: str, busy_timeout: float, synchronous: str,
                 autocheckpoint: int, journal_size_limit: int) -> Any:
        try:
            db = self.connection(path, busy_timeout)
            db.changes(f"PRAGMA synchronous={synchronous}")
            db.changes("PRAGMA mmap_size=0")
            # 0 hands checkpoints to the supervisor's checkpointer process, so the
            # fsyncs of a checkpoint never stall a claim or a settle (R26a).
            db.changes(f"PRAGMA wal_autocheckpoint={autocheckpoint}")
            # This connection is the one that starts the WAL over after a checkpoint,
            # so its limit is the one that trims a file a burst grew.
            db.changes(f"PRAGMA journal_size_limit={journal_size_limit}")
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

    def close(self) -> None:
        self._opening = None
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    # -- transactions ------------------------------------------------------------------------

    def turn(self, now: float, held: Mapping[int, Lease],
             body: Callable[[Any], tuple[list[Answer], list[Answer]]]
             ) -> tuple[list[Settled], list[Settled]]:
        # SQLite answers every settle at once: the body's answers are Settled already.
        sent, expiring = self._transaction("turn", now, body)
        return sent, expiring  # type: ignore[return-value]

    def transaction(self, what: str, now: float,
                    body: Callable[[Any], list[Answer]]) -> list[Settled]:
        return self._transaction(what, now, body)  # type: ignore[return-value]

    def _transaction(self, what: str, now: float, body: Callable[[Any], Any]) -> Any:
        """``body(self)`` in one ``BEGIN IMMEDIATE`` transaction; a failure rolls back
        and raises ``StoreError`` with nothing applied (R26)."""
        self.now = now
        try:
            db = self._db
            db.changes("BEGIN IMMEDIATE")
            try:
                done = body(self)
                db.changes("COMMIT")
            except BaseException:
                self._rollback()
                raise
        except sqlite3.Error as exc:
            raise StoreError(f"{what} failed: {exc}") from exc
        return done

    def _rollback(self) -> None:
        try:
            self._db.changes("ROLLBACK")
        except sqlite3.Error:
            pass  # no transaction open: the failure happened before BEGIN took hold

    def lease_owners(self) -> list[str]:
        try:
            return [r[0] for r in self._db.rows(sql.LEASE_OWNERS)]
        except sqlite3.Error as exc:
            raise StoreError(f"reading lease owners failed: {exc}") from exc

    # -- a turn's statements (the Turn protocol) ------------------------------------------------

    def crash_causes(self, job_id: int) -> list[str]:
        """R19a: the errors of this job's earlier child deaths, oldest first."""
        return [r[0] or "?" for r in self._db.rows(sql.CRASH_CAUSES, (job_id,))]

    def claim(self, queue: str, want: int) -> list[tuple]:
        return self._claim(self.claim_text, queue, want)

    def claim_name(self, queue: str, name: str, want: int) -> list[tuple]:
        text = self._name_claims.get(name)
        if text is None:
            text = self._name_claims[name] = sql.claim_sql((name,), self._policies,
                                                           DEFAULT_POLICY)
        return self._claim(text, queue, want)

    def _claim(self, text: sql.ClaimText, queue: str, want: int) -> list[tuple]:
        """Up to ``want`` rows of ``queue`` picked in claim order, then each taken by its
        id (``statements.CLAIM_PICK_TEMPLATE``): the rows as the claim left them."""
        picked = self._db.lenient_rows(text.pick, {"now": self.now, "queue": queue,
                                                   "limit": want})
        return self._take(text.take, picked)

    def _take(self, take: str, picked: list[tuple]) -> list[tuple]:
        """R9: each picked row claimed by its id, fenced by its status."""
        db = self._db
        taking = {"owner": self.owner, "now": self.now, "slack": LEASE_SLACK, "id": 0}
        for row in picked:
            taking["id"] = row[0]
            if db.changes(take, taking) != 1:
                # Never under the turn's write lock; if it were, nothing of it is kept.
                raise sqlite3.DatabaseError(f"the claim of job {row[0]} found it no longer ready")
        return picked

    def extend_leases(self, waits: Sequence[tuple[int, int, float]]) -> None:
        self._db.changes(sql.EXTEND_LEASES, {"owner": self.owner, "rows": json.dumps(waits)})

    def limited_claim(self, plan: LimitPlan) -> LimitedClaim:
        return sqlite_limited_claim(plan, self._names, self._policies, DEFAULT_POLICY)

    def limited_source(self, limited: LimitedClaim) -> SqlLimitedSource:
        # One source per limited claim: it keeps the encoded name lists it made.
        if self._source is None or self._source[0] is not limited:
            self._source = (limited, SqlLimitedSource(sql, self._query, limited))
        return self._source[1]

    def claim_chosen(self, limited: LimitedClaim, picked: Picked) -> list[tuple]:
        # The page's counts are exact here (one writer at a time): no caps, and the
        # claim takes every row picked.
        assert limited.take is not None  # sqlite_limited_claim's
        return self._take(limited.take, self._db.lenient_rows(
            limited.claim_ids, {"ids": json.dumps(picked.ids)}))

    def reclaimable(self, owner: str | None) -> list[tuple]:
        # R44: lenient, so a row holding text that is not UTF-8 reaches the codec.
        if owner is None:
            return self._db.lenient_rows(sql.RECLAIMABLE_EXPIRED, {"now": self.now})
        return self._db.lenient_rows(sql.RECLAIMABLE_OWNER, {"now": self.now, "owner": owner})

    def _query(self, text: str, params: dict) -> list:
        return self._db.rows(text, params)

    def settle_malformed(self, bad: row_codec.Malformed, owner: Any) -> Settled:
        return row_codec.settle_malformed(self._query, sql, bad, owner, self.now)

    def settle(self, items: Sequence[Settled | Fenced]) -> list[Answer]:
        """Each settle in turn: the fenced UPDATE ``decide`` named, then, where it
        held, the chain's next step (R12), the batch's count (R34), the lane (R35)
        and the attempt's line in the log (R19a; a success's is in its row, R61)."""
        db = self._db
        now = self.now
        out: list[Answer] = []
        for item in items:
            if isinstance(item, Settled):
                out.append(item)
                continue
            lease, outcome, decision, owner, log_as = item
            params = {"id": lease.job_id, "owner": owner, "attempt": lease.attempt, "now": now,
                      "result": outcome.result, "error": decision.reason,
                      "crashes": decision.crashes, "run_at": now + decision.delay}
            done = decision.statement == "done"
            if done:
                # R61: the success's line goes into its row, written by the settle.
                params.update(pid=outcome.pid, exit_status=outcome.exit_status,
                              peak_rss=outcome.peak_rss, cpu_s=outcome.cpu_s, strays=outcome.strays)
            changed = db.changes(sql.SETTLE[decision.statement], params)
            if changed != 1:
                out.append(Settled(lease.job_id, lease.name, lease.attempt, "lost", "lease lost"))
                continue
            if lease.follow_ups & FOLLOW_ENDS:
                if decision.successor:
                    self._enqueue_successor(db, lease.job_id, now)
                if decision.status in ("done", "dead"):
                    # R34: its batch counts its end in this transaction.
                    db.changes(sql.MEMBER_DONE if decision.status == "done" else sql.MEMBER_DEAD,
                               {"id": lease.job_id, "now": now})
            if lease.follow_ups & FOLLOW_LANE and decision.status == "ready":
                # R35: a limited row back in line is in its lane again.
                db.changes(sql.LANE_READY, {"id": lease.job_id})
            if not done:
                db.changes(sql.INSERT_ATTEMPT,
                           rows.attempt_params(lease, outcome, owner, now, log_as))
            out.append(Settled(lease.job_id, lease.name, lease.attempt, decision.status,
                               decision.reason))
        return out

    @staticmethod
    def _enqueue_successor(db: Any, job_id: int, now: float) -> None:
        """R12: the chain's next step, with its lane (R35) when its name is limited.

        R44: the claim checked the chain; should the row's chain have changed since,
        and its step not fit the row it makes, the insert fails alone (SQLite rolls
        back that statement, not the transaction): the job's end stands and its row
        says why the chain stopped, so the turn commits."""
        try:
            db.changes(sql.ENQUEUE_SUCCESSOR, {"id": job_id, "now": now})
        except sqlite3.Error as exc:
            if not sql.statement_failed_alone(exc, db.in_transaction):
                raise
            db.changes(sql.CHAIN_STOPPED, {"id": job_id,
                                           "error": f"{row_codec.CHAIN_STOPPED} ({exc})"})
            return
        db.changes(sql.LANE_OF_LAST_ROW)  # R35: the step's lane, if limited
