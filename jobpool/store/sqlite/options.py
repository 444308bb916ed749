"""What opening an SQLite store takes, named without loading the store: how long a
connection waits on another writer's lock (R26, R26a) and the file mode of a new
store (R39). The factory, the CLI and the pool's configuration read these; the SQLite
store applies them."""
from __future__ import annotations

from typing import Any

#: R26a: how long a writer waits on another's lock before reporting it, seconds.
BUSY_TIMEOUT = 10.0
#: R11/R26: how long a supervisor's store call may wait on another writer's lock,
#: seconds. Short, so a held lock becomes a StoreError and a pause, never a loop
#: that stops hearing signals, timeouts and its children.
CLAIM_BUSY_TIMEOUT = 0.5

#: R39: permission bits of a store file this process creates. Payloads, results and
#: tracebacks may hold secrets, so only the owner reads it unless the caller says
#: otherwise (``connect(path, mode=0o660)`` for a producer and a pool sharing a group).
#: SQLite gives the ``-wal`` and ``-shm`` files the mode of the database file.
DEFAULT_MODE = 0o600


def validate_mode(mode: Any, *, allow_world_writable: bool = False,
                  typed: str | None = None,
                  allow_with: str = "allow_world_writable=True") -> int:
    """R39: a file mode for a new store: read and write bits only (``0o600``, ``0o660``).

    Whoever can write a store can run any registered job with arguments of their
    choosing, so a mode that lets others (not the owner, not the group) write is
    refused unless ``allow_world_writable``; a store is data, never a program, so
    execute bits are refused, and so are the setuid, setgid and sticky bits, which
    mean nothing for it. ``typed`` is how the caller wrote the mode (``--mode 4777``),
    quoted in the refusal (by default ``mode 0o4777``), and ``allow_with`` how
    it asks for a world-writable store."""
    if isinstance(mode, bool) or not isinstance(mode, int):
        raise ValueError(f"mode must be permission bits such as 0o600 or 0o660, not {mode!r}")
    shown = typed or (f"mode {mode:#o}" if mode >= 0 else f"mode {mode}")
    if not 0 <= mode <= 0o7777:
        raise ValueError(f"{shown}: not permission bits (0o600 or 0o660, say)")
    problems = []
    if mode & 0o7000:
        problems.append("the setuid, setgid and sticky bits mean nothing for a store file")
    if mode & 0o002 and not allow_world_writable:
        problems.append("others could write the store, and writing it means running any "
                        f"registered job (share it with a group, 660, or give {allow_with})")
    if mode & 0o111:
        problems.append("a store is never a program: no execute bits")
    if mode & 0o600 != 0o600:
        problems.append("the owner must be able to read and write the store")
    if problems:
        raise ValueError(f"{shown}: " + "; ".join(problems))
    return mode
