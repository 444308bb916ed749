"""R63, R64: chunks of tiny jobs. A free slot takes up to ``chunk`` ready rows of one
name and its child runs them one after the other, each settled on its own; each row's
lease covers the rows before it (R8); a chunk that ends early (a crash, a stop, a
cancel) gives back the attempts of the rows that never started; a row past its
deadline when its turn comes is dead without running (R10); limits (R35) win.

Every pool test runs on SQLite over the compiled driver and over the pure one
(``JOBPOOL_PURE=1``'s), and on PostgreSQL.
"""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

import jobpool
from jobpool import core
from jobpool.config import PoolConfig
from jobpool.errors import RegistryError
from jobpool.lifecycle import LEASE_SLACK
from jobpool.supervisor import Supervisor

from .conftest import process_state, wait_for

TIMEOUT = 20.0


@pytest.fixture(params=["sqlite-compiled", "sqlite-pure", "postgres"])
def kind(request):
    return request.param


@pytest.fixture
def where(kind, request, tmp_path, monkeypatch):
    """A store URL, with the SQLite claimer of the param's kind."""
    if kind == "postgres":
        return request.getfixturevalue("pg_url")
    if kind == "sqlite-compiled":
        pytest.importorskip("jobpool._core")
    monkeypatch.setattr(core, "NAME", kind.split("-")[1])  # what a pool's claimer is built over
    return str(tmp_path / "jobpool.db")


@pytest.fixture
def app(make_app, where, kind):
    """``jobpool start`` over ``where`` with the claimer of ``kind`` (``JOBPOOL_PURE=1``)."""
    made = make_app(APP)
    made.db = where
    if kind == "sqlite-pure":
        made.env["JOBPOOL_PURE"] = "1"
    return made


@pytest.fixture
def store(where):
    opened = jobpool.connect(where)
    yield opened
    opened.close()


def _observe(url: str) -> dict:
    """What a running row sees of itself and of its name in the store."""
    me = jobpool.current_job()
    store = jobpool.connect(url)
    try:
        row = store.get(me.id)
        running = [j["id"] for j in store.list_jobs(status="running", name=me.name)]
    finally:
        store.close()
    return {"id": me.id, "pid": os.getpid(), "lease": row["lease_expires_at"],
            "claimed_at": row["started_at"], "running": running}


@jobpool.job(name="chunk.observe", chunk=4, timeout=TIMEOUT, store_result=True)
def observe(url, fail=False):
    seen = _observe(url)
    if fail:
        raise jobpool.Fatal(f"row {seen['id']} fails alone")
    return seen


@jobpool.job(name="chunk.crash", chunk=5, timeout=TIMEOUT, backoff_base=0.0)
def crash(marker, out, kill=False):
    if kill and not Path(marker).exists():
        Path(marker).write_text("x")
        os.kill(os.getpid(), signal.SIGKILL)  # the child dies mid-chunk, for real
    with open(out, "a") as fh:
        fh.write(f"{jobpool.current_job().id}\n")


@jobpool.job(name="chunk.wait", chunk=3, timeout=3600)
def wait(started, release, out):
    """Tells it started, then waits for ``release`` (at most a minute)."""
    Path(started).write_text(str(os.getpid()))
    end = time.monotonic() + 60
    while release and not Path(release).exists() and time.monotonic() < end:
        time.sleep(0.02)
    with open(out, "a") as fh:
        fh.write(f"{jobpool.current_job().id}\n")


def _pool(url: str, name: str, clock=time.time, **config) -> Supervisor:
    """A pool of one slot (unless ``config`` says more), draining the store."""
    config = dict(db=url, procs=1, burst=True, names=(name,), poll_interval=0.05) | config
    return Supervisor(PoolConfig(**config), clock=clock)


def _ran(out: Path) -> list[int]:
    return [int(line) for line in out.read_text().split()] if out.exists() else []


def test_a_chunk_runs_its_rows_in_one_child_each_settled_on_its_own_under_leases_covering_it(store, where):
    handles = [store.enqueue("chunk.observe", where, fail=(i == 2)) for i in range(6)]
    ids = [h.id for h in handles]
    pool = _pool(where, "chunk.observe")
    assert pool.run() == 0
    rows = [store.get(i) for i in ids]
    # R63: each settled on its own: the failure of one row touches no other.
    assert [r["status"] for r in rows] == ["done", "done", "dead", "done", "done", "done"]
    assert rows[2]["last_error"].startswith(f"Fatal: row {ids[2]} fails alone")
    assert all(r["attempts"] == 1 for r in rows)
    seen = {h.id: h.result(timeout=0) for h in handles if h.id != ids[2]}
    assert {i: s["id"] for i, s in seen.items()} == {i: i for i in seen}  # results per row
    # The first four rows were one chunk: claimed together (one pool, one slot, so
    # all four running while the first ran), run in one child.
    assert seen[ids[0]]["running"] == ids[:4]
    assert len({seen[i]["pid"] for i in (ids[0], ids[1], ids[3])}) == 1
    assert seen[ids[4]]["running"] == ids[4:]
    # R8 for a chunk: a row's lease is its own timeout plus those before it in the
    # chunk, plus the slack, from the claim.
    for chunk in (ids[:4], ids[4:]):
        for position, job_id in enumerate(chunk):
            if job_id == ids[2]:
                continue
            s = seen[job_id]
            assert s["lease"] - s["claimed_at"] == pytest.approx(
                (position + 1) * TIMEOUT + LEASE_SLACK, abs=1e-3)
    assert pool.counters["completed"] == 5 and pool.counters["dead"] == 1
    assert pool.counters["claimed"] == 6


def test_a_crash_mid_chunk_spends_an_attempt_only_of_the_row_that_ran(store, where, tmp_path):
    out, marker = tmp_path / "ran.txt", tmp_path / "killed"
    ids = [store.enqueue("chunk.crash", str(marker), str(out), kill=(i == 1)).id
           for i in range(5)]
    pool = _pool(where, "chunk.crash")
    assert pool.run() == 0
    assert marker.exists()  # the second row killed its child
    rows = {i: store.get(i) for i in ids}
    assert all(r["status"] == "done" for r in rows.values())
    # The row that ran and crashed spent its attempt (R19) ...
    assert rows[ids[1]]["attempts"] == 2
    assert [a["outcome"] for a in store.attempts(ids[1])] == ["crash", "done"]
    # ... the rows of its chunk that never started had theirs given back (R63).
    for job_id in ids[2:]:
        assert rows[job_id]["attempts"] == 1
        log = store.attempts(job_id)
        assert [a["outcome"] for a in log] == ["unstarted", "done"]
        assert "its chunk ended early (its child exited)" in log[0]["error"]
    assert rows[ids[0]]["attempts"] == 1
    assert sorted(_ran(out)) == sorted(ids)  # every row ran once to its end
    assert pool.counters["crashes"] == 1


@jobpool.job(name="chunk.slow", chunk=3, timeout=1, backoff_base=0.0)
def slow(marker, out, overrun=False):
    if overrun and not Path(marker).exists():
        Path(marker).write_text("x")
        time.sleep(600)  # past its hard timeout: the pool kills its child (R20)
    with open(out, "a") as fh:
        fh.write(f"{jobpool.current_job().id}\n")


def test_a_timeout_mid_chunk_gives_back_the_rows_after_it(store, where, tmp_path):
    out, marker = tmp_path / "ran.txt", tmp_path / "overran"
    ids = [store.enqueue("chunk.slow", str(marker), str(out), overrun=(i == 0)).id
           for i in range(3)]
    assert _pool(where, "chunk.slow", kill_grace=0.5).run() == 0
    assert [a["outcome"] for a in store.attempts(ids[0])] == ["timeout", "done"]
    for job_id in ids[1:]:
        log = store.attempts(job_id)
        assert [a["outcome"] for a in log] == ["unstarted", "done"]
        assert "its chunk ended early (timed out after 1 s)" in log[0]["error"]
        assert store.get(job_id)["attempts"] == 1
    assert sorted(_ran(out)) == ids


def test_a_pool_whose_beats_do_not_reach_the_store_starts_no_more_rows_of_a_chunk(
        store, where, tmp_path):
    """R9, R24b, R63: cut off from the store, a pool ran on through its chunk while
    another pool, judging it dead, took its rows back and ran them too. Now, once no
    beat has reached the store for half of ``dead_after``, the rows waiting in a chunk
    are given back, not started; they run once the pool is back in touch."""
    from jobpool.errors import StoreError
    started, release, out = tmp_path / "started", tmp_path / "release", tmp_path / "ran.txt"
    ids = [store.enqueue("chunk.wait", str(started), str(release) if i == 0 else "",
                         str(out)).id for i in range(3)]
    cut_off: dict = {"since": None, "over": False}
    pool = _pool(where, "chunk.wait", dead_after=2.0)
    beat = pool.store.heartbeat

    def heartbeat(*args, **kwargs):
        if started.exists() and not cut_off["over"]:
            # The first row runs: from now on no beat gets through. Past half of
            # dead_after (on the monotonic clock the pool judges by), the row may end.
            cut_off["since"] = cut_off["since"] or time.monotonic()
            if time.monotonic() - cut_off["since"] > 1.2 and not release.exists():
                release.write_text("go")
            if any(slot.queued for slot in pool.slots.all) or not release.exists():
                raise StoreError("the store cannot be reached (a test's cut)")
            cut_off["over"] = True  # the chunk was given back: in touch again
        return beat(*args, **kwargs)
    pool.store.heartbeat = heartbeat
    assert pool.run() == 0
    assert sorted(_ran(out)) == ids   # each row ran once
    assert [a["outcome"] for a in store.attempts(ids[0])] == ["done"]
    for job_id in ids[1:]:
        # Given back (perhaps again, from the chunk a turn claimed while the beats still
        # failed), never started out of touch; run once, in touch again.
        outcomes = [a["outcome"] for a in store.attempts(job_id)]
        assert outcomes[-1] == "done" and set(outcomes[:-1]) == {"unstarted"}, outcomes
        assert "has not reached the store for half of --dead-after" in \
            store.attempts(job_id)[0]["error"]
        assert store.get(job_id)["attempts"] == 1


def test_a_row_past_its_deadline_when_its_turn_comes_is_dead_without_running(store, where, tmp_path):
    started, out = tmp_path / "started", tmp_path / "ran.txt"
    first = store.enqueue("chunk.wait", str(started), "", str(out)).id
    late = store.enqueue_with("chunk.wait", args=(str(tmp_path / "x"), "", str(out)),
                              deadline=time.time() + 600).id
    last = store.enqueue("chunk.wait", str(tmp_path / "y"), "", str(out)).id
    # The pool's clock leaps ten minutes once the first row has run: the second
    # row's deadline, in the future when the chunk was claimed, has passed when its
    # turn comes (the pool's clock is the one a pool judges by: STYLE habit 4).
    pool = _pool(where, "chunk.wait",
                 clock=lambda: time.time() + (1000.0 if started.exists() else 0.0))
    assert pool.run() == 0
    assert store.get(first)["status"] == "done"
    row = store.get(late)
    assert (row["status"], row["last_error"]) == ("dead", "deadline passed")
    # Logged as a claim's R10 logs it: the row's deadline, not a fault of its own.
    assert [(a["outcome"], a["error"]) for a in store.attempts(late)] == [
        ("deadline", "deadline passed")]
    assert store.get(last)["status"] == "done"
    assert _ran(out) == [first, last]  # the late row never ran


APP = """
import os, time
from pathlib import Path
import jobpool

@jobpool.job(name="chunkapp.wait", chunk=3, timeout=3600)
def wait(started, release, out):
    Path(started).write_text(str(os.getpid()))
    end = time.monotonic() + 300
    while not Path(release).exists() and time.monotonic() < end:
        time.sleep(0.02)
    with open(out, "a") as fh:
        fh.write(f"{jobpool.current_job().id}\\n")

@jobpool.job(name="chunkapp.gate", timeout=3600)   # the same, one row at a time
def gate(started, release, out):
    wait.fn(started, release, out)

@jobpool.job(name="chunkapp.observe", store_result=True)   # no chunk= of its own
def observe(url):
    store = jobpool.connect(url)
    try:
        return [j["id"] for j in store.list_jobs(status="running", name="chunkapp.observe")]
    finally:
        store.close()
"""


def test_a_stop_gives_back_the_rows_of_a_chunk_that_have_not_started(store, app, tmp_path):
    started, release, out = tmp_path / "started", tmp_path / "release", tmp_path / "ran.txt"
    ids = [store.enqueue("chunkapp.wait", str(started), str(release), str(out)).id
           for _ in range(3)]
    pool = app.spawn("--procs", "1", "--no-dashboard", "--drain", "60")
    wait_for(started.exists, timeout=60)
    pool.send_signal(signal.SIGTERM)
    # R25, R63: the rows not started are back in line at once, their attempts given
    # back, while the first one drains.
    wait_for(lambda: all(store.get(i)["status"] == "ready" for i in ids[1:]), timeout=60)
    release.write_text("go")
    assert pool.wait(60) == 0
    assert store.get(ids[0])["status"] == "done"
    for job_id in ids[1:]:
        row = store.get(job_id)
        assert (row["status"], row["attempts"], row["lease_owner"]) == ("ready", 0, None)
        assert "chunk ended early (the pool is stopping)" in store.attempts(job_id)[0]["error"]
    assert _ran(out) == ids[:1]


def _reads_a_pipe(pid: int) -> bool:
    """Whether the process is asleep in a read of a pipe: a slot's child after its
    answer is written, waiting for its next job (the jobs here only sleep)."""
    with open(f"/proc/{pid}/wchan") as fh:
        return fh.read().endswith(("pipe_read", "pipe_wait"))  # kernels name it either way


@pytest.mark.parametrize("name", ["chunkapp.wait", "chunkapp.gate"])
def test_a_job_sent_to_a_child_already_gone_is_given_back_not_charged_a_crash(store, app,
                                                                              tmp_path, name):
    """R63, R19: a child answered its job (a row of its chunk, or a job of its own) and
    was killed from outside (the OOM killer, an operator) before the pool sent it the
    next one. That job never reached it, so it never started: it goes back in line
    with its attempt. It was settled as the crash of a child that never ran it, its
    attempt and a crash spent (a job on its last attempt went dead without running)."""
    started, release, out = tmp_path / "started", tmp_path / "release", tmp_path / "ran.txt"
    ids = [store.enqueue(name, str(started), str(release), str(out)).id for _ in range(2)]
    pool = app.spawn("--procs", "1", "--no-dashboard")
    try:
        child = int(wait_for(lambda: started.exists() and started.read_text(), timeout=60))
        # The pool frozen, the first row ends and its child answers, then waits for the
        # next row asleep; killed then, it stays unreaped until the pool runs again,
        # which finds the answer and the exit at once.
        os.kill(pool.pid, signal.SIGSTOP)
        try:
            release.write_text("go")
            wait_for(lambda: _ran(out) == ids[:1], timeout=60)
            wait_for(lambda: _reads_a_pipe(child), timeout=60)  # answered, back in its read
            os.kill(child, signal.SIGKILL)
            wait_for(lambda: process_state(child) == "Z", timeout=60)
        finally:
            os.kill(pool.pid, signal.SIGCONT)
        wait_for(lambda: store.get(ids[1])["status"] == "done", timeout=60)
    finally:
        pool.send_signal(signal.SIGTERM)
        pool.wait(60)
    row = store.get(ids[1])
    assert (row["attempts"], row["crashes"]) == (1, 0), row
    # The chunk's next row was written to the gone child at once, and given back. A job
    # of its own is claimed by a turn: the pool has mostly read the exit by then and
    # sends it nowhere, or (a turn in flight on PostgreSQL, R66) sends it and gives it
    # back; never a crash (the pump's road: test_pump.py).
    outcomes = [a["outcome"] for a in store.attempts(ids[1])]
    assert outcomes in ([["unstarted", "done"]] if name == "chunkapp.wait"
                        else [["done"], ["unstarted", "done"]]), outcomes
    assert _ran(out) == ids


def test_a_cancel_ends_a_chunk_early_or_takes_a_row_out_of_it(store, app, tmp_path):
    started, release, out = tmp_path / "started", tmp_path / "release", tmp_path / "ran.txt"
    ids = [store.enqueue("chunkapp.wait", str(started), str(release), str(out)).id
           for _ in range(5)]
    pool = app.spawn("--procs", "1", "--no-dashboard")
    wait_for(started.exists, timeout=60)
    # A row waiting its turn in the chunk is cancelled alone (R31): dead, never run.
    app.cli("jobs", "cancel", str(ids[2]), "--db", str(app.db), check=True)
    wait_for(lambda: store.get(ids[2])["status"] == "dead", timeout=60)
    # The running row cancelled: its child is killed, and the chunk's other row, not
    # started, is given back with its attempt (R63) and runs later.
    app.cli("jobs", "cancel", str(ids[0]), "--db", str(app.db), check=True)
    wait_for(lambda: store.get(ids[0])["status"] == "dead", timeout=60)
    release.write_text("go")
    wait_for(lambda: all(store.get(i)["status"] in ("done", "dead") for i in ids), timeout=60)
    pool.send_signal(signal.SIGTERM)
    assert pool.wait(60) == 0
    rows = {i: store.get(i) for i in ids}
    assert [rows[i]["status"] for i in ids] == ["dead", "done", "dead", "done", "done"]
    assert rows[ids[0]]["last_error"] == rows[ids[2]]["last_error"] == "cancelled"
    assert [a["outcome"] for a in store.attempts(ids[2])] == ["cancelled"]
    assert [a["outcome"] for a in store.attempts(ids[1])] == ["unstarted", "done"]
    assert rows[ids[1]]["attempts"] == 1
    assert sorted(_ran(out)) == [ids[1], ids[3], ids[4]]


def test_a_pool_chunks_a_name_by_its_setting_and_refuses_a_bad_one(store, app, where):
    # R63: --chunk NAME=N, for a job declared without chunk= (or to change its own).
    handles = [store.enqueue("chunkapp.observe", where) for _ in range(5)]
    app.start("--procs", "1", "--chunk", "chunkapp.observe=3", "-q", "--no-dashboard")
    ids = [h.id for h in handles]
    seen = [h.result(timeout=0) for h in handles]
    # Two chunks, [1st-3rd] and [4th, 5th]: each row saw the rows after it in its chunk
    # held (and those before it, until their settle), none of the other chunk.
    for position, job_id in enumerate(ids):
        chunk = ids[:3] if position < 3 else ids[3:]
        assert set(chunk[chunk.index(job_id):]) <= set(seen[position]) <= set(chunk)
    for bad, said in (("chunkapp.observe=0", "chunkapp.observe: chunk must be a whole number "
                                             "from 1 to 1000, not 0"),
                      ("chunkapp.observe", "expected NAME=N, not 'chunkapp.observe'"),
                      ("other.name=4", "--chunk other.name=4: no job named 'other.name' is "
                                       f"registered by --app {app.module}")):
        refused = app.cli("start", "--app", app.module, "--db", str(app.dir / "new.db"),
                          "--burst", "--chunk", bad, "-q", "--no-dashboard")
        assert refused.returncode != 0 and said in refused.stderr, refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1  # one line, no traceback
        assert not list(app.dir.glob("new.db*"))  # refused before any store was made
    # Without --app no job is registered: the refusal says where the name would come from.
    refused = app.cli("start", "--db", str(app.dir / "new.db"), "--burst", "--chunk",
                      "chunkapp.observe=3", "-q", "--no-dashboard")
    assert refused.returncode != 0 and refused.stderr.strip().endswith(
        "--chunk chunkapp.observe=3: no job named 'chunkapp.observe' is registered (add --app)"
    ), refused.stderr
    assert not list(app.dir.glob("new.db*"))


def test_a_recycled_child_ends_its_chunk_and_gives_back_the_rest(store, app, where):
    # R63: a child that retires after its job (--max-tasks-per-child) takes no more rows.
    ids = [store.enqueue("chunkapp.observe", where).id for _ in range(4)]
    app.start("--procs", "1", "--chunk", "chunkapp.observe=3", "--max-tasks-per-child", "2",
              "-q", "--no-dashboard")
    rows = [store.get(i) for i in ids]
    assert [(r["status"], r["attempts"]) for r in rows] == [("done", 1)] * 4
    log = store.attempts(ids[2])
    assert [a["outcome"] for a in log] == ["unstarted", "done"]
    assert "its chunk ended early (its child exited)" in log[0]["error"]


@jobpool.job(name="chunk.limited", chunk=8, max_running=2, timeout=TIMEOUT, store_result=True)
def limited(url):
    return _observe(url)["running"]


@jobpool.job(name="chunk.capped", queue="capped", chunk=8, timeout=TIMEOUT, store_result=True)
def capped(url):
    return _observe(url)["running"]


def test_every_row_of_a_chunk_counts_as_running_for_limits(store, where):
    # R64 with R35: a chunk never takes a limited name or a capped queue past its cap.
    store.limits.set_queue("capped", 3)
    named = [store.enqueue("chunk.limited", where) for _ in range(10)]
    queued = [store.enqueue("chunk.capped", where) for _ in range(10)]
    for name, handles, cap in (("chunk.limited", named, 2), ("chunk.capped", queued, 3)):
        pool = _pool(where, name, procs=4)
        assert pool.run() == 0
        # Each row saw how many of its name ran (or were held by a chunk) at its start.
        most = max(len(h.result(timeout=0)) for h in handles)
        assert 1 <= most <= cap


@pytest.mark.parametrize("bad", [0, -1, 1001, 2.5, "4", True, None])
def test_a_bad_chunk_is_refused_naming_the_value(bad):
    with pytest.raises(RegistryError) as caught:
        jobpool.job(name="chunk.bad", chunk=bad)(lambda: None)
    assert str(caught.value).startswith(f"job chunk.bad: chunk must be a whole number "
                                        f"from 1 to 1000, not {bad!r} (")  # (where declared)
    assert jobpool.jobs.lookup("chunk.bad") is None  # nothing registered
