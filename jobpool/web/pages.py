"""The dashboard's HTML pages and their forms (R47).

Every page is a template over what one or two ``Store`` calls return; every form
POSTs with the session's CSRF token and lands back on a page (post/redirect/get),
with what happened in a one-time notice. In read-only mode no form is drawn and every
POST is refused with 403.
"""
from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route

from jobpool import bounds, serialize
from jobpool.display import counted
from jobpool.errors import BatchNotFound, JobNotFound
from jobpool.store.rows import LISTED_STATUSES
from jobpool.web import actions, auth, listing, live

#: Fields of a job's row that hold what a job was given or made (its arguments, its
#: result, its saved state): shown only on a "reveal" click, not to whoever glances.
HIDDEN_FIELDS = ("payload", "result", "state")


def routes() -> list[Route]:
    return [
        Route("/", overview),
        Route("/live", live_part),
        Route("/jobs", jobs_page),
        Route("/jobs/{job_id:int}", job_page),
        Route("/jobs/selected", selected_action, methods=["POST"]),
        Route("/jobs/all/{action:str}", bulk_page, methods=["GET"]),
        Route("/jobs/all/{action:str}", bulk_action, methods=["POST"]),
        Route("/jobs/{job_id:int}/data", job_data),
        Route("/dead", dead_page),
        Route("/scheduled", scheduled_page),
        Route("/enqueue", enqueue_page, methods=["GET"]),
        Route("/enqueue", enqueue, methods=["POST"]),
        Route("/login", login_page, methods=["GET"]),
        Route("/login", login, methods=["POST"]),
        Route("/logout", logout, methods=["POST"]),
        Route("/jobs/{job_id:int}/{action:str}", job_action, methods=["POST"]),
        Route("/queues/{action:str}", named_queue_action, methods=["POST"]),
        Route("/queues/{queue:path}/{action:str}", queue_action, methods=["POST"]),
    ]


def _store(request: Request) -> Any:
    return request.app.state.store


def _render(request: Request, template: str, status_code: int = 200, fragment: bool = False,
            **context: Any) -> Response:
    """``template`` with what every page shows; a ``fragment`` (a part htmx swaps in)
    leaves the one-time notice for the page it is part of."""
    access: auth.Access = request.app.state.access
    context.update(request=request, read_only=access.read_only, csrf=auth.csrf_token(request),
                   csrf_field=auth.CSRF_FIELD, logged_in=access.token is not None
                   and bool(request.session.get(auth.LOGGED_IN_KEY)),
                   notice=None if fragment else request.session.pop("notice", None))
    return request.app.state.templates.TemplateResponse(request, template, context,
                                                        status_code=status_code)


def _login_needed(request: Request) -> Response | None:
    if request.app.state.access.page_ok(request):
        return None
    return RedirectResponse(f"/login?next={_quoted(request.url.path)}", status_code=303)


def _quoted(path: str) -> str:
    from urllib.parse import quote
    return quote(path, safe="/")


async def overview(request: Request) -> Response:
    """The overview, its live part redrawn by htmx every ``live.POLL`` seconds from
    ``/live``: both read the one shared snapshot (``live.SharedSnapshot``)."""
    if (refused := _login_needed(request)) is not None:
        return refused
    frame = await run_in_threadpool(request.app.state.live.get)
    return _render(request, "overview.html", snap=frame.snapshot, paused=frame.paused,
                   poll=live.POLL)


async def live_part(request: Request) -> Response:
    """The overview's live part alone; 401 without a login (htmx swaps in no error)."""
    if not request.app.state.access.page_ok(request):
        return PlainTextResponse("log in first", status_code=401)
    frame = await run_in_threadpool(request.app.state.live.get)
    return _render(request, "_overview.html", fragment=True, snap=frame.snapshot,
                   paused=frame.paused, poll=live.POLL)


async def jobs_page(request: Request) -> Response:
    if (refused := _login_needed(request)) is not None:
        return refused
    try:
        chosen, limit = listing.filters(request.query_params)
    except ValueError as exc:
        return PlainTextResponse(str(exc), status_code=400)
    rows, more, window = await run_in_threadpool(listing.searched_page, _store(request),
                                                 chosen, limit)
    after = listing.next_after(rows, more, window)
    larger = listing.larger(limit)
    return _render(request, "jobs.html", rows=rows, more=more, chosen=chosen, limit=limit,
                   window=window, searching=window is not None,
                   scan_rows=chosen["scan"] or listing.SEARCH_ROWS,
                   older_query=window and window.older and listing.query_of(
                       chosen, after=window.older, limit=limit),
                   statuses=LISTED_STATUSES, larger=larger,
                   larger_query=larger and listing.query_of(chosen, limit=larger),
                   next_query=after and listing.query_of(chosen, after=after, limit=limit),
                   first_query=chosen["after"] and listing.query_of(chosen, after=None,
                                                                    limit=limit),
                   bulk=[] if listing.searching(chosen) else [
                       a for a in actions.BULK_STATUSES if actions.bulk_applies(a, chosen["status"])],
                   filter_query=listing.query_of(chosen, after=None),
                   selectable=bool(rows) and not request.app.state.access.read_only,
                   selected_actions=actions.SELECTED_BUTTONS,
                   here=f"/jobs?{request.url.query}" if request.url.query else "/jobs")


#: The most steps of a chain a job's page lists (the list of the chain pages on).
CHAIN_SHOWN = 50


def waiting(row: dict[str, Any], now: float) -> str | None:
    """R51: how a job waits for its time, or None when it does not: ``retrying`` (out
    a retry's backoff: it has had attempts), else ``scheduled``."""
    if row["status"] != "ready" or row["run_at"] is None or row["run_at"] <= now:
        return None
    return "retrying" if row["attempts"] else "scheduled"


def _job_view(store: Any, job_id: int) -> dict[str, Any]:
    """A job's page: its row, attempts, chain (its first job and the steps after, and
    R12's steps not enqueued yet: the chain's newest step enqueues them one by one as
    each completes) and batch, each read by its own ``Store`` call."""
    row = store.get(job_id)
    root = row["chain_root"] or job_id
    chain = store.list_jobs(chain=root, limit=CHAIN_SHOWN + 1)
    batch = None
    if row["batch_id"] is not None:
        try:
            batch = store.batch_status(row["batch_id"])
        except BatchNotFound:
            batch = None  # swept with its members' rows
    previous = following = None
    if len(chain) > 1:
        previous, following = _steps_beside(store, root, job_id, chain[:CHAIN_SHOWN])
    newest = chain[-1] if len(chain) <= CHAIN_SHOWN else store.list_jobs(
        chain=root, newest_first=True, limit=1)[0]
    waiting = store.waiting_steps(newest["id"]) if chain else []
    return {"row": row, "attempts": store.attempts(job_id),
            "chain": chain[:CHAIN_SHOWN] if len(chain) > 1 or waiting else [],
            "chain_more": len(chain) > CHAIN_SHOWN, "chain_root": root, "batch": batch,
            "previous_step": previous, "next_step": following,
            "waiting_steps": waiting, "newest_step": newest}


def _steps_beside(store: Any, root: int, job_id: int,
                  shown: list[dict[str, Any]]) -> tuple[Any, Any]:
    """The chain's step before this job and the one after it (R12: a chain's steps are
    enqueued in the order they run, so in id order): from the steps the page shows,
    or, for a job past them in a long chain, one keyset read each way."""
    ids = [step["id"] for step in shown]
    if job_id in ids[:-1] or (job_id in ids and len(ids) < CHAIN_SHOWN):
        at = ids.index(job_id)
        return (shown[at - 1] if at else None), (shown[at + 1] if at + 1 < len(shown) else None)
    before = store.list_jobs(chain=root, after=job_id, newest_first=True, limit=1)
    after = store.list_jobs(chain=root, after=job_id, limit=1)
    return (before[0] if before else None), (after[0] if after else None)


async def job_page(request: Request) -> Response:
    if (refused := _login_needed(request)) is not None:
        return refused
    job_id = request.path_params["job_id"]
    store = _store(request)
    try:
        view = await run_in_threadpool(_job_view, store, job_id)
    except JobNotFound:
        return _render(request, "missing.html", status_code=404, job_id=job_id)
    row = view["row"]
    reveal = request.query_params.get("reveal") == "1"
    shown_fields = {k: v for k, v in row.items()
                    if k not in HIDDEN_FIELDS and k != "last_error" and v is not None}
    if isinstance(shown_fields.get("meta"), dict):
        # R54: the metadata as the JSON it was enqueued as (not Python's repr of a dict).
        shown_fields["meta"] = json.dumps(shown_fields["meta"], ensure_ascii=False)
    return _render(request, "job.html", fields=shown_fields, reveal=reveal,
                   data=_data(row) if reveal else None, waiting=waiting(row, time.time()),
                   **view)


async def job_data(request: Request) -> Response:
    """The hidden fields alone: what the "reveal" button's htmx request swaps in."""
    if (refused := _login_needed(request)) is not None:
        return refused
    job_id = request.path_params["job_id"]
    try:
        row = await run_in_threadpool(_store(request).get, job_id)
    except JobNotFound:
        return PlainTextResponse(f"no job with id {job_id}", status_code=404)
    return _render(request, "_data.html", data=_data(row))


def _data(row: dict[str, Any]) -> dict[str, str]:
    out = {}
    for key in HIDDEN_FIELDS:
        value = row.get(key)
        if value is None:
            continue
        out[key] = value if isinstance(value, str) else json.dumps(value, default=str)
    return out


async def dead_page(request: Request) -> Response:
    if (refused := _login_needed(request)) is not None:
        return refused
    name = request.query_params.get("name") or None
    try:
        limit = listing.page_size(request.query_params.get("limit"))
    except ValueError as exc:
        return PlainTextResponse(str(exc), status_code=400)
    rows = await run_in_threadpool(lambda: _store(request).dead.list(name=name, limit=limit))
    return _render(request, "dead.html", rows=rows, name=name, limit=limit,
                   larger=listing.larger(limit) if len(rows) == limit else None)


async def scheduled_page(request: Request) -> Response:
    """R51: the jobs waiting for their time (scheduled, or out a retry's backoff), the
    newest first (the ``Store`` protocol lists by id, not by due time), each with its
    due time and a "run now" button, and "run all matching now" for the filter."""
    if (refused := _login_needed(request)) is not None:
        return refused
    query = {k: v for k, v in request.query_params.items() if k != "status"}
    try:
        chosen, limit = listing.filters(dict(query, status="scheduled"))
    except ValueError as exc:
        return PlainTextResponse(str(exc), status_code=400)
    rows, more = await run_in_threadpool(listing.page, _store(request), chosen, limit)
    after = listing.next_after(rows, more)
    here = listing.query_of(chosen, status=None)
    return _render(request, "scheduled.html", rows=rows, more=more, chosen=chosen, limit=limit,
                   next_query=after and listing.query_of(chosen, status=None, after=after,
                                                         limit=limit),
                   first_query=chosen["after"] and listing.query_of(chosen, status=None,
                                                                    after=None, limit=limit),
                   here="/scheduled" + (f"?{here}" if here else ""),
                   filter_query=listing.query_of(chosen, after=None))


#: The enqueue form's fields, as typed.
ENQUEUE_FIELDS = ("name", "args", "kwargs", "queue", "delay")


async def enqueue_page(request: Request) -> Response:
    if (refused := _login_needed(request)) is not None:
        return refused
    if request.app.state.access.read_only:
        return PlainTextResponse("this dashboard is read-only", status_code=403)
    typed = {"name": request.query_params.get("name", ""), "args": "[]", "kwargs": "{}",
             "queue": "", "delay": ""}
    return _render(request, "enqueue.html", typed=typed, problem=None)


def _typed_spec(typed: dict[str, str]) -> dict[str, Any]:
    """What the enqueue form asks for (``args`` and ``kwargs`` as JSON, ``delay`` in
    seconds), checked as the API checks its body; ``ValueError`` saying what is wrong."""
    body: dict[str, Any] = {"name": typed["name"].strip(), "queue": typed["queue"].strip()}
    for key, empty in (("args", "[]"), ("kwargs", "{}")):
        try:
            body[key] = serialize.loads(typed[key].strip() or empty)
        except ValueError:
            raise ValueError(f"{key} is not JSON") from None
        except RecursionError:  # the decoder's own bound on depth
            raise ValueError(f"{key} is nested too deeply") from None
    if typed["delay"].strip():
        try:
            body["delay"] = float(typed["delay"])
        except ValueError:
            raise ValueError("delay must be a number of seconds") from None
    return actions.enqueue_spec(body)


async def enqueue(request: Request) -> Response:
    """The enqueue form's POST: the job queued by name, then its page; or the form
    again, as typed, saying what was wrong (the store's words when it refused)."""
    form, refused = await _checked_form(request)
    if refused is not None:
        return refused
    typed = {key: str(form.get(key) or "") for key in ENQUEUE_FIELDS}
    try:
        spec = _typed_spec(typed)
    except ValueError as exc:
        return _render(request, "enqueue.html", status_code=400, typed=typed, problem=str(exc))
    done, handle = await run_in_threadpool(actions.enqueue, _store(request),
                                           request.app.state.access.who, spec)
    if handle is None:
        return _render(request, "enqueue.html", status_code=409, typed=typed, problem=done.what)
    return acted(request, done.what, f"/jobs/{handle.id}")


async def login_page(request: Request) -> Response:
    if request.app.state.access.token is None:
        return RedirectResponse("/", status_code=303)
    return _render(request, "login.html", next=auth.safe_next(request.query_params.get("next")),
                   wrong=False)


async def login(request: Request) -> Response:
    access: auth.Access = request.app.state.access
    form = await request.form()
    if not auth.csrf_ok(request, form.get(auth.CSRF_FIELD)):
        return PlainTextResponse("the form's CSRF token is missing or stale: reload the page",
                                 status_code=403)
    target = auth.safe_next(form.get("next"))
    offered = form.get("token")
    if access.token is None or not access.matches(offered if isinstance(offered, str) else None):
        return _render(request, "login.html", status_code=401, next=target, wrong=True)
    auth.log_in(request)
    return RedirectResponse(target, status_code=303)


async def logout(request: Request) -> Response:
    form = await request.form()
    if not auth.csrf_ok(request, form.get(auth.CSRF_FIELD)):
        return PlainTextResponse("the form's CSRF token is missing or stale", status_code=403)
    request.session.clear()
    return RedirectResponse("/login" if request.app.state.access.token else "/", status_code=303)


_JOB_ACTIONS: dict[str, Callable[..., actions.Done]] = {
    "retry": actions.retry, "cancel": actions.cancel, "delete": actions.delete,
    "run-now": actions.run_now}
_QUEUE_ACTIONS: dict[str, Callable[..., actions.Done]] = {
    "pause": actions.pause, "resume": actions.resume, "clear-limit": actions.clear_limit}
#: The most fields a page's form sends besides a selection's ids.
_OWN_FIELDS_MOST = 16


async def _checked_form(request: Request) -> tuple[Any, Response | None]:
    """The POSTed form, or why it is refused: no login (401), read-only or no CSRF
    token matching the session's (403)."""
    access: auth.Access = request.app.state.access
    if not access.page_ok(request):
        return None, PlainTextResponse("log in first", status_code=401)
    if access.read_only:
        return None, PlainTextResponse("this dashboard is read-only", status_code=403)
    # A selection of a whole page (R47: up to SELECTED_MOST ids) and the form's own
    # fields: past Starlette's default of 1 000 fields, "select all" was refused.
    form = await request.form(max_fields=actions.SELECTED_MOST + _OWN_FIELDS_MOST)
    if not auth.csrf_ok(request, form.get(auth.CSRF_FIELD)):
        return None, PlainTextResponse("the form's CSRF token is missing or stale: reload the "
                                       "page", status_code=403)
    return form, None


async def job_action(request: Request) -> Response:
    job_id = request.path_params["job_id"]
    return await _act(request, _JOB_ACTIONS, job_id, f"job {job_id}")


async def queue_action(request: Request) -> Response:
    """A queue's action, the queue named in the path (``/queues/NAME/pause``), for
    callers that build the path themselves."""
    return await _queue_action(request, request.path_params["queue"])


async def named_queue_action(request: Request) -> Response:
    """A queue's action from the pages' forms, the queue named in a field: in the path,
    a queue named ``x/../default`` made the browser post ``/queues/default/pause``, so
    the button of a hostile queue's row paused another queue."""
    queue, refused = await named_in_form(request, "queue")
    if refused is not None:
        return refused
    return await _queue_action(request, queue)


async def named_in_form(request: Request, field: str) -> tuple[str, Response | None]:
    """The name the posted form gives in ``field`` (a queue, a pool: what the action is
    on), or why the form is refused (``_checked_form``'s reasons, or no such name)."""
    form, refused = await _checked_form(request)
    if refused is not None:
        return "", refused
    value = form.get(field)
    if not isinstance(value, str) or not value:
        return "", PlainTextResponse(f"the form names no {field}", status_code=400)
    return value, None


async def _queue_action(request: Request, queue: str) -> Response:
    if request.path_params["action"] == "limit":
        return await _queue_limit(request, queue)
    return await _act(request, _QUEUE_ACTIONS, queue, f"queue {queue}")


async def _queue_limit(request: Request, queue: str) -> Response:
    """The queues page's "set limit" form (R35): its ``running`` checked as ``jobpool
    limits set --running`` checks it (400 naming it, nothing written), then set."""
    form, refused = await _checked_form(request)
    if refused is not None:
        return refused
    try:
        running = bounds.queue_running(form.get("running"))
    except ValueError as exc:
        return PlainTextResponse(str(exc), status_code=400)
    done = await run_in_threadpool(actions.set_limit, _store(request),
                                   request.app.state.access.who, (queue, running))
    return acted(request, f"queue {queue}: {done.what}", form.get("next"))


async def _act(request: Request, known: dict[str, Callable[..., actions.Done]], target: Any,
               said: str) -> Response:
    act = known.get(request.path_params["action"])
    if act is None:
        return PlainTextResponse("no such action", status_code=404)
    form, refused = await _checked_form(request)
    if refused is not None:
        return refused
    done = await run_in_threadpool(act, _store(request), request.app.state.access.who, target)
    return acted(request, f"{said}: {_with_note(done)}", form.get("next"))


def _with_note(done: actions.Done) -> str:
    """An action's words for its notice, and its note when it has one."""
    return done.what + (f"; {done.note}" if done.note else "")


def acted(request: Request, notice: str, target: object) -> Response:
    """After an action: its notice for the next page, which lands at ``target`` (a path
    of this site) and reads the store anew (the shared snapshot is forgotten)."""
    request.app.state.live.forget()
    request.session["notice"] = notice
    return RedirectResponse(auth.safe_next(target), status_code=303)


async def selected_action(request: Request) -> Response:
    """The jobs page's "… selected" buttons: the action on each ticked job (the store
    refuses one whose status it does not take, and the notice counts each answer),
    then back to the same page."""
    form, refused = await _checked_form(request)
    if refused is not None:
        return refused
    action = form.get("action")
    if action not in actions.SELECTED_BUTTONS:
        return PlainTextResponse("no such action", status_code=400)
    if not form.getlist("id"):
        return acted(request, "select one job or more first", form.get("next"))
    try:
        ids = actions.selected_ids(form.getlist("id"))
    except ValueError as exc:
        return PlainTextResponse(str(exc), status_code=400)
    done, _ = await run_in_threadpool(actions.selected, _store(request),
                                      request.app.state.access.who, action, ids)
    return acted(request, f"{actions.SELECTED_BUTTONS[action]}: {_with_note(done)}",
                 form.get("next"))


def _bulk_filters(request: Request, query: Any) -> tuple[dict[str, Any], Response | None]:
    """The filter an "all matching" action takes (without a page's keyset), or why it
    is refused: not one of the actions (404), a status it does not take (400)."""
    action = request.path_params["action"]
    if action not in actions.BULK_STATUSES:
        return {}, PlainTextResponse("no such action", status_code=404)
    try:
        chosen, _ = listing.filters(query)
    except ValueError as exc:
        return {}, PlainTextResponse(str(exc), status_code=400)
    if not actions.bulk_applies(action, chosen["status"]):
        statuses = " or ".join(actions.BULK_STATUSES[action])
        return {}, PlainTextResponse(f"{action} all applies to jobs of status {statuses}: "
                                     "filter by one", status_code=400)
    if listing.searching(chosen):
        # A search reads one window of ids: "all matching" would be all in that window.
        return {}, PlainTextResponse(f"{action} all takes the indexed filters (status, name, "
                                     "queue, key, batch), not a search", status_code=400)
    return {k: v for k, v in listing.store_filters(chosen).items() if k != "after"}, None


async def bulk_page(request: Request) -> Response:
    """The confirmation of an "all matching" action: how many jobs it takes (counted
    up to ``BULK_MOST``), and a form naming the newest of them, so that jobs that
    match later are not taken by this press."""
    if (refused := _login_needed(request)) is not None:
        return refused
    if request.app.state.access.read_only:
        return PlainTextResponse("this dashboard is read-only", status_code=403)
    chosen, refused = _bulk_filters(request, request.query_params)
    if refused is not None:
        return refused
    store = _store(request)

    def count_chosen() -> tuple[int, int | None]:
        newest = store.list_jobs(**chosen, limit=1, newest_first=True)
        return (store.count_jobs(**chosen, at_most=actions.BULK_MOST + 1),
                newest[0]["id"] if newest else None)
    count, through = await run_in_threadpool(count_chosen)
    action = request.path_params["action"]
    return _render(request, "bulk.html", action=action, chosen=chosen,
                   button=actions.BULK_BUTTONS[action].format(
                       n=counted(min(count, actions.BULK_MOST), "job")),
                   count=min(count, actions.BULK_MOST), more=count > actions.BULK_MOST,
                   through=through, filter_query=listing.query_of(chosen))


async def bulk_action(request: Request) -> Response:
    form, refused = await _checked_form(request)
    if refused is not None:
        return refused
    chosen, refused = _bulk_filters(request, form)
    if refused is not None:
        return refused
    through = form.get("through")
    if not isinstance(through, str) or not through.isascii() or not through.isdigit():
        return PlainTextResponse("the form names no newest job: reload the page", status_code=400)
    action = request.path_params["action"]
    done = await run_in_threadpool(actions.bulk, _store(request), request.app.state.access.who,
                                   action, chosen, int(through))
    return acted(request, f"{action} all matching: {_with_note(done)}",
                 f"/jobs?{listing.query_of(chosen)}")
