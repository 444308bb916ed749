"""R27, R25: closing the terminal a foreground pool runs on drains and stops it; the
drain survives every write to the gone terminal failing; under ``nohup`` the pool
outlives the terminal. Each pool runs on a real pseudo-terminal whose master end
the test closes, as a terminal emulator does when its window is closed."""
from __future__ import annotations

import os
import signal
import time

from .conftest import wait_for
from .test_dashboard_live import Terminal
from .test_operations import _alive

APP = """
import os, sys, time
from pathlib import Path
from jobpool import job

@job(name="hup.slow", timeout=120)
def slow(marks, i):
    Path(marks, f"started-{i}").write_text(str(os.getpid()))
    deadline = time.monotonic() + 60
    while not Path(marks, "go").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    # Written after the terminal hung up: EIO, unless the pool moved this child off it.
    print("job", i, "finished its work", flush=True)
    print("and said so on stderr", file=sys.stderr, flush=True)
    Path(marks, f"finished-{i}").write_text("x")
    return i

@job(name="hup.quick")
def quick(marks, i):
    print("quick", i, flush=True)
    Path(marks, f"quick-{i}").write_text("x")
"""


def _exit_code(pid: int, timeout: float) -> int | None:
    """The exit code of ``pid`` once it exits within ``timeout``; None if still running."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.05)
    return None


def _hang_up(term: Terminal) -> None:
    """Close the terminal's master end: the kernel hangs the terminal up."""
    os.close(term.fd)
    term.fd = os.open(os.devnull, os.O_RDONLY)  # for Terminal.close() to close


def test_closing_the_terminal_drains_and_stops_a_foreground_pool(make_app, tmp_path):
    app = make_app(APP)
    marks = tmp_path / "marks"
    marks.mkdir()
    store = app.store()
    first = store.enqueue("hup.slow", str(marks), 0).id
    waiting = [store.enqueue("hup.slow", str(marks), i).id for i in (1, 2, 3)]
    term = Terminal(app, "start", "--app", app.module, "--db", str(app.db), "--procs", "1",
                    "--drain", "60")
    try:
        term.read_until(["hup.slow"])  # the dashboard is up
        wait_for(lambda: (marks / "started-0").exists(), timeout=30)
        child = int((marks / "started-0").read_text())
        # When the terminal goes away with a job running
        _hang_up(term)
        # the pool stops claiming and waits for the running job (its drain):
        wait_for(lambda: _draining(store), timeout=30)
        assert store.get(first)["status"] == "running"
        (marks / "go").write_text("x")
        # the job's prints to the gone terminal do not fail it, and the pool exits.
        code = _exit_code(term.pid, 60)
        assert code is not None, "the pool kept running after its terminal closed"
        term.status = 0
        assert code == 0
    finally:
        term.close()
    assert (marks / "finished-0").exists()
    row = store.get(first)
    assert (row["status"], row["attempts"]) == ("done", 1), row
    # Nothing else was started, nothing lost: the rest wait for the next pool.
    assert [store.get(i)["status"] for i in waiting] == ["ready"] * 3
    assert not any((marks / f"started-{i}").exists() for i in (1, 2, 3))
    assert not _alive(child)
    assert store.pools() == []


def _draining(store) -> bool:
    """True once the pool's row says it is stopping (R25: it has seen the hang-up)."""
    return any("stopping" in p["counters"] for p in store.pools())


def test_a_pool_started_under_nohup_outlives_its_terminal(make_app, tmp_path):
    # nohup ignores SIGHUP and sends the output to nohup.out: the pool keeps it ignored.
    app = make_app(APP)
    marks = tmp_path / "marks"
    marks.mkdir()
    store = app.store()
    term = Terminal(app, "start", "--app", app.module, "--db", str(app.db), "--procs", "1",
                    prefix=("nohup",))
    try:
        wait_for(lambda: store.pools(), timeout=30)
        _hang_up(term)
        # The pool keeps working after its terminal is gone.
        for i in range(3):
            store.enqueue("hup.quick", str(marks), i)
        wait_for(lambda: store.stats()["done"] == 3, timeout=30)
        assert _alive(term.pid)
        os.kill(term.pid, signal.SIGTERM)
        code = _exit_code(term.pid, 30)
        term.status = 0
        assert code == 0
    finally:
        term.close()
    assert "quick 2" in (app.dir / "nohup.out").read_text()
