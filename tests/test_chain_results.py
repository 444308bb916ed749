"""R59 (issue 28, item 5): a chain step given its predecessor's result. The store
writes the result into the step's arguments in the transaction that ends the
predecessor, on both stores, through real pools; what could never work is refused
at the enqueue, naming it, with nothing written."""
from __future__ import annotations

import json

import pytest

import jobpool
from jobpool import job
from jobpool.errors import EnqueueError
from jobpool.handles import Signature
from jobpool.store import row_codec

APP = """
import json
from pathlib import Path
from jobpool import job

HERE = Path(__file__).parent

def seen(*items):
    with open(HERE / "seen.jsonl", "a") as fh:
        fh.write(json.dumps(items) + "\\n")

@job(name="cr.count", store_result=True)
def count(path):
    return {"path": path, "rows": 3, "text": "ü <b>"}

@job(name="cr.add", store_result=True)
def add(extra, counted):
    seen("add", extra, counted)
    return counted["rows"] + extra

@job(name="cr.report")
def report(previous=None, note="plain"):
    seen("report", previous, note)

@job(name="cr.quiet")
def quiet():
    return "never kept"

@job(name="cr.pickled", store_result=True, serializer="pickle")
def pickled():
    return {1, 2}

@job(name="cr.nul", store_result=True)
def nul():
    return {"text": "a\\x00b", "a\\x00": ["\\x00"]}
"""


def _seen(app) -> list:
    path = app.dir / "seen.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _by_name(store, name: str) -> list[dict]:
    return [j for j in store.list_jobs(limit=100) if j["name"] == name]


def test_each_step_is_called_with_what_the_one_before_returned(make_any_app):
    """R59, R12: ``with_previous`` names the keyword; a step that asks for nothing
    gets its own arguments only; the values are the stored JSON, unicode and markup
    kept as data."""
    app = make_any_app(APP)
    store = app.store()
    first = store.enqueue_with("cr.count", args=["a.csv"], then=[
        Signature("cr.add", (10,)).with_previous("counted"),
        Signature("cr.report").with_previous(),
        Signature("cr.report", kwargs={"note": "last"})]).id
    app.start("--procs", "1")
    counted = {"path": "a.csv", "rows": 3, "text": "ü <b>"}
    assert _seen(app) == [["add", 10, counted], ["report", 13, "plain"],
                          ["report", None, "last"]]
    [add_row] = _by_name(store, "cr.add")
    assert add_row["status"] == "done" and store.get(first)["last_error"] is None
    assert jobpool.Handle(add_row["id"], store=store).result(timeout=5) == 13
    store.close()


def test_a_predecessor_that_keeps_no_result_passes_none(make_any_app):
    """R59: a predecessor this producer does not register (so nothing refused the
    chain) that keeps no result: the step still runs, given None."""
    app = make_any_app(APP)
    store = app.store()
    store.enqueue_with("cr.quiet", then=Signature("cr.report").with_previous())
    app.start("--procs", "1")
    assert _seen(app) == [["report", None, "plain"]]
    store.close()


def test_a_result_holding_nul_is_passed_on_by_both_stores(make_any_app):
    """R59, R41: a result whose JSON holds a NUL character (escaped, as JSON writes
    it) reaches the step whole on both stores, beside the step's own keyword
    arguments. PostgreSQL's jsonb cannot hold one: the arguments are written around
    the result's text there, never through jsonb (revision 15)."""
    app = make_any_app(APP)
    store = app.store()
    first = store.enqueue_with("cr.nul", then=[
        Signature("cr.report", kwargs={"note": "with\x00nul"}).with_previous(),
        Signature("cr.add", (1,)).with_previous("counted")]).id
    app.start("--procs", "1")
    given = {"text": "a\x00b", "a\x00": ["\x00"]}
    assert _seen(app)[0] == ["report", given, "with\x00nul"]
    assert store.get(first)["last_error"] is None
    [step] = _by_name(store, "cr.report")
    assert step["status"] == "done"
    store.close()


def test_a_pickled_result_stops_the_chain_saying_why(make_any_app):
    """R59, R44: only a JSON result is passed on. A pickled one stops the chain: the
    predecessor stays done, says why in its error, and no step is enqueued; the pool
    goes on with the next job."""
    app = make_any_app(APP)
    store = app.store()
    first = store.enqueue_with("cr.pickled", then=Signature("cr.report").with_previous()).id
    after = store.enqueue_with("cr.report", kwargs={"note": "after"}).id
    app.start("--procs", "1")
    row = store.get(first)
    assert row["status"] == "done"
    assert row["last_error"].startswith(row_codec.CHAIN_STOPPED)
    assert _seen(app) == [["report", None, "after"]]
    assert store.get(after)["status"] == "done"
    assert sorted(j["id"] for j in store.list_jobs(limit=100)) == sorted([first, after])
    store.close()


# -- refused at the enqueue, nothing written ------------------------------------------------

@job(name="cr.kept", store_result=True)
def kept():
    return 1


@job(name="cr.unkept")
def unkept():
    return 1


@job(name="cr.pickle_kept", store_result=True, serializer="pickle")
def pickle_kept():
    return 1


@job(name="cr.takes")
def takes(previous=None, other=None):
    pass


@job(name="cr.takes_nothing")
def takes_nothing():
    pass


def _batch_callback(store):
    store.batch(on_success=takes.s().with_previous())


@pytest.mark.parametrize("call, words", [
    (lambda s: s.enqueue_with("cr.unkept", then=takes.s().with_previous()),
     "asks for the result of cr.unkept, which keeps none"),
    (lambda s: s.enqueue_with("cr.pickle_kept", then=takes.s().with_previous()),
     "stores it with pickle"),
    (lambda s: s.enqueue_with("cr.kept", then=[takes.s(), takes.s().with_previous()]),
     "then[1]: cr.takes asks for the result of cr.takes, which keeps none"),
    (lambda s: s.enqueue_with("cr.kept", then=takes.s().with_previous("other-name")),
     "with_previous takes a keyword argument's name"),
    (lambda s: s.enqueue_with("cr.kept", then=takes.s().with_previous("class")),
     "with_previous takes a keyword argument's name"),
    (lambda s: s.enqueue_with("cr.kept", then=takes.s(other=1).with_previous("other")),
     "is given other= by its predecessor; it cannot have its own"),
    (lambda s: s.enqueue_with("cr.kept", then=takes_nothing.s().with_previous()),
     "then[0]: job cr.takes_nothing: the arguments do not fit takes_nothing(): got an "
     "unexpected keyword argument 'previous'"),
    (lambda s: s.enqueue_many("cr.takes", [takes.s().with_previous()]),
     "item 0: cr.takes asks for its predecessor's result"),
    (_batch_callback, "on_success: cr.takes asks for its predecessor's result"),
    (lambda s: s.batch().add(takes.s().with_previous()),
     "Batch.add: cr.takes asks for its predecessor's result"),
])
def test_a_step_that_could_never_get_a_result_is_refused_naming_it(any_store, call, words):
    with pytest.raises(EnqueueError) as caught:
        call(any_store)
    assert words in str(caught.value)
    assert any_store.list_jobs(limit=10) == []


def test_a_stored_step_whose_keyword_is_not_a_name_is_flagged():
    """R44, R59: the store writes a JSON path from the keyword, so a chain row whose
    step names anything but an identifier (written by hand) is malformed, named."""
    step = {"name": "x", "queue": "default", "payload": "[[],{}]", "priority": 0}
    assert row_codec.chain(json.dumps([{**step, "previous": "ok_name"}])) is None
    for bad in (5, "a.b", "a'b", "", "for"):
        why = row_codec.chain(json.dumps([{**step, "previous": bad}]))
        assert why is not None and why.startswith("step 0: previous:")


def test_a_pickled_result_of_a_json_row_reads_back(make_any_app):
    """R39's sibling: a job registered with pickle whose row was written as JSON (an
    enqueue by name, a chain step) keeps a pickled result; ``result`` with
    ``allow_pickle`` reads it back rather than parse it as JSON."""
    app = make_any_app(APP)
    store = app.store()
    handle = store.enqueue_with("cr.pickled")
    app.start("--procs", "1")
    assert handle.result(timeout=5, allow_pickle=True) == {1, 2}
    store.close()


_drained: list = []


@job(name="cr.total", store_result=True)
def total(*numbers):
    return sum(numbers)


@job(name="cr.double", store_result=True)
def double(previous):
    _drained.append(previous)
    return previous * 2


def test_a_drain_in_a_test_passes_results_down_the_chain(any_store):
    """R59 under ``jobpool.testing.drain``: the same store statements as a pool."""
    from jobpool.testing import drain
    _drained.clear()
    any_store.enqueue_with("cr.total", args=[1, 2, 3],
                           then=[double.s().with_previous(), double.s().with_previous()])
    assert drain(any_store).done == 3
    assert _drained == [6, 12]


# -- R60: a batch's callbacks read its members' results ----------------------------------

BATCH_APP = """
import json
from pathlib import Path
import jobpool
from jobpool import job, Fatal

HERE = Path(__file__).parent

@job(name="br.square", store_result=True)
def square(n):
    return {"n": n, "square": n * n}

@job(name="br.silent")
def silent():
    return "not kept"

@job(name="br.fails", store_result=True)
def fails():
    raise Fatal("no result")

@job(name="br.pickled", store_result=True, serializer="pickle")
def pickled():
    return frozenset({"p"})

@job(name="br.gather")
def gather(page, batch):
    got = [[i, sorted(v) if isinstance(v, frozenset) else v]
           for i, v in jobpool.batch_results(batch, page=page)]
    (HERE / "gathered.json").write_text(json.dumps(got))
"""


def test_a_callback_reads_its_members_results_page_by_page(make_any_app):
    """R60: the callback iterates ``(id, result)`` of the members that stored one, in
    id order, through its pool a page at a time; members that kept nothing or went
    dead are not there; a pickled result is decoded by the job that registers it.
    The producer reads the same through ``Batch.results``."""
    app = make_any_app(BATCH_APP)
    store = app.store()
    with store.batch(on_complete=Signature("br.gather", (2,))) as batch:
        squares = [batch.add(Signature("br.square", (n,))).id for n in range(5)]
        batch.add(Signature("br.silent"))
        batch.add(Signature("br.fails"))
        pickled = batch.add(Signature("br.pickled")).id
    app.start("--procs", "2")
    gathered = json.loads((app.dir / "gathered.json").read_text())
    expected = [[i, {"n": n, "square": n * n}] for n, i in enumerate(squares)]
    assert gathered == expected + [[pickled, ["p"]]]
    from_producer = list(batch.results(page=3, allow_pickle=True))
    assert from_producer == [tuple(x) for x in expected] + [(pickled, frozenset({"p"}))]
    with pytest.raises(jobpool.UnsafeResultError):
        list(batch.results())  # this process registers no pickle job
    store.close()


def test_batch_results_refuses_what_it_cannot_read(any_store):
    """R60, R41: a page is bounded; outside a job there is no pool to ask."""
    batch = any_store.batch()
    for page in (0, 1001, "10", True):
        with pytest.raises(ValueError, match="from 1 to 1000"):
            list(batch.results(page=page))
    with pytest.raises(RuntimeError, match="outside a job"):
        jobpool.batch_results({"id": batch.id})
    assert list(batch.results()) == []


_read_in_drain: list = []


@job(name="br.value", store_result=True)
def value(n):
    return n


@job(name="br.collect")
def collect(batch):
    _read_in_drain.extend(jobpool.batch_results(batch, page=1))


def test_batch_results_in_a_drain(any_store):
    """R60 under ``jobpool.testing.drain``: the same request, answered in-process."""
    from jobpool.testing import drain
    _read_in_drain.clear()
    with any_store.batch(on_success=collect.s()) as batch:
        ids = [batch.add(value.s(n)).id for n in (5, 6, 7)]
    drain(any_store)
    assert _read_in_drain == list(zip(ids, (5, 6, 7)))


# -- R60: a page of results is read through an index, never a walk -------------------------

def _plan_steps(plan: dict) -> list[tuple[str, str | None]]:
    """Every node of a PostgreSQL JSON plan as (node type, index name)."""
    found = [(plan["Node Type"], plan.get("Index Name"))]
    for child in plan.get("Plans", []):
        found += _plan_steps(child)
    return found


def test_a_page_of_results_reads_the_members_index_on_sqlite(tmp_path):
    """R60: SQLite reads a page from the members' index from its place (the index's
    entries end in the id), with no sort."""
    import sqlite3

    from jobpool.store.sqlite import statements as sql
    from tests.test_web_plans import fill_sqlite
    path = str(tmp_path / "big.db")
    fill_sqlite(path, 20_000)
    conn = sqlite3.connect(path)
    for statement in (sql.BATCH_RESULT_SIZES, sql.BATCH_RESULTS):
        plan = " | ".join(row[3] for row in conn.execute(
            "EXPLAIN QUERY PLAN " + statement,
            {"id": 3, "after": 3050, "limit": 100, "through": 3090}))
        assert "USING INDEX jobs_batch (batch_id=? AND rowid>? AND rowid<?)" in plan \
            or "USING INDEX jobs_batch (batch_id=? AND rowid>?)" in plan, plan
        assert "TEMP B-TREE" not in plan and "SCAN" not in plan, plan
    conn.close()


def test_a_page_of_results_reads_its_own_index_on_postgres(pg_url):
    """R60: PostgreSQL reads a page from ``finished_jobs_batch_ids`` in id order from
    its place: no sort of the batch's members, no walk of the table."""
    import psycopg

    from jobpool.store.postgres import statements as pg_sql
    from jobpool.store.postgres.connection import parse_url
    from tests.test_web_plans import fill_pg
    fill_pg(pg_url, 20_000)
    target = parse_url(pg_url)
    with psycopg.connect(target.conninfo, autocommit=True) as conn:
        conn.execute(f"SET search_path TO {target.schema}")
        conn.execute("UPDATE finished_jobs SET result = '1' WHERE status = 'done'")
        conn.execute("ANALYZE finished_jobs")
        plans = [conn.execute("EXPLAIN (FORMAT JSON) " + statement,
                              {"id": 3, "after": 3050, "limit": 100, "through": 3090}
                              ).fetchone()[0]
                 for statement in (pg_sql.BATCH_RESULT_SIZES, pg_sql.BATCH_RESULTS)]
    for plan in plans:
        steps = _plan_steps(plan[0]["Plan"])
        assert ("Index Scan", "finished_jobs_batch_ids") in steps, steps
        assert not any(node in ("Sort", "Seq Scan", "Bitmap Heap Scan")
                       for node, _ in steps), steps


@job(name="cr.deep", store_result=True)
def deep():
    # Run by a drain in the test's own process: the test puts the limit back.
    import sys
    sys.setrecursionlimit(100_000)
    value: list = []
    for _ in range(9_000):  # within jobpool's own bound (R44), past SQLite's JSON's
        value = [value]
    return value


def test_a_result_the_store_cannot_read_stops_its_chain_not_the_turn(any_store):
    """R59, R44: a JSON result nested past what SQLite's JSON reads stops the chain
    with a reason, and the turn settles the job and the next one. PostgreSQL's jsonb
    reads deeper (past 12 000 levels at its default stack depth) than jobpool lets a
    value be written (10 000, R44): there the chain goes on."""
    import sys

    from jobpool.testing import drain
    first = any_store.enqueue_with("cr.deep", then=takes.s().with_previous()).id
    other = any_store.enqueue_with("cr.kept").id
    limit = sys.getrecursionlimit()
    try:
        drain(any_store)
    finally:
        # The job raised it to encode its result; left raised, a later test in this
        # worker that encodes or decodes JSON deeper than the default overflowed the C
        # stack and crashed the worker instead of raising RecursionError.
        sys.setrecursionlimit(limit)
    row = any_store.get(first)
    assert any_store.get(other)["status"] == "done"
    steps = [j for j in any_store.list_jobs(limit=10) if j["name"] == "cr.takes"]
    if any_store.path.startswith("postgres"):
        assert (row["status"], row["last_error"]) == ("done", None)
        assert [j["status"] for j in steps] == ["done"]
        return
    assert row["status"] == "done" and row["last_error"].startswith(row_codec.CHAIN_STOPPED)
    assert steps == []


@job(name="cr.returns", store_result=True)
def returns(text):
    return text


@job(name="cr.echo", store_result=True)
def echo(previous=None):
    return previous


@pytest.mark.parametrize("text", [
    "a\\u0000b",        # a backslash and "u0000": no NUL, kept as written
    "\\\x00",           # a backslash, then a NUL
    "\uffff alone",       # the noncharacter PostgreSQL's rewrite uses, with no NUL
    "\x00\x00",          # two NULs side by side
])
def test_a_result_reaches_the_step_exactly_as_it_was_returned(any_store, text):
    """R59: the step is given the very text its predecessor returned, a NUL, a
    backslash written before ``u0000`` and U+FFFF included, on both stores."""
    from jobpool.testing import drain
    first = any_store.enqueue_with("cr.returns", args=[text], then=echo.s().with_previous()).id
    drain(any_store)
    assert any_store.get(first)["last_error"] is None
    [step] = [j for j in any_store.list_jobs(limit=10) if j["name"] == "cr.echo"]
    assert jobpool.Handle(step["id"], store=any_store).result(timeout=5) == text


def test_a_result_holding_a_nul_and_uffff_stops_the_chain_on_postgres_only(any_store,
                                                                          store_url):
    """R59: PostgreSQL passes a NUL on by writing it through jsonb as U+FFFF, so a
    result that holds both cannot be written there: the chain stops saying why, as
    for any step that cannot be enqueued (R44). SQLite passes it on."""
    from jobpool.testing import drain
    text = "\x00 and \uffff"
    first = any_store.enqueue_with("cr.returns", args=[text], then=echo.s().with_previous()).id
    drain(any_store)
    row = any_store.get(first)
    steps = [j for j in any_store.list_jobs(limit=10) if j["name"] == "cr.echo"]
    if not store_url.startswith("postgresql"):
        assert row["last_error"] is None
        assert jobpool.Handle(steps[0]["id"], store=any_store).result(timeout=5) == text
    else:
        assert row["status"] == "done" and row["last_error"].startswith(row_codec.CHAIN_STOPPED)
        assert steps == []


@job(name="br.big", store_result=True)
def big(n):
    return str(n) * (1024 * 1024 - 16)


def test_a_page_of_results_stops_at_its_bytes(any_store):
    """R60, R41: nine results of about 1 MB: the first page holds the eight that fit
    in 8 MB, the iteration reads the ninth on the next page."""
    from jobpool.testing import drain
    with any_store.batch() as batch:
        ids = [batch.add(big.s(n)).id for n in range(9)]
    drain(any_store)
    first = any_store.batches.results(batch.id, limit=100)
    assert [m.id for m in first] == ids[:8]
    assert [i for i, _ in batch.results()] == ids


def test_a_forged_request_is_refused_to_the_job_never_the_pool(any_store):
    """R60: fields a job's API would never send (a batch id past 64 bits) come back
    as a refusal; the pool's answer path raises nothing."""
    from jobpool import protocol, requests
    answer = requests.answer(any_store, "pool-x", (protocol.BATCH_RESULTS, 1, 1, 1, 2**70, 0, 10))
    assert answer[4] == protocol.REFUSED and "batch must be an integer" in answer[5]
    answer = requests.answer(any_store, "pool-x", (protocol.BATCH_RESULTS, 1, 1, 1, "x", 0, 10))
    assert answer[4] == protocol.REFUSED


def test_a_pickle_rows_result_reads_back_whatever_its_first_byte():
    """R39: a pickle row's result is a pickle even when its protocol (0 or 1) does not
    start with the byte every later protocol starts with; still only for a caller
    allowed to unpickle."""
    import dill

    from jobpool.handles import stored_result
    old_protocol = dill.dumps({"n": 1}, protocol=0)
    assert old_protocol[:1] != b"\x80"
    assert stored_result(7, "cr.unregistered", old_protocol, True, "pickle") == {"n": 1}
    with pytest.raises(jobpool.UnsafeResultError):
        stored_result(7, "cr.unregistered", old_protocol, False, "pickle")


@pytest.mark.parametrize("conforming", ["on", "off"])
def test_postgres_passes_a_nul_on_whatever_the_sessions_string_setting(pg_url, conforming):
    """R59 (revision 15): the function that writes a step's arguments reads its own
    backslashes the same in a session with ``standard_conforming_strings`` off (a
    server or role configured for old applications)."""
    import psycopg
    jobpool.connect(pg_url).close()
    schema = pg_url.rsplit("schema=", 1)[1]
    with psycopg.connect(pg_url.split("?")[0], autocommit=True) as conn:
        conn.execute(f"SET search_path = {schema}")
        conn.execute(f"SET standard_conforming_strings = {conforming}")
        given = "\\ \x00 \\u0000"  # a backslash, a NUL, a backslash before "u0000"
        ((written,),) = conn.execute(
            "SELECT jobpool_with_previous(%s, %s, convert_to(%s, 'UTF8'))",
            ('[[1], {"x": "\\u0000"}]', "previous", json.dumps(given))).fetchall()
    assert json.loads(written) == [[1], {"x": "\x00", "previous": given}]
