"""R69: how ``Handle.result`` waits for a job to finish: told by the store where it can
tell, looking again on a timer where it cannot.

A waiter is opened for one job after a first look found it unfinished, and closed when
the wait ends. ``wait(left)`` returns once the job may have finished (True: the store
said so) or the waiter's own interval passed, never later than ``left`` seconds (None:
the caller has no deadline) (False); the caller looks at the job either way, so a
notification that is lost or never sent costs time, never a wrong answer.
"""
from __future__ import annotations

import time


def interval(every: float, left: float | None) -> float:
    """How long one wait lasts: ``every`` seconds, but no longer than ``left``."""
    return max(0.0, every if left is None else min(every, left))


class Waiter:
    """What every waiter is: closed when the ``with`` block that waits ends."""

    def close(self) -> None:
        pass

    def __enter__(self) -> "Waiter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class PollingWaiter(Waiter):
    """A store that cannot tell (SQLite; PostgreSQL behind a transaction-mode pooler,
    which cannot LISTEN): the caller looks again every ``poll`` seconds."""

    told = False

    def __init__(self, poll: float) -> None:
        self.poll = poll

    def wait(self, left: float | None) -> bool:
        time.sleep(interval(self.poll, left))
        return False

    async def await_(self, left: float | None) -> bool:
        import asyncio  # only async callers pay for it
        await asyncio.sleep(interval(self.poll, left))
        return False
