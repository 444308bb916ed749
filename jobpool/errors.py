"""One error family for mistakes, and the outcome exceptions jobs raise.

``JobpoolError`` and its children are raised *to* users and operators: a bad
argument, a file that is not a store, a store that cannot be reached. The CLI
turns any of them into one line on stderr and a non-zero exit.

``Retry``, ``Fatal``, ``Defer`` and ``Reschedule`` are raised *by* jobs to steer
how their attempt is settled (DESIGN.md section 4). They are control flow, not
errors, and are never logged as errors.
"""
from __future__ import annotations

from datetime import timedelta

from jobpool import bounds


class JobpoolError(Exception):
    """Base of every error jobpool raises for a user or operator mistake."""


class EnqueueError(JobpoolError, ValueError):
    """An enqueue was refused before anything was written (R1). ``item``: the position
    of the refused item in an ``enqueue_many`` (its message starts "item N:"), else None."""

    def __init__(self, *args: object, item: int | None = None) -> None:
        super().__init__(*args)
        self.item = item


class RegistryError(JobpoolError, ValueError):
    """A job definition is invalid, e.g. two functions under one name (R1a).

    Raised by whichever of jobpool's checks refused it, so its traceback ends in
    jobpool; ``@job`` then records where the job was declared (``filename``,
    ``lineno``: the user's decorator line), which the message ends with, as a
    ``SyntaxError``'s does, and which the CLI's one line names (R28)."""

    filename: str | None = None
    lineno: int | None = None

    @property
    def msg(self) -> str:
        """The message without the place."""
        return super().__str__()

    def __str__(self) -> str:
        if self.filename is None:
            return self.msg
        return f"{self.msg} ({self.filename}, line {self.lineno})"


class UnknownJobError(JobpoolError, LookupError):
    """A job name that no imported module registered."""


class StoreError(JobpoolError):
    """The store could not be read or written (locked, I/O, disk full...).

    Never fatal to a supervisor (R26): it backs off and tries again.
    """


class StoreSettingError(StoreError, ValueError):
    """A setting of how to open a store (its durability, a URL's schema or pooler) that
    is not one it takes: the same error on both stores, caught as either a store's
    error or a ``ValueError`` (SQLite raised the one, PostgreSQL the other)."""


class ReadOnlyStoreError(StoreError):
    """The store can be read but not written by this process (file mode, an immutable
    file, a read-only mount): a pool cannot run on it, so it refuses to start."""


class NotAStoreError(StoreError):
    """The file exists but is not a jobpool store; it is never written to."""


class CorruptStoreError(StoreError):
    """The file fails SQLite's checks; it is refused and never written to (R26a)."""


class JobNotFound(JobpoolError, LookupError):
    """No job with that id exists in the store."""


class BatchNotFound(JobpoolError, LookupError):
    """No batch has this id (R34): never made, or swept after it finished."""


class LeaseLostError(JobpoolError):
    """A running attempt asked the store for something its lease no longer allows
    (another pool reclaimed the job); the attempt's work is not this pool's to keep."""


class Interrupted(BaseException):
    """R37: raised by ``save_state()`` when the pool stops the job at this save point
    (a graceful stop, or a cancel). A ``BaseException``, so ``except Exception`` in a
    job does not swallow it: let it propagate and the job is back in line with its
    state, its attempt given back (a cancelled one is dead, "cancelled")."""

    def __init__(self, reason: str = "stop") -> None:
        super().__init__(reason)
        self.reason = reason


class JobFailed(JobpoolError):
    """``Handle.result()`` of a job that went dead; ``reason`` says why."""

    def __init__(self, job_id: int, reason: str) -> None:
        super().__init__(f"job {job_id} failed: {reason.splitlines()[0] if reason else 'dead'}")
        self.job_id = job_id
        self.reason = reason


class UnsafeResultError(JobpoolError):
    """A stored result asks to be unpickled, and nothing here trusts it to (R39)."""


def seconds(value: float | int | timedelta | None, field: str, *, allow_none: bool = True,
            bounded: bool = True) -> float | None:
    """Normalise a delay-like argument to seconds, naming ``field`` when it is wrong;
    ``bounded``: at most 10 years (R41), else any length (one past a float's is
    infinity)."""
    if value is None:
        if allow_none:
            return None
        raise EnqueueError(f"{field} is required")
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise EnqueueError(f"{field} must be a number of seconds or a timedelta, not {type(value).__name__}")
    if value != value or value in (float("inf"), float("-inf")):
        raise EnqueueError(f"{field} must be a finite number of seconds")
    if value < 0:
        raise EnqueueError(f"{field} must not be negative (got {bounds.number_text(value)})")
    if not bounded:
        return float(value) if value < 1e308 else float("inf")
    problem = bounds.check_delay(value)
    if problem:
        raise EnqueueError(f"{field} {problem}")
    return float(value)


class SoftTimeout(Exception):
    """Raised inside a job when its soft timeout passes (R20): time to clean up.

    The hard timeout still follows; a job that catches this and carries on is
    killed when it comes.
    """

    @classmethod
    def after(cls, limit: float) -> "SoftTimeout":
        """The one wording of a soft timeout, for plain and coroutine jobs alike."""
        return cls(f"soft timeout after {limit:g} s")


class JobOutcome(Exception):
    """Base of the exceptions a job raises to choose its outcome."""


class Retry(JobOutcome):
    """Retry this job; ``after`` (seconds) overrides the computed backoff (R14)."""

    def __init__(self, reason: str = "retry requested", *, after: float | timedelta | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.after = _outcome_delay(after, "Retry(after=...)") if after is not None else None


class Fatal(JobOutcome):
    """This job can never succeed: it goes dead at once (R15)."""

    def __init__(self, reason: str = "fatal error") -> None:
        super().__init__(reason)
        self.reason = reason


class Defer(JobOutcome):
    """Not yet: back to the queue after ``delay`` without spending an attempt (R17)."""

    def __init__(self, delay: float | timedelta = 0, reason: str = "deferred") -> None:
        super().__init__(reason)
        self.reason = reason
        self.delay = _outcome_delay(delay, "Defer(delay)")


class Reschedule(JobOutcome):
    """Run again after ``delay`` with a fresh attempt budget (R18)."""

    def __init__(self, delay: float | timedelta = 0, reason: str = "rescheduled") -> None:
        super().__init__(reason)
        self.reason = reason
        self.delay = _outcome_delay(delay, "Reschedule(delay)")


def _outcome_delay(value: float | timedelta, field: str) -> float:
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value or value < 0:
        raise ValueError(f"{field} must be a non-negative number of seconds, not {value!r}")
    # R41: raised inside a job, this ValueError is the attempt's error (a retry).
    problem = bounds.check_delay(value)
    if problem:
        raise ValueError(f"{field} {problem}")
    return float(value)
