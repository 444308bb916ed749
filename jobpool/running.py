"""What a job can ask about its own attempt while it runs: report progress (R22).

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

    __slots__ = ("conn", "job_id", "attempt", "last_report")

    def __init__(self, conn: Any, job_id: int, attempt: int) -> None:
        self.conn = conn            # the child's end of its pipe
        self.job_id = job_id
        self.attempt = attempt
        self.last_report = 0.0      # monotonic time of the last report sent


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
