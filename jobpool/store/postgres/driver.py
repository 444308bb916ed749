"""The PostgreSQL driver under the engine (``jobpool.engine``, the ``Driver`` protocol
of ``store/base.py``): a supervisor's hot path, one transaction per turn, on a
connection of its own.

The engine decides (the fence test, ``lifecycle.decide``, claim order, R10, limits);
this runs it on the server: the SQL (``store/postgres/statements.py``), pipelined,
and the clock: what it writes is dated by the server's time (R7a), whatever ``now``
the supervisor passes: this host's monotonic clock plus its offset to the
server's, measured over a round trip once a minute; a claim also takes the
server's own statement time when that is later. A turn's settles travel with its
first claim, those of one kind as one statement (``SETTLE_MANY``), and their
answers are read after the commit.

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
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from jobpool.errors import StoreError
from jobpool.lifecycle import DEFAULT_POLICY, LEASE_SLACK, Decision, Lease, Policy, Settled
from jobpool.limits import LimitPlan, Picked
from jobpool.store import row_codec, rows
from jobpool.store.base import Answer, Fenced, settled_of
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


class PgDriver:
    """PostgreSQL for one claimer (see the module docstring). Every failure is a
    ``StoreError`` with nothing applied (the transaction rolls back), so the
    supervisor keeps its outcomes and pauses (R26). A connection that broke is
    replaced at the next call, whose turn first gives back the claims that committed
    on the server while their reply was lost (in doubt), and tells a settle whose
    fence its own lost commit closed from one lost to another pool."""

    #: What claims, as ``pools`` shows it.
    name = "postgres"
    #: A batch counts its members by the store's own trigger, and a chain's next step
    #: is in the settle statement: a reclaim needs no follow-up flags here.
    reclaim_follow_ups = 0
    #: R44: the claim's codec, as it is.
    decode_claims = staticmethod(row_codec.decode_claims)

    def __init__(self, target: Target) -> None:
        self.target = target
        self.owner = ""
        self._names: tuple[str, ...] = ()
        self._claim_params: dict[str, Any] = {}
        if not psycopg.Pipeline.is_supported():
            raise StoreError("a PostgreSQL pool needs libpq 14 or later (pipeline mode); "
                             "pip install 'jobpool[postgres]' brings one")
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

    def serve(self, owner: str, names: Sequence[str], policies: dict[str, Policy]) -> None:
        self.owner = owner
        self._names = tuple(names)
        self._claim_params = pg_sql.claim_params(names, policies, DEFAULT_POLICY)

    def limited_claim(self, plan: LimitPlan) -> LimitedClaim:
        return pg_limited_claim(plan, self._names)

    # -- the connection and the server's clock ------------------------------------------------

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

    def _run(self, what: str, fn: Callable[[Any, float], Any]) -> Any:
        """``fn(conn, now)`` in one transaction, ``now`` the server's clock."""
        try:
            conn = self._connection()
            with conn.transaction():
                scope(conn, self.target)
                return fn(conn, self._server_now(conn))
        except psycopg.Error as exc:
            raise self._failed(what, exc) from exc

    # -- transactions ---------------------------------------------------------------------------

    def turn(self, now: float, held: Mapping[int, Lease],
             body: Callable[[Any], tuple[list[Answer], list[Answer]]]
             ) -> tuple[list[Settled], list[Settled]]:
        """The body's statements and the commit in pipeline mode: the settles travel
        with the first claim, then the commit; two round trips for one queue, one more
        for each further queue a turn asks. A turn after a dropped connection first
        gives back the claims in doubt and reads which settles in doubt committed."""
        turn: PgTurn | None = None
        released: Any = None
        committed: Any = None
        try:
            conn = self._connection()
            turn = PgTurn(self, conn, self._server_now(conn), held)
            with conn.pipeline(), conn.transaction():
                scope(conn, self.target)  # behind a pooler: sent with the rest, no round trip
                if self._in_doubt:
                    released = conn.execute(pg_sql.RELEASE_IN_DOUBT, {
                        "owner": self.owner, "held": list(held)})
                if self._doubted:
                    committed = conn.execute(pg_sql.SETTLED_IN_DOUBT, self._doubt_params())
                sent, expiring = body(turn)
            settled = settled_of(sent)
            if committed is not None:
                settled = self._settled_before(settled, committed.fetchall())
            expired = settled_of(expiring)
            gave_back = released.fetchall() if released is not None else []
        except psycopg.Error as exc:
            # Nothing was applied, or (the connection dropped) perhaps all of it: the
            # leases stay as they were until a turn commits.
            error = self._failed("turn", exc)
            if self._conn is None and turn is not None:
                self._doubt(turn.decided, turn.now)
            raise error from exc
        if gave_back:
            log.warning("gave back %d claim(s) left in doubt by a dropped connection: jobs %s",
                        len(gave_back), ", ".join(str(r[0]) for r in gave_back))
        self._in_doubt = False
        self._doubted.clear()
        return settled, expired

    def transaction(self, what: str, now: float,
                    body: Callable[[Any], list[Answer]]) -> list[Settled]:
        """``body`` in one transaction on the server's clock (a reclaim, R23, R24)."""
        return self._run(what, lambda conn, server_now: settled_of(
            body(PgTurn(self, conn, server_now, None))))

    def lease_owners(self) -> list[str]:
        return self._run("reading lease owners",
                         lambda conn, _now: [r[0] for r in conn.execute(pg_sql.LEASE_OWNERS)])

    # -- R26: settles in doubt ------------------------------------------------------------------

    def _doubt(self, decided: list[Fenced], now: float) -> None:
        """R26: remember what a turn whose connection dropped meant to settle. Its
        commit may have reached the server with only the reply lost; the supervisor
        then sends the same outcomes again, and their fence, closed by that commit,
        matches no row."""
        for item in decided:
            lease = item.lease
            self._doubted[(lease.job_id, lease.attempt, lease.started_at, now)] = item.decision

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

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


class PgTurn:
    """One transaction's statements on the driver's connection (the ``Turn`` protocol),
    their answers read after the commit."""

    __slots__ = ("driver", "conn", "now", "_held", "decided")

    def __init__(self, driver: PgDriver, conn: Any, now: float,
                 held: Mapping[int, Lease] | None) -> None:
        self.driver = driver
        self.conn = conn
        self.now = now
        self._held = held
        #: R26: the settles of the turn's outcomes (attempts the engine held leases
        #: for), remembered should the connection drop before the commit's reply.
        self.decided: list[Fenced] = []

    def crash_causes(self, job_id: int) -> list[str]:
        return [r[0] or "?" for r in self.conn.execute(pg_sql.CRASH_CAUSES, {"id": job_id})]

    def claim(self, queue: str, want: int) -> list[tuple]:
        # Reading the claim's rows sends everything queued so far in one go.
        return self.conn.execute(pg_sql.CLAIM, dict(
            self.driver._claim_params, owner=self.driver.owner, now=self.now, slack=LEASE_SLACK,
            queue=queue, limit=want)).fetchall()

    def limited_source(self, limited: LimitedClaim) -> SqlLimitedSource:
        # The groups' locks (FOR UPDATE SKIP LOCKED) are taken through it, in this
        # transaction: a source per claim.
        return SqlLimitedSource(pg_sql, rows_of(self.conn), limited)

    def claim_chosen(self, limited: LimitedClaim, picked: Picked) -> list[tuple]:
        return self.conn.execute(limited.claim_ids, dict(
            self.driver._claim_params, owner=self.driver.owner, now=self.now, slack=LEASE_SLACK,
            ids=picked.ids, caps=picked.caps)).fetchall()

    def reclaimable(self, owner: str | None) -> list[tuple]:
        if owner is None:
            return self.conn.execute(pg_sql.RECLAIMABLE_EXPIRED, {"now": self.now}).fetchall()
        return self.conn.execute(pg_sql.RECLAIMABLE_OWNER,
                                 {"owner": owner, "now": self.now}).fetchall()

    def settle_malformed(self, bad: row_codec.Malformed, owner: Any) -> SentMalformed:
        """R44: settle dead a row the codec refused (``pg_sql.SETTLE_MALFORMED``, its
        answer read after the commit, as a settle's is)."""
        return SentMalformed(bad, self.conn.execute(
            pg_sql.SETTLE_MALFORMED, row_codec.malformed_params(bad, owner, self.now)))

    def settle(self, items: Sequence[Settled | Fenced]) -> list[Answer]:
        """Send a batch of settles, answers in its order: the settles of one kind as
        one statement (``pg_sql.SETTLE_MANY``) when the batch has several of it, since
        the statement's round of planning and locking is most of what a settle costs
        the server; a kind seen once as its single statement. Each statement is the
        fenced change (for a finished job: the row's move, a chain's next step) and
        its line in the attempt log (R19a)."""
        held = self._held
        kinds: dict[str, list[tuple[Fenced, dict]]] = {}
        params_of: list[tuple[Fenced, dict] | Settled] = []
        for item in items:
            if isinstance(item, Settled):
                params_of.append(item)
                continue
            if held is not None and held.get(item.lease.job_id) is item.lease:
                self.decided.append(item)
            pair = (item, self._params(item))
            params_of.append(pair)
            kinds.setdefault(item.decision.statement, []).append(pair)
        groups = {kind: self._send_group(kind, pairs)
                  for kind, pairs in kinds.items() if len(pairs) > 1}
        sent: list[Answer] = []
        for entry in params_of:
            if isinstance(entry, Settled):
                sent.append(entry)
                continue
            item, params = entry
            kind = item.decision.statement
            group = groups.get(kind)
            sent.append(SentSettle(item.lease, item.decision, group if group is not None
                                   else self.conn.execute(pg_sql.SETTLE[kind], params)))
        return sent

    def _params(self, item: Fenced) -> dict[str, Any]:
        """The parameters of one attempt's settle and of its line in the log."""
        lease, outcome, decision, owner, log_as = item
        now = self.now
        result = outcome.result
        logged = rows.attempt_params(lease, outcome, owner, now, log_as)
        return dict(logged, log_error=logged["error"], error=decision.reason,
                    result=result.encode() if isinstance(result, str) else result,
                    crashes=decision.crashes, run_at=now + decision.delay)

    def _send_group(self, kind: str, pairs: list[tuple[Fenced, dict]]) -> SentGroup:
        column = {name: [params[key] for _item, params in pairs]
                  for name, key in (("ids", "id"), ("attempts", "attempt"),
                                    ("run_ats", "run_at"), ("errors", "error"),
                                    ("crashes", "crashes"), ("results", "result"),
                                    ("pids", "pid"), ("began", "started_at"),
                                    ("outcomes", "outcome"), ("log_errors", "log_error"),
                                    ("exit_statuses", "exit_status"),
                                    ("peak_rsses", "peak_rss"), ("cpus", "cpu_s"),
                                    ("strays", "strays"))}
        return SentGroup(self.conn.execute(pg_sql.SETTLE_MANY[kind],
                                           dict(column, owner=self.driver.owner, now=self.now)))
