"""The compiled SQLite driver: ``SqliteDriver`` over the C connection of
``jobpool/_core.pyx``, with the claim's codec (R44) answered in C.

Only the road to SQLite is compiled; every statement, transaction and follow-up is
the pure driver's own code, so the two cannot drift. Importing this module fails
(``ImportError``) where the extension is not built, or links a libsqlite3 other than
the one Python's ``sqlite3`` loaded (R42); ``claimer.driver_class`` then takes the
pure driver.
"""
from __future__ import annotations

from jobpool import _core
from jobpool.store.sqlite.driver import SqliteDriver


class CompiledSqliteDriver(SqliteDriver):
    """The SQLite driver with prepared statements bound and stepped in C."""

    name = "compiled"
    connection = _core.Connection
    decode_claims = staticmethod(_core.decode_claims)
