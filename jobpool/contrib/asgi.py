"""A jobpool store that opens and closes with an ASGI app (R53): FastAPI, Starlette, or any
framework that takes a lifespan context manager.

    from fastapi import Depends, FastAPI
    from jobpool.contrib.asgi import lifespan, store_of

    app = FastAPI(lifespan=lifespan("jobpool.db"))

    @app.post("/signup/{user_id}")
    async def signup(user_id: int, store=Depends(store_of)):
        handle = await store.aenqueue("mail.welcome", user_id)
        return {"job": handle.id}

Nothing here imports a web framework but the annotation ``store_of`` gives FastAPI.
"""
from __future__ import annotations

import asyncio
import os
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, AsyncIterator, Callable

import jobpool

try:  # only so that FastAPI, reading store_of's signature, hands it the request
    from starlette.requests import Request
except ImportError:  # pragma: no cover - without Starlette there is no request to read
    Request = Any  # type: ignore[misc,assignment]

__all__ = ["lifespan", "store_of", "STATE_NAME"]

#: Where the store is in the lifespan state (``request.state.jobpool``) unless ``name=`` says.
STATE_NAME = "jobpool"


def lifespan(db: str | os.PathLike | None = None, *, durability: str | None = None,
             name: str = STATE_NAME,
             then: Callable[[Any], AbstractAsyncContextManager[Any]] | None = None,
             ) -> Callable[[Any], AbstractAsyncContextManager[dict[str, Any]]]:
    """A lifespan for ``FastAPI(lifespan=...)`` / ``Starlette(lifespan=...)``: at startup
    ``jobpool.connect(db, durability=...)`` (an unusable store stops the app from
    starting), handed to every request as ``request.state.<name>`` through the lifespan
    state; at shutdown, once the server stopped serving, the store is closed. ``then``
    is the app's own lifespan, entered inside ours (so it may enqueue at its start); the
    state it yields, a dict, is merged with ours. Opening and closing run in a worker
    thread: a store may wait for a lock or the network, the loop never does (R49)."""
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"name must be a Python identifier (request.state.<name>), not {name!r}")

    @asynccontextmanager
    async def run(app: Any) -> AsyncIterator[dict[str, Any]]:
        store = await asyncio.to_thread(jobpool.connect, db, durability=durability)
        try:
            if then is None:
                yield {name: store}
                return
            async with then(app) as state:
                if state is not None and not isinstance(state, dict):
                    raise TypeError(f"the app's lifespan yielded {type(state).__name__}; "
                                    f"jobpool's merges a dict (or None) with its own")
                yield {**(state or {}), name: store}
        finally:
            await asyncio.to_thread(store.close)

    return run


def store_of(request: Request) -> Any:
    """The store ``lifespan`` opened, for a request: ``Depends(store_of)`` in FastAPI.
    A clear error when the app was started without it."""
    store = getattr(request.state, STATE_NAME, None)
    if store is None:
        raise RuntimeError(f"request.state has no {STATE_NAME!r}: give the app "
                           f"lifespan=jobpool.contrib.asgi.lifespan(...)")
    return store
