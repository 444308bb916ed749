"""``--coalesce-us``: a settle held while other children still run, so their outcomes
share one store transaction (R6a; the compiled-scheduler issue: more jobs per
transaction without claiming ahead, R6). Held at most the window, never once no other
child runs, nor once half the slots wait on it. These pools run the pump (R68), which
holds as the general loop does; tests/test_pump.py holds turns in both pumps."""
from __future__ import annotations

import pytest

from .conftest import wait_for

#: Each pool runs both ways: through the pump (R68), and through the general loop alone.
LOOPS = pytest.mark.parametrize("loop", [(), ("--no-pump",)], ids=["pump", "general loop"])

APP = """
import time
from pathlib import Path
from jobpool import job

HERE = Path(__file__).parent

@job(name="t.first")
def first(flag):
    (HERE / flag).write_text("go")

@job(name="t.after")
def after(flag):
    # Ends just after t.first: when the file it writes appears.
    deadline = time.time() + 60
    while not (HERE / flag).exists() and time.time() < deadline:
        time.sleep(0.002)

@job(name="t.blocked")
def blocked(flag):
    deadline = time.time() + 60
    while not (HERE / flag).exists() and time.time() < deadline:
        time.sleep(0.01)
"""


@LOOPS
def test_outcomes_that_come_within_the_window_settle_in_one_transaction(make_app, loop):
    app = make_app(APP)
    store = app.store()
    a = store.enqueue("t.after", "flag").id
    b = store.enqueue("t.first", "flag").id
    app.start("--procs", "4", "--coalesce-us", "1000000", *loop)
    ends = {a: store.attempts(a)[-1]["ended_at"], b: store.attempts(b)[-1]["ended_at"]}
    # One turn settled both: one transaction, one clock reading.
    assert ends[a] == ends[b], ends
    assert store.stats()["done"] == 2


def _quick_beside_a_blocked_job(make_app, *start: str) -> float:
    """A quick job run while another child stays blocked until the test lets it go:
    the seconds the quick job's attempt took from its claim to its settle."""
    app = make_app(APP)
    store = app.store()
    blocked = store.enqueue("t.blocked", "release").id
    quick = store.enqueue("t.first", "unrelated").id
    pool = app.spawn("--burst", *start)
    wait_for(lambda: store.get(quick)["status"] == "done", timeout=30)
    assert store.get(blocked)["status"] == "running"
    log = store.attempts(quick)[-1]
    (app.dir / "release").write_text("go")
    assert pool.wait(timeout=60) == 0
    assert store.get(blocked)["status"] == "done"
    return log["ended_at"] - log["started_at"]


@LOOPS
def test_a_held_outcome_waits_no_longer_than_the_window(make_app, loop):
    # The other child runs on: the quick job is settled anyway, once the window passed.
    assert _quick_beside_a_blocked_job(make_app, "--procs", "4", "--coalesce-us", "50000",
                                       *loop) >= 0.05


def test_the_window_is_refused_outside_its_bounds_in_one_line(make_app):
    app = make_app(APP)
    for value, words in (("-1", "expected a whole number of 0 or more"),
                         ("2000000", "--coalesce-us must be from 0 to 1000000")):
        result = app.cli("start", "--app", app.module, "--db", str(app.db), "--burst",
                         "--coalesce-us", value)
        assert result.returncode != 0
        assert words in result.stderr
        assert "Traceback" not in result.stderr


@LOOPS
def test_no_settle_is_held_once_half_the_slots_wait_on_it(make_app, loop):
    # Two slots: the first outcome frees half the pool, so it is settled at once even
    # though the other child runs on and the window is long (not held for its 1 s).
    assert _quick_beside_a_blocked_job(make_app, "--procs", "2", "--coalesce-us", "1000000",
                                       *loop) < 0.9


def test_a_paused_store_ends_a_hold_and_the_loop_sleeps_out_the_pause(tmp_path):
    """R26 with R6a: a turn held for the window when the store pauses (a heartbeat
    failed meanwhile, say) cannot run before the pause ends, so the general loop waits
    for the pause, not for the window that ended in it (which it took for due at once,
    and spun on until the pause was over)."""
    import jobpool
    from jobpool.config import PoolConfig
    from jobpool.lifecycle import DONE, Outcome
    from jobpool.supervisor import Supervisor
    from jobpool.supervisor.state import Finished

    path = tmp_path / "jobpool.db"
    jobpool.connect(path).close()
    pool = Supervisor(PoolConfig(db=str(path), procs=4, names=("t.first",), coalesce=0.05,
                                 poll_interval=5.0, pump=False))
    try:
        now = pool.clock()
        # Nothing else comes due for a while: the poll, the heartbeat.
        pool._next_poll = pool.operations.next_heartbeat = now + 30.0
        pool.state.pending = [Finished(Outcome(1, 1, DONE), 0.0, "default")]
        pool.state.hold_until = now - 0.01  # the window ended
        pool._store_pause_until = now + 2.0  # in the store's pause
        assert pool._send_turn(now) is False  # no turn while paused
        assert pool.state.hold_until is None
        assert pool._wait_time(now) >= 1.9
    finally:
        pool.core.close()
        pool.store.close()
