"""Messages between the supervisor and its children, over one pipe per slot.

Both ends are this package's own code in processes forked from one parent, so
messages are ``marshal``-encoded tuples: fast, compact, and no pickling of what
is already bytes. The store payload travels as the bytes it was stored as.

supervisor -> child:  ``(job_id, attempt, name, payload, serializer)``
child -> supervisor:  ``(OUTCOME, job_id, attempt, kind, error, delay, result, peak_rss, cpu_s,
                        retiring, strays)`` — ``retiring``: the child exits after this reply
                        (recycled), so nothing more may be sent to it; ``strays``: processes
                        the job left running that the child killed (R40)
                      ``(PROGRESS, job_id, attempt, percent, stage)``
"""
from __future__ import annotations

import marshal

OUTCOME = 0
PROGRESS = 1

dumps = marshal.dumps
loads = marshal.loads


def job_message(job_id: int, attempt: int, name: str, payload: bytes, serializer: str) -> bytes:
    return marshal.dumps((job_id, attempt, name, payload, serializer))


def outcome_message(job_id: int, attempt: int, kind: int, error: str | None, delay: float | None,
                    result: bytes | str | None, peak_rss: int | None, cpu_s: float | None,
                    retiring: bool = False, strays: int = 0) -> bytes:
    return marshal.dumps((OUTCOME, job_id, attempt, kind, error, delay, result, peak_rss, cpu_s,
                          retiring, strays))


def progress_message(job_id: int, attempt: int, percent: float, stage: str | None) -> bytes:
    return marshal.dumps((PROGRESS, job_id, attempt, percent, stage))
