"""What ``jobpool start`` decides, and the defaults the CLI and the library share.

Light on purpose (no multiprocess, no rich): the CLI imports it to build its
parser, so every default is written once, here, and the help text and the
library cannot disagree.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

from jobpool import bounds, liveness, options
from jobpool.errors import EnqueueError, JobpoolError
from jobpool.store.records import DEAD_LETTER_LIMIT, RESULT_TTL  # noqa: F401 - the CLI's defaults
from jobpool.store.sqlite.options import DEFAULT_MODE

#: R11: fallback poll interval when no wake-up arrives, seconds.
POLL_INTERVAL = bounds.env_seconds("JOBPOOL_POLL_INTERVAL", 1.0)
#: R25: how long a graceful stop waits for running jobs, seconds.
DRAIN = 5.0
#: R20: after SIGTERM at the hard timeout, how long before SIGKILL, seconds.
KILL_GRACE = 2.0
#: R26: a ``--burst`` pool whose store has failed every call for this long gives up
#: with a non-zero exit, instead of waiting for ever for work it cannot claim; a
#: long-running pool waits the store out however long it takes.
STORE_TIMEOUT = 60.0
#: How often a non-TTY pool logs a status line, seconds.
STATUS_EVERY = 10.0
#: How often the pool writes its heartbeat, progress and counters, and reads the
#: operators' requests (stop, scale, cancel), seconds (R22, R27, R29, R31).
HEARTBEAT_EVERY = bounds.env_seconds("JOBPOOL_HEARTBEAT", 1.0)


#: The supervisor's pump (``supervisor/pump.py``): the steady-state loop of plain jobs
#: taken out of the general loop. ``JOBPOOL_PUMP=0`` (or ``--no-pump``) turns it off,
#: leaving the general loop, which is the pump's reference, to serve every job.
PUMP = os.environ.get("JOBPOOL_PUMP", "1").strip().lower() not in ("0", "false", "no", "off")


#: How long a settle may wait for the outcomes of children still running, so that they
#: share its transaction (``--coalesce-us``; 0: never). Bounded: it is pickup latency
#: for the slots those outcomes free.
COALESCE_MAX = 1.0

#: R68: how long the pump looks for a child's outcome before it sleeps, while outcomes
#: come that soon (``--spin-us``; 0: it always sleeps at once), and its bound: a wait
#: whose looks find nothing has kept the supervisor's core busy for the window (less
#: what it gave to others between looks) before it sleeps.
SPIN = 50e-6
SPIN_MAX = 1e-3


def default_procs() -> int:
    """One child per CPU."""
    return os.cpu_count() or 1


@dataclass(frozen=True)
class PoolConfig:
    """Everything ``jobpool start`` decides; validated before a pool starts.

    Frozen: what a pool does at run time (``scale`` changing its number of
    children) is the supervisor's own state, not a rewrite of what it was told."""

    db: str
    procs: int = field(default_factory=default_procs)
    queues: tuple[str, ...] | None = None
    #: One per queue of ``queues`` (``--queues high:3,default:1``): claims shared by
    #: weight instead of taken in strict order (``queueplan``).
    weights: tuple[int, ...] | None = None
    names: tuple[str, ...] | None = None
    burst: bool = False
    max_jobs: int | None = None
    poll_interval: float = POLL_INTERVAL
    drain: float = DRAIN
    kill_grace: float = KILL_GRACE
    max_tasks_per_child: int = 0
    status_every: float = STATUS_EVERY
    result_ttl: float = RESULT_TTL
    dead_letter_limit: int = DEAD_LETTER_LIMIT
    memory_limit: int | None = None          # MiB, for jobs that set none
    max_crashes: int | None = None           # R19a, for jobs that set none
    max_memory_per_child: int | None = None  # MiB; a child past it is recycled after its job
    mode: int = DEFAULT_MODE                 # R39: file mode if the pool creates the store
    allow_world_writable: bool = False       # R39: may that mode let others write it
    max_procs: int | None = None             # R41: raises the bound on procs (and scale)
    dead_after: float = liveness.DEAD_AFTER  # R24b: a pool silent this long is dead
    store_timeout: float = STORE_TIMEOUT     # --burst gives up after this long of store errors
    wait_retries: float = 0.0                # --burst also waits for jobs due within this
    metrics: str | None = None               # --metrics ADDR: serve /metrics and /healthz
    #: Seconds a turn holds outcomes while other children still run, so that their
    #: outcomes share one transaction (``--coalesce-us``; 0: settle at once).
    coalesce: float = 0.0
    #: R63: (name, rows) chunk sizes that override the jobs' own ``chunk=`` (``--chunk``).
    chunks: tuple[tuple[str, int], ...] = ()
    #: Whether plain jobs go through the pump (``--no-pump``, ``JOBPOOL_PUMP=0``: not).
    pump: bool = PUMP
    #: Seconds the pump looks for an outcome before it sleeps (``--spin-us``; R68).
    spin: float = SPIN

    def validate(self) -> None:
        if self.procs < 1:
            raise JobpoolError(f"--procs must be at least 1, not {self.procs}")
        if self.max_procs is not None and self.max_procs < 1:
            raise JobpoolError(f"--max-procs must be at least 1, not {self.max_procs}")
        bound, why = bounds.procs_bound(self.max_procs)
        if self.procs > bound:
            raise JobpoolError(f"--procs {self.procs} is over this pool's bound of {bound} ({why})")
        if self.max_jobs is not None and self.max_jobs < 1:
            raise JobpoolError(f"--max-jobs must be at least 1, not {self.max_jobs}")
        if not 0 <= self.coalesce <= COALESCE_MAX:
            raise JobpoolError(f"--coalesce-us must be from 0 to {COALESCE_MAX * 1e6:.0f}, "
                               f"not {self.coalesce * 1e6:g}")
        if not 0 <= self.spin <= SPIN_MAX:
            raise JobpoolError(f"--spin-us must be from 0 to {SPIN_MAX * 1e6:.0f}, "
                               f"not {self.spin * 1e6:g}")
        for name, size in self.chunks:
            try:
                options.validate_chunk(size)
            except EnqueueError as exc:
                raise JobpoolError(f"--chunk {name}: {exc}") from None
        if not self.poll_interval > 0:
            raise JobpoolError(f"poll interval must be positive, not {self.poll_interval}")
        if self.drain < 0:
            raise JobpoolError(f"--drain must not be negative, not {self.drain}")
        if self.weights is not None and (self.queues is None
                                         or len(self.weights) != len(self.queues)):
            raise JobpoolError("queue weights need one weight per queue of --queues")
        if not self.dead_after > HEARTBEAT_EVERY:
            raise JobpoolError(f"--dead-after must be longer than the heartbeat "
                               f"({HEARTBEAT_EVERY:g} s), not {self.dead_after:g}")
