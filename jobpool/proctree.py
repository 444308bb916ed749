"""A job's processes are its own (R40): find, kill and reap what an attempt left behind.

A job may start processes (``subprocess.Popen`` without a wait, a daemonising
library, ``setsid``). Without care they outlive the attempt, the child and even the
pool, reparented to PID 1. Two kernel facilities keep them in reach, no cgroups
needed (they are not writable in every container):

- ``PR_SET_CHILD_SUBREAPER`` on the child and on the supervisor: an orphan is
  reparented to its nearest subreaper ancestor instead of PID 1, so whatever a job
  started is, at every moment, a descendant of its child, or (once the child was
  killed) of the supervisor.
- ``/proc/PID/task/TID/children``: the direct children of each thread, so the tree
  below a process is walked without scanning every process on the machine. With a
  subreaper, "no children" means "no descendants", which makes the check after a
  job that started nothing one small read.

Linux only; elsewhere the functions find nothing and kill nothing.
"""
from __future__ import annotations

import ctypes
import os
import signal
import sys
import time

from jobpool import terminal

_PR_SET_CHILD_SUBREAPER = 36
_PR_SET_PDEATHSIG = 1
_PR_SET_NAME = 15

#: Rounds of kill-and-reap before giving up on a tree that keeps forking.
KILL_ROUNDS = 50


def die_with_parent(parent_pid: int) -> None:
    """R24a: the kernel kills this process when its parent (the supervisor) dies."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass
    # The parent may have died before prctl took effect.
    if os.getppid() != parent_pid:
        os._exit(1)


def settle_forked(parent_pid: int, name: str) -> None:
    """What every process a supervisor forks does first: die with the supervisor
    (R24a), take its name, read end-of-file on its stdin (R43), and drop the
    supervisor's signal set-up that came with the fork. Its handlers only set the
    supervisor's flags, and its wake-up fd may be closed and reused here; a stop is
    SIGTERM's default, and Ctrl-C, which reaches the whole process group, is the
    supervisor's to act on (R25), as is a terminal's hang-up: here it only moves the
    process off the dead terminal (``terminal.detach_on_hangup``)."""
    die_with_parent(parent_pid)
    set_name(name)
    # R43: it reads no one's input (a job or a hook that reads stdin meets its end, as
    # multiprocessing's processes do): on the pool's terminal such a read stopped the
    # process, in a group that is not the terminal's foreground, until it was killed;
    # from a pipe it took the supervisor's input.
    terminal.point_at_null((0,))
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    terminal.detach_on_hangup()


def set_name(name: str) -> None:
    """Name this process as ``ps``, ``top`` and /proc/PID/comm show it (Linux: 15
    bytes at most), so a pool's processes tell apart: its children, checkpointer
    and dashboard."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_NAME, name.encode()[:15], 0, 0, 0)
        except (OSError, AttributeError):
            pass


def become_subreaper(enabled: bool = True) -> bool:
    """Make orphaned descendants of this process its children (Linux), or stop doing
    so (a pool run inside a longer-lived process gives it back); True if it took."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_CHILD_SUBREAPER, int(enabled), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def children(pid: int) -> list[int]:
    """The direct children of ``pid`` (of every one of its threads)."""
    found: list[int] = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as fh:
                found.extend(int(p) for p in fh.read().split())
        except (OSError, ValueError):
            continue
    return found


def descendants(pid: int, exclude: frozenset[int] = frozenset()) -> list[int]:
    """Every process below ``pid``, parents before their children; the subtrees of
    ``exclude`` (the caller's own known children) are left out."""
    order: list[int] = []
    stack = [p for p in children(pid) if p not in exclude]
    seen: set[int] = set()
    while stack:
        current = stack.pop()
        if current in seen:
            continue
        seen.add(current)
        order.append(current)
        stack.extend(children(current))
    return order


def kill_strays(exclude: frozenset[int] = frozenset(), *, count_ended: bool = False,
                spare: frozenset[int] = frozenset()) -> int:
    """SIGKILL every running descendant of this process but ``exclude``'s subtrees,
    reap those that are our own children, and return how many the attempt had left
    behind. ``spare``: processes left running and uncounted themselves (the helpers
    Python keeps for this process, ``python_helpers``); what runs below them is not.

    Killing a parent reparents its children to us (a subreaper), so this repeats
    until a round finds nothing running: a tree that forks while it is being
    killed cannot hide a process from the last round. An ended process (a zombie)
    is reaped but counted only with ``count_ended``: after a job, a subprocess it
    never waited for had finished on its own; after a child's death, an orphan
    that ended was killed with the attempt (by the group's SIGTERM)."""
    if not exclude and not _has_children():
        return 0  # the common case after a job, in one system call
    me = os.getpid()
    killed: set[int] = set()
    for _round in range(KILL_ROUNDS):
        found = [p for p in descendants(me, exclude) if p not in spare]
        strays = _running(found)
        if count_ended:
            killed.update(p for p in found if p not in strays)
        for stray in strays:
            try:
                os.kill(stray, signal.SIGKILL)
                killed.add(stray)
            except ProcessLookupError:
                pass
        # A spared helper is not reaped either: its owner waits for it itself, and
        # would fail (ECHILD) on one reaped here.
        _reap(set(children(me)) - exclude - spare)
        if not strays:
            break
        time.sleep(0.001 * _round)
    return len(killed)


#: Python's ``multiprocessing`` (and ``multiprocess``, its twin): the helper processes
#: it starts once and keeps for the life of the process that started them, as
#: (module, the module's instance, the attribute holding the helper's pid).
_HELPERS = tuple((f"{package}.{module}", instance, attribute)
                 for package in ("multiprocessing", "multiprocess")
                 for module, instance, attribute in (
                     ("forkserver", "_forkserver", "_forkserver_pid"),
                     ("resource_tracker", "_resource_tracker", "_pid")))


def python_helpers() -> frozenset[int]:
    """The helper processes Python's ``multiprocessing`` started for this process and
    keeps for its whole life (R40's amendment): the fork server (the "forkserver"
    start method, the default on Linux from Python 3.14) and the resource tracker
    ("spawn" and "forkserver"). They are the process's, not the job's that first
    needed them: killed after that job, the next job's pool failed in the child
    ("ChildProcessError: [Errno 10] No child processes": the fork server's owner
    asks after its pid) or warned that the tracker "died unexpectedly". Read from
    the modules only when a job imported them, and only if the pid is a child of
    this process's."""
    pids = set()
    for module_name, instance, attribute in _HELPERS:
        module = sys.modules.get(module_name)
        if module is None:
            continue
        pid = getattr(getattr(module, instance, None), attribute, None)
        if isinstance(pid, int) and pid > 0:
            pids.add(pid)
    if not pids:
        return frozenset()
    return frozenset(pids.intersection(children(os.getpid())))


def end_python_helpers() -> None:
    """End the helpers ``python_helpers`` names, at the end of the process they serve
    (a pool's child that retires or whose pool stops), so that none is left to the
    supervisor as an orphan to kill and count. Killed, not asked to stop: the resource
    tracker ends at the end of its pipe, which the fork server and whatever it forked
    hold too, so waiting for it could wait for ever. What they leave comes to this
    process (a subreaper): a worker the fork server forked and had not yet reaped, which
    is reaped here too, or the supervisor found it after the child and counted it."""
    helpers = python_helpers()
    if not helpers:
        return
    for pid in helpers:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass
    kill_strays()


def _running(pids: list[int]) -> list[int]:
    """Those of ``pids`` that are still running (not zombies, not gone)."""
    alive = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", "rb") as fh:
                state = fh.read().rsplit(b")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state not in (b"Z", b"X"):
            alive.append(pid)
    return alive


def _has_children() -> bool:
    """Whether this process has any child at all, running or not yet reaped.

    ``waitid`` with ``WNOWAIT`` only looks; it fails with ECHILD when there is no
    child. With this process a subreaper, no child means no descendant, so the
    walk of /proc can be skipped. Asked after every job: ``core.has_children``
    makes the call in C when the core is built (no exception raised when there is
    no child)."""
    global _core
    # Imported at the first call, not with this module: a producer opens a store, and
    # so this module, but never runs a job and need not load the core (then kept: an
    # import statement at every job cost twice the call).
    if _core is None:
        from jobpool import core as _core
    return _core.has_children()


#: ``jobpool.core``, once a job has ended here (``_has_children``).
_core = None


def _reap(pids: set[int]) -> None:
    """Collect killed children of ours so they do not linger as zombies."""
    for pid in pids:
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass
