"""A job's enqueue options: their defaults, their validation (R1, R1a, R41), and the
options of a name as this process registered it.

The store reads a name's registered options through ``options_of`` without
importing the job registry: the registry (``jobpool.jobs``) plugs its lookup in
when it is imported, so the store depends on this small module only, and a job's
options travel to the store as a ``JobOptions`` record.
"""
from __future__ import annotations

import math
from datetime import datetime, timedelta
from typing import Any, Callable, NamedTuple

from jobpool import bounds
from jobpool.errors import EnqueueError, RegistryError

#: Defaults for a job (and for enqueue-by-name of a name this process never registered).
DEFAULT_QUEUE = "default"
DEFAULT_PRIORITY = 0


class JobOptions(NamedTuple):
    """What an enqueue by name takes from the job this process registered under it."""

    serializer: str
    queue: str
    priority: int
    max_attempts: int
    timeout: float
    group_by: str | None = None   # R35/R36: the keyword argument naming a row's group
    #: R1: the job's ``jobs.Arguments`` (``problem(args, kwargs)`` says why a call
    #: would not bind to its function, ``refusal`` words it); None: not checked.
    arguments: Any = None
    #: R59: whether the job keeps what it returns (a chain step may ask for it).
    store_result: bool = False


def _nothing_registered(name: str) -> JobOptions | None:
    return None


_resolver: Callable[[str], JobOptions | None] = _nothing_registered


def set_resolver(resolver: Callable[[str], JobOptions | None]) -> None:
    """Called by the job registry at import: how a name's options are found."""
    global _resolver
    _resolver = resolver


def options_of(name: str) -> JobOptions | None:
    """The registered options of ``name`` in this process, or None (not registered)."""
    return _resolver(name)


#: Names that passed ``validate_name``: every enqueue checks its job and queue
#: name, and the character-by-character test was a tenth of a non-durable enqueue.
_valid_names: set[str] = set()


def validate_name(name: Any, field: str = "job name") -> str:
    """R1a: a job (or queue) name is non-empty printable text without spaces."""
    if type(name) is str and name in _valid_names:
        return name
    if not isinstance(name, str) or not name:
        raise RegistryError(f"{field} must be a non-empty string, not {name!r}")
    if len(name) > bounds.MAX_NAME_CHARS:
        raise RegistryError(f"{field} {name[:40]!r}... is {len(name)} characters, over the "
                            f"{bounds.MAX_NAME_CHARS} allowed (R41)")
    if not name.isprintable() or any(ch.isspace() for ch in name):
        raise RegistryError(f"{field} {name!r} must be printable text without spaces")
    if len(_valid_names) < 4096:
        _valid_names.add(name)
    return name


def validate_queue(queue: Any) -> str:
    """A queue name is a name (R1a) without ``:``, which ``--queues high:3`` reads
    as a weight."""
    validate_name(queue, "queue name")
    if ":" in queue:
        raise RegistryError(f"queue name {queue!r} must not contain ':' "
                            f"(--queues reads 'name:weight')")
    return queue


def validate_max_attempts(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise EnqueueError(f"max_attempts must be a positive integer, not {value!r}")
    if value > bounds.INT32_MAX:
        # R41: stored as a 32-bit integer by every store (PostgreSQL's `integer`).
        raise EnqueueError(f"max_attempts must be at most {bounds.INT32_MAX}, not {value}")
    return value


def validate_priority(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise EnqueueError(f"priority must be an integer, not {value!r}")
    problem = bounds.check_priority(value)
    if problem:
        raise EnqueueError(f"priority {problem}")
    return value


def validate_timeout(value: Any) -> float:
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if (isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0
            or not value <= 1e300):
        raise EnqueueError(f"timeout must be a positive number of seconds, not "
                           f"{bounds.number_text(value) if isinstance(value, int) else repr(value)}")
    return float(value)


def validate_chunk(value: Any) -> int:
    """R63, R41: how many ready rows of a name one slot may take at once (1: one, the
    default): a whole number from 1 to ``bounds.MAX_CHUNK``."""
    if not bounds.whole_within(value, 1, bounds.MAX_CHUNK):
        raise EnqueueError(f"chunk must be a whole number from 1 to {bounds.MAX_CHUNK}, "
                           f"not {value!r}")
    return value


def to_timestamp(value: datetime | float | int | None, field: str = "deadline") -> float | None:
    """A deadline as a Unix timestamp: datetime (naive means local time) or number."""
    if value is None:
        return None
    if isinstance(value, datetime):
        try:
            return value.timestamp()
        except (ValueError, OverflowError) as exc:  # datetime.min: "year 0 is out of range"
            raise EnqueueError(f"{field} {value!r} cannot be a Unix time: {exc}") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        raise EnqueueError(f"{field} must be a datetime or a Unix timestamp, not {value!r}")
    if isinstance(value, int) and not -1e300 <= value <= 1e300:
        return math.inf if value > 0 else -math.inf  # past any float: never, or long gone
    return float(value)
