"""A statement (or a transaction's first statements) sent on a psycopg connection without
waiting for the answer (R66): the turn a PostgreSQL pool has in flight while its loop
goes on with its children.

psycopg's own calls each wait for their answer: ``execute`` does, and so does a
pipeline's ``sync()`` (it reads every result up to the Sync before it returns); its
async connection would need an event loop the supervisor does not run. libpq's
asynchronous calls do what the loop needs: ``PQsendQueryPrepared`` queues the
statement and returns, ``PQflush`` hands it to the socket, and ``PQconsumeInput`` /
``PQisBusy`` read the answer as it comes, each without blocking. So the statement goes
through ``psycopg.pq`` on the connection's own ``pgconn``, its values written and its
rows read by psycopg's ``Transformer`` (as a cursor would), and the loop waits on the
connection's socket in its one ``select``.

The statement is prepared once per connection under a name of its own (a turn's text
is several kB: planning it every turn would cost the server more than running it). Its
values go as text, typed by the prepared statement (the turn statement casts every
array), so a value's Python type never has to match a type fixed at the first turn.
At most one statement is in flight on a connection, and nothing else uses that
connection until its answer has been read (``rows``).

A turn under limits needs its settles and the groups' page in the transaction its claim
commits in: ``TransactionInFlight`` sends ``BEGIN`` and those statements in one libpq
pipeline with one Sync, which leaves the transaction open for what follows.
"""
from __future__ import annotations

import hashlib
import select
from collections.abc import Sequence
from typing import Any

try:
    import psycopg
    from psycopg import pq
    from psycopg.adapt import PyFormat, Transformer
except ImportError:  # pragma: no cover - PostgresStore refused to open first
    psycopg = None  # type: ignore[assignment]

class StatementInFlight:
    """The statement prepared as ``name`` (``prepare``) with ``values``, sent on
    ``conn`` (autocommit, idle) and not yet answered. ``fileno()`` is the socket to wait on; ``ready()``
    reads what arrived without blocking; ``rows()`` returns the answer's rows (waiting
    for them if need be) or raises the ``psycopg.Error`` that ended it."""

    __slots__ = ("conn", "_pgconn", "_socket", "_result", "_error", "_rows")

    #: Its answer is its commit's (an autocommit statement: ``PgTurn.landed``).
    commits = True

    def __init__(self, conn: Any, name: bytes, values: Sequence[Any]) -> None:
        self.conn = conn
        pgconn = self._pgconn = conn.pgconn
        #: Read once: libpq closes it when the connection is lost, the loop's select
        #: still has it to let go.
        self._socket = pgconn.socket
        self._result: Any = None
        self._error: BaseException | None = None
        self._rows: list[tuple] | None = None
        tx = Transformer(conn)
        params = tx.dump_sequence(list(values), [PyFormat.TEXT] * len(values))
        try:
            pgconn.send_query_prepared(name, params, param_formats=[pq.Format.TEXT] * len(values))
            while pgconn.flush():  # what the socket did not take at once
                select.select([], [self._socket], [], 1.0)
        except psycopg.Error as exc:
            self._error = exc

    def fileno(self) -> int:
        return self._socket

    def ready(self) -> bool:
        """Read what the server sent so far, without blocking: True once the whole
        answer (or the error that ended it) is here."""
        if self._result is not None or self._error is not None:
            return True
        try:
            self._pgconn.consume_input()
            if self._pgconn.is_busy():
                return False
            self._take_results()
        except psycopg.Error as exc:
            self._error = exc
        return True

    def rows(self) -> list[tuple]:
        """The answer's rows, waiting for them if they have not come yet."""
        if self._rows is None:
            while not self.ready():
                select.select([self._socket], [], [], 1.0)
            if self._error is not None:
                raise self._error
            tx = Transformer(self.conn)
            tx.set_pgresult(self._result)
            self._rows = tx.load_rows(0, self._result.ntuples, tuple)
        return self._rows

    #: As a cursor reads them (``SentGroup``, ``LateClaim``).
    fetchall = rows

    def _take_results(self) -> None:
        """Every result up to the end of the statement's answer (an autocommit
        statement has one); an error among them is what the turn raises."""
        results = []
        while (res := self._pgconn.get_result()) is not None:
            results.append(res)
        for res in results:
            if res.status not in (pq.ExecStatus.TUPLES_OK, pq.ExecStatus.COMMAND_OK):
                raise psycopg.errors.error_from_result(res, encoding=self.conn.info.encoding)
        if not results:
            raise psycopg.OperationalError("the server sent no answer to the turn")
        self._result = results[-1]


class TransactionInFlight:
    """R66: a transaction's first statements sent on ``conn`` (autocommit, idle) in one
    pipeline and not yet answered: ``BEGIN``, each statement, one Sync. The ``BEGIN``
    makes the transaction explicit, so the Sync ends the pipeline, not the transaction:
    once the answers are read (``rows``) the connection is idle in it, and what follows
    runs in it until a ``COMMIT`` (or a ``ROLLBACK``). A limited claim's turn sends its
    settles and the groups' first read so (``PgTurn.limited_later``): the locks that
    read takes are held until the claim they decide has committed.

    Each statement is ``(name, values)``, prepared by ``prepare``. ``answer(i)`` reads
    the rows of the i-th as a cursor's ``fetchall`` would. Like
    ``StatementInFlight``: ``fileno`` to wait on, ``ready`` without blocking, ``rows``
    waiting; an error in any statement is what they raise (the statements after it
    are not run, and the transaction is left failed for the caller to roll back)."""

    #: Nothing of it is committed once it is answered (``PgTurn.landed``).
    commits = False

    __slots__ = ("conn", "_pgconn", "_socket", "_results", "_error", "_broken", "_done",
                 "_query")

    def __init__(self, conn: Any, statements: Sequence[tuple[bytes, Sequence[Any]]]) -> None:
        self.conn = conn
        pgconn = self._pgconn = conn.pgconn
        self._socket = pgconn.socket
        #: The last result of each statement, BEGIN first; None: not answered yet.
        self._results: list[Any] = [None] * (len(statements) + 1)
        self._error: BaseException | None = None
        #: The connection failed: no more answers will come.
        self._broken = False
        #: Every answer up to the Sync is read.
        self._done = False
        #: The statement whose results come next (0: the BEGIN).
        self._query = 0
        # Every value is written first: one that cannot be sent (a text holding a NUL)
        # fails here, before anything is sent or libpq's mode changes.
        tx = Transformer(conn)
        dumped = [(name, tx.dump_sequence(list(values), [PyFormat.TEXT] * len(values)))
                  for name, values in statements]
        try:
            pgconn.enter_pipeline_mode()
            pgconn.send_query_params(b"BEGIN", None)
            for name, params in dumped:
                pgconn.send_query_prepared(name, params,
                                           param_formats=[pq.Format.TEXT] * len(params))
            pgconn.pipeline_sync()
            while pgconn.flush():  # what the socket did not take at once
                select.select([], [self._socket], [], 1.0)
        except psycopg.Error as exc:
            self._error = exc
            self._broken = True

    def fileno(self) -> int:
        return self._socket

    def ready(self) -> bool:
        """Read what the server sent so far, without blocking: True once every answer
        up to the Sync (or the error that ended them) is here."""
        if self._done or self._broken:
            return True
        pgconn = self._pgconn
        try:
            pgconn.consume_input()
            while not pgconn.is_busy():
                res = pgconn.get_result()
                if res is None:  # this statement's results are all read
                    self._query += 1
                    continue
                status = res.status
                if status == pq.ExecStatus.PIPELINE_SYNC:
                    self._done = True
                    break
                if status in (pq.ExecStatus.TUPLES_OK, pq.ExecStatus.COMMAND_OK):
                    self._results[self._query] = res
                elif status != pq.ExecStatus.PIPELINE_ABORTED and self._error is None:
                    self._error = psycopg.errors.error_from_result(
                        res, encoding=self.conn.info.encoding)
        except psycopg.Error as exc:  # the connection failed: nothing more will come
            self._error = self._error or exc
            self._broken = True
        if self._done:
            self._leave_pipeline()
        return self._done or self._broken

    def rows(self) -> list[tuple]:
        """Wait for every answer; raise the error that ended them, if one did."""
        while not self.ready():
            select.select([self._socket], [], [], 1.0)
        if self._error is not None:
            raise self._error
        return []

    def answer(self, index: int) -> "_Answer":
        """The ``index``-th statement's answer, read as a cursor is."""
        return _Answer(self, index + 1)

    def _rows_of(self, query: int) -> list[tuple]:
        self.rows()
        result = self._results[query]
        if result is None or result.ntuples == 0:
            return []
        tx = Transformer(self.conn)
        tx.set_pgresult(result)
        return tx.load_rows(0, result.ntuples, tuple)

    def _leave_pipeline(self) -> None:
        """Back out of libpq's pipeline mode once nothing more is owed (psycopg's own
        calls come next)."""
        pgconn = self._pgconn
        if pgconn.pipeline_status == pq.PipelineStatus.OFF:
            return
        try:
            pgconn.exit_pipeline_mode()
        except psycopg.Error as exc:
            self._error = self._error or exc


class _Answer:
    """One statement of a ``TransactionInFlight``, read as a cursor: ``fetchall``."""

    __slots__ = ("_flight", "_query")

    def __init__(self, flight: TransactionInFlight, query: int) -> None:
        self._flight = flight
        self._query = query

    def fetchall(self) -> list[tuple]:
        return self._flight._rows_of(self._query)


def prepare(conn: Any, text: str) -> bytes:
    """Prepare ``text`` (numbered placeholders, every value cast in the text) on
    ``conn`` under a name of its own, and return the name: one round trip, once per
    statement text per connection (the caller keeps the names)."""
    name = b"jobpool_" + hashlib.blake2b(text.encode(), digest_size=8).hexdigest().encode()
    result = conn.pgconn.prepare(name, text.encode())
    if result.status != pq.ExecStatus.COMMAND_OK:
        raise psycopg.errors.error_from_result(result, encoding=conn.info.encoding)
    return name
