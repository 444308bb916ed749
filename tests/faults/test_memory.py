"""Scenario 5 (R19): a job past its memory limit is killed; the supervisor's RSS stays put."""
from __future__ import annotations

import re
import time

from .conftest import record_figure, stop_pool, vm_rss_kib, wait_for

LIMIT_MIB = 100


def test_a_memory_hog_is_killed_naming_the_limit_and_the_supervisor_is_untouched(fault_app):
    app = fault_app
    store = app.store()
    pool = app.spawn_pool("--procs", "2")
    app.wait_idle_pool(pool, 2)
    time.sleep(0.5)
    rss_before = vm_rss_kib(pool.pid)
    hogs = [store.enqueue("f.hog").id for _ in range(3)]
    others = [store.enqueue("f.work", i).id for i in range(5)]
    wait_for(lambda: app.count("status IN ('done', 'dead')") == len(hogs) + len(others),
             timeout=60, interval=0.05)
    time.sleep(0.3)
    rss_after = vm_rss_kib(pool.pid)
    assert pool.poll() is None
    stop_pool(pool)

    peaks, walls, logged = [], [], 0
    for job_id in hogs:
        job = store.get(job_id)
        (attempt,) = store.attempts(job_id)
        assert job["status"] == "dead"
        assert job["last_error"].startswith(f"child killed: memory limit {LIMIT_MIB} MiB exceeded")
        assert "memory" in attempt["error"]
        assert (attempt["outcome"], attempt["exit_status"]) == ("crash", "SIGKILL")
        # The sampled RSS that tripped the limit is in the reason; the attempt's peak
        # RSS comes from wait4 on the killed child (R19a).
        sampled = re.search(r"\(RSS (\d+) MiB\)", job["last_error"])
        assert sampled, job["last_error"]
        peaks.append(int(sampled.group(1)))
        logged += attempt["peak_rss"] is not None
        walls.append(attempt["ended_at"] - attempt["started_at"])
    assert [store.get(i)["status"] for i in others] == ["done"] * len(others)
    growth_mib = (rss_after - rss_before) / 1024
    assert growth_mib < 5, (rss_before, rss_after)
    record_figure(f"5. Memory hog (memory_limit={LIMIT_MIB} MiB, 20 MiB/10 ms)",
                  hogs=len(hogs), killed=len(hogs), reason_names_memory=True,
                  sampled_rss_at_kill_mib=peaks, attempts_with_peak_rss_logged=logged,
                  kill_after_ms=[round(w * 1000) for w in walls],
                  supervisor_rss_before_kib=rss_before, supervisor_rss_after_kib=rss_after,
                  supervisor_rss_growth_mib=round(growth_mib, 2), other_jobs_done=len(others))
