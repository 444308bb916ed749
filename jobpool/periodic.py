"""Schedules of periodic jobs (R33): which occurrence is the latest one due.

A pool enqueues a periodic job's latest due occurrence once (the store's
``periodic`` table arbitrates between pools), so a pool that was down for a day
runs one catch-up occurrence, not every one it missed. Cron expressions are read
in the host's local time, as cron itself does.
"""
from __future__ import annotations

import math
from datetime import datetime


class Every:
    """Every ``seconds``, on multiples of the interval since the Unix epoch."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def occurrence(self, now: float) -> float:
        return math.floor(now / self.seconds) * self.seconds

    def __repr__(self) -> str:
        return f"every {self.seconds:g} s"


class Cron:
    """A five-field cron expression, through croniter."""

    def __init__(self, expression: str) -> None:
        from croniter import croniter
        if not croniter.is_valid(expression):
            raise ValueError("not a valid cron expression")
        self.expression = expression

    def occurrence(self, now: float) -> float:
        from croniter import croniter
        start = datetime.fromtimestamp(now).astimezone()
        it = croniter(self.expression, start)
        # croniter's get_prev excludes ``start`` itself; an occurrence at exactly
        # ``now`` is due now.
        if croniter.match(self.expression, start.replace(second=0, microsecond=0)) and start.second == 0 \
                and start.microsecond == 0:
            return now
        return float(it.get_prev(float))

    def __repr__(self) -> str:
        return f"cron {self.expression!r}"
