"""What a job can ask about its own attempt while it runs: report progress (R22),
add to its own batch (R34).

Light on purpose: ``import jobpool`` brings it in for ``jobpool.progress``, and a
producer that only enqueues should not load the child's machinery or the cores.
The child sets ``current`` around each job; outside a pool's child (a plain call of
the job function, a test) there is no attempt and reports go nowhere.
"""
from __future__ import annotations

import time
from typing import Any

from jobpool import protocol

#: R22: a job reporting progress in a tight loop sends at most one report per interval.
PROGRESS_INTERVAL = 0.1


class Attempt:
    """The attempt running in this child: where its reports go."""

    __slots__ = ("conn", "job_id", "attempt", "last_report", "adds")

    def __init__(self, conn: Any, job_id: int, attempt: int) -> None:
        self.conn = conn            # the child's end of its pipe
        self.job_id = job_id
        self.attempt = attempt
        self.last_report = 0.0      # monotonic time of the last report sent
        self.adds = 0               # jobs this attempt added to its batch so far (R34)


#: Set by the child while a job runs.
current: Attempt | None = None


def progress(percent: float, stage: str | None = None) -> None:
    """Report how far the running job is (0-100) and what it is doing (R22).

    Sent to the supervisor, which stores it throttled; outside a pool's child
    (a plain call of the job function) it does nothing.
    """
    if isinstance(percent, bool) or not isinstance(percent, (int, float)) or not 0 <= percent <= 100:
        raise ValueError(f"progress must be a number from 0 to 100, not {percent!r}")
    if stage is not None and not isinstance(stage, str):
        raise ValueError(f"progress stage must be a string, not {type(stage).__name__}")
    attempt = current
    if attempt is None:
        return
    now = time.monotonic()
    if now - attempt.last_report < PROGRESS_INTERVAL and percent < 100:
        return
    attempt.last_report = now
    attempt.conn.send_bytes(protocol.progress_message(attempt.job_id, attempt.attempt,
                                                      float(percent), stage))


class MemberBatch:
    """The batch of the running job, from inside it (``jobpool.current_batch()``).

    Its adds go over the child's pipe and are committed by the supervisor before
    the job's own settle, so the batch cannot finish while they are on the way.
    Each add is keyed by the job's id and its position among this attempt's adds:
    a retried job that adds the same jobs again gets back the ones its earlier
    attempt made (their handles say ``duplicate``), never a second copy."""

    def __init__(self, attempt: Attempt) -> None:
        self._attempt = attempt

    def add(self, signature: Any) -> Any:
        """One more member (``job.s(...)``); its ``Handle``."""
        from jobpool.handles import Signature
        if not isinstance(signature, Signature):
            raise _enqueue_error(f"current_batch().add takes a signature (job.s(...)), "
                                 f"not {type(signature).__name__}")
        from jobpool.store import rows
        # On a clock of 0: the store puts the rows on its own (rows.NewJob.at).
        row = rows.new_job(signature.name, signature.args, signature.kwargs, None, None, None,
                           None, None, None, None, 0.0, None)
        return self._send([row])[0]

    def add_many(self, name: str, items: Any) -> list[Any]:
        """Many members of one job (tuples of arguments or signatures); their handles."""
        from jobpool.store import rows
        items = items if isinstance(items, list) else list(items)
        options = rows.enqueue_options(name, None, None, None, None, None, None, 0.0)
        return self._send(rows.new_jobs(options, items)) if items else []

    def _send(self, new_rows: list) -> list[Any]:
        from jobpool.errors import LeaseLostError, StoreError
        from jobpool.handles import Handle
        attempt = self._attempt
        if current is not attempt:
            raise RuntimeError("a job's current_batch() is used after the job returned")
        attempt.conn.send_bytes(protocol.batch_add_message(attempt.job_id, attempt.attempt,
                                                           attempt.adds, new_rows))
        _tag, answers, error_kind, error = protocol.loads(attempt.conn.recv_bytes())
        if error_kind == protocol.REFUSED:
            raise _enqueue_error(error)
        if error_kind == protocol.LEASE_LOST:
            raise LeaseLostError(error)
        if error_kind is not None:
            raise StoreError(error)
        attempt.adds += len(new_rows)
        return [Handle(job_id, duplicate=duplicate) for job_id, duplicate in answers]


def _enqueue_error(message: str) -> Exception:
    from jobpool.errors import EnqueueError
    return EnqueueError(message)


def current_batch() -> MemberBatch:
    """The batch of the job running now, to add members to it (R34).

    Only inside a job that a pool (or ``jobpool.testing.drain``) runs; an add from a
    job that is not a batch member raises ``EnqueueError``."""
    attempt = current
    if attempt is None:
        raise RuntimeError("current_batch() is called outside a job run by a pool: "
                           "use store.batch() and Batch.add to add from elsewhere")
    return MemberBatch(attempt)
