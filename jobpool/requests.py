"""What a running job asks of its pool, answered from the store: add to its batch
(R34), save its state and read the state it resumes from (R37), read a batch's
results (R60). (Which batch it is in and its metadata come with the job, R58.)

One function for the supervisor (a child's request over its pipe) and for
``jobpool.testing.drain`` (the same request made in-process), so both answer alike:
each request that writes or reads the job's own row is fenced by the attempt's
lease, and a failure comes back as the error the job's call raises. A batch's results
are a plain read, as a producer's ``Batch.results`` is.
"""
from __future__ import annotations

from typing import Any

from jobpool import protocol
from jobpool.errors import EnqueueError, LeaseLostError, StoreError
from jobpool.store import rows
def answer(store: Any, owner: str, request: tuple) -> tuple[int, int, int, Any, str | None,
                                                            str | None]:
    """``(job_id, attempt, seq, answer, error_kind, error)`` for one request tuple."""
    tag, job_id, attempt, seq, *fields = request
    try:
        result = _carry_out(store, owner, tag, job_id, attempt, fields)
    except EnqueueError as exc:
        return job_id, attempt, seq, None, protocol.REFUSED, str(exc)
    except (ValueError, TypeError, OverflowError) as exc:
        # A request the job's own API would not have sent (its fields were made by
        # hand): refused to the job, never an error of its pool.
        return job_id, attempt, seq, None, protocol.REFUSED, f"request refused: {exc}"
    except LeaseLostError as exc:
        return job_id, attempt, seq, None, protocol.LEASE_LOST, str(exc)
    except StoreError as exc:
        return job_id, attempt, seq, None, protocol.STORE_FAILED, str(exc)
    return job_id, attempt, seq, result, None, None


def _carry_out(store: Any, owner: str, tag: int, job_id: int, attempt: int,
               fields: list) -> Any:
    if tag == protocol.BATCH_ADD:
        first_position, new_rows = fields
        return store.add_to_own_batch(owner, job_id, attempt, first_position,
                                      [rows.NewJob(*row) for row in new_rows])
    if tag == protocol.SAVE_STATE:
        if not store.save_state(owner, job_id, attempt, fields[0]):
            raise LeaseLostError(f"job {job_id} (attempt {attempt}) no longer holds its lease: "
                                 f"its state is not saved")
        return True
    if tag == protocol.READ_STATE:
        return store.read_state(owner, job_id, attempt)
    if tag == protocol.BATCH_RESULTS:
        batch_id, after, limit = fields
        page = store.batches.results(batch_id, after=after, limit=limit)
        return tuple(tuple(member) for member in page)  # marshal takes plain tuples
    raise ValueError(f"unknown request {tag!r}")
