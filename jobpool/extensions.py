"""What a user's code can hook into (Celery's ``worker_process_init`` and
``before_task_publish``, Dramatiq's middleware): hooks that run once in a child right
after it is forked, middleware around every attempt, and (R55) middleware that sees
every job a producer enqueues before it is written.

The child's hooks are registered at import time by the ``--app`` module, before the
pool forks, so every child inherits them. Whatever they raise is the attempt's error
(a retry, as any exception is): it never kills the child. A producer's
``before_enqueue`` runs in the process that enqueues; the store's enqueue calls read
the list kept here, so it imports nothing.
"""
from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Callable, Iterator, NamedTuple

from jobpool import tracing


class AttemptInfo(NamedTuple):
    """The attempt about to run (``before``) or just run (``after``)."""

    job_id: int
    name: str
    attempt: int
    args: tuple
    kwargs: dict
    #: Its metadata (R54), a dict of its own (empty without any): given with the job (R58).
    meta: dict


class AttemptResult(NamedTuple):
    """How an attempt's body ended, as ``after`` sees it.

    ``outcome`` is one of ``done``, ``error``, ``fatal``, ``retry``, ``deferred``,
    ``rescheduled``; ``exception`` is what the body raised (None when it
    returned); ``value`` what it returned."""

    outcome: str
    error: str | None
    exception: BaseException | None
    value: Any


class EnqueueInfo(NamedTuple):
    """A job about to be enqueued, as ``before_enqueue`` sees it (R55): its name and
    its arguments as the call gave them."""

    name: str
    args: tuple
    kwargs: dict


class Middleware:
    """Runs around every attempt in the child, and before every enqueue in the
    producer; override what you need.

    ``before`` runs in registration order before the body, ``after`` in reverse
    order once it ended (not when ``before`` failed, nor when the child dies).
    ``before_enqueue`` runs in registration order for each job an enqueue is about
    to write (R55)."""

    def before_enqueue(self, job: EnqueueInfo, meta: dict[str, Any]) -> None:
        """Called in the enqueuing process for each job, before anything is written:
        change ``meta`` (the job's metadata, R54) in place to stamp every job (a
        trace context, a tenant, a request id). Raising refuses the enqueue."""

    def before(self, job: AttemptInfo) -> None:
        """Called before the job's body (e.g. open a tracing span)."""

    def after(self, job: AttemptInfo, result: AttemptResult) -> None:
        """Called after the job's body (e.g. report ``result.exception`` to Sentry)."""


_child_start: list[Callable[[], Any]] = []
_middleware: list[Middleware] = []
#: R55: the ``before_enqueue`` of each registered middleware that has one of its own,
#: in registration order. Read by the stores' enqueue calls; empty, they skip it.
enqueue_hooks: list[Callable[[EnqueueInfo, dict], Any]] = []
#: Set while a call whose hooks already ran writes its jobs (a Django enqueue that
#: checked everything at the call and writes at the commit): they do not run twice.
_hooks_ran: ContextVar[bool] = ContextVar("jobpool_enqueue_hooks_ran", default=False)


def on_child_start(fn: Callable[[], Any]) -> Callable[[], Any]:
    """Register ``fn()`` to run in each child right after it is forked, before its
    first job: the place to reopen clients (database pools, HTTP sessions) that a
    module opened at import, since a connection must not cross a fork."""
    if fn not in _child_start:
        _child_start.append(fn)
    return fn


def add_middleware(middleware: Middleware) -> Middleware:
    """Register a middleware for every attempt of every job in this pool's children."""
    if not (callable(getattr(middleware, "before", None)) and callable(getattr(middleware, "after", None))):
        raise TypeError(f"middleware must have before(job) and after(job, result) methods, "
                        f"not {middleware!r}")
    hook = _enqueue_hook(middleware)
    if middleware not in _middleware:
        _middleware.append(middleware)
        if hook is not None:
            enqueue_hooks.append(hook)
    return middleware


def _enqueue_hook(middleware: Any) -> Callable[[EnqueueInfo, dict], Any] | None:
    """Its ``before_enqueue``, unless it is ``Middleware``'s own, which does nothing:
    a pool whose middleware only wraps attempts adds nothing to an enqueue."""
    hook = getattr(middleware, "before_enqueue", None)
    if hook is None:
        return None
    if not callable(hook):
        raise TypeError(f"middleware {middleware!r}: before_enqueue must be a method, "
                        f"not {hook!r}")
    if getattr(hook, "__func__", None) is Middleware.before_enqueue:
        return None
    return hook


def remove_middleware(middleware: Middleware) -> None:
    """Unregister a middleware (tests add and remove their own)."""
    if middleware in _middleware:
        _middleware.remove(middleware)
        hook = _enqueue_hook(middleware)
        if hook is not None:
            enqueue_hooks.remove(hook)


def hooks_now() -> list[Callable[[EnqueueInfo, dict], Any]]:
    """The ``before_enqueue`` hooks an enqueue made now runs, in registration order
    (R55), then (R57) the stamp of the current trace context when OpenTelemetry is
    installed and a span is current: none when the call's hooks ran already."""
    stamp = tracing.enqueue_hook()
    if (stamp is None and not enqueue_hooks) or _hooks_ran.get():
        return []
    return [*enqueue_hooks, stamp] if stamp is not None else list(enqueue_hooks)


@contextmanager
def hooks_already_ran() -> Iterator[None]:
    """Write enqueues whose hooks ran already (R55: once per job)."""
    token = _hooks_ran.set(True)
    try:
        yield
    finally:
        _hooks_ran.reset(token)


def child_start_hooks() -> list[Callable[[], Any]]:
    return list(_child_start)


def middleware() -> list[Middleware]:
    return list(_middleware)
