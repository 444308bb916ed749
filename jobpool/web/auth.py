"""Who may use the web dashboard, and proof that a form came from its own pages (R47).

Without a token the dashboard serves whoever reaches it, so ``jobpool web`` binds to
loopback only (``server.check_bind``) and every request is ``loopback``. With a token,
a page needs a session that the login form opened (a cookie signed with a key made at
start, so a restart logs everyone out) or ``Authorization: Bearer TOKEN``; the JSON
API takes the bearer token only, so no cookie a browser sends on its own can act there.

Every form carries the session's CSRF token in a hidden field; a POST from a page whose
field does not match is refused (403) before it reads the store.
"""
from __future__ import annotations

import hmac
import secrets
from dataclasses import dataclass

from starlette.requests import Request

#: The session key holding the per-session CSRF token.
CSRF_KEY = "csrf"
#: The session key set once the login form took the right token.
LOGGED_IN_KEY = "logged_in"
#: The name of the hidden field every form carries.
CSRF_FIELD = "csrf"
#: Who acts when no token is set: only processes on this host can reach the dashboard.
LOOPBACK = "loopback"


@dataclass(frozen=True, slots=True)
class Access:
    """The dashboard's access rules: the token (None: open to loopback) and its label,
    the name ``web_action`` events give whoever used it."""

    token: str | None = None
    label: str = "token"
    read_only: bool = False

    def matches(self, offered: str | None) -> bool:
        # compare_digest: a wrong guess takes as long however many characters it got right.
        return (self.token is not None and offered is not None
                and hmac.compare_digest(offered.encode(), self.token.encode()))

    def bearer_ok(self, request: Request) -> bool:
        scheme, _, value = request.headers.get("authorization", "").partition(" ")
        return scheme.lower() == "bearer" and self.matches(value.strip())

    def page_ok(self, request: Request) -> bool:
        """A page (or a form's POST) may be served to this request."""
        if self.token is None:
            return True
        return bool(request.session.get(LOGGED_IN_KEY)) or self.bearer_ok(request)

    def api_ok(self, request: Request) -> bool:
        return self.token is None or self.bearer_ok(request)

    @property
    def who(self) -> str:
        return LOOPBACK if self.token is None else self.label


def csrf_token(request: Request) -> str:
    """The session's CSRF token, made on first use."""
    token = request.session.get(CSRF_KEY)
    if not isinstance(token, str) or not token:
        token = secrets.token_urlsafe(32)
        request.session[CSRF_KEY] = token
    return token


def csrf_ok(request: Request, offered: object) -> bool:
    expected = request.session.get(CSRF_KEY)
    return (isinstance(expected, str) and bool(expected) and isinstance(offered, str)
            and hmac.compare_digest(offered.encode(), expected.encode()))


def log_in(request: Request) -> None:
    """Open the session; a fresh CSRF token, so one seen before the login is worthless."""
    request.session.clear()
    request.session[LOGGED_IN_KEY] = True
    request.session[CSRF_KEY] = secrets.token_urlsafe(32)


def safe_next(target: object) -> str:
    """Where to go after a login or an action: a path on this site, never another's
    (``//evil.example`` and ``/\\evil`` are other sites to a browser)."""
    if isinstance(target, str) and target.startswith("/") and not target.startswith(("//", "/\\")):
        return target
    return "/"
