"""Enqueue through the public API: validation first (R1), keys (R3), bulk (R4),
the caller's transaction (R5), and job registration (R1a, R2)."""
from __future__ import annotations

import inspect
import json
import re
import sqlite3
from datetime import datetime, timedelta, timezone

import pytest

import jobpool
from jobpool import jobs
from jobpool.cli import UserError, import_app
from jobpool.errors import EnqueueError, RegistryError

from .conftest import default_recursion_limit



@pytest.fixture
def store(any_store):
    """Every store (SQLite, PostgreSQL): what these rules promise holds on both."""
    return any_store


@pytest.fixture
def sqlite_store(tmp_path):
    """For the tests that reach into SQLite's own file."""
    s = jobpool.connect(tmp_path / "jobpool.db")
    yield s
    s.close()


def count(store) -> int:
    stats = store.stats()
    return sum(stats[status] for status in ("ready", "scheduled", "running", "done", "dead"))


@pytest.fixture
def registered():
    names = []

    def define(name, **options):
        names.append(name)
        return jobpool.job(name=name, **options)(lambda *a, **k: None)
    yield define
    for name in names:
        jobs.unregister(name)


def test_enqueue_by_name_writes_a_ready_row(store):
    handle = store.enqueue("imports.load", "a.csv", sep=";")
    assert handle == jobs.Handle(1, duplicate=False)
    job = store.get(handle.id)
    assert (job["name"], job["status"], job["queue"], job["payload"]) == (
        "imports.load", "ready", "default", '[["a.csv"],{"sep":";"}]')


def _nested(depth: int) -> list:
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize("options, field", [
    ({"delay": -1}, "delay"),
    ({"max_attempts": 0}, "max_attempts"),
    ({"max_attempts": -3}, "max_attempts"),
    ({"priority": "high"}, "priority"),
    ({"deadline": "tomorrow"}, "deadline"),
    ({"key": ""}, "key"),
    ({"queue": "has space"}, "queue"),
    ({"args": (object(),)}, "JSON"),
    ({"kwargs": {"when": datetime.now()}}, "JSON"),
    # Each was the validator's own error, not naming the field (or not an EnqueueError).
    ({"deadline": datetime.min}, "deadline datetime.datetime.1, 1, 1, 0, 0. cannot be a Unix time"),
    ({"timeout": 10**400}, "timeout must be a positive number of seconds, not a 1329-bit"),
    ({"delay": 10**400}, "delay must be at most 10 years"),
    ({"args": (_nested(100_000),)}, "payload cannot be serialized as JSON: nested too deeply"),
    ({"connection": 5}, "connection must be the application's open database connection"),
])
def test_bad_input_is_refused_naming_the_field_and_nothing_is_written(store, options, field):
    with pytest.raises(EnqueueError, match=field), default_recursion_limit():
        store.enqueue_with("t.job", **options)
    assert count(store) == 0


@pytest.mark.parametrize("items", [None, "ab", b"ab", 5, [(_nested(100_000),)]])
def test_enqueue_many_refuses_items_that_are_no_list_of_calls_and_writes_nothing(store, items):
    # None and 5 raised TypeError, "ab" was two calls ("a",) and ("b",), a deep
    # argument RecursionError.
    with pytest.raises(EnqueueError, match="enqueue_many takes a list of items|nested too deeply"), \
            default_recursion_limit():
        store.enqueue_many("t.job", items)
    assert count(store) == 0


@pytest.mark.parametrize("keys", ["ab", b"ab", 5])
def test_enqueue_many_keys_are_a_list_not_text(store, keys):
    # keys="ab" keyed two items "a" and "b".
    with pytest.raises(EnqueueError, match="keys must be a list of keys"):
        store.enqueue_many("t.job", [(1,), (2,)], keys=keys)
    assert count(store) == 0


def test_an_oversized_payload_is_refused(store):
    with pytest.raises(EnqueueError, match="over the 1048576-byte limit"):
        store.enqueue("t.job", "x" * (1024 * 1024))
    assert count(store) == 0


def test_an_invalid_job_name_is_refused(store):
    for name in ("", "two words", "tab\there"):
        with pytest.raises(ValueError, match="job name"):
            store.enqueue(name)
    assert count(store) == 0


def test_delay_and_deadline_accept_timedelta_and_datetime(store):
    deadline = datetime(2030, 1, 1, tzinfo=timezone.utc)
    job_id = store.enqueue_with("t.job", delay=timedelta(minutes=1), deadline=deadline, now=1000.0).id
    job = store.get(job_id)
    # due a minute after it was enqueued (by the store's clock on PostgreSQL, R7a)
    assert job["run_at"] - job["created_at"] == pytest.approx(60.0)
    assert job["deadline"] == deadline.timestamp()
    assert store.stats(now=1000.0)["scheduled"] == 1


def test_a_deadline_past_any_float_is_never_and_one_before_any_is_gone(store):
    # 10**400 was the driver's OverflowError: as a deadline it is one that never comes.
    never = store.enqueue_with("t.job", deadline=10**400).id
    gone = store.enqueue_with("t.job", deadline=-(10**400)).id
    assert store.get(never)["deadline"] == float("inf")
    assert store.get(gone)["deadline"] == float("-inf")


def test_a_live_key_is_unique_and_a_duplicate_returns_the_existing_id(store):
    first = store.enqueue_with("t.job", key="invoice-7")
    again = store.enqueue_with("t.job", args=("other",), key="invoice-7")
    assert again == jobs.Handle(first.id, duplicate=True)
    assert count(store) == 1
    # The same key under another name is a different identity.
    assert not store.enqueue_with("t.other", key="invoice-7").duplicate


def test_a_key_is_free_again_once_its_job_is_done_or_dead(sqlite_store):
    store = sqlite_store
    first = store.enqueue_with("t.job", key="k")
    store.conn.execute("UPDATE jobs SET status = 'done' WHERE id = ?", (first.id,))
    second = store.enqueue_with("t.job", key="k")
    assert not second.duplicate and second.id != first.id
    store.conn.execute("UPDATE jobs SET status = 'dead' WHERE id = ?", (second.id,))
    assert not store.enqueue_with("t.job", key="k").duplicate


def test_an_enqueue_leaves_no_read_open_on_the_store_file(sqlite_store):
    """The enqueue's statements run on a cursor its connection keeps (``run_one``):
    after a new row and after a duplicate (the refused insert, then the look for the
    live key), nothing holds the file, so another connection can checkpoint the whole
    WAL back into it and truncate it (a read left open would hold it back)."""
    store = sqlite_store
    first = store.enqueue_with("t.job", key="invoice-8")
    assert store.enqueue_with("t.job", key="invoice-8").duplicate
    store.enqueue("t.job", 1)
    assert not store.conn.in_transaction
    other = sqlite3.connect(store.path)
    try:
        busy, _frames, _moved = other.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        assert busy == 0
        assert other.execute("SELECT count(*) FROM jobs").fetchone()[0] == 2
    finally:
        other.close()
    store.close()
    with jobpool.connect(store.path) as again:
        assert again.get(first.id)["status"] == "ready"


def test_an_enqueue_of_a_limited_name_writes_its_group_and_its_lane(sqlite_store):
    """R35 with R1: an enqueue without a key or batch is one statement SQLite commits
    itself, which writes nothing for a name with a limit: that row is written in a
    transaction with its group (from its ``group_by`` argument) and its lane. A name
    without a limit has no lane, and keeps a group given to it."""
    from jobpool.limits import NameLimit
    store = sqlite_store
    store.limits.declare({"t.limited": NameLimit("t.limited", 1, None, 1, "customer")}, "test")
    limited = store.enqueue_with("t.limited", kwargs={"customer": "acme"})
    free = store.enqueue_with("t.free", args=(1,))
    grouped = store.enqueue_with("t.free", args=(2,), group="g")
    found = dict(store.conn.execute("SELECT id, grp FROM jobs").fetchall())
    assert found == {limited.id: "acme", free.id: None, grouped.id: "g"}
    assert store.conn.execute("SELECT name, grp FROM jobpool_lanes").fetchall() == [
        ("t.limited", "acme")]


def test_enqueue_many_writes_all_rows_with_their_ids(store):
    handles = store.enqueue_many("t.job", [(i,) for i in range(1000)])
    assert [h.id for h in handles] == list(range(1, 1001))
    assert store.get(500)["payload"] == "[[499],{}]"


def test_enqueue_many_ids_follow_the_items_and_the_rows_before_them(sqlite_store):
    """R4: a batch's ids are the ones its rows would get one by one (one more than the
    largest id in the table, as SQLite gives a row inserted without one), each the id
    of its own item; SQLite writes the batch in the order it reads it, with no sort of
    the whole batch first (an ``ORDER BY`` over ``json_each`` was a temporary B-tree
    as large as the batch)."""
    from jobpool.store.sqlite import statements as sql
    first = sqlite_store.enqueue("t.job", "single")
    batch = sqlite_store.enqueue_many("t.job", [(i,) for i in range(300)])
    assert list(batch.ids) == list(range(first.id + 1, first.id + 301))
    assert [json.loads(sqlite_store.get(h.id)["payload"])[0] for h in batch] == [[i] for i in range(300)]
    # The newest rows gone (by hand): the next batch starts after the largest id left.
    sqlite_store.conn.execute("DELETE FROM jobs WHERE id > ?", (batch[99].id,))
    again = sqlite_store.enqueue_many("t.job", [("again", i) for i in range(3)])
    assert list(again.ids) == [batch[99].id + 1, batch[99].id + 2, batch[99].id + 3]
    assert sqlite_store.get(again[2].id)["payload"] == '[["again",2],{}]'
    assert sqlite_store.enqueue("t.job", "after").id == again[2].id + 1
    plan = " ".join(row[3] for row in sqlite_store.conn.execute(
        "EXPLAIN QUERY PLAN " + sql.INSERT_BATCH,
        {"first": 1, "queue": "default", "name": "t.job", "priority": 0, "run_at": 0.0,
         "max_attempts": 3, "timeout": 60.0, "now": 0.0, "batch_id": None,
         "batch": "[[1]]", "args_only": True}))
    assert "TEMP B-TREE" not in plan, plan


def test_a_bulk_enqueue_whose_ids_would_pass_the_largest_is_refused_whole(sqlite_store):
    """R4: a batch's ids follow the largest id in the table; where they would pass
    2**63 - 1 the batch is refused naming why, and nothing is written (SQLite gives a
    row inserted alone a random free id there, and the batch's handles were wrong)."""
    from jobpool.bounds import INT64_MAX
    top = sqlite_store.enqueue("t.job", "top").id
    sqlite_store.conn.execute("UPDATE jobs SET id = ? WHERE id = ?", (INT64_MAX - 1, top))
    with pytest.raises(EnqueueError, match=f"3 more job ids do not fit after id {INT64_MAX - 1}"):
        sqlite_store.enqueue_many("t.job", [(i,) for i in range(3)])
    assert count(sqlite_store) == 1
    assert list(sqlite_store.enqueue_many("t.job", [("last",)]).ids) == [INT64_MAX]


def test_enqueue_many_writes_the_payload_a_single_enqueue_writes(store):
    """The batch path builds payloads in SQL; they must match the single path's bytes."""
    items = [(), ("a\"b\\c\n\t\u2028✓",), (1.5, 1e300, -0.0, 10**30, 0.1),
             ([1, (2, 3)], {"k": [None, True]}), ["list", "args"], ("\x00\x1f",)]
    handles = store.enqueue_many("t.job", items)
    for item, handle in zip(items, handles, strict=True):
        single = store.enqueue("t.job", *item)
        assert store.get(handle.id)["payload"] == store.get(single.id)["payload"]


def test_enqueue_many_handles_read_like_a_list(store):
    handles = store.enqueue_many("t.job", [(i,) for i in range(5)])
    assert len(handles) == 5 and handles[0].id == 1 and handles[-1].id == 5
    assert [h.id for h in handles[1:3]] == [2, 3] and list(handles.ids) == [1, 2, 3, 4, 5]
    assert handles[2] == jobs.Handle(3) and handles[2].status() == "ready"
    assert handles == [jobs.Handle(i) for i in range(1, 6)] and handles != [jobs.Handle(1)]
    with pytest.raises(IndexError):
        handles[5]
    assert len(store.enqueue_many("t.job", [])) == 0


def test_enqueue_many_is_all_or_nothing(store):
    items = [(1,), (2,), (object(),), (4,)]
    with pytest.raises(EnqueueError, match="item 2"):
        store.enqueue_many("t.job", items)
    assert count(store) == 0


@pytest.mark.parametrize("keyed", [False, True])
def test_a_bulk_enqueue_grows_the_page_cache_for_its_own_transaction(sqlite_store, keyed):
    """A bulk write's pages stay in memory until its commit (``BULK_CACHE_KIB``, where
    SQLite's default spilled them into the WAL part by part); the connection's own
    setting is back after it, whether the enqueue committed or failed, and a small one
    leaves the cache alone."""
    from jobpool.store.sqlite import store as sqlite_module
    conn = sqlite_store.conn
    conn.execute("PRAGMA cache_size=-3000")
    statements: list[str] = []
    conn.set_trace_callback(statements.append)
    bulk = sqlite_module.BULK_ROWS
    keys = [f"k{i}" for i in range(bulk)] if keyed else None
    assert len(sqlite_store.enqueue_many("t.job", [(i,) for i in range(bulk)], keys=keys)) == bulk
    assert f"PRAGMA cache_size=-{sqlite_module.BULK_CACHE_KIB}" in statements
    assert conn.execute("PRAGMA cache_size").fetchone()[0] == -3000
    statements.clear()
    with pytest.raises(EnqueueError, match="no batch with id 999"):
        sqlite_store.enqueue_many("t.job", [(i,) for i in range(bulk)], batch=999)
    assert f"PRAGMA cache_size=-{sqlite_module.BULK_CACHE_KIB}" in statements
    assert conn.execute("PRAGMA cache_size").fetchone()[0] == -3000
    assert count(sqlite_store) == bulk
    statements.clear()
    sqlite_store.enqueue_many("t.job", [(i,) for i in range(bulk - 1)])
    assert not [text for text in statements if "cache_size" in text]
    conn.set_trace_callback(None)


def test_enqueue_joins_the_callers_transaction(sqlite_store, tmp_path):
    """R5: roll back, and the job never existed; commit, and it exists with the data
    (PostgreSQL's: tests/contract)."""
    store = sqlite_store
    conn = sqlite3.connect(store.path, isolation_level=None)
    conn.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY)")
    conn.execute("BEGIN")
    conn.execute("INSERT INTO orders VALUES (1)")
    store.enqueue_with("t.ship", args=(1,), connection=conn)
    conn.execute("ROLLBACK")
    assert count(store) == 0
    conn.execute("BEGIN")
    conn.execute("INSERT INTO orders VALUES (2)")
    handle = store.enqueue_with("t.ship", args=(2,), connection=conn)
    conn.execute("COMMIT")
    assert store.get(handle.id)["payload"] == "[[2],{}]"
    conn.close()


def test_a_registered_job_enqueues_with_its_options(store, registered, monkeypatch):
    monkeypatch.setenv("JOBPOOL_DB", store.path)  # what the store shows names it
    load = registered("t.load", queue="imports", priority=3, max_attempts=2, timeout=9)
    handle = load.enqueue("a.csv")
    job = store.get(handle.id)
    assert (job["queue"], job["priority"], job["max_attempts"], job["timeout"]) == ("imports", 3, 2, 9.0)
    handle = load.enqueue_with(args=("b.csv",), priority=7, key="b")
    assert store.get(handle.id)["priority"] == 7


def test_calling_a_job_runs_it_in_process(registered):
    @jobpool.job(name="t.add")
    def add(a, b):
        return a + b
    try:
        assert add(2, 3) == 5
    finally:
        jobs.unregister("t.add")


def test_two_functions_under_one_name_fail_at_registration_naming_both(registered):
    registered("t.dup")

    def other():
        pass
    with pytest.raises(RegistryError, match=r"t\.dup.*registered twice.*test_enqueue.*other"):
        jobpool.job(name="t.dup")(other)


@pytest.mark.parametrize("options", [dict(cron="bad"), dict(max_running=0),
                                     dict(queue="a:b")], ids=["cron", "max_running", "queue"])
def test_a_refused_job_names_the_line_that_declared_it(options):
    # R1a amended: the decorator's line, wherever in jobpool the check is made
    declared_at = inspect.currentframe().f_lineno + 2
    with pytest.raises(RegistryError) as refused:
        @jobpool.job(name="t.refused", **options)
        def refused_job():
            pass
    assert str(refused.value).endswith(f" ({__file__}, line {declared_at})"), refused.value
    assert "t.refused" not in jobs.registered()


def test_the_cli_names_the_apps_line_for_a_refused_job(tmp_path, monkeypatch):
    # R1a amended, R28: `--app`'s one line points at the app's decorator, not at jobpool
    app = tmp_path / "refused_job_app.py"
    app.write_text("import jobpool\n\n\n@jobpool.job(name='t.cli_refused', cron='bad')\n"
                   "def tick():\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(UserError) as refused:
        import_app("refused_job_app")
    assert str(refused.value).startswith(
        f"cannot import --app refused_job_app: {app}, line 4: RegistryError: job t.cli_refused:"
        " bad cron= 'bad'"), refused.value
    assert "jobs.py" not in str(refused.value)


@pytest.mark.parametrize("name", ["", "has space", "new\nline"])
def test_a_job_name_must_be_printable_without_spaces(name):
    with pytest.raises(RegistryError):
        jobpool.job(name=name)(lambda: None)


def test_pickle_is_opt_in_per_job(store, registered):
    registered("t.json")
    registered("t.pickled", serializer="pickle")
    with pytest.raises(EnqueueError, match="JSON"):
        store.enqueue("t.json", {1, 2})
    handle = store.enqueue("t.pickled", {1, 2})
    assert store.get(handle.id)["serializer"] == "pickle"


def test_enqueue_many_refuses_an_oversized_item_by_its_index(store):
    items = [("small",), ("x" * (1024 * 1024),), ("small",)]
    with pytest.raises(EnqueueError, match=r"item 1: payload is \d+ bytes, over the 1048576-byte limit"):
        store.enqueue_many("t.job", items)
    assert count(store) == 0


def test_enqueue_many_checks_each_payload_against_the_limit_not_the_batch(tmp_path):
    store = jobpool.connect(tmp_path / "small.db")
    store.max_payload = 64
    # '[["' + 55 x + '"],{}]' is 64 bytes, exactly the limit, and the same as enqueue writes.
    assert len(store.enqueue_many("t.job", [("x" * 55,)] * 20)) == 20
    with pytest.raises(EnqueueError, match=r"item 3: payload is 65 bytes, over the 64-byte limit"):
        store.enqueue_many("t.job", [("x" * 50,)] * 3 + [("x" * 56,)] + [("x" * 57,)])
    with pytest.raises(EnqueueError, match=r"payload is 65 bytes"):
        store.enqueue("t.job", "x" * 56)
    with pytest.raises(EnqueueError, match=r"item 1: payload is 66 bytes"):  # the kwargs path
        store.enqueue_many("t.job", [("x",), jobs.Signature("t.job", ("x" * 57,), {})])
    assert count(store) == 20
    store.close()


def test_enqueue_many_keeps_every_argument_as_given(store):
    from jobpool.serialize import decode_payload
    items = [("ünïcode ✓", 1.5, None, [1, {"a": True}]), jobs.Signature("t.job", (2,), {"k": "v"})]
    handles = store.enqueue_many("t.job", items)
    decoded = [decode_payload(store.get(h.id)["payload"], "json") for h in handles]
    assert decoded == [(("ünïcode ✓", 1.5, None, [1, {"a": True}]), {}), ((2,), {"k": "v"})]


def test_importing_jobpool_to_enqueue_loads_neither_the_child_nor_a_core():
    # A producer only enqueues: the child's machinery and the cores stay unloaded.
    import subprocess
    import sys
    code = ("import sys, jobpool; print(sorted(m for m in sys.modules "
            "if m in ('jobpool.child', 'jobpool.core', 'jobpool._core', 'jobpool._core_py', "
            "'multiprocess')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_sqlite_producer_and_pool_load_no_asyncio_and_no_psycopg(tmp_path):
    # What only async callers (R50, R69) or PostgreSQL need stays unloaded in a SQLite
    # producer, its pool's supervisor and the children it forks.
    import subprocess
    import sys
    code = ("import sys, jobpool; from jobpool.supervisor import loop; "
            f"s = jobpool.connect({str(tmp_path / 's.db')!r}); s.enqueue('x.y', 1); "
            "s.finish_waiter(1, 0.05).close(); s.close(); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('asyncio', 'psycopg')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_producer_starts_no_process_to_import_jobpool_open_a_store_and_enqueue(tmp_path):
    # Importing the library and enqueueing run no program (ctypes' find_library ran
    # ldconfig at every import of the fork-safety module: ~10 ms of every process's
    # start, and a fork inside the user's own, maybe threaded, application).
    import subprocess
    import sys
    code = ("import sys; started = []\n"
            "sys.addaudithook(lambda event, args: started.append(event) if event in "
            "('subprocess.Popen', 'os.posix_spawn', 'os.fork', 'os.exec', 'os.system') "
            "else None)\n"
            "import jobpool\n"
            f"s = jobpool.connect({str(tmp_path / 's.db')!r}); s.enqueue('x.y', 1); s.close()\n"
            "print(started)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_handle_asks_the_store_that_made_it_and_one_without_says_so(sqlite_store):
    # A handle never guesses the default store: job 1 of another store is not this one.
    from jobpool import Handle
    from jobpool.errors import JobpoolError
    made = sqlite_store.enqueue("t.by_name", 1, 2)
    assert made.status() == "ready"
    assert Handle(made.id, store=sqlite_store).status() == "ready"
    with pytest.raises(JobpoolError, match=rf"handle of job {made.id} has no store to ask: "
                                           rf"make it with Handle\({made.id}, store="):
        Handle(made.id).status()
    with pytest.raises(JobpoolError, match="no store to ask"):
        Handle(made.id).result(timeout=0)


@pytest.mark.parametrize("call, said", [
    (lambda s: s.enqueue_with("t.x", key="a\udcff"), "key holds text that is not valid Unicode"),
    (lambda s: s.enqueue_with("t.x", key="a\x00b"), "key must not hold a NUL character"),
    (lambda s: s.enqueue_with("t.x", args=("a\udcff",)),
     "payload holds text that is not valid Unicode"),
    (lambda s: s.enqueue_many("t.x", [(1,), ("a\udcff",)]),
     "item 1: payload holds text that is not valid Unicode"),
    (lambda s: s.enqueue_many("t.x", [(1,), ([1], {"k": "\udcff"})]),
     "item 1: payload holds text that is not valid Unicode"),
    (lambda s: s.enqueue_many("t.x", [(1,)], keys=["k\x00"]),
     "keys[0] must not hold a NUL character"),
    (lambda s: s.enqueue_with("t.x", meta={"k": "v\x00"}), "meta holds a NUL character"),
    (lambda s: s.enqueue_with("t.x", meta={"k": "v\udcff"}),
     "meta holds text that is not valid Unicode"),
    (lambda s: s.enqueue_with("t.x", group="g\udcff"), "group holds text that is not valid Unicode"),
], ids=["key-surrogate", "key-nul", "args-surrogate", "many-surrogate", "many-pair-surrogate",
        "keys-nul", "meta-nul", "meta-surrogate", "group-surrogate"])
def test_text_no_store_can_hold_is_refused_alike_at_enqueue(store, call, said):
    """R1, R41: a key or metadata holding a NUL (PostgreSQL refuses it, SQLite kept
    it) and any text holding a lone surrogate (neither store's driver can encode it:
    a raw UnicodeEncodeError) are an EnqueueError naming what is wrong, on both
    stores alike, with nothing written."""
    with pytest.raises(EnqueueError, match=re.escape(said)):
        call(store)
    assert store.stats()["ready"] == 0


def test_a_nul_in_arguments_and_an_escaped_one_in_metadata_are_kept(store):
    # JSON carries a NUL in an argument as an escape, in a payload both stores keep as
    # text; a backslash and "u0000" written in metadata are not a NUL.
    job_id = store.enqueue_with("t.x", args=("a\x00b",), meta={"k": "v\\u0000"}).id
    row = store.get(job_id)
    assert json.loads(row["payload"]) == [["a\x00b"], {}]
    assert row["meta"] == {"k": "v\\u0000"}


@pytest.mark.parametrize("options, words", [
    # R41: both stores keep these as 32-bit integers: PostgreSQL refused a larger one at
    # every heartbeat, so the pool never claimed; SQLite's driver overflowed at start.
    (dict(max_running=2**31), "max_running must be a whole number from 1 to 2147483647"),
    (dict(max_running=10**30), "max_running must be a whole number from 1 to 2147483647"),
    (dict(rate="5/s", burst=2**31), "burst must be a whole number from 1 to 2147483647"),
    # NaN passed every comparison; text raised TypeError; 1.5 crashes became 1.
    (dict(backoff_base=float("nan")), "backoff_base= must be a number of seconds from 0"),
    (dict(backoff_max=float("nan")), "backoff_max= must be a number of seconds from 0"),
    (dict(backoff_base="1"), "backoff_base= must be a number of seconds"),
    (dict(backoff_max=10**400), "backoff_max= must be a number of seconds from 0 to 10 years, "
                                "not a 1329-bit integer"),
    (dict(backoff_base=5, backoff_max=1), "need 0 <= backoff_base <= backoff_max"),
    (dict(max_crashes=1.5), "max_crashes must be a whole number from 1"),
    (dict(max_crashes=True), "max_crashes must be a whole number from 1"),
])
def test_a_declared_option_a_store_or_pool_cannot_keep_is_refused_at_import(options, words):
    with pytest.raises(RegistryError, match=words):
        jobpool.job(name="t.declared", **options)(lambda: None)
    assert "t.declared" not in jobs.registered()


@jobs.job(name="e.other_one")
def other_one(x=0):
    pass


@jobs.job(name="e.named_one")
def named_one(x=0):
    pass


def test_enqueue_many_refuses_a_signature_of_another_job(any_store):
    """R1: ``enqueue_many("a", [b.s(1)])`` ran b's arguments as job a (its name was
    dropped), on both of its write paths and in a batch; a signature of the job named,
    or of none (``Signature("", ...)``), is an item like any other."""
    for items in ([other_one.s(1)], [named_one.s(1), other_one.s(x=2)],
                  [other_one.s(3).with_meta({"k": 1})]):
        with pytest.raises(EnqueueError, match="a signature of e.other_one in an "
                                               "enqueue_many of e.named_one"):
            any_store.enqueue_many("e.named_one", items)
    batch = any_store.batch()
    with pytest.raises(EnqueueError, match="item 0: a signature of e.other_one"):
        batch.add_many("e.named_one", [other_one.s(4)])
    assert any_store.stats()["ready"] == 0
    handles = any_store.enqueue_many("e.named_one", [named_one.s(5), jobpool.Signature("", (6,))])
    assert [any_store.get(h.id)["name"] for h in handles] == ["e.named_one"] * 2
