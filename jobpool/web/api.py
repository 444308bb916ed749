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

from jobpool import bounds, serialize
from jobpool.errors import BatchNotFound, JobNotFound
from jobpool.web import actions, charts, fleet, listing, openapi, schedules


def routes() -> list[Route]:
    return [
        Route("/api/openapi.json", openapi_document),
        Route("/api/stats", stats),
        Route("/api/jobs", jobs, methods=["GET"]),
        Route("/api/jobs", create_job, methods=["POST"]),
        Route("/api/jobs/bulk", bulk, methods=["POST"]),
        Route("/api/jobs/{job_id:int}", job, methods=["GET"]),
        Route("/api/jobs/{job_id:int}", delete, methods=["DELETE"]),
        Route("/api/jobs/{job_id:int}/retry", retry, methods=["POST"]),
        Route("/api/jobs/{job_id:int}/cancel", cancel, methods=["POST"]),
        Route("/api/jobs/{job_id:int}/run-now", run_now, methods=["POST"]),
        Route("/api/pools", pools),
        Route("/api/pools/{owner:path}/scale", scale, methods=["POST"]),
        Route("/api/pools/{owner:path}/stop", stop, methods=["POST"]),
        Route("/api/batches", batches),
        Route("/api/batches/{batch_id:int}", batch),
        Route("/api/batches/{batch_id:int}/cancel", cancel_batch, methods=["POST"]),
        Route("/api/queues", queues),
        Route("/api/periodic", periodic),
        Route("/api/rollups", rollups),
        Route("/api/queues/{queue:path}/pause", pause, methods=["POST"]),
        Route("/api/queues/{queue:path}/resume", resume, methods=["POST"]),
        Route("/api/queues/{queue:path}/limit", set_limit, methods=["POST"]),
        Route("/api/queues/{queue:path}/limit", clear_limit, methods=["DELETE"]),
    ]


async def openapi_document(request: Request) -> Response:
    """The API's OpenAPI document, made from these routes."""
    if (refused := _refused(request)) is not None:
        return refused
    return _json(openapi.document(routes()))


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
    rows, more, window = await run_in_threadpool(listing.searched_page,
                                                 request.app.state.store, chosen, limit)
    body = {"jobs": rows, "more": more, "next_after": listing.next_after(rows, more, window)}
    if window is not None:
        body["searched"] = {"from_id": window.low, "to_id": window.high}
    return _json(body)


async def periodic(request: Request) -> Response:
    if (refused := _refused(request)) is not None:
        return refused
    found = await run_in_threadpool(schedules.periodic_rows, request.app.state.store)
    return _json({"periodic": found})


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


async def _write(request: Request, act: Callable[..., actions.Done], target: Any,
                 made: dict[str, Any] | None = None, made_status: int = 201) -> Response:
    """``act`` on ``target`` (or on what ``target(body)`` makes of the JSON body sent,
    ``ValueError`` answering 400), as a page's button does. ``made``: what ``act`` put
    there goes into the answer too, which is then ``made_status`` when it succeeds."""
    if (refused := _refused(request)) is not None:
        return refused
    if request.app.state.access.read_only:
        return _error("this dashboard is read-only", 403)
    body = await request.body()
    kind = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if kind != "application/json":
        return _error("send a JSON body (content-type: application/json)", 415)
    sent = None
    if body.strip():
        try:
            sent = serialize.loads(body)
        except ValueError:
            return _error("the body is not JSON", 400)
        except RecursionError:  # the decoder's own bound on depth
            return _error("the body's JSON is nested too deeply", 400)
    if callable(target):
        try:
            target = target(sent)
        except ValueError as exc:
            return _error(str(exc), 400)
    done = await run_in_threadpool(act, request.app.state.store,
                                   request.app.state.access.who, target)
    request.app.state.live.forget()
    said = {"result": done.what, **({"note": done.note} if done.note else {}), **(made or {})}
    if not done.ok:
        return _json({"ok": False, **said}, 409)
    return _json({"ok": True, **said}, 200 if made is None else made_status)


async def create_job(request: Request) -> Response:
    """``{"name": ..., "args": [...], "kwargs": {...}}`` and any of ``queue``, ``key``,
    ``delay``, ``priority``, ``max_attempts``: the job queued by name, registered in
    this process or not (as ``jobpool enqueue`` without ``--app``); 201 with its ``id``
    and ``duplicate`` (a live job of the name held the key)."""
    made: dict[str, Any] = {}

    def act(store: Any, who: str, spec: dict[str, Any]) -> actions.Done:
        done, handle = actions.enqueue(store, who, spec)
        if handle is not None:
            made.update(id=handle.id, duplicate=handle.duplicate)
        return done
    return await _write(request, act, actions.enqueue_spec, made)


async def bulk(request: Request) -> Response:
    """``{"action": "retry" | "cancel" | "delete" | "run-now", "ids": [...]}``: the
    action on each job, as its own call would do it; ``jobs`` says what became of each
    id. 200 when it changed one job or more, else 409."""
    made: dict[str, Any] = {}

    def target(body: Any) -> tuple[str, list[int]]:
        if not isinstance(body, dict) or set(body) != {"action", "ids"}:
            raise ValueError('send {"action": ..., "ids": [...]}')
        if body["action"] not in actions.SELECTED_BUTTONS:
            raise ValueError(f"action must be one of {', '.join(actions.SELECTED_BUTTONS)}")
        return body["action"], actions.selected_ids(body["ids"])

    def act(store: Any, who: str, chosen: tuple[str, list[int]]) -> actions.Done:
        done, outcome = actions.selected(store, who, *chosen)
        made["jobs"] = {str(job_id): what for job_id, what in outcome.items()}
        return done
    return await _write(request, act, target, made, made_status=200)


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


async def set_limit(request: Request) -> Response:
    """``{"running": N}``: at most N of the queue's jobs running at once (R35)."""
    queue = request.path_params["queue"]

    def target(body: Any) -> tuple[str, int]:
        if not isinstance(body, dict) or set(body) != {"running"}:
            raise ValueError('send {"running": N}, N a positive integer')
        return queue, bounds.queue_running(body["running"])
    return await _write(request, actions.set_limit, target)


async def clear_limit(request: Request) -> Response:
    return await _write(request, actions.clear_limit, request.path_params["queue"])


async def _read(request: Request, read: Callable[[Any], Any]) -> Response:
    if (refused := _refused(request)) is not None:
        return refused
    return _json(await run_in_threadpool(read, request.app.state.store))


async def pools(request: Request) -> Response:
    """Every pool row, as ``jobpool pools --json`` prints them."""
    return await _read(request, lambda store: store.pools())


async def scale(request: Request) -> Response:
    """``{"procs": N}``: ask the pool to run N children."""
    owner = request.path_params["owner"]

    def target(body: Any) -> tuple[str, int]:
        procs = fleet.procs_of(body.get("procs")) if isinstance(body, dict) else None
        if procs is None:
            raise ValueError('send {"procs": N}, N a positive integer')
        return owner, procs
    return await _write(request, actions.scale, target)


async def stop(request: Request) -> Response:
    return await _write(request, actions.stop, request.path_params["owner"])


async def batches(request: Request) -> Response:
    """``?open=1&limit=N``: the newest batches (only those whose callbacks have not
    fired, with ``open``), as ``jobpool batches list --json`` prints them."""
    try:
        limit = listing.page_size(request.query_params.get("limit") or str(fleet.BATCHES_SHOWN))
    except ValueError as exc:
        return _error(str(exc), 400)
    open_only = request.query_params.get("open") == "1"
    return await _read(request, lambda store: [b.as_dict() for b in store.batches.list(
        open_only=open_only, limit=limit)])


async def batch(request: Request) -> Response:
    """A batch's status and its members in the store counted by status."""
    batch_id = request.path_params["batch_id"]
    try:
        return await _read(request, lambda store: dict(
            store.batches.status(batch_id).as_dict(), members=store.batches.members(batch_id)))
    except BatchNotFound as exc:
        return _error(str(exc), 404)


async def cancel_batch(request: Request) -> Response:
    return await _write(request, actions.cancel_batch, request.path_params["batch_id"])


async def queues(request: Request) -> Response:
    """Each queue with jobs, a pause or a limit, with its weights in the live pools,
    and the limits of job names with their groups, as the queues page shows them."""
    def read(store: Any) -> dict[str, Any]:
        view = fleet.queues_view(store, request.app.state.live.get().snapshot)
        view["queues"] = [dict(q, counts=q["counts"] and {
            **{k: getattr(q["counts"], k) for k in ("ready", "scheduled", "running", "dead",
                                                    "done_per_min")},
            "capped": sorted(q["counts"].capped)}) for q in view["queues"]]
        return view
    return await _read(request, read)


async def rollups(request: Request) -> Response:
    """R56: the charts' data: per minute of the last ``hours`` (of one ``name``, or all),
    and per name over the window."""
    if (refused := _refused(request)) is not None:
        return refused
    try:
        hours, name = charts.window(request.query_params)
    except ValueError as exc:
        return _error(str(exc), 400)
    return _json(await run_in_threadpool(charts.read, request.app.state.store, hours, name))
