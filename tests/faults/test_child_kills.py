"""Scenario 2 (R19, R24a): SIGKILL random children again and again during ~2000 short jobs."""
from __future__ import annotations

import collections
import os
import random
import signal
import time

import pytest

from .conftest import ATTEMPT_LINES, slot_children, fd_count, percentile, record_figure, stop_pool, vm_rss_kib, wait_for

PROCS = 2
JOBS = 2000


@pytest.mark.slow
def test_random_child_kills_lose_nothing_and_slots_refill_fast(fault_app):
    app = fault_app
    pool = app.spawn_pool("--procs", str(PROCS), "-q")
    first = app.wait_idle_pool(pool, PROCS)
    time.sleep(0.5)  # past start-up: connections, checkpointer, wake-up socket all open
    fds_before, rss_before = fd_count(pool.pid), vm_rss_kib(pool.pid)
    app.store().enqueue_many("f.work", [(i, 0.002) for i in range(JOBS)])

    rng = random.Random(2024)
    kills: list[tuple[float, int, int]] = []  # (time, killed pid, its replacement)
    known = set(first)
    deadline = time.monotonic() + 90
    while app.count("status = 'done'") < JOBS * 0.9 and time.monotonic() < deadline:
        live = {p for p, s in slot_children(pool.pid).items() if s not in ("Z", "X")}
        if not live:
            time.sleep(0.002)
            continue
        victim = rng.choice(sorted(live))
        t = time.time()
        try:
            os.kill(victim, signal.SIGKILL)
        except ProcessLookupError:
            continue
        known |= live

        def replacement(known=known):
            fresh = {p for p, s in slot_children(pool.pid).items() if s not in ("Z", "X")} - known
            return min(fresh) if fresh else None
        new = wait_for(replacement, timeout=5, interval=0.002)
        known.add(new)
        kills.append((t, victim, new))
        time.sleep(rng.uniform(0.01, 0.06))
    wait_for(lambda: app.count("status = 'done'") == JOBS, timeout=60, interval=0.05)
    time.sleep(0.5)  # let the loop settle and reap

    kids = slot_children(pool.pid)
    zombies = [p for p, s in kids.items() if s == "Z"]
    fds_after, rss_after = fd_count(pool.pid), vm_rss_kib(pool.pid)
    assert pool.poll() is None, app.log_of(pool)
    assert zombies == []
    assert len(kids) == PROCS
    assert fds_after <= fds_before, (fds_before, fds_after)

    # Refill: kill -> the replacement child's first job (its started_at, set at claim).
    first_start = {r["pid"]: r["first"] for r in app.rows(
        f"SELECT pid, min(started_at) AS first FROM {ATTEMPT_LINES} GROUP BY pid")}
    refill_ms = [(first_start[new] - t) * 1000 for t, _victim, new in kills if new in first_start]
    crash_rows = app.rows(f"SELECT error, exit_status, peak_rss FROM {ATTEMPT_LINES} "
                          "WHERE outcome = 'crash'")
    statuses = dict((r["status"], r["n"]) for r in app.rows(
        "SELECT status, count(*) AS n FROM jobs GROUP BY status"))
    assert statuses == {"done": JOBS}
    assert all(r["error"] == "child killed by SIGKILL" for r in crash_rows)
    extra_runs = app.rows("SELECT sum(attempts - 1) AS n FROM jobs")[0]["n"]
    assert extra_runs == len(crash_rows)  # one re-run per killed attempt, no other
    ends = collections.Counter(a for tag, a, _ in app.effects() if tag == "end")
    assert set(ends) == {str(i) for i in range(JOBS)}
    duplicated = sum(1 for n in ends.values() if n > 1)
    assert duplicated <= len(crash_rows)
    assert len(kills) >= 20
    assert percentile(refill_ms, 50) < 500
    stop_pool(pool)
    record_figure("2. SIGKILL random children during 2000 jobs",
                  procs=PROCS, enqueued=JOBS, completed=statuses.get("done", 0),
                  lost=JOBS - len(ends), child_kills=len(kills),
                  kills_mid_job=len(crash_rows), kills_idle=len(kills) - len(crash_rows),
                  duplicated_side_effects=duplicated,
                  crash_attempts_without_peak_rss=sum(r["peak_rss"] is None for r in crash_rows),
                  refill_ms_p50=round(percentile(refill_ms, 50), 1),
                  refill_ms_p99=round(percentile(refill_ms, 99), 1),
                  refill_ms_max=round(max(refill_ms), 1),
                  zombies=len(zombies), fds_before=fds_before, fds_after=fds_after,
                  supervisor_rss_kib_before=rss_before, supervisor_rss_kib_after=rss_after)


def test_children_dying_together_keep_their_forensics(fault_app):
    app = fault_app
    app.store().enqueue_many("f.die_on_go", [(f"d{i}",) for i in range(4)])
    pool = app.spawn_pool("--procs", "4", "--burst")
    wait_for(lambda: len(list(app.dir.glob("d*.started"))) == 4, timeout=30)
    (app.dir / "die.go").write_text("")
    assert pool.wait(timeout=30) == 0
    log = app.rows(f"SELECT exit_status, peak_rss, cpu_s FROM {ATTEMPT_LINES}")
    assert [a["exit_status"] for a in log] == ["SIGKILL"] * 4
    missing = sum(1 for a in log if a["peak_rss"] is None or a["cpu_s"] is None)
    record_figure("2b. Four children killed at once: forensics kept",
                  children_killed=4, attempts_missing_peak_rss_and_cpu=missing)
    assert missing == 0, log
