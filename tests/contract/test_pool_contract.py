"""A whole pool, driven in this process, over every store: forked children run the
jobs, the supervisor settles and claims through the store's claimer (R6-R13)."""
from __future__ import annotations

from pathlib import Path

import jobpool
from jobpool.config import PoolConfig
from jobpool.supervisor import Supervisor


@jobpool.job(name="cp.write")
def write(path, value):
    with open(path, "a") as fh:
        fh.write(f"{value}\n")


@jobpool.job(name="cp.fails_once", backoff_base=0.0)
def fails_once(marker):
    path = Path(marker)
    if not path.exists():
        path.write_text("x")
        raise RuntimeError("first time")


def test_a_burst_pool_drains_the_store_running_each_job_once(store_url, tmp_path):
    out = tmp_path / "out.txt"
    store = jobpool.connect(store_url)
    try:
        store.enqueue_many("cp.write", [(str(out), i) for i in range(40)])
        flaky = store.enqueue("cp.fails_once", str(tmp_path / "failed")).id
        chained = store.enqueue_with("cp.write", args=(str(out), "first"),
                                     then=[jobpool.Signature("cp.write", (str(out), "second"))]).id
        config = PoolConfig(db=store_url, procs=2, burst=True, names=("cp.write", "cp.fails_once"),
                            poll_interval=0.05)
        pool = Supervisor(config)
        assert pool.run() == 0
        lines = out.read_text().split()
        assert sorted(lines) == sorted([str(i) for i in range(40)] + ["first", "second"])
        assert lines.index("first") < lines.index("second")  # R12: in order
        stats = store.stats()
        assert (stats["ready"], stats["running"], stats["done"], stats["dead"]) == (0, 0, 43, 0)
        assert [a["outcome"] for a in store.attempts(flaky)] == ["error", "done"]
        assert [j["status"] for j in store.list_jobs(chain=chained)] == ["done", "done"]
        assert pool.counters["completed"] == 43 and pool.counters["retried"] == 1
        assert store.pools() == []  # it left the pools table as it stopped
    finally:
        store.close()
