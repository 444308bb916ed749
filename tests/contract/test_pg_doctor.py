"""``jobpool doctor`` on PostgreSQL: the version, counts, the hot table's dead rows,
the oldest open transaction, and whether LISTEN works (issue 12)."""
from __future__ import annotations

import subprocess
import sys

import jobpool
from jobpool.store.postgres import statements as pg_sql
from ..conftest import PG_URL, ROOT


def doctor(url: str, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "jobpool", "doctor", "--db", url, *extra],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)


def test_doctor_reports_a_healthy_store_and_names_a_transaction_holding_back_vacuum(
        pg_url, monkeypatch):
    import psycopg

    from jobpool.store.postgres import doctor as pg_doctor
    store = jobpool.connect(pg_url)
    store.enqueue_many("c.job", [(i,) for i in range(3)])
    store.cancel(1)
    store.close()
    healthy = doctor(pg_url)
    assert healthy.returncode == 0, healthy.stderr
    assert "schema jp_test_" in healthy.stdout and f"version {pg_sql.SCHEMA_VERSION}" in healthy.stdout
    assert "jobs: ready 2, scheduled 0, running 0, done 0, dead 1" in healthy.stdout
    assert "LISTEN: works" in healthy.stdout and "hot table (jobs)" in healthy.stdout
    # An application forgets a transaction open: vacuum is held back, and doctor says
    # who holds it (the threshold lowered here instead of waiting five minutes).
    with psycopg.connect(PG_URL, application_name="forgetful-app") as forgetful:
        forgetful.execute("SELECT txid_current()")  # a transaction with an xid, left open
        monkeypatch.setattr(pg_doctor, "OLD_TRANSACTION_S", 0.0)
        report = pg_doctor.check(pg_url)
        assert not report.ok
        (problem,) = report.problems
        assert "forgetful-app" in problem and "holds back vacuum" in problem
        forgetful.rollback()
    assert "--salvage" in doctor(pg_url, "--salvage", "/tmp/x.db").stderr
    salvage = doctor(pg_url, "--salvage", "/tmp/x.db")
    assert salvage.returncode != 0 and salvage.stderr.count("\n") == 1
    assert "pg_dump" in salvage.stderr


def test_behind_a_pooler_doctor_says_the_pool_polls(pg_url):
    jobpool.connect(pg_url).close()
    report = doctor(pg_url + "&pooler=transaction")
    assert report.returncode == 0 and "LISTEN: off (?pooler=transaction)" in report.stdout
