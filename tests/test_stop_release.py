"""R25, R19a: what a graceful stop that outlasts its drain says, and what the attempt it
cut short cost. A job still running when the drain ends is given back, not crashed:
its release is logged as a release with why (no ``child_died``), the pool names what
it gave back as it exits, and the attempt's CPU is that attempt's, not the lifetime
of the child that ran earlier jobs."""
from __future__ import annotations

import signal

from .conftest import wait_for

APP = """
import os, time
from pathlib import Path
from jobpool import job

HERE = Path(__file__).parent

@job(name="stop.burn")
def burn(seconds):
    # CPU, not wall time: the same amount on a loaded machine, only slower.
    start = time.process_time()
    while time.process_time() - start < seconds:
        pass

@job(name="stop.sleep", timeout=300)
def sleep_long():
    (HERE / "sleeping").write_text(str(os.getpid()))
    time.sleep(300)
"""


def test_a_job_outlasting_the_drain_is_released_said_so_and_charged_its_own_cpu(make_any_app):
    app = make_any_app(APP)
    store = app.store()
    burnt = store.enqueue("stop.burn", 1.5).id
    pool = app.spawn("--procs", "1", "--drain", "1", "--no-dashboard")
    wait_for(lambda: store.get(burnt)["status"] == "done", timeout=60)
    sleeping = store.enqueue("stop.sleep").id  # the same child runs it (one slot)
    wait_for(lambda: (app.dir / "sleeping").exists(), timeout=30)
    pool.send_signal(signal.SIGINT)
    _, stderr = pool.communicate(timeout=60)
    assert pool.returncode == 0, stderr
    row = store.get(sleeping)
    assert (row["status"], row["attempts"]) == ("ready", 1), row
    # Logged as the release it is, with why; no child "died".
    assert "child_died" not in stderr, stderr
    assert "job_released" in stderr and "still running when the 1 s drain ended" in stderr, stderr
    # Named once as the pool exits.
    assert stderr.count("given back to the queue") == 1, stderr
    assert f"({sleeping})" in stderr, stderr
    # R19a: the released attempt slept; the child's 1.5 s of burning belong to the first job.
    (burn_attempt,) = store.attempts(burnt)
    (released,) = store.attempts(sleeping)
    assert burn_attempt["cpu_s"] >= 1.4, burn_attempt
    assert released["cpu_s"] is not None and released["cpu_s"] < 0.7, released
