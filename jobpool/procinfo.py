"""Facts about processes the supervisor needs: who owns a lease, whether that owner
is still alive (R24), how a child ended (R19), and how much memory it holds.

Linux-specific where it reads /proc; elsewhere the answers degrade to "unknown".
"""
from __future__ import annotations

import os
import select
import signal
import socket
from typing import Any


def host_id() -> str:
    """This host's name in the store: ``$JOBPOOL_HOST_ID`` or the hostname.

    Pools that share a host id judge each other's processes directly (R24); pools
    of different ids only by their heartbeats (R24b). Set it where hostnames are
    not unique (containers that share one), or to run two "hosts" on one machine."""
    return os.environ.get("JOBPOOL_HOST_ID") or socket.gethostname()


def owner_identity() -> str:
    """``host:pid:start`` — enough for a later supervisor on this host to tell we died (R24)."""
    return f"{host_id()}:{os.getpid()}:{process_start_time(os.getpid())}"


def process_start_time(pid: int) -> str:
    """The kernel's start time of ``pid`` (clock ticks since boot), or '' if unknown."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return ""
    # The command name (field 2) may hold spaces; fields after it are split safely.
    return stat.rsplit(b")", 1)[1].split()[19].decode()


#: The largest pid any Linux gives (``pid_max`` is at most 2**22; ``kill`` takes a
#: 32-bit ``pid_t``).
PID_MOST = 2**31 - 1


def _owner_pid(owner: Any) -> int | None:
    """The pid of a supervisor of this host that ``owner`` (``host:pid:start``) names,
    or None."""
    if not isinstance(owner, str):
        return None
    host, _, rest = owner.partition(":")
    pid_text = rest.partition(":")[0]
    if (host != host_id() or not pid_text.isascii() or not pid_text.isdigit()
            or len(pid_text) > 10 or not 0 < int(pid_text) <= PID_MOST):
        return None
    return int(pid_text)


def owner_is_dead(owner: str) -> bool:
    """True when ``owner`` was a supervisor on this host whose process is gone (R24).
    An owner that names no pid of this host (not text, a pid past any ``pid_t``, digits
    other than ASCII's: a row written by hand, R44) is not judged."""
    pid = _owner_pid(owner)
    if pid is None:
        return False
    start = owner.split(":", 2)[2] if owner.count(":") >= 2 else ""
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass
    # The pid exists; it is our dead owner only if it is a different, newer process.
    current = process_start_time(pid)
    return bool(start) and bool(current) and current != start


def owner_exited(owner: str) -> bool:
    """True when ``owner`` was a supervisor on this host that has exited: its process
    is gone or reused (``owner_is_dead``), or a zombie its parent has not reaped yet."""
    if owner_is_dead(owner):
        return True
    pid = _owner_pid(owner)
    if pid is None:
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return False  # no /proc here: alive as far as anyone can tell
    return stat.rsplit(b")", 1)[1].split()[0] == b"Z"


def exit_cause(code: int) -> str:
    """How a child ended, in words for ``last_error`` (R19); ``code`` as Process.exitcode."""
    if code < 0:
        return f"child killed by {exit_status_text(code)}"
    return f"child exited with status {code}"


def exit_status_text(code: int) -> str:
    if code < 0:
        try:
            return signal.Signals(-code).name
        except ValueError:
            return f"signal {-code}"
    return str(code)


def rss_bytes(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/statm", "rb") as fh:
            return int(fh.read().split()[1]) * _PAGE_SIZE
    except (OSError, ValueError, IndexError):
        return None


_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def readable(fd: int) -> bool:
    return bool(select.select([fd], [], [], 0)[0])
