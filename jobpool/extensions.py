"""What a user's code can hook into inside each child (Celery's ``worker_process_init``,
Dramatiq's middleware): hooks that run once in a child right after it is forked, and
middleware around every attempt.

Both are registered at import time by the ``--app`` module, before the pool forks,
so every child inherits them. Whatever they raise is the attempt's error (a retry,
as any exception is): it never kills the child.
"""
from __future__ import annotations

from typing import Any, Callable, NamedTuple


class AttemptInfo(NamedTuple):
    """The attempt about to run (``before``) or just run (``after``)."""

    job_id: int
    name: str
    attempt: int
    args: tuple
    kwargs: dict


class AttemptResult(NamedTuple):
    """How an attempt's body ended, as ``after`` sees it.

    ``outcome`` is one of ``done``, ``error``, ``fatal``, ``retry``, ``deferred``,
    ``rescheduled``; ``exception`` is what the body raised (None when it
    returned); ``value`` what it returned."""

    outcome: str
    error: str | None
    exception: BaseException | None
    value: Any


class Middleware:
    """Runs around every attempt in the child; override what you need.

    ``before`` runs in registration order before the body, ``after`` in reverse
    order once it ended (not when ``before`` failed, nor when the child dies)."""

    def before(self, job: AttemptInfo) -> None:
        """Called before the job's body (e.g. open a tracing span)."""

    def after(self, job: AttemptInfo, result: AttemptResult) -> None:
        """Called after the job's body (e.g. report ``result.exception`` to Sentry)."""


_child_start: list[Callable[[], Any]] = []
_middleware: list[Middleware] = []


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
    if middleware not in _middleware:
        _middleware.append(middleware)
    return middleware


def remove_middleware(middleware: Middleware) -> None:
    """Unregister a middleware (tests add and remove their own)."""
    if middleware in _middleware:
        _middleware.remove(middleware)


def child_start_hooks() -> list[Callable[[], Any]]:
    return list(_child_start)


def middleware() -> list[Middleware]:
    return list(_middleware)
