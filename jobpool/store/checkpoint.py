"""Keeps a supervisor's WAL bounded without stalling its hot path (R26a).

The core's connection runs with automatic checkpoints off; this thread, on its
own connection, runs a PASSIVE checkpoint every ``interval`` seconds. PASSIVE
never waits on readers or writers, and SQLite releases the GIL while it copies
pages and fsyncs, so claims and settles go on meanwhile. ``journal_size_limit``
(set by the store) truncates the WAL file after a checkpoint resets it.
"""
from __future__ import annotations

import logging
import sqlite3
import threading

log = logging.getLogger(__name__)

#: Seconds between checkpoints.
INTERVAL = 0.5


class Checkpointer(threading.Thread):
    def __init__(self, path: str, interval: float = INTERVAL) -> None:
        super().__init__(name="jobpool-checkpointer", daemon=True)
        self.path = path
        self.interval = interval
        self._stop_event = threading.Event()

    def run(self) -> None:
        try:
            conn = sqlite3.connect(self.path, isolation_level=None, timeout=1.0,
                                   check_same_thread=False)
        except sqlite3.Error as exc:
            log.warning("checkpointer cannot open %s: %s", self.path, exc)
            return
        try:
            while not self._stop_event.wait(self.interval):
                try:
                    conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                except sqlite3.Error as exc:
                    # A busy or failing store is the main loop's to report (R26).
                    log.debug("checkpoint skipped: %s", exc)
        finally:
            conn.close()

    def stop(self) -> None:
        self._stop_event.set()
        self.join(5.0)
