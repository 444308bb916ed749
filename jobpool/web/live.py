"""The overview's one shared snapshot (R47): read from the store at most once every
``EVERY`` seconds however many pages poll it, so a hundred open overviews cost the
store what one does.

A reader that finds the snapshot older than that reads it anew while the others wait
for that read (one lock) and then share it; a failed read is not kept, so the next
poll tries again.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple

from jobpool.snapshot import Snapshot, read_snapshot

#: The oldest a snapshot a page is given may be, in seconds.
EVERY = 1.5
#: How often an open overview asks for the snapshot (htmx's ``every``), in seconds, when
#: its stream of server-sent events (``stream``) is not delivering.
POLL = 2


class Frame(NamedTuple):
    """What the overview shows: one ``Store.dashboard`` read and the paused queues."""

    snapshot: Snapshot
    paused: list[str]


class SharedSnapshot:
    """The latest ``Frame`` of ``store``, refreshed when older than ``every``."""

    def __init__(self, store: Any, every: float = EVERY,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.store = store
        self.every = every
        self.clock = clock
        self.reads = 0
        self._lock = threading.Lock()
        self._frame: Frame | None = None
        self._at = 0.0
        #: Called after ``forget`` (the stream's hub refreshes at once).
        self.forgotten: list[Callable[[], None]] = []

    def get(self) -> Frame:
        with self._lock:
            if self._frame is None or self.clock() - self._at >= self.every:
                self._frame = Frame(read_snapshot(self.store), self.store.paused_queues())
                self._at = self.clock()
                self.reads += 1
            return self._frame

    def forget(self) -> None:
        """After an action from this dashboard: the next page reads anew, so the one
        who acted sees what they did."""
        with self._lock:
            self._frame = None
        for listener in self.forgotten:
            listener()
