"""``jobpool web``: the dashboard served by uvicorn, in a process of its own (R47).

Safe by default: it binds to loopback, and an address anyone else can reach is
refused without a token, in one line, before anything listens.
"""
from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable
from typing import NamedTuple

from jobpool.errors import JobpoolError

#: Where ``jobpool web`` listens unless ``--bind`` says otherwise.
DEFAULT_BIND = "127.0.0.1:8700"
#: The Host headers an open (tokenless) dashboard answers: loopback names only, so a
#: page of another site whose name resolves to 127.0.0.1 gets nothing (DNS rebinding).
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


class Bind(NamedTuple):
    host: str
    port: int


def parse_bind(text: str) -> Bind:
    """``HOST:PORT``, ``[IPv6]:PORT``, ``:PORT`` or ``PORT`` (loopback); port 0 takes
    a free port (the line ``serve`` prints names it)."""
    raw = text.strip()
    host, sep, port = raw.rpartition(":")
    if not sep:
        host, port = "", raw
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise JobpoolError(f"--bind {text!r}: write an IPv6 host in brackets, as [::1]:8700")
    if not port.isdigit() or int(port) > 65535:
        raise JobpoolError(f"--bind {text!r}: the port must be a number from 0 to 65535")
    return Bind(host or "127.0.0.1", int(port))


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name: it may resolve to anything


def check_bind(bind: Bind, token: str | None) -> None:
    """Refuse, in one line, to serve an open dashboard beyond this host."""
    if token is None and not is_loopback(bind.host):
        raise JobpoolError(f"refusing to serve the dashboard on {bind.host} without a token: "
                           "set --token or JOBPOOL_WEB_TOKEN, or bind to 127.0.0.1")


def listen(bind: Bind) -> socket.socket:
    family = socket.AF_INET6 if ":" in bind.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((bind.host, bind.port))
    except OSError as exc:
        sock.close()
        raise JobpoolError(f"cannot listen on {bind.host}:{bind.port}: {exc.strerror}") from None
    sock.listen(128)
    return sock


def serve(store_url: str, bind_text: str, *, token: str | None, token_label: str,
          read_only: bool, announce: Callable[[str], None]) -> None:
    """Check the address, open the store, listen, announce the address, serve until
    SIGINT or SIGTERM."""
    import uvicorn

    from jobpool.web.app import create_app
    bind = parse_bind(bind_text)
    check_bind(bind, token)
    hosts = None if token is not None else (*LOOPBACK_HOSTS, bind.host)
    app = create_app(store_url, token=token, token_label=token_label, read_only=read_only,
                     allowed_hosts=hosts)
    sock = listen(bind)
    host, port = sock.getsockname()[:2]
    shown_host = f"[{host}]" if ":" in host else host
    announce(f"jobpool web: serving http://{shown_host}:{port}/"
             f"{' (read-only)' if read_only else ''}{' (token required)' if token else ''}")
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on")
    uvicorn.Server(config).run(sockets=[sock])
