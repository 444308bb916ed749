"""The PostgreSQL driver under the engine (``jobpool.engine``, the ``Driver`` protocol
of ``store/base.py``): a supervisor's hot path, one transaction per turn, on a
connection of its own.

The engine decides (the fence test, ``lifecycle.decide``, claim order, R10, limits);
this runs it on the server: the SQL (``store/postgres/statements.py``), pipelined,
and the clock: what it writes is dated by the server's time (R7a), whatever ``now``
the supervisor passes: this host's monotonic clock plus its offset to the
server's, measured over a round trip once a minute; a claim also takes the
server's own statement time when that is later. A turn is one statement and one
round trip (issue 25): its settles of every kind, their attempt lines and the claim
of its first queue (``pg_sql.turn_statement``), sent with its Sync on an autocommit
connection and so committed as it runs. What a turn sends besides (a limited claim's
page and its claim, another queue, a row refused at claim, R10, R44) goes in a
pipeline, one implicit transaction up to its one Sync. Answers are read after the
commit that carries them. A turn that is that one statement may be left in flight
(R66: ``begin_turn`` sends it, ``finish_turn`` reads it, ``store/postgres/flight.py``);
the supervisor's loop goes on meanwhile.

Every failure is a ``StoreError`` with nothing applied (the transaction rolls
back), so the supervisor keeps its outcomes and pauses (R26). A connection that
broke is replaced at the next call, whose turn first gives back the claims that
committed on the server while their reply was lost (in doubt), and tells a settle
whose fence its own lost commit closed from one lost to another pool. A turn that
fails after one of its Syncs committed is in doubt the same way, connection or not:
its claims are given back and its settles looked up (docs/RULES.md, R26).
"""
from __future__ import annotations

import contextlib
import functools
import logging
import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

from jobpool.errors import StoreError
from jobpool.lifecycle import DEFAULT_POLICY, LEASE_SLACK, Decision, Lease, Policy, Settled
from jobpool.limits import LimitPlan, Picked
from jobpool.store import row_codec, rows
from jobpool.store.base import Answer, Fenced, settled_of
from jobpool.store.postgres import statements as pg_sql
from jobpool.store.limit_claim import (LimitedClaim, SqlLimitedSource, answered_first,
                                       first_statement, pg_limited_claim, rows_of)
from jobpool.store.postgres.connection import (CLAIMER_OPTIONS, Target, first_line,
                                               open_connection, scope)
from jobpool.store.postgres.flight import StatementInFlight, TransactionInFlight, prepare

log = logging.getLogger(__name__)

try:
    import psycopg
except ImportError:  # pragma: no cover - PostgresStore refused to open first
    psycopg = None  # type: ignore[assignment]


#: How often a claimer reads the server's clock again to correct its offset, seconds.
CLOCK_EVERY = 60.0
#: R62: how often a claimer that claims from its place in line walks a queue from its
#: front again, seconds: the longest a row put back at its old place by another pool
#: (a defer, a release, an expired lease) waits behind the rows after it.
FRONT_EVERY = 1.0
#: R62: the settles that put a row back at its old place in line, ahead of a claimer's
#: (a done whose row has follow-ups may enqueue a batch's callbacks at its place, R34).
_BACK_IN_PLACE = frozenset({"defer", "release", "interrupt", "requeue"})


class SentGroup:
    """The attempts one statement settled (``pg_sql.turn_statement``): the ids it
    returns are those whose fence held, read once after the commit (or handed over
    by the claim that read that statement's rows, ``found``)."""

    __slots__ = ("cursor", "_held")

    def __init__(self) -> None:
        self.cursor: Any = None
        self._held: set[int] | None = None

    def found(self, ids: set[int]) -> None:
        self._held = ids

    def held(self, job_id: int) -> bool:
        if self._held is None:
            self._held = {row[1] for row in self.cursor.fetchall()}
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


#: A reclaim reading more leases than this reads the statistics of ``jobs`` again before
#: it settles any (``_fresh_statistics``): below it the plan's cost stays under the
#: ANALYZE's.
MANY_RECLAIMED = 500
#: The longest that reading lasts, ms (a cold table of millions of rows).
ANALYZE_MOST = 5_000


def _fresh_statistics(conn: Any) -> None:
    """ANALYZE the two columns a reclaim's settle is planned by, in its transaction. Right
    after a pool claimed many rows, the statistics of ``lease_owner`` (its share of NULLs,
    its distinct values) describe the table before that claim, and the settle was planned
    as a walk of the owner's rows with a scan of every settle for each: quadratic (a
    reclaim of 8 000 rows took 20 s). The sample is bounded whatever the table's size. It
    is only a help: behind a savepoint, under bounds of its own (a lock waited for past
    the second after which the server cancels an autovacuum in the way, and no longer
    than ``ANALYZE_MOST``), anything it meets but a broken connection leaves the reclaim
    to go on with the statistics there are."""
    limits_before = conn.execute("SELECT current_setting('lock_timeout'), "
                                 "current_setting('statement_timeout')").fetchone()
    try:
        with conn.transaction():
            conn.execute("SELECT set_config('lock_timeout', '1500ms', true), "
                         "set_config('statement_timeout', %s, true)", (f"{ANALYZE_MOST}ms",))
            conn.execute("ANALYZE jobs (lease_owner, status)")
            # R26's bounds for the rest of the transaction, as they were (behind a
            # pooler, set for this transaction alone: DEFAULT would be the server's).
            conn.execute("SELECT set_config('lock_timeout', %s, true), "
                         "set_config('statement_timeout', %s, true)", limits_before)
    except psycopg.Error:
        if conn.closed or conn.broken:
            raise
        # The savepoint's end put the bounds back.


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
        self._policies: dict[str, Policy] = {}
        #: R63: the claim's parameters for one name's rows (a chunk's rest), by name.
        self._name_claims: dict[str, dict[str, Any]] = {}
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
        #: R62: per queue, the last row claimed (priority, line_at, id), and when
        #: (monotonic) a claim last walked it from the front.
        self._places: dict[str, tuple[int, float, int]] = {}
        self._front_at: dict[str, float] = {}
        #: R66: the names of the statements prepared on this connection for turns in
        #: flight, by text (a new connection prepares again).
        self._prepared: dict[str, bytes] = {}
        _ = self._connection()

    def serve(self, owner: str, names: Sequence[str], policies: dict[str, Policy]) -> None:
        self.owner = owner
        self._names = tuple(names)
        self._claim_params = pg_sql.claim_params(names, policies, DEFAULT_POLICY)
        self._policies = policies
        self._name_claims = {}

    # -- R62: the claim from a place in line -----------------------------------------------------

    def place(self, queue: str) -> tuple[int, float, int] | None:
        """Where in ``queue``'s line (priority, place, id) the next claim starts: after
        the last row this claimer took there, or at the front (None) when it has no
        such row or walked from the front ``FRONT_EVERY`` seconds ago."""
        place = self._places.get(queue)
        if place is None or time.monotonic() - self._front_at.get(queue, -math.inf) >= FRONT_EVERY:
            return None
        return place

    def claimed_from(self, queue: str, rows: list[tuple], want: int,
                     after: tuple[int, float, int] | None, keep: bool = True) -> None:
        """Remember where a claim of ``want`` rows that took ``rows`` ended. One that
        came back short found no more due rows after its start: the next starts at the
        front (where rows put back at their old place wait); so does the next after a
        claim that could not see a row its own turn put ahead (not ``keep``)."""
        if after is None:
            self._front_at[queue] = time.monotonic()
        if not keep:
            self._places.clear()
            return
        if not rows or len(rows) < want:
            self._places.pop(queue, None)
            return
        last = max(rows, key=lambda row: (-row[_PRIORITY], row[_LINE_AT], row[0]))
        self._places[queue] = (last[_PRIORITY], last[_LINE_AT], last[0])

    def limited_claim(self, plan: LimitPlan) -> LimitedClaim:
        return pg_limited_claim(plan, self._names)

    # -- the connection and the server's clock ------------------------------------------------

    def _connection(self) -> Any:
        conn = self._conn
        if conn is not None and not (conn.closed or conn.broken) and (
                conn.pgconn.transaction_status != psycopg.pq.TransactionStatus.IDLE):
            # Every use of the claimer's connection ends its transaction (R66: a turn
            # in flight's explicit one included); one left open or failed would fail
            # every turn after it, so it is never built on.
            log.warning("the claimer's connection was left inside a transaction: "
                        "rolled back")
            _leave_transaction(conn)  # or closed, when it cannot be
        if conn is None or conn.closed or conn.broken:
            conn = self._conn = open_connection(self.target, application="jobpool-supervisor",
                                                settings=CLAIMER_OPTIONS)
            self._clock_read_at = -math.inf  # a new connection: read the server's clock again
            self._prepared = {}
        return conn

    def send_later(self, conn: Any, text: str, values: Sequence[Any]) -> StatementInFlight:
        """R66: ``text`` (numbered) with ``values`` sent on ``conn`` without waiting for
        its answer, prepared first if this connection has not yet."""
        name = self._prepared.get(text)
        if name is None:
            name = self._prepared[text] = prepare(conn, text)
        return StatementInFlight(conn, name, values)

    def begin_later(self, conn: Any, statements: Sequence[tuple[str, Sequence[Any]]]
                    ) -> TransactionInFlight:
        """R66: ``BEGIN`` and ``statements`` sent on ``conn`` in one pipeline without
        waiting for their answers, the transaction left open (``TransactionInFlight``).
        Each is ``(numbered text, values)``, prepared first if this connection has not
        yet."""
        sent: list[tuple[bytes, Sequence[Any]]] = []
        for text, values in statements:
            name = self._prepared.get(text)
            if name is None:
                name = self._prepared[text] = prepare(conn, text)
            sent.append((name, values))
        return TransactionInFlight(conn, sent)

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
        """The body's statements on the autocommit connection: its settles and first
        claim as one statement sent with its Sync (one round trip, ``PgTurn.claim``);
        anything else in a pipeline, the implicit transaction its Sync ends (``PgTurn``).
        A turn after a dropped connection
        (or a turn that failed after a commit) first gives back the claims in doubt
        and reads which settles in doubt committed: in the same implicit transaction
        as its own statement."""
        flight = self.begin_turn(now, held, lambda turn: None, overlap=False)
        assert flight is not None
        return self.finish_turn(flight, lambda turn, _sent: body(turn))

    @property
    def claims_in_doubt(self) -> bool:
        """R26: a turn's claims may have committed with its reply lost, and the rows
        they took are running under this pool's owner with nobody to run them until a
        turn gives them back (``RELEASE_IN_DOUBT``): a stopping pool must take one."""
        return self._in_doubt

    def begin_turn(self, now: float, held: Mapping[int, Lease],
                   send: Callable[[Any], Any], overlap: bool = True) -> PgFlight | None:
        """R66: the first part of a turn: ``send(turn)`` puts its settles and claim on
        the ``PgTurn`` (``PgTurn.claim_later``), and with ``overlap`` its one statement
        goes out without waiting for the answer; ``finish_turn`` reads it. None when
        this turn cannot be in flight (claims or settles in doubt to look up first, a
        pooler between: the caller runs ``turn``), before anything is sent."""
        if overlap and (self._in_doubt or self._doubted or self.target.pooler):
            return None
        released: Any = None
        committed: Any = None
        begun: list[PgTurn] = []
        with self._turn_failures(held, begun):
            conn = self._connection()
            turn = PgTurn(self, conn, self._server_now(conn), held, piped=True, late=overlap)
            begun.append(turn)
            try:
                if self._in_doubt:
                    released = turn.queue(pg_sql.RELEASE_IN_DOUBT, _held(self.owner, held))
                    turn.from_front()  # R62: what it gives back is ahead of any place
                if self._doubted:
                    committed = turn.queue(pg_sql.SETTLED_IN_DOUBT, self._doubt_params())
                sent = send(turn)
                if overlap:
                    turn.send_pending(last=True)
            except BaseException as exc:
                turn.abandon(exc)
                raise
        return PgFlight(turn, held, sent, released, committed)

    def finish_turn(self, flight: PgFlight,
                    body: Callable[[Any, Any], tuple[list[Answer], list[Answer]]]
                    ) -> tuple[list[Settled], list[Settled]]:
        """The rest of the turn ``begin_turn`` sent: ``body(turn, what send returned)``
        reads the answer (waiting for it if it has not come) and sends what follows
        from it, then the answers are read after the commit that carries them. A
        failure is R26's: nothing applied, or (the connection dropped with the
        statement in flight, or after a Sync) in doubt, looked up by the next turn."""
        turn, held = flight.turn, flight.held
        with self._turn_failures(held, [turn]):
            try:
                turn.landed()
                sent, expiring = body(turn, flight.sent)
                turn.send_pending(last=True)
                turn.sync()
            except BaseException as exc:
                # What the last Sync has not committed is not applied.
                turn.abandon(exc)
                raise
            settled = settled_of(sent)
            if flight.committed is not None:
                settled = self._settled_before(settled, flight.committed.fetchall())
            expired = settled_of(expiring)
            gave_back = flight.released.fetchall() if flight.released is not None else []
        if gave_back:
            log.warning("gave back %d claim(s) left in doubt by a dropped connection: jobs %s",
                        len(gave_back), ", ".join(str(r[0]) for r in gave_back))
        self._in_doubt = False
        self._doubted.clear()
        return settled, expired

    @contextlib.contextmanager
    def _turn_failures(self, held: Mapping[int, Lease], turn: list[PgTurn]) -> Iterator[None]:
        """A part of a turn (``turn``: its ``PgTurn`` once made): a failure in it is a
        ``StoreError``, after which nothing was applied, or (the connection dropped,
        or a Sync of this turn went through) perhaps some or all of it: the leases
        stay as they were until a turn commits (``_after_failure``)."""
        try:
            yield
        except psycopg.Error as exc:
            error = self._failed("turn", exc)
            self._after_failure(turn[0] if turn else None, held)
            raise error from exc
        except BaseException:
            self._after_failure(turn[0] if turn else None, held)
            raise

    def _after_failure(self, turn: PgTurn | None, held: Mapping[int, Lease]) -> None:
        """R26: a turn that failed when its connection dropped, or after one of its
        Syncs committed, may have applied part or all of what it sent: its settles are
        in doubt, and so are its claims, which the engine will not hold. On a
        connection still up they are given back at once (``RELEASE_IN_DOUBT``), so a
        failed turn leaves no lease behind; else the next turn does it."""
        # R62: claims given back go back to their place in line, ahead of this one's.
        self._places.clear()
        if turn is None or not (turn.committed or self._conn is None):
            return
        self._in_doubt = True
        self._doubt(turn.decided, turn.now)
        if self._conn is None:
            return
        try:
            with self._conn.transaction():
                scope(self._conn, self.target)
                self._conn.execute(pg_sql.RELEASE_IN_DOUBT, _held(self.owner, held)).fetchall()
            self._in_doubt = False
        except psycopg.Error as exc:
            self._failed("giving back claims in doubt", exc)

    def transaction(self, what: str, now: float,
                    body: Callable[[Any], list[Answer]]) -> list[Settled]:
        """``body`` in one transaction on the server's clock (a reclaim, R23, R24)."""
        def run(conn: Any, server_now: float) -> list[Answer]:
            turn = PgTurn(self, conn, server_now, None)
            answers = body(turn)
            turn.send_pending()
            return answers
        return settled_of(self._run(what, run))

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


class PgFlight(NamedTuple):
    """R66: a turn ``PgDriver.begin_turn`` sent: its ``PgTurn`` (``statement``: the one
    statement in flight, None once nothing waits on the server) and what the turn's
    first part returned."""

    turn: PgTurn
    held: Mapping[int, Lease]
    sent: Any
    released: Any
    committed: Any

    def fileno(self) -> int | None:
        """The socket its answer comes on; None: nothing in flight (read it now)."""
        statement = self.turn.statement
        return None if statement is None else statement.fileno()

    def ready(self) -> bool:
        """Whether its answer is here (reads what came, without blocking)."""
        statement = self.turn.statement
        return statement is None or statement.ready()

    def holds_locks(self) -> bool:
        """Whether what is in flight is a transaction left open until the turn lands
        (a limited claim's, ``TransactionInFlight``): it holds the locks of what it
        settled; an autocommit statement holds them only while the server runs it."""
        statement = self.turn.statement
        return statement is not None and not statement.commits


class PgTurn:
    """One turn's statements on the driver's connection (the ``Turn`` protocol), their
    answers read after the commit. Settles wait in ``_pending`` until a claim takes
    them along (``pg_sql.turn_statement``) or the turn ends (``send_pending``).

    In a turn (``piped``) a statement that must share a transaction with what follows
    it (a limited claim's page, a refused row's settle, the in-doubt release) opens a
    pipeline on the autocommit connection: what it holds is one implicit transaction,
    committed by the one Sync that closes it (the next claim's, or the turn's end). A
    claim with no pipeline open is sent on its own, with its Sync: one round trip. In
    a ``transaction`` (a reclaim) every statement runs as it is sent, inside it."""

    __slots__ = ("driver", "conn", "now", "_held", "decided", "committed", "_piped",
                 "_pipeline", "_pending", "_pending_ids", "_group", "_front", "_late", "statement",
                 "_explicit", "_sent_first")

    def __init__(self, driver: PgDriver, conn: Any, now: float,
                 held: Mapping[int, Lease] | None, piped: bool = False,
                 late: bool = False) -> None:
        self.driver = driver
        self.conn = conn
        self.now = now
        self._held = held
        #: R26: the settles of the turn's outcomes (attempts the engine held leases
        #: for), remembered should the connection drop before the commit's reply.
        self.decided: list[Fenced] = []
        #: One of the turn's Syncs went through: part of it is committed.
        self.committed = False
        self._piped = piped
        #: The open pipeline's context (None: none open).
        self._pipeline: Any = None
        self._pending: list[tuple[Fenced, dict]] = []
        #: The job ids in ``_pending`` (an attempt met twice goes in a later statement):
        #: a set, as a reclaim of thousands of rows asked it once a row.
        self._pending_ids: set[int] = set()
        self._group = SentGroup()
        #: R62: a settle of this turn put a row ahead of the claimer's place in line:
        #: its claims walk from the front, and so does the next turn's.
        self._front = False
        #: R66: the turn's first statement may go without waiting for its answer
        #: (``PgDriver.begin_turn``); ``statement`` is it while it is in flight.
        self._late = late
        self.statement: StatementInFlight | TransactionInFlight | None = None
        #: R66: a transaction sent in flight (``limited_later``) is open on the
        #: connection: what follows runs in it, and ``sync`` commits it.
        self._explicit = False
        #: R66: the limited claim's first statement that went with it, and its answer,
        #: for the claim's ``limited_source`` (the first one of the turn).
        self._sent_first: LimitedLater | None = None

    def from_front(self) -> None:
        """R62: this turn's claims, and the next turn's, walk from the front."""
        self._front = True
        self.driver.claimed_from("", [], 0, None, keep=False)

    def queue(self, query: str, params: Any = None, raw: bool = False) -> Any:
        """Send ``query`` in the turn's open pipeline (opened here if none is, and
        scoped first behind a pooler): it commits with the pipeline's Sync. ``raw``: a
        ``pg_sql.numbered`` text and its values in order."""
        self._open()
        return self._execute(query, params, raw)

    def _execute(self, query: str, params: Any, raw: bool) -> Any:
        cursor = psycopg.RawCursor(self.conn) if raw else self.conn.cursor()
        return cursor.execute(query, params)

    def _open(self) -> None:
        self.landed()
        self._late = False  # a pipeline opened: the turn's statements run as sent
        if self._piped and self._pipeline is None:
            self._pipeline = self.conn.pipeline()
            self._pipeline.__enter__()
            scope(self.conn, self.driver.target)  # behind a pooler: in this transaction

    def _alone(self, query: str, params: Any, raw: bool = False) -> Any:
        """Send ``query`` with its Sync, and what the open pipeline holds before it:
        one round trip, committed as it returns (behind a pooler, in a pipeline of its
        own after its scope: each transaction there sets its schema). R66: the first
        such statement of a turn begun to be in flight goes without waiting
        (``statement``); its answer is read by ``landed``."""
        self.landed()
        if self._pipeline is None and not self._explicit and (
                not self._piped or not self.driver.target.pooler):
            if self._late:
                self._late = False
                if not raw:
                    query, names = _numbered(query)
                    params = [params[name] for name in names]
                self.statement = self.driver.send_later(self.conn, query, params)
                return self.statement
            cursor = self._execute(query, params, raw)
            self.committed = self._piped
            return cursor
        cursor = self.queue(query, params, raw)
        self.sync()
        return cursor

    def landed(self) -> None:
        """R66: wait for the answer of the statement in flight, if one is: the turn
        committed with it. Anything else the turn sends goes after it."""
        statement, self.statement = self.statement, None
        if statement is not None:
            self._late = False
            statement.rows()  # raises the error that ended it
            self.committed = self.committed or statement.commits

    def sync(self) -> None:
        """Close the open pipeline: its Sync commits the implicit transaction it holds
        (R26a: waiting for its WAL flush when the store is durable), one round trip.
        A transaction sent in flight (``limited_later``) ends there with its COMMIT."""
        if self._explicit:
            self._open()
            self.conn.execute("COMMIT")
        if self._pipeline is not None:
            pipeline, self._pipeline = self._pipeline, None
            pipeline.__exit__(None, None, None)  # leaves pipeline mode, failed or not
            self.committed = True
        # Only once its COMMIT went through: a failure before leaves it for ``abandon``.
        self._explicit = False

    def abandon(self, exc: BaseException) -> None:
        """Undo what the open pipeline holds (a body that failed mid-turn): a BEGIN
        makes its implicit transaction an explicit one, rolled back; nothing of it is
        applied."""
        if self.statement is not None:
            try:
                self.landed()  # R66: what was in flight may have committed
            except psycopg.Error:
                pass  # it did not, or the connection is gone: in doubt (R26)
        pipeline, self._pipeline = self._pipeline, None
        conn = self.conn
        if pipeline is not None:
            if not (conn.closed or conn.broken) and (
                    conn.pgconn.pipeline_status != psycopg.pq.PipelineStatus.ABORTED):
                try:
                    conn.execute("BEGIN")
                    conn.execute("ROLLBACK")
                except psycopg.Error:
                    pass  # the connection is gone: nothing of it committed
            pipeline.__exit__(type(exc), exc, exc.__traceback__)
        # R66: the transaction sent in flight, open or failed (its COMMIT refused), or
        # any other a failure left the connection in: rolled back, never built on.
        self._explicit = False
        _leave_transaction(conn)

    def crash_causes(self, job_id: int) -> list[str]:
        """R19: a crashed attempt's earlier causes. In a turn begun to be in flight
        (R66) they are read before it is sent, a statement of their own on the
        autocommit connection, so the turn stays one statement: only this claimer's
        settle writes the lines of an attempt it holds. Else in the turn's pipeline
        (behind a pooler its transaction is scoped first)."""
        if self._late and self._pipeline is None:
            answer = self.conn.execute(pg_sql.CRASH_CAUSES, {"id": job_id})
        else:
            answer = self.queue(pg_sql.CRASH_CAUSES, {"id": job_id})
        return [r[0] or "?" for r in answer.fetchall()]

    def _claim_params(self, queue: str, want: int) -> dict[str, Any]:
        driver = self.driver
        return dict(driver._claim_params, owner=driver.owner, now=self.now, slack=LEASE_SLACK,
                    queue=queue, limit=want)

    def claim(self, queue: str, want: int, front: bool = False) -> list[tuple]:
        """The turn's settles so far and this claim as one statement, sent with its
        Sync: one round trip. A job it put back in line due now (a retry without
        backoff, a defer or reschedule of no delay) or a chain's next step it enqueued
        (R12) is not seen by its own claim (one snapshot): a second claim takes it, as
        a turn on SQLite would. (A batch's callbacks, enqueued by a trigger, wake the
        pools by their notification, R34, R11a.)"""
        return self.claim_later(queue, want, front).found()

    def claim_later(self, queue: str, want: int, front: bool = False) -> LateClaim:
        """``claim``, sent: its rows read by ``LateClaim.found`` (R66: in a turn begun
        to be in flight, the statement goes without waiting for them)."""
        params = self._claim_params(queue, want)
        driver = self.driver
        if self._pending and self._pending[0][1]["owner"] != driver.owner:
            self.send_pending()  # a reclaim's settles are fenced by another owner
        again = any(_due_now(item) for item, _params in self._pending)
        # R62: from this claimer's place in line, unless this turn put a row back
        # where it was, or let a trigger enqueue one at its batch's place (ahead of it).
        front = front or self._front
        after = None if front else driver.place(queue)
        if after is not None:
            params.update(after_priority=after[0], after_line=after[1], after_id=after[2])
        if not self._pending:
            answer = self._alone(pg_sql.CLAIM_AFTER if after else pg_sql.CLAIM, params)
            return LateClaim(self, queue, want, after, front, False, answer, None)
        cursor, group = self._send(params, after=after is not None)
        return LateClaim(self, queue, want, after, front, again, cursor, group)

    def claim_name(self, queue: str, name: str, want: int) -> list[tuple]:
        """R63: the claim of ``name``'s rows alone, sent with its Sync after the
        settles still pending (one round trip more, once per chunk)."""
        driver = self.driver
        names = driver._name_claims.get(name)
        if names is None:
            names = driver._name_claims[name] = pg_sql.claim_params(
                (name,), driver._policies, DEFAULT_POLICY)
        self.send_pending()
        return self._alone(pg_sql.CLAIM, dict(self._claim_params(queue, want), **names)
                           ).fetchall()

    def extend_leases(self, waits: Sequence[tuple[int, int, float]]) -> None:
        # In the open pipeline: committed with the turn's last Sync.
        self.queue(pg_sql.EXTEND_LEASES, {"owner": self.driver.owner,
                                          "ids": [w[0] for w in waits],
                                          "attempts": [w[1] for w in waits],
                                          "extra": [float(w[2]) for w in waits]})

    def send_pending(self, last: bool = False) -> None:
        """The settles no claim took along, as one statement: in the open pipeline,
        committed by its Sync (by ``transaction``'s commit in one); the ``last`` of a
        turn with its own Sync."""
        if self._pending:
            self._send(None, last)

    def _send(self, claim: dict[str, Any] | None, last: bool = False,
              after: bool = False) -> tuple[Any, SentGroup]:
        """Send the pending settles (and ``claim``'s parameters) as one
        ``pg_sql.turn_statement``; its answers go to their group."""
        statement, values, group = self._settle_statement(claim, after)
        cursor = (self._alone(statement, values, raw=True) if claim is not None or last
                  else self.queue(statement, values, raw=True))
        group.cursor = cursor
        return cursor, group

    def _settle_statement(self, claim: dict[str, Any] | None, after: bool
                          ) -> tuple[str, list[Any], SentGroup]:
        """The pending settles (and ``claim``'s parameters) as one numbered
        ``pg_sql.turn_statement``, its values, and the group their answers go to."""
        pending, group = self._pending, self._group
        self._pending, self._group = [], SentGroup()
        self._pending_ids = set()
        # R61: successes travel in arrays of their own, with what a success needs.
        done = [item_params for item, item_params in pending if item.decision.statement == "done"]
        failed = [(item, item_params) for item, item_params in pending
                  if item.decision.statement != "done"]
        params: dict[str, Any] = {}
        if done:
            params.update((name, [item_params[key] for item_params in done])
                          for name, key in _DONE_ARRAYS)
        if failed:
            params.update((name, [item_params[key] for _item, item_params in failed])
                          for name, key in _ARRAYS)
            params["kinds"] = [item.decision.statement for item, _params in failed]
        kinds = tuple(sorted({item.decision.statement for item, _params in pending}))
        # Every pending settle is fenced by one owner (``settle``).
        params.update(claim or {}, owner=pending[0][1]["owner"], now=self.now)
        statement, names = pg_sql.turn_statement_numbered(kinds, claim is not None, after)
        return statement, [params[name] for name in names], group

    def limited_source(self, limited: LimitedClaim) -> SqlLimitedSource:
        """The groups' locks (FOR UPDATE SKIP LOCKED) are taken through it, in this
        turn's implicit transaction, which ends at the pipeline's Sync (or the
        transaction ``limited_later`` sent, which its COMMIT ends): a source per claim.
        The turn's settles go first, so the groups' counts see them (R35). The turn's
        first limited claim has its first statement answered by what ``limited_later``
        sent."""
        self.send_pending()
        self._open()
        query = rows_of(self.conn)
        sent, self._sent_first = self._sent_first, None
        if sent is not None and sent.first is not None:
            query = answered_first(query, sent.first, sent.answer)
        return SqlLimitedSource(pg_sql, query, limited)

    def limited_later(self, limited: LimitedClaim, queue: str, want: int) -> LimitedLater:
        """R66: a limited claim's first part, sent: in a turn begun to be in flight, the
        turn's settles and the first statement ``plan_claim`` runs (the groups' page,
        a queue's count or a probe, ``first_statement``) go out in one pipeline that
        opens a transaction (``TransactionInFlight``), and the turn returns; the rest of
        the claim runs in that transaction once the answer is read
        (``limited_source``), and its last Sync commits it. Elsewhere nothing is sent
        here."""
        first = first_statement(pg_sql, limited, queue, want, self.now)
        if not self._late or first is None or self._pipeline is not None:
            return LimitedLater(limited, None, None)
        statements: list[tuple[str, Any]] = []
        group = None
        if self._pending:
            statement, values, group = self._settle_statement(None, False)
            statements.append((statement, values))
        # Prepared once per connection, as the turn statement is (planning the page
        # every turn would cost the server more than running it).
        text, names = _numbered(first[0])
        statements.append((text, [first[1][name] for name in names]))
        self._late = False
        flight = self.statement = self.driver.begin_later(self.conn, statements)
        self._explicit = True
        if group is not None:
            group.cursor = flight.answer(0)
        self._sent_first = LimitedLater(limited, first, flight.answer(len(statements) - 1))
        return self._sent_first

    def claim_chosen(self, limited: LimitedClaim, picked: Picked) -> list[tuple]:
        return self.queue(limited.claim_ids, dict(
            self._claim_params("", 0), ids=picked.ids, caps=picked.caps)).fetchall()

    def reclaimable(self, owner: str | None) -> list[tuple]:
        """The leases a reclaim takes back; past ``MANY_RECLAIMED`` of them, the statistics
        of ``jobs`` read again before any is settled (``_fresh_statistics``), whatever
        owners they are sent by."""
        if owner is None:
            found = self.conn.execute(pg_sql.RECLAIMABLE_EXPIRED, {"now": self.now}).fetchall()
        else:
            found = self.conn.execute(pg_sql.RECLAIMABLE_OWNER,
                                      {"owner": owner, "now": self.now}).fetchall()
        if len(found) > MANY_RECLAIMED:
            _fresh_statistics(self.conn)
        return found

    def settle_malformed(self, bad: row_codec.Malformed, owner: Any) -> SentMalformed:
        """R44: settle dead a row the codec refused (``pg_sql.SETTLE_MALFORMED``, its
        answer read after the commit, as a settle's is)."""
        return SentMalformed(bad, self.queue(
            pg_sql.SETTLE_MALFORMED, row_codec.malformed_params(bad, owner, self.now)))

    def settle(self, items: Sequence[Settled | Fenced]) -> list[Answer]:
        """Take a batch of settles, answers in its order: each is the fenced change
        (for a finished job: the row's move, a chain's next step) and its line in the
        attempt log (R19a), sent with the turn's claim as one statement
        (``pg_sql.turn_statement``), or at the turn's end. An attempt met twice goes
        in a statement after the first's (one statement writes a row once), and so
        does a settle fenced by another owner than those before it (a reclaim's)."""
        held = self._held
        sent: list[Answer] = []
        for item in items:
            if isinstance(item, Settled):
                sent.append(item)
                continue
            if held is not None and held.get(item.lease.job_id) is item.lease:
                self.decided.append(item)
            params = self._params(item)
            decision = item.decision
            if decision.statement in _BACK_IN_PLACE or _may_enqueue(item):
                self.from_front()
            if self._pending and (params["owner"] != self._pending[0][1]["owner"]
                                  or item.lease.job_id in self._pending_ids):
                self.send_pending()
            self._pending.append((item, params))
            self._pending_ids.add(item.lease.job_id)
            sent.append(SentSettle(item.lease, item.decision, self._group))
        return sent

    def _params(self, item: Fenced) -> dict[str, Any]:
        """The parameters of one attempt's settle and of its line in the log (a
        success's: only what its arrays carry, ``_DONE_ARRAYS``)."""
        lease, outcome, decision, owner, log_as = item
        now = self.now
        result = outcome.result
        if decision.statement == "done":
            return {"id": lease.job_id, "attempt": lease.attempt, "owner": owner,
                    "result": result.encode() if isinstance(result, str) else result,
                    "pid": outcome.pid, "peak_rss": outcome.peak_rss, "cpu_s": outcome.cpu_s,
                    "strays": outcome.strays}
        logged = rows.attempt_params(lease, outcome, owner, now, log_as)
        return dict(logged, log_error=logged["error"], error=decision.reason,
                    result=result.encode() if isinstance(result, str) else result,
                    crashes=decision.crashes, run_at=now + decision.delay)


class LimitedLater(NamedTuple):
    """A limited claim's first part, sent by ``PgTurn.limited_later`` (``first``: the
    statement sent and ``answer`` its answer, which the turn's ``limited_source``
    takes; None: nothing was sent); ``limited``: the claim it was sent for (a
    heartbeat may read new limits while it is in flight: the engine claims under
    these)."""

    limited: LimitedClaim
    first: tuple[str, dict] | None
    answer: Any


class LateClaim(NamedTuple):
    """A claim sent by ``PgTurn.claim_later``; ``found`` reads its rows."""

    turn: PgTurn
    queue: str
    want: int
    after: tuple[int, float, int] | None
    front: bool
    again: bool
    answer: Any   # a cursor, or a StatementInFlight
    group: SentGroup | None

    @property
    def limited(self) -> None:
        """An ordinary claim: sent under no limits (``LimitedLater.limited``)."""
        return None

    def found(self) -> list[tuple]:
        """The claimed rows (the settles that went with them told their group which
        fences held); R62's place noted; a second claim when the first came back short
        and the turn put a row back due now."""
        turn, want = self.turn, self.want
        if self.answer is turn.statement:
            turn.landed()
        rows_read = self.answer.fetchall()
        if self.group is None:
            found = rows_read
        else:
            found = []
            held: set[int] = set()
            for row in rows_read:
                if row[0]:
                    found.append(row[1:])
                else:
                    held.add(row[1])
            self.group.found(held)
        turn.driver.claimed_from(self.queue, found, want, self.after, keep=not self.front)
        if self.again and len(found) < want:
            found += turn.claim(self.queue, want - len(found), front=True)
        return found


def _leave_transaction(conn: Any) -> None:
    """Roll back what ``conn`` is inside of, if anything (a failed transaction
    included), and leave libpq's pipeline mode if something left it on; a connection
    that cannot is closed (the next use opens another: R26's path)."""
    if conn.closed or conn.broken:
        return
    pgconn = conn.pgconn
    try:
        if pgconn.pipeline_status != psycopg.pq.PipelineStatus.OFF:
            pgconn.exit_pipeline_mode()
        if pgconn.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            conn.execute("ROLLBACK")
    except psycopg.Error:
        conn.close()


#: R66: a named statement as the numbered text sent to be prepared, and its names.
_numbered = functools.lru_cache(maxsize=None)(pg_sql.numbered)


def _due_now(item: Fenced) -> bool:
    """Whether a settle leaves a row its own statement's claim cannot see and that is
    due at once: the job back in line now, a chain's next step (R12), or a batch's
    callback its member's end enqueued, whether the member is done or dead (R34; a
    claimed row's ``follow_ups`` flag on PostgreSQL says it has a chain or a batch).
    A drain, which no notification wakes, took no callback after a dead last member."""
    decision = item.decision
    return (decision.status == "ready" and decision.delay <= 0) or _may_enqueue(item)


def _may_enqueue(item: Fenced) -> bool:
    """Whether the settle ends a job that may enqueue a row at its place in line: a
    chain's next step, a batch's callback (the flag does not tell which, so a dead chain
    step, which enqueues nothing, is counted too)."""
    return item.decision.status in ("done", "dead") and bool(item.lease.follow_ups)


#: Where a claimed row (``row_codec.CLAIM_COLUMNS``) has its priority and place in line.
_PRIORITY, _LINE_AT = ([name for name, _rule in row_codec.CLAIM_COLUMNS].index(column)
                       for column in ("priority", "line_at"))

#: A turn statement's arrays (``pg_sql.turn_statement``), from each attempt's parameters.
_ARRAYS = (("ids", "id"), ("attempts", "attempt"), ("run_ats", "run_at"), ("errors", "error"),
           ("crashes", "crashes"), ("results", "result"), ("pids", "pid"),
           ("began", "started_at"), ("outcomes", "outcome"), ("log_errors", "log_error"),
           ("exit_statuses", "exit_status"), ("peak_rsses", "peak_rss"), ("cpus", "cpu_s"),
           ("strays", "strays"))
#: A success's arrays (R61: ``pg_sql._INPUT_DONE``).
_DONE_ARRAYS = (("done_ids", "id"), ("done_attempts", "attempt"), ("done_results", "result"),
                ("done_pids", "pid"), ("done_peak_rsses", "peak_rss"), ("done_cpus", "cpu_s"),
                ("done_strays", "strays"))


def _held(owner: str, held: Mapping[int, Lease]) -> dict[str, Any]:
    """``RELEASE_IN_DOUBT``'s parameters: the leases the engine holds, by job and attempt."""
    return {"owner": owner, "held": list(held),
            "held_attempts": [lease.attempt for lease in held.values()]}
