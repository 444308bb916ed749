"""How a coroutine job runs (R20's amendment): an ``async def`` job's coroutine is run
to completion in an event loop of its own, and an awaitable that a job hands back
without awaiting it is recognised, so it is never mistaken for a finished job.

One loop per attempt (``asyncio.run``), not one loop per child reused across its
jobs. Each attempt of a pool is its own world (R40: whatever it started ends with
it; R43: it cannot reach another job): with a fresh loop, the tasks, callbacks,
executor threads and async generators an attempt leaves behind are cancelled or
closed as it ends, and the loop's own descriptors (its selector, its self-pipe)
are closed with it. A loop kept for the child would carry all of that into the
next job; a job that closed or stopped it, or wrote over its descriptors, would
break every later job of that child; and a plain job would find descriptors it
never opened. The price, measured: creating and closing a loop costs about
0.2 ms per coroutine job (running on a kept loop, about 0.015 ms), small beside
the I/O a coroutine job awaits; a plain job pays only a look at the type of what
it returned. A client bound to a loop (an HTTP session, a connection pool) is
therefore opened inside the job that uses it.

asyncio is imported where a coroutine is run, never at this module's import: a
pool without a coroutine job never loads it (``jobpool.jobs`` loads it, before
the pool forks, when one is registered).
"""
from __future__ import annotations

import inspect
import threading
from types import CoroutineType, GeneratorType
from typing import Any, Awaitable

from jobpool.errors import SoftTimeout

__all__ = ["run", "is_awaitable", "unawaited_error", "PLAIN_RESULTS"]


def run(awaitable: Awaitable[Any], soft_limit: float | None = None) -> Any:
    """Run a coroutine job's coroutine to completion in a new event loop; what it
    returns, or what it raises, as if it had been a plain call.

    ``soft_limit`` (seconds): the coroutine is cancelled once it passes, at the
    ``await`` it is in, and the run raises ``SoftTimeout`` (R20). A coroutine sees
    its soft timeout as asyncio's own cancellation, not as a ``SoftTimeout``
    raised at that ``await``: asyncio's locks, queues and task groups clean up
    after a ``CancelledError`` and would be left inconsistent by any other
    exception. It may clean up in ``except CancelledError`` or ``finally``.

    The hard timeout and the memory limit need nothing here: the supervisor kills
    the child, whatever the loop is doing."""
    import asyncio
    main = _attempt(awaitable, soft_limit)
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(main)
    return _in_a_thread(main)


async def _attempt(awaitable: Awaitable[Any], soft_limit: float | None) -> Any:
    import asyncio
    if not soft_limit:
        return await awaitable
    task = asyncio.current_task()
    assert task is not None
    error = SoftTimeout.after(soft_limit)
    expired = False

    def expire() -> None:
        nonlocal expired
        expired = True
        task.cancel(str(error))

    timer = asyncio.get_running_loop().call_later(soft_limit, expire)
    try:
        return await awaitable
    except asyncio.CancelledError as exc:
        if expired:
            # Chained: the attempt's traceback shows where the coroutine was.
            raise error from exc
        raise
    finally:
        timer.cancel()


def _in_a_thread(main: Any) -> Any:
    """Only ``jobpool.testing.drain`` called from async code (an async test) gets
    here, its caller's loop running in this thread: ``asyncio.run`` refuses to
    start a second one in it, so the job's loop runs in a thread of its own while
    this one waits. A pool's child never has a loop running."""
    import asyncio
    import contextvars
    box: dict[str, Any] = {}
    # The drain's context goes with the job (R48: its current_job(), in this thread).
    context = contextvars.copy_context()

    def target() -> None:
        try:
            box["value"] = context.run(asyncio.run, main)
        except BaseException as exc:  # noqa: BLE001 - carried back to the waiting thread
            box["raised"] = exc

    # A daemon: a test run interrupted while it waits is not held up by the job.
    thread = threading.Thread(target=target, name="jobpool-coroutine-job", daemon=True)
    thread.start()
    thread.join()
    if "raised" in box:
        raise box["raised"]
    return box["value"]


#: What jobs return most (JSON's types): never awaitable, known without a look-up.
#: A failed ``hasattr`` on a type costs about 0.3 us; a set's membership test 0.03.
PLAIN_RESULTS = frozenset({bool, int, float, str, bytes, list, tuple, dict})


def is_awaitable(value: Any) -> bool:
    """Whether a job's return value is an awaitable (a coroutine, a future, anything
    with ``__await__``, a generator-based coroutine). The child asks this of every
    value a job returns except None and ``PLAIN_RESULTS``, so it looks at the type
    only: no ``isinstance`` against an abstract class."""
    kind = type(value)
    return hasattr(kind, "__await__") or (
        kind is GeneratorType and bool(value.gi_code.co_flags & inspect.CO_ITERABLE_COROUTINE))


def unawaited_error(name: str, value: Any) -> str:
    """The error of an attempt whose job returned an awaitable nobody awaited: its body
    never ran, so it is never ``done``. A coroutine is closed first, so Python's
    "never awaited" warning does not follow it into the log."""
    if isinstance(value, CoroutineType) or type(value) is GeneratorType:
        what = f"a coroutine ({getattr(value, '__qualname__', type(value).__qualname__)})"
        value.close()
    else:
        what = f"an awaitable ({type(value).__qualname__})"
    return (f"job {name!r} returned {what} that was never awaited: a pool runs an async def "
            f"job's coroutine to completion, but awaits nothing a job returns")
