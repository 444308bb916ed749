"""How the pages write times, sizes and an attempt's end (R47): filters of every template."""
from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import Any

from jinja2 import Environment

from jobpool import bounds

from jobpool.dashboard import duration
from jobpool.display import meta_text
from jobpool.snapshot import at_least


def relative(at: float | None, now: float | None = None) -> str:
    """A time as how far off it is: ``in 59m``, ``3s ago``, ``now``."""
    if not bounds.finite_number(at):
        return ""  # none, or no time a row should hold (R44)
    offset = at - (time.time() if now is None else now)
    if abs(offset) < 0.5:
        return "now"
    return f"in {duration(offset)}" if offset > 0 else f"{duration(-offset)} ago"


def number(value: Any) -> float | None:
    """``value`` as a finite number, or None. An attempt line is data (R44): written by
    hand or by an older release, a column may hold text where a number belongs, which
    a page shows as nothing rather than fail on."""
    return float(value) if bounds.finite_number(value) else None


def mib(size: Any) -> str:
    found = number(size)
    return "" if not found else f"{found / 1048576:.1f}"


def exit_code(status: Any) -> str:
    """The exit status of an attempt's child when it exited (``0``, ``3``)."""
    return status if isinstance(status, str) and status.lstrip("-").isdigit() else ""


def signal_name(status: Any) -> str:
    """The signal that killed an attempt's child (``SIGKILL``, ``signal 64``)."""
    return "" if not isinstance(status, str) or exit_code(status) else status


def seconds(value: Any) -> str:
    found = number(value)
    return "" if found is None else f"{found:.3f}"


def wall(attempt: Any) -> str:
    """An attempt's wall time, its end less its start (``seconds``)."""
    start, end = number(attempt.get("started_at")), number(attempt.get("ended_at"))
    return "" if start is None or end is None else seconds(end - start)


def iso(at: float | None) -> str:
    """Unix seconds as a date-time picker's value, UTC (``2026-12-02T03:00:00``)."""
    if not bounds.finite_number(at):
        return ""
    try:
        return datetime.fromtimestamp(at, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    except (OverflowError, OSError, ValueError):
        return ""  # past any calendar's year (R44: a row written by hand)


def install(env: Environment) -> None:
    env.filters.update(relative=relative, mib=mib, exit_code=exit_code,
                       signal_name=signal_name, seconds=seconds, wall=wall, duration=duration,
                       iso=iso,
                       at_least=at_least, meta_text=meta_text)
