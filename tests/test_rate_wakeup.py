"""R36: a pool holding back rate-limited jobs wakes when the next token is due, so
with enough slots a rate is met, not divided by the poll interval.

The supervisor runs in this process on a clock the test sets (STYLE habit 4); its
children are real. On PostgreSQL the store dates buckets by the server's clock
(R7a), so there the test lets real time pass before the second claim.
"""
from __future__ import annotations

import time

import pytest

import jobpool
from jobpool.config import PoolConfig
from jobpool.supervisor import Supervisor

POLL = 30.0


@jobpool.job(name="rate.tick", rate="10/s")
def tick(i):
    return i


def turn(pool: Supervisor, now: float) -> None:
    """One turn, read: on PostgreSQL it goes in flight (R66, limited turns too), and
    the loop applies it when its answer comes."""
    pool._turn(now)
    pool._land(now, wait=True)


@pytest.fixture
def pool_on(store_url):
    made = []

    def make(clock) -> Supervisor:
        config = PoolConfig(db=store_url, procs=4, names=("rate.tick",), poll_interval=POLL)
        pool = Supervisor(config, clock=clock)
        pool.slots.spawn_all()
        made.append(pool)
        return pool
    yield make
    for pool in made:
        pool.slots.shutdown(time.monotonic() + 5.0, time.monotonic)
        pool.operations.leave(pool.clock())
        pool.core.close()
        pool.store.close()


def test_a_pool_held_back_by_its_rate_wakes_when_the_next_token_is_due(store_url, pool_on):
    store = jobpool.connect(store_url)
    try:
        for i in range(3):
            store.enqueue("rate.tick", i)
    finally:
        store.close()
    now = [time.time()]
    pool = pool_on(lambda: now[0])
    assert pool.operations.first_beat(now[0])  # registers the pool, writes the job's limit
    pool._timers(now[0])  # the first poll: a claim is wanted
    turn(pool, now[0])
    # A burst of one: one job started, four slots, two rows left behind the bucket.
    assert pool.counters["claimed"] == 1
    assert not pool.state.want_claim
    # The next wake-up is when the bucket has a token (0.1 s), not the 30 s poll.
    assert pool._wait_time(now[0]) == pytest.approx(0.1, abs=0.01)
    if pool.core.name == "postgres":
        time.sleep(0.15)  # the server's clock dates the bucket
    now[0] += 0.11
    pool._timers(now[0])
    assert pool.state.want_claim
    turn(pool, now[0])
    assert pool.counters["claimed"] == 2
    assert pool._wait_time(now[0]) <= 0.1 + 0.01


def test_a_pool_with_no_rated_job_held_back_waits_for_its_poll(store_url, pool_on):
    now = [time.time()]
    pool = pool_on(lambda: now[0])
    assert pool.operations.first_beat(now[0])
    pool._timers(now[0])
    turn(pool, now[0])  # nothing to claim
    assert pool.counters["claimed"] == 0
    assert pool._next_token is None
    assert pool._wait_time(now[0]) >= 0.5  # the heartbeat or the poll, whichever is first
