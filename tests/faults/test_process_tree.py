"""R40: a job's whole process tree is its own. Whatever an attempt started (a plain
child, a ``setsid`` daemon) ends with the attempt: on success, timeout, crash, cancel
or stop, and is never left running under PID 1."""
from __future__ import annotations

import json
import signal
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
