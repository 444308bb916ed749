"""Schedules of periodic jobs (R33): which occurrence is the latest one due.

A pool enqueues a periodic job's latest due occurrence once (the store's
``periodic`` table arbitrates between pools), so a pool that was down for a day
runs one catch-up occurrence, not every one it missed.

A cron expression is read on the wall clock of its job's ``tz`` (UTC unless the
job names a zone), the same on every host whatever the host's own zone. Where a
daylight-saving change bends the wall clock, an occurrence still happens once:
a time the clock skips (02:30 on the night it jumps from 02:00 to 03:00) runs
right after the jump, at 03:00; a time the clock shows twice (02:30 on the night
it falls back) runs the first time only.
"""
from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone

#: The zone of a cron expression whose job names none.
DEFAULT_TZ = "UTC"

#: How far ahead registration looks for a cron expression's next occurrence. The
#: rarest date a five-field expression can name, 29 February, comes back within 8
#: years (2096, then 2104); an expression with no occurrence this far ahead never
#: fires (30 February, 31 April, a seventh-field year that is over) and is refused.
LOOK_AHEAD_YEARS = 10


class Every:
    """Every ``seconds``, on multiples of the interval since the Unix epoch."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def occurrence(self, now: float) -> float:
        return math.floor(now / self.seconds) * self.seconds

    def next_occurrence(self, now: float) -> float:
        """The first occurrence after ``now`` (what a pool enqueues next)."""
        return self.occurrence(now) + self.seconds

    def __repr__(self) -> str:
        return f"every {self.seconds:g} s"


class Cron:
    """A five-field cron expression (croniter) on the wall clock of a time zone."""

    def __init__(self, expression: str, tz: str | None = None) -> None:
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError  # only where a cron is declared

        from croniter import croniter
        if not croniter.is_valid(expression):
            raise ValueError("not a valid cron expression")
        try:
            self.zone = ZoneInfo(tz or DEFAULT_TZ)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"unknown time zone {tz!r}") from None
        self.expression = expression
        self.tz = tz or DEFAULT_TZ
        #: False when the job named no zone (it runs on UTC; see ``zone_warning``).
        self.named_zone = tz is not None
        self._check_fires()

    def _check_fires(self) -> None:
        """Refuse an expression with no occurrence in the next ``LOOK_AHEAD_YEARS``."""
        from croniter import CroniterError, croniter
        wall = datetime.now(self.zone).replace(tzinfo=None)
        try:
            croniter(self.expression, wall,
                     max_years_between_matches=LOOK_AHEAD_YEARS).get_next(datetime)
        except CroniterError:
            raise ValueError(f"it never fires (no occurrence in the next "
                             f"{LOOK_AHEAD_YEARS} years)") from None

    def occurrence(self, now: float) -> float:
        """The latest occurrence at or before ``now`` (Unix seconds)."""
        from croniter import croniter
        wall = datetime.fromtimestamp(now, self.zone).replace(tzinfo=None)
        # Walk back over the wall clock's own times, then place each on the time
        # line: an occurrence a jump moved later than now is not due yet.
        it = croniter(self.expression, wall + timedelta(minutes=1))
        while True:
            candidate = self._instant(it.get_prev(datetime))
            if candidate <= now:
                return candidate

    def next_occurrence(self, now: float) -> float:
        """The first occurrence after ``now`` (Unix seconds), placed on the time line
        as ``occurrence`` places them."""
        from croniter import croniter
        it = croniter(self.expression, datetime.fromtimestamp(now, self.zone).replace(tzinfo=None))
        while True:
            candidate = self._instant(it.get_next(datetime))
            if candidate > now:
                return candidate

    def _instant(self, wall: datetime) -> float:
        """Unix seconds of a wall-clock time in this zone: its first occurrence when
        the clock shows it twice, the end of the jump when the clock skips it."""
        placed = wall.replace(tzinfo=self.zone, fold=0)
        utc = placed.astimezone(timezone.utc)
        if utc.astimezone(self.zone).replace(tzinfo=None) == wall:
            return utc.timestamp()
        # Skipped by a jump forward: the first wall time that exists after it.
        later = wall
        while True:
            later += timedelta(minutes=1)
            placed = later.replace(tzinfo=self.zone, fold=0)
            utc = placed.astimezone(timezone.utc)
            if utc.astimezone(self.zone).replace(tzinfo=None) == later:
                return utc.timestamp()

    def __repr__(self) -> str:
        return f"cron {self.expression!r} in {self.tz}"


def zone_warning(name: str, schedule: object) -> str | None:
    """What to tell an operator whose cron job names no zone on a host that is not
    on UTC: such a job used to run on the host's clock and now runs on UTC."""
    if not isinstance(schedule, Cron) or schedule.named_zone:
        return None
    if datetime.now().astimezone().utcoffset() == timedelta(0):
        return None
    return (f"periodic job {name} ({schedule.expression!r}) names no tz=, so it runs on UTC, "
            f"not this host's clock; give it tz=\"Area/City\" to run on a local clock")
