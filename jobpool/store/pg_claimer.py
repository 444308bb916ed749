"""A supervisor's hot path over PostgreSQL: settle and claim in one transaction per
turn, on a connection of its own (the ``Claimer`` protocol, ``store/base.py``).

It applies ``lifecycle.decide`` as the SQLite cores do; what differs is the SQL
(``store/pg_sql.py``) and the clock: every turn reads the server's time once and
dates what it writes by it (R7a), whatever ``now`` the supervisor passes.

Every failure is a ``StoreError`` with nothing applied (the transaction rolls
back), so the supervisor keeps its outcomes and pauses (R26). A connection that
broke is replaced at the next call, whose turn first gives back the claims that
committed on the server while their reply was lost (in doubt).
"""
from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from jobpool.errors import StoreError
from jobpool.lifecycle import (DEADLINE_PASSED, DEFAULT_POLICY, EXPIRED, FATAL, LEASE_SLACK,
                               OWNER_DIED, Claimed, Lease, Outcome, Policy, Settled, decide)
from jobpool.store import pg_sql, rows
from jobpool.store.postgres import Target, _first_line, open_connection

log = logging.getLogger(__name__)

try:
    import psycopg
except ImportError:  # pragma: no cover - PostgresStore refused to open first
    psycopg = None  # type: ignore[assignment]


class PgClaimer:
    """Claims and settles jobs for one supervisor (see the module docstring)."""

    def __init__(self, target: Target, owner: str, names: Sequence[str], queues: Sequence[str],
                 policies: dict[str, Policy] | None = None) -> None:
        self.target = target
        self.owner = owner
        self.queues = tuple(queues)
        self.policies = {name: Policy(*policy) for name, policy in (policies or {}).items()}
        self._claim_params = pg_sql.claim_params(names, self.policies, DEFAULT_POLICY)
        #: The leases this supervisor holds: what settling each attempt needs.
        self._inflight: dict[int, Lease] = {}
        self._conn: Any = None
        #: The connection dropped since the last turn that committed: claims may be
        #: in doubt (see ``pg_sql.RELEASE_IN_DOUBT``).
        self._in_doubt = False
        _ = self._connection()

    def _connection(self) -> Any:
        if self._conn is None or self._conn.closed or self._conn.broken:
            self._conn = open_connection(self.target, application="jobpool-supervisor")
        return self._conn

    def _run(self, what: str, fn) -> Any:
        """``fn(conn, now)`` in one transaction, ``now`` the server's clock."""
        try:
            conn = self._connection()
            with conn.transaction():
                now = conn.execute(pg_sql.SERVER_NOW).fetchone()[0]
                return fn(conn, now)
        except psycopg.Error as exc:
            if self._conn is not None and (self._conn.closed or self._conn.broken):
                self._conn = None
                self._in_doubt = True
            raise StoreError(f"{what} failed: {self.target.scrub(_first_line(exc))}") from exc

    @property
    def inflight(self) -> int:
        return len(self._inflight)

    # -- one turn: settle, then claim (R6-R10, section 4) --------------------------------------

    def turn(self, outcomes: Sequence[Outcome], n: int, now: float,
             rng: Any) -> tuple[list[Settled], list[Claimed], list[Settled]]:
        settled: list[Settled] = []
        claimed: list[Claimed] = []
        expired: list[Settled] = []
        if not outcomes and n <= 0:
            return settled, claimed, expired
        taken: dict[int, Lease] = {}
        new_leases: dict[int, Lease] = {}

        def turn(conn: Any, server_now: float) -> None:
            if self._in_doubt:
                released = conn.execute(pg_sql.RELEASE_IN_DOUBT, {
                    "owner": self.owner, "held": list(self._inflight)}).fetchall()
                if released:
                    log.warning("gave back %d claim(s) left in doubt by a dropped connection: "
                                "jobs %s", len(released), ", ".join(str(r[0]) for r in released))
            for outcome in outcomes:
                lease = self._inflight.get(outcome.job_id)
                if lease is None or lease.attempt != outcome.attempt:
                    settled.append(Settled(outcome.job_id, lease.name if lease else "",
                                           outcome.attempt, "lost",
                                           "not leased by this supervisor"))
                    continue
                taken[outcome.job_id] = lease
                self._settle_one(conn, lease, outcome, server_now, rng, settled)
            self._claim_all(conn, n, server_now, claimed, expired, new_leases)
        self._run("turn", turn)  # on a StoreError nothing was applied: leases stay as they were
        self._in_doubt = False
        for job_id in taken:
            self._inflight.pop(job_id, None)
        self._inflight.update(new_leases)
        return settled, claimed, expired

    def _claim_all(self, conn: Any, n: int, now: float, claimed: list[Claimed],
                   expired: list[Settled], leases: dict[int, Lease]) -> None:
        for queue in self.queues:
            want = n - len(claimed)
            if want <= 0:
                break
            found = conn.execute(pg_sql.CLAIM, dict(self._claim_params, owner=self.owner,
                                                    now=now, slack=LEASE_SLACK, queue=queue,
                                                    limit=want)).fetchall()
            # RETURNING has no order; dispatch in claim order (R7).
            found.sort(key=lambda r: (-r[9], r[10], r[0]))
            for (job_id, name, payload, serializer, attempt, max_attempts, crashes, timeout,
                 deadline, _priority, _line_at, chained) in found:
                lease = Lease(job_id, name, attempt, max_attempts, crashes, deadline, now,
                              bool(chained))
                if deadline is not None and deadline < now:
                    # R10: claimed after its deadline, it is retired without running.
                    self._settle_one(conn, lease, Outcome(job_id, attempt, FATAL, DEADLINE_PASSED),
                                     now, None, expired, log_as="deadline")
                    continue
                leases[job_id] = lease
                claimed.append(Claimed(job_id, name, bytes(payload), serializer, attempt,
                                       float(timeout), deadline))

    def _settle_one(self, conn: Any, lease: Lease, outcome: Outcome, now: float, rng: Any,
                    out: list[Settled], log_as: str | None = None,
                    owner: str | None = None) -> None:
        """Apply ``lifecycle.decide`` to one attempt: its fenced statement (which, for
        a finished job, moves the row and enqueues a chain's next step) and its line
        in the attempt log (R19a)."""
        policy = self.policies.get(lease.name, DEFAULT_POLICY)
        decision = decide(lease, outcome, policy, now, rng,
                          lambda job_id: self._crash_causes(conn, job_id))
        owner = owner or self.owner   # a reclaim settles another owner's lease
        result = outcome.result
        params = {"id": lease.job_id, "owner": owner, "attempt": lease.attempt, "now": now,
                  "result": result.encode() if isinstance(result, str) else result,
                  "error": decision.reason, "crashes": decision.crashes,
                  "run_at": now + decision.delay}
        if conn.execute(pg_sql.SETTLE[decision.statement], params).fetchone() is None:
            out.append(Settled(lease.job_id, lease.name, lease.attempt, "lost", "lease lost"))
            return
        conn.execute(pg_sql.INSERT_ATTEMPT, rows.attempt_params(lease, outcome, owner, now, log_as))
        out.append(Settled(lease.job_id, lease.name, lease.attempt, decision.status,
                           decision.reason))

    @staticmethod
    def _crash_causes(conn: Any, job_id: int) -> list[str]:
        return [r[0] or "?" for r in conn.execute(pg_sql.CRASH_CAUSES, {"id": job_id})]

    # -- recovery (R23, R24) ---------------------------------------------------------------------

    def reclaim(self, now: float) -> list[Settled]:
        """R23: expired leases of any owner, by the server's clock."""
        return self._recover(pg_sql.RECLAIMABLE_EXPIRED, {}, EXPIRED,
                             lambda owner: f"lease expired (owner {owner})")

    def reclaim_owner(self, owner: str, reason: str, now: float) -> list[Settled]:
        """R24, R24b: a dead supervisor's leases, at once."""
        if owner == self.owner:
            raise ValueError("a supervisor cannot reclaim its own leases")
        return self._recover(pg_sql.RECLAIMABLE_OWNER, {"owner": owner}, OWNER_DIED,
                             lambda _owner: reason)

    def lease_owners(self) -> list[str]:
        return self._run("reading lease owners",
                         lambda conn, _now: [r[0] for r in conn.execute(pg_sql.LEASE_OWNERS)])

    def _recover(self, query: str, params: dict, kind: int, reason_of) -> list[Settled]:
        settled: list[Settled] = []

        def recover(conn: Any, now: float) -> None:
            for (job_id, name, attempt, max_attempts, crashes, deadline, started_at,
                 owner) in conn.execute(query, dict(params, now=now)).fetchall():
                lease = Lease(job_id, name, attempt, max_attempts, crashes, deadline, started_at,
                              False)
                self._settle_one(conn, lease, Outcome(job_id, attempt, kind, reason_of(owner)),
                                 now, None, settled, owner=owner)
        self._run("reclaim", recover)
        return settled

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
