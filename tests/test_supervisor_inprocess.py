"""The supervisor driven in this process, not through a CLI subprocess: the seam that
lets a test set the pool's clock (STYLE habit 4) and read its state directly.

The children are still real forked processes running the jobs below; only the
supervisor's loop runs in the test's own process, so a test costs no interpreter
start and can check the pool's counters as well as the store's rows. Tests that
set the pool's clock run on SQLite only: a PostgreSQL store dates everything by
the server's clock (R7a); the others run on every store.
"""
from __future__ import annotations

import logging
import os
import signal
import time
from pathlib import Path

import pytest

import jobpool
from jobpool.config import PoolConfig
from jobpool.supervisor import Supervisor

from .conftest import waits_of

DAY = 86_400.0


def _once(marker: str) -> bool:
    """True the first time it is called with ``marker`` (a file path), then False."""
    path = Path(marker)
    first = not path.exists()
    path.write_text("x")
    return first


@jobpool.job(name="inproc.record")
def record(path, value):
    with open(path, "a") as fh:
        fh.write(f"{value}\n")


@jobpool.job(name="inproc.defers")
def defers(marker):
    if _once(marker):
        raise jobpool.Defer(0)


@jobpool.job(name="inproc.reschedules", max_attempts=2)
def reschedules(marker, times):
    count = len(list(Path(marker).parent.glob(Path(marker).name + ".*")))
    Path(f"{marker}.{count}").write_text("x")
    if count + 1 < times:
        raise jobpool.Reschedule(0)


@jobpool.job(name="inproc.flaky", max_attempts=3, backoff_base=60.0)
def flaky():
    raise RuntimeError("upstream said no")


@jobpool.job(name="inproc.stops_its_pool")
def stops_its_pool(marker):
    if _once(marker):
        # A graceful stop reaches the pool while this job runs; it outlives the drain.
        os.kill(os.getppid(), signal.SIGTERM)
        time.sleep(60)


@jobpool.job(name="inproc.buries_its_pool")
def buries_its_pool(store_url, marker_dir):
    """First run: as another pool would that judged this one dead, take this pool's
    lease back and remove its row, then keep running. Second run: finish."""
    here = Path(marker_dir)
    if not _once(str(here / "first")):
        (here / "ran-2").write_text("x")
        return
    store = jobpool.connect(store_url)
    for _ in range(500):  # the pool's first beat may come just after this job started
        pools = store.pools()
        if pools:
            break
        time.sleep(0.02)
    (pool,) = pools
    other = store.claimer("other-host:1:1", ("inproc.buries_its_pool",), ("default",), {})
    other.reclaim_owner(pool["owner"], "judged dead by other-host", time.time())
    other.close()
    store.forget_pool(pool["owner"])
    store.close()
    time.sleep(30)
    (here / "finished-1").write_text("x")


@jobpool.job(name="inproc.waits_for_sweeps")
def waits_for_sweeps(store_url):
    """Keeps its pool up until no done row is left in the store (a minute at most)."""
    store = jobpool.connect(store_url)
    try:
        for _ in range(600):
            if store.stats()["done"] == 0:
                return
            time.sleep(0.1)
    finally:
        store.close()


@jobpool.job(name="inproc.tick", every=0.2)
def tick():
    pass


class Events(logging.Handler):
    """The pool's events (R30), as (name, fields)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.seen: list[tuple[str, dict]] = []

    def emit(self, record: logging.LogRecord) -> None:
        event = getattr(record, "event", None)
        if event is not None:
            self.seen.append((event, dict(getattr(record, "fields", {}))))

    def ids(self, event: str) -> list[int]:
        return [fields.get("job_id") for name, fields in self.seen if name == event]


@pytest.fixture
def store(tmp_path):
    store = jobpool.connect(tmp_path / "jobpool.db")
    yield store
    store.close()


@pytest.fixture
def pool_events():
    handler = Events()
    logger = logging.getLogger("jobpool.events")
    old_level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(old_level)


def burst_pool(db, *names: str, clock=time.time, **options) -> Supervisor:
    """A ``--burst`` pool over the store at ``db`` (a path or a URL)."""
    config = PoolConfig(db=str(db), procs=1, burst=True, names=names,
                        poll_interval=0.05, **options)
    return Supervisor(config, clock=clock)


def test_a_pool_in_process_runs_on_the_clock_it_is_given(store, tmp_path):
    # Given a job due in an hour by the wall clock
    ran = tmp_path / "ran.txt"
    later = store.enqueue_with("inproc.record", args=(str(ran), "later"), delay=3600)
    # When a --burst pool runs here with its clock a day ahead
    pool = burst_pool(store.path, "inproc.record", clock=lambda: time.time() + DAY)
    assert pool.run() == 0
    # Then by its clock the job was due, it ran, and what the pool wrote is dated
    # by its clock, not the host's
    assert ran.read_text() == "later\n"
    row = store.get(later.id)
    assert row["status"] == "done"
    assert row["finished_at"] > time.time() + DAY - 600
    assert pool.counters["completed"] == 1 and pool.counters["claimed"] == 1


def test_a_deadline_is_judged_on_the_pools_clock_at_claim(store, tmp_path):
    # R10: due within the hour by the wall clock, but a day late by the pool's
    ran = tmp_path / "ran.txt"
    late = store.enqueue_with("inproc.record", args=(str(ran), "late"), deadline=time.time() + 3600)
    pool = burst_pool(store.path, "inproc.record", clock=lambda: time.time() + DAY)
    assert pool.run() == 0
    row = store.get(late.id)
    assert (row["status"], row["last_error"]) == ("dead", "deadline passed")
    assert not ran.exists()  # it never ran
    assert pool.counters["claimed"] == 0 and pool.counters["dead"] == 1


def test_each_way_back_to_ready_has_its_own_event_and_counter(store, tmp_path, pool_events):
    # R29a, R30: a Defer, a Reschedule and a shutdown release are not retries.
    # (a retry after 60 s of backoff: the pool's clock is 10 000 times the wall clock's,
    # so each job's timeout is a day of it, 8.6 s of wall: with the default, a lease
    # ran out in 33 ms of wall while a loaded machine still forked the child, R23 took
    # the job back, and the retry this test counts became a lost lease)
    day = 86_400.0
    defer = store.enqueue_with("inproc.defers", args=[str(tmp_path / "deferred")],
                               timeout=day).id
    resched = store.enqueue_with("inproc.reschedules", args=[str(tmp_path / "rescheduled"), 2],
                                 timeout=day).id
    start = time.time()
    flaky = store.enqueue_with("inproc.flaky", max_attempts=2, timeout=day).id
    pool = burst_pool(store.path, "inproc.defers", "inproc.reschedules", "inproc.flaky",
                      clock=lambda: start + (time.time() - start) * 10_000, wait_retries=3600)
    assert pool.run() == 0
    assert pool_events.ids("job_deferred") == [defer]
    assert pool_events.ids("job_rescheduled") == [resched]
    assert pool_events.ids("job_retried") == [flaky]
    assert pool_events.ids("job_dead") == [flaky]
    assert {k: pool.counters[k] for k in ("deferred", "rescheduled", "retried", "released",
                                         "completed", "dead")} == {
        "deferred": 1, "rescheduled": 1, "retried": 1, "released": 0, "completed": 2, "dead": 1}
    # R13: the retry waited its backoff, on the pool's clock (base 60 s, jitter -25 % at most)
    first, second = store.attempts(flaky)
    assert second["started_at"] - first["ended_at"] >= 60 * 0.75


def test_a_job_running_past_the_drain_is_released_not_retried(any_store, store_url, tmp_path,
                                                             pool_events):
    # R25, R29a, on every store: the job sends its pool SIGTERM and keeps running
    # past a 0.2 s drain
    store = any_store
    job = store.enqueue("inproc.stops_its_pool", str(tmp_path / "stopped")).id
    config = PoolConfig(db=store_url, procs=1, names=("inproc.stops_its_pool",),
                        poll_interval=0.05, drain=0.2)
    pool = Supervisor(config)
    assert pool.run() == 0
    assert pool_events.ids("job_released") == [job]
    assert pool_events.ids("job_retried") == []
    assert pool.counters["released"] == 1 and pool.counters["retried"] == 0
    row = store.get(job)
    assert (row["status"], row["attempts"]) == ("ready", 1)  # back in line, the attempt spent
    assert [a["outcome"] for a in store.attempts(job)] == ["released"]


def test_defer_and_reschedule_keep_their_budgets(any_store, store_url, tmp_path):
    # R17: a Defer spends no attempt; R18: each Reschedule gives a fresh budget (every store)
    store = any_store
    deferred = store.enqueue("inproc.defers", str(tmp_path / "deferred")).id
    rescheduled = store.enqueue("inproc.reschedules", str(tmp_path / "rescheduled"), 4).id
    pool = burst_pool(store_url, "inproc.defers", "inproc.reschedules")
    assert pool.run() == 0
    row = store.get(deferred)
    assert (row["status"], row["attempts"], row["deferrals"]) == ("done", 1, 1)
    assert [a["outcome"] for a in store.attempts(deferred)] == ["deferred", "done"]
    row = store.get(rescheduled)
    # max_attempts is 2, yet it ran 4 times: each Reschedule reset the budget
    assert (row["status"], row["attempts"]) == ("done", 1)
    assert [a["outcome"] for a in store.attempts(rescheduled)] == ["rescheduled"] * 3 + ["done"]
    assert pool.counters["rescheduled"] == 3 and pool.counters["deferred"] == 1


def test_a_pool_that_learns_it_was_judged_dead_kills_what_it_ran(any_store, store_url,
                                                                 tmp_path, pool_events):
    # R24b, on every store: its lease was taken back and its row removed while its
    # child ran on; at its next beat the pool kills that child and registers again
    store = any_store
    job = store.enqueue("inproc.buries_its_pool", store_url, str(tmp_path)).id
    pool = burst_pool(store_url, "inproc.buries_its_pool")
    assert pool.run() == 0
    assert not (tmp_path / "finished-1").exists()  # the first run was killed, not waited for
    assert (tmp_path / "ran-2").exists()
    assert len([n for n, _f in pool_events.seen if n == "pool_judged_dead"]) == 1
    assert pool_events.ids("job_lease_lost") == [job]  # its late settle was refused (R8)
    row = store.get(job)
    assert (row["status"], row["attempts"]) == ("done", 2)
    assert [a["outcome"] for a in store.attempts(job)] == ["owner_died", "done"]


@jobpool.job(name="inproc.pauses_its_queue")
def pauses_its_queue(store_url, path):
    """Pause this job's own queue, wait until the pool has beaten since (it read the
    pause), then enqueue one more job into the paused queue."""
    store = jobpool.connect(store_url)
    asked = time.time()
    assert store.pause("default")
    os.kill(os.getppid(), signal.SIGUSR1)  # R27's reload: beat now
    for _ in range(3000):
        if any(p["heartbeat_at"] > asked for p in store.pools()):
            break
        time.sleep(0.01)
    store.enqueue("inproc.record", path, "after the pause")
    store.close()


def test_a_paused_queue_is_claimed_from_by_no_pool_and_resumed_later(any_store, store_url,
                                                                    tmp_path, pool_events):
    # R38, on every store: the pause reaches the running pool by its heartbeat; the
    # job enqueued after it waits, and its pool ends (--burst) with it still ready
    store = any_store
    out = tmp_path / "ran.txt"
    store.enqueue("inproc.pauses_its_queue", store_url, str(out))
    pool = burst_pool(store_url, "inproc.pauses_its_queue", "inproc.record")
    assert pool.run() == 0
    assert pool.counters["completed"] == 1 and pool.counters["claimed"] == 1
    assert not out.exists()
    (waiting,) = store.list_jobs(name="inproc.record")
    assert (waiting["status"], waiting["attempts"]) == ("ready", 0)
    assert [f["queue"] for n, f in pool_events.seen if n == "queue_paused"] == ["default"]
    # a pool started while the queue is paused claims nothing from it either
    pool = burst_pool(store_url, "inproc.record")
    assert pool.run() == 0 and pool.counters["claimed"] == 0
    assert store.resume("default")
    pool = burst_pool(store_url, "inproc.record")
    assert pool.run() == 0 and pool.counters["completed"] == 1
    assert out.read_text() == "after the pause\n"


def test_weighted_queues_share_the_claims_by_weight(any_store, store_url, tmp_path):
    # R7: --queues high:3,low:1 with both backlogs full: three from high for each
    # from low, exactly (one slot: one claim per turn)
    store = any_store
    out = tmp_path / "order.txt"
    for queue in ("low", "high"):
        store.enqueue_many("inproc.record", [(str(out), queue)] * 12, queue=queue)
    pool = burst_pool(store_url, "inproc.record", queues=("high", "low"), weights=(3, 1),
                      max_jobs=16)
    assert pool.run() == 0
    assert out.read_text().split() == ["high", "high", "low", "high"] * 4
    # high is empty now: its share goes to low, one job a turn, none left idle
    pool = burst_pool(store_url, "inproc.record", queues=("high", "low"), weights=(3, 1))
    assert pool.run() == 0
    assert out.read_text().split()[16:] == ["low"] * 8 and pool.counters["claimed"] == 8


def test_a_pool_claims_nothing_before_a_heartbeat_registered_it(store, tmp_path):
    # R24b, R38: the first beat fails (a busy store, say): the pool waits for one that
    # works, which also reads the pauses, before it claims anything
    from jobpool.errors import StoreError
    out = tmp_path / "ran.txt"
    store.enqueue("inproc.record", str(out), "after a beat")
    beats: list[bool] = []
    claims_before_a_beat: list[int] = []

    class FirstBeatFails:
        def __getattr__(self, name):
            return getattr(store, name)

        def heartbeat(self, *args, **kwargs):
            if not beats:
                beats.append(False)
                raise StoreError("database is locked")
            beats.append(True)
            return store.heartbeat(*args, **kwargs)

        def claimer(self, *args, **kwargs):
            return WatchedClaimer(store.claimer(*args, **kwargs))

    class WatchedClaimer:
        def __init__(self, claimer):
            self.claimer = claimer

        def __getattr__(self, name):
            return getattr(self.claimer, name)

        def turn(self, outcomes, n, *rest):
            if n and True not in beats:
                claims_before_a_beat.append(n)
            return self.claimer.turn(outcomes, n, *rest)
    config = PoolConfig(db=store.path, procs=1, burst=True, names=("inproc.record",),
                        poll_interval=0.05)
    pool = Supervisor(config, store=FirstBeatFails())
    assert pool.run() == 0
    assert beats[:2] == [False, True] and claims_before_a_beat == []
    assert out.read_text() == "after a beat\n"


def test_a_sweep_that_takes_a_full_batch_comes_again_at_the_next_heartbeat(store, tmp_path):
    # R32: 1 200 done rows past their result_ttl, more than one sweep's batch (500)
    from jobpool.supervisor.operations import SWEEP_EVERY
    store.enqueue_many("inproc.old", [(i,) for i in range(1200)])
    store.conn.execute("UPDATE jobs SET status = 'done', attempts = 1, started_at = 1, "
                       "finished_at = 2 WHERE name = 'inproc.old'")
    store.enqueue("inproc.waits_for_sweeps", str(store.path))
    sweeps: list[tuple[float, int]] = []

    class Watched:
        def __getattr__(self, name):
            return getattr(store, name)

        def sweep(self, now, **limits):
            removed = store.sweep(now, **limits)
            sweeps.append((now, removed))
            return removed
    config = PoolConfig(db=store.path, procs=1, burst=True,
                        names=("inproc.waits_for_sweeps",), poll_interval=0.05)
    # When a pool runs while they are there
    assert Supervisor(config, store=Watched()).run() == 0
    # Then its sweeps took them a batch at a time, each after a full batch at the next
    # heartbeat (a second later) rather than SWEEP_EVERY later, and none is left
    assert [removed for _, removed in sweeps[:3]] == [500, 500, 200]
    assert all(later - earlier < SWEEP_EVERY
               for (earlier, _), (later, _) in zip(sweeps, sweeps[1:3]))
    assert store.stats()["done"] == 1


def test_a_pool_run_beside_another_thread_says_so_before_it_forks(store, tmp_path):
    """R43's amendment: the process that runs a pool runs one thread; one more is a
    ``JobpoolError`` naming it, before anything is forked (it was the fork's assertion)."""
    import threading
    from jobpool.errors import JobpoolError
    job_id = store.enqueue("inproc.record", str(tmp_path / "ran.txt"), "x").id
    stop = threading.Event()
    other = threading.Thread(target=stop.wait, name="host-app-thread")
    other.start()
    try:
        pool = burst_pool(store.path, "inproc.record")
        with pytest.raises(JobpoolError, match=r"runs 1 more \('host-app-thread'\)"):
            pool.run()
    finally:
        stop.set()
        other.join()
    assert store.get(job_id)["status"] == "ready"
    assert burst_pool(store.path, "inproc.record").run() == 0  # alone again, it runs
    assert store.get(job_id)["status"] == "done"


def test_the_sweep_and_periodic_jobs_wait_for_a_turn_holding_locks_on_postgres(pg_url,
                                                                              monkeypatch):
    """R66: a limited turn in flight is a transaction the pool's own loop ends when it
    lands, holding what it settled (a batch member's shard, a group's lane). The
    retention sweep and a periodic enqueue write through the store's own connection:
    one that needed such a lock waited for the loop itself, until the store's lock
    timeout (found by an audit of the store's lock orders). They now wait for a pass of
    the loop with no such turn; the heartbeat itself goes on (a stop or scale is read on
    time). Here a turn that settles something is kept from landing of its own accord (as
    if its answer were slow), and each sweep and enqueue is watched for such a turn."""
    from jobpool.supervisor import operations
    monkeypatch.setattr(operations, "SWEEP_EVERY", 0.0)  # a sweep at every heartbeat
    store = jobpool.connect(pg_url)
    store.limits.set_queue("default", 100)  # a limited claim: the turn is a transaction
    config = PoolConfig(db=pg_url, procs=2, poll_interval=0.05, max_jobs=6,
                        names=("inproc.tick",))
    pool = Supervisor(config)
    turn, ops = pool._turn, pool.operations
    beat, sweep = ops.heartbeat, ops.store.sweep
    enqueue = ops.store.enqueue_occurrence
    held_until = time.monotonic() + 3.0
    seen: dict[str, list[bool]] = {"heartbeat": [], "sweep": [], "periodic": [],
                                   "swept_in_turn": []}
    in_turn = []

    def holding() -> bool:
        return pool._flight is not None and pool._flight[0].holds_locks()

    def slow_answers(now):
        # A turn in flight that settles something does not land of its own accord.
        if pool._flight is not None and pool._flight[2] and time.monotonic() < held_until:
            return False
        in_turn.append(True)
        try:
            return turn(now)
        finally:
            in_turn.pop()

    def watched(kind, call):
        def run(*args, **kwargs):
            seen[kind].append(holding())
            if kind == "sweep":
                seen["swept_in_turn"].append(bool(in_turn))
            return call(*args, **kwargs)
        return run
    pool._turn, ops.heartbeat = slow_answers, watched("heartbeat", beat)
    ops.store.sweep = watched("sweep", sweep)
    ops.store.enqueue_occurrence = watched("periodic", enqueue)
    assert pool.run() == 0
    assert pool.counters["claimed"] == 6  # it ran to its --max-jobs
    assert any(seen["heartbeat"])  # beats went on while such a turn was in flight
    assert len(seen["sweep"]) >= 2 and not any(seen["sweep"])  # swept, never with one open
    assert any(seen["swept_in_turn"])  # also right after a limited turn landed
    assert len(seen["periodic"]) >= 6 and not any(seen["periodic"])
    store.close()


@jobpool.job(name="inproc.limited", max_running=1)
def limited():
    pass


def test_a_pool_logs_the_limits_it_declares_once(store, caplog):
    """R35: a pool that declares a limit the store did not have says so in its log,
    once (a second pool declaring the same finds nothing changed)."""
    caplog.set_level(logging.WARNING, logger="jobpool.supervisor.operations")
    store.enqueue("inproc.limited")
    assert burst_pool(store.path, "inproc.limited").run() == 0
    line = "limits of inproc.limited: no limit -> max_running=1 (declared by pool "
    assert [r.getMessage() for r in caplog.records if line in r.getMessage()] != []
    caplog.clear()
    store.enqueue("inproc.limited")
    assert burst_pool(store.path, "inproc.limited").run() == 0
    assert not [r for r in caplog.records if "limits of inproc.limited" in r.getMessage()]
    assert store.stats()["done"] == 2


@jobpool.job(name="inproc.naps")
def naps(seconds):
    time.sleep(seconds)


def test_a_pool_whose_max_jobs_are_claimed_waits_for_them_without_spinning(store):
    # --max-jobs 1 over two slots: once the one job is claimed no claim comes again, and
    # the loop waits for the job's end (it looked at its descriptors without waiting,
    # a core spun, until the job ended)
    store.enqueue_many("inproc.naps", [(0.5,), (0.5,)])
    pool = Supervisor(PoolConfig(db=str(store.path), procs=2, burst=True, names=("inproc.naps",),
                                 poll_interval=0.05, max_jobs=1))
    waits = waits_of(pool)
    assert pool.run() == 0
    assert pool.counters["claimed"] == 1 and store.stats()["done"] == 1
    looks = sum(1 for timeout in waits if timeout == 0)
    assert looks < 100, (looks, len(waits))
