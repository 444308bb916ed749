"""The JSON API under ``/api/``: what the pages show and do (DESIGN section 13, R47).

With a token every call needs ``Authorization: Bearer TOKEN`` (a session cookie is
not enough: a browser sends cookies on its own). A write takes a JSON body or none,
sent as ``application/json``: a form another site posts cannot be that without a
CORS preflight, which this API never answers. Read-only refuses every write with 403.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from jobpool.errors import JobNotFound
from jobpool.web import actions, listing


def routes() -> list[Route]:
    return [
        Route("/api/stats", stats),
        Route("/api/jobs", jobs),
        Route("/api/jobs/{job_id:int}", job, methods=["GET"]),
        Route("/api/jobs/{job_id:int}", delete, methods=["DELETE"]),
        Route("/api/jobs/{job_id:int}/retry", retry, methods=["POST"]),
        Route("/api/jobs/{job_id:int}/cancel", cancel, methods=["POST"]),
        Route("/api/jobs/{job_id:int}/run-now", run_now, methods=["POST"]),
        Route("/api/queues/{queue:path}/pause", pause, methods=["POST"]),
        Route("/api/queues/{queue:path}/resume", resume, methods=["POST"]),
    ]


def _json(body: Any, status_code: int = 200) -> Response:
    # default=str: a row's times and sizes are numbers; anything else is shown as text.
    return Response(json.dumps(body, default=str), status_code=status_code,
                    media_type="application/json")


def _error(text: str, status_code: int) -> Response:
    return _json({"error": text}, status_code)


def _refused(request: Request) -> Response | None:
    if request.app.state.access.api_ok(request):
        return None
    return Response(json.dumps({"error": "a bearer token is needed"}), status_code=401,
                    media_type="application/json", headers={"www-authenticate": "Bearer"})


def status_counts(store: Any) -> dict[str, Any]:
    """What ``jobpool status --json`` prints: counts by status, each live pool's
    counters, the ready jobs no pool serves, the paused queues."""
    return dict(store.stats(), unserved=store.unserved(), paused=store.paused_queues())


async def stats(request: Request) -> Response:
    if (refused := _refused(request)) is not None:
        return refused
    return _json(await run_in_threadpool(status_counts, request.app.state.store))


async def jobs(request: Request) -> Response:
    if (refused := _refused(request)) is not None:
        return refused
    try:
        chosen, limit = listing.filters(request.query_params)
    except ValueError as exc:
        return _error(str(exc), 400)
    rows, more = await run_in_threadpool(listing.page, request.app.state.store, chosen, limit)
    return _json({"jobs": rows, "more": more, "next_after": listing.next_after(rows, more)})


async def job(request: Request) -> Response:
    if (refused := _refused(request)) is not None:
        return refused
    store, job_id = request.app.state.store, request.path_params["job_id"]

    def read() -> dict[str, Any]:
        row = store.get(job_id)
        row["attempt_log"] = store.attempts(job_id)
        return row
    try:
        return _json(await run_in_threadpool(read))
    except JobNotFound as exc:
        return _error(str(exc), 404)


async def _write(request: Request, act: Callable[..., actions.Done], target: Any) -> Response:
    if (refused := _refused(request)) is not None:
        return refused
    if request.app.state.access.read_only:
        return _error("this dashboard is read-only", 403)
    body = await request.body()
    kind = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if kind != "application/json":
        return _error("send a JSON body (content-type: application/json)", 415)
    if body.strip():
        try:
            json.loads(body)
        except ValueError:
            return _error("the body is not JSON", 400)
    done = await run_in_threadpool(act, request.app.state.store,
                                   request.app.state.access.who, target)
    return _json({"ok": done.ok, "result": done.what}, 200 if done.ok else 409)


async def retry(request: Request) -> Response:
    return await _write(request, actions.retry, request.path_params["job_id"])


async def cancel(request: Request) -> Response:
    return await _write(request, actions.cancel, request.path_params["job_id"])


async def run_now(request: Request) -> Response:
    return await _write(request, actions.run_now, request.path_params["job_id"])


async def delete(request: Request) -> Response:
    return await _write(request, actions.delete, request.path_params["job_id"])


async def pause(request: Request) -> Response:
    return await _write(request, actions.pause, request.path_params["queue"])


async def resume(request: Request) -> Response:
    return await _write(request, actions.resume, request.path_params["queue"])
