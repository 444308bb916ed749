"""Enqueue from async code without blocking its event loop (R49): ``aenqueue``,
``aenqueue_with`` and ``aenqueue_many`` of both stores, and ``Job.aenqueue``.

Each runs the store's own synchronous call in a worker thread (the loop's default
executor, ``asyncio.to_thread``) and awaits it. A store gives every thread its own
connection (R42), so the worker writes on a connection of its own, and a wait for a
lock (SQLite's busy timeout, a PostgreSQL row or table lock) or for the network keeps
a thread waiting, never the loop. Validation, duplicates, errors and results are the
sync call's, since it is the sync call that runs.

PostgreSQL takes the same road rather than psycopg's ``AsyncConnection``: its
enqueues (a transaction with retries and error mapping, ``COPY`` for a bulk, the
``NOTIFY`` of each transaction, the server's clock) are written once over a sync
connection, and an async copy of them would be a second implementation of each.

``asyncio`` is imported on the first call only: a producer that never awaits an
enqueue does not load it.
"""
from __future__ import annotations

from typing import Any, Callable, TypeVar

from jobpool.errors import EnqueueError

__all__ = ["AsyncEnqueue", "off_loop"]

T = TypeVar("T")


async def off_loop(call: Callable[..., T], *args: Any, **options: Any) -> T:
    """``call(*args, **options)`` in a worker thread, awaited. ``connection=`` is
    refused: the caller's connection belongs to the caller's thread (a ``sqlite3``
    connection refuses any other), and an async one cannot run sync statements."""
    if options.get("connection") is not None:
        raise EnqueueError("connection= is not taken by an async enqueue: a caller's own "
                           "transaction (R5) is written with enqueue_with(connection=...) "
                           "on the thread that owns the connection")
    import asyncio
    return await asyncio.to_thread(call, *args, **options)


class AsyncEnqueue:
    """The async producer calls of a store, over its ``enqueue_with`` and
    ``enqueue_many`` (a mixin of both stores)."""

    enqueue_with: Callable[..., Any]
    enqueue_many: Callable[..., Any]

    async def aenqueue(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """``enqueue(name, *args, **kwargs)`` off the event loop; its ``Handle``."""
        return await off_loop(self.enqueue_with, name, args=args, kwargs=kwargs)

    async def aenqueue_with(self, name: str, **options: Any) -> Any:
        """``enqueue_with(name, **options)`` off the event loop (no ``connection=``)."""
        return await off_loop(self.enqueue_with, name, **options)

    async def aenqueue_many(self, name: str, items: Any, **options: Any) -> Any:
        """``enqueue_many(name, items, **options)`` off the event loop; its ``Handles``.
        A generator of items is read in the worker thread."""
        return await off_loop(self.enqueue_many, name, items, **options)
