"""The live overview over server-sent events (R47, issue 27): every open overview is
fed from one refresh of the shared snapshot (one store read, one render), an action
refreshes every open overview at once, a stream ends when its viewer leaves or the
server stops, and the login and read-only rules hold for the stream as for the page.

Starlette's test client reads an answer to its end, and a stream has none: these tests
serve the app with uvicorn on a free port in a thread of the test (the app object stays
at hand, to count its reads) or as a ``jobpool web`` process, and read the stream as a
browser's EventSource does. Every wait is bounded and waits for a state, never a time.
"""
from __future__ import annotations

import asyncio
import http.client
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest

pytest.importorskip("starlette")

from jobpool.web import create_app, stream  # noqa: E402

from tests.test_web import (HOSTILE_NAME, _client, _csrf, _env,  # noqa: E402, F401
                            store_url)
from tests.test_web_pages import _Counted  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:Using `httpx`:UserWarning")

#: The longest any wait of these tests may take, on a loaded machine.
WAIT = 30.0


def _until(holds, what: str) -> None:
    """Wait (bounded) for ``holds()`` to be true."""
    deadline = time.monotonic() + WAIT
    while not holds():
        assert time.monotonic() < deadline, f"still not {what} after {WAIT} s"
        time.sleep(0.02)


class Served:
    """An app served by uvicorn in a thread, on a free loopback port."""

    def __init__(self, app) -> None:
        import uvicorn
        self.app = app
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
        app.state.stream.stopping = lambda: self.server.should_exit
        self.loop: asyncio.AbstractEventLoop | None = None

        async def serving() -> None:
            self.loop = asyncio.get_running_loop()
            await self.server.serve(sockets=[self.sock])
        self.thread = threading.Thread(target=asyncio.run, args=(serving(),), daemon=True)
        self.thread.start()
        _until(lambda: self.server.started, "listening")

    def tasks(self) -> int:
        """How many asyncio tasks the server's loop has."""
        async def count() -> int:
            return len(asyncio.all_tasks())
        assert self.loop is not None
        return asyncio.run_coroutine_threadsafe(count(), self.loop).result(timeout=WAIT)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(WAIT)
        assert not self.thread.is_alive(), "the server did not stop with streams open"


@pytest.fixture
def serve_app() -> Iterator:
    started: list[Served] = []

    def start(app) -> Served:
        started.append(Served(app))
        return started[-1]
    yield start
    for served in started:
        served.stop()


class Stream:
    """A stream of ``/events`` read as an EventSource reads it: events of ``id``,
    ``event`` and ``data`` lines, ended by a blank line."""

    def __init__(self, port: int, headers: dict | None = None) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=WAIT)
        self.conn.request("GET", "/events", headers={"accept": "text/event-stream",
                                                     **(headers or {})})
        self.answer = self.conn.getresponse()

    def next(self) -> dict | None:
        """The next event (None when the stream ended)."""
        event: dict = {"data": []}
        while True:
            line = self.answer.readline()
            if not line:
                return None
            line = line.decode().rstrip("\n")
            if not line:
                if event["data"]:
                    return dict(event, data="\n".join(event["data"]))
                event = {"data": []}  # the retry line alone
                continue
            field, _, value = line.partition(": ")
            if field == "data":
                event["data"].append(value)
            else:
                event[field] = value

    def close(self) -> None:
        if self.conn.sock is not None:
            self.conn.sock.shutdown(socket.SHUT_RDWR)
        self.answer.close()
        self.conn.close()


def _ready(event: dict) -> int:
    found = re.search(r'id="total-ready"><a href="/jobs\?status=ready">(\d+)<', event["data"])
    assert found, event["data"]
    return int(found.group(1))


def _pause(port: int, queue: str) -> None:
    """An action through the served app's API (it wakes the hub)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=WAIT)
    conn.request("POST", f"/api/queues/{queue}/pause", body="",
                 headers={"content-type": "application/json"})
    assert conn.getresponse().status == 200
    conn.close()


def test_every_open_stream_shares_one_read_a_refresh_and_an_action_refreshes_them_all(
        any_store, store_url, serve_app):
    counted = _Counted(any_store)
    app = create_app(store_url, store=counted)
    # No refresh by the clock in this test: the first stream's and the action's only.
    app.state.stream.every = 3600
    served = serve_app(app)
    any_store.enqueue_with("w.a", queue="q1")
    streams = [Stream(served.port) for _ in range(4)]
    first = [s.next() for s in streams]
    assert {e["event"] for e in first} == {"overview"} and {e["id"] for e in first} == {"1"}
    assert [_ready(e) for e in first] == [1, 1, 1, 1]
    assert counted.dashboard_reads == 1  # four viewers, one read
    # An action from the dashboard (here its API) refreshes every open overview at once.
    any_store.enqueue_with("w.a", queue="q1")
    _pause(served.port, "q2")
    second = [s.next() for s in streams]
    assert {e["id"] for e in second} == {"2"}
    assert [_ready(e) for e in second] == [2, 2, 2, 2]
    assert all("<li>q2</li>" in e["data"] for e in second)
    assert counted.dashboard_reads == 2 and app.state.stream.refreshes == 2
    for s in streams:
        s.close()
    _until(lambda: not app.state.stream.running, "the refresh loop ended")
    assert app.state.stream.streams == 0 and counted.dashboard_reads == 2


def test_a_stream_ends_when_its_viewer_leaves_and_leaves_no_task(any_store, store_url,
                                                                  serve_app):
    app = create_app(store_url)
    app.state.stream.every = 3600  # it must hear the viewer leave while it waits
    served = serve_app(app)
    warm = Stream(served.port)
    assert warm.next() is not None
    warm.close()
    _until(lambda: not app.state.stream.running, "the refresh loop ended")
    before = served.tasks()
    viewer = Stream(served.port)
    assert viewer.next() is not None
    assert app.state.stream.running and app.state.stream.streams == 1
    viewer.close()
    _until(lambda: app.state.stream.streams == 0 and not app.state.stream.running,
           "the stream let go")
    _until(lambda: served.tasks() == before, "the tasks back to what they were")


def test_the_stream_needs_a_login_like_the_page(any_store, store_url, serve_app):
    with _client(store_url, token="s3cret") as client:
        refused = client.get("/events")
        assert refused.status_code == 401 and "text/event-stream" not in \
            refused.headers["content-type"]
    served = serve_app(create_app(store_url, token="s3cret"))
    conn = http.client.HTTPConnection("127.0.0.1", served.port, timeout=WAIT)
    conn.request("GET", "/events")
    refused_here = conn.getresponse()
    assert refused_here.status == 401
    refused_here.close()
    conn.close()
    # The bearer token opens it, as it opens a page.
    bearer = Stream(served.port, {"authorization": "Bearer s3cret"})
    assert bearer.answer.status == 200
    assert bearer.answer.headers["content-type"].startswith("text/event-stream")
    assert bearer.next()["event"] == "overview"
    bearer.close()


def _cookie_and_csrf(port: int) -> tuple[str, str]:
    """A session opened by loading the overview: its cookie and the page's CSRF token."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=WAIT)
    conn.request("GET", "/")
    page = conn.getresponse()
    html = page.read().decode()
    cookie = page.headers["set-cookie"].split(";", 1)[0]
    conn.close()
    return cookie, _csrf(html)


def test_each_viewers_forms_carry_their_own_csrf_token_and_act(any_store, store_url,
                                                               serve_app):
    # A queue named as the slot a token goes into shows as its name, not as a token.
    any_store.enqueue_with("w.a", queue=stream.CSRF_SLOT)
    any_store.enqueue_with("w.a", queue="q1")
    served = serve_app(create_app(store_url))
    (cookie_a, csrf_a), (cookie_b, csrf_b) = (_cookie_and_csrf(served.port) for _ in range(2))
    assert csrf_a != csrf_b
    seen = {}
    for cookie, csrf in ((cookie_a, csrf_a), (cookie_b, csrf_b)):
        viewer = Stream(served.port, {"cookie": cookie})
        data = viewer.next()["data"]
        viewer.close()
        tokens = set(re.findall(r'name="csrf" value="([^"]*)"', data))
        assert tokens == {csrf}, tokens
        assert "&lt;jobpool-csrf/&gt;" in data and stream.CSRF_SLOT not in data
        seen[csrf] = data
    # A form from the stream acts: its token is the session's.
    conn = http.client.HTTPConnection("127.0.0.1", served.port, timeout=WAIT)
    conn.request("POST", "/queues/q1/pause", body=f"csrf={csrf_b}&next=/",
                 headers={"cookie": cookie_b,
                          "content-type": "application/x-www-form-urlencoded"})
    assert conn.getresponse().status == 303
    conn.close()
    assert any_store.paused_queues() == ["q1"]


def test_read_only_streams_no_form(any_store, store_url, serve_app):
    any_store.enqueue_with("w.a", queue="q1")
    served = serve_app(create_app(store_url, read_only=True))
    viewer = Stream(served.port)
    data = viewer.next()["data"]
    viewer.close()
    assert 'id="total-ready"' in data and "<form" not in data and "csrf" not in data


def test_hostile_text_in_the_stream_is_text(any_store, store_url, serve_app):
    any_store.enqueue_with(HOSTILE_NAME, queue=HOSTILE_NAME)
    served = serve_app(create_app(store_url))
    viewer = Stream(served.port)
    data = viewer.next()["data"]
    viewer.close()
    assert "<script>" not in data and "&lt;script&gt;alert(1)&lt;/script&gt;" in data


def test_jobpool_web_stops_on_sigterm_with_a_stream_open(any_store, store_url):
    any_store.enqueue_with("w.a")
    proc = subprocess.Popen([sys.executable, "-m", "jobpool", "web", "--db", store_url,
                             "--bind", "127.0.0.1:0"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=_env())
    try:
        line = proc.stdout.readline()
        found = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
        assert found, (line, proc.stderr.read() if proc.poll() is not None else "")
        viewer = Stream(int(found.group(1)))
        assert viewer.next()["event"] == "overview"
        proc.send_signal(signal.SIGTERM)
        # The stream ends (the server ended it, not a timeout of the test's client)...
        while viewer.next() is not None:
            pass
        viewer.close()
        # ...and the process exits, well before uvicorn's own graceful-shutdown timeout.
        proc.wait(timeout=WAIT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        errors = proc.stderr.read()
        proc.stdout.close()
        proc.stderr.close()
    assert proc.returncode in (0, -15) and "Traceback" not in errors, errors
    assert "timeout graceful shutdown exceeded" not in errors, errors


def test_the_message_puts_every_line_in_a_data_field():
    sent = stream.message(7, "a\nb\r\nc\rd")
    assert sent == b"id: 7\nevent: overview\ndata: a\ndata: b\ndata: c\ndata: d\n\n"


class _Failing(_Counted):
    """A store whose dashboard reads fail once ``down`` is set."""

    down = False

    def dashboard(self, *args, **kwargs):
        if self.down:
            raise OSError("disk I/O error")
        return super().dashboard(*args, **kwargs)


def test_a_failed_read_keeps_the_last_overview_and_is_logged_once(any_store, store_url,
                                                                 serve_app, caplog):
    failing = _Failing(any_store)
    app = create_app(store_url, store=failing)
    app.state.stream.every = 3600
    served = serve_app(app)
    any_store.enqueue_with("w.a", queue="q1")
    viewer = Stream(served.port)
    assert _ready(viewer.next()) == 1
    failing.down = True
    for number, queue in (("2", "q2"), ("3", "q3")):
        # Each action wakes the hub: its read fails, the last snapshot is sent again.
        _pause(served.port, queue)
        event = viewer.next()
        assert event["id"] == number and _ready(event) == 1
    failing.down = False
    any_store.enqueue_with("w.a", queue="q1")
    _pause(served.port, "q1")
    assert _ready(viewer.next()) == 2
    viewer.close()
    said = [r.getMessage() for r in caplog.records if r.name == "jobpool.web.stream"]
    assert said == ["the live overview could not read the store: disk I/O error",
                    "the live overview reads the store again"], said


def test_a_refresh_that_cannot_be_drawn_leaves_the_streams_served(any_store, store_url,
                                                                    serve_app, caplog):
    app = create_app(store_url)
    hub = app.state.stream
    hub.every = 3600
    drawn, broken = hub.render, [False]

    def render(frame):
        if broken[0]:
            raise KeyError("a template's bug")
        return drawn(frame)
    hub.render = render
    served = serve_app(app)
    any_store.enqueue_with("w.a", queue="q1")
    viewer = Stream(served.port)
    assert viewer.next()["id"] == "1"
    broken[0] = True
    _pause(served.port, "q1")
    _until(lambda: any("could not be drawn" in r.getMessage() for r in caplog.records),
           "the failed render logged")
    broken[0] = False
    any_store.enqueue_with("w.a", queue="q1")
    _pause(served.port, "q2")
    event = viewer.next()
    viewer.close()
    assert event["id"] == "2" and _ready(event) == 2 and "<li>q2</li>" in event["data"]
