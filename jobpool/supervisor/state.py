"""What the parts of one pool share while it runs: its counters, the outcomes not yet
settled, and whether it is stopping or wants to claim.

The loop, the slots and the operations each own their own responsibility; this
record is the little they all read and write, passed by reference so none of
them reaches into another's attributes.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, NamedTuple

from jobpool import events
from jobpool.lifecycle import Outcome
from jobpool.supervisor.rollups import Rollups

if TYPE_CHECKING:
    from jobpool.metrics import PoolMetrics


class Finished(NamedTuple):
    """An attempt that ended in this pool, waiting for its settle."""

    outcome: Outcome
    duration: float   # seconds from dispatch to the child's reply (or its death), R30
    queue: str        # the queue it was claimed from (the metrics' label)


def new_counters() -> dict[str, int]:
    """R29a/R30: one counter per outcome, as the heartbeat and ``pool_stopped`` show them."""
    return dict(claimed=0, completed=0, retried=0, deferred=0, rescheduled=0, released=0,
                reclaimed=0, dead=0, lost=0, crashes=0, settle_failures=0, strays_killed=0)


class PoolState:
    """Shared by the loop (``loop.py``), the slots (``slots.py``) and the operations
    (``operations.py``) of one pool."""

    __slots__ = ("counters", "pending", "want_claim", "stop_requests", "stopping", "drain_until",
                 "metrics", "rollups")

    def __init__(self, metrics: PoolMetrics | None = None) -> None:
        self.counters = new_counters()
        #: The Prometheus series, when ``--metrics`` serves them (None: not counted).
        self.metrics = metrics
        #: R56: what the next heartbeat adds to the store's per-minute rollups.
        self.rollups = Rollups()
        #: Attempts that ended and are not settled yet (settled at the next turn, R26).
        self.pending: list[Finished] = []
        #: Something may be claimable: a slot came free, a wake-up or a poll arrived.
        self.want_claim = True
        #: How many stops were asked for (signals, ``jobpool stop``); two mean at once (R25).
        self.stop_requests = 0
        #: The stop is under way: no new claims, running jobs drain until ``drain_until``.
        self.stopping = False
        self.drain_until = math.inf

    def strays_killed(self, count: int, job_id: int | None, name: str | None,
                      attempt: int | None) -> None:
        """R40: count and log processes a job left behind, killed with its attempt."""
        self.counters["strays_killed"] += count
        events.emit(events.STRAYS_KILLED, job_id=job_id, name=name, attempt=attempt,
                    processes=count)
