"""Pick the compiled parts (``_core``) when built, else their pure twins.

What ``_core`` compiles: the SQLite driver's connection and claim codec (taken by
``store/sqlite/claimer.py`` through ``NAME``), the VFS every store connection opens
through (``WAL_VFS``), the supervisor's slot table, its pump
(``_core.Pump``, chosen by ``supervisor/pump.make``) and its
reader and writer of the pipes' messages (R68's success frame), and a child's look after
every job (``JobEnd``: R20's signal state, settings and limits, R40's look for a child
process, R43's at the pipes; ``OpenFiles`` at the standard streams' files),
and a producer's wake-ups of the pools (``wake``, R11).
``JOBPOOL_PURE=1`` forces the twins (for debugging, and so the test suite can run
every claimer test against both). Both stay importable for the tests.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING

from jobpool import _core_py
from jobpool.lifecycle import (CANCEL, CRASH, DEFER, DONE, ERROR, FATAL, INTERRUPTED, KIND_NAMES,
                               LEASE_SLACK, RELEASE, RESCHEDULE, RETRY, TIMEOUT)

if TYPE_CHECKING:
    from jobpool._core_py import (WAL_VFS, JobEnd, Limits, OpenFiles, SlotTable, has_children,
                                  read_message, wake, write_message)
    NAME = "pure"
else:
    _impl = _core_py
    #: Which SQLite driver this process's claimers use: ``compiled`` or ``pure``.
    NAME = "pure"
    if os.environ.get("JOBPOOL_PURE", "") not in ("1", "true", "yes"):
        try:
            from jobpool import _core as _impl  # type: ignore[no-redef]
            NAME = "compiled"
        except ImportError:
            pass
    SlotTable = _impl.SlotTable
    #: R68: a child's message read, a success frame's fields taken (in C when built).
    read_message = _impl.read_message
    #: A message onto a pipe, its length prefix with it (one system call when built).
    write_message = _impl.write_message
    #: R43: whether a job pointed a standard stream elsewhere (``fstat`` in C when built).
    OpenFiles = _impl.OpenFiles
    #: R20: whether a job changed a resource limit (``getrlimit`` in C when built).
    Limits = _impl.Limits
    #: R40: whether this process has a child (``waitid`` in C when built).
    has_children = _impl.has_children
    #: R20, R40, R43: a child's look after each job, in one call (in C when built).
    JobEnd = _impl.JobEnd
    #: R11: an enqueue's wake-ups (``sendto`` in C when built: no exception per call).
    wake = _impl.wake
    #: The SQLite VFS a store's connections open through when the core is built (each
    #: commit's WAL frames in one write, ``_walbuf.h``); None: SQLite's own.
    WAL_VFS = _impl.WAL_VFS

__all__ = ["NAME", "SlotTable", "read_message", "write_message", "OpenFiles", "Limits", "has_children",
           "JobEnd", "wake", "WAL_VFS",
           "LEASE_SLACK", "KIND_NAMES", "DONE", "ERROR", "FATAL", "CRASH", "TIMEOUT", "RETRY",
           "DEFER", "RESCHEDULE", "RELEASE", "CANCEL", "INTERRUPTED"]
