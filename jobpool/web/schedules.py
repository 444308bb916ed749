"""The periodic jobs page and ``GET /api/periodic`` (R33, R47).

The store keeps, per periodic job, only the last occurrence a pool enqueued (the
``periodic`` table); the schedules are the app's registrations (``@job(every=…)``,
``@job(cron=…)``). So the web process knows a schedule only when it imports the app,
as a pool does: ``jobpool web --app MODULE``. Without it the page lists what the store
knows (each name and its last occurrence) and says how to see the schedules (as it
does when a name the store knows is not registered in this process). Each
row's last occurrence links to the job it made (found by its key, ``NAME@OCCURRENCE``,
through the key index).
"""
from __future__ import annotations

import time
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from jobpool import bounds, jobs
from jobpool.web.pages import _login_needed, _render, _store


def routes() -> list[Route]:
    return [Route("/periodic", periodic_page)]


def periodic_rows(store: Any, now: float | None = None) -> list[dict[str, Any]]:
    """Every periodic job the app registers or the store has enqueued, by name: its
    schedule and queue (None: not registered in this process), its last enqueued
    occurrence and that job's id and status, and its next occurrence after ``now``."""
    now = time.time() if now is None else now
    registered = {name: job for name, job in jobs.registered().items()
                  if job.schedule is not None}
    last = store.periodic_occurrences()
    found = []
    for name in sorted(set(registered) | set(last)):
        job = registered.get(name)
        occurrence = last.get(name)
        if not bounds.finite_number(occurrence):
            occurrence = None  # none yet, or a row written as no time (R44)
        made = None
        if occurrence is not None:
            made = store.list_jobs(name=name, key=f"{name}@{occurrence:.3f}", limit=1,
                                   newest_first=True)
        found.append({
            "name": name,
            "schedule": repr(job.schedule) if job else None,
            "queue": job.queue if job else None,
            "last_occurrence": occurrence,
            "last_job": made[0]["id"] if made else None,
            "last_status": made[0]["status"] if made else None,
            "next_occurrence": job.schedule.next_occurrence(now) if job else None,
        })
    return found


async def periodic_page(request: Request) -> Response:
    if (refused := _login_needed(request)) is not None:
        return refused
    rows = await run_in_threadpool(periodic_rows, _store(request))
    return _render(request, "periodic.html", rows=rows,
                   any_schedule=any(r["schedule"] for r in rows),
                   all_scheduled=all(r["schedule"] for r in rows))
