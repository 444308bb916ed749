"""The overview's live part as server-sent events (R47, issue 27).

One ``Hub`` per process refreshes the shared snapshot (``live.SharedSnapshot``) every
``live.EVERY`` seconds while at least one overview is open, renders its live part once
per refresh, and hands that same text to every open stream: a hundred viewers cost the
store one read and the process one render per refresh. With nobody watching it reads
nothing. An action from the dashboard wakes it, so every open overview shows the
action at once.

A stream sends the latest refresh, never a queue of them: a slow viewer skips the
refreshes it could not take and gets the newest. It ends when its viewer goes away
(the disconnect is heard while it waits, not at its next send) and when the server
stops, within one refresh, so ``jobpool web`` exits on SIGTERM with overviews open.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Callable
from typing import Any

import anyio
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.types import Receive, Scope, Send

from jobpool.web import auth, live

log = logging.getLogger(__name__)

#: Where each form's CSRF token goes in the text rendered once for every viewer; each
#: stream writes its own session's token there. Rows cannot forge it: their ``<`` are
#: written ``&lt;`` by the templates' autoescape, so only a template can hold it.
CSRF_SLOT = "<jobpool-csrf/>"
#: The SSE event name of the overview's live part (what the page listens for).
EVENT = "overview"
#: How long a browser waits before it reconnects a stream that ended, in milliseconds.
RETRY_MS = 2000


class Hub:
    """The one refresh of the live part, shared by every open stream.

    ``render(frame)`` makes the text of a ``live.Frame`` (with ``CSRF_SLOT`` for the
    tokens); it runs in the thread pool with the read. ``refreshes`` counts refreshes
    made (each is at most one store read); ``stopping()`` true ends every stream."""

    def __init__(self, shared: live.SharedSnapshot, render: Callable[[live.Frame], str],
                 every: float = live.EVERY) -> None:
        self.shared = shared
        shared.forgotten.append(self.wake)
        self.render = render
        self.every = every
        self.stopping: Callable[[], bool] = lambda: False
        self.refreshes = 0
        self.streams = 0
        self._text: str | None = None
        self._frame: live.Frame | None = None
        self._changed: asyncio.Condition | None = None
        self._wake: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self._failing = False

    @property
    def running(self) -> bool:
        """Whether the refresh loop runs (it does only while a stream is open)."""
        return self._task is not None and not self._task.done()

    def wake(self) -> None:
        """Refresh now (after an action), not at the end of the current wait. Safe
        from any thread; nothing happens when no stream is open."""
        loop, wake = self._loop, self._wake
        if loop is not None and wake is not None and not loop.is_closed():
            loop.call_soon_threadsafe(wake.set)

    async def latest(self, seen: int) -> tuple[int, str] | None:
        """The first refresh after number ``seen`` (waiting for it), or None once the
        hub is closed."""
        assert self._changed is not None
        async with self._changed:
            await self._changed.wait_for(lambda: self._closed or (
                self.refreshes > seen and self._text is not None))
            if self._closed or self._text is None:
                return None
            return self.refreshes, self._text

    @contextlib.asynccontextmanager
    async def open(self) -> Any:
        """One stream's hold on the hub: the refresh loop runs while any is held."""
        if self._changed is None:
            self._changed, self._wake = asyncio.Condition(), asyncio.Event()
            self._loop = asyncio.get_running_loop()
        self.streams += 1
        if not self.running and not self._closed:
            # A loop that starts anew reads anew: no viewer is sent a stale frame.
            self._text, self._frame = None, None
            self._task = asyncio.get_running_loop().create_task(self._refreshing())
        try:
            yield self
        finally:
            self.streams -= 1
            if self.streams == 0 and self._wake is not None:
                self._wake.set()  # the loop sees nobody watches, and ends

    async def _end(self) -> None:
        self._closed = True
        if self._changed is not None:
            async with self._changed:
                self._changed.notify_all()

    async def close(self) -> None:
        """End every stream and the refresh loop (the app is shutting down)."""
        await self._end()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _refreshing(self) -> None:
        assert self._changed is not None and self._wake is not None
        while self.streams and not self._closed:
            if self.stopping():
                await self._end()
                return
            self._wake.clear()
            text = await run_in_threadpool(self._refresh)
            async with self._changed:
                if text is not None:
                    self._text = text
                    self.refreshes += 1
                self._changed.notify_all()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=self.every)

    def _refresh(self) -> str | None:
        """A read and its render; when the read fails, the last frame rendered again
        (its "read N s ago" then says how old it is), logged once until reads work."""
        try:
            self._frame = self.shared.get()
        except Exception as exc:  # the store is down or busy: say so once, keep serving
            if not self._failing:
                log.warning("the live overview could not read the store: %s", exc)
            self._failing = True
        else:
            if self._failing:
                log.warning("the live overview reads the store again")
            self._failing = False
        if self._frame is None:
            return None
        try:
            return self.render(self._frame)
        except Exception:
            # A bug of ours, not the store's: the loop must outlive it (streams wait on
            # it), and the page's polling of /live shows the same error to whoever looks.
            log.exception("the live overview could not be drawn")
            return None


def message(number: int, text: str) -> bytes:
    """One SSE event carrying ``text``: each of its lines a ``data:`` line (a bare CR
    would end a line too, so every line break counts)."""
    lines = re.split(r"\r\n|\r|\n", text)
    body = "".join(f"data: {line}\n" for line in lines)
    return f"id: {number}\nevent: {EVENT}\n{body}\n".encode()


class EventStream(Response):
    """A ``text/event-stream`` answer fed by ``hub`` until the viewer leaves or the
    hub closes, each event's CSRF slot holding this viewer's ``csrf``."""

    media_type = "text/event-stream"

    def __init__(self, hub: Hub, csrf: str) -> None:
        self.hub = hub
        self.csrf = csrf
        self.status_code = 200
        self.background = None
        # no-cache and no buffering by a proxy: an event held back is an old overview.
        self.init_headers({"cache-control": "no-store", "x-accel-buffering": "no"})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async with self.hub.open() as hub, anyio.create_task_group() as tasks:
            async def heard_leaving() -> None:
                while (await receive())["type"] != "http.disconnect":
                    pass
                tasks.cancel_scope.cancel()

            tasks.start_soon(heard_leaving)
            await send({"type": "http.response.start", "status": 200,
                        "headers": self.raw_headers})
            await send({"type": "http.response.body", "body": f"retry: {RETRY_MS}\n\n".encode(),
                        "more_body": True})
            seen = 0
            while (got := await hub.latest(seen)) is not None:
                seen, text = got
                await send({"type": "http.response.body", "more_body": True,
                            "body": message(seen, text.replace(CSRF_SLOT, self.csrf))})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            tasks.cancel_scope.cancel()


async def events(request: Request) -> Response:
    """``GET /events``: the overview's live part each refresh; 401 without a login."""
    if not request.app.state.access.page_ok(request):
        return PlainTextResponse("log in first", status_code=401)
    return EventStream(request.app.state.stream, auth.csrf_token(request))
