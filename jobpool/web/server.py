"""``jobpool web``: the dashboard served by uvicorn, in a process of its own (R47).

Safe by default: it binds to loopback, and an address anyone else can reach is
refused without a token, in one line, before anything listens.
"""
from __future__ import annotations

import ipaddress
from collections.abc import Callable

from jobpool import metrics
from jobpool.errors import JobpoolError
from jobpool.metrics import Address, parse_address

#: Where ``jobpool web`` listens unless ``--bind`` says otherwise.
DEFAULT_BIND = "127.0.0.1:8700"
#: The Host headers an open (tokenless) dashboard answers: loopback names only, so a
#: page of another site whose name resolves to 127.0.0.1 gets nothing (DNS rebinding).
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name: it may resolve to anything


def check_bind(bind: Address, token: str | None) -> None:
    """Refuse, in one line, to serve an open dashboard beyond this host."""
    if token is None and not is_loopback(bind.host):
        raise JobpoolError(f"refusing to serve the dashboard on {bind.host} without a token: "
                           "set --token or JOBPOOL_WEB_TOKEN, or bind to 127.0.0.1")


def serve(store_url: str | None, bind_text: str | None, *, token: str | None, token_label: str,
          read_only: bool, announce: Callable[[str], None]) -> None:
    """Check the address, open the store, listen, announce the address, serve until
    SIGINT or SIGTERM."""
    import uvicorn

    from jobpool.web.app import create_app
    bind_text = bind_text or DEFAULT_BIND
    bind = parse_address(bind_text, "--bind")
    check_bind(bind, token)
    hosts = None if token is not None else (*LOOPBACK_HOSTS, bind.host)
    app = create_app(store_url, token=token, token_label=token_label, read_only=read_only,
                     allowed_hosts=hosts)
    sock = metrics.bind(bind, bind_text, "--bind")
    host, port = sock.getsockname()[:2]
    shown_host = f"[{host}]" if ":" in host else host
    announce(f"jobpool web: serving http://{shown_host}:{port}/"
             f"{' (read-only)' if read_only else ''}{' (token required)' if token else ''}")
    # An open overview's stream never ends by itself: the hub ends every stream within a
    # refresh of SIGTERM or SIGINT (uvicorn waits for open answers before it stops);
    # the timeout is for an answer that still hangs then.
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on",
                            timeout_graceful_shutdown=10)
    server = uvicorn.Server(config)
    app.state.stream.stopping = lambda: server.should_exit
    server.run(sockets=[sock])
