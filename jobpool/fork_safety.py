"""What a fork may carry into a child, and what it must not (R42, R43).

Two hazards come with ``os.fork`` in a process that holds stores:

- SQLite keeps per-process state for every file it has open (its table of inodes
  and their POSIX locks, the mapping of the ``-shm`` wal-index). A child inherits
  a copy that describes locks it does not hold and mappings it shares with its
  parent; a connection the child opens later to the same file builds on that copy.
  So a process that forks on purpose (the supervisor, for its children and helpers)
  first *releases* every SQLite connection it holds (``release_before_fork``): at
  the instant of the fork no SQLite state for a store exists, and each connection
  is opened again on its next use.
- Descriptors: a child that keeps the store's files, another slot's pipe or a
  PostgreSQL socket can write garbage through them, or close them and let the
  number be reused, so ``close_inherited`` keeps only what it is told to keep.

An object that belonged to the parent must never be finalised in the child either:
closing an inherited connection would close a descriptor number the child may have
reused by then (or, for libpq, send a goodbye over the parent's socket).
``abandon`` keeps such objects referenced until the process ends with ``os._exit``.
"""
from __future__ import annotations

import ctypes
import os
import threading
import weakref
from typing import Any, Iterable, Protocol


class Releasable(Protocol):
    def release_before_fork(self) -> None:
        """Close every SQLite connection this object holds; reopen on next use."""


_holders: "weakref.WeakSet[Any]" = weakref.WeakSet()
#: Objects a child inherited from its parent: kept alive, never finalised here.
_abandoned: list[Any] = []

_libc: Any = None
try:
    # The process's own symbols, libc's among them (as proctree reads prctl): asking
    # ctypes.util.find_library instead runs ldconfig in a subprocess, about 10 ms at
    # every import of this module, in every process that opens a store.
    _libc = ctypes.CDLL(None, use_errno=True)
    _libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
    _libc.munmap.restype = ctypes.c_int
except (OSError, AttributeError):  # not a libc we can call: mappings stay (see unmap_store_files)
    _libc = None


def hold(obj: Releasable) -> None:
    """Register an object holding SQLite connections, released before every fork."""
    _holders.add(obj)


def release_before_fork() -> None:
    """Close every registered SQLite connection of this process (they reopen when used)."""
    for holder in list(_holders):
        holder.release_before_fork()


def _release_at_fork() -> None:
    """``os.fork``'s hook: a process of one thread that forks (a pre-forking web
    server's master, a ``multiprocessing`` pool's parent, a job) releases its stores'
    SQLite connections first, as a pool does. A worker forked from a process holding a
    connection built on its copy of SQLite's lock table, which described locks it did
    not hold: the parent's close then took the file as its last user and deleted the
    WAL under the worker, whose enqueues were lost.

    Only with one thread: another thread may be stepping a statement on a connection
    this would close under it (a claimer's has no guard: the process crashed), and it
    could open one again before the fork anyway. Never fails the fork: a connection it
    cannot close stays as it was."""
    if threading.active_count() != 1:
        return
    try:
        release_before_fork()
    except Exception:  # noqa: BLE001 - the fork goes on; the next use reopens or fails
        pass


os.register_at_fork(before=_release_at_fork)


def abandon(obj: Any) -> None:
    """Keep ``obj`` (inherited from the parent) alive until ``os._exit``, unfinalised."""
    if obj is not None:
        _abandoned.append(obj)


def close_inherited(keep: Iterable[int] = ()) -> None:
    """Close every descriptor above 2 except ``keep`` (R43), then drop the mappings of
    store files the fork copied."""
    low = 3
    for fd in sorted({fd for fd in keep if fd >= 3}):
        if fd > low:
            os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, 1 << 20)
    unmap_store_files()


def unmap_store_files() -> int:
    """Unmap every shared mapping of a SQLite ``-shm`` (wal-index) file: a child that
    wrote to its copy would write into the live wal-index of its parent's store.
    Returns how many were unmapped."""
    if _libc is None:
        return 0
    ranges = []
    try:
        with open("/proc/self/maps", "rb") as maps:
            for line in maps:
                fields = line.split(None, 5)
                name = fields[5].rstrip().removesuffix(b" (deleted)") if len(fields) == 6 else b""
                if fields[1][3:4] == b"s" and name.endswith(b"-shm"):
                    start, end = (int(x, 16) for x in fields[0].split(b"-"))
                    ranges.append((start, end))
    except OSError:
        return 0
    for start, end in ranges:
        _libc.munmap(start, end - start)
    return len(ranges)
