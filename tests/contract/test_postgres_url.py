"""What a postgresql:// URL may say, and what is never printed from it."""
from __future__ import annotations

import subprocess
import sys

import pytest

import jobpool

from jobpool.errors import StoreError
from jobpool.store.postgres.connection import parse_url, redact

from ..conftest import ROOT


def test_jobpool_parameters_are_taken_off_the_url_before_libpq_sees_it():
    target = parse_url("postgresql://u:pw@db:5433/app?sslmode=require&schema=imports")
    assert target.schema == "imports" and target.pooler is None
    assert target.conninfo == "postgresql://u:pw@db:5433/app?sslmode=require"
    # what operators see names the store, schema included, never the password
    assert target.shown == "postgresql://u:***@db:5433/app?sslmode=require&schema=imports"
    assert parse_url("postgres://db/app").schema == "jobpool"


@pytest.mark.parametrize("url, words", [
    ("postgresql://db/app?schema=Bad-Name", "schema must be a lower-case name"),
    ("postgresql://db/app?schema=" + "x" * 64, "schema must be a lower-case name"),
    ("postgresql://db/app?pooler=session", "pooler must be 'transaction'"),
    ("postgresql://db/app?password=hunter2", "not in ?password="),
    # The last one was taken, silently.
    ("postgresql://db/app?schema=a&schema=b", "?schema= is given 2 times in the URL"),
    ("postgresql://db/app?durability=full&durability=normal", "?durability= is given 2 times"),
])
def test_a_bad_url_is_refused_naming_what_is_wrong(url, words):
    with pytest.raises(StoreError, match=words.replace("?", r"\?")) as caught:
        parse_url(url)
    assert "hunter2" not in str(caught.value)
    # A setting's mistake, the same class on both stores: a ValueError too.
    assert isinstance(caught.value, ValueError)


@pytest.mark.parametrize("where", ["sqlite", "postgres"])
def test_a_durability_neither_store_takes_is_the_same_error_on_both(where, tmp_path):
    from jobpool.errors import StoreSettingError
    db = str(tmp_path / "jobpool.db") if where == "sqlite" else "postgresql://db/app"
    with pytest.raises(StoreSettingError, match="durability must be 'full' or 'normal'"):
        jobpool.connect(db, durability="bogus")
    assert not (tmp_path / "jobpool.db").exists()


def test_redact_hides_only_the_password():
    assert redact("postgresql://u@db/app") == "postgresql://u@db/app"
    assert redact("postgresql://u:s3cret@db/app") == "postgresql://u:***@db/app"


def test_the_cli_never_prints_the_password(pg_url):
    with_password = pg_url.replace("postgresql://postgres@", "postgresql://postgres:s3cret@")
    status = subprocess.run([sys.executable, "-m", "jobpool", "status", "--db", with_password],
                            capture_output=True, text=True, cwd=ROOT, timeout=60)
    # The schema is new and status creates nothing: one line, naming the store without its password.
    assert status.returncode != 0
    assert status.stderr.count("\n") == 1, status.stderr
    assert "postgres:***@" in status.stderr and "s3cret" not in status.stderr + status.stdout
    enqueue = subprocess.run([sys.executable, "-m", "jobpool", "enqueue", "c.job", "--db",
                              with_password], capture_output=True, text=True, cwd=ROOT,
                             timeout=60)
    assert enqueue.returncode == 0, enqueue.stderr
    status = subprocess.run([sys.executable, "-m", "jobpool", "status", "--db", with_password],
                            capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert status.returncode == 0 and "postgres:***@" in status.stdout
    assert "s3cret" not in status.stdout + status.stderr


def test_two_schemas_in_one_database_have_their_own_wake_up_channel():
    from jobpool.store.postgres.store import channel_name
    a, b = channel_name("jobpool"), channel_name("x" * 63)
    assert a != b and len(a.encode()) <= 63 and len(b.encode()) <= 63
    assert channel_name("jobpool") == a  # the same on every host


def test_behind_a_transaction_pooler_the_pool_polls(pg_url):
    import jobpool
    store = jobpool.connect(pg_url + "&pooler=transaction")
    try:
        assert store.listener().sock is None
        assert store.enqueue("c.job").id == 1  # works without server-side prepares
    finally:
        store.close()


def test_url_parameters_for_libpq_pass_through_unchanged():
    target = parse_url("postgresql://db/app?application_name=my%20app&schema=s")
    assert target.conninfo == "postgresql://db/app?application_name=my%20app"


def test_a_malformed_url_is_a_store_error():
    with pytest.raises(StoreError, match="not a usable PostgreSQL URL"):
        parse_url("postgresql://[::1/app")


def test_a_connect_error_never_quotes_the_password():
    import jobpool
    with pytest.raises(StoreError) as caught:
        jobpool.connect("postgresql://u:s%zzecret@127.0.0.1:5432/test")
    text = str(caught.value)
    assert "zzecret" not in text and caught.value.__cause__ is None, text
    assert "u:***@" in text


def test_a_schema_holding_other_tables_is_refused_not_written(pg_url):
    import psycopg

    import jobpool
    from jobpool.errors import NotAStoreError
    target = parse_url(pg_url)
    with psycopg.connect(target.conninfo, autocommit=True) as app:
        app.execute(f"CREATE SCHEMA {target.schema}")
        app.execute(f"CREATE TABLE {target.schema}.jobs (title text)")
    with pytest.raises(NotAStoreError, match="has tables jobpool would use \\(jobs\\)"):
        jobpool.connect(pg_url)
    with psycopg.connect(target.conninfo, autocommit=True) as app:
        tables = app.execute("SELECT table_name FROM information_schema.tables"
                             " WHERE table_schema = %s", (target.schema,)).fetchall()
    assert tables == [("jobs",)]


def test_pools_are_judged_on_the_servers_clock(pg_url):
    # R7a, R24b: a host whose clock runs an hour ahead still sees a live pool alive
    import time

    import jobpool
    from jobpool.store.records import Heartbeat
    store = jobpool.connect(pg_url)
    try:
        beat = Heartbeat(owner="otherhost:1:1", host="otherhost", pid=1, procs=1,
                         queues=("default",), names=("c.job",), core="test",
                         counters_json="{}", slots_json="[]")
        store.heartbeat(beat, [], time.time())
        (pool,) = store.pools(time.time() + 3600, dead_after=10)
        assert pool["dead"] is None
    finally:
        store.close()


def test_batches_enqueued_at_once_by_two_sessions_keep_their_item_order(pg_url):
    # R4 on PostgreSQL: ids need not be consecutive, but each batch's are in item order
    import threading

    import jobpool
    jobpool.connect(pg_url).close()
    results = {}

    def enqueue(tag):
        store = jobpool.connect(pg_url)
        try:
            results[tag] = list(store.enqueue_many("c.job", [(tag, i) for i in range(3000)]).ids)
        finally:
            store.close()
    threads = [threading.Thread(target=enqueue, args=(tag,)) for tag in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    store = jobpool.connect(pg_url)
    try:
        for tag, ids in results.items():
            assert len(ids) == 3000 and ids == sorted(ids)
            for i in (0, 1, 1499, 2999):
                assert store.get(ids[i])["payload"] == f'[["{tag}",{i}],{{}}]'
    finally:
        store.close()
