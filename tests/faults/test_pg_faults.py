"""PostgreSQL under real faults: pools on two "hosts" (distinct host ids) over one
database, a pool SIGKILLed or frozen mid-job, and every jobpool connection
terminated again and again during a drain (R8, R9, R23, R24b, R26, issue 12)."""
from __future__ import annotations

import collections
import os
import signal
import threading
import time

import jobpool

from .conftest import record_figure, stop_pool, wait_for


def _admin():
    import psycopg

    from tests.conftest import PG_URL
    return psycopg.connect(PG_URL, autocommit=True)


def _statuses(store) -> collections.Counter:
    stats = store.stats()
    return collections.Counter({k: stats[k] for k in ("ready", "scheduled", "running", "done",
                                                      "dead")})


def _ends(app) -> collections.Counter:
    return collections.Counter(arg for tag, arg, _pid in app.effects() if tag == "end")


def test_two_hosts_drain_one_queue_running_every_job_once(fault_app, pg_url):
    n = 2000
    store = jobpool.connect(pg_url)
    store.enqueue_many("f.work", [(i,) for i in range(n)])
    pools = [fault_app.spawn_pool("--procs", "2", "--burst", db=pg_url,
                                  env={"JOBPOOL_HOST_ID": host}) for host in ("host-a", "host-b")]
    started = time.monotonic()
    for pool in pools:
        assert pool.wait(timeout=300) == 0, fault_app.log_of(pool)
    seconds = time.monotonic() - started
    ends = _ends(fault_app)
    assert len(ends) == n and max(ends.values()) == 1  # no job's body completed twice
    assert _statuses(store)["done"] == n
    by_owner = collections.Counter(a["owner"].split(":")[0] for job_id in (1, n // 2, n)
                                   for a in store.attempts(job_id))
    with _admin() as admin:
        split = dict(admin.execute(
            # R61: a success's attempt line is in its finished row
            f"SELECT split_part(done_owner, ':', 1), count(*)"
            f"  FROM {pg_url.rsplit('=', 1)[1]}.finished_jobs GROUP BY 1").fetchall())
    assert set(split) == {"host-a", "host-b"} and sum(split.values()) == n, split
    assert by_owner  # every sampled job has its attempt row
    store.close()
    record_figure("P1. Two hosts drain one PostgreSQL queue", jobs=n, seconds=round(seconds, 1),
                  jobs_per_s=round(n / seconds), split=split, completed_twice=0)


def test_a_killed_hosts_jobs_run_elsewhere_long_before_their_leases_expire(fault_app, pg_url):
    # R24b across hosts: judged by its stale heartbeat, not by its process
    store = jobpool.connect(pg_url)
    ids = [h.id for h in store.enqueue_many("f.work", [(i, 60.0) for i in range(2)])]
    doomed = fault_app.spawn_pool("--procs", "2", db=pg_url, env={"JOBPOOL_HOST_ID": "host-a"})
    wait_for(lambda: _statuses(store)["running"] == 2, timeout=60)
    survivor = fault_app.spawn_pool("--procs", "2", "--dead-after", "2", db=pg_url,
                                    env={"JOBPOOL_HOST_ID": "host-b"})
    wait_for(lambda: len(store.pools()) == 2, timeout=60)
    lease = max(store.get(i)["lease_expires_at"] for i in ids)
    doomed.send_signal(signal.SIGKILL)
    doomed.wait()
    killed_at = time.time()
    starts = lambda: [a for a, arg, pid in fault_app.effects() if a == "start"]  # noqa: E731
    wait_for(lambda: len(starts()) == 4, timeout=60)  # both jobs started again, elsewhere
    rerun_after = time.time() - killed_at
    assert rerun_after < lease - killed_at - 60, (rerun_after, lease - killed_at)
    assert [store.get(i)["attempts"] for i in ids] == [2, 2]
    assert "host-a" in store.get(ids[0])["last_error"]  # the reason names the dead pool
    assert stop_pool(survivor) == 0
    store.close()
    record_figure("P2. A host SIGKILLed mid-job: its jobs re-run on another host",
                  jobs=2, rerun_after_s=round(rerun_after, 1),
                  lease_left_s=round(lease - killed_at))


def test_every_connection_terminated_again_and_again_loses_and_doubles_nothing(fault_app, pg_url):
    # R26 and in-doubt claims: whatever the server drops, every job runs once, and a
    # claim whose reply was lost gives its attempt back
    n = 300
    store = jobpool.connect(pg_url)
    # 20 ms of sleep each on two slots: the drain lasts 3 s at least, ten kill rounds
    store.enqueue_many("f.work", [(i, 0.02) for i in range(n)])
    store.close()  # the killer below terminates this test's connections too otherwise
    pool = fault_app.spawn_pool("--procs", "2", "--burst", "--poll-interval", "0.2",
                                "--store-timeout", "600", db=pg_url)
    # The kills start once the pool runs: a connection dropped while it opens its store
    # is an error it reports and exits on (exit 1), not a fault of the drain.
    wait_for(lambda: pool.poll() is not None or "pool_started" in fault_app.log_of(pool),
             timeout=60)
    stop = threading.Event()
    kills = []

    def killer():
        with _admin() as admin:
            while not stop.wait(0.3):
                kills.append(admin.execute(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                    " WHERE application_name LIKE 'jobpool%%' AND pid <> pg_backend_pid()"
                    " AND datname = current_database()"
                ).fetchone()[0])
    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    try:
        assert pool.wait(timeout=300) == 0, fault_app.log_of(pool)
    finally:
        stop.set()
        thread.join()
    store = jobpool.connect(pg_url)
    ends = _ends(fault_app)
    assert len(ends) == n and max(ends.values()) == 1, [k for k, v in ends.items() if v > 1]
    assert _statuses(store)["done"] == n
    with _admin() as admin:
        schema = pg_url.rsplit("=", 1)[1]
        spent = dict(admin.execute(f"SELECT attempts, count(*) FROM {schema}.finished_jobs"
                                   " GROUP BY 1").fetchall())
    assert spent == {1: n}, spent  # no attempt spent by an in-doubt claim
    log = fault_app.log_of(pool)
    store.close()
    assert sum(kills) >= 5, kills  # the connections really were killed, again and again
    record_figure("P3. Every jobpool connection terminated every 0.3 s during a drain",
                  jobs=n, connections_terminated=sum(kills), completed=n, duplicated=0,
                  store_errors=log.count("store_error"),
                  in_doubt_released=log.count("left in doubt"))


def test_a_frozen_host_comes_back_to_find_its_job_done_by_another(fault_app, pg_url):
    # R8, R24b: its late settle is refused; the job is settled done once
    store = jobpool.connect(pg_url)
    job_id = store.enqueue("f.work", 0, 3.0).id
    frozen = fault_app.spawn_pool("--procs", "1", db=pg_url, env={"JOBPOOL_HOST_ID": "host-a"})
    wait_for(lambda: any(t == "start" for t, _a, _p in fault_app.effects()), timeout=60)
    os.kill(frozen.pid, signal.SIGSTOP)  # the supervisor only: its child runs on
    try:
        other = fault_app.spawn_pool("--procs", "1", "--dead-after", "2", db=pg_url,
                                     env={"JOBPOOL_HOST_ID": "host-b"})
        wait_for(lambda: store.get(job_id)["status"] == "done", timeout=60)
    finally:
        os.kill(frozen.pid, signal.SIGCONT)
    # The thawed pool tries to settle its own (late) outcome now, and is refused.
    wait_for(lambda: "job_lease_lost" in fault_app.log_of(frozen), timeout=60)
    assert stop_pool(frozen) == 0 and stop_pool(other) == 0
    row = store.get(job_id)
    assert (row["status"], row["attempts"]) == ("done", 2)
    outcomes = [a["outcome"] for a in store.attempts(job_id)]
    assert outcomes.count("done") == 1, outcomes
    assert "job_lease_lost" in fault_app.log_of(frozen)
    store.close()
    record_figure("P4. A host frozen past dead_after, thawed after another finished its job",
                  done_settles=outcomes.count("done"), attempts=row["attempts"])


def test_a_dropped_connection_is_told_in_the_pools_own_lines_only(fault_app, pg_url):
    # R26, R30: a turn on a terminated connection is one store_error of the pool's;
    # psycopg's own "error ignored terminating <psycopg.Pipeline [BAD] ...>" stays out
    store = jobpool.connect(pg_url)
    job_id = store.enqueue("f.fence", "held").id
    pool = fault_app.spawn_pool("--procs", "1", "--burst", "--poll-interval", "0.2",
                                "--store-timeout", "600", db=pg_url)
    wait_for(lambda: list(fault_app.dir.glob("held.*.started")), timeout=60)
    with _admin() as admin:
        # The claimer's connection, idle while the job runs: the turn that settles
        # the job is the first to find it gone.
        assert admin.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE application_name = 'jobpool-supervisor'"
            " AND datname = current_database()").fetchone()[0] == 1
    (fault_app.dir / "held.go").write_text("")
    assert pool.wait(timeout=120) == 0, fault_app.log_of(pool)
    log = fault_app.log_of(pool)
    assert store.get(job_id)["status"] == "done"
    assert log.count("store_error") == 1, log
    assert "error ignored" not in log and "psycopg" not in log, log
    store.close()
