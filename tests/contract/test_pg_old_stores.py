"""PostgreSQL stores as earlier builds of jobpool made them, frozen with their rows
(``tests/schemas/pg_r*.sql``, dumped from stores those builds made), are brought up to
today's revision by a writer with their jobs intact, and then work. A test that made an
old store by relabelling today's schema could not see a step that names a column a later
step adds: revision 3's view named ``meta`` (revision 6), and a store an early build had
labelled revision 3 had no ``state`` columns."""
from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

import jobpool
from jobpool import job
from jobpool.store.postgres import statements as pg_sql
from jobpool.testing import drain

SCHEMAS = Path(__file__).resolve().parent.parent / "schemas"


@job(name="old.after_upgrade", store_result=True)
def after_upgrade(n):
    return n + 1


def _load(pg_url: str, frozen: str) -> None:
    schema = pg_url.rsplit("schema=", 1)[1]
    text = (SCHEMAS / frozen).read_text(encoding="utf-8").replace("__SCHEMA__", schema)
    with psycopg.connect(pg_url.split("?")[0], autocommit=True) as conn:
        conn.execute(text)  # a script without parameters: sent as one simple query


@pytest.mark.parametrize("frozen", ["pg_r2.sql", "pg_r3.sql"])
def test_a_store_an_early_build_made_is_upgraded_with_its_jobs(pg_url, frozen):
    _load(pg_url, frozen)
    store = jobpool.connect(pg_url)
    try:
        with psycopg.connect(pg_url.split("?")[0], autocommit=True) as conn:
            schema = pg_url.rsplit("schema=", 1)[1]
            revision = conn.execute(f"SELECT value FROM {schema}.jobpool_meta "
                                    "WHERE key = 'revision'").fetchone()[0]
        assert revision == pg_sql.SCHEMA_VERSION
        ready = store.get(1)
        assert (ready["name"], ready["status"], ready["key"]) == ("old.ready", "ready", "k1")
        assert store.get(2)["name"] == "old.later"
        assert sorted(j["id"] for j in store.list_jobs(limit=10)) == [1, 2]
        handle = store.enqueue_with("old.after_upgrade", args=[41])
        drain(store, max_jobs=10)
        assert handle.result(timeout=10) == 42
        assert store.get(1)["status"] == "ready"  # a drain claims only the names it serves
    finally:
        store.close()
