"""A child process forked the plain way (``os.fork``), watched through a descriptor
the selector can wait on, and reaped with ``os.wait4`` (STYLE habit 14).

A library's process object would do its own reaping: multiprocess polls every
child it knows whenever it starts another, and a child it reaped first loses the
peak RSS and CPU time ``wait4`` reports (R19a). Owning the fork keeps those, with
no reach into anyone's private attributes.
"""
from __future__ import annotations

import os
import select
import signal
import sys
import threading
import time
import traceback
from typing import Any, Callable, NoReturn

from jobpool import fork_safety
from jobpool.errors import JobpoolError


#: Sockets only the forking process may hold (a pool's metrics port and its clients):
#: every child ``Forked.start`` makes closes them first, so no helper keeps a port
#: bound or a client waiting after the supervisor let go of it.
_parent_only: set[Any] = set()


def parent_only(sock: Any, held: bool = True) -> None:
    """Register (``held``) or forget a socket that forked children must not keep."""
    if held:
        _parent_only.add(sock)
    else:
        _parent_only.discard(sock)


def leave(code: int) -> NoReturn:
    """End this process now with ``code``: its standard streams flushed (a reader gone
    or a stream closed is ignored), without the exit handlers or the teardown it
    inherited or would run (a forked process, R43; the CLI once its command is done)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def refuse_other_threads() -> None:
    """Before a pool forks anything: a ``JobpoolError`` naming the threads this process
    runs besides the caller's, if any. A fork copies the forking thread alone, so a lock
    another thread held at that moment stays held in the child for ever; the supervisor
    runs one thread (``Forked.start`` asserts it at every fork). A thread the app started
    at import (a tracing exporter, an error reporter, a cache warmer) made ``jobpool
    start`` end in that assertion's traceback; the job module's own process-wide
    services belong in an ``on_child_start`` hook, which starts them in each child."""
    current = threading.current_thread()
    others = [t for t in threading.enumerate() if t is not current]
    if not others:
        return
    names = ", ".join(repr(t.name) for t in others[:5]) + (", ..." if len(others) > 5 else "")
    raise JobpoolError(
        f"a pool forks its children from a process that runs one thread, and this one runs "
        f"{len(others)} more ({names}), started by the app or a library it imported: start "
        f"them in an on_child_start hook instead, so that each child runs its own")


class Forked:
    """One forked child: its pid and a ``sentinel`` fd that is readable once it exits."""

    __slots__ = ("pid", "sentinel", "returncode")

    def __init__(self, pid: int, sentinel: int) -> None:
        self.pid = pid
        self.sentinel = sentinel
        self.returncode: int | None = None

    @classmethod
    def start(cls, target: Callable[..., Any], *args: Any, keep: tuple[int, ...] = ()) -> "Forked":
        """Fork; the child runs ``target(*args)`` and exits (0, or 1 if it raised),
        never returning into the caller's code.

        R42/R43: every SQLite connection of this process is released first, so the
        child inherits no SQLite state of a store; the child keeps descriptors 0-2
        and ``keep`` only (the pipe its target talks over), and no mapping of a
        store's files. Its target opens whatever else it needs itself.

        Only from a process running one thread: a fork copies the forking thread
        alone, and a lock another thread held (SQLite's, malloc's, logging's) would
        stay held in the child for ever. A supervisor keeps to one thread (its
        checkpointer and dashboard are processes); this checks it at every fork."""
        assert threading.active_count() == 1, \
            f"forking with {threading.active_count()} threads running"
        read_end = write_end = -1
        pidfd_open = getattr(os, "pidfd_open", None)
        if pidfd_open is None:
            # No pidfds: a pipe whose write end only the child holds reads EOF at its exit.
            read_end, write_end = os.pipe()
        fork_safety.release_before_fork()
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                for sock in list(_parent_only):
                    sock.close()  # the object's close: nothing closes its number twice
                _parent_only.clear()
                fork_safety.close_inherited(keep + ((write_end,) if write_end >= 0 else ()))
                target(*args)
                code = 0
            except BaseException:  # noqa: BLE001 - report, then leave with a status
                traceback.print_exc()
            finally:
                leave(code)
        if pidfd_open is not None:
            return cls(pid, pidfd_open(pid))
        os.close(write_end)
        return cls(pid, read_end)

    def reap(self, block: bool = True) -> tuple[int, Any] | None:
        """``(exit code as Process.exitcode has it, rusage)`` once it has exited, else None."""
        pid, status, usage = os.wait4(self.pid, 0 if block else os.WNOHANG)
        if pid == 0:
            return None
        self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode, usage

    def wait(self, timeout: float) -> bool:
        """Reap it if it exits within ``timeout`` seconds; True if it did."""
        end = time.monotonic() + timeout
        while self.returncode is None:
            if self.reap(block=False) is not None:
                return True
            left = end - time.monotonic()
            if left <= 0 or self.sentinel < 0:
                return False
            # The sentinel turns readable the moment it exits: no polling interval
            # to wait out (a pool's stop waits for every child it closed).
            select.select([self.sentinel], [], [], left)
        return True

    def stop(self, timeout: float, signum: int | None = None) -> None:
        """Send ``signum`` (if any), give it ``timeout`` seconds to exit, then SIGKILL;
        reaped and closed either way."""
        if signum is not None and self.returncode is None:
            try:
                os.kill(self.pid, signum)
            except ProcessLookupError:
                pass
        if not self.wait(timeout):
            self.kill()
            self.wait(1.0)
        self.close()

    def kill(self) -> None:
        if self.returncode is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def close(self) -> None:
        if self.sentinel >= 0:
            os.close(self.sentinel)
            self.sentinel = -1
