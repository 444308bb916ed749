"""What a postgresql:// URL may say, and what is never printed from it."""
from __future__ import annotations

import subprocess
import sys

import pytest

from jobpool.errors import StoreError
from jobpool.store.postgres import parse_url, redact

from ..conftest import ROOT


def test_jobpool_parameters_are_taken_off_the_url_before_libpq_sees_it():
    target = parse_url("postgresql://u:pw@db:5433/app?sslmode=require&schema=imports")
    assert target.schema == "imports" and target.pooler is None
    assert target.conninfo == "postgresql://u:pw@db:5433/app?sslmode=require"
    assert target.shown == "postgresql://u:***@db:5433/app?sslmode=require"
    assert parse_url("postgres://db/app").schema == "jobpool"


@pytest.mark.parametrize("url, words", [
    ("postgresql://db/app?schema=Bad-Name", "schema must be a lower-case name"),
    ("postgresql://db/app?schema=" + "x" * 64, "schema must be a lower-case name"),
    ("postgresql://db/app?pooler=session", "pooler must be 'transaction'"),
    ("postgresql://db/app?password=hunter2", "not in ?password="),
])
def test_a_bad_url_is_refused_naming_what_is_wrong(url, words):
    with pytest.raises(StoreError, match=words.replace("?", r"\?")) as caught:
        parse_url(url)
    assert "hunter2" not in str(caught.value)


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
    from jobpool.store.postgres import channel_name
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
