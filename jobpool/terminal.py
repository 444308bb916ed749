"""A pool and the terminal it was started from (R27): closing the terminal stops a
foreground pool, and nothing the pool or its jobs write afterwards fails for it.

A shell user who closes the window a ``jobpool start`` runs in expects the pool to
go with it, the way any foreground program does; left running, it is an orphan
nobody watches. So SIGHUP has two meanings, told apart by what the pool was
started with:

- with a controlling terminal, it is the terminal hanging up: the pool drains and
  stops, as on SIGTERM (R25);
- without one (a service, a container, ``setsid``), nothing can hang up, and it is
  the traditional "reload" of a daemon: apply the operators' requests now (R27);
- ignored at start (``nohup jobpool start``), it stays ignored: the user asked for
  the pool to outlive the terminal.

SIGUSR1 always means reload, whatever the pool was started with.

Once a terminal has hung up, every write to it fails with EIO. A log line, the
dashboard's next frame or a job's ``print`` must not turn that into a crash or a
failed attempt during the drain, so each process of the pool points the
descriptors it had on the terminal at ``/dev/null`` (the supervisor when it sees
the hang-up, and forwards it to its children, which are in process groups of
their own and so are not told by the kernel).
"""
from __future__ import annotations

import os
import signal
from collections.abc import Iterable

#: The standard descriptors a process may have on its terminal.
STANDARD_FDS = (0, 1, 2)


def has_controlling_terminal() -> bool:
    """True when this process has a controlling terminal (one that can hang up)."""
    try:
        fd = os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY)
    except OSError:
        return False
    os.close(fd)
    return True


def hangup_ignored() -> bool:
    """True when SIGHUP came ignored (``nohup``): the pool keeps it so."""
    return signal.getsignal(signal.SIGHUP) == signal.SIG_IGN


def terminal_fds(fds: Iterable[int] = STANDARD_FDS) -> tuple[int, ...]:
    """Which of ``fds`` are on a terminal now (asked before any hang-up: after it,
    ``isatty`` on the dead terminal says no)."""
    found = []
    for fd in fds:
        try:
            if os.isatty(fd):
                found.append(fd)
        except OSError:
            pass
    return tuple(found)


def point_at_null(fds: Iterable[int]) -> None:
    """Make ``fds`` write to ``/dev/null`` (and read end-of-file), so a write after
    the terminal hung up neither fails with EIO nor blocks."""
    fds = tuple(fds)
    if not fds:
        return
    null = os.open(os.devnull, os.O_RDWR)
    try:
        for fd in fds:
            try:
                os.dup2(null, fd)
            except OSError:
                pass  # closed meanwhile: nothing writes there
    finally:
        if null not in fds:
            os.close(null)


def detach_on_hangup() -> None:
    """For a process the pool forks (a child, a hook, the dashboard): on SIGHUP,
    point its terminal descriptors at ``/dev/null`` and carry on; the supervisor
    decides whether the pool stops. Without a terminal, SIGHUP is ignored."""
    fds = terminal_fds()
    if not fds:
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        return
    signal.signal(signal.SIGHUP, lambda signum, frame: point_at_null(fds))
