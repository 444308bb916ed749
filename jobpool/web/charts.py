"""The charts page (``/charts``) and ``GET /api/rollups`` (R56): throughput, pickup
latency and run time per job name over the last hours, from the pools' per-minute
rollups (``Store.rollups``), never from the jobs.

The charts are SVG drawn here, on the server: no script to run and none to vendor (the
page's content security policy already allows only our own), nothing to load before
the page shows, and every name in them escaped by the same templates as the rest. A
minute is a column; p50 and p95 are read from each minute's histogram buckets
(``jobpool.rollups.percentile``), so they are estimates within a bucket.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from jobpool import rollups
from jobpool.web.pages import _login_needed, _render, _store

#: The window a page shows unless asked (``hours=``), and the choices it offers.
DEFAULT_HOURS = 3
HOURS_OFFERED = (1, 3, 6, 24, rollups.MAX_HOURS)
#: The drawing's size in SVG units (it scales to the page's width).
WIDTH, HEIGHT = 720, 150
#: Room above and below a line's dots, so the highest and the lowest are drawn whole.
PAD = 4
#: The most columns the page draws: one per SVG unit of its width. A longer window
#: adds several minutes into a column (3 days: 6 minutes), which the page says; the
#: API's data stays a row per minute.
MOST_COLUMNS = WIDTH
#: Colours of the throughput bars, by what they count.
COLOURS = {"done": "#3a7d44", "retried": "#e0a030", "dead": "#c0392b"}


def routes() -> list[Route]:
    return [Route("/charts", charts_page)]


def window(query: Mapping[str, str]) -> tuple[int, str | None]:
    """``hours`` (1 to ``rollups.MAX_HOURS``: what the store keeps) and ``name`` (one
    job name, or all) from a query; ``ValueError`` naming what is wrong."""
    text = query.get("hours") or str(DEFAULT_HOURS)
    try:
        hours = int(text)
    except ValueError:
        raise ValueError(f"hours must be a whole number of hours, not {text!r}") from None
    if not 1 <= hours <= rollups.MAX_HOURS:
        raise ValueError(f"hours must be between 1 and {rollups.MAX_HOURS} (what the store "
                         f"keeps), not {hours}")
    return hours, query.get("name") or None


def read(store: Any, hours: int, name: str | None, now: float | None = None,
         most_columns: int | None = None) -> dict[str, Any]:
    """The window's rollups: per minute (every minute of it, empty ones too), the chosen
    name's or all names' counts and times; per name, the window's totals; and the
    names seen, for the page's choice. ``most_columns``: at most that many entries in
    ``minutes``, each adding up ``column_minutes`` minutes (the page's drawing)."""
    now = store.clock() if now is None else now  # the pools' beats dated the rollups (R7a)
    last = rollups.minute_of(now)
    first = last - (hours * 60 - 1) * rollups.MINUTE
    # The store adds the window up (a row a minute, a row a name): three days of many
    # names are a few thousand rows to read here, not a row per minute and name.
    by_minute = {row["minute"]: row for row in store.rollup_totals(first, by="minute", name=name)}
    empty = rollups.summary(rollups.merged(()))
    width = -(-hours * 60 // most_columns) if most_columns else 1  # minutes a column
    minutes = []
    for i in range(0, hours * 60, width):
        minute = first + i * rollups.MINUTE
        found = [row for k in range(width)
                 if (row := by_minute.get(minute + k * rollups.MINUTE)) is not None]
        if not found:
            shown = empty
        else:
            shown = rollups.summary(found[0] if len(found) == 1 else rollups.merged(found))
        minutes.append(dict(shown, minute=minute))
    return {"hours": hours, "name": name, "from": first, "to": last + rollups.MINUTE,
            "column_minutes": width, "minutes": minutes,
            "names": {row["name"]: rollups.summary(row)
                      for row in store.rollup_totals(first, by="name")}}


def throughput_chart(minutes: list[dict[str, Any]]) -> dict[str, Any]:
    """Stacked bars per minute (done, retried, dead), scaled to the busiest minute."""
    top = max((m["done"] + m["retried"] + m["dead"] for m in minutes), default=0)
    step = WIDTH / max(len(minutes), 1)
    bars = []
    for i, m in enumerate(minutes):
        y = float(HEIGHT)
        for part in ("done", "retried", "dead"):
            if not m[part]:
                continue
            tall = HEIGHT * m[part] / top
            y -= tall
            bars.append({"x": round(i * step, 2), "y": round(y, 2),
                         "width": round(max(step - 0.5, 0.5), 2), "height": round(tall, 2),
                         "part": part, "colour": COLOURS[part], "count": m[part],
                         "minute": m["minute"]})
    return {"bars": bars, "top": top, "width": WIDTH, "height": HEIGHT}


def times_chart(minutes: list[dict[str, Any]], part: str) -> dict[str, Any]:
    """Lines of p50 and p95 per minute of ``part`` (``latency`` or ``run_time``), with
    a dot at each minute that counted any (a lone minute is a dot, not an invisible
    line); scaled to the largest p95."""
    top = max((m[part]["p95"] for m in minutes if m[part]["p95"] is not None), default=0.0)
    step = WIDTH / max(len(minutes), 1)
    lines = {}
    for q in ("p50", "p95"):
        dots = [{"x": round(i * step + step / 2, 2),
                 "y": round(HEIGHT - PAD - ((HEIGHT - 2 * PAD) * m[part][q] / top if top else 0), 2),
                 "value": m[part][q], "minute": m["minute"]}
                for i, m in enumerate(minutes) if m[part][q] is not None]
        lines[q] = {"points": " ".join(f"{d['x']},{d['y']}" for d in dots), "dots": dots,
                    "count": len(dots)}
    return {"lines": lines, "top": top, "width": WIDTH, "height": HEIGHT}


async def charts_page(request: Request) -> Response:
    if (refused := _login_needed(request)) is not None:
        return refused
    try:
        hours, name = window(request.query_params)
    except ValueError as exc:
        return PlainTextResponse(str(exc), status_code=400)
    data = await run_in_threadpool(read, _store(request), hours, name, None, MOST_COLUMNS)
    minutes = data["minutes"]
    return _render(request, "charts.html", data=data, hours_offered=HOURS_OFFERED,
                   throughput=throughput_chart(minutes),
                   latency=times_chart(minutes, "latency"),
                   run_time=times_chart(minutes, "run_time"), colours=COLOURS,
                   totals={part: sum(m[part] for m in minutes)
                           for part in ("done", "retried", "dead")})
