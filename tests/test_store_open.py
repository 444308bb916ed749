"""Opening a store safely (R26a): refuse what is corrupt or foreign, write nothing."""
from __future__ import annotations

import os
import re
import sqlite3

import pytest

import jobpool
from jobpool.errors import CorruptStoreError, NotAStoreError

APP = """
from jobpool import job

@job(name="t.noop")
def noop(*args, **kwargs):
    pass
"""


def filled_store(path):
    store = jobpool.connect(path)
    store.enqueue_many("t.noop", [("x" * 200,)] * 2000)
    store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    store.close()
    return path


def corrupt(path, how):
    data = bytearray(path.read_bytes())
    if how == "garbage over a page":
        # One page in the middle of the file, at the store's own page size.
        page = int.from_bytes(data[16:18], "big")
        middle = len(data) // page // 2
        data[page * middle: page * (middle + 1)] = b"\xde\xad\xbe\xef" * (page // 4)
    elif how == "truncated":
        data = data[: len(data) // 3 + 100]
    elif how == "zeroed header":
        data[:100] = bytes(100)
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("how", ["garbage over a page", "truncated", "zeroed header"])
def test_start_refuses_a_corrupt_store_in_one_line_and_leaves_its_bytes(make_app, how):
    app = make_app(APP)
    filled_store(app.db)
    corrupt(app.db, how)
    before = app.db.read_bytes()
    result = app.cli("start", "--app", app.module, "--db", str(app.db), "--burst")
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("jobpool: error:"), result.stderr
    assert "corrupt" in lines[0] or "not a jobpool store" in lines[0]
    assert app.db.read_bytes() == before


def test_a_corrupt_store_is_refused_by_connect_with_check(tmp_path):
    path = filled_store(tmp_path / "s.db")
    corrupt(path, "garbage over a page")
    with pytest.raises(CorruptStoreError):
        jobpool.connect(path, check=True)


def test_a_database_of_another_application_is_not_a_store_to_a_reader(tmp_path):
    path = tmp_path / "app.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE users (id INTEGER)")
    conn.commit()
    conn.close()
    with pytest.raises(NotAStoreError, match="no jobpool_meta"):
        jobpool.connect(path, create=False)
    with pytest.raises(NotAStoreError, match="no jobpool_meta"):
        jobpool.connect(path, readonly=True)


def test_a_new_store_is_wal_with_the_schema(tmp_path):
    store = jobpool.connect(tmp_path / "new.db")
    assert store.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert store.conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL for enqueuers
    assert jobpool.connect(tmp_path / "new.db", durability="normal").conn.execute(
        "PRAGMA synchronous").fetchone()[0] == 1
    store.close()


def test_a_store_opened_in_a_forked_child_gets_its_own_connection(tmp_path):
    import os
    store = jobpool.connect(tmp_path / "f.db")
    parent_conn = store.conn
    pid = os.fork()
    if pid == 0:
        ok = store.conn is not parent_conn and store.enqueue("t.x").id == 1
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert store.stats()["ready"] == 1


def test_doctor_says_a_healthy_store_is_ok(make_app):
    app = make_app(APP)
    filled_store(app.db)
    result = app.cli("doctor", "--db", str(app.db), check=True)
    assert "ok (ready 2000)" in result.stdout


def test_doctor_salvages_every_readable_job_of_a_damaged_store(make_app):
    app = make_app(APP)
    filled_store(app.db)
    corrupt(app.db, "garbage over a page")
    before = app.db.read_bytes()
    checked = app.cli("doctor", "--db", str(app.db))
    assert checked.returncode == 1 and "problem" in checked.stderr
    new = app.dir / "salvaged.db"
    result = app.cli("doctor", "--db", str(app.db), "--salvage", str(new))
    copied = int(result.stdout.split()[1])
    unreadable = re.search(r"(\d+) job rows? could not be read", result.stderr)
    unreadable = unreadable.group(1) if unreadable else "0"
    assert app.db.read_bytes() == before  # the damaged file is only read
    assert copied > 0 and copied + int(unreadable) >= 1900
    salvaged = jobpool.connect(new, check=True)
    assert salvaged.stats()["ready"] == copied
    # The salvaged store runs.
    app.cli("start", "--app", app.module, "--db", str(new), "--burst", "-q", check=True)
    assert salvaged.stats()["done"] == copied


@pytest.mark.parametrize("target, says", [
    ("postgresql://localhost/test", "the path of a new SQLite file"),
    ("sqlite:salvaged.db", "by its path"),
    ("mysql://db/app", "no store jobpool knows has the scheme 'mysql'")])
def test_doctor_salvage_refuses_a_target_that_is_not_a_new_sqlite_path(make_app, target, says):
    app = make_app(APP)
    filled_store(app.db)
    result = app.cli("doctor", "--db", str(app.db), "--salvage", target)
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], result.stderr
    # Nothing was written under a name made of the URL.
    assert not list(app.dir.glob("sqlite:*")) and not list(app.dir.glob("mysql*"))
    assert not list(app.dir.glob("postgresql*"))


def test_a_salvage_keeps_the_batches_its_jobs_belong_to(make_app):
    # R34: the copied members still count in their batch, whose callback still fires.
    app = make_app(APP)
    store = jobpool.connect(app.db)
    with store.batch(on_complete=jobpool.Signature("t.noop")) as batch:
        batch.add_many("t.noop", [(1,), (2,)])
    store.close()
    new = app.dir / "salvaged.db"
    app.cli("doctor", "--db", str(app.db), "--salvage", str(new), check=True)
    salvaged = jobpool.connect(new)
    assert salvaged.batch_status(batch.id).pending == 2
    app.cli("start", "--app", app.module, "--db", str(new), "--burst", "-q", check=True)
    status = salvaged.batch_status(batch.id)
    assert (status.done, status.finished) == (2, True)
    assert salvaged.get(status.complete_job)["status"] == "done"


def test_a_salvage_keeps_paused_queues_and_periodic_occurrences(make_app):
    # R38: a queue an operator paused stays paused (it ran at the next start); R33: the
    # last occurrence a pool enqueued stays enqueued (a pool would enqueue it again).
    app = make_app(APP)
    store = jobpool.connect(app.db)
    store.enqueue_with("t.noop", queue="held")
    store.pause("held")
    assert store.enqueue_occurrence("t.noop", 1_800_000_000.0) is not None
    store.close()
    new = app.dir / "salvaged.db"
    app.cli("doctor", "--db", str(app.db), "--salvage", str(new), check=True)
    salvaged = jobpool.connect(new)
    assert salvaged.paused_queues() == ["held"]
    assert salvaged.enqueue_occurrence("t.noop", 1_800_000_000.0) is None  # done already
    app.cli("start", "--app", app.module, "--db", str(new), "--burst", "-q", check=True)
    assert [j["status"] for j in salvaged.list_jobs(queue="held")] == ["ready"]  # waits


def page_size(path) -> int:
    conn = sqlite3.connect(path)
    try:
        return conn.execute("PRAGMA page_size").fetchone()[0]
    finally:
        conn.close()


def test_a_new_store_gets_small_pages_and_an_older_store_keeps_its_own(make_app):
    """R26a: new stores use sql.PAGE_SIZE; a store made with SQLite's default 4 KiB
    pages (as earlier jobpool versions made them) opens, runs and keeps them. A pool
    that exits closes every connection, so no WAL is left beside either."""
    from jobpool.store.sqlite import statements as sql
    from .conftest import make_store
    app = make_app(APP)
    with jobpool.connect(app.db) as store:
        store.enqueue("t.noop")
    app.start("--procs", "1")
    older = make_store(app.dir / "older.db")
    with jobpool.connect(older) as store:
        store.enqueue("t.noop")
    app.cli("start", "--app", app.module, "--db", str(older), "--burst", "--procs", "1", check=True)
    for path, expected in ((app.db, sql.PAGE_SIZE), (older, 4096)):
        assert not path.with_name(path.name + "-wal").exists()
        assert page_size(path) == expected
        with jobpool.connect(path) as store:
            assert store.stats()["done"] == 1


def test_the_sqlite_store_and_its_claimer_implement_the_store_protocol(tmp_path):
    from jobpool.store import Claimer, Store
    store = jobpool.connect(tmp_path / "p.db")
    try:
        assert isinstance(store, Store)
        claimer = store.claimer("host:1:1", ["t.a"], ["default"], {})
        try:
            assert isinstance(claimer, Claimer)
        finally:
            claimer.close()
    finally:
        store.close()


def test_no_store_module_imports_the_job_registry():
    # A job passes its options to the store (jobpool.options); the store never looks
    # the job up in the registry itself (issue 11: no jobs <-> store cycle).
    import ast
    from pathlib import Path
    store_dir = Path(jobpool.__file__).parent / "store"
    offenders = []
    for path in store_dir.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [f"{node.module}.{a.name}" for a in node.names]
                     if isinstance(node, ast.ImportFrom) and node.module else [])
            offenders += [f"{path.name}: {n}" for n in names
                          if n == "jobpool.jobs" or n.startswith("jobpool.jobs.")]
    assert offenders == []


KNOWN = "jobpool opens postgresql://… and postgres://… URLs (PostgreSQL) and plain paths (SQLite)"


@pytest.mark.parametrize("db, words", [
    ("sqlite:jobs.db", "name an SQLite store by its path"),
    ("sqlite:///jobs.db", "name an SQLite store by its path"),
    ("file:jobs.db?mode=ro", "name an SQLite store by its path"),
    ("postgresq://u:s3cret@db/app", "no store jobpool knows has the scheme 'postgresq'"),
    ("mysql://u:s3cret@db/app", "no store jobpool knows has the scheme 'mysql'"),
    ("postgresql:app", "a PostgreSQL URL starts postgresql:// or postgres://"),
])
def test_a_url_of_a_scheme_jobpool_does_not_open_is_refused_naming_the_ones_it_does(
        tmp_path, monkeypatch, db, words):
    # section 7, R26a: a URL is never taken for a file name, and never quoted whole
    # (it may hold a password)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError) as refused:
        jobpool.connect(db)
    message = str(refused.value)
    assert words in message and KNOWN in message and "s3cret" not in message
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("db", ["./a:b.db", "x:y/../plain.db", "C:\\jobs.db", "a:b.db"])
def test_a_path_with_a_colon_is_still_a_path(tmp_path, monkeypatch, db):
    # only a leading scheme of two characters or more, before any slash, is a URL;
    # one letter is a drive
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x:y").mkdir()
    store = jobpool.connect(db)
    try:
        store.enqueue("t.noop")
    finally:
        store.close()
    assert (tmp_path / db).exists()
    absolute = jobpool.connect(tmp_path / "x:y" / "abs:olute.db")
    absolute.close()
    assert (tmp_path / "x:y" / "abs:olute.db").exists()


@pytest.mark.parametrize("what, says", [
    ("directory", "{db} is a directory, not a jobpool store"),
    ("fifo", "{db} is not a regular file, not a jobpool store"),  # its open waited for ever
    ("under a file", "cannot read {db}: Not a directory"),
    ("missing", "no jobpool store at {db}"),
    ("not a database", "{db} is not a jobpool store (not an SQLite database file)"),
    ("escapes", "no jobpool store at {db}"),
])
@pytest.mark.parametrize("salvage", [False, True])
def test_doctor_names_a_file_it_cannot_check_in_one_line_and_makes_no_new_store(
        make_app, what, says, salvage):
    # Each was a traceback (sqlite3's "disk I/O error", "unable to open database file"),
    # a FIFO a hang, and a salvage of a file that is not a store left an empty new one.
    app = make_app(APP)
    db = app.dir / ("\x1b]0;pwn\x07.db" if what == "escapes" else "checked.db")
    if what == "under a file":
        (app.dir / "notes.txt").write_text("just some text\n")
        db = app.dir / "notes.txt" / "checked.db"
    if what == "directory":
        db.mkdir()
    elif what == "fifo":
        os.mkfifo(db)
    elif what == "not a database":
        db.write_text("just some text\n")
    named = str(db.relative_to(app.dir))
    args = ["doctor", "--db", named] + (["--salvage", "new.db"] if salvage else [])
    result = app.cli(*args, timeout=30)
    assert result.returncode == 1 and result.stdout == ""
    shown = named.replace("\x1b", "\\x1b").replace("\x07", "\\x07")
    lines = result.stderr.strip().splitlines()
    if what == "not a database" and not salvage:  # a check reports it as the file's problem
        assert lines[-1] == f"  {says.format(db=shown)}" and "1 problem(s)" in lines[0]
    else:
        assert lines == [f"jobpool: error: {says.format(db=shown)}"]
    assert not (app.dir / "new.db").exists()


@pytest.mark.parametrize("busy_timeout", [float("nan"), -1, "5"])
def test_a_busy_timeout_that_is_no_wait_is_refused_before_the_file_is_made(tmp_path,
                                                                         busy_timeout):
    path = tmp_path / "jobpool.db"
    with pytest.raises(ValueError, match="busy_timeout must be a number of seconds, 0 or more"):
        jobpool.connect(path, busy_timeout=busy_timeout)
    assert not path.exists()


def test_a_busy_timeout_past_any_float_waits_as_an_endless_one(tmp_path):
    # 10**400 was the driver's OverflowError, after the file had been created; an
    # endless wait is capped at SQLite's longest (test_busy_waits.py).
    store = jobpool.connect(tmp_path / "jobpool.db", busy_timeout=10**400)
    try:
        assert store.enqueue("t.x").id == 1
    finally:
        store.close()
