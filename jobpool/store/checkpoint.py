"""Keeps a supervisor's WAL bounded without stalling its hot path (R26a).

The core's connection runs with automatic checkpoints off; this thread, on its
own connection, runs a PASSIVE checkpoint every ``interval`` seconds. PASSIVE
never waits on readers or writers, and SQLite releases the GIL while it copies
pages and fsyncs, so claims and settles go on meanwhile.

PASSIVE alone cannot bound the file under steady load: SQLite starts the WAL
over only when a writer begins while every frame is already copied, and a pool
that writes every few hundred microseconds never leaves such a moment. So once
the file passes ``RESTART_BYTES`` the thread runs a RESTART checkpoint, which
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
import threading

from jobpool.store import sql

log = logging.getLogger(__name__)

#: Seconds between checkpoints.
INTERVAL = 0.1
#: WAL size past which the checkpoint also starts the file over, bytes.
RESTART_BYTES = sql.WAL_RESTART_BYTES


class Checkpointer(threading.Thread):
    def __init__(self, path: str, interval: float = INTERVAL) -> None:
        super().__init__(name="jobpool-checkpointer", daemon=True)
        self.path = path
        self.interval = interval
        self._stop_event = threading.Event()

    def run(self) -> None:
        try:
            conn = sqlite3.connect(self.path, isolation_level=None, timeout=0.2,
                                   check_same_thread=False)
        except sqlite3.Error as exc:
            log.warning("checkpointer cannot open %s: %s", self.path, exc)
            return
        try:
            conn.execute(f"PRAGMA journal_size_limit={sql.WAL_KEEP_BYTES}")
            wal = self.path + "-wal"
            while not self._stop_event.wait(self.interval):
                try:
                    conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                    if os.path.exists(wal) and os.path.getsize(wal) > RESTART_BYTES:
                        conn.execute("PRAGMA wal_checkpoint(RESTART)").fetchone()
                except sqlite3.Error as exc:
                    # A busy or failing store is the main loop's to report (R26).
                    log.debug("checkpoint skipped: %s", exc)
        finally:
            conn.close()

    def stop(self) -> None:
        self._stop_event.set()
        self.join(5.0)
