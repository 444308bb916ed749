"""R54 (issue 28): a job's metadata. Written at enqueue, checked like a payload,
carried by its chain's steps, shown by ``jobs show``, read by the running job as
``jobpool.current_job().meta``, on both stores."""
from __future__ import annotations

import json
import sqlite3

import pytest

import jobpool
from jobpool import bounds
from jobpool.errors import EnqueueError
from jobpool.handles import Signature

APP = """
import json
from pathlib import Path
import jobpool
from jobpool import job

HERE = Path(__file__).parent

def _seen(step):
    me = jobpool.current_job()
    with open(HERE / "seen.jsonl", "a") as fh:
        fh.write(json.dumps([step, me.id, me.meta]) + "\\n")
    # A job's changes are its own copy's (the next call reads the stored value).
    me.meta["changed"] = True

@job(name="meta.first")
def first():
    _seen("first")
    assert "changed" not in jobpool.current_job().meta

@job(name="meta.next")
def next_step():
    _seen("next")

@job(name="meta.parent")
def parent():
    batch = jobpool.current_batch()
    batch.add(jobpool.Signature("meta.child", ("inherits",)))
    batch.add(jobpool.Signature("meta.child", ("own",)), meta={"own": 1})
    batch.add_many("meta.child", [("many",)], meta={"many": True})

@job(name="meta.child")
def child(how):
    _seen(how)
"""


def _seen(app) -> list:
    return [json.loads(line) for line in (app.dir / "seen.jsonl").read_text().splitlines()]


def test_meta_reaches_the_job_its_chain_step_and_jobs_show(make_any_app):
    """R54, R12: the job reads its metadata in a real pool's child; its chain's step
    carries it; a job enqueued without any reads an empty dict; ``jobs show`` shows
    it, as JSON under ``--json``."""
    app = make_any_app(APP)
    store = app.store()
    meta = {"trace": "00-abc-01", "tenant": 7, "tags": ["a", "ü"], "nested": {"ok": None}}
    first = store.enqueue_with("meta.first", meta=meta, then=Signature("meta.next")).id
    plain = store.enqueue_with("meta.first").id
    app.start("--procs", "1")
    seen = _seen(app)
    assert [(s[0], s[2]) for s in seen if s[1] == first] == [("first", meta)]
    assert [(s[0], s[2]) for s in seen if s[1] == plain] == [("first", {})]
    [(step_id, step_meta)] = [(s[1], s[2]) for s in seen if s[0] == "next"]
    assert step_id not in (first, plain) and step_meta == meta
    assert store.get(step_id)["meta"] == meta and store.get(first)["status"] == "done"
    assert store.get(plain)["meta"] is None

    shown = app.cli("jobs", "show", str(first), "--db", str(app.db), check=True).stdout
    # PostgreSQL's jsonb keeps an object's keys in an order of its own.
    [line] = [line for line in shown.splitlines() if line.split()[:1] == ["meta"]]
    assert line.split(None, 1)[1].startswith("{") and '"trace": "00-abc-01"' in shown
    as_json = json.loads(app.cli("jobs", "show", str(first), "--db", str(app.db), "--json",
                                 check=True).stdout)
    assert as_json["meta"] == meta
    store.close()


def test_a_batch_members_adds_carry_its_metadata_unless_they_name_their_own(make_any_app):
    """R54, R34: a running member's ``current_batch().add`` writes the member's
    metadata with each job it adds; ``meta=`` on the add replaces it."""
    app = make_any_app(APP)
    store = app.store()
    with store.batch() as batch:
        store.enqueue_with("meta.parent", batch=batch.id, meta={"trace": "t-1"})
    app.start("--procs", "1")
    assert sorted((s[0], json.dumps(s[2], sort_keys=True)) for s in _seen(app)) == [
        ("inherits", '{"trace": "t-1"}'), ("many", '{"many": true}'), ("own", '{"own": 1}')]
    store.close()


GIVEN_APP = """
import json
from pathlib import Path
import jobpool
from jobpool import job, running, Middleware, add_middleware

HERE = Path(__file__).parent

def note(*items):
    with open(HERE / "given.jsonl", "a") as fh:
        fh.write(json.dumps(items) + "\\n")

class SeesMeta(Middleware):
    def before(self, job):
        note("before", job.job_id, job.meta)
        job.meta["changed"] = True          # its own copy

add_middleware(SeesMeta())

class NoPipe:
    def __getattr__(self, name):
        raise AssertionError(f"current_job() used the child's pipe ({name})")

@job(name="meta.given")
def given():
    attempt = running.current
    conn, attempt.conn = attempt.conn, NoPipe()
    try:
        me = jobpool.current_job()
    finally:
        attempt.conn = conn
    note("job", me.id, me.batch, me.meta)
"""


def test_the_job_and_its_middleware_get_its_batch_and_metadata_with_it(make_any_app):
    """R58 on both stores: the child is given the job's batch id and metadata with the
    job: ``current_job()`` reads them without a word on its pipe, and middleware gets
    the metadata as ``AttemptInfo.meta`` (a dict of its own)."""
    app = make_any_app(GIVEN_APP)
    store = app.store()
    with store.batch() as batch:
        member = store.enqueue_with("meta.given", batch=batch.id, meta={"tenant": "acme"}).id
    plain = store.enqueue("meta.given").id
    app.start("--procs", "1")
    notes = [json.loads(line) for line in (app.dir / "given.jsonl").read_text().splitlines()]
    assert sorted(map(tuple, notes), key=repr) == sorted([
        ("before", member, {"tenant": "acme"}), ("job", member, batch.id, {"tenant": "acme"}),
        ("before", plain, {}), ("job", plain, None, {})], key=repr)
    store.close()


@pytest.mark.parametrize("meta, words", [
    (["not", "a", "dict"], "meta must be a dict (a JSON object), not list"),
    ({1: "x"}, "meta: a key must be a string, not 1"),
    ({"x": float("nan")}, "meta is not JSON"),
    ({"x": object()}, "meta is not JSON"),
    ({"x": "\ud800"}, "not valid Unicode"),
    ({"x": "y" * bounds.MAX_META_BYTES}, f"over the {bounds.MAX_META_BYTES}-byte limit"),
])
def test_metadata_json_cannot_carry_is_refused_naming_it_and_nothing_is_written(
        any_store, meta, words):
    """R1, R41, R54: bad metadata is an ``EnqueueError`` naming it; no row is written."""
    with pytest.raises(EnqueueError, match="meta") as raised:
        any_store.enqueue_with("meta.any", meta=meta)
    assert words in str(raised.value)
    assert any_store.list_jobs() == []


def test_metadata_at_its_bound_is_taken(any_store):
    """R54: the bound counts the JSON text's UTF-8 bytes: exactly at it is taken."""
    meta = {"x": ""}
    meta["x"] = "y" * (bounds.MAX_META_BYTES - len(json.dumps(meta, separators=(",", ":"))))
    job_id = any_store.enqueue_with("meta.any", meta=meta).id
    assert any_store.get(job_id)["meta"] == meta


def test_metadata_stays_with_a_dead_job_and_comes_back_with_its_retry(any_store):
    """R54, R31, R32: a cancelled job keeps its metadata (PostgreSQL moves it to
    ``finished_jobs``), and a dead retry brings it back with the row."""
    job_id = any_store.enqueue_with("meta.any", meta={"who": "ops"}).id
    any_store.cancel(job_id)
    assert any_store.get(job_id)["status"] == "dead"
    assert any_store.get(job_id)["meta"] == {"who": "ops"}
    any_store.dead.retry([job_id])
    job = any_store.get(job_id)
    assert (job["status"], job["meta"]) == ("ready", {"who": "ops"})


def test_a_row_whose_meta_is_not_a_json_object_is_flagged_never_a_crash(tmp_path):
    """R44, R54: metadata written by hand that is not a JSON object reads as
    malformed (``get``, ``jobs show``, doctor) and crashes nothing."""
    path = tmp_path / "s.db"
    store = jobpool.connect(path)
    bad = store.enqueue_with("meta.any", meta={"k": 1}).id
    listed = store.enqueue_with("meta.any", meta={"k": 2}).id
    store.close()
    with sqlite3.connect(path) as db:
        db.execute("UPDATE jobs SET meta = '[1, 2]' WHERE id = ?", (bad,))
        db.execute("UPDATE jobs SET meta = 'not json' WHERE id = ?", (listed,))
    store = jobpool.connect(path, readonly=True)
    try:
        job = store.get(bad)
        assert job["meta"] is None
        assert job["malformed"] == {"meta": "a JSON list, not a JSON object"}
        assert store.get(listed)["malformed"]["meta"].startswith("not JSON")
        # A metadata filter reads past both rows without failing (SQLite's json_each).
        assert store.list_jobs(meta={"k": 1}, newest_first=True) == []
    finally:
        store.close()
    from jobpool.store.sqlite import doctor
    report = doctor.check(str(path))
    assert report.malformed_count == 2, report.malformed
    assert all("column meta" in line for line in report.malformed), report.malformed



def test_jobs_list_finds_jobs_by_metadata_on_both_stores(make_any_app):
    """R54, R47: ``jobs list --meta k=v`` lists the jobs whose metadata holds every
    pair (a value as JSON when it reads as a scalar: ``7`` is a number, ``'"7"'``
    text); on SQLite it is a search within a window of ids and says so, on
    PostgreSQL an index serves it and it lists from any depth."""
    app = make_any_app(APP)
    store = app.store()
    ids = [store.enqueue_with("meta.any", meta=meta).id for meta in (
        {"tenant": 7, "tier": "gold"}, {"tenant": "7"}, {"tenant": 7.0, "tier": "gold"},
        {"tenant": 7, "ok": True}, {"x": None}, None)]

    def listed(*filters: str) -> list[int]:
        out = app.cli("jobs", "list", "--db", str(app.db), "--json",
                      *(a for f in filters for a in ("--meta", f)), check=True).stdout
        return sorted(job["id"] for job in json.loads(out))

    assert listed("tenant=7") == [ids[0], ids[2], ids[3]]
    assert listed('tenant="7"') == [ids[1]]
    assert listed("tenant=7", "tier=gold") == [ids[0], ids[2]]
    assert listed("ok=true") == [ids[3]] and listed("x=null") == [ids[4]]
    assert listed("tier=silver") == []
    assert store.count_jobs(meta={"tier": "gold"}, at_most=10, newest_first=True) == 2
    # Through the library, as the CLI calls it: SQLite searches a window of ids
    # below ``after`` (here one id); PostgreSQL's index reads below it to the end.
    window = {} if store.meta_indexed else {"scan": 1}
    assert [j["id"] for j in store.list_jobs(meta={"tenant": 7}, newest_first=True,
                                              after=ids[3], **window)] == (
        [ids[2], ids[0]] if store.meta_indexed else [ids[2]])
    text = app.cli("jobs", "list", "--db", str(app.db), "--meta", "tier=gold", check=True).stdout
    assert ("searched jobs" in text) == (not store.meta_indexed)
    bad = app.cli("jobs", "list", "--db", str(app.db), "--meta", "tier")
    assert bad.returncode != 0 and "KEY=VALUE" in bad.stderr and "Traceback" not in bad.stderr
    with pytest.raises(ValueError, match="a value is a string"):
        store.list_jobs(meta={"tier": ["gold"]})
    store.close()
