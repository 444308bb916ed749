"""The store's schema over time: make it, or bring an older one up to date (R26a).

A store records its schema version in ``jobpool_meta``. A new store gets today's
whole schema (``sql.SCHEMA``). A store made by an earlier release is upgraded in
place, inside one ``BEGIN IMMEDIATE`` transaction, by the steps below, each from
one version to the next. Steps are additive only (new tables, new columns with
defaults), so a pool of the previous release that is still running during a
rolling restart keeps working on the upgraded file: it never names what it does
not know. One step rewrites a table's text in place (schema 14, ``_status_check_as_comparisons``):
the status's CHECK, for one that holds the same rows and costs less to evaluate.
One step replaces what it drops: schema 12 makes ``jobs_status`` anew
over finished rows only, under its name and with a condition every statement a
schema 11 pool reads it with still satisfies (``statements.CREATE_STATUS_INDEX``);
only a schema 11 dashboard's read of running rows through it would fail, and such
a process refuses the file when it next opens it.

Who may change a file: commands that write (``start``, ``enqueue``, the admin
commands, ``connect()``) upgrade; read-only commands (``status``, ``top``,
``jobs``, ``pools``, ``doctor``) never write, and say which command upgrades a
store that is older than they read. Only ``connect()``, ``start`` and ``enqueue``
add jobpool's tables to a SQLite file that has none (an application's own
database, for transactional enqueue), and only when none of the table names it
would add is taken by something else.
"""
from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from jobpool.errors import NotAStoreError
from jobpool.store.sqlite import statements as sql
log = logging.getLogger(__name__)

def _status_check_as_comparisons(conn: sqlite3.Connection) -> None:
    """Schema 14: the jobs table's status CHECK as comparisons joined by OR, in place of
    the ``IN`` list it had (``statements.STATUS_CHECK``: the list cost each written row
    a temporary B-tree). The two accept the same rows, and a CHECK is not stored in any
    row or index, so the table's text in ``sqlite_master`` is rewritten under
    ``writable_schema`` with the schema's version counter moved on (SQLite's documented
    way to change a constraint without rebuilding the table), inside the upgrade's
    transaction. The new text is parsed before the commit (a statement that reads the
    table); should it not parse, the step raises and the upgrade rolls back whole. A
    table whose text does not hold the old CHECK word for word is left as it is, and so
    is one an SQLite built to refuse writes to its schema table (its defensive mode)
    will not let be rewritten: the old CHECK accepts the same rows, at its old cost."""
    (counter,) = conn.execute("PRAGMA schema_version").fetchone()
    conn.execute("PRAGMA writable_schema = ON")
    try:
        try:
            changed = conn.execute(
                "UPDATE sqlite_master SET sql = replace(sql, ?, ?) "
                "WHERE type = 'table' AND name = 'jobs' AND instr(sql, ?) > 0",
                (sql.STATUS_CHECK_IN_LIST, sql.STATUS_CHECK, sql.STATUS_CHECK_IN_LIST)).rowcount
        except sqlite3.OperationalError as exc:  # the schema table is not to be written
            log.info("the jobs table's status CHECK is kept as it was: %s", exc)
            return
        if changed:
            conn.execute(f"PRAGMA schema_version = {int(counter) + 1}")
    finally:
        conn.execute("PRAGMA writable_schema = OFF")
    conn.execute("SELECT count(*) FROM jobs WHERE 0").fetchall()


#: Version -> what upgrades the schema from the version before it: statements, or a
#: function of the connection for a step no statement alone can make.
#: Version 1 is the first release's schema (its DDL is kept, frozen, in the tests).
STEPS: dict[int, tuple[str | Callable[[sqlite3.Connection], None], ...]] = {
    # R28: the names a pool serves, so readers can tell ready jobs nobody serves.
    # R40: how many processes an attempt left running that were killed with it.
    2: ("ALTER TABLE pools ADD COLUMN names TEXT NOT NULL DEFAULT ''",
        "ALTER TABLE attempts ADD COLUMN strays INTEGER"),
    # R38: paused queues, obeyed by every pool.
    3: (sql.CREATE_QUEUES,),
    # R34: batches, their members and callbacks; unique keys over a period (the
    # finished jobs of a key, found by it); R37: a running job's saved state.
    4: ("ALTER TABLE jobs ADD COLUMN batch_id INTEGER", *sql.BATCH_SCHEMA,
        sql.CREATE_FINISHED_KEY_INDEX, "ALTER TABLE jobs ADD COLUMN state TEXT",
        "ALTER TABLE jobs ADD COLUMN state_at REAL"),
    # R35/R36: limits, a row's group, the lanes a limited claim rotates through.
    5: ("ALTER TABLE jobs ADD COLUMN grp TEXT", *sql.LIMIT_SCHEMA),
    # R28: listings of one name or one queue, newest first, through an index.
    6: sql.LISTING_SCHEMA,
    # R54: a job's metadata (issue 28).
    7: ("ALTER TABLE jobs ADD COLUMN meta TEXT",),
    # R56: the pools' per-minute rollups, read by the web dashboard's charts.
    8: (sql.CREATE_ROLLUPS,),
    # R47: a chain's steps found by its first job's id (the web dashboard's job page).
    9: (sql.CREATE_CHAIN_INDEX,),
    # R54: a batch's callbacks enqueued with the metadata their signatures carry.
    10: (sql.DROP_BATCH_FINISHED, sql.CREATE_BATCH_FINISHED),
    # R61: a success's attempt line in its own row, not a row of attempts.
    11: sql.ADD_DONE_LINE,
    # R47 (issue 27): a page of one status through an index in id order (finished rows)
    # or by due time (ready rows); the status index over finished rows only.
    12: sql.RESHAPE_STATUS_INDEX,
    # R28, R47 (issue 27): ready rows keyed by queue and name before due time, so the
    # pairs of ready rows (the names no pool serves) are found a seek each.
    13: sql.REKEY_READY_DUE,
    # The status's CHECK without an IN list: no temporary B-tree for each row written.
    14: (_status_check_as_comparisons,),
    # R44 (issue 26): a batch's callback written by hand so that it cannot be enqueued
    # is not, where its member's settle failed, every turn, and stopped the pool.
    15: (sql.DROP_BATCH_FINISHED, sql.CREATE_BATCH_FINISHED),
}

#: The version this code reads and writes: the one ``sql.SCHEMA`` creates.
CURRENT = int(sql.SCHEMA_VERSION)
assert max(STEPS) == CURRENT, "sql.SCHEMA_VERSION and the last migration step disagree"

#: The tables jobpool adds; a foreign file holding any of these names is refused.
OWN_TABLES = frozenset({"jobpool_meta", "jobs", "attempts", "pools", "periodic", "jobpool_queues",
                        "jobpool_batches", "jobpool_batch_adds", "jobpool_limits",
                        "jobpool_groups", "jobpool_lanes", "jobpool_rollups"})

UPGRADE_HINT = "jobpool start, jobpool enqueue or connect() upgrades it in place"


def ensure(conn: sqlite3.Connection, path: str, *, create: bool, upgrade: bool) -> None:
    """Leave ``conn``'s file at schema ``CURRENT``, or refuse it with one clear line.

    ``create``: the file may get jobpool's tables (it is new or has none of them).
    ``upgrade``: an older jobpool schema may be brought up to date.
    """
    tables = _tables(conn)
    if "jobpool_meta" not in tables:
        _create(conn, path, tables, create)
        return
    version = _version(conn, path)
    if version == CURRENT:
        return
    if version > CURRENT:
        raise NotAStoreError(newer_schema(path, version))
    if not upgrade:
        raise NotAStoreError(f"{path} has jobpool schema {version}, older than schema {CURRENT} "
                             f"that this jobpool reads; {UPGRADE_HINT}")
    _upgrade(conn, path)


def _tables(conn: sqlite3.Connection) -> set[str]:
    return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def newer_schema(path: str, version: int) -> str:
    """What a store of a schema newer than this jobpool's is told (every command, doctor)."""
    return (f"{path} has jobpool schema {version}, newer than schema {CURRENT} that this "
            f"jobpool reads: upgrade jobpool")


def schema_version(conn: sqlite3.Connection) -> int | None:
    """The schema version the store's ``jobpool_meta`` says, or None where it says none
    that reads as a whole number (``doctor`` reads it the same way)."""
    row = conn.execute("SELECT value FROM jobpool_meta WHERE key = 'schema'").fetchone()
    try:
        return int(row[0])
    except (TypeError, ValueError):
        return None


def _version(conn: sqlite3.Connection, path: str) -> int:
    version = schema_version(conn)
    if version is None:
        raise NotAStoreError(f"{path} has a jobpool_meta table without a schema version: "
                             f"not a jobpool store")
    return version


def _create(conn: sqlite3.Connection, path: str, tables: set[str], create: bool) -> None:
    if tables and not create:
        raise NotAStoreError(f"{path} is not a jobpool store (it has tables, but no jobpool_meta)")
    taken = sorted(tables & OWN_TABLES)
    if taken:
        raise NotAStoreError(f"{path} is not a jobpool store, and its table(s) {', '.join(taken)} "
                             f"would clash with jobpool's")
    if tables:
        log.warning("adding jobpool's tables to %s (it has %d tables of its own); the file "
                    "now uses WAL journaling", path, len(tables))
    else:
        # Only an empty file takes a page size; an existing one keeps its own.
        conn.execute(f"PRAGMA page_size={sql.PAGE_SIZE}")
    with _immediate(conn):
        if _tables(conn) & OWN_TABLES:
            return  # another process made them while we waited for the lock
        for stmt in sql.SCHEMA:
            conn.execute(stmt)
        conn.execute("INSERT INTO jobpool_meta VALUES ('schema', ?)", (str(CURRENT),))


def _upgrade(conn: sqlite3.Connection, path: str) -> None:
    with _immediate(conn):
        version = _version(conn, path)  # re-read under the lock: another may have done it
        if version < CURRENT:
            log.warning("upgrading %s from jobpool schema %d to %d", path, version, CURRENT)
        for step in range(version + 1, CURRENT + 1):
            for stmt in STEPS[step]:
                if callable(stmt):
                    stmt(conn)
                else:
                    conn.execute(stmt)
        conn.execute("UPDATE jobpool_meta SET value = ? WHERE key = 'schema'", (str(CURRENT),))


@contextmanager
def _immediate(conn: sqlite3.Connection) -> Iterator[None]:
    """One write transaction: committed if the block ends (a ``return`` included),
    rolled back if it raises, so a failed step leaves the schema as it was."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
