"""jobpool: a multiprocess job queue and worker pool with no broker to run.

Jobs live in a SQLite file (or PostgreSQL); ``jobpool start`` runs a supervisor
that claims them and runs each in a forked child process, one per slot.
"""
from typing import TYPE_CHECKING, Any

from jobpool.errors import (Defer, EnqueueError, Fatal, Interrupted, JobFailed, JobpoolError,
                            Reschedule, Retry, SoftTimeout, StoreError, UnsafeResultError)
from jobpool.extensions import (AttemptInfo, AttemptResult, EnqueueInfo, Middleware, add_middleware,
                                on_child_start, remove_middleware)
from jobpool.log_context import JobLogContext
from jobpool.running import (CurrentJob, batch_results, current_batch, current_job, progress,
                             resume_state, save_state)
from jobpool.jobs import Handle, Job, Signature, job, on_start

if TYPE_CHECKING:
    from jobpool.store.factory import connect


def __getattr__(name: str) -> Any:
    # The store loads on first use of ``connect``: pytest imports jobpool (for its
    # plugin) on every run of every project in an environment that has jobpool.
    if name == "connect":
        from jobpool.store.factory import connect
        return connect
    raise AttributeError(f"module 'jobpool' has no attribute {name!r}")


def batch(*, on_success: Any = None, on_complete: Any = None) -> Any:
    """``jobpool.batch(...)``: ``store.batch(...)`` on the default store (R34)."""
    from jobpool.store.factory import default_store
    return default_store().batch(on_success=on_success, on_complete=on_complete)


__version__ = "0.1.0"

__all__ = ["job", "connect", "batch", "current_batch", "batch_results", "save_state", "resume_state",
           "Interrupted",
           "Retry", "Fatal", "Defer", "Reschedule",
           "progress", "on_start", "current_job", "CurrentJob", "JobLogContext",
           "Job", "Handle",
           "Signature", "JobpoolError", "EnqueueError", "StoreError", "JobFailed", "SoftTimeout",
           "UnsafeResultError", "on_child_start", "Middleware", "add_middleware", "AttemptInfo",
           "AttemptResult", "EnqueueInfo", "remove_middleware",
           "__version__"]
