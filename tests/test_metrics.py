"""A pool's Prometheus series (``--metrics``): scraped over real HTTP while the pool
runs, parsed with prometheus_client's own parser, and checked against the store."""
from __future__ import annotations

import os
import select
import selectors
import signal
import socket
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

import jobpool
from jobpool import metrics
from jobpool.config import PoolConfig
from jobpool.errors import JobpoolError
from jobpool.supervisor import Supervisor


@jobpool.job(name="metrics.ok")
def ok(n):
    return n


@jobpool.job(name="metrics.fatal")
def fatal():
    raise jobpool.Fatal("bad input")


@jobpool.job(name="metrics.crashes_once", max_attempts=3, backoff_base=0.0)
def crashes_once(marker):
    if not Path(marker).exists():
        Path(marker).write_text("x")
        os.kill(os.getpid(), signal.SIGKILL)


@jobpool.job(name="metrics.defers_once")
def defers_once(marker):
    if not Path(marker).exists():
        Path(marker).write_text("x")
        raise jobpool.Defer(0)


@jobpool.job(name="metrics.scrape", queue="ops")
def scrape(port, out):
    """Scrape this job's own pool while it runs (the pool serves from its loop)."""
    for path in ("metrics", "healthz"):
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/{path}", timeout=10) as reply:
            Path(f"{out}.{path}").write_text(f"{reply.status}\n{reply.read().decode()}")


def samples(text: str) -> dict[tuple, float]:
    """(sample name, sorted labels) -> value, for every sample of an exposition."""
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def total(found: dict[tuple, float], series: str, **labels: str) -> float:
    return sum(v for (n, lbls), v in found.items()
               if n == series and all(dict(lbls).get(k) == w for k, w in labels.items()))


def test_a_pool_serves_its_series_and_they_agree_with_the_store(any_store, store_url, tmp_path):
    store = any_store
    store.enqueue_many("metrics.ok", [(i,) for i in range(5)])
    store.enqueue("metrics.fatal")
    store.enqueue("metrics.crashes_once", str(tmp_path / "crashed"))
    store.enqueue("metrics.defers_once", str(tmp_path / "deferred"))
    config = PoolConfig(db=store_url, procs=1, burst=True, poll_interval=0.05,
                        queues=("default", "ops"), metrics="127.0.0.1:0",
                        names=("metrics.ok", "metrics.fatal", "metrics.crashes_once",
                               "metrics.defers_once", "metrics.scrape"))
    pool = Supervisor(config)
    out = tmp_path / "scraped"
    # in queue "ops", served after "default": it runs once everything else settled
    store.enqueue("metrics.scrape", pool.metrics_server.port, str(out))
    assert pool.run() == 0

    status, text = Path(f"{out}.metrics").read_text().split("\n", 1)
    assert status == "200"
    seen = samples(text)
    done_in_store = len(store.list_jobs(status="done"))
    # what it settled done, by its own count, is what the store holds done
    assert total(seen, "jobpool_jobs_total", outcome="done") == done_in_store - 1 == 7
    assert total(seen, "jobpool_jobs_total", name="metrics.ok", queue="default",
                 outcome="done") == 5
    assert total(seen, "jobpool_jobs_total", outcome="dead") == 1
    assert total(seen, "jobpool_jobs_total", outcome="retried") == 1  # after its crash
    assert total(seen, "jobpool_jobs_total", outcome="deferred") == 1
    assert total(seen, "jobpool_child_deaths_total", cause="crash") == 1
    assert total(seen, "jobpool_child_deaths_total", cause="timeout") == 0
    # each attempt ran once: run times counted per attempt, waits per claim
    assert total(seen, "jobpool_job_run_seconds_count") == 10
    assert total(seen, "jobpool_job_wait_seconds_count") == 11  # the scrape job's own claim too
    assert total(seen, "jobpool_job_wait_seconds_count", queue="ops") == 1
    assert total(seen, "jobpool_slots", state="busy") == 1  # the scraping job's slot
    assert total(seen, "jobpool_slots", state="idle") == 0
    assert Path(f"{out}.healthz").read_text().startswith("200\n")
    # after the drain, the pool's own count agrees with the store's
    final = samples(pool.state.metrics.exposition().decode())
    assert total(final, "jobpool_jobs_total", outcome="done") == done_in_store == 8


def _get(port: int, path: str, selector_pump) -> tuple[int, str]:
    """One request against a server whose loop ``selector_pump`` turns, as a pool's does."""
    client = socket.create_connection(("127.0.0.1", port), timeout=5)
    client.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    reply = b""
    client.setblocking(False)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        selector_pump()
        try:
            chunk = client.recv(65536)
        except BlockingIOError:
            continue
        if not chunk:
            break
        reply += chunk
    client.close()
    head, _, body = reply.partition(b"\r\n\r\n")
    return int(head.split()[1]), body.decode()


def test_healthz_says_503_once_the_loop_has_not_turned_and_a_silent_client_blocks_nothing():
    selector = selectors.DefaultSelector()
    listener = metrics.bind(metrics.parse_address(":0"), ":0")
    healthy = [True]
    server = metrics.MetricsServer(listener, selector, metrics.PoolMetrics().exposition,
                                   lambda: healthy[0])

    def pump():
        server.serve_once(0.01)
    # a client that connects and says nothing holds no turn: others are answered
    silent = socket.create_connection(("127.0.0.1", server.port))
    assert _get(server.port, "/healthz", pump) == (200, "ok\n")
    healthy[0] = False
    assert _get(server.port, "/healthz", pump)[0] == 503
    assert _get(server.port, "/nope", pump)[0] == 404
    code, body = _get(server.port, "/metrics", pump)
    assert code == 200 and "jobpool_child_deaths_total" in body
    server.monotonic = lambda: time.monotonic() + 60  # the silent one is dropped in time
    server.expire()
    assert len(server.clients) == 0
    silent.close()
    server.close()
    selector.close()


@pytest.mark.parametrize("address, words", [
    ("99999", "the port must be a number from 0 to 65535, not '99999'"),
    ("localhost:http", "the port must be a number"),
    ("::1:9100", "write an IPv6 host in brackets"),
    ("[nothost]:9100", "'nothost' is not an IPv6 address"),
    ("127.0.0.1", "'127.0.0.1': no port: write HOST:PORT"),  # a host alone
    ("localhost", "no port: write HOST:PORT"),
    ("[::1]", "no port: write HOST:PORT"),
    ("9x", "the port must be a number from 0 to 65535, not '9x'"),
])
def test_a_bad_metrics_address_is_one_line(address, words):
    with pytest.raises(JobpoolError, match=words.replace("[", r"\[")):
        metrics.parse_address(address)


def test_addresses_bind_what_they_say():
    assert metrics.parse_address("9100") == ("127.0.0.1", 9100)
    assert metrics.parse_address(":9100") == ("127.0.0.1", 9100)
    assert metrics.parse_address("0.0.0.0:9100") == ("0.0.0.0", 9100)
    assert metrics.parse_address("[::1]:9100") == ("::1", 9100)


def test_start_with_a_port_in_use_is_one_line_before_any_child(make_app):
    app = make_app("from jobpool import job\n\n@job(name='t.x')\ndef x():\n    pass\n")
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    port = taken.getsockname()[1]
    result = app.cli("start", "--app", app.module, "--db", str(app.db), "--burst",
                     "--metrics", str(port))
    taken.close()
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.strip() == (f"jobpool: error: metrics address '{port}': cannot listen "
                                     f"there: the port is in use")


# -- the store's gauges: `jobpool metrics` ---------------------------------------------------


def _cli(*args: str, **kwargs):
    import subprocess
    import sys
    return subprocess.run([sys.executable, "-m", "jobpool", *args], capture_output=True,
                          text=True, timeout=60, **kwargs)


def test_jobpool_metrics_prints_the_queue_gauges_once(any_store, store_url):
    # default: 3 due of which another pool runs 2, 1 scheduled, 1 dead; reports: 1 due
    store = any_store
    for n in range(3):
        store.enqueue("metrics.ok", n)
    store.enqueue_with("metrics.ok", args=(3,), delay=3600)
    store.cancel(store.enqueue("metrics.ok", 4).id)
    store.enqueue_with("metrics.ok", args=(5,), queue="reports")
    claimer = store.claimer("elsewhere:1:1", ("metrics.ok",), ("default",), {})
    try:
        claimer.turn([], 2, time.time(), None)
    finally:
        claimer.close()
    result = _cli("metrics", "--db", store_url)
    assert result.returncode == 0, result.stderr
    seen = samples(result.stdout)
    queue = {(dict(lbls)["queue"], dict(lbls)["status"]): v for (n, lbls), v in seen.items()
             if n == "jobpool_queue_jobs"}
    assert queue == {("default", "ready"): 1, ("default", "scheduled"): 1,
                     ("default", "running"): 2, ("default", "dead"): 1,
                     ("reports", "ready"): 1, ("reports", "scheduled"): 0,
                     ("reports", "running"): 0, ("reports", "dead"): 0}
    oldest = {dict(lbls)["queue"]: v for (n, lbls), v in seen.items()
              if n == "jobpool_queue_oldest_ready_seconds"}
    assert set(oldest) == {"default", "reports"} and 0 <= oldest["reports"] < 60
    assert total(seen, "jobpool_queue_paused", queue="reports") == 0
    assert total(seen, "jobpool_store_up") == 1
    store.pause("reports")
    seen = samples(_cli("metrics", "--db", store_url).stdout)
    assert total(seen, "jobpool_queue_paused", queue="reports") == 1


def test_oldest_ready_counts_from_when_the_job_became_due(tmp_path):
    store = jobpool.connect(tmp_path / "jobpool.db")
    store.enqueue_with("metrics.ok", args=(1,), now=time.time() - 120)
    store.close()
    seen = samples(_cli("metrics", "--db", str(tmp_path / "jobpool.db")).stdout)
    assert 119 <= total(seen, "jobpool_queue_oldest_ready_seconds", queue="default") < 200


def test_jobpool_metrics_serve_reads_the_store_at_most_every_15_s(any_store, store_url):
    import subprocess
    import sys
    store = any_store
    store.enqueue("metrics.ok", 1)
    with subprocess.Popen([sys.executable, "-m", "jobpool", "metrics", "--serve",
                           "127.0.0.1:0", "--db", store_url],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as exporter:
        try:
            line = exporter.stdout.readline()
            assert line.startswith("serving the store's metrics on http://127.0.0.1:"), line
            url = line.split()[-1]

            def ready() -> float:
                with urllib.request.urlopen(url, timeout=10) as reply:
                    return total(samples(reply.read().decode()), "jobpool_queue_jobs",
                                 queue="default", status="ready")
            assert ready() == 1
            store.enqueue("metrics.ok", 2)
            assert ready() == 1  # read again only once 15 s have passed
            with urllib.request.urlopen(url.replace("/metrics", "/healthz"), timeout=10) as reply:
                assert reply.status == 200
            with pytest.raises(urllib.error.HTTPError) as missing:
                urllib.request.urlopen(url.replace("/metrics", "/other"), timeout=10)
            missing.value.close()
            assert missing.value.code == 404
        finally:
            exporter.terminate()
            exporter.wait(10)


def test_jobpool_metrics_every_below_15_s_is_one_line(tmp_path):
    jobpool.connect(tmp_path / "jobpool.db").close()
    result = _cli("metrics", "--every", "1", "--serve", "127.0.0.1:0", "--db",
                  str(tmp_path / "jobpool.db"))
    assert result.returncode == 1 and result.stderr.strip() == (
        "jobpool: error: --every must be at least 15 seconds, not 1")


def test_a_pool_without_metrics_does_not_load_prometheus_client():
    # its import is a tenth of a second of every `jobpool start`
    import subprocess
    import sys
    code = ("import sys, jobpool.cli, jobpool.supervisor\n"
            "print([m for m in sys.modules if m.startswith('prometheus_client')])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_forked_helpers_do_not_keep_the_pools_metrics_sockets():
    # the checkpointer, on_dead hooks and the dashboard are forked after the port is
    # bound: none may hold it (nor a client) after the pool lets go of it
    from jobpool.forked import Forked, parent_only
    held, other = socket.socketpair()
    parent_only(held)

    def check(fd: int) -> None:
        try:
            os.fstat(fd)
        except OSError:
            return  # closed here: exit 0
        raise SystemExit(3)
    child = Forked.start(check, held.fileno())
    code, _usage = child.reap()
    assert code == 0
    os.fstat(held.fileno())  # still the parent's
    parent_only(held, held=False)
    child = Forked.start(check, held.fileno())
    assert child.reap()[0] == 0  # R43: not registered, closed all the same
    child = Forked.start(check, held.fileno(), keep=(held.fileno(),))
    assert child.reap()[0] == 1  # kept when asked (a child's own pipe)
    held.close()
    other.close()


def test_at_the_cap_the_oldest_half_open_client_makes_room_and_each_has_its_time():
    # R28a: the cap never stops accepts; it drops the oldest client still sending its
    # request, not one being answered; a request takes at most REQUEST_WITHIN
    selector = selectors.DefaultSelector()
    listener = metrics.bind(metrics.parse_address(":0"), ":0")
    big = b"x" * (16 << 20)  # more than loopback's buffers hold: its reply stays pending
    clock = [0.0]  # the server's own: no deadline passes unless the test says so
    server = metrics.MetricsServer(listener, selector, lambda: big, lambda: True,
                                   monotonic=lambda: clock[0])

    def pump():
        server.serve_once(0.01)
    reader = socket.socket()
    reader.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    reader.connect(("127.0.0.1", server.port))
    reader.sendall(b"GET /metrics HTTP/1.1\r\n\r\n")  # and never reads
    half_open = []
    for _ in range(metrics.MAX_CLIENTS - 1):
        half_open.append(socket.create_connection(("127.0.0.1", server.port), timeout=5))
        half_open[-1].sendall(b"GET /metr")
        pump()  # accepted as they come
    for _ in range(20):
        pump()
    assert len(server.clients) == metrics.MAX_CLIENTS
    assert [bool(c.reply) for c in server.clients.values()].count(True) == 1
    late = socket.create_connection(("127.0.0.1", server.port), timeout=5)
    for _ in range(5):
        pump()
    assert len(server.clients) == metrics.MAX_CLIENTS
    assert listener in [k.fileobj for k in selector.get_map().values()]
    half_open[0].settimeout(5)
    assert half_open[0].recv(1) == b""  # the oldest half-open one made room
    assert _get(server.port, "/healthz", pump) == (200, "ok\n")  # at the cap still
    assert any(c.reply for c in server.clients.values())  # the reader is still answered
    assert server.wait_time() == metrics.REQUEST_WITHIN
    clock[0] = metrics.REQUEST_WITHIN  # due: every one that has not sent its request
    server.expire()
    assert len(server.clients) == 1 and next(iter(server.clients.values())).reply
    clock[0] = metrics.REPLY_WITHIN
    server.expire()
    assert not server.clients and server.wait_time() == float("inf")
    for sock in [reader, late, *half_open]:
        sock.close()
    server.close()
    selector.close()


IDLE_APP = "from jobpool import job\n\n@job(name='t.x')\ndef x(n):\n    return n\n"


def _metrics_pool(app, *args: str):
    """``jobpool start --metrics 127.0.0.1:0`` as an operator runs it, and the
    address its ``pool_started`` event names."""
    import json as _json
    pool = app.spawn("--procs", "1", "--metrics", "127.0.0.1:0", "--log-format", "json", *args)
    for line in pool.stderr:
        event = _json.loads(line)
        if event["event"] == "pool_started":
            address = event["metrics"]
            assert address.startswith("127.0.0.1:")
            host, port = address.rsplit(":", 1)
            return pool, address, (host, int(port))
    raise AssertionError(f"the pool exited {pool.wait(timeout=20)} before it started")


def _stop(pool) -> None:
    pool.send_signal(signal.SIGTERM)
    assert pool.wait(timeout=20) == 0


def test_jobpool_start_metrics_serves_while_the_pool_runs(make_app):
    # through the CLI, as an operator runs it: the pool_started event names the port
    app = make_app(IDLE_APP)
    app.store().enqueue_many("t.x", [(i,) for i in range(3)])
    pool, address, _ = _metrics_pool(app)
    try:
        deadline = time.monotonic() + 20
        while True:
            with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as reply:
                seen = samples(reply.read().decode())
            if total(seen, "jobpool_jobs_total", outcome="done") == 3 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert total(seen, "jobpool_jobs_total", name="t.x", queue="default", outcome="done") == 3
        assert total(seen, "jobpool_slots", state="idle") == 1
        with urllib.request.urlopen(f"http://{address}/healthz", timeout=10) as reply:
            assert reply.status == 200
    finally:
        _stop(pool)


def test_half_open_clients_never_keep_healthz_waiting(make_app):
    # R28a, issue 23 item 10: 80 clients each send part of a request line and hold it,
    # more than the cap and the listen backlog together; /healthz answers all the same
    pool, address, peer = _metrics_pool(make_app(IDLE_APP))
    held = [socket.socket() for _ in range(80)]
    try:
        for sock in held:
            sock.setblocking(False)
            sock.connect_ex(peer)
        unsent = list(held)
        deadline = time.monotonic() + 3
        while unsent and time.monotonic() < deadline:
            for sock in select.select([], unsent, [], 0.1)[1]:
                unsent.remove(sock)
                try:
                    sock.send(b"GET /metr")
                except OSError:
                    pass  # already dropped by the pool: as held as it can be
        with urllib.request.urlopen(f"http://{address}/healthz", timeout=2) as reply:
            assert reply.status == 200 and reply.read() == b"ok\n"
    finally:
        for sock in held:
            sock.close()
        _stop(pool)


def test_a_client_slow_to_send_its_request_is_closed_however_long_the_loop_would_wait(make_app):
    # R28a: the request must be whole within about a second of the accept; the pool's
    # loop, which would wait here 30 s for its next poll and heartbeat, wakes for it
    app = make_app(IDLE_APP)
    app.env["JOBPOOL_HEARTBEAT"] = "30"
    pool, _address, peer = _metrics_pool(app, "--poll-interval", "30", "--dead-after", "90")
    silent = socket.create_connection(peer, timeout=5)
    partial = socket.create_connection(peer, timeout=5)
    partial.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
    try:
        for sock in (silent, partial):
            assert sock.recv(1) == b""  # closed by the pool (a socket.timeout otherwise)
    finally:
        silent.close()
        partial.close()
        _stop(pool)


def test_the_exporter_keeps_its_last_values_and_says_when_the_store_stops_answering(tmp_path):
    from jobpool.errors import StoreError
    from jobpool.store_metrics import StoreGauges
    store = jobpool.connect(tmp_path / "jobpool.db")
    store.enqueue("metrics.ok", 1)
    ticks = [0.0]
    gauges = StoreGauges(store, every=15.0, monotonic=lambda: ticks[0])
    assert total(samples(gauges.exposition().decode()), "jobpool_queue_jobs",
                 status="ready") == 1
    store.close()

    def fails(now):
        raise StoreError("the disk went away")
    gauges.store.queue_metrics = fails  # type: ignore[method-assign]
    ticks[0] = 14.0
    assert gauges.store_answers  # not read again within 15 s
    ticks[0] = 15.0
    seen = samples(gauges.exposition().decode())
    assert total(seen, "jobpool_store_up") == 0 and not gauges.store_answers
    assert total(seen, "jobpool_queue_jobs", status="ready") == 1  # the last good read
