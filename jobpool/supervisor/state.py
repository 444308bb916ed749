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
                 "metrics", "rollups", "hold_until", "beaten_at",
                 "store_trouble")

    def __init__(self, metrics: PoolMetrics | None = None) -> None:
        self.counters = new_counters()
        #: The Prometheus series, when ``--metrics`` serves them (None: not counted).
        self.metrics = metrics
        #: R56: what the next heartbeat adds to the store's per-minute rollups.
        self.rollups = Rollups()
        #: Attempts that ended and are not settled yet (settled at the next turn, R26).
        self.pending: list[Finished] = []
        #: R24b, R63: when this pool's heartbeat last reached the store (None: not yet;
        #: ``time.monotonic``), and whether a store call failed since (a turn's or a beat's).
        self.beaten_at: float | None = None
        self.store_trouble = False
        #: Something may be claimable: a slot came free, a wake-up or a poll arrived.
        self.want_claim = True
        #: How many stops were asked for (signals, ``jobpool stop``); two mean at once (R25).
        self.stop_requests = 0
        #: The stop is under way: no new claims, running jobs drain until ``drain_until``.
        self.stopping = False
        self.drain_until = math.inf
        #: ``--coalesce-us`` (R6a): until when the outcomes waiting are held for others
        #: (None: not held). Here, not in a loop: the general loop and the pump (R68)
        #: hold the same turn, within one window, whichever of them is running.
        self.hold_until: float | None = None

    def holding(self, now: float, window: float, busy: int, procs: int) -> bool:
        """``--coalesce-us`` (R6a): whether the next turn waits for the outcomes of
        children still running, so that they share its transaction (a turn's cost is
        mostly its commit). ``window``: the pool's, in seconds (0: never held);
        ``busy``: the children running; ``procs``: the pool's slots. A turn is held at
        most ``window`` from the first outcome held, and never once no other child runs,
        while stopping, with nothing to settle, or once half the slots or more wait on it
        (the children still running keep working through the turn, so the pool's cores
        never all idle). R6 holds: the turn claims only for the slots free when it runs."""
        if (not window or not self.pending or self.stopping or not busy
                or 2 * len(self.pending) >= procs):
            self.hold_until = None
            return False
        if self.hold_until is None:
            self.hold_until = now + window
        if now < self.hold_until:
            return True
        self.hold_until = None
        return False

    def strays_killed(self, count: int, job_id: int | None, name: str | None,
                      attempt: int | None) -> None:
        """R40: count and log processes a job left behind, killed with its attempt."""
        self.counters["strays_killed"] += count
        events.emit(events.STRAYS_KILLED, job_id=job_id, name=name, attempt=attempt,
                    processes=count)
