"""What both dialects' stores do alike, written once: each store supplies its
``statements`` (a module whose statements have the same names and parameters in both
dialects), ``transaction(what, fn)``, ``read_rows(what, query, params)`` and
``list_param`` (how a statement takes a list: JSON text on SQLite, an array on
PostgreSQL); the rest of a store is what its dialect must do its own way.
"""
from __future__ import annotations

import logging
import time
from types import ModuleType
from typing import Any, Callable

from jobpool import bounds, liveness
from jobpool.errors import EnqueueError
from jobpool.handles import Handle
from jobpool.store import attempt_log, job_states, rows
from jobpool.store.batch_store import StoreBatches
from jobpool.store.limit_store import StoreLimits
from jobpool.store.records import Requests

log = logging.getLogger(__name__)


class SharedStore:
    """The ``Store`` protocol's methods that are the same in both dialects."""

    statements: ModuleType

    # What each store supplies.
    transaction: Callable[[str, Callable[[Any], Any]], Any]
    read_rows: Callable[..., list]
    list_param: Callable[[list], Any]
    close: Callable[[], None]
    pools: Callable[..., list]
    enqueue_with: Callable[..., Handle]

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def enqueue(self, name: str, *args: Any, **kwargs: Any) -> Handle:
        """Queue one job by name with these arguments (``enqueue_with`` for options)."""
        return self.enqueue_with(name, args=args, kwargs=kwargs)

    def attempts(self, job_id: int) -> list[dict[str, Any]]:
        """The attempt log of one job, oldest first (R19a; a success's line last, R61)."""
        return [dict(zip(attempt_log.LINE_FIELDS, row)) for row in self.read_rows(
            f"reading attempts of job {job_id}", self.statements.LIST_ATTEMPTS,
            {"id": bounds.row_id(job_id)})]

    # -- batches and limits (R34, R35, R36) ------------------------------------------------------

    @property
    def batches(self) -> StoreBatches:
        """R34: open, close, cancel and read batches (``batch_store.StoreBatches``)."""
        return StoreBatches(self, self.statements)

    @property
    def limits(self) -> StoreLimits:
        """R35/R36: the limits every pool obeys (``limit_store.StoreLimits``)."""
        return StoreLimits(self, self.statements)

    def batch(self, *, on_success: Any = None, on_complete: Any = None) -> Any:
        """A new batch whose callbacks (``job.s(...)``) fire when its last member ends
        after ``close()`` (see ``handles.Batch``)."""
        return self.batches.open_batch(on_success, on_complete)

    def batch_status(self, batch_id: int) -> Any:
        """R34: the batch's counts and state, a ``BatchStatus``."""
        return self.batches.status(batch_id)

    # -- checkpoints (R37) ------------------------------------------------------------------------

    def save_state(self, owner: str, job_id: int, attempt: int, state: str) -> bool:
        return job_states.save_state(self, self.statements, owner, job_id, attempt, state)

    def read_state(self, owner: str, job_id: int, attempt: int) -> str | None:
        return job_states.read_state(self, self.statements, owner, job_id, attempt)

    def reset_state(self, job_id: int) -> bool:
        return job_states.reset_state(self, self.statements, job_id)

    # -- operators (R21, R24b, R25, R27, R38) ---------------------------------------------------

    def _chosen_owners(self, owner: str | None, host: str | None) -> Any:
        return self.list_param([pool["owner"] for pool in liveness.chosen(
            self.pools(), owner=owner, host=host)])

    def request_stop(self, *, owner: str | None = None, host: str | None = None) -> int:
        """R25: ask the running pools on this store (or the one ``owner``, or those on
        ``host``) to stop gracefully; returns how many were asked."""
        owners = self._chosen_owners(owner, host)
        return self.transaction("requesting stop", lambda conn: conn.execute(
            self.statements.REQUEST_STOP, {"owners": owners}).rowcount)

    def request_scale(self, procs: int, *, owner: str | None = None,
                      host: str | None = None) -> int:
        """R27: ask the running pools (or the chosen ones, as ``request_stop``) to run
        ``procs`` children; returns how many were asked."""
        if isinstance(procs, bool) or not isinstance(procs, int) or procs < 1:
            raise EnqueueError(f"procs must be a positive integer, not {procs!r}")
        if procs > bounds.INT32_MAX:
            # R41: each pool judges a request against its own bound; this only keeps
            # the number storable (and a typo of ten digits out of the table).
            raise EnqueueError(f"procs must be at most {bounds.INT32_MAX}, not {procs}")
        owners = self._chosen_owners(owner, host)
        return self.transaction("requesting scale", lambda conn: conn.execute(
            self.statements.REQUEST_SCALE, {"procs": procs, "owners": owners}).rowcount)

    def pause(self, queue: str) -> bool:
        """R38: pause ``queue`` for every pool; False if it was paused already."""
        params = {"queue": rows.queue_name(queue), "now": time.time()}
        return self.transaction("pausing a queue", lambda conn: conn.execute(
            self.statements.PAUSE_QUEUE, params).rowcount == 1)

    def resume(self, queue: str) -> bool:
        """R38: resume ``queue``; False if it was not paused."""
        params = {"queue": rows.queue_name(queue)}
        return self.transaction("resuming a queue", lambda conn: conn.execute(
            self.statements.RESUME_QUEUE, params).rowcount == 1)

    def paused_queues(self) -> list[str]:
        """R38: the paused queues, by name."""
        return [row[0] for row in self.read_rows("reading paused queues",
                                                 self.statements.PAUSED_QUEUES)]

    def forget_pool(self, owner: str) -> None:
        """Remove a pool's row: its own, as it stops, or a dead one's once its leases
        were reclaimed (R24b)."""
        self.transaction("removing a pool", lambda conn: conn.execute(
            self.statements.DELETE_POOL, {"owner": owner}))

    def requests_read(self, conn: Any, owner: str, stop: Any, desired: int | None,
                      anew: Any) -> Requests:
        """R25, R27, R31, R35, R38: what a pool's heartbeat brings back, in the beat's own
        transaction after its pool row is written (``stop``, ``desired``, ``anew``: what
        that write returned): a stop or scale request, read once (acknowledged here), the
        cancels asked of its jobs, the paused queues and the limits."""
        statements = self.statements
        if stop:
            conn.execute(statements.ACK_STOP, {"owner": owner})
        if stop and not bounds.whole_within(stop, 1, bounds.INT64_MAX):
            # R44: `jobpool stop` writes 1; a value written by hand that is no such
            # count (text, a blob, a fraction) stopped the pool, unannounced. It is
            # acknowledged, said once, and not obeyed.
            log.warning("pool %s: its row's stop_requested is %s, not a request; not "
                        "obeyed (jobpool stop asks a pool to stop)", owner, repr(stop)[:80])
            stop = 0
        if desired is not None:
            conn.execute(statements.ACK_SCALE, {"owner": owner})
        cancels = conn.execute(statements.CANCELS_FOR_OWNER, {"owner": owner}).fetchall()
        paused = conn.execute(statements.PAUSED_QUEUES).fetchall()
        limit_rows = conn.execute(statements.READ_LIMITS).fetchall()
        # A scale request is a whole number of procs; anything else written by hand
        # (text, a fraction, an infinity: R44) is acknowledged and not obeyed.
        return Requests(stop=bool(stop),
                        procs=int(desired) if bounds.finite_number(desired)
                        and desired == int(desired) else None,
                        cancels=tuple((job_id, attempt) for job_id, attempt in cancels),
                        registered_anew=bool(anew),
                        paused=frozenset(row[0] for row in paused),
                        limit_rows=tuple(tuple(row) for row in limit_rows))

    def take_hook(self, job_id: int) -> bool:
        """R21: mark a dead job's hook as taken; False if another pool took it first."""
        return self.transaction("taking an on_dead hook", lambda conn: conn.execute(
            self.statements.TAKE_HOOK, {"id": bounds.row_id(job_id)}).fetchone() is not None)
