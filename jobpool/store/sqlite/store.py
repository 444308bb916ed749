"""The SQLite store: opening a file safely, enqueueing, and reading jobs back.

The hot path (claim and settle) is not here: it lives in the core, over its own
connection. This module is what applications and the CLI use.
"""
from __future__ import annotations

import json
import logging
import os
import sqlite3
import time
import urllib.parse
import weakref
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any, Iterable, Iterator, Sequence

from jobpool import bounds, fork_safety, lifecycle, liveness, rollups
from jobpool.handles import Handle, Handles
from jobpool.errors import (CorruptStoreError, EnqueueError, JobNotFound, NotAStoreError,
                            ReadOnlyStoreError, StoreSettingError,
                            StoreError)
from jobpool.serialize import MAX_PAYLOAD_BYTES
from jobpool.store import row_codec, rows
from jobpool.store.sqlite import file_identity
from jobpool.store.sqlite import migrations
from jobpool.store.sqlite import retention
from jobpool.store.sqlite import statements as sql
from jobpool.store.async_enqueue import AsyncEnqueue
from jobpool.store.common import SharedStore
from jobpool.store.sqlite.checkpoint import (FRAME_HEADER_BYTES, RESTART_BYTES, wal_bound,
                                             wal_settings, wal_size)
from jobpool.store.connections import PerThread
from jobpool.store.sqlite import guarded
from jobpool.store.sqlite.options import (BUSY_TIMEOUT, CLAIM_BUSY_TIMEOUT, DEFAULT_MODE,
                                          validate_mode)
from jobpool.store.records import (COUNT_MOST, OPEN_BATCHES_SHOWN, DashboardRows, Heartbeat, ProgressReport,
                                   QueueMetrics, Requests, unserved_groups)
from jobpool.store.sqlite.wakeup import Notifier
from jobpool.store.finish_wait import PollingWaiter


log = logging.getLogger(__name__)

#: SQLite's primary result code for "database or disk is full".
_SQLITE_FULL = 13
#: ... for "database is locked" (another connection's lock, past the busy timeout).
_SQLITE_BUSY = 5
#: SQLite's primary result code for "file is not a database".
_SQLITE_NOTADB = 26
#: ... and for "unable to open database file" (no permission to read it, say).
_SQLITE_CANTOPEN = 14
#: SQLite's primary result code for "attempt to write a readonly database".
_SQLITE_READONLY = 8


def _sqlite_code(error: BaseException | None) -> int | None:
    """SQLite's primary result code in ``error`` or what it was raised from."""
    while error is not None:
        code = getattr(error, "sqlite_errorcode", None)
        if code is not None:
            return code & 0xFF
        error = error.__cause__
    return None


def _disk_full(error: BaseException | None) -> bool:
    """Whether ``error`` (or what it was raised from) is SQLite's SQLITE_FULL."""
    return _sqlite_code(error) == _SQLITE_FULL


#: ``sqlite3.connect``'s own busy timeout, seconds, when none is given.
_SQLITE_TIMEOUT = 5.0
#: The longest a lock is waited for, seconds: SQLite's own busy timeout is a C int of
#: milliseconds, so a longer one (or an infinite one) waits this long (24 days).
_LONGEST_WAIT = (2**31 - 1) / 1000

#: ``SQLiteStore.transaction``: a write of this many rows or more (an ``enqueue_many``)
#: runs with a page cache of ``BULK_CACHE_KIB`` KiB, about what 100 000 rows of a job
#: and their index entries dirty; SQLite's default is 2 000 KiB.
BULK_ROWS = 5_000
BULK_CACHE_KIB = 65_536


def connect_file(path: str, **options: Any) -> sqlite3.Connection:
    """Python's connection to a store's file, through the compiled core's VFS when the
    core is this process's (``core.WAL_VFS``: each commit's WAL frames in one write, so
    an enqueue makes one write where SQLite makes two a page, and a lock is waited for
    in short sleeps); through SQLite's own with ``JOBPOOL_PURE=1`` or no core built.
    The file is the same either way."""
    from jobpool import core  # loads the compiled core, which registers the VFS
    name = os.fsencode(path)
    if core.WAL_VFS is None or b"\0" in name or name.startswith(b"file:"):
        # SQLite's own reading of the name, as every other connection to the store
        # opens it (the driver's, the checkpointer's): a name that SQLite itself takes
        # for a URI, and one with a NUL (refused), stay its own.
        return sqlite3.connect(path, **options)
    address = urllib.parse.quote(name, safe="/")
    # "file:" then the path; an absolute path after an empty authority ("file://"), so
    # that one starting "//" is not read as a host.
    prefix = "file://" if name.startswith(b"/") else "file:"
    conn = sqlite3.connect(f"{prefix}{address}?vfs={core.WAL_VFS}", uri=True, **options)
    # R26a: a lock another process holds is waited for in short sleeps (the driver's),
    # up to the same timeout, not in SQLite's 1, 2, 5, 10 ... ms: a producer beside a
    # pool that turns thousands of times a second would otherwise sleep past them all.
    timeout = options.get("timeout", _SQLITE_TIMEOUT)
    try:
        conn.execute("SELECT jobpool_busy_waits(?)",
                     (round(min(max(timeout, 0.0), _LONGEST_WAIT) * 1000),)).fetchall()
    except BaseException:
        conn.close()
        raise
    return conn


def durability_setting(durability: str | None) -> str:
    """R26a: ``full`` (default) survives power loss; ``normal`` only process crashes."""
    if durability is None:
        durability = os.environ.get("JOBPOOL_DURABILITY") or "full"
    if durability not in ("full", "normal"):
        raise StoreSettingError(f"durability must be 'full' or 'normal', not {durability!r}")
    return durability.upper()


def create_file(path: str, mode: int) -> None:
    """R39: create an absent store file with exactly ``mode``, before SQLite opens it.

    SQLite would create it with 0644 less the umask; making it ourselves first, with
    ``O_EXCL`` so an existing file is never touched, gives the file (and the WAL and
    shared-memory files SQLite copies the mode from) the mode asked for, whatever
    the umask says.
    """
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    except FileExistsError:
        return  # someone else made it first; its mode is theirs
    except OSError as exc:
        raise StoreError(f"cannot create {path}: {exc.strerror}") from exc
    try:
        os.fchmod(fd, mode)  # the umask narrowed what os.open asked for
    finally:
        os.close(fd)


def check_header(conn: sqlite3.Connection, path: str) -> None:
    """Refuse a file that is not an SQLite database, asking SQLite to read its header.

    R42: nothing of ours opens the file itself. On POSIX, closing any descriptor of
    a file drops every lock this process holds on it, the locks of its other SQLite
    connections included, so a plain ``open()`` and ``close()`` of a live store
    (another store object on the same file, a pool in this process) lets other
    processes reset the WAL under connections still reading it."""
    try:
        conn.execute("PRAGMA schema_version").fetchone()
    except sqlite3.DatabaseError as exc:
        if getattr(exc, "sqlite_errorcode", None) == _SQLITE_NOTADB:
            raise NotAStoreError(f"{path} is not a jobpool store (not an SQLite database file)") from None
        if getattr(exc, "sqlite_errorcode", None) == _SQLITE_CANTOPEN:
            raise StoreError(f"cannot open {path}: {exc}") from None
        raise


def quick_check(conn: sqlite3.Connection, path: str) -> None:
    """R26a: refuse a file that fails SQLite's own consistency check."""
    try:
        rows = [r[0] for r in conn.execute("PRAGMA quick_check")]
    except sqlite3.DatabaseError as exc:
        raise CorruptStoreError(f"{path} is corrupt: {exc}") from exc
    if rows != ["ok"]:
        problems = [line for row in rows for line in row.splitlines()
                    if line and not line.startswith("***")]
        more = f" (and {len(problems) - 1} more problems)" if len(problems) > 1 else ""
        raise CorruptStoreError(f"{path} is corrupt: {problems[0] if problems else rows[0]}{more}")


class SQLiteStore(SharedStore, AsyncEnqueue):
    """A connection to one store file. Safe to use from a forked child (it reopens)."""

    #: Every statement it runs (``SharedStore`` runs its share of them through it).
    statements = sql
    #: R54: no index serves a metadata filter here: ``list_jobs(meta=...)`` is a
    #: search within a window of ids (R47).
    meta_indexed = False

    @staticmethod
    def list_param(values: list) -> str:
        """A list as this dialect's statements take it: JSON text, read by json_each."""
        return json.dumps(values)

    def __init__(self, path: str, *, durability: str | None = None, create: bool = True,
                 check: bool = False, max_payload: int = MAX_PAYLOAD_BYTES,
                 busy_timeout: float = BUSY_TIMEOUT, mode: int = DEFAULT_MODE,
                 readonly: bool = False, allow_world_writable: bool = False) -> None:
        #: As typed: what messages and listings name (the CLI's rule).
        self.path = path
        #: The file every thread's connection, the claimer, the checkpointer and the
        #: wake-ups open: absolute, whatever the process's working directory is by then
        #: (R42: a thread's first use after a chdir made a second store, silently). A
        #: name SQLite reads as a URI stays SQLite's to read.
        self._file = (path if os.fsencode(path).startswith(b"file:") or os.path.isabs(path)
                      else os.path.join(os.getcwd(), path))  # not normalised: "link/.." is
        # the link's parent, as the system reads it, not the directory the text says
        #: Read-only commands never write the file: no new tables, no upgrade (R26a).
        self._readonly = readonly
        self.mode = validate_mode(mode, allow_world_writable=allow_world_writable)
        if isinstance(busy_timeout, bool) or not isinstance(busy_timeout, (int, float)) \
                or not busy_timeout >= 0:
            raise ValueError(f"busy_timeout must be a number of seconds, 0 or more, "
                             f"not {busy_timeout!r}"[:200])
        if busy_timeout > 1e300:  # an int past any float (10**400) waits as long as inf
            busy_timeout = float("inf")
        self.busy_timeout = busy_timeout
        self.synchronous = durability_setting(durability)
        self.max_payload = max_payload
        self._create = create
        self._check = check
        self._connections = PerThread(self._open, guarded.close)
        self._notifier = Notifier(self._file)
        #: The claimers made over this store's file, released with it before a fork.
        self._claimers: weakref.WeakSet[Any] = weakref.WeakSet()
        fork_safety.hold(self)
        _ = self.conn  # open now so a bad path is reported at connect()
        #: R45: the file the path named when this store opened it.
        self.opened = file_identity.identity(path)

    # -- opening (R26a) ---------------------------------------------------------------

    @property
    def conn(self) -> sqlite3.Connection:
        """This thread's connection (R42: a store is used from many threads at once);
        a fork gets its own (no connection crosses a fork)."""
        return self._connections.get()

    def release_before_fork(self) -> None:
        """R42/R43: close this process's connections (and its claimers') before it
        forks, so the child inherits no SQLite state of this file; they reopen on
        next use. Not while one is inside a transaction (then the fork happens with
        it open), nor once the path names another file (R45: they reopen by path,
        and the leases a claimer holds are in the file it has open)."""
        if self.replaced() is not None:
            return
        if not any(conn.in_transaction for conn in self._connections.open_now()):
            self._connections.close_all()
        for claimer in list(self._claimers):
            claimer.release_before_fork()

    def on_store_error(self, error: BaseException) -> None:
        """R26 on a full disk: before the pool pauses and retries, give the WAL's
        space back (a TRUNCATE checkpoint copies its pages into the store and empties
        it), since what fills a store's disk is most often its own WAL."""
        if not _disk_full(error) or self.replaced() is not None:
            return
        try:
            self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        except (sqlite3.Error, StoreError) as exc:
            log.debug("checkpoint after a full disk failed: %s", exc)

    def contended(self, error: BaseException) -> bool:
        """R26: whether ``error`` is SQLITE_BUSY: another writer held the lock past the
        busy timeout (a bulk enqueue, a checkpoint), no failure of the store."""
        return _sqlite_code(error) == _SQLITE_BUSY

    def replaced(self) -> str | None:
        """R45: what the path names now, in words, if not the file this store opened."""
        return file_identity.change(self._file, self.opened)

    def _open(self) -> sqlite3.Connection:
        path, named = self._file, self.path  # the file to open; as its user typed it
        exists = os.path.exists(path) and os.path.getsize(path) > 0
        if not exists and not self._create:
            raise StoreError(f"no jobpool store at {named}")
        if not exists:
            create_file(path, self.mode)
        try:
            # check_same_thread=False: close() and a fork's release close every
            # thread's connection from one thread; each is used by its own thread only,
            # and a close waits for the statement another thread is stepping (guarded).
            conn = connect_file(path, isolation_level=None, timeout=self.busy_timeout,
                                check_same_thread=False, factory=guarded.GuardedConnection)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open {named}: {exc}") from exc
        # R26a: another connection making or upgrading the same file holds its lock, and
        # some of these steps (the journal mode's) are refused at once rather than
        # waited for: they are tried again within the busy timeout. Threads opening a
        # new store together failed, one in three, as a corrupt file in 10 ms.
        waited_until = time.monotonic() + self.busy_timeout
        pause = 0.001
        while True:
            try:
                self._prepare(conn, path, named, exists)
                return conn
            except sqlite3.OperationalError as exc:
                # The primary code: the extended ones (BUSY_SNAPSHOT, LOCKED_SHAREDCACHE)
                # are busy too.
                busy = ((getattr(exc, "sqlite_errorcode", 0) or 0) & 0xFF) in (
                    sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
                if busy and time.monotonic() < waited_until:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    time.sleep(pause)
                    pause = min(pause * 2, 0.05)
                    continue
                conn.close()
                if busy:
                    raise StoreError(f"{named} is held by another connection past the busy "
                                     f"timeout: {exc}") from exc
                raise CorruptStoreError(f"{named} cannot be used as a store: {exc}") from exc
            except sqlite3.DatabaseError as exc:
                conn.close()
                raise CorruptStoreError(f"{named} cannot be used as a store: {exc}") from exc
            except BaseException:
                conn.close()
                raise

    def _prepare(self, conn: sqlite3.Connection, path: str, named: str, exists: bool) -> None:
        """A new connection's checks and settings: the file is a store (checked once a
        store), at this schema (made or upgraded), in WAL with this store's settings."""
        check_header(conn, named)
        if self._check and exists:
            quick_check(conn, named)
            self._check = False  # once a store, not at every thread's first use
        migrations.ensure(conn, named, create=self._create, upgrade=not self._readonly)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(f"PRAGMA synchronous={self.synchronous}")
        conn.execute("PRAGMA mmap_size=0")
        autocheckpoint, journal_limit = wal_settings(path, sql.WAL_PRODUCER_PAGES,
                                                     sql.WAL_PRODUCER_LIMIT)
        conn.execute(f"PRAGMA wal_autocheckpoint={autocheckpoint}")
        conn.execute(f"PRAGMA journal_size_limit={journal_limit}")

    def close(self) -> None:
        if self.replaced() is not None:
            self._empty_moved_wal()
        self._connections.close_all()

    def _empty_moved_wal(self) -> None:
        """R45: the path names another file (or none) now, yet the ``-wal`` beside
        it is still this file's: the next process to open the path would read our
        pages as the new file's. SQLite itself does not checkpoint a moved file at
        close, so fold the WAL into the file we hold and empty it first (through a
        connection already open: a new one would open the path's file)."""
        for conn in self._connections.open_now():
            try:
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
                return
            except sqlite3.Error:
                continue  # busy or refused: another connection may manage

    # -- enqueue (R1-R5) ----------------------------------------------------------------

    def enqueue_with(self, name: str, *, args: tuple | list = (), kwargs: dict | None = None,
                     key: str | None = None, delay: float | timedelta | None = None,
                     priority: int | None = None, deadline: datetime | float | None = None,
                     max_attempts: int | None = None, queue: str | None = None,
                     timeout: float | None = None, then: Any = None,
                     connection: sqlite3.Connection | None = None,
                     now: float | None = None, batch: int | None = None,
                     key_period: float | timedelta | None = None, group: Any = None,
                     meta: dict[str, Any] | None = None) -> Handle:
        """Queue one job with per-call options.

        ``then`` is a ``Signature`` (``job.s(...)``) or a list of them: the chain
        that runs after this job succeeds, each step enqueued in the transaction
        that completes the one before (R12).
        With ``connection`` (R5) the row is written inside the caller's open
        transaction on that connection, and exists only if the caller commits.
        ``batch``: the id of an unfinished batch this job joins (R34).
        ``key_period``: a job with the key that finished less than this long ago
        (seconds or a timedelta) makes this enqueue a duplicate too.
        ``group``: the row's group for its name's limits (R35, R36), instead of the
        value of the job's ``group_by`` keyword argument.
        ``meta``: the job's metadata, a dict JSON can carry (R54).
        """
        now = bounds.now_or(now)
        meta, then = rows.stamp_call(name, args, kwargs, meta, then)  # R55
        row = rows.new_job(name, args, kwargs, key, delay, priority, deadline, max_attempts,
                           queue, timeout, now, rows.chain_json(then, self.max_payload, name),
                           self.max_payload, group, meta)
        period = None
        if batch is not None or key_period is not None:  # the per-call path stays short
            rows.check_batch_options(batch, key=key, connection=connection)
            period = rows.key_period(key_period, key)
            row = row._replace(batch_id=batch)
        if connection is not None:
            rows.check_connection(connection)
            # R5: inside the caller's own transaction; its failure a StoreError, as on
            # PostgreSQL (sqlite3's own errors missed every `except StoreError`).
            try:
                return self._insert_unique(connection, row, period, now)
            except sqlite3.Error as exc:
                raise StoreError(f"enqueue of {name} on the caller's connection failed: "
                                 f"{exc}") from exc
        if key is None and batch is None:
            job_id = self._insert_unlimited(row, name)
            if job_id is not None:
                self._notifier.notify()
                return Handle(job_id, store=self)

        def insert(conn: sqlite3.Connection) -> Handle:
            if batch is not None:
                self.batches.grow(conn, batch, 1)
            return self._insert_unique(conn, row, period, now)
        handle = self.transaction(f"enqueue of {name}", insert)
        if not handle.duplicate:
            self._notifier.notify()
        return handle

    def enqueue_many(self, name: str, items: Iterable[Any], *, delay: float | None = None,
                     priority: int | None = None, queue: str | None = None,
                     max_attempts: int | None = None, keys: Iterable[str | None] | None = None,
                     now: float | None = None, batch: int | None = None,
                     meta: dict[str, Any] | None = None) -> Handles:
        """Queue many calls of one job in one transaction, all or nothing (R4).

        Each item is a tuple or list of positional arguments, or a ``Signature``
        (``job.s(...)``) for keyword arguments. Returns the handles in item order,
        as a sequence that makes each ``Handle`` when it is read. ``keys`` gives
        each item a key (R3): an item whose key a live job holds is not written,
        its handle is that job's (``Handles.duplicates`` lists their positions).
        ``batch``: the id of an unfinished batch they all join (R34).
        """
        now = bounds.now_or(now)
        rows.check_batch_options(batch, key=keys)
        options = rows.enqueue_options(name, delay, priority, None, max_attempts, queue, None,
                                       now)._replace(batch_id=batch)
        items = rows.item_list(items)
        checked_keys = rows.check_keys(keys, len(items))
        with_meta = rows.carries_meta(meta)
        if checked_keys is not None:
            return self._insert_keyed(options, items, checked_keys, meta)
        # A per-group job's rows each take their group from their own arguments;
        # rows with metadata (R54, R55) each carry their own.
        as_json = (rows.json_batch(items, name) if options.serializer == "json"
                   and options.group_by is None and not with_meta else None)
        count = len(items)
        if as_json is not None:
            rows.check_items(options, items, as_json[1])  # R1: new_jobs checks its own

        def join(conn: sqlite3.Connection) -> None:
            if batch is not None and count:
                self.batches.grow(conn, batch, count)
        if as_json is not None:
            def insert_json(conn: sqlite3.Connection) -> int:
                join(conn)
                last = self._insert_batch(conn, options, count, *as_json)
                _make_lanes(conn, name, last - count + 1, last, regroup=True)
                return last
            last = self.transaction(f"enqueue_many of {name}", insert_json, written=count)
        else:
            new_jobs = rows.new_jobs(options, items, self.max_payload, meta=meta, hooks=True)

            def insert(conn: sqlite3.Connection) -> int:
                join(conn)
                conn.executemany(sql.INSERT_JOB, new_jobs)
                last = conn.execute("SELECT last_insert_rowid()").fetchone()[0]
                _make_lanes(conn, name, last - count + 1, last)
                return last
            last = self.transaction(f"enqueue_many of {name}", insert, written=count)
        self._notifier.notify()
        # The write lock is held from BEGIN IMMEDIATE to COMMIT and ids are max(id)+1,
        # so the rows of this transaction have consecutive ids ending at ``last``.
        return Handles(range(last - count + 1, last + 1), store=self)

    def _insert_keyed(self, options: rows.EnqueueOptions, items: list,
                      keys: list[str | None], meta: Any) -> Handles:
        """A batch with keys: row by row in one transaction, each duplicate answered
        with the id of the live job that holds its key (R3)."""
        new_jobs = rows.new_jobs(options, items, self.max_payload, keys, meta, hooks=True)

        def insert(conn: sqlite3.Connection) -> list[Handle]:
            return [self._insert(conn, job) for job in new_jobs]
        handles = self.transaction(f"enqueue_many of {options.name}", insert, written=len(new_jobs))
        self._notifier.notify()
        return Handles([h.id for h in handles], store=self,
                       duplicates=frozenset(i for i, h in enumerate(handles) if h.duplicate))

    def _insert_batch(self, conn: sqlite3.Connection, options: rows.EnqueueOptions, count: int,
                      batch: str, args_only: bool) -> int:
        params = {"queue": options.queue, "name": options.name, "priority": options.priority,
                  "run_at": options.run_at, "max_attempts": options.max_attempts,
                  "timeout": options.timeout, "now": options.now, "batch_id": options.batch_id,
                  "batch": batch, "args_only": args_only, "max_bytes": self.max_payload}
        # No payload can be longer than the whole batch: when that fits, skip the scan.
        fits = len(batch) * 4 + 5 <= self.max_payload or len(batch.encode()) + 5 <= self.max_payload
        oversized = None if fits else conn.execute(sql.BATCH_OVERSIZED, params).fetchone()
        if oversized is not None:
            index, size = oversized
            raise EnqueueError(f"item {index}: payload is {size} bytes, over the "
                               f"{self.max_payload}-byte limit", item=index)
        # The write lock is held: nobody else writes a row between this read and the insert.
        first = params["first"] = conn.execute(sql.NEXT_JOB_ID).fetchone()[0]
        if first - 1 + count > bounds.INT64_MAX:
            # A row inserted without an id would get a random free one; a batch's ids are
            # consecutive, so they must fit after the largest.
            raise EnqueueError(f"enqueue_many of {options.name}: {count} more job ids do not fit "
                               f"after id {first - 1} (ids end at {bounds.INT64_MAX})")
        written = conn.execute(sql.INSERT_BATCH, params).rowcount
        return first + written - 1

    def _insert_unique(self, conn: sqlite3.Connection, row: rows.NewJob, period: float | None,
                       now: float) -> Handle:
        """``_insert``, unless a job with the row's key finished within ``period``
        (still kept: a period reaches no further back than the sweep of done and
        dead rows): that job's handle, ``duplicate``."""
        if period is not None:
            found = conn.execute(sql.FIND_RECENT_KEY, {"name": row.name, "key": row.key,
                                                       "since": now - period}).fetchone()
            if found is not None:
                return Handle(found[0], duplicate=True, store=self)
        return self._insert(conn, row)

    def _insert_unlimited(self, row: rows.NewJob, name: str) -> int | None:
        """A row with no key or batch, written by the one statement SQLite commits
        itself (``INSERT_UNLIMITED_JOB``): its id, or None with nothing written when
        its name has a limit (``enqueue_with`` then writes it with its lane)."""
        conn = self.conn
        try:
            return conn.insert_one(sql.INSERT_UNLIMITED_JOB, row)
        except sqlite3.Error as exc:
            raise StoreError(f"enqueue of {name} failed: {exc}") from exc

    def _insert(self, conn: sqlite3.Connection, row: rows.NewJob) -> Handle:
        try:
            job_id, grp = guarded.run_one(conn, sql.INSERT_JOB_RETURNING, row)
            if grp is not None:
                # R35: a grouped row's lane (a no-op unless its name has a limit).
                conn.execute(sql.LANES_OF_NEW, {"first": job_id, "last": job_id})
            return Handle(int(job_id), store=self)
        except sqlite3.IntegrityError:
            name, key = row[1], row[2]
            if key is None:
                raise
            # R3: a live job holds this key; hand back its id and write nothing.
            existing = conn.execute(sql.FIND_LIVE_KEY, (name, key)).fetchone()
            if existing is None:
                raise
            return Handle(existing[0], duplicate=True, store=self)

    # -- reading ----------------------------------------------------------------------------

    def stats(self, now: float | None = None) -> dict[str, Any]:
        """Counts by status (``ready`` counts due jobs, ``scheduled`` future ones) and,
        under ``supervisors``, each live pool's counters since it started (R29a)."""
        now = bounds.now_or(now)
        try:
            counts = dict.fromkeys(rows.STATUSES, 0)
            counts.update(dict(self.conn.execute(sql.COUNT_BY_STATUS).fetchall()))
            scheduled = self.conn.execute(sql.COUNT_SCHEDULED, (now,)).fetchone()[0]
        except sqlite3.Error as exc:
            raise StoreError(f"reading stats failed: {exc}") from exc
        counts["ready"] -= scheduled
        return {"ready": counts["ready"], "scheduled": scheduled, "running": counts["running"],
                "done": counts["done"], "dead": counts["dead"],
                "supervisors": [dict(p["counters"], owner=p["owner"], procs=p["procs"],
                                     heartbeat_at=p["heartbeat_at"])
                                for p in liveness.live_pools(self.pools(now))]}

    def get(self, job_id: int, *, raw_result: bool = False) -> dict[str, Any]:
        """One job as a dict (payload decoded to text where it is JSON; the result
        as stored when ``raw_result``, else as text or a size for binary)."""
        try:
            columns, found = self._job_rows(sql.GET_JOB, (bounds.row_id(job_id),))
        except sqlite3.Error as exc:
            raise StoreError(f"reading job {job_id} failed: {exc}") from exc
        if not found:
            raise JobNotFound(f"no job with id {job_id}")
        return rows.job_dict(columns, found[0], raw_result=raw_result)

    def waiting_steps(self, job_id: int) -> list[dict[str, Any]]:
        with self._lenient(self.conn):  # R44: text that is not UTF-8 is read, and flagged
            found = self.read_rows(f"reading the chain of job {job_id}", sql.WAITING_STEPS,
                                   (bounds.row_id(job_id),))
        return rows.waiting_steps(found[0][0] if found else None)

    def _job_rows(self, query: str, params: Any) -> tuple[list[str], list[tuple]]:
        """Rows of ``jobs`` and their column names, read leniently (``_lenient``)."""
        conn = self.conn
        with self._lenient(conn):
            cursor = conn.execute(query, params)
            return [d[0] for d in cursor.description], cursor.fetchall()

    @staticmethod
    @contextmanager
    def _lenient(conn: sqlite3.Connection) -> Iterator[None]:
        """R44: rows of ``jobs`` read with their text as it is, bytes that are not
        UTF-8 kept (``row_codec.lenient_text``) for the reader to show flagged, where
        Python's module would fail the whole read."""
        conn.text_factory = row_codec.lenient_text
        try:
            yield
        finally:
            conn.text_factory = str

    @property
    def dead(self) -> retention.DeadLetters:
        """Dead letters: list, retry, delete, purge (R32)."""
        return retention.DeadLetters(self)

    # -- for the store's own modules (its retention): SQL run on this store's connection ---

    # -- batches (R34) ----------------------------------------------------------------------

    def insert_job(self, conn: sqlite3.Connection, row: rows.NewJob) -> int:
        """Write one validated row in ``conn``'s transaction; its id (a batch
        member's add: it has no key, so it is never a duplicate)."""
        return self._insert(conn, row).id

    def take_lanes(self, conn: sqlite3.Connection, jobs: Sequence[rows.NewJob]) -> None:
        """R35: nothing to take ahead here. PostgreSQL's writes take their rows' lanes in
        key order before inserting them; SQLite runs one write transaction at a time."""

    # -- checkpoints (R37) -----------------------------------------------------------------

    def add_to_own_batch(self, owner: str, job_id: int, attempt: int, first_position: int,
                         jobs: list[rows.NewJob]) -> list[tuple[int, bool]]:
        """R34: a running member's adds to its batch (``StoreBatches.add_from_member``),
        made on a clock of 0 (``NewJob.at``)."""
        now = time.time()
        answers = self.batches.add_from_member(owner, job_id, attempt, first_position,
                                               [job.at(now) for job in jobs])
        if any(not duplicate for _id, duplicate in answers):
            self._notifier.notify()
        return answers

    def select_jobs(self, query: str, params: Any) -> list[dict[str, Any]]:
        """Rows of ``jobs`` as dicts, as ``get`` returns them."""
        try:
            columns, found = self._job_rows(query, params)
            return [rows.job_dict(columns, row) for row in found]
        except sqlite3.Error as exc:
            raise StoreError(f"listing jobs failed: {exc}") from exc

    def read_rows(self, what: str, query: str, params: Any = ()) -> list[tuple]:
        """A read outside any write transaction; StoreError naming ``what`` on failure."""
        try:
            return self.conn.execute(query, params).fetchall()
        except sqlite3.Error as exc:
            raise StoreError(f"{what} failed: {exc}") from exc

    def finish_waiter(self, job_id: int, poll: float) -> PollingWaiter:
        """R69: a waiter that looks again every ``poll`` seconds: nothing tells a
        process of another's commit to the file."""
        return PollingWaiter(poll)

    def notify_ready(self) -> None:
        """R11: wake the pools on this host: jobs became ready."""
        self._notifier.notify()

    def list_jobs(self, *, status: str | None = None, name: str | None = None,
                  queue: str | None = None, chain: int | None = None, limit: int = 100,
                  newest_first: bool = False, after: int | None = None,
                  now: float | None = None, **more: Any) -> list[dict[str, Any]]:
        """Jobs in id order, or the newest first, from past ``after`` (the last id of
        the page before, a keyset); ``chain`` lists a chain's first job and its
        successors (R12); ``more``: the key, batch and searched filters
        (``rows.more_filters``, R47).

        A ready job that is not due yet is listed, and filtered, as ``scheduled``
        (as ``stats()`` counts it): ``ready`` means it may run now."""
        limit = rows.listing_limit(limit)
        now = bounds.now_or(now)
        where, params = self._listing(status, name, queue, chain, now, after=after,
                                      newest_first=newest_first, **more)
        jobs = self.select_jobs(sql.list_jobs(where, newest_first=newest_first,
                                              index=self._index(status, name, queue, chain, more)),
                                dict(params, limit=limit))
        for job in jobs:
            if job["status"] == "ready" and job["run_at"] is not None and job["run_at"] > now:
                job["status"] = "scheduled"
        return jobs

    def count_jobs(self, *, status: str | None = None, name: str | None = None,
                   queue: str | None = None, chain: int | None = None, at_most: int,
                   newest_first: bool = False, after: int | None = None,
                   now: float | None = None, **more: Any) -> int:
        """How many jobs ``list_jobs`` with these filters could list, counting at most
        ``at_most`` (R28: ``jobs list`` says how many it left out)."""
        at_most = rows.listing_limit(at_most, "at_most")
        where, params = self._listing(status, name, queue, chain,
                                      bounds.now_or(now), after=after,
                                      newest_first=newest_first, **more)
        ((count,),) = self.read_rows(
            "counting jobs", sql.count_jobs(where, self._index(status, name, queue, chain, more)),
            dict(params, most=at_most))
        return count

    @staticmethod
    def _index(status: str | None, name: str | None, queue: str | None, chain: int | None,
               more: dict[str, Any]) -> str | None:
        """R47: a status the only filter an index serves is read from the index of
        that status's rows alone (``sql.STATUS_INDEXES``). Given planner statistics, SQLite
        would walk the whole table in id order for a page of one status (cheap while
        that status is common among the newest rows, a read of every row when it is
        rare). Ready, done and dead rows come in id order (a due page skips the
        scheduled rows among the ready ones); scheduled rows by due time, the few
        past now, then sorted; running rows are as many as the slots."""
        if status is None or name is not None or queue is not None or chain is not None \
                or more.get("key") is not None or more.get("batch") is not None \
                or rows.searched(more.get("group"), more.get("error"), more.get("args"),
                                 more.get("created"), more.get("finished"), more.get("meta")):
            return None
        return sql.STATUS_INDEXES[status]

    @staticmethod
    def _listing(status: str | None, name: str | None, queue: str | None, chain: int | None,
                 now: float, *, after: int | None = None,
                 newest_first: bool = False, **more: Any) -> tuple[list[str], dict[str, Any]]:
        rows.check_listed_status(status)
        where, params = rows.listing_filters(name, queue, chain, lambda key: f":{key}",
                                             after=after, newest_first=newest_first)
        searched, found = rows.more_filters(sql.LISTING_DIALECT, status, name, after=after,
                                            newest_first=newest_first, **more)
        where, params = where + searched, dict(params, **found)
        # The status is written as a literal, so SQLite sees which partial index of
        # one status's rows it may read (a bound one it cannot, where an index is
        # named). A chain's few rows come from its index: its status terms are kept
        # from the status indexes (a unary +).
        plain = "+" if chain is not None else ""
        if status in ("ready", "scheduled"):
            where.append(f"{plain}status = 'ready' AND {plain}run_at "
                         + ("<=" if status == "ready" else ">") + " :now")
            params["now"] = now
        elif status is not None:
            where.append(f"{plain}status = {sql.quote_literal(status)}")
        return where, params

    def next_due(self, names: Iterable[str], queues: Iterable[str]) -> float | None:
        """When the earliest ready job of these names and queues is due (None: none)."""
        queues = list(queues)
        if not queues:
            return None  # every queue paused (R38), say: nothing is due
        query = sql.NEXT_READY.format(names=", ".join(sql.quote_literal(n) for n in names),
                                      queues=", ".join(sql.quote_literal(q) for q in queues))
        try:
            due = self.conn.execute(query).fetchone()[0]
        except sqlite3.Error as exc:
            raise StoreError(f"reading the queue failed: {exc}") from exc
        # R44: a due time that is not a number is never due (the claim's ``run_at <=
        # :now`` never holds for text): no job to wait for.
        return due if row_codec.is_time(due) else None

    # -- operating (R21, R29, R31, R33) ---------------------------------------------------

    def transaction(self, what: str, fn, *, written: int = 0):
        """Run ``fn(conn)`` in one BEGIN IMMEDIATE transaction; StoreError naming
        ``what`` on failure (for this module and the store's own modules).

        R42: the whole transaction holds the connection's guard, so a ``close()`` from
        another thread waits for its end, not only for the statement stepping: a close
        between its ``BEGIN`` and its write failed an enqueue that had just got the
        lock ("Cannot operate on a closed database").

        ``written``: how many rows it writes. From ``BULK_ROWS`` on, the connection's page
        cache is ``BULK_CACHE_KIB`` for the transaction: with SQLite's default (2 000
        KiB) a bulk enqueue's pages spill into the WAL before its commit, part by part,
        and many are written again, which cost it about a seventh of its time
        (BENCHMARKS.md). The cache is put back after, so a long-lived store does not
        keep the memory.

        R26a: such a transaction's commit leaves the copy of its WAL pages into the store
        to a live pool's checkpointer (``_leave_checkpoint``), where the connection's own
        checkpoint was a fifth of a 100 000-row enqueue's time (BENCHMARKS.md)."""
        conn = self.conn
        with conn.guard:
            kept = left = None
            try:
                if written >= BULK_ROWS:
                    kept = _grow_cache(conn)
                    left = _leave_checkpoint(conn, self._file)
                conn.run_one("BEGIN IMMEDIATE")
                try:
                    result = fn(conn)
                    conn.run_one("COMMIT")
                except BaseException:
                    _rollback(conn)
                    raise
            except sqlite3.Error as exc:
                raise StoreError(f"{what} failed: {exc}") from exc
            finally:
                if kept is not None:
                    _set_cache(conn, kept)
                if left is not None:
                    _set_autocheckpoint(conn, left)
        return result

    def cancel(self, job_id: int, now: float | None = None) -> str:
        """R31: a ready job becomes dead now ("cancelled"); a running one is flagged
        for its supervisor, which kills its child. Returns "cancelled", "requested"
        or the status that could not be cancelled ("done" or "dead")."""
        now = bounds.now_or(now)
        bound = bounds.row_id(job_id)

        def cancel(conn):
            what = self._cancel_one(conn, bound, now)
            if what is None:
                raise JobNotFound(f"no job with id {job_id}")
            return what
        return self.transaction(f"cancelling job {job_id}", cancel)

    def cancel_many(self, ids: Iterable[int], now: float | None = None) -> dict[int, str]:
        """R31 (see ``Store.cancel_many``)."""
        now = bounds.now_or(now)
        ids = rows.job_ids(ids, "cancel_many")
        return self.transaction("cancelling jobs", lambda conn: {
            job_id: self._cancel_one(conn, bounds.row_id(job_id), now) or rows.NO_SUCH_JOB
            for job_id in ids})

    def _cancel_one(self, conn: sqlite3.Connection, bound: int, now: float) -> str | None:
        """One job's cancel in ``conn``'s transaction; None when there is no such job."""
        # Through the one transition spec like every other way into a state: a
        # ready job has no attempt running, so the decision is dead, "cancelled".
        decision = lifecycle.decide(
            lifecycle.Lease(bound, "", 0, 1, 0, None, now, False),
            lifecycle.Outcome(bound, 0, lifecycle.CANCEL, lifecycle.CANCELLED),
            lifecycle.DEFAULT_POLICY, now, None, _no_crash_causes)
        if conn.execute(sql.CANCEL_READY, {"id": bound, "now": now,
                                           "error": decision.reason}).rowcount:
            conn.execute(sql.MEMBER_DEAD, {"id": bound, "now": now})  # R34
            return "cancelled"
        if conn.execute(sql.REQUEST_CANCEL, {"id": bound}).rowcount:
            return "requested"
        row = conn.execute(sql.JOB_STATUS, (bound,)).fetchone()
        return None if row is None else row[0]

    def run_now(self, ids: Iterable[int], now: float | None = None) -> dict[int, str]:
        """R51 (see ``Store.run_now``)."""
        ids = rows.job_ids(ids, "run_now")
        params = {"ids": json.dumps([bounds.row_id(i) for i in ids]), "now": bounds.now_or(now)}

        def run_now(conn):
            made_due = {job_id for job_id, _queue in conn.execute(sql.RUN_NOW, params)}
            return rows.run_now_answers(ids, made_due, dict(conn.execute(sql.STATUSES_OF, params)))
        answers = self.transaction("making jobs due now", run_now)
        if rows.MADE_DUE in answers.values():
            self._notifier.notify()
        return answers

    def run_now_matching(self, *, name: str | None = None, queue: str | None = None,
                         now: float | None = None) -> int:
        """R51 (see ``Store.run_now_matching``)."""
        rows.filter_text("name", name)
        params = {"name": name, "queue": None if queue is None else rows.queue_name(queue),
                  "now": bounds.now_or(now)}
        moved = self.transaction("making jobs due now", lambda conn: len(
            conn.execute(sql.RUN_NOW_MATCHING, params).fetchall()))
        if moved:
            self._notifier.notify()
        return moved

    def enqueue_occurrence(self, name: str, occurrence: float) -> Handle | None:
        """R33: enqueue ``name``'s occurrence at ``occurrence`` unless some pool already
        did; the ``periodic`` row and the job are written in one transaction."""
        occurrence = bounds.now_or(occurrence)  # a key and a time: a finite number
        row = rows.new_job(name, (), None, f"{name}@{occurrence:.3f}", None, None, None, None,
                           None, None, occurrence, None, self.max_payload)

        def advance(conn):
            if not conn.execute(sql.ADVANCE_PERIODIC, {"name": name, "occurrence": occurrence}).rowcount:
                return None
            return self._insert(conn, row)
        handle = self.transaction(f"enqueueing periodic {name}", advance)
        if handle is not None and not handle.duplicate:
            self._notifier.notify()
        return handle

    def periodic_occurrences(self) -> dict[str, float]:
        return dict(self.read_rows("reading periodic jobs", sql.LIST_PERIODIC))

    def pools(self, now: float | None = None, *,
              dead_after: float = liveness.DEAD_AFTER) -> list[dict[str, Any]]:
        """The supervisors that have a row in this store, oldest first (R29).

        Each row says under ``dead`` why its supervisor is gone (process gone,
        heartbeat stale past ``dead_after`` at ``now``), or None while it runs. A
        dead pool's row stays until a running pool reclaims its leases."""
        now = bounds.now_or(now)
        try:
            cursor = self.conn.execute(sql.LIST_POOLS)
            names = [d[0] for d in cursor.description]
            return [rows.pool_dict(names, row, now, dead_after) for row in cursor]
        except sqlite3.Error as exc:
            raise StoreError(f"reading pools failed: {exc}") from exc

    def clock(self) -> float:
        """R7a: one host's store dates its rows by the host's clock."""
        return time.time()

    def dashboard(self, now: float, *, failures: int = 5) -> DashboardRows:
        """R29: everything one dashboard frame shows, in a single read transaction.

        One transaction so the counts agree with each other (a job moving from
        ready to running between two statements is not counted twice); under WAL
        it blocks no writer. Every query walks an index, never the whole table.

        R47: the counts stop at ``COUNT_MOST + 1`` rows a queue (done: in all), so
        a read costs as much on a million-row backlog as on 10 000 rows. Before
        that bound, measured once on generated 1 000 000-row stores (SQLite 3.40,
        warm page cache, 2 cores shared with other work, so ranges): with 860 000
        done, 130 000 ready, 10 000 dead and 16 running rows, 150-230 ms a read
        (DONE_COUNT 60-105 ms, QUEUE_COUNTS 30-80 ms, the rest under 1 ms); with
        1 000 000 ready rows (a backlog), 230-430 ms, nearly all of it counting the
        claim-order index. The plain ``GROUP BY queue, status`` scans the table:
        750-1330 ms on either store.
        """
        failures = rows.listing_limit(failures, "failures")
        conn = self.conn
        try:
            conn.execute("BEGIN")
            try:
                with self._lenient(conn):   # R44: the snapshot shows such text flagged
                    most = {"most": COUNT_MOST + 1}
                    counts = conn.execute(sql.DASHBOARD_QUEUE_COUNTS,
                                          {"now": now, **most}).fetchall()
                    done = conn.execute(sql.DONE_COUNT, most).fetchone()[0]
                    since = conn.execute(sql.DONE_SINCE, {"since": now - 60.0}).fetchall()
                    failed = conn.execute(sql.RECENT_FAILURES, {"window": sql.FAILURE_WINDOW,
                                                                "limit": failures}).fetchall()
                    running = conn.execute(sql.RUNNING_JOBS).fetchall()
                pools = self.pools(now)
                # Only with a live pool: with none, nothing is served and the header says so.
                with self._lenient(conn):
                    unserved = self._unserved(conn, liveness.live_pools(pools))
                paused = [row[0] for row in conn.execute(sql.PAUSED_QUEUES)]
                batches = conn.execute(sql.OPEN_BATCHES, {"limit": OPEN_BATCHES_SHOWN}).fetchall()
            finally:
                conn.execute("COMMIT")
        except sqlite3.Error as exc:
            raise StoreError(f"reading the dashboard snapshot failed: {exc}") from exc
        return DashboardRows(queue_counts=counts, done=done, done_since=since, failures=failed,
                             running=running, pools=pools, unserved=unserved, paused=paused,
                             batches=batches, now=now)

    def queue_metrics(self, now: float) -> QueueMetrics:
        """Per-queue counts and the oldest due job, in one read transaction (WAL: it
        blocks no writer)."""
        conn = self.conn
        try:
            conn.execute("BEGIN")
            try:
                with self._lenient(conn):
                    counts = conn.execute(sql.QUEUE_COUNTS, {"now": now}).fetchall()
                    oldest = conn.execute(sql.OLDEST_DUE, {"now": now}).fetchall()
                paused = [row[0] for row in conn.execute(sql.PAUSED_QUEUES)]
            finally:
                conn.execute("COMMIT")
        except sqlite3.Error as exc:
            raise StoreError(f"reading queue metrics failed: {exc}") from exc
        return QueueMetrics(now=now, counts=counts, oldest_due=oldest, paused=paused)

    def unserved(self, now: float | None = None) -> list[dict[str, Any]]:
        """Ready jobs that no running pool serves (``liveness.unserved``): a name no
        pool registers, or a queue no pool reads, waits for ever with no other sign."""
        try:
            return self._unserved(self.conn, liveness.live_pools(self.pools(now)))
        except sqlite3.Error as exc:
            raise StoreError(f"reading ready jobs failed: {exc}") from exc

    @staticmethod
    def _unserved(conn: sqlite3.Connection, live: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """R28, R47: the (queue, name) pairs of ready rows, a step of ``jobs_ready_due``
        each, and the ready rows of those no live pool serves, each counted to its
        bound (``records.unserved_groups``). Nothing is read while no pool is live."""
        if not live:
            return []
        most = COUNT_MOST + 1
        return unserved_groups(
            conn.execute(sql.READY_BY_NAME).fetchall(), live,
            lambda queue, name: conn.execute(sql.READY_PAIR_COUNT, {
                "queue": queue, "name": name, "most": most}).fetchone()[0])

    # -- a supervisor's side (R21, R22, R24b, R25, R27, R31) -------------------------------

    def heartbeat(self, beat: Heartbeat, progress: Iterable[ProgressReport],
                  now: float) -> Requests:
        """One transaction: upsert the pool's row, write its progress reports, and take
        (acknowledge) the operators' requests, so each is acted on once."""
        params = {"owner": beat.owner, "host": beat.host, "pid": beat.pid, "procs": beat.procs,
                  "queues": ",".join(beat.queues), "names": ",".join(beat.names),
                  "core": beat.core, "now": now, "counters": beat.counters_json,
                  "slots": beat.slots_json}

        def write(conn: sqlite3.Connection) -> Requests:
            beat_row = conn.execute(sql.UPSERT_POOL, params).fetchone()
            _write_progress(conn, beat.owner, progress)
            if beat.rollups:
                conn.executemany(sql.UPSERT_ROLLUP, rollups.params(beat.rollups, now))
                conn.execute(sql.TRIM_ROLLUPS, (now - rollups.KEEP,))
            return self.requests_read(conn, beat.owner, *beat_row)
        return self.transaction("heartbeat", write)

    def rollups(self, since: float) -> list[dict[str, Any]]:
        """R56: the per-minute rollups from the minute of ``since`` on, by minute and
        name (a range of the rollups' key: the jobs are never read)."""
        return rollups.as_dicts(self.read_rows("reading rollups", sql.READ_ROLLUPS,
                                          (rollups.minute_of(since),)))

    def rollup_totals(self, since: float, *, by: str,
                      name: str | None = None) -> list[dict[str, Any]]:
        rows.filter_text("name", name)
        return rollups.as_dicts(self.read_rows(
            "reading rollups", sql.ROLLUPS_BY_MINUTE if rollups.by_minute(by)
            else sql.ROLLUPS_BY_NAME, {"since": rollups.minute_of(since), "name": name}))

    def set_progress(self, owner: str, progress: Iterable[ProgressReport]) -> None:
        """R22: write progress reports now (the last one before a failure stays with it)."""
        self.transaction("writing progress", lambda conn: _write_progress(conn, owner, progress))

    def pending_hooks(self, names: Iterable[str]) -> list[int]:
        """R21: dead jobs of these names whose on_dead hook nobody has taken yet."""
        query = sql.PENDING_HOOKS.format(names=", ".join(sql.quote_literal(n) for n in names))
        try:
            return [r[0] for r in self.conn.execute(query)]
        except sqlite3.Error as exc:
            raise StoreError(f"reading pending on_dead hooks failed: {exc}") from exc

    def claimer(self, owner: str, names, queues, policies):
        """The SQLite hot path (the engine over the compiled driver, or the pure one)
        over a connection of its own, with a short busy timeout so a held lock becomes
        a pause (R26), and checkpoints left to ``maintenance()`` (R26a)."""
        from jobpool.store.sqlite.claimer import SqliteClaimer
        # On a disk with little room the claimer checkpoints its own commits, since
        # the checkpointer's interval lets a busy pool's WAL grow megabytes (R26a).
        autocheckpoint, journal_limit = wal_settings(self._file, 0, sql.WAL_KEEP_BYTES)
        claimer = SqliteClaimer(self._file, owner, names, queues, policies,
                                busy_timeout=CLAIM_BUSY_TIMEOUT,
                                wal_autocheckpoint=autocheckpoint,
                                journal_size_limit=journal_limit)
        self._claimers.add(claimer)  # R42/R43: released with this store before each fork
        return claimer

    def maintenance(self):
        """R26a: the WAL checkpointer, started; ``stop()`` it when the pool exits."""
        from jobpool.store.sqlite.checkpoint import Checkpointer
        checkpointer = Checkpointer(self._file)
        checkpointer.start()
        return checkpointer

    def listener(self):
        """R11: the wake-up socket an enqueue on this host writes to."""
        from jobpool.store.sqlite.wakeup import Listener
        return Listener(self._file)

    def sweep(self, now: float, *, result_ttl: float, dead_letter_limit: int) -> int:
        """R32: one bounded batch of each retention rule."""
        now, result_ttl, dead_letter_limit = rows.sweep_settings(now, result_ttl,
                                                                 dead_letter_limit)
        removed = retention.sweep(self, now, result_ttl=result_ttl,
                                  dead_letter_limit=dead_letter_limit)
        # R35/R36: groups idle for a day (not jobs: not counted).
        self.transaction("sweeping limit groups", lambda conn: self.limits.purge_groups(conn, now))
        return removed + self.batches.purge(now - result_ttl)

    def check_writable(self) -> None:
        """Raise ReadOnlyStoreError if this process cannot write the store at all.

        SQLite opens a file it may not write read-only without a word, and even
        ``BEGIN IMMEDIATE`` succeeds; only a real write says so. A busy store is
        not read-only: that is R26's pause-and-retry, so it passes here."""
        conn = self.conn
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.execute(sql.PROBE_WRITE)
            finally:
                _rollback(conn)
        except sqlite3.Error as exc:
            if getattr(exc, "sqlite_errorcode", 0) & 0xFF == _SQLITE_READONLY:
                raise ReadOnlyStoreError(f"{self.path} cannot be written by this process "
                                         f"({exc})") from None
            # Locked or busy: a running store, for R26 to wait out.

    def check(self) -> None:
        """R26a: run ``quick_check``; raises CorruptStoreError when it fails."""
        quick_check(self.conn, self.path)


def _no_crash_causes(job_id: int) -> list[str]:
    return []  # a ready job has no child to have crashed: never read


def _write_progress(conn: sqlite3.Connection, owner: str,
                    progress: Iterable[ProgressReport]) -> None:
    conn.executemany(sql.SET_PROGRESS, [
        {"progress": p.percent, "stage": p.stage, "id": p.job_id, "owner": owner,
         "attempt": p.attempt} for p in progress])


def _grow_cache(conn: sqlite3.Connection) -> int:
    """The connection's page cache set to ``BULK_CACHE_KIB``; returns the setting it had."""
    kept = conn.execute("PRAGMA cache_size").fetchone()[0]
    conn.execute(f"PRAGMA cache_size=-{BULK_CACHE_KIB}")
    return kept


def _set_cache(conn: sqlite3.Connection, setting: int) -> None:
    """``PRAGMA cache_size`` put back. Never raises: the transaction's answer (its commit
    or its error) is what the caller must hear; a cache left larger costs memory only."""
    try:
        conn.execute(f"PRAGMA cache_size={int(setting)}")
    except sqlite3.Error:
        pass


def _leave_checkpoint(conn: sqlite3.Connection, path: str) -> int | None:
    """R26a: before a bulk transaction, whether its commit may leave the copy of its WAL
    pages into the store to a live pool's checkpointer: a pool has beaten within
    ``liveness.DEAD_AFTER`` (a pool on a SQLite store runs on this host; its checkpointer
    copies a changed WAL within a tenth of a second), the disk has room now (on a tight
    one every connection checkpoints its own commits), and what earlier commits left is
    copied: a PASSIVE checkpoint first (nothing to do, and nearly free, when the pool
    keeps up; it copies what the pool has not, when it lags), after which at most
    ``RESTART_BYTES`` of frames may wait (a reader may keep some back). So a producer
    leaves at most its own commit's pages, never bulk after bulk piled up. The store's
    files are never opened here (R42: closing a descriptor of ours on them would drop
    SQLite's locks); the wal-index is asked through SQLite. The commit is as durable
    either way. Returns the connection's ``wal_autocheckpoint`` to put back, or None
    with nothing changed."""
    try:
        folder = os.path.dirname(os.path.abspath(path))
    except OSError:  # a relative path, and the working directory is gone
        return None
    if wal_bound(folder, wal_size(path + "-wal"))[1] or conn.execute(
            sql.LIVE_POOL, {"since": time.time() - liveness.DEAD_AFTER}).fetchone() is None:
        return None
    _busy, frames, copied = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    page = conn.execute("PRAGMA page_size").fetchone()[0]
    if max(0, frames - copied) * (page + FRAME_HEADER_BYTES) > RESTART_BYTES:
        return None
    pages = conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0]
    conn.execute("PRAGMA wal_autocheckpoint=0")
    return pages


def _set_autocheckpoint(conn: sqlite3.Connection, pages: int) -> None:
    """``PRAGMA wal_autocheckpoint`` put back (never raises, as ``_set_cache``: the next
    commit past the bound then checkpoints as before)."""
    try:
        conn.execute(f"PRAGMA wal_autocheckpoint={int(pages)}")
    except sqlite3.Error:
        pass


def _rollback(conn: sqlite3.Connection) -> None:
    """Roll back if a transaction is still open. On some errors (a full disk, I/O)
    SQLite has already rolled back, and a second ROLLBACK would raise and hide the
    error that matters."""
    if conn.in_transaction:
        try:
            conn.execute("ROLLBACK")
        except sqlite3.Error:
            pass


def _make_lanes(conn: sqlite3.Connection, name: str, first: int, last: int,
                regroup: bool = False) -> None:
    """R35: the lanes of the rows ``first`` to ``last`` just written, if ``name`` has a
    limit (one look for the whole enqueue); ``regroup``: a batch insert wrote them in
    the whole name's group, and a per-group limit's rows first take their own."""
    limit = conn.execute(sql.LIMITED_NAME, {"name": name}).fetchone()
    if limit is None:
        return
    if regroup and limit[0] is not None:
        conn.execute(sql.REGROUP_NEW, {"first": first, "last": last, "name": name})
    conn.execute(sql.LANES_OF_NEW, {"first": first, "last": last})
