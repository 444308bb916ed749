"""Named records that cross between the supervisor and a store.

Plain, immutable values: the supervisor builds them from its slots and counters,
a store writes them, and the answers come back as records too, so no caller
reads a positional tuple through an index.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ProgressReport:
    """R22: how far one running attempt is; written fenced like a settle, so a
    report for an attempt that is no longer this pool's changes nothing."""

    job_id: int
    attempt: int
    percent: float | None
    stage: str | None


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """R24b, R29: what a pool says about itself once a beat (its row in ``pools``)."""

    owner: str
    host: str
    pid: int
    procs: int
    queues: tuple[str, ...]
    names: tuple[str, ...]
    core: str
    counters_json: str
    slots_json: str


@dataclass(frozen=True, slots=True)
class Requests:
    """What operators asked of one pool since its last beat (R25, R27, R31)."""

    stop: bool
    procs: int | None
    #: (job id, attempt) of its running jobs to cancel.
    cancels: tuple[tuple[int, int], ...]
