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
"""
from __future__ import annotations

import logging
import os
import sqlite3
import signal
import time

from jobpool import proctree
from jobpool.forked import Forked
from jobpool.store import sql

log = logging.getLogger(__name__)

#: Seconds between checkpoints.
INTERVAL = 0.1
#: WAL size past which the checkpoint also starts the file over, bytes.
RESTART_BYTES = sql.WAL_RESTART_BYTES


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
        conn = sqlite3.connect(path, isolation_level=None, timeout=0.2)
    except sqlite3.Error as exc:
        log.warning("checkpointer cannot open %s: %s", path, exc)
        return
    try:
        conn.execute(f"PRAGMA journal_size_limit={sql.WAL_KEEP_BYTES}")
        wal = path + "-wal"
        while True:
            time.sleep(interval)
            try:
                conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                if os.path.exists(wal) and os.path.getsize(wal) > RESTART_BYTES:
                    conn.execute("PRAGMA wal_checkpoint(RESTART)").fetchone()
            except sqlite3.Error as exc:
                # A busy or failing store is the main loop's to report (R26).
                log.debug("checkpoint skipped: %s", exc)
    finally:
        conn.close()
