"""R26a on PostgreSQL: ``durability="normal"`` means what it means on SQLite. A store
opened so (``connect(url, durability="normal")``, ``?durability=normal`` in the URL, or
``$JOBPOOL_DURABILITY``) commits asynchronously on every connection it opens, its pool's
claimer included: a server crash may lose its last commits (jobs run again, or an
enqueue is lost), a process crash never. The default stays durable."""
from __future__ import annotations

import pytest

import jobpool
from jobpool.errors import StoreError
from jobpool.store.postgres.connection import CLAIMER_OPTIONS, open_connection, parse_url

APP = """
from jobpool import job

@job(name="t.noop")
def noop(n):
    return n
"""


def _commit_setting(target, **settings) -> str:
    conn = open_connection(target, **settings)
    try:
        return conn.execute("SHOW synchronous_commit").fetchone()[0]
    finally:
        conn.close()


def test_a_normal_store_commits_asynchronously_and_the_default_waits(pg_url, monkeypatch):
    monkeypatch.delenv("JOBPOOL_DURABILITY", raising=False)
    server_default = _commit_setting(parse_url(pg_url))
    assert server_default == "on"
    for target in (parse_url(pg_url + "&durability=normal"), parse_url(pg_url, "normal")):
        assert target.durability == "normal"
        assert _commit_setting(target) == "off"
        # the claimer's session: the same target, its own settings besides
        assert _commit_setting(target, application="jobpool-supervisor",
                               settings=CLAIMER_OPTIONS) == "off"
        assert "durability=normal" in target.shown     # passed back to --db, it says so
    monkeypatch.setenv("JOBPOOL_DURABILITY", "normal")
    assert _commit_setting(parse_url(pg_url)) == "off"
    assert _commit_setting(parse_url(pg_url, "full")) == "on"   # the caller's word wins


def test_the_store_of_a_normal_url_enqueues_asynchronously_and_a_pool_drains_it(
        pg_url, make_app, monkeypatch):
    monkeypatch.delenv("JOBPOOL_DURABILITY", raising=False)
    url = pg_url + "&durability=normal"
    store = jobpool.connect(url)
    try:
        assert store.conn.execute("SHOW synchronous_commit").fetchone()[0] == "off"
        store.enqueue_many("t.noop", [(i,) for i in range(20)])
    finally:
        store.close()
    app = make_app(APP)
    app.db = url
    app.start("--procs", "2")
    durable = jobpool.connect(pg_url)
    try:
        assert durable.conn.execute("SHOW synchronous_commit").fetchone()[0] == "on"
        assert durable.stats()["done"] == 20
    finally:
        durable.close()


@pytest.mark.parametrize("url_tail, given, words", [
    ("&durability=fast", None, "?durability= in the URL must be 'full' or 'normal', not 'fast'"),
    ("", "fast", "durability must be 'full' or 'normal', not 'fast'"),
    ("&durability=normal", "full", "disagree: say it once"),
])
def test_a_durability_that_is_not_one_is_refused_in_one_line(pg_url, url_tail, given, words):
    with pytest.raises(StoreError, match=words.replace("?", r"\?").replace("(", r"\(")):
        jobpool.connect(pg_url + url_tail, durability=given)


def test_jobpool_start_on_a_bad_durability_is_one_line_and_an_exit_code(pg_url, make_app):
    app = make_app(APP)
    result = app.cli("start", "--app", app.module, "--db", pg_url + "&durability=sometimes",
                     "--burst")
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert "must be 'full' or 'normal'" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_behind_a_transaction_pooler_each_transaction_sets_it(pg_url):
    # A pooler refuses startup options, so ``scope`` sets the session's limits (and this
    # setting) at the start of every transaction; here without a pooler in between.
    from jobpool.store.postgres.connection import scope
    for tail, expected in (("", "on"), ("&durability=normal", "off")):
        target = parse_url(pg_url + "&pooler=transaction" + tail)
        conn = open_connection(target)
        try:
            with conn.transaction():
                scope(conn, target)
                assert conn.execute("SHOW synchronous_commit").fetchone()[0] == expected
        finally:
            conn.close()
