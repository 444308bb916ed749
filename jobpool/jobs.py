"""The ``@job`` decorator, the registry of job names, and enqueue handles.

A supervisor imports the user's ``--app`` module before forking, so every child
inherits the registry filled by these decorators.
"""
from __future__ import annotations

import functools
import inspect
import os
import sys
from datetime import datetime, timedelta
from collections.abc import Iterable
from typing import Any, Callable, Generic, ParamSpec, TypeVar, overload

from jobpool import bounds, limits, options
from jobpool.errors import EnqueueError, RegistryError, UnknownJobError
from jobpool.handles import Handle, Handles, Signature
from jobpool.lifecycle import DEFAULT_POLICY, Policy
from jobpool.options import (DEFAULT_PRIORITY, DEFAULT_QUEUE, JobOptions, to_timestamp,
                             validate_max_attempts, validate_name, validate_priority,
                             validate_queue, validate_timeout)
from jobpool.serialize import check_serializer

__all__ = ["Job", "job", "Handle", "Handles", "Signature", "DEFAULT_QUEUE", "DEFAULT_PRIORITY",
           "to_timestamp", "get", "lookup", "registered", "unregister", "on_start"]

#: The policy's defaults are lifecycle's, written once (R13, R16, R19a, R20).
DEFAULT_MAX_ATTEMPTS = DEFAULT_POLICY.max_attempts
DEFAULT_TIMEOUT = DEFAULT_POLICY.timeout
#: R19a: child deaths before a job is quarantined, unless the job or the pool says.
DEFAULT_MAX_CRASHES = DEFAULT_POLICY.max_crashes

_registry: dict[str, "Job[..., Any]"] = {}

P = ParamSpec("P")
R = TypeVar("R")


class Arguments:
    """R1: whether a call's arguments fit a job's function, judged as calling it
    would judge them (``inspect.Signature.bind``). The signature is read once, when
    the job is registered; a positional call whose count fits a function with no
    required keyword-only parameter (most enqueues) is answered without binding,
    and so is a call of a shape (count of positional arguments, keyword names)
    that fitted before: binding looks at nothing else."""

    __slots__ = ("signature", "fewest", "most", "label", "_fitted")

    def __init__(self, fn: Callable) -> None:
        try:
            self.signature: inspect.Signature | None = inspect.signature(fn)
        except (TypeError, ValueError):  # nothing to judge by (some builtins): let it run
            self.signature = None
        self.label = getattr(fn, "__qualname__", None) or repr(fn)
        self._fitted: set[tuple] = set()
        #: The fast path's bounds on the count of positional arguments; None: always bind.
        self.fewest: int | None = None
        self.most = 0.0
        if self.signature is None:
            return
        kinds = inspect.Parameter
        parameters = self.signature.parameters.values()
        if any(p.kind is kinds.KEYWORD_ONLY and p.default is p.empty for p in parameters):
            return
        positional = [p for p in parameters
                      if p.kind in (kinds.POSITIONAL_ONLY, kinds.POSITIONAL_OR_KEYWORD)]
        self.fewest = sum(1 for p in positional if p.default is p.empty)
        self.most = (float("inf") if any(p.kind is kinds.VAR_POSITIONAL for p in parameters)
                     else len(positional))

    def problem(self, args: tuple | list, kwargs: dict | None) -> str | None:
        """Why ``fn(*args, **kwargs)`` would not bind (the ``TypeError``'s text:
        "missing a required argument: 'x'"), or None when it fits."""
        if not kwargs and self.fewest is not None and self.fewest <= len(args) <= self.most:
            return None
        if self.signature is None:
            return None
        shape = (len(args), *kwargs) if kwargs else (len(args),)
        if shape in self._fitted:
            return None
        try:
            self.signature.bind(*args, **(kwargs or {}))
        except TypeError as exc:
            return str(exc)
        if len(self._fitted) < 256:
            self._fitted.add(shape)
        return None

    def partial_problem(self, args: tuple | list, kwargs: dict | None) -> str | None:
        """As ``problem``, with arguments allowed to be missing (``bind_partial``):
        what a signature can be refused for before it is known what it will be
        given (a batch callback gets ``batch=`` from the store)."""
        if self.signature is None:
            return None
        try:
            self.signature.bind_partial(*args, **(kwargs or {}))
        except TypeError as exc:
            return str(exc)
        return None

    def refusal(self, name: str, problem: str) -> str:
        """The words of an ``EnqueueError`` (or a dead row's reason) naming the job,
        its function and what did not fit."""
        return f"job {name}: the arguments do not fit {self.label}{self.signature}: {problem}"


class Job(Generic[P, R]):
    """A registered job function. Calling it runs it in-process, as calling the
    function would (an ``async def`` job returns its coroutine, to await);
    ``enqueue`` queues it.

    Generic over the function's parameters and return type, so a type checker
    holds ``fn(...)``, ``fn.enqueue(...)`` and ``fn.s(...)`` to the function's
    signature (``enqueue_with(args=...)`` takes a tuple, which it cannot)."""

    def __init__(self, fn: Callable[P, R], *, name: str, queue: str, priority: int, max_attempts: int,
                 timeout: float, fatal: tuple, serializer: str, backoff_base: float,
                 backoff_max: float, max_crashes: int | None, store_result: bool,
                 on_dead: Callable | None = None, every: float | timedelta | None = None,
                 cron: str | None = None, soft_timeout: float | None = None,
                 memory_limit: int | None = None, tz: str | None = None,
                 max_running: int | None = None, group_by: str | None = None,
                 rate: str | None = None, burst: int = 1, chunk: int = 1) -> None:
        self.fn = fn
        self.name = validate_name(name)
        #: R1: the function's signature, read once; every enqueue and every run binds to it.
        self.arguments = Arguments(fn)
        #: An ``async def`` job (or an object whose ``__call__`` is one): a child runs
        #: the coroutine it returns to completion (R20's amendment). Judged once,
        #: here, not on every run of a plain job.
        self.is_coroutine = _is_coroutine_function(fn)
        if inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):
            # Calling it only makes a generator: its body would never run, and the
            # attempt would be settled done (the sibling of an un-awaited coroutine).
            raise RegistryError(f"job {self.name}: {getattr(fn, '__qualname__', fn)!s} is a "
                                f"generator function; a job's body must run when it is called")
        if self.is_coroutine:
            # Loaded now, as the app is imported: once in the supervisor before it
            # forks, not again in every child.
            import asyncio  # noqa: F401
        self.queue = validate_queue(queue)
        self.priority = validate_priority(priority)
        self.max_attempts = validate_max_attempts(max_attempts)
        self.timeout = validate_timeout(timeout)
        self.fatal = tuple(fatal)
        for exc_type in self.fatal:
            if not (isinstance(exc_type, type) and issubclass(exc_type, BaseException)):
                raise RegistryError(f"job {name}: fatal= must list exception types, not {exc_type!r}")
        self.serializer = check_serializer(serializer)
        self.backoff_base = _seconds_option(name, "backoff_base", backoff_base)
        self.backoff_max = _seconds_option(name, "backoff_max", backoff_max)
        if self.backoff_max < self.backoff_base:
            raise RegistryError(f"job {name}: need 0 <= backoff_base <= backoff_max")
        if max_crashes is not None and not bounds.whole_within(max_crashes, 1, bounds.INT32_MAX):
            raise RegistryError(f"job {name}: max_crashes must be a whole number from 1 to "
                                f"{bounds.INT32_MAX}, not {max_crashes!r}")
        #: None: the pool's --max-crashes (default DEFAULT_MAX_CRASHES) decides.
        self.max_crashes = int(max_crashes) if max_crashes is not None else None
        self.store_result = bool(store_result)
        if on_dead is not None and not callable(on_dead):
            raise RegistryError(f"job {name}: on_dead must be callable")
        self.on_dead = on_dead
        self.schedule = _schedule(name, every, cron, tz)
        if self.schedule is not None:
            problem = self.arguments.problem((), None)
            if problem is not None:  # R33 enqueues it with no arguments (R1)
                raise RegistryError(f"job {name}: a periodic job is called with no arguments; "
                                    f"{self.arguments.label}{self.arguments.signature}: {problem}")
        if soft_timeout is not None:
            soft_timeout = validate_timeout(soft_timeout)
            if soft_timeout >= self.timeout:
                raise RegistryError(f"job {name}: soft_timeout ({soft_timeout:g} s) must be "
                                    f"below timeout ({self.timeout:g} s)")
        self.soft_timeout = soft_timeout
        if memory_limit is not None and (isinstance(memory_limit, bool)
                                         or not isinstance(memory_limit, int) or memory_limit < 1):
            raise RegistryError(f"job {name}: memory_limit must be a positive number of MiB")
        self.memory_limit = memory_limit
        #: R35/R36: its concurrency and rate limits, written into the store when a
        #: pool that serves it starts; None: unlimited.
        self.limit = limits.declared(self.name, max_running=max_running, rate=rate, burst=burst,
                                     group_by=group_by)
        if self.schedule is not None and group_by is not None:
            # R33/R35: an occurrence is enqueued with no arguments, so it names no group
            # and every enqueue of it was refused: the job never ran, said only in DEBUG.
            raise RegistryError(f"job {name}: a periodic job is enqueued with no arguments, "
                                f"so it has no {group_by}= to be limited by; drop group_by= "
                                f"or every=/cron=")
        #: R63: up to this many of its ready rows go to one slot at once and run one
        #: after the other in its child, each settled on its own (1: one row, R6).
        self.chunk = options.validate_chunk(chunk)
        functools.update_wrapper(self, fn)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<jobpool.Job {self.name}>"

    @property
    def policy(self) -> Policy:
        """What settling its attempts needs (``lifecycle.decide``), and the
        max_attempts and timeout for rows enqueued without them."""
        return Policy(self.backoff_base, self.backoff_max,
                      self.max_crashes or DEFAULT_MAX_CRASHES, self.max_attempts, self.timeout)

    def s(self, *args: P.args, **kwargs: P.kwargs) -> Signature:
        """A call to make later (a chain step, a batch member or callback). What can
        never fit is refused now (too many arguments, an unknown keyword: R1); a
        missing one is checked where the signature is used, since a batch callback
        is given ``batch=`` by the store."""
        problem = self.arguments.partial_problem(args, kwargs)
        if problem is not None:
            raise EnqueueError(self.arguments.refusal(self.name, problem))
        return Signature(self.name, args, kwargs)

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> Handle:
        """Queue a call with these arguments on the default store (``connect()``)."""
        return self.enqueue_with(args=args, kwargs=kwargs)

    async def aenqueue(self, *args: P.args, **kwargs: P.kwargs) -> Handle:
        """``enqueue`` for async code: the write runs in a worker thread, so the event
        loop keeps running while it waits (R49)."""
        return await self.aenqueue_with(args=args, kwargs=kwargs)

    async def aenqueue_with(self, **options: Any) -> Handle:
        """``enqueue_with(**options)`` for async code, off the event loop (R49); the
        same checks and errors, and no ``connection=``."""
        from jobpool.store.async_enqueue import off_loop
        return await off_loop(self.enqueue_with, **options)

    def enqueue_with(self, *, args: tuple | list = (), kwargs: dict | None = None,
                     key: str | None = None, delay: float | timedelta | None = None,
                     priority: int | None = None, deadline: datetime | float | None = None,
                     max_attempts: int | None = None, queue: str | None = None,
                     then: Any = None, store: Any = None, connection: Any = None,
                     key_period: float | timedelta | None = None, group: Any = None,
                     meta: dict[str, Any] | None = None) -> Handle:
        """Queue a call with per-call options; ``store`` defaults to ``connect()``.

        ``then`` is a signature (``other.s(...)``) or a list of them to run, in
        order, after this job succeeds (R12). ``key_period``: a job with ``key``
        that finished less than this long ago makes this a duplicate too. ``meta``:
        the job's metadata, a dict JSON can carry (R54).
        """
        if store is None:
            from jobpool.store.factory import default_store
            store = default_store()
        return store.enqueue_with(self.name, args=args, kwargs=kwargs, key=key, delay=delay,
                                  priority=priority, deadline=deadline,
                                  max_attempts=max_attempts, queue=queue, then=then,
                                  connection=connection, key_period=key_period, group=group,
                                  meta=meta)


def _is_coroutine_function(fn: Callable) -> bool:
    """Whether calling ``fn`` starts a coroutine: an ``async def`` function, a
    ``functools.partial`` of one, or an object with an ``async def __call__``."""
    return inspect.iscoroutinefunction(fn) or (
        not inspect.isroutine(fn) and inspect.iscoroutinefunction(type(fn).__call__))


def _seconds_option(name: str, field: str, value: Any, least: float = 0.0) -> float:
    """A decorator's option in seconds: a number (or a ``timedelta``) from ``least`` to 10
    years, else a ``RegistryError`` naming it (NaN passed every comparison, text raised
    TypeError, 10**400 OverflowError)."""
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if (isinstance(value, bool) or not isinstance(value, (int, float))
            or not least <= value <= bounds.MAX_DELAY):
        shown = (bounds.number_text(value) if isinstance(value, (int, float))
                 and not isinstance(value, bool) else repr(value)[:80])
        raise RegistryError(f"job {name}: {field}= must be a number of seconds from {least:g} "
                            f"to 10 years, not {shown}")
    return float(value)


#: R33: the shortest ``every=``: an occurrence is keyed by its millisecond, so a shorter
#: interval would give two occurrences one key.
EVERY_LEAST = 0.001


def _schedule(name: str, every: float | timedelta | None, cron: str | None, tz: str | None):
    """R33: a periodic job's schedule, or None. Validated at import, not at run time."""
    if every is not None and cron is not None:
        raise RegistryError(f"job {name}: give every= or cron=, not both")
    if tz is not None and cron is None:
        raise RegistryError(f"job {name}: tz= is the zone of a cron= expression; an every= "
                            f"interval does not depend on one")
    if every is not None:
        from jobpool.periodic import Every
        return Every(_seconds_option(name, "every", every, EVERY_LEAST))
    if tz is not None and (not isinstance(tz, str) or not tz):
        raise RegistryError(f"job {name}: tz= must name a time zone (like 'Europe/Paris'), "
                            f"not {tz!r}")
    if cron is not None and not isinstance(cron, str):
        raise RegistryError(f"job {name}: cron= must be a cron expression (text), not {cron!r}")
    if cron is not None:
        from jobpool.periodic import Cron
        try:
            return Cron(cron, tz)
        except ValueError as exc:
            raise RegistryError(f"job {name}: bad cron= {cron!r} (tz={tz!r}): {exc}") from None
    return None


def _qualified(fn: Callable) -> str:
    return f"{fn.__module__}.{fn.__qualname__}"


#: jobpool's own source files start so; a frame outside them is the user's.
_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _declared_where(register: Callable) -> Callable:
    """``register``, its ``RegistryError`` naming the line that declared the job: the
    first frame outside jobpool, the decorator's line for ``@job(...)`` and for a
    bare ``@job`` alike. The check that refused it may be anywhere in jobpool (here,
    in ``limits``, in ``options``), where the traceback then ends: the user's own
    mistake is on that line, not there."""

    @functools.wraps(register)
    def registering(func: Callable) -> Any:
        try:
            return register(func)
        except RegistryError as exc:
            frame = sys._getframe(1)
            while frame.f_back is not None and frame.f_code.co_filename.startswith(_PACKAGE):
                frame = frame.f_back
            if exc.filename is None:
                exc.filename, exc.lineno = frame.f_code.co_filename, frame.f_lineno
            raise
    return registering


# Bare (``@job``), it makes a Job of the function; with options, a decorator that
# does. Either way the Job keeps the function's parameters and return type.
@overload
def job(fn: Callable[P, R], *, name: str | None = ..., queue: str = ..., priority: int = ...,
        max_attempts: int = ..., timeout: float = ..., fatal: tuple = ...,
        serializer: str = ..., backoff_base: float = ..., backoff_max: float = ...,
        max_crashes: int | None = ..., store_result: bool = ...,
        on_dead: Callable | None = ..., every: float | timedelta | None = ...,
        cron: str | None = ..., soft_timeout: float | None = ...,
        memory_limit: int | None = ..., tz: str | None = ..., max_running: int | None = ...,
        group_by: str | None = ..., limit_by: str | None = ..., rate: str | None = ...,
        burst: int = ..., chunk: int = ...) -> Job[P, R]: ...


@overload
def job(fn: None = None, *, name: str | None = ..., queue: str = ..., priority: int = ...,
        max_attempts: int = ..., timeout: float = ..., fatal: tuple = ...,
        serializer: str = ..., backoff_base: float = ..., backoff_max: float = ...,
        max_crashes: int | None = ..., store_result: bool = ...,
        on_dead: Callable | None = ..., every: float | timedelta | None = ...,
        cron: str | None = ..., soft_timeout: float | None = ...,
        memory_limit: int | None = ..., tz: str | None = ..., max_running: int | None = ...,
        group_by: str | None = ..., limit_by: str | None = ..., rate: str | None = ...,
        burst: int = ..., chunk: int = ...,
        ) -> Callable[[Callable[P, R]], Job[P, R]]: ...


def job(fn: Callable | None = None, *, name: str | None = None, queue: str = DEFAULT_QUEUE,
        priority: int = DEFAULT_PRIORITY, max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        timeout: float = DEFAULT_TIMEOUT, fatal: tuple = (), serializer: str = "json",
        backoff_base: float = DEFAULT_POLICY.backoff_base,
        backoff_max: float = DEFAULT_POLICY.backoff_max, max_crashes: int | None = None,
        store_result: bool = False, on_dead: Callable | None = None,
        every: float | timedelta | None = None, cron: str | None = None,
        soft_timeout: float | None = None, memory_limit: int | None = None,
        tz: str | None = None, max_running: int | None = None, group_by: str | None = None,
        limit_by: str | None = None, rate: str | None = None, burst: int = 1,
        chunk: int = 1) -> Any:
    """Register a function as a job. Usable bare (``@job``) or with options.

    ``on_dead(job, reason)`` runs once, in a child of the supervisor, for each of
    this job's rows that becomes dead (R21). ``every=`` or ``cron=`` makes it a
    periodic job that the pools enqueue (argument-less) once per occurrence (R33);
    a ``cron=`` expression is read in the zone ``tz`` (``"Europe/Paris"``; UTC when
    not given).
    ``soft_timeout`` raises ``SoftTimeout`` inside the job before the hard
    ``timeout`` kills it (R20); ``memory_limit`` (MiB) has the supervisor kill a
    child whose RSS passes it during this job.
    ``max_running``: at most this many of its jobs run at once across every pool on
    the store, per value of the keyword argument ``group_by`` (``limit_by`` is the
    same option under the design's name) or per ``enqueue_with(group=...)``; without
    either, for the name as a whole (R35). ``rate="30/m"`` (``/s``, ``/h``): at most
    that many starts per window, per group, from a bucket of ``burst`` tokens (R36).
    ``chunk=N`` (tiny jobs): a free slot takes up to N of its ready rows at once and
    its child runs them one after the other, each settled on its own (R63, R64).
    """

    @_declared_where
    def register(func: Callable[P, R]) -> Job[P, R]:
        job_name = name if name is not None else _qualified(func)
        if group_by is not None and limit_by is not None and group_by != limit_by:
            raise RegistryError(f"job {job_name}: group_by= and limit_by= name the same option; "
                                f"give one")
        try:
            new = Job(func, name=job_name, queue=queue, priority=priority,
                      max_attempts=max_attempts, timeout=timeout, fatal=fatal,
                      serializer=serializer, backoff_base=backoff_base,
                      backoff_max=backoff_max, max_crashes=max_crashes,
                      store_result=store_result, on_dead=on_dead, every=every, cron=cron,
                      soft_timeout=soft_timeout, memory_limit=memory_limit, tz=tz,
                      max_running=max_running, group_by=group_by or limit_by, rate=rate,
                      burst=burst, chunk=chunk)
        except EnqueueError as exc:
            raise RegistryError(f"job {job_name}: {exc}") from None
        existing = _registry.get(job_name)
        # R1a: re-running the same definition (a re-import) is fine; two different
        # functions under one name would make claims run the wrong code.
        if existing is not None and _qualified(existing.fn) != _qualified(func):
            raise RegistryError(f"job name {job_name!r} is registered twice: by "
                                f"{_qualified(existing.fn)} and by {_qualified(func)}")
        _registry[job_name] = new
        return new

    if fn is not None:
        return register(fn)
    return register


def _options_of(name: str) -> JobOptions | None:
    job = _registry.get(name)
    if job is None:
        return None
    return JobOptions(job.serializer, job.queue, job.priority, job.max_attempts, job.timeout,
                      job.limit.group_by if job.limit else None, job.arguments, job.store_result)


options.set_resolver(_options_of)


def get(name: str) -> Job[..., Any]:
    try:
        return _registry[name]
    except KeyError:
        raise UnknownJobError(f"no job named {name!r} is registered") from None


def lookup(name: str) -> Job[..., Any] | None:
    return _registry.get(name)


def registered() -> dict[str, Job[..., Any]]:
    """A copy of the registry: name -> Job."""
    return dict(_registry)


def served_queues(names: Iterable[str]) -> tuple[str, ...]:
    """The queues a pool (or ``testing.drain``) serves when not told: ``default``
    first, then every queue one of these registered jobs names."""
    found = sorted({_registry[n].queue for n in names if n in _registry})
    return (DEFAULT_QUEUE, *[q for q in found if q != DEFAULT_QUEUE])


def unregister(name: str) -> None:
    """Forget a name (tests define jobs under throwaway names)."""
    _registry.pop(name, None)


_start_hooks: list[Callable] = []


def on_start(fn: Callable) -> Callable:
    """Register ``fn(store)`` to run once in each supervisor as it starts, before it
    claims anything: the place to re-derive work a previous run left unfinished.
    It may run again on every start, so enqueue with keys (R3) to stay idempotent."""
    if fn not in _start_hooks:
        _start_hooks.append(fn)
    return fn


def start_hooks() -> list[Callable]:
    return list(_start_hooks)
