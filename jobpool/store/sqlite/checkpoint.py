"""Keeps a supervisor's WAL bounded without stalling its hot path (R26a).

The core's connection runs with automatic checkpoints off; a process of its own,
on its own connection, runs a PASSIVE checkpoint every ``interval`` seconds.
PASSIVE never waits on readers or writers, so claims and settles go on meanwhile.

PASSIVE alone cannot bound the file under steady load: SQLite starts the WAL
over only when a writer begins while every frame is already copied, and a pool
that writes every few hundred microseconds never leaves such a moment. So once
the file passes ``RESTART_BYTES`` the process runs a RESTART checkpoint, which
holds new writers back for the millisecond or two it takes to copy what PASSIVE
left, so the next commit writes from the start of the file again.

RESTART rather than TRUNCATE, and a small bound, because of what a commit costs
the kernel: writing over pages of a file it already holds is a copy, while
appending to a file it just emptied allocates, zeroes and maps every new page.
A supervisor commits about nine pages per job, and in a loop of turns that
difference was a fifth of the time per turn (BENCHMARKS.md). ``journal_size_limit``
trims a WAL that a burst of writers grew past ``sql.WAL_KEEP_BYTES`` back to that
size the next time it starts over.

A RESTART (or TRUNCATE) holds new writers back while it waits for readers, and a
reader that keeps an old snapshot open (another program's transaction left open, a
shell) makes it wait its whole busy timeout every time: the pool's turns waited with
it, and a drain ran at a third of its speed. So a restart waits ``RESTART_WAIT`` at
most, one that such a reader refused is tried again after a pause that doubles (up
to ``RESTART_RETRY_MAX``), and once the WAL could not start over for
``PINNED_WARN_AFTER`` seconds the checkpointer says so, once, in the pool's log: the
WAL grows for as long as that reader stays (R26a).
"""
from __future__ import annotations

import logging
import os
import sqlite3
import signal
import time

from jobpool import bounds, proctree
from jobpool.forked import Forked
from jobpool.store.sqlite import statements as sql
log = logging.getLogger(__name__)

#: Seconds between checkpoints.
INTERVAL = 0.1
#: The longest a checkpoint that starts the WAL over waits for readers and the
#: writer, seconds (it holds new writers back meanwhile).
RESTART_WAIT = 0.01
#: The longest pause before a restart that a reader refused is tried again, seconds.
RESTART_RETRY_MAX = 5.0
#: After the WAL could not start over for this long, seconds, the checkpointer warns
#: (``JOBPOOL_WAL_WARN_AFTER`` sets it: the tests' knob).
PINNED_WARN_AFTER = bounds.WAL_WARN_AFTER
#: What a WAL frame adds to its page, bytes.
FRAME_HEADER_BYTES = 24
#: WAL size past which the checkpoint also starts the file over, bytes.
RESTART_BYTES = sql.WAL_RESTART_BYTES
#: Below this many times ``RESTART_BYTES`` of room, the disk counts as tight (R26a).
TIGHT_ROOM_FACTOR = 8
#: The least a WAL is let grow to on a tight disk before it is emptied, bytes.
MIN_WAL_BYTES = 64 * 1024
#: The page size wal_settings counts in (a store's own may be smaller: then it
#: checkpoints sooner, never later, than the bound).
PAGE_BYTES = 4096


class Checkpointer:
    """The checkpoint loop in a process of its own, forked by the supervisor.

    A process, not a thread: the supervisor forks a child for every slot, and a
    fork taken while another thread holds a lock (SQLite's, malloc's) hands the
    child a lock nobody will release. With the checkpointer out of process the
    supervisor has one thread at every fork, and checkpoints run truly beside
    the claims instead of sharing the interpreter with them."""

    def __init__(self, path: str, interval: float = INTERVAL) -> None:
        self.path = path
        self.interval = interval
        self._process: Forked | None = None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def start(self) -> None:
        self._process = Forked.start(_checkpoint_loop, self.path, self.interval, os.getpid())

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is not None:
            process.stop(5.0, signal.SIGTERM)


def _checkpoint_loop(path: str, interval: float, parent_pid: int) -> None:
    proctree.settle_forked(parent_pid, "jobpool-ckpt")
    try:
        conn = sqlite3.connect(path, isolation_level=None, timeout=RESTART_WAIT)
    except sqlite3.Error as exc:
        log.warning("checkpointer cannot open %s: %s", path, exc)
        return
    try:
        conn.execute(f"PRAGMA journal_size_limit={sql.WAL_KEEP_BYTES}")
        checkpoints = Checkpoints(conn, path, interval)
        while True:
            time.sleep(interval)
            checkpoints.step()
    finally:
        conn.close()


class Checkpoints:
    """What the checkpointer does every ``interval`` on its connection ``conn``.

    A WAL nobody has written to since the last look (its size and modification time
    unchanged) holds nothing a checkpoint could copy and has not grown, so an idle
    pool's checkpointer only looks at the file: a checkpoint takes the WAL index's
    locks and reads its header, ten times a second, for nothing. A write the file's
    time did not show (a kernel with coarse file times, two writes in one tick) waits
    for the next write to be copied, or for the pool's last checkpoint as it closes
    the store; the WAL cannot grow meanwhile."""

    #: ``step``'s answers.
    IDLE, COPIED, RESTARTED, FAILED = "idle", "copied", "restarted", "failed"

    def __init__(self, conn: sqlite3.Connection, path: str, interval: float) -> None:
        self.conn = conn
        self.frame_bytes = conn.execute("PRAGMA page_size").fetchone()[0] + FRAME_HEADER_BYTES
        self.restarts = Restarts(path, interval)
        self.wal = path + "-wal"
        self.folder = os.path.dirname(os.path.abspath(path))
        self._seen: object = object()  # never a state: the first step looks

    def step(self) -> str:
        """One look: ``IDLE`` (nothing written since the last), ``COPIED`` (a passive
        checkpoint), ``RESTARTED`` (the WAL was past its bound: a restart, or a
        truncation on a tight disk, was tried too), or ``FAILED`` (the store answered
        an error; the next step tries again, written to since or not)."""
        seen = wal_state(self.wal)
        if seen == self._seen:
            return self.IDLE
        self._seen = seen
        conn = self.conn
        try:
            _busy, frames, _copied = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            size = wal_size(self.wal)
            bound, tight = wal_bound(self.folder, size)
            # The frames in use, not the file: a WAL started over keeps its size
            # (up to journal_size_limit) and is written over from its start.
            if (size if tight else max(frames, 0) * self.frame_bytes) > bound \
                    and self.restarts.due(time.monotonic()):
                # On a tight disk the WAL's space goes back to the file system
                # (TRUNCATE), so the store itself has room to grow into.
                refused = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)" if tight
                                       else "PRAGMA wal_checkpoint(RESTART)").fetchone()[0]
                self.restarts.tried(time.monotonic(), bool(refused), size)
                return self.RESTARTED
        except sqlite3.Error as exc:
            # A busy or failing store is the main loop's to report (R26).
            self._seen = object()
            log.debug("checkpoint skipped: %s", exc)
            return self.FAILED
        return self.COPIED


class Restarts:
    """When the checkpointer next tries to start the WAL over, and the warning once a
    reader has kept it from doing so for ``PINNED_WARN_AFTER`` seconds."""

    def __init__(self, path: str, interval: float) -> None:
        self.path = path
        self.interval = interval  # the first pause after a refusal is twice this
        self.next_try = 0.0
        self.refusals = 0
        self.refused_since: float | None = None
        self.warned = False

    def due(self, now: float) -> bool:
        return now >= self.next_try

    def tried(self, now: float, refused: bool, wal_bytes: int) -> None:
        if not refused:
            if self.warned:
                log.warning("the WAL of %s starts over again: the transaction that held it "
                            "has ended", self.path)
            self.next_try, self.refusals, self.refused_since, self.warned = 0.0, 0, None, False
            return
        self.refusals += 1
        self.next_try = now + min(RESTART_RETRY_MAX, self.interval * 2 ** self.refusals)
        if self.refused_since is None:
            self.refused_since = now
        held = now - self.refused_since
        if not self.warned and held >= PINNED_WARN_AFTER:
            self.warned = True
            log.warning("the WAL of %s (%d MB) has not started over for %d s: another "
                        "connection keeps a transaction open on the store (most often a "
                        "read: a program or a shell that began one and has not ended it). "
                        "Until it ends, the WAL grows and every pool on the store slows "
                        "down", self.path, wal_bytes // 2**20, held)


def wal_state(wal: str) -> tuple[int, int] | None:
    """The WAL file's size and modification time (ns), or None when there is none."""
    try:
        st = os.stat(wal)
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns


def wal_size(wal: str) -> int:
    state = wal_state(wal)
    return state[0] if state is not None else 0


def wal_bound(folder: str, wal_bytes: int) -> tuple[int, bool]:
    """How large the WAL may grow before it starts over, and whether space is tight.

    ``RESTART_BYTES`` while the disk has room; on a disk with little room (its free
    space plus what the WAL holds under ``TIGHT_ROOM_FACTOR`` times that), a quarter of
    that room: a checkpoint copies the WAL's pages into the store, which may have to
    grow by as much, so the WAL must never take the space the store needs to take it
    back (a WAL that filled the disk could then never be checkpointed)."""
    try:
        st = os.statvfs(folder)
    except OSError:
        return RESTART_BYTES, False
    room = st.f_bavail * st.f_frsize + wal_bytes
    if room >= TIGHT_ROOM_FACTOR * RESTART_BYTES:
        return RESTART_BYTES, False
    return max(MIN_WAL_BYTES, room // 4), True


def wal_settings(path: str, autocheckpoint: int, journal_limit: int) -> tuple[int, int]:
    """A connection's ``wal_autocheckpoint`` (pages) and ``journal_size_limit`` (bytes)
    for the store at ``path``: the defaults given while its disk has room; on a tight
    disk (``wal_bound``) a connection checkpoints its own commits once the WAL holds
    half the bound, and the WAL is trimmed to the bound when it starts over."""
    folder = os.path.dirname(os.path.abspath(path))
    bound, tight = wal_bound(folder, wal_size(path + "-wal"))
    if not tight:
        return autocheckpoint, journal_limit
    return max(8, bound // 2 // PAGE_BYTES), bound
