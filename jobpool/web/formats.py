"""How the pages write times, sizes and an attempt's end (R47): filters of every template."""
from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import Any

from jinja2 import Environment

from jobpool.dashboard import duration
from jobpool.display import meta_text
from jobpool.snapshot import at_least


def relative(at: float | None, now: float | None = None) -> str:
    """A time as how far off it is: ``in 59m``, ``3s ago``, ``now``."""
    if at is None:
        return ""
    offset = at - (time.time() if now is None else now)
    if abs(offset) < 0.5:
        return "now"
    return f"in {duration(offset)}" if offset > 0 else f"{duration(-offset)} ago"


def mib(size: int | None) -> str:
    return "" if not size else f"{size / 1048576:.1f}"


def exit_code(status: str | None) -> str:
    """The exit status of an attempt's child when it exited (``0``, ``3``)."""
    return status if status is not None and status.lstrip("-").isdigit() else ""


def signal_name(status: str | None) -> str:
    """The signal that killed an attempt's child (``SIGKILL``, ``signal 64``)."""
    return "" if status is None or exit_code(status) else status


def seconds(value: Any) -> str:
    return "" if value is None else f"{value:.3f}"


def iso(at: float | None) -> str:
    """Unix seconds as a date-time picker's value, UTC (``2026-12-02T03:00:00``)."""
    if at is None:
        return ""
    return datetime.fromtimestamp(at, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")


def install(env: Environment) -> None:
    env.filters.update(relative=relative, mib=mib, exit_code=exit_code,
                       signal_name=signal_name, seconds=seconds, duration=duration, iso=iso,
                       at_least=at_least, meta_text=meta_text)
