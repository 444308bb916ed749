"""A store's connections: one per thread of the process that uses it (R42).

A store object is shared the way applications share one: a module-level store in a
threaded web server, the default store that ``job.enqueue()`` writes to. A database
connection has one transaction state, so two threads on one connection would write
into each other's transactions; each thread therefore gets its own connection,
opened on its first use, and the store closes all of them. (A lock around each
transaction was the other choice: it serialises readers too, and a caller's
``connection=`` transaction cannot be held under it.)

A thread's connection is closed when the thread ends (a web server's request
threads, ``asyncio.to_thread``'s executors come and go): kept until the store closed,
600 short-lived threads held 600 connections, an SQLite store ran out of descriptors
and a PostgreSQL one out of server connections.

Across a fork the parent's connections are the parent's: the child opens its own
and abandons the inherited ones unfinalised (``fork_safety.abandon``), since closing
them would close descriptor numbers the child may have reused.
"""
from __future__ import annotations

import os
import threading
import weakref
from typing import Any, Callable, Generic, TypeVar

from jobpool import fork_safety

C = TypeVar("C")


class PerThread(Generic[C]):
    """The connections of one store: ``get()`` is the calling thread's."""

    def __init__(self, open_connection: Callable[[], C], close_connection: Callable[[C], None]) -> None:
        self._open = open_connection
        self._close = close_connection
        self._local = threading.local()
        self._lock = threading.Lock()
        self._open_now: list[C] = []
        #: (pid, generation): a thread's connection is current while its stamp matches.
        self._stamp = (os.getpid(), 0)

    def get(self) -> C:
        local = self._local
        conn = getattr(local, "conn", None)
        if conn is not None and local.stamp == self._stamp and self._stamp[0] == os.getpid():
            return conn
        return self._new(local)

    def _new(self, local: Any) -> C:
        pid = os.getpid()
        with self._lock:
            if self._stamp[0] != pid:
                # Forked: what was open belongs to the parent (R43), never closed here.
                for inherited in self._open_now:
                    fork_safety.abandon(inherited)
                self._open_now = []
                self._stamp = (pid, self._stamp[1] + 1)
            stamp = self._stamp
        conn = self._open()
        with self._lock:
            self._open_now.append(conn)
        # Only this thread's slot of the local holds the marker: it goes when the
        # thread ends (or its next connection replaces this one), and takes the
        # connection with it. Never at exit, nor in a forked child: the pid must match.
        marker = _ThreadSlot()
        weakref.finalize(marker, _thread_ended, weakref.ref(self), conn, pid).atexit = False
        local.conn, local.stamp, local.marker = conn, stamp, marker
        return conn

    def current(self) -> C | None:
        """The calling thread's connection if it has an open one, else None."""
        local = self._local
        if getattr(local, "conn", None) is not None and local.stamp == self._stamp \
                and self._stamp[0] == os.getpid():
            return local.conn
        return None

    def drop_current(self) -> None:
        """Forget the calling thread's connection (it broke); the next ``get`` opens anew."""
        conn = self.current()
        if conn is None:
            return
        self._local.conn = None
        with self._lock:
            if conn in self._open_now:
                self._open_now.remove(conn)
        try:
            self._close(conn)
        except Exception:  # noqa: BLE001 - it is broken already; dropping it is the point
            pass

    def open_now(self) -> list[C]:
        """The connections this process has open now, every thread's."""
        return list(self._open_now) if self._stamp[0] == os.getpid() else []

    def close_all(self) -> None:
        """Close every connection this process opened, other threads' too; each
        thread opens a new one on its next use."""
        if self._stamp[0] != os.getpid():
            return  # nothing here is ours (forked, and not used since)
        with self._lock:
            closing, self._open_now = self._open_now, []
            self._stamp = (self._stamp[0], self._stamp[1] + 1)
        # The caller's own first: a write lock it holds goes with it, so another
        # thread's statement waiting on that lock ends before its close waits for it.
        mine = getattr(self._local, "conn", None)
        closing.sort(key=lambda conn: conn is not mine)
        for conn in closing:
            self._close(conn)


class _ThreadSlot:
    """A marker a thread's connection lives as long as (see ``PerThread._new``)."""

    __slots__ = ("__weakref__",)


def _thread_ended(owner_ref: Any, conn: Any, pid: int) -> None:
    """Close the connection of a thread that ended, unless the store closed or
    dropped it already, or this is a forked child (the parent's, R43)."""
    owner = owner_ref()
    if owner is None or os.getpid() != pid:
        return
    with owner._lock:
        if not any(open_conn is conn for open_conn in owner._open_now):
            return
        owner._open_now = [c for c in owner._open_now if c is not conn]
    try:
        owner._close(conn)
    except Exception:  # noqa: BLE001 - nobody is left to tell; the store goes on
        pass
