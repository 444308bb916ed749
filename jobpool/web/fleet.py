"""The dashboard's pages of what runs the jobs and how they are grouped (R47): pools
(scale, stop), batches (cancel) and queues (pause, resume, limits).

Each page is what a few ``Store`` calls return; each button POSTs with the session's
CSRF token and is one action of ``actions`` (a ``web_action`` event), as on the job
pages (``pages``).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from jobpool import bounds, liveness
from jobpool.errors import BatchNotFound
from jobpool.snapshot import Snapshot
from jobpool.web import actions, listing
from jobpool.web.pages import _checked_form, _login_needed, _render, _store, acted, named_in_form

#: The most batches the batches page lists unless ``limit`` says otherwise.
BATCHES_SHOWN = 50


def routes() -> list[Route]:
    return [
        Route("/pools", pools_page),
        Route("/pools/{action:str}", named_pool_action, methods=["POST"]),
        Route("/pools/{owner:path}/{action:str}", pool_action, methods=["POST"]),
        Route("/batches", batches_page),
        Route("/batches/{batch_id:int}", batch_page),
        Route("/batches/{batch_id:int}/cancel", batch_cancel, methods=["POST"]),
        Route("/queues", queues_page),
    ]


def pools_view(store: Any, snapshot: Snapshot) -> dict[str, Any]:
    """Every pool row (a dead one with why), and the running jobs in their slots (of
    the shared snapshot); ``chunks``: whether a slot has rows of its chunk waiting (R63)."""
    slots: dict[str, list[Any]] = {}
    for slot in snapshot.slots:
        if slot.busy:
            slots.setdefault(snapshot.pools[slot.pool].owner, []).append(slot)
    return {"pools": store.pools(), "slots": slots, "now": snapshot.taken_at,
            "chunks": any(slot.busy and slot.waiting for slot in snapshot.slots)}


async def pools_page(request: Request) -> Response:
    if (refused := _login_needed(request)) is not None:
        return refused
    return _render(request, "pools.html", **await run_in_threadpool(
        lambda: pools_view(_store(request), request.app.state.live.get().snapshot)))


def procs_of(text: object) -> int | None:
    """The ``procs`` a scale form or body names, or None when it names none."""
    if isinstance(text, int) and not isinstance(text, bool):
        return text
    if isinstance(text, str) and text.isascii() and text.strip().isdigit():
        return int(text)
    return None


async def pool_action(request: Request) -> Response:
    """A pool's action, the pool named in the path (``/pools/OWNER/stop``)."""
    return await _pool_action(request, request.path_params["owner"])


async def named_pool_action(request: Request) -> Response:
    """A pool's action from the pools page's forms, the pool named in a field (see
    ``pages.named_queue_action``: an owner is text a pools row holds, R44)."""
    owner, refused = await named_in_form(request, "owner")
    if refused is not None:
        return refused
    return await _pool_action(request, owner)


async def _pool_action(request: Request, owner: str) -> Response:
    action = request.path_params["action"]
    if action not in ("scale", "stop"):
        return PlainTextResponse("no such action", status_code=404)
    form, refused = await _checked_form(request)
    if refused is not None:
        return refused
    act: Callable[..., actions.Done]
    if action == "stop":
        act, target = actions.stop, owner
    else:
        procs = procs_of(form.get("procs"))
        if procs is None:
            return PlainTextResponse("procs must be a positive integer", status_code=400)
        act, target = actions.scale, (owner, procs)
    done = await run_in_threadpool(act, _store(request), request.app.state.access.who, target)
    return acted(request, f"pool {owner}: {done.what}", form.get("next"))


async def batches_page(request: Request) -> Response:
    if (refused := _login_needed(request)) is not None:
        return refused
    open_only = request.query_params.get("open") == "1"
    try:
        limit = listing.page_size(request.query_params.get("limit") or str(BATCHES_SHOWN))
    except ValueError as exc:
        return PlainTextResponse(str(exc), status_code=400)
    rows = await run_in_threadpool(
        lambda: _store(request).batches.list(open_only=open_only, limit=limit))
    return _render(request, "batches.html", batches=rows, open_only=open_only, limit=limit,
                   larger=listing.larger(limit) if len(rows) == limit else None,
                   here="/batches" + ("?open=1" if open_only else ""))


async def batch_page(request: Request) -> Response:
    if (refused := _login_needed(request)) is not None:
        return refused
    batch_id = request.path_params["batch_id"]
    store = _store(request)
    try:
        status, members = await run_in_threadpool(
            lambda: (store.batches.status(batch_id), store.batches.members(batch_id)))
    except BatchNotFound:
        return _render(request, "missing.html", status_code=404, what="batch", job_id=batch_id)
    return _render(request, "batch.html", batch=status, members=members)


async def batch_cancel(request: Request) -> Response:
    batch_id = request.path_params["batch_id"]
    form, refused = await _checked_form(request)
    if refused is not None:
        return refused
    done = await run_in_threadpool(actions.cancel_batch, _store(request),
                                   request.app.state.access.who, batch_id)
    return acted(request, f"batch {batch_id}: {done.what}", form.get("next"))


def pool_weights(pools: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """R38: each queue's weight in each live pool that serves it by weights (``jobpool
    start --queues high:3,default:1``), as the pool's heartbeat wrote them in its
    counters: ``{queue: [{"pool": owner, "host": ..., "pid": ..., "weight": N}]}``. A
    row is data (R44): weights that are not whole numbers above 0 are left out."""
    found: dict[str, list[dict[str, Any]]] = {}
    for pool in liveness.live_pools(pools):
        weights = pool["counters"].get("weights")
        if not isinstance(weights, dict):
            continue
        for queue, weight in weights.items():
            if isinstance(queue, str) and isinstance(weight, int) \
                    and not isinstance(weight, bool) and weight > 0:
                found.setdefault(queue, []).append({"pool": pool["owner"], "host": pool["host"],
                                                    "pid": pool["pid"], "weight": weight})
    return found


def queues_view(store: Any, snapshot: Snapshot) -> dict[str, Any]:
    """Each queue with jobs, paused or limited: its counts (of the shared snapshot),
    whether it is paused, its limit and its weights in the live pools (R38: none
    where no live pool weighs it); and the limits of job names with their groups and
    tokens (``store.limits.listing``)."""
    limits = store.limits.listing()
    by_queue = {row["target"]: row for row in limits["limits"] if row["scope"] == "queue"}
    queues = {view.queue: view for view in snapshot.queues}
    paused = set(store.paused_queues())
    names = sorted(set(queues) | paused | set(by_queue))
    weights = pool_weights(store.pools())
    rows = [{"queue": name, "counts": queues.get(name), "paused": name in paused,
             "limit": by_queue.get(name), "weights": weights.get(name, [])} for name in names]
    return {"queues": rows, "most_running": bounds.MAX_QUEUE_RUNNING,
            "name_limits": [row for row in limits["limits"] if row["scope"] == "name"],
            "groups": limits["groups"]}


async def queues_page(request: Request) -> Response:
    if (refused := _login_needed(request)) is not None:
        return refused
    return _render(request, "queues.html", **await run_in_threadpool(
        lambda: queues_view(_store(request), request.app.state.live.get().snapshot)))
