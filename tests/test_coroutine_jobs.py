"""Coroutine jobs (R20's amendment): an ``async def`` job runs to completion in its
child's own event loop, under every limit and with every outcome a plain job has,
and a job that hands back an awaitable nobody awaited is an error naming it, never
``done``. Real pools through the CLI, and ``jobpool.testing.drain`` in-process.
"""
from __future__ import annotations

import asyncio
import json
import os
import signal

import pytest

import jobpool
from jobpool.testing import Drained, drain

APP = """
import asyncio, json, os
from pathlib import Path
import jobpool
from jobpool import job, Defer, Fatal, Reschedule, Retry

HERE = Path(__file__).parent

def record(*items):
    with open(HERE / "seen.txt", "a") as fh:
        fh.write(json.dumps(items) + "\\n")

@job(name="t.async_write")
async def async_write(tag):
    await asyncio.sleep(0.01)
    record("wrote", tag, os.getpid())

@job(name="t.async_value", store_result=True)
async def async_value(x):
    await asyncio.sleep(0)
    return {"double": x * 2}

@job(name="t.async_retried", max_attempts=3, backoff_base=0)
async def async_retried():
    state = jobpool.resume_state()
    if state is None:
        jobpool.save_state({"step": 1}, force=True)
        await asyncio.sleep(0)
        raise RuntimeError("first try fails")
    record("resumed", state)
    return "second try"

@job(name="t.async_progress")
async def async_progress():
    jobpool.progress(10, "reading")
    await asyncio.sleep(0.15)
    jobpool.progress(60, "writing")
    await asyncio.sleep(0.15)
    raise Fatal("broke while writing")

@job(name="t.async_fatal")
async def async_fatal():
    await asyncio.sleep(0)
    raise Fatal("this input can never work")

@job(name="t.async_retry_after", max_attempts=2)
async def async_retry_after():
    await asyncio.sleep(0)
    raise Retry("rate limited", after=0.1)

@job(name="t.async_defer_once")
async def async_defer_once():
    marker = HERE / "deferred.txt"
    if not marker.exists():
        marker.write_text("once")
        raise Defer(0.1, "not yet")
    record("ran after deferring")

@job(name="t.async_reschedule")
async def async_reschedule():
    await asyncio.sleep(0)
    raise Reschedule(3600, "next occurrence")

async def helper():
    record("helper body ran")

@job(name="t.returns_coroutine")
def returns_coroutine():
    return helper()

class Pending:
    def __await__(self):
        yield

@job(name="t.returns_awaitable")
def returns_awaitable():
    return Pending()

@job(name="t.async_returns_coroutine")
async def async_returns_coroutine():
    return helper()
"""

LIMITS_APP = """
import asyncio, time
from pathlib import Path
from jobpool import job, SoftTimeout

HERE = Path(__file__).parent

@job(name="t.async_sleep", timeout=0.5, max_attempts=2, backoff_base=0)
async def async_sleep():
    (HERE / "started.txt").write_text("yes")
    await asyncio.sleep(10**6)

@job(name="t.async_blocks_its_loop", timeout=0.5, max_attempts=1)
async def async_blocks_its_loop():
    time.sleep(10**6)

@job(name="t.async_hog", memory_limit=200, max_attempts=1)
async def async_hog():
    blocks = []
    while True:
        blocks.append(bytearray(20 * 2**20))
        await asyncio.sleep(0.01)

@job(name="t.async_polite", timeout=30, soft_timeout=0.3, max_attempts=1)
async def async_polite():
    try:
        await asyncio.sleep(60)
    except asyncio.CancelledError:
        (HERE / "cleaned.txt").write_text("cleaned up")
        raise
"""

MIDDLEWARE_APP = """
import asyncio, json
from pathlib import Path
from jobpool import job, Middleware, add_middleware

HERE = Path(__file__).parent

def record(*items):
    with open(HERE / "seen.txt", "a") as fh:
        fh.write(json.dumps(items) + "\\n")

class Recorder(Middleware):
    def before(self, job):
        record("before", job.name)

    def after(self, job, result):
        raised = type(result.exception).__name__ if result.exception else None
        record("after", job.name, result.outcome, result.value, raised)

add_middleware(Recorder())

@job(name="t.async_ok")
async def async_ok():
    await asyncio.sleep(0)
    record("body", "t.async_ok")
    return 42

@job(name="t.async_fails", max_attempts=1)
async def async_fails():
    await asyncio.sleep(0)
    record("body", "t.async_fails")
    raise ValueError("nope")
"""


def seen(app) -> list:
    path = app.dir / "seen.txt"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


# -- through real pools ------------------------------------------------------------------

def test_an_async_job_runs_its_body_and_its_result_is_stored(make_any_app):
    app = make_any_app(APP)
    store = app.store()
    wrote = [store.enqueue("t.async_write", tag).id for tag in ("a", "b")]
    value = store.enqueue("t.async_value", 21)
    app.start("--procs", "2")
    assert sorted(item[1] for item in seen(app) if item[0] == "wrote") == ["a", "b"]
    assert all(store.get(i)["status"] == "done" for i in wrote)
    assert value.result(timeout=5) == {"double": 42}


def test_an_async_job_that_raises_is_retried_and_resumes_its_saved_state(make_any_app):
    """R13 and R37: the exception a coroutine raises is an ordinary retry, and the
    state it saved before raising is what its next attempt resumes from."""
    app = make_any_app(APP)
    job_id = app.store().enqueue("t.async_retried").id
    app.start("--procs", "1")
    job = app.store().get(job_id)
    assert job["status"] == "done" and job["attempts"] == 2
    first, second = app.store().attempts(job_id)
    assert first["outcome"] == "error" and "RuntimeError: first try fails" in first["error"]
    assert second["outcome"] == "done"
    assert seen(app) == [["resumed", {"step": 1}]]


def test_progress_reported_from_an_async_job_is_stored(make_any_app):
    """R22: as from a plain job, the last report stays with the error."""
    app = make_any_app(APP)
    job_id = app.store().enqueue("t.async_progress").id
    app.start("--procs", "1")
    job = app.store().get(job_id)
    assert job["status"] == "dead" and job["last_error"].startswith("Fatal: broke while writing")
    assert (job["progress"], job["stage"]) == (60, "writing")


def test_an_async_job_raising_an_outcome_is_settled_as_a_plain_one(make_any_app):
    """R14, R15, R17, R18 from a coroutine."""
    app = make_any_app(APP)
    store = app.store()
    fatal = store.enqueue("t.async_fatal").id
    retry = store.enqueue("t.async_retry_after").id
    defer = store.enqueue("t.async_defer_once").id
    again = store.enqueue("t.async_reschedule").id
    app.start("--procs", "2")
    job = store.get(fatal)
    assert job["status"] == "dead" and job["attempts"] == 1
    assert job["last_error"].startswith("Fatal: this input can never work")
    job = store.get(retry)
    assert job["status"] == "dead" and job["attempts"] == 2
    assert [a["outcome"] for a in store.attempts(retry)] == ["retry", "retry"]
    job = store.get(defer)
    assert job["status"] == "done" and job["attempts"] == 1 and job["deferrals"] == 1
    assert ["ran after deferring"] in seen(app)
    job = store.get(again)
    assert job["status"] == "ready" and job["attempts"] == 0
    assert [a["outcome"] for a in store.attempts(again)] == ["rescheduled"]


def test_a_plain_job_returning_an_unawaited_awaitable_is_dead_naming_the_job(make_any_app):
    """Never ``done``: the body the awaitable stood for never ran. The coroutine is
    closed, so Python's "never awaited" warning does not leak into the pool's log."""
    app = make_any_app(APP)
    store = app.store()
    names = ("t.returns_coroutine", "t.returns_awaitable", "t.async_returns_coroutine")
    ids = {name: store.enqueue(name).id for name in names}
    result = app.start("--procs", "1")
    for name, job_id in ids.items():
        job = store.get(job_id)
        assert job["status"] == "dead" and job["attempts"] == 1, (name, job)
        assert name in job["last_error"] and "never awaited" in job["last_error"], job
    assert "coroutine" in store.get(ids["t.returns_coroutine"])["last_error"]
    assert "Pending" in store.get(ids["t.returns_awaitable"])["last_error"]
    assert seen(app) == []
    assert "RuntimeWarning" not in result.stderr


def test_an_async_job_past_its_hard_timeout_is_killed_and_retried(make_app):
    """R20: the supervisor's kill ends an awaiting coroutine and one that blocks its
    loop alike; each attempt is a timeout, then the job is dead."""
    app = make_app(LIMITS_APP)
    sleeper = app.store().enqueue("t.async_sleep").id
    blocker = app.store().enqueue("t.async_blocks_its_loop").id
    app.start("--procs", "2")
    job = app.store().get(sleeper)
    assert job["status"] == "dead" and job["attempts"] == 2
    assert job["last_error"].startswith("timed out after 0.5 s; no attempts left after 2")
    assert [a["outcome"] for a in app.store().attempts(sleeper)] == ["timeout", "timeout"]
    assert (app.dir / "started.txt").exists()
    job = app.store().get(blocker)
    assert job["status"] == "dead" and job["last_error"].startswith("timed out after 0.5 s")


def test_an_async_job_past_its_memory_limit_is_killed_naming_the_limit(make_app):
    app = make_app(LIMITS_APP)
    job_id = app.store().enqueue("t.async_hog").id
    app.start("--procs", "1")
    job = app.store().get(job_id)
    assert job["status"] == "dead"
    assert job["last_error"].startswith("child killed: memory limit 200 MiB exceeded")


def test_an_async_job_past_its_soft_timeout_is_cancelled_and_may_clean_up(make_app):
    """R20: a coroutine sees its soft timeout as asyncio's cancellation at the await
    it is in; the attempt ends as a SoftTimeout, well before the hard timeout."""
    app = make_app(LIMITS_APP)
    job_id = app.store().enqueue("t.async_polite").id
    app.start("--procs", "1")
    assert (app.dir / "cleaned.txt").read_text() == "cleaned up"
    job = app.store().get(job_id)
    assert job["status"] == "dead"
    assert job["last_error"].startswith("SoftTimeout: soft timeout after 0.3 s")
    assert [a["outcome"] for a in app.store().attempts(job_id)] == ["error"]


def test_middleware_wraps_the_whole_coroutine_run(make_app):
    """``before`` runs before the coroutine's body, ``after`` once it ended, and
    sees what it returned or raised."""
    app = make_app(MIDDLEWARE_APP)
    app.store().enqueue("t.async_ok")
    app.start("--procs", "1")
    app.store().enqueue("t.async_fails")
    app.start("--procs", "1")
    assert seen(app) == [
        ["before", "t.async_ok"], ["body", "t.async_ok"],
        ["after", "t.async_ok", "done", 42, None],
        ["before", "t.async_fails"], ["body", "t.async_fails"],
        ["after", "t.async_fails", "error", None, "ValueError"],
    ]


# -- in-process: jobpool.testing.drain ---------------------------------------------------

SEEN: list = []


@pytest.fixture
def store(tmp_path):
    SEEN.clear()
    store = jobpool.connect(tmp_path / "jobpool.db")
    yield store
    store.close()
    SEEN.clear()


@jobpool.job(name="coro.record", store_result=True)
async def record_async(value):
    await asyncio.sleep(0)
    jobpool.progress(50, "halfway")
    SEEN.append(value)
    return value * 2


@jobpool.job(name="coro.ctrl_c")
async def ctrl_c():
    os.kill(os.getpid(), signal.SIGINT)
    await asyncio.sleep(60)
    SEEN.append("slept through it")


async def _never_awaited_body():
    SEEN.append("helper ran")


@jobpool.job(name="coro.returns_coroutine")
def returns_coroutine_here():
    return _never_awaited_body()


def test_drain_runs_an_async_job(store):
    handle = store.enqueue("coro.record", 21)
    assert drain(store) == Drained(done=1)
    assert SEEN == [21]
    assert handle.result(timeout=5) == 42
    # Called directly, the job is the coroutine function it decorates.
    assert asyncio.run(record_async(5)) == 10 and SEEN == [21, 5]


def test_drain_called_from_a_running_event_loop_runs_an_async_job(store):
    """An async test calls ``drain()`` (a plain function) with its own loop running:
    the job still gets a loop of its own."""
    handle = store.enqueue("coro.record", 4)

    async def an_async_test():
        return drain(store)

    assert asyncio.run(an_async_test()) == Drained(done=1)
    assert SEEN == [4] and handle.result(timeout=5) == 8


@jobpool.job(name="coro.whoami", store_result=True)
async def whoami_async():
    await asyncio.sleep(0)
    return jobpool.current_job().id


def test_an_async_job_drained_from_a_running_loop_knows_itself(store):
    """R48: the job's loop runs in a thread of its own; it sees the drain's job (a
    fresh thread saw none once drains kept their job per thread)."""
    handle = store.enqueue("coro.whoami")

    async def an_async_test():
        return drain(store)

    assert asyncio.run(an_async_test()) == Drained(done=1)
    assert handle.result(timeout=5) == handle.id


def test_drain_settles_a_returned_coroutine_dead_naming_the_job(store):
    """No "never awaited" warning either: this suite turns warnings into errors."""
    job_id = store.enqueue("coro.returns_coroutine").id
    assert drain(store) == Drained(dead=1)
    job = store.get(job_id)
    assert job["status"] == "dead"
    assert "coro.returns_coroutine" in job["last_error"]
    assert "never awaited" in job["last_error"]
    assert SEEN == []


def test_ctrl_c_in_an_async_job_stops_the_drain_and_gives_the_lease_back(store):
    """R25, as for a plain job: asyncio turns the Ctrl-C into a cancellation of the
    coroutine, then raises it again as its loop closes; the drain sees it either way."""
    job_id = store.enqueue("coro.ctrl_c").id
    with pytest.raises(KeyboardInterrupt):
        drain(store)
    row = store.get(job_id)
    assert (row["status"], row["attempts"], row["lease_owner"]) == ("ready", 1, None)
    assert [a["outcome"] for a in store.attempts(job_id)] == ["released"]
    assert SEEN == []


@pytest.mark.parametrize("kind", ["generator", "async generator"])
def test_a_generator_function_is_refused_as_a_job(kind):
    """R20's sibling: calling a generator function runs none of its body, so such a
    job would be settled done without running; it is refused at registration."""
    from jobpool.errors import JobpoolError
    if kind == "generator":
        def produce():
            yield 1
    else:
        async def produce():
            yield 1
    with pytest.raises(JobpoolError, match="t.gen.*generator function"):
        jobpool.job(name="t.gen")(produce)
