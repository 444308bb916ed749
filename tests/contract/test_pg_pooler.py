"""``?pooler=transaction``: behind a transaction-mode pooler a session is no client's,
PgBouncer refuses the startup options that set one, and LISTEN and prepared
statements do not work. The store then sets its schema and limits in every
transaction and polls; these tests run a pool that way against the server itself
(its sessions carry nothing, so any statement that relied on them fails), and, where
PgBouncer is installed, through a real one."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg
import pytest

import jobpool
from jobpool.config import PoolConfig
from jobpool.store.postgres.connection import open_connection
from jobpool.supervisor import Supervisor

from ..conftest import PG_URL


@jobpool.job(name="pooler.job")
def pooler_job(n):
    return n


def _tables_in(schema: str) -> int:
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        return conn.execute("SELECT count(*) FROM information_schema.tables "
                            "WHERE table_schema = %s AND table_name = 'jobs'",
                            (schema,)).fetchone()[0]


def _drain_and_operate(url: str) -> None:
    store = jobpool.connect(url)
    try:
        store.enqueue_many("pooler.job", [(i,) for i in range(5)])
        store.pause("elsewhere")
        pool = Supervisor(PoolConfig(db=url, procs=2, burst=True, poll_interval=0.05,
                                     names=("pooler.job",)))
        assert pool.run() == 0
        stats = store.stats()
        assert (stats["done"], stats["ready"]) == (5, 0)
        assert store.paused_queues() == ["elsewhere"]
        assert pool.counters["completed"] == 5
    finally:
        store.close()


def test_a_pool_runs_with_nothing_set_on_its_sessions(pg_url):
    url = pg_url + "&pooler=transaction"
    from jobpool.store.postgres.connection import parse_url
    conn = open_connection(parse_url(url))
    try:  # the session itself names no schema: every transaction has to
        assert "jp_test_" not in conn.execute("SHOW search_path").fetchone()[0]
    finally:
        conn.close()
    _drain_and_operate(url)
    # ...and every table is where the URL says, none in the session's default schema
    assert _tables_in(pg_url.rsplit("schema=", 1)[1]) == 1 and _tables_in("public") == 0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def pgbouncer():
    """A PgBouncer in transaction mode in front of the test server, if installed."""
    binary = shutil.which("pgbouncer") or ("/usr/sbin/pgbouncer"
                                           if os.path.exists("/usr/sbin/pgbouncer") else None)
    if binary is None:
        pytest.skip("PgBouncer is not installed")
    server = psycopg.conninfo.conninfo_to_dict(PG_URL)
    port = _free_port()
    work = Path(tempfile.mkdtemp(prefix="jobpool-pgbouncer-"))
    work.chmod(0o777)  # PgBouncer refuses to run as root: it runs as postgres here
    (work / "users.txt").write_text(f'"{server.get("user", "postgres")}" ""\n')
    (work / "pgbouncer.ini").write_text(f"""[databases]
{server["dbname"]} = host={server.get("host", "127.0.0.1")} port={server.get("port", 5432)} \
dbname={server["dbname"]}
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
auth_type = trust
auth_file = {work}/users.txt
pool_mode = transaction
logfile = {work}/pgbouncer.log
""")
    for path in work.iterdir():
        path.chmod(0o644)
    command = [binary, str(work / "pgbouncer.ini")]
    if os.geteuid() == 0:
        command.insert(1, "--user=postgres")
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None:
                    pytest.skip(f"PgBouncer did not start: {proc.stderr.read().decode()[:200]}")
                time.sleep(0.05)
        yield (f"postgresql://{server.get('user', 'postgres')}@127.0.0.1:{port}/"
               f"{server['dbname']}")
    finally:
        proc.terminate()
        proc.wait(10)
        proc.stderr.close()
        shutil.rmtree(work, ignore_errors=True)


def test_a_pool_runs_behind_a_real_pgbouncer(pg_url, pgbouncer, make_app):
    # A pool of its own process (an in-process pool would take the PgBouncer this test
    # started for a stray of its own, R40, and kill it)
    schema = pg_url.rsplit("schema=", 1)[1]
    url = f"{pgbouncer}?schema={schema}&pooler=transaction"
    app = make_app("from jobpool import job\n\n@job(name='t.x')\ndef x(n):\n    return n\n")
    app.db = url
    store = app.store()
    store.enqueue_many("t.x", [(i,) for i in range(5)])
    store.pause("elsewhere")
    app.start("--procs", "2")
    assert (store.stats()["done"], store.paused_queues()) == (5, ["elsewhere"])
    status = app.cli("status", "--db", url, "--json", check=True)
    assert '"done": 5' in status.stdout
    doctor = app.cli("doctor", "--db", url)
    assert doctor.returncode == 0 and "LISTEN: off (?pooler=transaction)" in doctor.stdout
