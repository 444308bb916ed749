"""Shared fixtures: both cores, throwaway stores, and real pools run through the CLI."""
from __future__ import annotations

import contextlib
import functools
import importlib
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
import urllib.parse
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest

import jobpool
from jobpool import _core_py
from jobpool.store.sqlite import statements as sql
ROOT = Path(__file__).resolve().parent.parent
#: R19a, R61: every attempt line of a SQLite store (a success's from its job's row), as
#: a test's SQL reads the log: ``FROM {ATTEMPT_LINES}`` where it read ``FROM attempts``.
ATTEMPT_LINES = f"({sql.ALL_ATTEMPT_LINES})"


def pytest_addoption(parser):
    parser.addoption("--no-c-extensions", action="store_true",
                     help="run the core tests against the pure twin only")


def _compiled():
    try:
        return importlib.import_module("jobpool._core")
    except ImportError:
        return None


def _require_compiled(request):
    if request.config.getoption("--no-c-extensions"):
        pytest.skip("--no-c-extensions")
    module = _compiled()
    if module is None:
        if os.environ.get("JOBPOOL_REQUIRE_CORE") == "1":
            pytest.fail("the compiled core is required (JOBPOOL_REQUIRE_CORE=1) but not built")
        pytest.skip("compiled core not built")
    return module


def claimer_kind(kind: str, compiled=None) -> SimpleNamespace:
    """What a claimer test reaches, for the SQLite driver of ``kind``: ``Core`` (the
    engine over that driver: ``Core(path, owner, names, queues, policies, **opening)``),
    its ``SlotTable``, and lifecycle's outcome kinds and policy helpers."""
    from jobpool import lifecycle
    from jobpool.store.sqlite.claimer import SqliteClaimer, driver_class
    names = ("DONE", "ERROR", "FATAL", "CRASH", "TIMEOUT", "RETRY", "DEFER", "RESCHEDULE",
             "RELEASE", "CANCEL", "KIND_NAMES", "LEASE_SLACK", "DEFAULT_POLICY", "backoff",
             "with_reason")
    return SimpleNamespace(
        NAME=kind, Core=functools.partial(SqliteClaimer, driver=driver_class(kind)),
        SlotTable=(compiled or _core_py).SlotTable,
        **{name: getattr(lifecycle, name) for name in names})


@pytest.fixture(params=["pure", pytest.param("compiled", marks=pytest.mark.c_extension)])
def core_impl(request):
    """Each claimer test runs twice: over the pure SQLite driver and the compiled one."""
    if request.param == "pure":
        return claimer_kind("pure")
    return claimer_kind("compiled", _require_compiled(request))


@pytest.fixture
def compiled_core(request):
    """The compiled module alone (parity tests compare its parts with their twins)."""
    return _require_compiled(request)


def make_store(path: Path) -> Path:
    """A fresh store file with the schema, without going through the public API."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    for stmt in sql.SCHEMA:
        conn.execute(stmt)
    conn.execute("INSERT INTO jobpool_meta VALUES ('schema', ?)", (sql.SCHEMA_VERSION,))
    conn.close()
    return path


def insert_job(path: Path, name: str = "t.job", *, queue: str = "default", key=None,
               payload: str = "[[],{}]", priority: int = 0, run_at: float = 1000.0,
               max_attempts: int = 5, deadline=None, timeout: float = 60.0) -> int:
    conn = sqlite3.connect(path, isolation_level=None)
    cur = conn.execute(sql.INSERT_JOB, (queue, name, key, payload, "json", priority, run_at, run_at,
                                        max_attempts, deadline, timeout, run_at, None, None, None,
                                        None))
    conn.close()
    return cur.lastrowid


def rows(path: Path, query: str = "SELECT * FROM jobs ORDER BY id", params=()) -> list[dict]:
    conn = sqlite3.connect(path)
    conn.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in conn.execute(query, params)]
    finally:
        conn.close()


@pytest.fixture
def store_path(tmp_path) -> Path:
    return make_store(tmp_path / "store.db")


# -- real pools -------------------------------------------------------------------------

class App:
    """A job module written into a temp dir, and a way to run pools over it."""

    def __init__(self, directory: Path, source: str) -> None:
        self.dir = directory
        self.module = "app_" + uuid.uuid4().hex[:8]
        (directory / f"{self.module}.py").write_text(textwrap.dedent(source))
        self.db = directory / "jobpool.db"
        self.env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(directory), str(ROOT)]),
                        JOBPOOL_POLL_INTERVAL="0.2")
        self._store = None

    def cli(self, *args: str, check: bool = False, timeout: float = 60) -> subprocess.CompletedProcess:
        cmd = [sys.executable, "-m", "jobpool", *args]
        result = subprocess.run(cmd, cwd=self.dir, env=self.env, capture_output=True, text=True,
                                timeout=timeout)
        if check and result.returncode != 0:
            raise AssertionError(f"{cmd} exited {result.returncode}:\n{result.stderr}")
        return result

    def start(self, *args: str, timeout: float = 90) -> subprocess.CompletedProcess:
        """Run ``jobpool start --burst`` to completion."""
        return self.cli("start", "--app", self.module, "--db", str(self.db), "--burst", *args,
                        check=True, timeout=timeout)

    def spawn(self, *args: str) -> subprocess.Popen:
        """Start a pool in the background (no --burst unless given)."""
        cmd = [sys.executable, "-m", "jobpool", "start", "--app", self.module, "--db",
               str(self.db), *args]
        # A session of its own: no controlling terminal, as under a service manager,
        # whatever terminal runs the tests (a pool on one stops when it hangs up, R27).
        return subprocess.Popen(cmd, cwd=self.dir, env=self.env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)

    def store(self):
        """The app's store, opened once and closed when the test ends (``make_app``)."""
        import jobpool
        if self._store is None:
            self._store = jobpool.connect(self.db)
        return self._store

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None

    def rows(self, query: str = "SELECT * FROM jobs ORDER BY id", params=()) -> list[dict]:
        return rows(self.db, query, params)


@pytest.fixture
def make_app(tmp_path):
    """``make_app(source)`` -> App; stray pools are killed at teardown."""
    procs: list[subprocess.Popen] = []

    apps: list[App] = []

    def factory(source: str) -> App:
        app = App(tmp_path, source)
        apps.append(app)
        original = app.spawn

        def spawn(*args):
            proc = original(*args)
            procs.append(proc)
            return proc
        app.spawn = spawn
        return app

    yield factory
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        for stream in (proc.stdout, proc.stderr):
            if stream:
                stream.close()
    for app in apps:
        app.close()


@pytest.fixture
def make_any_app(make_app, store_url):
    """``make_app`` over every store (``store_url``): ``app.db`` is the SQLite file or
    the PostgreSQL URL, which the CLI and ``app.store()`` take alike; ``app.rows``
    reads SQLite only, so tests on every store read through the store instead."""
    def factory(source: str) -> App:
        app = make_app(source)
        app.db = store_url
        return app
    return factory


def process_state(pid: int) -> str:
    """The process's state letter in /proc (``S`` asleep, ``Z`` exited and not reaped)."""
    with open(f"/proc/{pid}/stat") as fh:
        return fh.read().rpartition(")")[2].split()[0]


def lock_waits(admin, query_like: str = "%") -> int:
    """How many sessions of this test's database wait for a lock, running a statement
    whose text is LIKE ``query_like`` (``admin``: a ``_pg_admin()`` connection)."""
    return admin.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
        "AND wait_event_type = 'Lock' AND query LIKE %s", (query_like,)).fetchone()[0]


def outcome_of(call):
    """What ``call`` returned, or the exception it raised (for a thread's caller)."""
    try:
        return call()
    except Exception as exc:  # noqa: BLE001 - handed to the test, which names it
        return exc


@contextlib.contextmanager
def rows_held(holder, *ids: int):
    """PostgreSQL: for the block's length, ``holder`` (a store) holds these jobs' rows
    FOR UPDATE in a transaction left open (a pool's turn that has not ended)."""
    held, release = threading.Event(), threading.Event()

    def hold(conn):
        conn.execute("SELECT 1 FROM jobs WHERE id = ANY(%s) FOR UPDATE", (list(ids),))
        held.set()
        assert release.wait(60)
    holding = threading.Thread(target=lambda: holder.transaction("holding rows", hold))
    holding.start()
    try:
        assert held.wait(30)
        yield
    finally:
        release.set()
        holding.join(30)


def beside_held_locks(holder, take, then, call, *, waiting_like: str = "%"):
    """PostgreSQL lock orders: ``holder`` (a store) opens a transaction that runs
    ``take(conn)`` (the locks it holds first); ``call()`` runs in a thread meanwhile;
    once it waits for a lock (a session waiting on a statement LIKE ``waiting_like``)
    or has ended, the transaction goes on with ``then(conn)`` (the locks it asks for
    next) and commits. Returns what each side returned or raised: (holder's, call's)."""
    held, go_on, seen = threading.Event(), threading.Event(), {}

    def hold(conn):
        conn.execute("SET LOCAL lock_timeout = '20s'")
        take(conn)
        held.set()
        assert go_on.wait(30)
        then(conn)
    holding = threading.Thread(target=lambda: seen.update(holder=outcome_of(
        lambda: holder.transaction("holding locks", hold))))
    holding.start()
    assert held.wait(30)
    calling = threading.Thread(target=lambda: seen.update(call=outcome_of(call)))
    calling.start()
    admin = _pg_admin()
    try:
        wait_for(lambda: not calling.is_alive() or lock_waits(admin, waiting_like) >= 1,
                 timeout=30, interval=0.01)
    finally:
        admin.close()
        go_on.set()
        holding.join(60)
        calling.join(60)
    return seen["holder"], seen["call"]


def sent_to_server(store, tmp_path, call) -> str:
    """What a PostgreSQL store's connection sent to the server while ``call()`` ran, from
    libpq's trace (its frontend lines): round trips counted, never timed."""
    import psycopg
    path = tmp_path / "trace"
    with open(path, "w") as trace:
        pgconn = store.conn.pgconn
        pgconn.trace(trace.fileno())
        pgconn.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS
                               | psycopg.pq.Trace.REGRESS_MODE)
        try:
            call()
        finally:
            pgconn.untrace()
    return "\n".join(line for line in path.read_text().splitlines() if line.startswith("F\t"))


def statements_run(sent: str) -> int:
    """How many statements a trace (``sent_to_server``) shows run: each ``Execute`` of
    the extended protocol (a prepared statement's too) and each simple ``Query`` but
    transaction control."""
    count = 0
    for line in sent.splitlines():
        fields = line.split("\t")
        if len(fields) > 2 and (fields[2] == "Execute" or fields[2] == "Query" and not any(
                word in fields[3] for word in ("BEGIN", "COMMIT", "ROLLBACK"))):
            count += 1
    return count


def waits_of(pool) -> list:
    """The timeouts an in-process pool's loop asks its selector for, from now on: a
    loop that spins asks for 0 over and over instead of sleeping."""
    asked: list = []
    select = pool._selector.select

    def counted(timeout=None):
        asked.append(timeout)
        return select(timeout)
    pool._selector.select = counted
    return asked


def wait_for(predicate, timeout: float = 20.0, interval: float = 0.02):
    """Poll ``predicate`` until it returns a truthy value; fail after ``timeout``."""
    end = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {predicate}")
        time.sleep(interval)


class LoopTicks:
    """An asyncio task that counts 10 ms sleeps of the running loop: a loop blocked
    by a call (a sync wait for a lock, say) stops counting. ``async with`` it."""

    def __init__(self) -> None:
        self.count = 0
        self._task = None

    async def _tick(self) -> None:
        import asyncio
        while True:
            self.count += 1
            await asyncio.sleep(0.01)

    async def __aenter__(self) -> "LoopTicks":
        import asyncio
        self._task = asyncio.create_task(self._tick())
        return self

    async def __aexit__(self, *exc) -> None:
        self._task.cancel()


# -- PostgreSQL -------------------------------------------------------------------------

PG_URL = os.environ.get("JOBPOOL_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
#: Under pytest-xdist ("gw0", "gw1", ...) each worker has a database of its own on the
#: server, so what a test does to every connection of its database (terminate them,
#: read the oldest transaction) never reaches the other worker's: such queries say
#: ``datname = current_database()``. Created on first use, kept for the next run.
_WORKER = os.environ.get("PYTEST_XDIST_WORKER")
_SHARED_PG_URL = PG_URL
if _WORKER:
    _parts = urllib.parse.urlsplit(PG_URL)
    PG_URL = _parts._replace(path=f"{_parts.path}_{_WORKER}").geturl()


@functools.cache
def _worker_database() -> None:
    import psycopg
    name = urllib.parse.urlsplit(PG_URL).path.lstrip("/")
    with psycopg.connect(_SHARED_PG_URL, autocommit=True, connect_timeout=3) as admin:
        if not admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone():
            admin.execute(f'CREATE DATABASE "{name}"')


def _pg_admin():
    try:
        import psycopg
        if _WORKER:
            _worker_database()
        return psycopg.connect(PG_URL, autocommit=True, connect_timeout=3)
    except Exception as exc:  # noqa: BLE001 - no driver or no server: skip or fail below
        if os.environ.get("JOBPOOL_REQUIRE_PG") == "1":
            pytest.fail(f"JOBPOOL_REQUIRE_PG=1 but PostgreSQL at {PG_URL} is not usable: {exc}")
        pytest.skip(f"no PostgreSQL at {PG_URL}: {exc}")


@pytest.fixture
def pg_url():
    """A PostgreSQL store URL with a fresh schema, dropped after the test."""
    admin = _pg_admin()
    schema = "jp_test_" + uuid.uuid4().hex[:12]
    sep = "&" if "?" in PG_URL else "?"
    try:
        yield f"{PG_URL}{sep}schema={schema}"
    finally:
        admin.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        admin.close()


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request, tmp_path):
    """Where a store lives: a file for SQLite, a URL with a fresh schema for PostgreSQL."""
    if request.param == "sqlite":
        return str(tmp_path / "jobpool.db")
    return request.getfixturevalue("pg_url")


@pytest.fixture
def any_store(store_url):
    store = jobpool.connect(store_url)
    yield store
    store.close()


@contextlib.contextmanager
def default_recursion_limit():
    """Python's default recursion limit while a test encodes or decodes JSON deeper than
    it: ``json`` then raises RecursionError, as it does in a process nobody changed.
    Under a limit something raised (a test library, a test's job), the same document
    overflows the C stack and crashes the worker."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)
    try:
        yield
    finally:
        sys.setrecursionlimit(limit)
