"""Opening a store, whichever dialect its name says: ``connect`` and the process's
default store. The one module that names both dialects, each imported only when a
name asks for it, so the SQLite default never loads psycopg and neither dialect
imports the other (DESIGN section 11)."""
from __future__ import annotations

import os
from typing import Any

from jobpool import bounds
from jobpool.errors import JobpoolError
from jobpool.store.sqlite.options import BUSY_TIMEOUT, DEFAULT_MODE
from jobpool.store.urls import is_postgres_url, resolve_path


def connect(db: str | os.PathLike | None = None, *, durability: str | None = None,
            create: bool = True, check: bool = False,
            busy_timeout: float = BUSY_TIMEOUT, mode: int = DEFAULT_MODE,
            readonly: bool = False, allow_world_writable: bool = False) -> Any:
    """Open (creating if needed) the store at ``db`` (default ``$JOBPOOL_DB`` or ./jobpool.db).

    A ``postgresql://`` URL opens a PostgreSQL store (DESIGN section 7); anything else
    is an SQLite file. A store this call creates gets file mode ``mode`` (default 0600,
    R39), whatever the umask; an existing file keeps its own. A mode that lets others
    write the store is refused unless ``allow_world_writable``; execute, setuid, setgid
    and sticky bits always are. With ``create`` a SQLite file that has no jobpool
    tables (an application's own database) gets them. A store of an older schema is
    upgraded in place, unless ``readonly``: then nothing is ever written, and an older
    store is refused naming what upgrades it (R26a)."""
    path = resolve_path(db)
    if is_postgres_url(path):
        from jobpool.store.postgres import store as postgres
        _refuse_bad_settings()
        return postgres.connect(path, create=create, readonly=readonly, durability=durability)
    from jobpool.store.sqlite.store import SQLiteStore
    _refuse_bad_settings()
    if readonly:
        create = False
    return SQLiteStore(path, durability=durability, create=create, check=check,
                       busy_timeout=busy_timeout, mode=mode, readonly=readonly,
                       allow_world_writable=allow_world_writable)


def _refuse_bad_settings() -> None:
    """A setting the environment gives that is not what it must be (``JOBPOOL_HEARTBEAT=x``,
    read when its module was imported): a ``JobpoolError`` naming it, before any store
    is opened with the default standing in for it."""
    if bounds.SETTING_PROBLEMS:
        raise JobpoolError(bounds.SETTING_PROBLEMS[0])


def doctor(db: str) -> Any:
    """The ``doctor`` module of the dialect ``db`` names (``check``; SQLite's also
    ``salvage``), loaded only for that dialect."""
    if is_postgres_url(db):
        from jobpool.store.postgres import doctor as pg_doctor
        return pg_doctor
    from jobpool.store.sqlite import doctor as sqlite_doctor
    return sqlite_doctor


_default: dict[tuple[int, str], Any] = {}


def default_store() -> Any:
    """The store ``job.enqueue()`` writes to, opened once per process and path."""
    path = resolve_path(None)
    key = (os.getpid(), os.path.abspath(path))
    store = _default.get(key)
    if store is None:
        store = _default[key] = connect(path)
    return store


def close_default_store() -> None:
    """Close and forget the default store of the current ``$JOBPOOL_DB`` (the pytest
    plugin's fixture, at the end of each test); the next use opens it again."""
    store = _default.pop((os.getpid(), os.path.abspath(resolve_path(None))), None)
    if store is not None:
        store.close()
