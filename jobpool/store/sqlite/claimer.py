"""The SQLite store's claimer: the engine (``jobpool.engine.Claimer``) over the
compiled SQLite driver where it is built, else over the pure one.

``JOBPOOL_PURE=1`` takes the pure driver (for debugging, and so the suite can run
every claimer test on both); ``jobpool.core.NAME`` says which one a process uses.
"""
from __future__ import annotations

from typing import Any

from jobpool import core
from jobpool.engine import Claimer
from jobpool.store.sqlite.driver import SqliteDriver


def driver_class(kind: str | None = None) -> type[SqliteDriver]:
    """The driver of ``kind`` (``"compiled"`` or ``"pure"``; None: ``core.NAME``)."""
    if (kind or core.NAME) == "compiled":
        from jobpool.store.sqlite.compiled import CompiledSqliteDriver
        return CompiledSqliteDriver
    return SqliteDriver


class SqliteClaimer(Claimer):
    """The engine over one SQLite driver of its own (``driver``: its class; None:
    ``driver_class()``). ``opening``: the driver's connection settings."""

    def __init__(self, path: str, owner: str, names: Any, queues: Any, policies: Any = None, *,
                 driver: type[SqliteDriver] | None = None, **opening: Any) -> None:
        self.sqlite = (driver or driver_class())(path, **opening)
        super().__init__(self.sqlite, owner, names, queues, policies)

    def release_before_fork(self) -> None:
        """R42/R43: the connection closed before a fork (``SqliteDriver``)."""
        self.sqlite.release_before_fork()
