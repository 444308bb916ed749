"""One statement sent on a psycopg connection without waiting for its answer (R66): the
turn a PostgreSQL pool has in flight while its loop goes on with its children.

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


def prepare(conn: Any, text: str) -> bytes:
    """Prepare ``text`` (numbered placeholders, every value cast in the text) on
    ``conn`` under a name of its own, and return the name: one round trip, once per
    statement text per connection (the caller keeps the names)."""
    name = b"jobpool_" + hashlib.blake2b(text.encode(), digest_size=8).hexdigest().encode()
    result = conn.pgconn.prepare(name, text.encode())
    if result.status != pq.ExecStatus.COMMAND_OK:
        raise psycopg.errors.error_from_result(result, encoding=conn.info.encoding)
    return name
