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
                      ``(BATCH_ADD, job_id, attempt, first_position, rows)``: the running
                      member adds ``rows`` (``rows.NewJob`` tuples, on a clock of 0) to its
                      batch (R34), and waits for the answer
supervisor -> child:  ``(BATCH_ADDED, answers, error_kind, error)``, only to a child
                      waiting on a BATCH_ADD: ``(id, duplicate)`` per row, or why none
                      was written
"""
from __future__ import annotations

import marshal

OUTCOME = 0
PROGRESS = 1
BATCH_ADD = 2
BATCH_ADDED = 3

#: ``BATCH_ADDED``'s error kinds: the exception the job's ``add`` raises.
REFUSED = "refused"       # EnqueueError: the add is wrong (no batch, batch finished)
LEASE_LOST = "lease"      # LeaseLostError: this attempt is no longer the job's
STORE_FAILED = "store"    # StoreError: the store could not take it now

dumps = marshal.dumps
loads = marshal.loads


def job_message(job_id: int, attempt: int, name: str, payload: bytes, serializer: str) -> bytes:
    return marshal.dumps((job_id, attempt, name, payload, serializer))


def outcome_message(job_id: int, attempt: int, kind: int, error: str | None, delay: float | None,
                    result: bytes | str | None, peak_rss: int | None, cpu_s: float | None,
                    retiring: bool = False, strays: int = 0) -> bytes:
    return marshal.dumps((OUTCOME, job_id, attempt, kind, error, delay, result, peak_rss, cpu_s,
                          retiring, strays))


def batch_add_message(job_id: int, attempt: int, first_position: int, rows: list[tuple]) -> bytes:
    return marshal.dumps((BATCH_ADD, job_id, attempt, first_position, tuple(map(tuple, rows))))


def batch_added_message(answers: list[tuple[int, bool]], error_kind: str | None = None,
                        error: str | None = None) -> bytes:
    return marshal.dumps((BATCH_ADDED, tuple(answers), error_kind, error))


def progress_message(job_id: int, attempt: int, percent: float, stage: str | None) -> bytes:
    return marshal.dumps((PROGRESS, job_id, attempt, percent, stage))
