"""The web dashboard's Starlette application (DESIGN section 13, R47).

``create_app`` opens the store through ``jobpool.connect`` (read-only with
``read_only``: then even a mistake here cannot write) and serves the pages
(``pages``) and the JSON API (``api``). It is an API user like any other: every read
and write is a ``Store`` method, never SQL. Store calls run in Starlette's thread
pool; a store gives each thread its own connection.
"""
from __future__ import annotations

import contextlib
import secrets
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import jinja2
import markupsafe
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.sessions import SessionMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates
from starlette.types import ASGIApp, Receive, Scope, Send

import jobpool
from jobpool import bounds
from jobpool.display import shown
from jobpool.web import api, auth, charts, fleet, formats, live, pages, schedules, stream
from jobpool.web.auth import Access

HERE = Path(__file__).parent

#: Sent with every answer: no page of ours runs a script it did not serve, none is
#: framed by another site (a framed button is a click taken), no address leaks on.
SECURITY_HEADERS = {
    "content-security-policy": "default-src 'self'; script-src 'self'; "
                               "style-src 'self' 'unsafe-inline'; frame-ancestors 'none'; "
                               "form-action 'self'",
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cache-control": "no-store",
}


def _shown(value: Any) -> Any:
    """Every ``{{ }}`` of a template: text with its control characters written out
    (R46); autoescape then makes it HTML text, so no row can add markup."""
    if isinstance(value, markupsafe.Markup):
        return value  # a macro's output: its own ``{{ }}`` were shown and escaped already
    return shown(value) if isinstance(value, str) else value


def templates() -> Jinja2Templates:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(HERE / "templates"),
                             autoescape=True, finalize=_shown, undefined=jinja2.StrictUndefined)
    formats.install(env)
    return Jinja2Templates(env=env)


class _Guard:
    """Security headers on every answer, and, given ``hosts``, a refusal of any other
    Host header: a site whose name an attacker points at 127.0.0.1 (DNS rebinding)
    would otherwise read an open loopback dashboard from the victim's browser."""

    def __init__(self, app: ASGIApp, hosts: Sequence[str] | None) -> None:
        self.app = app
        self.hosts = None if hosts is None else frozenset(h.lower() for h in hosts)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.hosts is not None:
            host = Request(scope).headers.get("host", "")
            if _hostname(host) not in self.hosts:
                await PlainTextResponse("unknown host", status_code=421)(scope, receive, send)
                return

        async def with_headers(message: Any) -> None:
            if message["type"] == "http.response.start":
                headers = message.setdefault("headers", [])
                present = {k.lower() for k, _ in headers}
                for key, value in SECURITY_HEADERS.items():
                    if key.encode() not in present:
                        headers.append((key.encode(), value.encode()))
            await send(message)

        await self.app(scope, receive, with_headers)


def _hostname(host: str) -> str:
    """``127.0.0.1:8700`` -> ``127.0.0.1``; ``[::1]:8700`` -> ``::1``."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1:].partition("]")[0]
    return host.rpartition(":")[0] if host.count(":") == 1 else host


def _ids_in_range(routes: list[Route]) -> list[Route]:
    """The routes that name a row by a whole number (``{job_id:int}``, ``{batch_id:int}``)
    answer 404 for one past a store's 64-bit ids, before any store call: it names no
    row, and the store's driver failed on it (a 500)."""
    return [Route(route.path, _in_range(route.endpoint, route.path.startswith("/api/")),
                  methods=route.methods, name=route.name)
            if ":int}" in route.path else route for route in routes]


def _in_range(endpoint: Any, api_route: bool) -> Any:
    async def checked(request: Request) -> Response:
        if any(isinstance(value, int) and value > bounds.INT64_MAX
               for value in request.path_params.values()):
            said = f"no such row: an id is at most {bounds.INT64_MAX}"
            return (JSONResponse({"error": said}, status_code=404) if api_route
                    else PlainTextResponse(said, status_code=404))
        return await endpoint(request)
    return checked


def create_app(store_url: str | None, *, token: str | None = None, read_only: bool = False,
               token_label: str = "token", allowed_hosts: Sequence[str] | None = None,
               store: Any = None) -> Starlette:
    """The dashboard over the store at ``store_url``.

    ``token``: pages need a login (or the bearer token) and the API the bearer token;
    None serves everyone who reaches it (bind to loopback only). ``read_only``: no
    forms, and every action is refused with 403. ``allowed_hosts``: the Host headers
    answered (None: any). ``store``: an open store to use instead of opening one."""
    if token is not None and not token:
        raise ValueError("the web token is empty")
    opened = store is None
    if store is None:
        store = jobpool.connect(store_url, readonly=True) if read_only \
            else jobpool.connect(store_url, create=False)
    access = Access(token=token, label=token_label, read_only=read_only)

    @contextlib.asynccontextmanager
    async def closing(app: Starlette) -> AsyncIterator[None]:
        yield
        await app.state.stream.close()
        if opened:
            store.close()

    app = Starlette(routes=[*_ids_in_range([*pages.routes(), Route("/events", stream.events),
                                            *fleet.routes(), *schedules.routes(),
                                            *charts.routes(), *api.routes()]),
                            Mount("/static", StaticFiles(directory=HERE / "static"), name="static")],
                    middleware=[Middleware(_Guard, hosts=allowed_hosts),
                                Middleware(SessionMiddleware, secret_key=secrets.token_urlsafe(32),
                                           session_cookie="jobpool_session", same_site="strict",
                                           max_age=12 * 3600)],
                    lifespan=closing)
    app.state.store = store
    app.state.live = live.SharedSnapshot(store)
    app.state.access = access
    app.state.templates = templates()
    app.state.stream = stream.Hub(app.state.live, _live_part(app.state.templates, access))
    return app


def _live_part(made: Jinja2Templates, access: Access) -> Any:
    """How the stream's hub renders a frame: the overview's live part as ``/live``
    draws it, once for every viewer, each form's CSRF token left to ``CSRF_SLOT``."""
    template = made.env.get_template("_overview.html")

    def render(frame: live.Frame) -> str:
        return template.render(snap=frame.snapshot, paused=frame.paused, poll=live.POLL,
                               read_only=access.read_only, csrf_field=auth.CSRF_FIELD,
                               csrf=markupsafe.Markup(stream.CSRF_SLOT))
    return render
