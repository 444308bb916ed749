"""A store connection that another thread may close while its own thread uses it (R42).

A store keeps one connection per thread (``store/connections.py``), and ``close()``
(or the release before a fork, R43) closes every thread's, from the thread that
calls it. Python's ``sqlite3`` does not allow for that: a statement steps with the
interpreter's lock released, and once it returns the cursor reads the connection's
database handle again (its error, its change count). If another thread closed the
connection meanwhile, that handle is gone and the process dies (a segmentation
fault, not an exception). SQLite itself is safe here (it serialises calls on one
connection and defers a close until its statements are finalised); the window is in
the Python module.

So every call that may step a statement or end a transaction holds the connection's
``guard`` (a re-entrant lock), and so does ``close``: a close waits until the
statement being stepped in another thread has returned, and that thread's next call
on the closed connection is an ordinary ``sqlite3.ProgrammingError`` ("Cannot
operate on a closed database"). Its owner thread never waits on anyone else: only a
close (another thread's) takes the same lock.
"""
from __future__ import annotations

import sqlite3
import threading
from typing import Any


class GuardedCursor(sqlite3.Cursor):
    """A cursor whose statements step under its connection's guard (made by
    ``GuardedConnection.cursor``, which hands it the guard)."""

    guard: threading.RLock

    def execute(self, *args: Any, **kwargs: Any) -> Any:
        with self.guard:
            return super().execute(*args, **kwargs)

    def executemany(self, *args: Any, **kwargs: Any) -> Any:
        with self.guard:
            return super().executemany(*args, **kwargs)

    def executescript(self, *args: Any, **kwargs: Any) -> Any:
        with self.guard:
            return super().executescript(*args, **kwargs)

    def fetchone(self) -> Any:
        with self.guard:
            return super().fetchone()

    def fetchmany(self, *args: Any, **kwargs: Any) -> list[Any]:
        with self.guard:
            return super().fetchmany(*args, **kwargs)

    def fetchall(self) -> list[Any]:
        with self.guard:
            return super().fetchall()

    def __next__(self) -> Any:
        with self.guard:
            return super().__next__()

    def close(self) -> None:
        with self.guard:
            super().close()


_new_cursor = sqlite3.Connection.cursor
_cursor_execute = sqlite3.Cursor.execute
_cursor_fetchone = sqlite3.Cursor.fetchone


class GuardedConnection(sqlite3.Connection):
    """``sqlite3.Connection`` with a ``guard`` held by every call that steps a
    statement or ends a transaction, and by ``close`` (see the module docstring).
    Pass as ``factory=`` to ``sqlite3.connect``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.guard = threading.RLock()
        #: The cursor ``run_one`` keeps (made at its first use, dropped by ``close``).
        self._one_cursor: sqlite3.Cursor | None = None

    def cursor(self, factory: Any = GuardedCursor) -> Any:
        cursor = super().cursor(factory)
        cursor.guard = self.guard
        return cursor

    # The module's own ``execute`` makes a plain cursor (not through ``cursor``):
    # these make a guarded one, as its shortcut would. ``execute`` is on every
    # enqueue's path several times: one Python frame, the rest the module's own calls.
    def execute(self, sql: str, parameters: Any = ()) -> Any:
        cursor = _new_cursor(self, GuardedCursor)
        cursor.guard = guard = self.guard
        with guard:
            return _cursor_execute(cursor, sql, parameters)

    def run_one(self, sql: str, parameters: Any = ()) -> Any:
        """Run a statement of at most one row (``BEGIN``, ``COMMIT``, an ``INSERT ...
        RETURNING`` of one row) and return that row, or None. Its cursor is kept and
        used again, so an enqueue's three statements make no cursor each. Never for a
        statement that may return more rows: the kept cursor would hold its read open
        until the next."""
        with self.guard:
            cursor = self._kept_cursor()
            _cursor_execute(cursor, sql, parameters)
            return _cursor_fetchone(cursor)

    def insert_one(self, sql: str, parameters: Any = ()) -> int | None:
        """Run an ``INSERT`` of at most one row on ``run_one``'s cursor: the new row's
        id, or None when it wrote none."""
        with self.guard:
            cursor = self._kept_cursor()
            _cursor_execute(cursor, sql, parameters)
            return cursor.lastrowid if cursor.rowcount == 1 else None

    def _kept_cursor(self) -> sqlite3.Cursor:
        """``run_one``'s cursor, made at its first use (under the guard)."""
        cursor = self._one_cursor
        if cursor is None:
            cursor = self._one_cursor = _new_cursor(self)
        return cursor

    def executemany(self, *args: Any, **kwargs: Any) -> Any:
        return self.cursor().executemany(*args, **kwargs)

    def executescript(self, *args: Any, **kwargs: Any) -> Any:
        return self.cursor().executescript(*args, **kwargs)

    def commit(self) -> None:
        with self.guard:
            super().commit()

    def rollback(self) -> None:
        with self.guard:
            super().rollback()

    def backup(self, *args: Any, **kwargs: Any) -> None:
        with self.guard:
            super().backup(*args, **kwargs)

    def __exit__(self, *exc: Any) -> Any:
        with self.guard:
            return super().__exit__(*exc)

    def close(self) -> None:
        with self.guard:
            self._one_cursor = None  # it refers to this connection: no cycle left
            super().close()


def run_one(conn: sqlite3.Connection, sql: str, parameters: Any = ()) -> Any:
    """``GuardedConnection.run_one`` on the store's own connections; on another (a
    caller's, R5) the statement's first row through a cursor of its own."""
    if type(conn) is GuardedConnection:
        return conn.run_one(sql, parameters)
    return conn.execute(sql, parameters).fetchone()


def close(conn: sqlite3.Connection) -> None:
    """Close ``conn`` by its own ``close`` (a guarded connection's waits for its
    guard; ``sqlite3.Connection.close`` called on it would not)."""
    conn.close()
