"""Rows another transaction holds, come back for (PostgreSQL).

A write that must reach every row of a set (a batch cancel's members, a newly limited
name's rows) would wait for a row a pool's turn holds while it holds rows that turn
may want next: a deadlock. Such a write takes what nobody holds (``SKIP LOCKED``),
commits, and comes back for the rest in short transactions of its own, each after a
pause in which the holding turn commits (a turn holds a row for one statement, or a
limited turn until its pool lands it), until none is left or its patience runs out.
"""
from __future__ import annotations

import time
from typing import Any, Callable, TypeVar

T = TypeVar("T")

#: The first pause before coming back, doubled each time up to ``LONGEST_PAUSE``.
FIRST_PAUSE = 0.002
LONGEST_PAUSE = 0.1


def until_none_left(store: Any, what: str, step: Callable[[Any], tuple[int, T]],
                    patience: float, gave_up: Callable[[int], Exception]) -> T:
    """Run ``step(conn)`` in transactions of ``store``'s own (``what`` names them),
    each after a pause, until the number of rows it says are left (the first of the
    two it returns) is none; then the second. After ``patience`` seconds with rows
    still left, ``gave_up(left)`` is raised."""
    deadline = time.monotonic() + patience
    pause = FIRST_PAUSE
    while True:
        time.sleep(pause)
        pause = min(pause * 2, LONGEST_PAUSE)
        left, result = store.transaction(what, step)
        if not left:
            return result
        if time.monotonic() > deadline:
            raise gave_up(left)
