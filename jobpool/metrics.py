"""A pool's own Prometheus series, and the small HTTP server that serves them.

The series live in a registry of their own (``prometheus_client``: counters,
histograms and a gauge, exposed with ``generate_latest``), so a user's own
metrics in the same process never mix with them. The supervisor counts into
them where it already counts (``loop._report``, ``slots.exited``); nothing
here reads the store: queue depths are the store's business and come from
``jobpool metrics`` (``store_metrics.py``), once per fleet, not once per pool.

The server runs inside the supervisor's loop, on its ``select``: the process
that forks children must not start a thread (a fork copies the locks a thread
holds, never the thread), so neither ``start_http_server`` nor a WSGI server
thread will do. Connections are non-blocking and read and written as the
selector reports them ready, so a slow or silent client can delay no turn; nor
can a crowd of them keep ``/healthz`` from an orchestrator's probe (R28a: a
request has about a second to arrive, and at the cap of open connections the
oldest one still arriving makes room for the newcomer).
"""
from __future__ import annotations

import errno
import ipaddress
import math
import selectors
import socket
import time
from collections.abc import Callable
from http import HTTPStatus
from typing import NamedTuple

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, generate_latest

from jobpool.errors import JobpoolError
from jobpool.forked import parent_only

#: Run and wait times, seconds: from 1 ms (a tiny job, an idle pool's wait) to an
#: hour (imports run for minutes; a backlog waits for hours).
TIME_BUCKETS = (0.001, 0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
                300.0, 600.0, 1200.0, 1800.0, 3600.0)

#: Why a child died mid-job (``jobpool_child_deaths_total``).
DEATH_CAUSES = ("crash", "timeout", "memory", "cancel")

#: ``/healthz`` answers 503 once the loop has not turned for this long, seconds.
HEALTHY_WITHIN = 5.0
#: A request's head larger than this is refused (nothing jobpool serves needs more).
MAX_REQUEST_BYTES = 8192
#: A client's whole request head must have come this soon after its accept, seconds,
#: or it is closed (R28a): a scraper or a probe sends its few bytes with the connection,
#: so only a stalled or hostile client is slower, and each holds a place of MAX_CLIENTS.
REQUEST_WITHIN = 1.0
#: Its reply must have been read this soon after its request came, seconds (a large
#: exposition to a scraper that reads slowly).
REPLY_WITHIN = 10.0
#: Connections open at once, so a flood of them cannot take the descriptors a pool needs
#: for its children's pipes. Reaching it never stops accepts: a newcomer takes the place
#: of the oldest client still sending its request, else of the oldest of all (R28a).
MAX_CLIENTS = 32
#: Connections the kernel queues until the loop's next turn accepts them: a burst of
#: them fits, where a full queue would drop a probe's SYN for a second's retransmit.
LISTEN_BACKLOG = 128
#: After ``accept`` failed (out of descriptors), the listener rests this long, seconds.
ACCEPT_REST = 1.0


class PoolMetrics:
    """The series one pool exports (names pinned by the docs: dashboards use them)."""

    def __init__(self) -> None:
        #: (busy, idle) now, read at each scrape for ``jobpool_slots``.
        self.slot_counts: Callable[[], tuple[int, int]] | None = None
        self.registry = CollectorRegistry(auto_describe=True)
        self.jobs = Counter("jobpool_jobs", "Attempts this pool settled, by outcome",
                            ("name", "queue", "outcome"), registry=self.registry)
        self.child_deaths = Counter("jobpool_child_deaths", "Children that died running a job",
                                    ("cause",), registry=self.registry)
        self.run_seconds = Histogram("jobpool_job_run_seconds", "Run time of an attempt",
                                     ("name", "queue"), buckets=TIME_BUCKETS,
                                     registry=self.registry)
        self.wait_seconds = Histogram("jobpool_job_wait_seconds",
                                      "From when a job was due to its claim",
                                      ("name", "queue"), buckets=TIME_BUCKETS,
                                      registry=self.registry)
        self.slots = Gauge("jobpool_slots", "This pool's slots, busy or idle", ("state",),
                           registry=self.registry)
        for cause in DEATH_CAUSES:
            self.child_deaths.labels(cause)  # present at 0 from the start, as rates need

    def claimed(self, name: str, queue: str, waited: float) -> None:
        self.wait_seconds.labels(name, queue).observe(max(0.0, waited))

    def settled(self, name: str, queue: str, outcome: str, ran: float | None) -> None:
        self.jobs.labels(name, queue, outcome).inc()
        if ran is not None:
            self.run_seconds.labels(name, queue).observe(ran)

    def child_died(self, cause: str) -> None:
        self.child_deaths.labels(cause).inc()

    def exposition(self) -> bytes:
        if self.slot_counts is not None:
            busy, idle = self.slot_counts()
            self.slots.labels("busy").set(busy)
            self.slots.labels("idle").set(idle)
        return generate_latest(self.registry)


class Address(NamedTuple):
    host: str
    port: int


def parse_address(text: str, what: str = "metrics address") -> Address:
    """``PORT`` or ``:PORT`` (loopback), ``HOST:PORT``, ``[IPv6]:PORT``; one-line
    ``JobpoolError`` naming what is wrong (``what``: the address's name in it). Port 0
    takes any free port (the ``pool_started`` event names the one taken)."""
    raw = text.strip()
    host, sep, port_text = raw.rpartition(":")
    if not sep:
        host, port_text = "", raw
    # A host alone ("127.0.0.1", "localhost", "[::1]"), not a port that is no number.
    if (raw.startswith("[") and raw.endswith("]")) or (not sep and raw and not raw.isdigit() and (
            raw.replace(".", "").isdigit() or raw[0].isalpha())):
        raise JobpoolError(f"{what} {text!r}: no port: write HOST:PORT, or PORT alone "
                           f"for this host's loopback")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise JobpoolError(f"{what} {text!r}: {host!r} is not an IPv6 address") from None
    elif ":" in host:
        raise JobpoolError(f"{what} {text!r}: write an IPv6 host in brackets, "
                           f"as [::1]:9100")
    if not port_text.isdigit() or not 0 <= int(port_text) < 65536:
        raise JobpoolError(f"{what} {text!r}: the port must be a number from 0 to "
                           f"65535, not {port_text!r}")
    return Address(host or "127.0.0.1", int(port_text))


def bind(address: Address, text: str, what: str = "metrics address") -> socket.socket:
    """A listening, non-blocking socket; a port in use or an address this host
    does not have is one line naming it."""
    try:
        infos = socket.getaddrinfo(address.host, address.port, type=socket.SOCK_STREAM,
                                   flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise JobpoolError(f"{what} {text!r}: cannot resolve {address.host!r} "
                           f"({exc.strerror})") from None
    family, kind, proto, _name, sockaddr = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(sockaddr)
        sock.listen(LISTEN_BACKLOG)
    except OSError as exc:
        sock.close()
        why = "the port is in use" if exc.errno == errno.EADDRINUSE else exc.strerror
        raise JobpoolError(f"{what} {text!r}: cannot listen there: {why}") from None
    sock.setblocking(False)
    return sock


class _Client:
    """One connection: the request head read so far, then the reply left to send
    (empty until the request is whole), and when it is dropped if not done by then."""

    __slots__ = ("sock", "received", "reply", "deadline")

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self.sock = sock
        self.received = b""
        self.reply = b""
        self.deadline = deadline


def _response(status: HTTPStatus, body: bytes, content_type: str) -> bytes:
    head = (f"HTTP/1.1 {status.value} {status.phrase}\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n")
    return head.encode("ascii") + body


class MetricsServer:
    """``/metrics`` and ``/healthz`` on a caller's selector, with no thread: the
    supervisor's (its pool's series) or ``jobpool metrics --serve``'s (the store's).
    ``exposition()`` makes the body of a scrape.

    A loop that waits in ``select`` waits at most ``wait_time()``, and calls
    ``expire()`` each turn: a client past its deadline is closed then, however long
    the loop's own work would let it sleep. Clients that hold a connection without
    finishing their request are the only ones that could fill it, so at
    ``MAX_CLIENTS`` the oldest of them (the one that has had the longest to send)
    is dropped for each newcomer: a probe, which sends its request at once, is
    answered while any number of such clients come and go."""

    def __init__(self, listener: socket.socket, selector: selectors.BaseSelector,
                 exposition: Callable[[], bytes], healthy: Callable[[], bool],
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.listener = listener
        self.selector = selector
        self.exposition = exposition
        self.healthy = healthy
        self.monotonic = monotonic
        self.clients: dict[int, _Client] = {}
        self._listening = False
        self._rest_until = 0.0
        parent_only(listener)
        self._listen(True)

    @property
    def address(self) -> str:
        """Where it listens, as ``HOST:PORT`` (``[HOST]:PORT`` for IPv6)."""
        host, port = self.listener.getsockname()[:2]
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    @property
    def port(self) -> int:
        return self.listener.getsockname()[1]

    def serve_once(self, timeout: float) -> None:
        """One turn of a loop whose selector holds this server's sockets alone (the
        store exporter's; a pool's loop calls ``ready`` and ``expire`` in its own)."""
        for key, _mask in self.selector.select(min(timeout, self.wait_time())):
            self.ready(key.data[2])
        self.expire()

    def wait_time(self) -> float:
        """Seconds until ``expire`` has work: a client's deadline, or the end of the
        listener's rest (``math.inf`` when neither)."""
        due = min((c.deadline for c in self.clients.values()), default=math.inf)
        if not self._listening:
            due = min(due, self._rest_until)
        return max(0.0, due - self.monotonic()) if due < math.inf else math.inf

    def _listen(self, on: bool) -> None:
        """Watch the listener for connections, or stop (resting after a failed
        accept, which would otherwise report it ready at every turn)."""
        if on and not self._listening:
            self.selector.register(self.listener, selectors.EVENT_READ,
                                   ("metrics", None, self.listener))
        elif not on and self._listening:
            self.selector.unregister(self.listener)
        self._listening = on

    def ready(self, sock: socket.socket) -> None:
        """The selector reported ``sock`` (the listener or a client) ready."""
        if sock is self.listener:
            self._accept()
            return
        client = self.clients.get(sock.fileno())
        if client is None:
            return
        if client.reply:
            self._send(client)
        else:
            self._receive(client)

    def expire(self) -> None:
        """Drop clients past their time, and listen again after a rest (called once a
        turn; cheap when there is nothing to do)."""
        if not self._listening and self.monotonic() >= self._rest_until:
            self._listen(True)
        if not self.clients:
            return
        now = self.monotonic()
        for client in [c for c in self.clients.values() if now >= c.deadline]:
            self._close(client)

    def close(self) -> None:
        for client in list(self.clients.values()):
            self._close(client)
        self._listen(False)
        parent_only(self.listener, held=False)
        self.listener.close()

    def _accept(self) -> None:
        for _ in range(16):  # a burst of scrapes: at most this many per turn
            try:
                sock, _peer = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                # Out of descriptors (or a reset before accept): rest, as the listener
                # would otherwise stay ready and turn the loop at full speed.
                self._rest_until = self.monotonic() + ACCEPT_REST
                self._listen(False)
                return
            if len(self.clients) >= MAX_CLIENTS:
                self._close(self._room_maker())
            sock.setblocking(False)
            parent_only(sock)
            client = _Client(sock, self.monotonic() + REQUEST_WITHIN)
            self.clients[sock.fileno()] = client
            self.selector.register(sock, selectors.EVENT_READ, ("metrics", None, sock))
            self._receive(client)  # a probe's request mostly came with its connection

    def _room_maker(self) -> _Client:
        """The client a newcomer replaces at the cap: the oldest still sending its
        request, else the oldest of all (``clients`` is in order of accept)."""
        clients = self.clients.values()
        return next((c for c in clients if not c.reply), next(iter(clients)))

    def _receive(self, client: _Client) -> None:
        try:
            data = client.sock.recv(4096)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._close(client)
            return
        client.received += data
        if b"\r\n\r\n" not in client.received and b"\n\n" not in client.received:
            if len(client.received) > MAX_REQUEST_BYTES:
                self._reply(client, _response(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, b"",
                                              "text/plain"))
            return
        self._reply(client, self._answer(client.received))

    def _answer(self, request: bytes) -> bytes:
        line = request.split(b"\n", 1)[0].decode("latin-1").strip()
        parts = line.split()
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            return _response(HTTPStatus.BAD_REQUEST, b"bad request\n", "text/plain")
        method, target = parts[0], parts[1].split("?", 1)[0]
        if method not in ("GET", "HEAD"):
            return _response(HTTPStatus.METHOD_NOT_ALLOWED, b"", "text/plain")
        if target == "/metrics":
            reply = _response(HTTPStatus.OK, self.exposition(), CONTENT_TYPE_PLAIN_0_0_4)
        elif target == "/healthz":
            ok = self.healthy()
            reply = _response(HTTPStatus.OK if ok else HTTPStatus.SERVICE_UNAVAILABLE,
                              b"ok\n" if ok else b"unhealthy\n", "text/plain")
        else:
            reply = _response(HTTPStatus.NOT_FOUND, b"try /metrics or /healthz\n", "text/plain")
        if method == "HEAD":
            reply = reply.split(b"\r\n\r\n", 1)[0] + b"\r\n\r\n"
        return reply

    def _reply(self, client: _Client, reply: bytes) -> None:
        client.reply = reply
        client.deadline = self.monotonic() + REPLY_WITHIN
        self.selector.modify(client.sock, selectors.EVENT_WRITE, ("metrics", None, client.sock))
        self._send(client)

    def _send(self, client: _Client) -> None:
        try:
            sent = client.sock.send(client.reply)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._close(client)
            return
        client.reply = client.reply[sent:]
        if not client.reply:
            self._close(client)

    def _close(self, client: _Client) -> None:
        self.clients.pop(client.sock.fileno(), None)
        try:
            self.selector.unregister(client.sock)
        except (KeyError, ValueError):
            pass
        parent_only(client.sock, held=False)
        client.sock.close()
