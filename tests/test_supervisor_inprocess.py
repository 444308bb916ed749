"""The supervisor driven in this process, not through a CLI subprocess: the seam that
lets a test set the pool's clock (STYLE habit 4) and read its state directly."""
from __future__ import annotations

import time

import jobpool
from jobpool import jobs
from jobpool.config import PoolConfig
from jobpool.supervisor import Supervisor

DAY = 86_400.0


def test_a_pool_in_process_runs_on_the_clock_it_is_given(tmp_path):
    # Given a job due in an hour by the wall clock
    name = "t.inprocess_clock"
    ran = tmp_path / "ran.txt"

    @jobpool.job(name=name)
    def record(value):
        with open(ran, "a") as fh:
            fh.write(f"{value}\n")

    store = jobpool.connect(tmp_path / "jobpool.db")
    try:
        later = store.enqueue_with(name, args=("later",), delay=3600)
        # When a --burst pool runs here with its clock a day ahead
        config = PoolConfig(db=str(store.path), procs=1, burst=True, names=(name,),
                            poll_interval=0.05)
        pool = Supervisor(config, clock=lambda: time.time() + DAY)
        assert pool.run() == 0
        # Then by its clock the job was due, it ran, and what the pool wrote is dated
        # by its clock, not the host's
        assert ran.read_text() == "later\n"
        row = store.get(later.id)
        assert row["status"] == "done"
        assert row["finished_at"] > time.time() + DAY - 600
        assert pool.counters["completed"] == 1 and pool.counters["claimed"] == 1
    finally:
        store.close()
        jobs.unregister(name)
