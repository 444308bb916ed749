"""A supervisor's hot path over PostgreSQL: settle and claim in one transaction per
turn, on a connection of its own (the ``Claimer`` protocol, ``store/base.py``).

It applies ``lifecycle.decide`` as the SQLite cores do; what differs is the SQL
(``store/postgres/statements.py``) and the clock: what it writes is dated by the server's time
(R7a), whatever ``now`` the supervisor passes: this host's monotonic clock plus
its offset to the server's, measured over a round trip once a minute; a claim
also takes the server's own statement time when that is later.

Every failure is a ``StoreError`` with nothing applied (the transaction rolls
back), so the supervisor keeps its outcomes and pauses (R26). A connection that
broke is replaced at the next call, whose turn first gives back the claims that
committed on the server while their reply was lost (in doubt), and tells a settle
whose fence its own lost commit closed from one lost to another pool.
"""
from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from typing import Any, NamedTuple

from jobpool.errors import StoreError
from jobpool.lifecycle import (DEADLINE_PASSED, DEFAULT_POLICY, EXPIRED, FATAL, LEASE_SLACK,
                               OWNER_DIED, Claimed, Decision, Lease, Outcome, Policy, Settled,
                               decide)
from jobpool.limits import LimitPlan, charge, plan_claim, sooner
from jobpool.queueplan import Share, claim_in_shares
from jobpool.store import row_codec, rows
from jobpool.store.postgres import statements as pg_sql
from jobpool.store.limit_claim import (LimitedClaim, SqlLimitedSource, pg_limited_claim,
                                      rows_of)
from jobpool.store.postgres.connection import (CLAIMER_OPTIONS, Target, first_line,
                                         open_connection, scope)

log = logging.getLogger(__name__)

try:
    import psycopg
except ImportError:  # pragma: no cover - PostgresStore refused to open first
    psycopg = None  # type: ignore[assignment]


#: How often a claimer reads the server's clock again to correct its offset, seconds.
CLOCK_EVERY = 60.0


class SentGroup:
    """One statement that settled several attempts (``pg_sql.SETTLE_MANY``): the
    ids it returns are those whose fence held, read once after the commit."""

    __slots__ = ("cursor", "_held")

    def __init__(self, cursor: Any) -> None:
        self.cursor = cursor
        self._held: set[int] | None = None

    def held(self, job_id: int) -> bool:
        if self._held is None:
            self._held = {row[0] for row in self.cursor.fetchall()}
        return job_id in self._held


class SentSettle(NamedTuple):
    """A settle sent to the server, its answer read after the transaction commits:
    from its own statement's cursor, or from the ``SentGroup`` it went with."""

    lease: Lease
    decision: Decision
    answer: Any   # a cursor, or a SentGroup

    def settled(self) -> Settled:
        """What became of the attempt: its new status, or ``lost`` when the fence
        matched no row (another pool holds that attempt now, R8)."""
        lease = self.lease
        answer = self.answer
        held = (answer.held(lease.job_id) if isinstance(answer, SentGroup)
                else answer.fetchone() is not None)
        if not held:
            return Settled(lease.job_id, lease.name, lease.attempt, "lost", "lease lost")
        return Settled(lease.job_id, lease.name, lease.attempt, self.decision.status,
                       self.decision.reason)


class SentMalformed(NamedTuple):
    """R44: a refused row's settle, sent; its answer read after the transaction commits."""

    malformed: row_codec.Malformed
    answer: Any   # a cursor

    def settled(self) -> Settled:
        return row_codec.malformed_settled(self.malformed, self.answer.fetchone() is not None)


class PgClaimer:
    """Claims and settles jobs for one supervisor (see the module docstring)."""

    #: What claims, as ``pools`` shows it (the Claimer protocol).
    name = "postgres"

    def __init__(self, target: Target, owner: str, names: Sequence[str], queues: Sequence[str],
                 policies: dict[str, Policy] | None = None) -> None:
        self.target = target
        self.owner = owner
        self.queues = tuple(queues)
        self.policies = {name: Policy(*policy) for name, policy in (policies or {}).items()}
        self._names = tuple(names)
        self._claim_params = pg_sql.claim_params(names, self.policies, DEFAULT_POLICY)
        #: R35/R36: the limits this pool obeys (``set_limits``); None: the ordinary claim.
        self._limits: LimitedClaim | None = None
        #: R36: after a turn, the seconds until a group its claim passed over for want
        #: of a token has one (the Claimer protocol); None: no such group.
        self.token_wait: float | None = None
        if not psycopg.Pipeline.is_supported():
            raise StoreError("a PostgreSQL pool needs libpq 14 or later (pipeline mode); "
                             "pip install 'jobpool[postgres]' brings one")
        #: The leases this supervisor holds: what settling each attempt needs.
        self._inflight: dict[int, Lease] = {}
        self._conn: Any = None
        #: The connection dropped since the last turn that committed: claims may be
        #: in doubt (see ``pg_sql.RELEASE_IN_DOUBT``).
        self._in_doubt = False
        #: R26: the settles sent by turns whose connection dropped, each perhaps committed:
        #: (job id, attempt, claimed at, the turn's server time) -> its decision.
        self._doubted: dict[tuple[int, int, float, float], Decision] = {}
        #: The server's clock minus this host's monotonic one, and when (monotonic)
        #: it was last measured (R7a).
        self._clock_offset = 0.0
        self._clock_read_at = -math.inf
        _ = self._connection()

    def _connection(self) -> Any:
        if self._conn is None or self._conn.closed or self._conn.broken:
            self._conn = open_connection(self.target, application="jobpool-supervisor",
                                         settings=CLAIMER_OPTIONS)
            self._clock_read_at = -math.inf  # a new connection: read the server's clock again
        return self._conn

    def _server_now(self, conn: Any) -> float:
        """R7a: the server's time, as this host's monotonic clock plus the offset last
        measured (every ``CLOCK_EVERY`` seconds, over one round trip), so a turn need
        not ask. Monotonic: a step of the host's wall clock (NTP, a resumed VM) must
        not shift leases and due times by as much."""
        local = time.monotonic()
        if local - self._clock_read_at >= CLOCK_EVERY:
            sent = time.monotonic()
            server = conn.execute(pg_sql.SERVER_NOW).fetchone()[0]
            received = time.monotonic()
            self._clock_offset = server - (sent + received) / 2
            self._clock_read_at = local = received
        return local + self._clock_offset

    def _failed(self, what: str, exc: BaseException) -> StoreError:
        """The StoreError for a failed call; a broken connection is let go, and the
        claims of the transaction it carried are in doubt until the next turn."""
        if self._conn is not None and (self._conn.closed or self._conn.broken):
            self._conn = None
            self._in_doubt = True
        return StoreError(f"{what} failed: {self.target.scrub(first_line(exc))}")

    def _run(self, what: str, fn) -> Any:
        """``fn(conn, now)`` in one transaction, ``now`` the server's clock."""
        try:
            conn = self._connection()
            with conn.transaction():
                scope(conn, self.target)
                return fn(conn, self._server_now(conn))
        except psycopg.Error as exc:
            raise self._failed(what, exc) from exc

    @property
    def inflight(self) -> int:
        return len(self._inflight)

    # -- one turn: settle, then claim (R6-R10, section 4) --------------------------------------

    def turn(self, outcomes: Sequence[Outcome], n: int, now: float, rng: Any,
             shares: Sequence[Share] | None = None
             ) -> tuple[list[Settled], list[Claimed], list[Settled]]:
        """Settle ``outcomes`` and claim up to ``n`` (shared among queues by ``shares``,
        as in the SQLite core), in one transaction: the settles travel with the first
        claim (pipeline mode), then the commit; two round trips for one queue, one more
        for each further queue a turn asks."""
        settled: list[Settled] = []
        claimed: list[Claimed] = []
        expired: list[Settled] = []
        self.token_wait = None
        if not outcomes and n <= 0:
            return settled, claimed, expired
        taken: dict[int, Lease] = {}
        new_leases: dict[int, Lease] = {}
        sent: list[SentSettle | Settled] = []
        expiring: list[SentSettle | SentMalformed] = []
        released: Any = None
        decided: list[tuple[Lease, Decision, dict] | Settled] = []
        committed: Any = None
        try:
            conn = self._connection()
            server_now = self._server_now(conn)
            with conn.pipeline(), conn.transaction():
                scope(conn, self.target)  # behind a pooler: sent with the rest, no round trip
                if self._in_doubt:
                    released = conn.execute(pg_sql.RELEASE_IN_DOUBT, {
                        "owner": self.owner, "held": list(self._inflight)})
                if self._doubted:
                    committed = conn.execute(pg_sql.SETTLED_IN_DOUBT, self._doubt_params())
                for outcome in outcomes:
                    lease = self._inflight.get(outcome.job_id)
                    if lease is None or lease.attempt != outcome.attempt:
                        decided.append(Settled(outcome.job_id, lease.name if lease else "",
                                               outcome.attempt, "lost",
                                               "not leased by this supervisor"))
                        continue
                    taken[outcome.job_id] = lease
                    decided.append((lease, *self._decide(conn, lease, outcome, server_now, rng)))
                sent = self._send_settles(conn, decided, server_now)
                # Claimed.run_at is handed over on the pool's clock (``now``), where
                # the pool measures a job's wait; the row has it on the server's (R7a).
                self._claim_all(conn, n, server_now, now - server_now, claimed, expiring,
                                new_leases, shares)
            settled = [item if isinstance(item, Settled) else item.settled() for item in sent]
            if committed is not None:
                settled = self._settled_before(settled, committed.fetchall())
            expired = [item.settled() for item in expiring]
            gave_back = released.fetchall() if released is not None else []
        except psycopg.Error as exc:
            # Nothing was applied, or (the connection dropped) perhaps all of it: the
            # leases stay as they were until a turn commits.
            error = self._failed("turn", exc)
            if self._conn is None:
                self._doubt(decided)
            raise error from exc
        if gave_back:
            log.warning("gave back %d claim(s) left in doubt by a dropped connection: jobs %s",
                        len(gave_back), ", ".join(str(r[0]) for r in gave_back))
        self._in_doubt = False
        self._doubted.clear()
        for job_id in taken:
            self._inflight.pop(job_id, None)
        self._inflight.update(new_leases)
        return settled, claimed, expired

    def _doubt(self, decided: list[tuple[Lease, Decision, dict] | Settled]) -> None:
        """R26: remember what a turn whose connection dropped meant to settle. Its
        commit may have reached the server with only the reply lost; the supervisor
        then sends the same outcomes again, and their fence, closed by that commit,
        matches no row."""
        for item in decided:
            if not isinstance(item, Settled):
                lease, decision, params = item
                self._doubted[(lease.job_id, lease.attempt, lease.started_at,
                               params["now"])] = decision

    def _doubt_params(self) -> dict[str, Any]:
        ids, attempts, began, ended = zip(*self._doubted)
        return {"owner": self.owner, "ids": list(ids), "attempts": list(attempts),
                "began": list(began), "ended": list(ended)}

    def _settled_before(self, settled: list[Settled], lines: list[tuple]) -> list[Settled]:
        """R26: a settle the fence refused is lost only if no earlier turn of this
        claimer settled that attempt. ``lines`` are the attempt log's lines (R19a) that
        a settle sent before a dropped connection wrote, so its commit went through:
        the attempt is reported as what that settle made it, with its reason."""
        before = {(job_id, attempt): self._doubted[(job_id, attempt, began, ended)]
                  for job_id, attempt, began, ended in lines}
        out = []
        for item in settled:
            decision = before.get((item.job_id, item.attempt))
            if item.status == "lost" and decision is not None:
                item = item._replace(status=decision.status, reason=decision.reason)
            out.append(item)
        return out

    def _claim_all(self, conn: Any, n: int, now: float, to_pool_clock: float,
                   claimed: list[Claimed], expiring: list["SentSettle | SentMalformed"],
                   leases: dict[int, Lease], shares: Sequence[Share] | None) -> None:
        claim_in_shares(shares, self.queues, n, claimed,
                        lambda queue, want: self._claim_queue(conn, queue, want, now,
                                                              to_pool_clock, claimed, expiring,
                                                              leases))

    def set_limits(self, plan: LimitPlan | None) -> None:
        """R35/R36: the part of the store's limits this pool obeys from now on
        (``LimitPlan.for_pool``); None: the ordinary claim."""
        if plan == (self._limits.plan if self._limits else None):
            return
        self._limits = None if plan is None else pg_limited_claim(plan, self._names)

    def _claim_queue(self, conn: Any, queue: str, want: int, now: float, to_pool_clock: float,
                     claimed: list[Claimed], expiring: list["SentSettle | SentMalformed"],
                     leases: dict[int, Lease]) -> int:
        limited = self._limits
        if limited is None:
            # Reading the claim's rows sends everything queued so far in one go.
            found = conn.execute(pg_sql.CLAIM, dict(self._claim_params, owner=self.owner,
                                                    now=now, slack=LEASE_SLACK, queue=queue,
                                                    limit=want)).fetchall()
        else:
            # R35/R36: the groups' locks, counts and buckets decide which rows to take.
            source = SqlLimitedSource(pg_sql, rows_of(conn), limited)
            picked = plan_claim(source, limited.plan, queue, want, now, limited.has_unlimited)
            found = conn.execute(limited.claim_ids, dict(
                self._claim_params, owner=self.owner, now=now, slack=LEASE_SLACK,
                ids=picked.ids, caps=picked.caps)).fetchall() if picked.ids else []
            # Only the rows the statement took (under their caps) cost a token and a
            # turn of the rotation.
            charge(source, picked, {row[0] for row in found}, now)
            self.token_wait = sooner(self.token_wait, picked.token_wait)
        # R44: every row through the codec, in claim order (R7: RETURNING has none);
        # a row it refuses is dead at once, in a statement of its own. Follow-ups:
        # only a chain's next step here (a batch counts its members by the store's
        # own trigger on PostgreSQL).
        decoded, refused = row_codec.decode_claims(found, queue, now, to_pool_clock)
        expiring.extend(self._send_malformed(conn, bad, self.owner, now) for bad in refused)
        for lease, job, _priority, _line_at in decoded:
            if job.deadline is not None and job.deadline < now:
                # R10: claimed after its deadline, it is retired without running.
                expiring.append(self._send_settle(
                    conn, lease, Outcome(job.job_id, job.attempt, FATAL, DEADLINE_PASSED), now,
                    None, log_as="deadline"))
                continue
            leases[job.job_id] = lease
            claimed.append(job)
        return len(found)

    @staticmethod
    def _send_malformed(conn: Any, bad: row_codec.Malformed, owner: str,
                        now: float) -> "SentMalformed":
        """R44: settle dead a row the codec refused (``pg_sql.SETTLE_MALFORMED``, its
        answer read after the commit, as a settle's is)."""
        return SentMalformed(bad, conn.execute(pg_sql.SETTLE_MALFORMED,
                                               row_codec.malformed_params(bad, owner, now)))

    def _send_settle(self, conn: Any, lease: Lease, outcome: Outcome, now: float, rng: Any,
                     log_as: str | None = None, owner: str | None = None) -> "SentSettle":
        """Apply ``lifecycle.decide`` to one attempt and send its statement: the fenced
        change (for a finished job: the row's move, a chain's next step) and its line
        in the attempt log (R19a), as one statement whose answer is read later."""
        decision, params = self._decide(conn, lease, outcome, now, rng, log_as, owner)
        return SentSettle(lease, decision, conn.execute(pg_sql.SETTLE[decision.statement], params))

    def _send_settles(self, conn: Any, decided: list[tuple[Lease, Decision, dict] | Settled],
                      now: float) -> list["SentSettle | Settled"]:
        """Send a turn's settles, answers in the order of its outcomes: the outcomes of
        one kind as one statement (``pg_sql.SETTLE_MANY``) when the turn has several of
        it, since the statement's round of planning and locking is most of what a
        settle costs the server; a kind seen once as its single statement."""
        kinds: dict[str, list[tuple[Lease, Decision, dict]]] = {}
        for item in decided:
            if not isinstance(item, Settled):
                kinds.setdefault(item[1].statement, []).append(item)
        groups = {kind: self._send_group(conn, kind, items, now)
                  for kind, items in kinds.items() if len(items) > 1}
        sent: list[SentSettle | Settled] = []
        for item in decided:
            if isinstance(item, Settled):
                sent.append(item)
                continue
            lease, decision, params = item
            group = groups.get(decision.statement)
            if group is not None:
                sent.append(SentSettle(lease, decision, group))
            else:
                sent.append(SentSettle(lease, decision, conn.execute(
                    pg_sql.SETTLE[decision.statement], params)))
        return sent

    def _send_group(self, conn: Any, kind: str, items: list[tuple[Lease, Decision, dict]],
                    now: float) -> "SentGroup":
        column = {name: [params[key] for _lease, _decision, params in items]
                  for name, key in (("ids", "id"), ("attempts", "attempt"),
                                    ("run_ats", "run_at"), ("errors", "error"),
                                    ("crashes", "crashes"), ("results", "result"),
                                    ("pids", "pid"), ("began", "started_at"),
                                    ("outcomes", "outcome"), ("log_errors", "log_error"),
                                    ("exit_statuses", "exit_status"),
                                    ("peak_rsses", "peak_rss"), ("cpus", "cpu_s"),
                                    ("strays", "strays"))}
        return SentGroup(conn.execute(pg_sql.SETTLE_MANY[kind],
                                      dict(column, owner=self.owner, now=now)))

    def _decide(self, conn: Any, lease: Lease, outcome: Outcome, now: float, rng: Any,
                log_as: str | None = None, owner: str | None = None) -> tuple[Decision, dict]:
        """``lifecycle.decide`` for one attempt, and the parameters of its settle."""
        policy = self.policies.get(lease.name, DEFAULT_POLICY)
        decision = decide(lease, outcome, policy, now, rng,
                          lambda job_id: self._crash_causes(conn, job_id))
        owner = owner or self.owner   # a reclaim settles another owner's lease
        result = outcome.result
        logged = rows.attempt_params(lease, outcome, owner, now, log_as)
        params = dict(logged, log_error=logged["error"], error=decision.reason,
                      result=result.encode() if isinstance(result, str) else result,
                      crashes=decision.crashes, run_at=now + decision.delay)
        return decision, params

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
        def recover(conn: Any, now: float) -> list[Settled]:
            sent: list[SentSettle | SentMalformed] = []
            for row in conn.execute(query, dict(params, now=now)).fetchall():
                owner = row[7]
                lease = row_codec.decode_lease(row, 0)
                if isinstance(lease, row_codec.Malformed):  # R44
                    sent.append(self._send_malformed(conn, lease, owner, now))
                    continue
                sent.append(self._send_settle(conn, lease,
                                              Outcome(lease.job_id, lease.attempt, kind,
                                                      reason_of(owner)),
                                              now, None, owner=owner))
            return [item.settled() for item in sent]
        return self._run("reclaim", recover)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
