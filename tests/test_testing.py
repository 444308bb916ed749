"""``jobpool.testing.drain`` and the pytest plugin's ``jobpool_store`` fixture (issue 14).

``drain`` runs queued jobs in the test's own process through the store's claimer,
so these tests read what the jobs did from a plain list: a forked child's appends
would never reach it.
"""
from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from importlib.metadata import entry_points

import pytest

import jobpool
from jobpool import jobs, procinfo, running
from jobpool.errors import StoreError
from jobpool.testing import Drained, DrainError, DrainLimitError, drain

pytest_plugins = ["pytester"]

#: What the jobs below did, appended in this process.
SEEN: list = []


@pytest.fixture(autouse=True)
def _fresh_seen():
    SEEN.clear()
    yield
    SEEN.clear()


@pytest.fixture
def store(tmp_path):
    store = jobpool.connect(tmp_path / "jobpool.db")
    yield store
    store.close()


@jobpool.job(name="testing.record")
def record(value):
    SEEN.append((value, os.getpid()))


@jobpool.job(name="testing.fails", max_attempts=2, backoff_base=3600)
def fails():
    raise RuntimeError("upstream said no")


@jobpool.job(name="testing.fails_fast", max_attempts=2, backoff_base=0.2)
def fails_fast():
    raise RuntimeError("upstream said no")


@jobpool.job(name="testing.defers_once")
def defers_once():
    if "deferred" not in SEEN:
        SEEN.append("deferred")
        raise jobpool.Defer(60)
    SEEN.append("ran")


@jobpool.job(name="testing.always_defers")
def always_defers():
    raise jobpool.Defer(0)


@jobpool.job(name="testing.defers_a_minute")
def defers_a_minute():
    raise jobpool.Defer(60)


def _on_dead(job, reason):
    SEEN.append((job["id"], reason, os.getpid()))


def _broken_hook(job, reason):
    raise RuntimeError("the hook itself is broken")


@jobpool.job(name="testing.fatal", on_dead=_on_dead)
def fatal():
    raise jobpool.Fatal("bad input")


@jobpool.job(name="testing.fatal_broken_hook", on_dead=_broken_hook)
def fatal_broken_hook():
    raise jobpool.Fatal("bad input")


@jobpool.job(name="testing.reports_progress")
def reports_progress(db):
    jobpool.progress(40, "halfway")
    store = jobpool.connect(db)
    try:
        (row,) = store.list_jobs(status="running")
    finally:
        store.close()
    SEEN.append((row["progress"], row["stage"]))


@jobpool.job(name="testing.overruns", timeout=0.2, soft_timeout=0.1)
def overruns():
    time.sleep(0.3)
    SEEN.append("finished")


@jobpool.job(name="testing.interrupted")
def interrupted():
    raise KeyboardInterrupt


class WatchedStore:
    """The store as drain sees it, noting the claimer drain asks for and closes."""

    def __init__(self, store) -> None:
        self.store = store
        self.owner: str | None = None
        self.closed = 0

    def __getattr__(self, name):
        return getattr(self.store, name)

    def claimer(self, owner, names, queues, policies):
        self.owner = owner
        return WatchedClaimer(self.store.claimer(owner, names, queues, policies), self)


class WatchedClaimer:
    def __init__(self, claimer, watcher: WatchedStore) -> None:
        self.claimer = claimer
        self.watcher = watcher

    def turn(self, *args):
        return self.claimer.turn(*args)

    @property
    def token_wait(self):
        return self.claimer.token_wait

    def set_limits(self, plan):
        self.claimer.set_limits(plan)

    def set_chunks(self, chunks):
        self.claimer.set_chunks(chunks)

    @property
    def chunked(self):
        return self.claimer.chunked

    def close(self) -> None:
        self.watcher.closed += 1
        self.claimer.close()


# -- drain ---------------------------------------------------------------------------------


def test_drain_runs_ready_jobs_here_and_counts_them(store):
    ids = [store.enqueue("testing.record", n).id for n in range(3)]
    watched = WatchedStore(store)
    assert drain(watched) == Drained(done=3)
    # In this process, in claim order, without a fork
    assert SEEN == [(0, os.getpid()), (1, os.getpid()), (2, os.getpid())]
    assert [store.get(i)["status"] for i in ids] == ["done"] * 3
    # Leased under an owner identity like any pool's, and the claimer closed
    assert watched.owner == procinfo.owner_identity()
    assert [a["owner"] for a in store.attempts(ids[0])] == [procinfo.owner_identity()]
    assert watched.closed == 1


@jobpool.job(name="testing.held", queue="held")
def held_job(value):
    SEEN.append((value, os.getpid()))


def test_drain_leaves_a_paused_queue_alone_as_a_pool_does(store):
    # R38
    held = store.enqueue("testing.held", 1).id
    store.enqueue("testing.record", 2)
    store.pause("held")
    assert drain(store) == Drained(done=1)
    assert store.get(held)["status"] == "ready"
    store.resume("held")
    assert drain(store) == Drained(done=1)


def test_without_run_scheduled_a_retry_waits_its_backoff(store):
    job = store.enqueue("testing.fails").id
    before = time.time()
    assert drain(store) == Drained(retried=1)
    row = store.get(job)
    assert (row["status"], row["attempts"]) == ("ready", 1)
    assert row["run_at"] > before  # R13: due after its backoff, not yet


def test_with_run_scheduled_a_retry_runs_at_once_then_the_job_is_dead(store):
    job = store.enqueue("testing.fails").id
    assert drain(store, run_scheduled=True) == Drained(retried=1, dead=1)
    row = store.get(job)
    assert (row["status"], row["attempts"]) == ("dead", 2)
    assert "no attempts left after 2" in row["last_error"]
    # Without waiting: the retry is dated as if its hour of backoff (jitter -25 % at
    # most) had passed
    first, second = store.attempts(job)
    assert second["started_at"] - first["ended_at"] >= 0.75 * 3600


def test_a_deferred_job_waits_unless_run_scheduled(store):
    job = store.enqueue("testing.defers_once").id
    assert drain(store) == Drained(deferred=1)
    assert SEEN == ["deferred"]
    assert drain(store, run_scheduled=True) == Drained(done=1)
    assert SEEN == ["deferred", "ran"]
    row = store.get(job)
    assert (row["status"], row["attempts"], row["deferrals"]) == ("done", 1, 1)  # R17


def test_a_job_that_always_defers_stops_at_max_jobs(store):
    job = store.enqueue("testing.always_defers").id
    watched = WatchedStore(store)
    with pytest.raises(DrainLimitError, match="max_jobs") as caught:
        drain(watched, max_jobs=3)
    assert isinstance(caught.value, jobpool.JobpoolError)
    assert caught.value.drained == Drained(deferred=3)
    # Every attempt was settled before it gave up: nothing left running
    row = store.get(job)
    assert (row["status"], row["attempts"], row["deferrals"]) == ("ready", 0, 3)
    assert watched.closed == 1


def test_run_scheduled_stops_at_max_jobs_for_a_job_deferred_again_and_again(store):
    store.enqueue("testing.defers_a_minute")
    with pytest.raises(DrainLimitError) as caught:
        drain(store, max_jobs=4, run_scheduled=True)
    assert caught.value.drained == Drained(deferred=4)


def test_exactly_max_jobs_jobs_is_no_error(store):
    for n in range(2):
        store.enqueue("testing.record", n)
    assert drain(store, max_jobs=2) == Drained(done=2)


def test_a_chains_next_step_runs_in_the_same_drain(store):
    first = store.enqueue_with("testing.record", args=("first",),
                               then=record.s("second")).id
    assert drain(store) == Drained(done=2)
    assert [value for value, _pid in SEEN] == ["first", "second"]
    assert [j["status"] for j in store.list_jobs(chain=first)] == ["done", "done"]


def test_an_on_dead_hook_runs_here_once_after_the_dead_settle(store):
    job = store.enqueue("testing.fatal").id
    assert drain(store) == Drained(dead=1)
    (hooked,) = SEEN
    assert hooked == (job, "Fatal: bad input", os.getpid())
    assert store.pending_hooks(["testing.fatal"]) == []  # R21: taken, so no pool runs it again


def test_a_failing_on_dead_hook_is_logged_and_the_drain_goes_on(store, caplog):
    store.enqueue("testing.fatal_broken_hook")
    store.enqueue("testing.record", "after")
    with caplog.at_level(logging.ERROR, logger="jobpool.testing"):
        assert drain(store) == Drained(done=1, dead=1)
    assert "the hook itself is broken" in caplog.text
    assert [value for value, _pid in SEEN] == ["after"]


def test_progress_inside_a_job_reaches_the_store(store):
    job = store.enqueue("testing.reports_progress", store.path).id
    assert drain(store) == Drained(done=1)
    assert SEEN == [(40, "halfway")]  # R22: written while the job ran
    assert store.get(job)["progress"] == 100  # R12: closed at 100 % when done
    assert running.current is None


def test_timeouts_are_not_enforced_and_no_signal_state_is_left_changed(store):
    handlers = {s: signal.getsignal(s) for s in (signal.SIGALRM, signal.SIGINT, signal.SIGTERM)}
    timer = signal.getitimer(signal.ITIMER_REAL)
    store.enqueue("testing.overruns")
    assert drain(store) == Drained(done=1)
    assert SEEN == ["finished"]
    assert {s: signal.getsignal(s) for s in handlers} == handlers
    # A soft timeout's timer would have replaced (then cancelled) pytest-timeout's
    assert (signal.getitimer(signal.ITIMER_REAL)[0] > 0) == (timer[0] > 0)


def test_ctrl_c_in_a_job_stops_the_drain_and_gives_the_lease_back(store):
    job = store.enqueue("testing.interrupted").id
    later = store.enqueue("testing.record", "later").id
    watched = WatchedStore(store)
    with pytest.raises(KeyboardInterrupt):
        drain(watched)
    row = store.get(job)
    assert (row["status"], row["attempts"], row["lease_owner"]) == ("ready", 1, None)  # R25
    assert [a["outcome"] for a in store.attempts(job)] == ["released"]
    assert store.get(later)["attempts"] == 0 and SEEN == []
    assert watched.closed == 1


class _RunnerStops(BaseException):
    """What a test runner raises to stop a test (as pytest-timeout's failure)."""


@jobpool.job(name="testing.runner_stops")
def runner_stops():
    raise _RunnerStops()


def test_what_a_test_runner_raises_stops_the_drain_and_gives_the_lease_back(store):
    job_id = store.enqueue("testing.runner_stops").id
    store.enqueue("testing.record", 1)
    with pytest.raises(_RunnerStops):
        drain(store)
    row = store.get(job_id)
    assert (row["status"], row["attempts"]) == ("ready", 1)
    assert [a["outcome"] for a in store.attempts(job_id)] == ["released"]


def test_max_jobs_must_be_positive(store):
    with pytest.raises(ValueError, match="max_jobs"):
        drain(store, max_jobs=0)


def test_drain_runs_jobs_on_postgresql_too(pg_url):
    store = jobpool.connect(pg_url)
    try:
        store.enqueue_with("testing.record", args=("pg",), then=record.s("next"))
        assert drain(store) == Drained(done=2)
        assert [value for value, _pid in SEEN] == ["pg", "next"]
        # The server dates claims (R7a): run_scheduled waits out a short backoff...
        job = store.enqueue("testing.fails_fast").id
        assert drain(store, run_scheduled=True) == Drained(retried=1, dead=1)
        assert store.get(job)["status"] == "dead"
        # ...and refuses to wait a minute
        store.enqueue("testing.defers_a_minute")
        with pytest.raises(DrainError, match="its own clock") as caught:
            drain(store, run_scheduled=True)
        assert caught.value.drained == Drained(deferred=1)
    finally:
        store.close()


# -- chunks (R63) --------------------------------------------------------------------------


def _running(url: str, name: str) -> list[int]:
    """The ids of ``name``'s running rows, as another connection sees them."""
    store = jobpool.connect(url)
    try:
        return sorted(j["id"] for j in store.list_jobs(status="running", name=name))
    finally:
        store.close()


@jobpool.job(name="testing.chunked", chunk=3)
def chunked(url, before=None, fail=False):
    """Notes what it sees: the rows of its name running, and how the row before it ended."""
    store = jobpool.connect(url)
    try:
        ended = None if before is None else store.get(before)["status"]
    finally:
        store.close()
    SEEN.append((jobpool.current_job().id, _running(url, "testing.chunked"), ended))
    if fail:
        raise jobpool.Fatal("this row fails alone")


def test_drain_claims_a_chunk_together_and_settles_each_row_before_the_next_runs(
        any_store, store_url):
    ids: list[int] = []
    for i in range(5):
        ids.append(any_store.enqueue("testing.chunked", store_url,
                                     before=ids[-1] if ids else None, fail=(i == 1)).id)
    watched = WatchedStore(any_store)
    assert drain(watched) == Drained(done=4, dead=1)
    seen = {job_id: (running, ended) for job_id, running, ended in SEEN}
    assert [job_id for job_id, _r, _e in SEEN] == ids  # one after the other, in claim order
    # R63: the first three rows were claimed in one turn, for one slot: all running
    # while the first ran; the next chunk is the two rows left.
    assert seen[ids[0]][0] == ids[:3]
    assert seen[ids[1]][0] == ids[1:3] and seen[ids[2]][0] == ids[2:3]
    assert seen[ids[3]][0] == ids[3:]
    # Each row settled on its own, before the next started: the failing one too.
    assert [seen[i][1] for i in ids[1:]] == ["done", "dead", "done", "done"]
    rows = [any_store.get(i) for i in ids]
    assert [r["status"] for r in rows] == ["done", "dead", "done", "done", "done"]
    assert rows[1]["last_error"].startswith("Fatal: this row fails alone")
    assert all(r["attempts"] == 1 for r in rows)
    assert [[a["outcome"] for a in any_store.attempts(i)] for i in ids] == [
        ["done"], ["fatal"], ["done"], ["done"], ["done"]]
    assert watched.closed == 1


@jobpool.job(name="testing.chunk_waits", chunk=2)
def chunk_waits(until):
    """Runs until the Unix time ``until`` has passed (when given)."""
    SEEN.append(jobpool.current_job().id)
    while until is not None and time.time() <= until:
        time.sleep(0.02)


def test_a_row_past_its_deadline_when_its_turn_in_a_chunk_comes_is_dead_without_running(store):
    # Claimed with the first row, in time; its deadline passes while the first runs.
    deadline = time.time() + 3.0
    first = store.enqueue("testing.chunk_waits", deadline).id
    late = store.enqueue_with("testing.chunk_waits", args=(None,), deadline=deadline).id
    assert drain(store) == Drained(done=1, dead=1)
    assert SEEN == [first]  # the late row never ran
    row = store.get(late)
    assert (row["status"], row["attempts"]) == ("dead", 1)
    assert row["last_error"] == "deadline passed"
    assert [(a["outcome"], a["error"]) for a in store.attempts(late)] == [
        ("deadline", "deadline passed")]
    # R10 judged when its turn came, not at the claim (which took it in time).
    assert row["started_at"] < deadline


@jobpool.job(name="testing.chunk_interrupted", chunk=4)
def chunk_interrupted(stop):
    SEEN.append(jobpool.current_job().id)
    if stop:
        raise KeyboardInterrupt


def test_an_interrupted_drain_gives_back_the_rows_of_its_chunk_that_had_not_started(any_store):
    ids = [any_store.enqueue("testing.chunk_interrupted", i == 1).id for i in range(4)]
    with pytest.raises(KeyboardInterrupt):
        drain(any_store)
    assert SEEN == ids[:2]
    assert any_store.get(ids[0])["status"] == "done"
    # The row the interruption reached gives its lease back, its attempt spent (R25) ...
    row = any_store.get(ids[1])
    assert (row["status"], row["attempts"]) == ("ready", 1)
    assert [a["outcome"] for a in any_store.attempts(ids[1])] == ["released"]
    # ... the rows after it never started: back in line, their attempts given back.
    for job_id in ids[2:]:
        row = any_store.get(job_id)
        assert (row["status"], row["attempts"], row["lease_owner"]) == ("ready", 0, None)
        (line,) = any_store.attempts(job_id)
        assert line["outcome"] == "unstarted"
        assert line["error"] == ("not started: its chunk ended early (the drain was "
                                 "interrupted: KeyboardInterrupt)")


def test_a_chunk_never_takes_a_drain_past_max_jobs(store):
    ids = [store.enqueue("testing.chunk_interrupted", False).id for _ in range(4)]
    with pytest.raises(DrainLimitError) as caught:
        drain(store, max_jobs=3)
    assert caught.value.drained == Drained(done=3)
    assert SEEN == ids[:3]
    # The chunk was cut to what max_jobs left: the fourth row was never claimed.
    row = store.get(ids[3])
    assert (row["status"], row["attempts"]) == ("ready", 0)
    assert store.attempts(ids[3]) == []
    assert drain(store) == Drained(done=1)


# -- a store error (R26 in a drain) ---------------------------------------------------------


def _cut_the_claimers_connection() -> None:
    """Terminates the drain's claimer connection (this worker's database has no other
    claimer while a test runs): its next turn fails."""
    import psycopg

    from .conftest import PG_URL
    with psycopg.connect(PG_URL, autocommit=True) as admin:
        assert admin.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE application_name = 'jobpool-supervisor'"
            "   AND datname = current_database()").fetchone()[0] >= 1


@jobpool.job(name="testing.cuts_the_store")
def cuts_the_store():
    SEEN.append(jobpool.current_job().id)
    _cut_the_claimers_connection()


@jobpool.job(name="testing.chunk_cut", chunk=3)
def chunk_cut(cut):
    SEEN.append(jobpool.current_job().id)
    if cut:
        _cut_the_claimers_connection()


def test_a_store_error_after_a_job_ran_settles_it_before_the_error_is_raised(pg_url):
    store = jobpool.connect(pg_url)
    try:
        job_id = store.enqueue("testing.cuts_the_store").id
        with pytest.raises(StoreError):
            drain(store)
        assert SEEN == [job_id]
        # The turn that would settle it failed; the drain's next one settled it, so it
        # is not left running under the drain's owner for a pool to run again.
        row = store.get(job_id)
        assert (row["status"], row["attempts"], row["lease_owner"]) == ("done", 1, None)
    finally:
        store.close()


def test_a_store_error_mid_chunk_gives_back_the_rows_that_had_not_started(pg_url):
    store = jobpool.connect(pg_url)
    try:
        ids = [store.enqueue("testing.chunk_cut", i == 0).id for i in range(3)]
        with pytest.raises(StoreError):
            drain(store)
        assert SEEN == ids[:1]
        assert (store.get(ids[0])["status"], store.get(ids[0])["attempts"]) == ("done", 1)
        for job_id in ids[1:]:
            row = store.get(job_id)
            assert (row["status"], row["attempts"], row["lease_owner"]) == ("ready", 0, None)
            (line,) = store.attempts(job_id)
            assert (line["outcome"], line["error"]) == (
                "unstarted", "not started: its chunk ended early (the drain met a store error)")
        assert drain(store) == Drained(done=2)
        assert SEEN == ids
    finally:
        store.close()


# -- the pytest plugin ---------------------------------------------------------------------

FIXTURE_TESTS = '''
import os

import jobpool
from jobpool.testing import drain


@jobpool.job(name="testing.plugin.bump")
def bump(path):
    with open(path, "a") as fh:
        fh.write("x")


def test_enqueue_and_drain_use_a_fresh_store_in_tmp_path(jobpool_store, tmp_path):
    assert os.path.dirname(jobpool_store.path) == str(tmp_path)
    assert jobpool_store.list_jobs() == []
    handle = bump.enqueue(str(tmp_path / "out"))
    assert jobpool_store.get(handle.id)["status"] == "ready"
    assert drain().done == 1
    assert (tmp_path / "out").read_text() == "x"


def test_the_next_test_gets_a_store_of_its_own(jobpool_store):
    assert jobpool_store.list_jobs() == []
'''


def test_the_fixture_makes_a_fresh_store_the_default_and_restores_the_old(pytester, monkeypatch):
    outer = str(pytester.path / "outer.db")
    monkeypatch.setenv("JOBPOOL_DB", outer)
    pytester.makepyfile(test_uses_the_fixture=FIXTURE_TESTS)
    try:
        # Loaded by module name, with the entry point (when installed) turned off, so
        # the plugin is registered once whether or not it is installed
        result = pytester.runpytest("-p", "no:jobpool", "-p", "jobpool.pytest_plugin")
    finally:
        jobs.unregister("testing.plugin.bump")
    result.assert_outcomes(passed=2)
    assert os.environ["JOBPOOL_DB"] == outer
    assert not os.path.exists(outer)  # the tests wrote only to their own stores


def _plugin_installed() -> bool:
    return any(ep.value == "jobpool.pytest_plugin"
               for ep in entry_points(group="pytest11", name="jobpool"))


@pytest.mark.skipif(not _plugin_installed(),
                    reason="the pytest11 entry point 'jobpool' is not installed")
def test_the_installed_plugin_serves_the_fixture_and_no_jobpool_turns_it_off(pytester):
    pytester.makepyfile("def test_it(jobpool_store):\n    assert jobpool_store.list_jobs() == []\n")
    pytester.runpytest().assert_outcomes(passed=1)
    off = pytester.runpytest("-p", "no:jobpool")
    off.assert_outcomes(errors=1)
    off.stdout.fnmatch_lines(["*fixture 'jobpool_store' not found*"])


def test_loading_the_plugin_loads_no_driver_and_no_runner():
    # pytest loads an installed plugin on every run of every project
    code = ("import sys, jobpool.pytest_plugin\n"
            "print(sorted(m for m in sys.modules if m.startswith(('psycopg', 'multiprocess',"
            " 'jobpool.store', 'jobpool.testing', 'jobpool.child', 'jobpool.supervisor',"
            " 'prometheus_client'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@jobpool.job(name="testing.unstorable", max_attempts=3)
def _unstorable():
    jobpool.progress(10, "stage \x00 \udcff")
    raise ValueError("a\x00b \udcff c")


@jobpool.job(name="testing.unstorable_result", max_attempts=3, store_result=True)
def _unstorable_result():
    return {"text": "a\udcff"}


def test_drain_stores_a_jobs_unstorable_text_as_a_pool_does(any_store):
    """R41 in ``drain`` as in a pool's slots: an error and a stage holding a NUL and
    a lone surrogate are stored with both escaped (the drain raised, or on
    PostgreSQL lost the outcome); a result holding a lone surrogate is dead at once,
    never retried (the child died on it, a crash that ran the body again)."""
    failing = any_store.enqueue_with("testing.unstorable").id
    result = any_store.enqueue_with("testing.unstorable_result").id
    drained = drain(any_store)
    assert drained.dead == 1 and drained.retried == 1
    row = any_store.get(failing)
    assert row["status"] == "ready" and "a\\x00b \\udcff c" in row["last_error"]
    row = any_store.get(result)
    assert row["status"] == "dead" and row["attempts"] == 1
    assert "result holds text that is not valid Unicode" in row["last_error"]


@jobpool.job(name="testing.keeps", store_result=True)
def keeps():
    return {"rows": 3}


def test_a_json_result_reads_back_as_its_text_on_every_store(any_store):
    # PostgreSQL keeps every result as bytes: `get` said "<10 bytes>" there and the JSON
    # text on SQLite.
    job_id = any_store.enqueue("testing.keeps").id
    assert drain(any_store) == Drained(done=1)
    assert any_store.get(job_id)["result"] == '{"rows":3}'
    assert any_store.list_jobs()[0]["result"] == '{"rows":3}'


@jobpool.job(name="testing.batch_done")
def batch_done(batch=None):
    return batch["dead"]


@pytest.mark.parametrize("member", ["testing.fatal", "testing.record"])
def test_drain_runs_the_callback_a_batchs_last_member_enqueues_dead_or_done(any_store, member):
    """R34, R26: on PostgreSQL a drain took no callback its batch's dead last member
    enqueued (a trigger's row, which its own claim cannot see and no notification wakes
    a drain for): the callback stayed ready. A done last member's ran."""
    batch = any_store.batch(on_complete=batch_done.s())
    batch.add(jobpool.Signature(member, ()) if member == "testing.fatal"
              else jobpool.Signature(member, (1,)))
    batch.close()
    drain(any_store)
    status = any_store.batch_status(batch.id)
    assert status.finished and status.complete_job is not None
    assert any_store.get(status.complete_job)["status"] == "done"


def test_drain_serves_the_queues_it_is_given_as_a_pool_does(any_store):
    """A job enqueued into a queue no registered job names waits, as it would for a pool
    started without --queues; ``queues=`` serves it (in the order given)."""
    other = any_store.enqueue_with("testing.record", args=(7,), queue="other").id
    assert drain(any_store).done == 0
    assert any_store.get(other)["status"] == "ready"
    assert drain(any_store, queues=["other", "default"]).done == 1
    assert any_store.get(other)["status"] == "done"
    for wrong in ("other", [], ["a b"]):
        with pytest.raises(ValueError):
            drain(any_store, queues=wrong)


@jobpool.job(name="testing.whoami", max_attempts=1)
def whoami():
    me = jobpool.current_job().id
    jobpool.progress(10, f"job {me}")
    time.sleep(0.01)
    if jobpool.current_job().id != me:
        raise AssertionError(f"current_job changed under job {me}")
    SEEN.append(me)


def test_drains_in_several_threads_each_see_their_own_job(store):
    # R48: `current_job()` is the job the code runs in, "in jobpool.testing.drain
    # alike"; drains in three threads (the README runs one through asyncio.to_thread)
    # shared one global, and each job saw another thread's job as its own.
    import threading
    ids = [store.enqueue("testing.whoami").id for _ in range(30)]
    failures: list = []

    def drain_here():
        try:
            drain(store)
        except Exception as exc:  # noqa: BLE001 - reported below
            failures.append(exc)
    threads = [threading.Thread(target=drain_here) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert failures == []
    assert sorted(SEEN) == ids
    assert {store.get(i)["status"] for i in ids} == {"done"}
    assert running.current is None and running.attempt_now() is None


@jobpool.job(name="testing.helper_thread", max_attempts=1)
def helper_thread():
    import threading
    seen: list = []
    thread = threading.Thread(target=lambda: seen.append(jobpool.current_job()))
    thread.start()
    thread.join()
    SEEN.append(seen[0].id if seen[0] is not None else None)


def test_a_thread_a_drained_job_starts_sees_the_job(store):
    # R48: as in a pool's child, where one job runs at a time in the process.
    job_id = store.enqueue("testing.helper_thread").id
    drain(store)
    assert SEEN == [job_id]


DRAIN_IN_A_POOL_APP = """
import jobpool
from jobpool import job
from jobpool.testing import drain

@job(name="t.inner")
def inner():
    pass

@job(name="t.outer", max_attempts=1)
def outer(inner_db, out):
    before = jobpool.current_job().id
    drain(jobpool.connect(inner_db))
    after = jobpool.current_job()
    with open(out, "w") as fh:
        fh.write(f"{before} {after.id if after is not None else None}")
"""


def test_a_drain_inside_a_pools_job_leaves_the_job_its_identity(make_app, tmp_path):
    # R48: a drain restored nothing once it ended: the pool's job that called it lost
    # current_job(), and with it its progress, state and log fields.
    app = make_app(DRAIN_IN_A_POOL_APP)
    inner_db = str(tmp_path / "inner.db")
    inner_store = jobpool.connect(inner_db)
    inner_store.enqueue("t.inner")
    inner_store.close()
    out = tmp_path / "out.txt"
    job_id = app.store().enqueue("t.outer", inner_db, str(out)).id
    app.start("--procs", "1")
    assert out.read_text() == f"{job_id} {job_id}"
