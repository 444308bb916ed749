"""R40: a job's whole process tree is its own. Whatever an attempt started (a plain
child, a ``setsid`` daemon) ends with the attempt: on success, timeout, crash, cancel
or stop, and is never left running under PID 1."""
from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest

from .conftest import alive, wait_for

APP = """
import os, signal, subprocess, time
from pathlib import Path
from jobpool import job

HERE = Path(__file__).parent

def spawn(tag):
    plain = subprocess.Popen(["sleep", "300"])
    daemon = subprocess.Popen(["sleep", "301"], start_new_session=True)
    # A grandchild whose parent exits at once: reparented (to the subreaper, not PID 1).
    orphan = subprocess.Popen(["sh", "-c", "setsid sleep 302 & echo $!"], stdout=subprocess.PIPE,
                              text=True)
    orphan_pid = int(orphan.stdout.readline())
    orphan.wait()
    with open(HERE / f"{tag}.pids", "w") as fh:
        fh.write(" ".join(str(p) for p in (plain.pid, daemon.pid, orphan_pid)))

@job(name="t.leaves", max_attempts=1)
def leaves(tag):
    spawn(tag)

@job(name="t.hangs", max_attempts=1, timeout=1.5)
def hangs(tag):
    spawn(tag)
    time.sleep(60)

@job(name="t.crashes", max_attempts=1)
def crashes(tag):
    spawn(tag)
    os.kill(os.getpid(), signal.SIGKILL)

@job(name="t.waits", max_attempts=1, timeout=120)
def waits(tag):
    spawn(tag)
    while not (HERE / "never").exists():
        time.sleep(0.05)
"""


def _pids(app, tag) -> list[int]:
    return [int(p) for p in (app.dir / f"{tag}.pids").read_text().split()]


@pytest.fixture
def app(make_app):
    return make_app(APP)


@pytest.mark.parametrize("name, outcome", [
    ("t.leaves", "done"), ("t.hangs", "dead"), ("t.crashes", "dead"),
])
def test_every_process_an_attempt_started_ends_with_it(app, name, outcome):
    job_id = app.store().enqueue(name, "x").id
    result = app.start("--procs", "1", "--log-format", "json")
    assert app.rows("SELECT status FROM jobs WHERE id = ?", (job_id,)) == [{"status": outcome}]
    pids = _pids(app, "x")
    assert len(pids) == 3
    wait_for(lambda: not any(alive(p) for p in pids), timeout=10)
    events = [json.loads(line) for line in result.stderr.splitlines() if line.startswith("{")]
    killed = sum(e["processes"] for e in events if e["event"] == "strays_killed")
    assert killed == 3, result.stderr
    # The attempt's forensics count them.
    assert [a["strays"] for a in app.store().attempts(job_id)] == [3]
    shown = app.cli("jobs", "show", str(job_id), "--db", str(app.db), check=True).stdout
    assert "killed" in shown


def test_a_graceful_stop_and_a_cancel_end_the_jobs_processes_too(app):
    store = app.store()
    first = store.enqueue("t.waits", "a").id
    pool = app.spawn("--procs", "1", "--drain", "0.5")
    wait_for(lambda: (app.dir / "a.pids").exists(), timeout=30)
    store.cancel(first)
    wait_for(lambda: app.rows("SELECT status FROM jobs WHERE id = ?", (first,))[0]["status"] == "dead",
             timeout=30)
    wait_for(lambda: not any(alive(p) for p in _pids(app, "a")), timeout=10)
    store.enqueue("t.waits", "b")
    wait_for(lambda: (app.dir / "b.pids").exists(), timeout=30)
    pool.send_signal(signal.SIGTERM)
    assert pool.wait(timeout=30) == 0, pool.stderr.read()
    wait_for(lambda: not any(alive(p) for p in _pids(app, "b")), timeout=10)


def test_a_finished_subprocess_the_job_never_waited_for_is_reaped_not_counted(make_app):
    app = make_app(APP + '''
@job(name="t.forgets", max_attempts=1)
def forgets():
    import subprocess
    subprocess.Popen(["true"]).pid  # never waited for: a zombie once it exits
    time.sleep(0.3)
''')
    job_id = app.store().enqueue("t.forgets").id
    result = app.start("--procs", "1", "--log-format", "json")
    assert app.rows("SELECT status FROM jobs WHERE id = ?", (job_id,)) == [{"status": "done"}]
    assert '"event": "strays_killed"' not in result.stderr
    assert [a["strays"] for a in app.store().attempts(job_id)] == [None]


FORKING_APP = """
import os, sys
from pathlib import Path
from jobpool import job

HERE = Path(__file__).parent

@job(name="t.forks", max_attempts=3, store_result=True)
def forks(how):
    pid = os.fork()
    if pid == 0:
        # The copy the fork made comes back out of the job's function.
        if how == "exit0":
            sys.exit(0)
        if how == "exit3":
            sys.exit(3)
        if how == "raise":
            raise ValueError("raised in the copy")
        return "the copy's result"
    _pid, status = os.waitpid(pid, 0)
    return {"copy": os.waitstatus_to_exitcode(status), "pid": os.getpid()}

@job(name="t.mark")
def mark(i):
    with open(HERE / "marks", "a") as fh:
        fh.write(f"{i} {os.getpid()}\\n")
"""

FORK_ENDINGS = {"exit0": 0, "exit3": 3, "raise": 1, "return": 0}


def test_a_process_the_job_forked_that_comes_back_out_of_it_ends_there(make_app):
    """R40: a fork whose copy returns from the job's function, or raises out of it
    (``sys.exit()`` included), ends there with the status a program would. Before,
    the copy went on into the child's loop: it reported its ``SystemExit`` as the
    attempt's outcome while the job itself was still running (a job that succeeded
    was dead, or retried beside itself), and read the next job off the same pipe."""
    app = make_app(FORKING_APP)
    store = app.store()
    forked, marks = {}, 0
    for how in FORK_ENDINGS:
        forked[how] = store.enqueue("t.forks", how)
        for _ in range(3):
            store.enqueue("t.mark", marks)
            marks += 1
    result = app.start("--procs", "1", "-q")
    assert result.returncode == 0, result.stderr
    pids = set()
    for how, handle in forked.items():
        row = store.get(handle.id)
        assert (row["status"], row["attempts"]) == ("done", 1), (how, row)
        got = handle.result(timeout=5)
        assert got["copy"] == FORK_ENDINGS[how], how
        pids.add(got["pid"])
    lines = (app.dir / "marks").read_text().split()
    assert sorted(int(i) for i in lines[::2]) == list(range(marks))  # each ran once
    pids.update(int(p) for p in lines[1::2])
    assert len(pids) == 1  # one child ran everything: none was replaced
    assert "ValueError: raised in the copy" in result.stderr  # the copy's own traceback


def test_a_fork_made_by_a_middleware_or_a_child_start_hook_that_comes_back_ends_there(make_app):
    """R40's siblings: a fork made around the job's body (a middleware's ``after``) or
    before any job (an ``on_child_start`` hook) whose copy returns into the child's
    loop ends there too."""
    app = make_app(FORKING_APP + """
import time
import jobpool

class Reporter(jobpool.Middleware):
    def after(self, info, result):
        if os.fork():
            time.sleep(0.2)  # both return, the copy first

def start():
    if os.fork():
        time.sleep(0.3)  # both return, the copy first: it would read the first job

jobpool.add_middleware(Reporter())
jobpool.on_child_start(start)
""")
    store = app.store()
    for i in range(6):
        store.enqueue("t.mark", i)
    result = app.start("--procs", "1", "-q")
    assert result.returncode == 0, result.stderr
    lines = (app.dir / "marks").read_text().split()
    assert sorted(int(i) for i in lines[::2]) == list(range(6))  # each ran once
    assert len(set(lines[1::2])) == 1  # in one child
    assert [store.get(i)["attempts"] for i in range(1, 7)] == [1] * 6


def test_a_fork_that_comes_back_out_of_a_job_in_testing_drain_ends_there(make_app):
    """R40 in ``jobpool.testing.drain`` (the caller's own process): the copy does not
    go on with the caller's program."""
    app = make_app(FORKING_APP)
    app.store().enqueue("t.forks", "return")
    (app.dir / "drain_it.py").write_text(
        "import jobpool, app_module\n"
        "from jobpool import testing\n"
        f"drained = testing.drain(jobpool.connect({str(app.db)!r}))\n"
        "print('after the drain', drained.done, flush=True)\n".replace("app_module", app.module))
    ran = subprocess.run([sys.executable, "drain_it.py"], cwd=app.dir, env=app.env,
                         capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.splitlines() == ["after the drain 1"]


POOLS_APP = """
import multiprocessing, os
from jobpool import job, proctree

def square(x):
    return x * x

@job(name="t.pool", store_result=True, max_attempts=1)
def pool(method):
    with multiprocessing.get_context(method).Pool(2) as workers:
        squares = workers.map(square, range(4))
    # Read as the pool reads them (a thread of the pool just joined may end meanwhile).
    return {"squares": squares, "helpers": proctree.children(os.getpid())}

@job(name="t.left_running", max_attempts=1)
def left_running():
    import time
    # Started by the fork server, never joined: the job's one stray.
    multiprocessing.get_context("forkserver").Process(target=time.sleep, args=(60,)).start()
"""


@pytest.mark.parametrize("recycle", [False, True], ids=["one child", "a child a job"])
def test_the_helpers_python_keeps_for_a_child_serve_its_next_jobs_too(make_app, recycle):
    """R40's amendment: the fork server and the resource tracker that a job's
    ``multiprocessing`` pool started are the child's, spared after the job (killed,
    the next job's forkserver pool failed with "ChildProcessError: [Errno 10] No child
    processes", and a spawn pool's tracker "died unexpectedly"), and ended with the
    child. What a job leaves running below them is still its stray."""
    app = make_app(POOLS_APP)
    store = app.store()
    jobs = [store.enqueue("t.pool", method)
            for method in ("forkserver", "forkserver", "spawn", "spawn")]
    left_running = store.enqueue("t.left_running").id
    jobs.append(store.enqueue("t.pool", "forkserver"))
    extra = ("--max-tasks-per-child", "1") if recycle else ()
    result = app.start("--procs", "1", "--log-format", "json", *extra)
    assert result.returncode == 0, result.stderr
    helpers = set()
    for handle in jobs:
        got = handle.result(timeout=5)
        assert got["squares"] == [0, 1, 4, 9]
        attempts = store.attempts(handle.id)
        assert [a["strays"] or 0 for a in attempts] == [0], (handle.id, attempts, result.stderr)
        helpers.update(got["helpers"])
    attempts = store.attempts(left_running)
    assert [a["strays"] for a in attempts] == [1], (attempts, result.stderr)  # its process
    assert store.get(left_running)["status"] == "done"
    events = [json.loads(line) for line in result.stderr.splitlines() if line.startswith("{")]
    assert [e for e in events if e["event"] == "strays_killed"
            and e.get("job_id") != left_running] == [], result.stderr
    assert "died unexpectedly" not in result.stderr
    # They ended with their child.
    assert helpers and not [pid for pid in helpers if alive(pid)], (helpers, result.stderr)
