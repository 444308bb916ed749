"""``jobpool doctor``: check a store, and salvage what is readable from a damaged one (R26a).

A damaged file is only ever read: salvage copies every job row that SQLite can
still read, one row at a time so a bad page costs only the rows on it, into a
fresh store at a new path, and reports what it could not read. sqlite-utils does
the inspection and the bulk insert here, off the hot path.
"""
from __future__ import annotations

import os
import sqlite3
import stat
from dataclasses import dataclass, field
from pathlib import Path

import sqlite_utils

from jobpool.errors import JobpoolError, StoreError
from jobpool.store import row_codec
from jobpool.store.sqlite import statements as sql
from jobpool.store.sqlite.migrations import CURRENT, newer_schema, schema_version
from jobpool.store.sqlite.store import SQLiteStore, check_header
from jobpool.store.urls import check_store_name, is_postgres_url

#: Rows copied per insert into the new store.
BATCH = 1000


@dataclass
class Report:
    """What doctor found: problems (empty means healthy) and row counts."""

    path: str
    problems: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    copied: int = 0
    unreadable: list[int] = field(default_factory=list)
    #: R44: the malformed rows, named (the first ``row_codec.DOCTOR_NAMES``), and how
    #: many there are in all.
    malformed: list[str] = field(default_factory=list)
    malformed_count: int = 0

    @property
    def ok(self) -> bool:
        return not self.problems and not self.malformed_count


def _read_only(path: str) -> sqlite_utils.Database:
    """The store at ``path``, opened read-only, once it is known to be a file this
    process may read: a ``JobpoolError`` naming what it is instead (a directory, a file
    it may not read, a FIFO, whose open would wait for ever for a writer), stated
    rather than opened (R42: nothing of ours opens a store's file itself)."""
    try:
        found = os.stat(path)
    except FileNotFoundError:
        raise JobpoolError(f"no jobpool store at {path}") from None
    except OSError as exc:
        raise JobpoolError(f"cannot read {path}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(found.st_mode):
        kind = "a directory" if stat.S_ISDIR(found.st_mode) else "not a regular file"
        raise JobpoolError(f"{path} is {kind}, not a jobpool store")
    if not os.access(path, os.R_OK):
        raise JobpoolError(f"cannot read {path}: permission denied")
    uri = Path(os.path.abspath(path)).as_uri() + "?mode=ro"
    try:
        return sqlite_utils.Database(sqlite3.connect(uri, uri=True))
    except sqlite3.Error as exc:
        raise JobpoolError(f"cannot open {path}: {exc}") from None


def _schema_problem(db: sqlite_utils.Database, path: str) -> str | None:
    """What keeps this jobpool from reading the store's schema as its own: a version
    that is no number, or one newer than it reads (``doctor`` said "ok" to both, which
    every other command refuses)."""
    try:
        version = schema_version(db.conn)  # as every other command reads it
    except sqlite3.DatabaseError:
        return None  # no such table: said as a missing table
    if version is None:
        return f"{path} has a jobpool_meta table without a schema version"
    return newer_schema(path, version) if version > CURRENT else None


def check(path: str) -> Report:
    """Integrity and schema of the store at ``path``, read without writing."""
    report = Report(path)
    db = _read_only(path)
    try:
        check_header(db.conn, path)
        rows = [r[0] for r in db.execute("PRAGMA integrity_check").fetchall()]
        if rows != ["ok"]:
            report.problems += rows[:20]
        tables = set(db.table_names())
        missing = {"jobpool_meta", "jobs", "attempts"} - tables
        if missing:
            report.problems.append(f"missing tables: {', '.join(sorted(missing))}")
        if "jobpool_meta" in tables and (problem := _schema_problem(db, path)) is not None:
            report.problems.append(problem)
        if "jobs" in tables:
            report.counts = dict(db.execute("SELECT status, count(*) FROM jobs GROUP BY status").fetchall())
            _malformed_rows(db, report)
    except JobpoolError as exc:
        report.problems.append(str(exc))
    except sqlite3.DatabaseError as exc:
        report.problems.append(str(exc))
    finally:
        db.close()
    return report


def _malformed_rows(db: sqlite_utils.Database, report: Report) -> None:
    """R44: each row, whatever its status, with a column of a type or value the codec
    refuses (``typeof`` finds the suspects; ``row_codec`` says what is wrong). A row
    whose ``run_at`` is not a number is never claimed, so this is where it shows."""
    columns = [c for c in _columns(db, "jobs") if c in row_codec.COLUMNS]
    if not columns:
        return
    db.conn.text_factory = row_codec.lenient_text
    try:
        cursor = db.execute(f"SELECT {', '.join(columns)} FROM jobs "
                            f"WHERE {row_codec.suspects(columns, 'sqlite')} ORDER BY id")
        for row in cursor:
            line = row_codec.described(dict(zip(columns, row)))
            if line is not None:
                report.malformed_count += 1
                if len(report.malformed) < row_codec.DOCTOR_NAMES:
                    report.malformed.append(line)
    finally:
        db.conn.text_factory = str


def salvage(path: str, new_path: str) -> Report:
    """Copy every readable job (and its attempt log) of ``path`` into a new store."""
    if is_postgres_url(new_path):
        raise JobpoolError("--salvage NEW is the path of a new SQLite file; to move the jobs "
                           "into PostgreSQL, salvage into a file, then enqueue from it")
    try:
        check_store_name(new_path, "--salvage")
    except ValueError as exc:
        raise JobpoolError(str(exc)) from None
    if os.path.exists(new_path) and (os.path.getsize(new_path) > 0
                                     or not os.path.isfile(new_path)):
        raise JobpoolError(f"{new_path} exists; salvage writes only to a new file")
    # What a failed salvage may remove: only the files it made itself.
    made = [name for name in (new_path, new_path + "-wal", new_path + "-shm")
            if not os.path.lexists(name)]
    report = Report(path)
    source = _read_only(path)
    try:
        check_header(source.conn, path)  # before the new file is made: none is left behind
        try:
            version = schema_version(source.conn)
        except sqlite3.DatabaseError:
            version = None  # no jobpool_meta, or none readable: what is readable is copied
        if version is not None and version > CURRENT:
            # Rows of a schema this jobpool does not know cannot be read as its own.
            raise JobpoolError(newer_schema(path, version))
    except BaseException:
        source.close()
        raise
    try:
        _salvage_into(source, new_path, report)
    except (sqlite3.Error, StoreError, OSError) as exc:
        # A full disk, a directory that went away: no half-made store is left, and the
        # error is one line, not a traceback.
        for leftover in made:
            try:
                os.remove(leftover)
            except OSError:
                pass
        raise JobpoolError(f"salvage into {new_path} failed: {exc}; what it made there is "
                           f"removed, and {path} is as it was") from None
    finally:
        source.close()
    return report


def _salvage_into(source: sqlite_utils.Database, new_path: str, report: Report) -> None:
    """Make a store at ``new_path`` and copy into it what ``source`` holds readable."""
    target_store = SQLiteStore(new_path)  # creates the schema
    target_store.close()
    target = sqlite_utils.Database(new_path)
    try:
        # R35/R36: the limits first, so each copied row of a limited name gets its lane.
        if _columns(source, "jobpool_limits"):
            _copy_table(source, target, "jobpool_limits", report)
        ids = _readable_ids(source, report)
        # The columns both have: a store of an older schema lacks the newer ones
        # (its rows take their defaults).
        known = _columns(source, "jobs")
        columns = [c.name for c in target["jobs"].columns if not known or c.name in known]
        batch: list[dict] = []
        for job_id in ids:
            try:
                row = source.execute(f"SELECT {', '.join(columns)} FROM jobs WHERE id = ?",
                                     [job_id]).fetchone()
            except sqlite3.DatabaseError:
                report.unreadable.append(job_id)
                continue
            if row is not None:
                batch.append(dict(zip(columns, row)))
            if len(batch) >= BATCH:
                report.copied += _flush(target, batch)
        report.copied += _flush(target, batch)
        _copy_table(source, target, "attempts", report)
        # R35: the copied rows of limited names in their lanes.
        with target.conn:
            for (name,) in target.execute(sql.LIMITED_NAMES).fetchall():
                target.execute(sql.LANES_OF_NAME, {"name": name})
        # R34: the batches the copied members count in, with their add keys; R38 the
        # queues an operator paused (left behind, a paused queue ran at the next start);
        # R33 the last occurrence of each periodic job (left behind, a pool enqueued one
        # already done again); R36 the rate buckets; R47 the minutes the charts draw.
        for table in ("jobpool_batches", "jobpool_batch_adds", "jobpool_queues", "periodic",
                      "jobpool_groups", "jobpool_rollups"):
            if _columns(source, table):
                _copy_table(source, target, table, report)
    finally:
        target.close()


def _readable_ids(source: sqlite_utils.Database, report: Report) -> list[int]:
    """Job ids, walking the table in rowid ranges so one bad page skips only its rows."""
    ids: list[int] = []
    try:
        top = source.execute("SELECT max(id) FROM jobs").fetchone()[0] or 0
    except sqlite3.DatabaseError as exc:
        report.problems.append(f"cannot read the jobs table: {exc}")
        return ids
    step = 500
    for start in range(0, top + 1, step):
        try:
            ids += [r[0] for r in source.execute(
                "SELECT id FROM jobs WHERE id >= ? AND id < ? ORDER BY id", [start, start + step])]
        except sqlite3.DatabaseError:
            for job_id in range(start, start + step):
                try:
                    if source.execute("SELECT id FROM jobs WHERE id = ?", [job_id]).fetchone():
                        ids.append(job_id)
                except sqlite3.DatabaseError:
                    report.unreadable.append(job_id)
    return ids


def _flush(target: sqlite_utils.Database, batch: list[dict]) -> int:
    if not batch:
        return 0
    # A salvaged running job has no live owner any more: it goes back in line.
    for row in batch:
        if row["status"] == "running":
            row.update(status="ready", lease_owner=None, lease_expires_at=None)
    target.table("jobs").insert_all(batch, batch_size=BATCH)
    count = len(batch)
    batch.clear()
    return count


def _columns(source: sqlite_utils.Database, table: str) -> set[str]:
    """The columns of ``table`` in the source (empty: no such table, or unreadable)."""
    try:
        return {row[1] for row in source.execute(f"PRAGMA table_info({table})")}
    except sqlite3.DatabaseError:
        return set()


def _copy_table(source: sqlite_utils.Database, target: sqlite_utils.Database, table: str,
                report: Report) -> None:
    try:
        rows = list(source.query(f"SELECT * FROM {table}"))
    except sqlite3.DatabaseError as exc:
        report.problems.append(f"{table} not copied: {exc}")
        return
    target.table(table).insert_all(rows, batch_size=BATCH)


__all__ = ["Report", "check", "salvage", "sql"]
