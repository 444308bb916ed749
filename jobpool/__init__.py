"""jobpool: a multiprocess job queue and worker pool with no broker to run.

Jobs live in a SQLite file (or PostgreSQL); ``jobpool start`` runs a supervisor
that claims them and runs each in a forked child process, one per slot.
"""
from jobpool.errors import (Defer, EnqueueError, Fatal, JobFailed, JobpoolError, Reschedule,
                            Retry, SoftTimeout, StoreError, UnsafeResultError)
from jobpool.extensions import AttemptInfo, AttemptResult, Middleware, add_middleware, on_child_start
from jobpool.running import progress
from jobpool.jobs import Handle, Job, Signature, job, on_start
from jobpool.store.sqlite import connect

__version__ = "0.1.0"

__all__ = ["job", "connect", "Retry", "Fatal", "Defer", "Reschedule", "progress", "on_start",
           "Job", "Handle",
           "Signature", "JobpoolError", "EnqueueError", "StoreError", "JobFailed", "SoftTimeout",
           "UnsafeResultError", "on_child_start", "Middleware", "add_middleware", "AttemptInfo",
           "AttemptResult",
           "__version__"]
