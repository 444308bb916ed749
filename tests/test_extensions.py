"""Extension points in the child: on_child_start hooks and middleware around each
attempt; what they raise is the attempt's error, never the child's death."""
from __future__ import annotations

import json

import pytest

import jobpool
from jobpool import extensions

APP = """
import os
from pathlib import Path
import jobpool
from jobpool import job, Middleware, add_middleware, on_child_start, Fatal

HERE = Path(__file__).parent
CLIENT = {"pid": None}

def note(*items):
    with open(HERE / "notes.txt", "a") as fh:
        fh.write(" ".join(str(i) for i in items) + "\\n")

@on_child_start
def reopen_client():
    CLIENT["pid"] = os.getpid()  # what a database pool would reopen after fork
    note("child_start", os.getpid())

class Recorder(Middleware):
    def before(self, job):
        note("before", job.name, job.attempt, *job.args)
        if job.args and job.args[0] == "refuse":
            raise RuntimeError("before refused")

    def after(self, job, result):
        note("after", job.name, result.outcome, type(result.exception).__name__)
        if job.args and job.args[0] == "spoil":
            raise ValueError("after spoiled it")

add_middleware(Recorder())

@job(name="t.uses_client", max_attempts=1)
def uses_client(tag):
    assert CLIENT["pid"] == os.getpid(), "the hook ran in this child"
    note("body", tag)
    if tag == "fatal":
        raise Fatal("no")
"""


def _notes(app) -> list[list[str]]:
    return [line.split() for line in (app.dir / "notes.txt").read_text().splitlines()]


def test_hooks_run_in_each_child_and_middleware_wraps_every_attempt(make_app):
    app = make_app(APP)
    store = app.store()
    ok = store.enqueue("t.uses_client", "plain").id
    fatal = store.enqueue("t.uses_client", "fatal").id
    app.start("--procs", "1")
    notes = _notes(app)
    assert notes[0][0] == "child_start"
    assert [n for n in notes if n[0] != "child_start"] == [
        ["before", "t.uses_client", "1", "plain"], ["body", "plain"],
        ["after", "t.uses_client", "done", "NoneType"],
        ["before", "t.uses_client", "1", "fatal"], ["body", "fatal"],
        ["after", "t.uses_client", "fatal", "Fatal"]]
    assert app.rows("SELECT id, status FROM jobs ORDER BY id") == [
        {"id": ok, "status": "done"}, {"id": fatal, "status": "dead"}]


def test_a_failing_middleware_is_the_attempts_error_not_the_childs_death(make_app):
    app = make_app(APP)
    store = app.store()
    refused = store.enqueue("t.uses_client", "refuse").id
    spoiled = store.enqueue("t.uses_client", "spoil").id
    result = app.start("--procs", "1", "--log-format", "json")
    rows = {r["id"]: r for r in app.rows("SELECT id, status, last_error FROM jobs")}
    assert rows[refused]["status"] == "dead"
    assert rows[refused]["last_error"].startswith("middleware Recorder.before failed: "
                                                  "RuntimeError: before refused")
    assert rows[spoiled]["last_error"].startswith("middleware Recorder.after failed: "
                                                  "ValueError: after spoiled it")
    assert ["body", "refuse"] not in _notes(app)  # before failed: the body never ran
    events = [json.loads(line) for line in result.stderr.splitlines()]
    assert not [e for e in events if e["event"] == "child_died"]


def test_a_failing_child_start_hook_fails_attempts_and_the_child_is_replaced(make_app):
    app = make_app(APP.replace('    note("child_start", os.getpid())',
                               '    note("child_start", os.getpid())\n'
                               '    raise ConnectionError("database is down")'))
    job_id = app.store().enqueue("t.uses_client", "x").id
    app.start("--procs", "1")
    [row] = app.rows("SELECT status, last_error FROM jobs WHERE id = ?", (job_id,))
    assert row["status"] == "dead"
    assert row["last_error"].startswith("on_child_start hook reopen_client failed: "
                                        "ConnectionError: database is down")
    starts = [n for n in _notes(app) if n[0] == "child_start"]
    assert len(starts) >= 2  # the failing child retired; a fresh one tried the hook again


def test_middleware_must_have_both_hooks():
    with pytest.raises(TypeError, match="before"):
        jobpool.add_middleware(object())
    mw = jobpool.Middleware()
    assert jobpool.add_middleware(mw) is mw
    extensions.remove_middleware(mw)
