"""The benchmark jobs for Dramatiq: Redis broker, default middleware
(``dramatiq bench_jobs.dramatiq_jobs -p 2 -t 1``)."""
import os

import dramatiq
from dramatiq.brokers.redis import RedisBroker

from bench_jobs import common

broker = RedisBroker(url=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6390/0"))
dramatiq.set_broker(broker)


@dramatiq.actor(queue_name="bench")
def noop(i):
    common.noop_body(i)


@dramatiq.actor(queue_name="bench")
def cpu(ms):
    common.cpu_body(ms)


@dramatiq.actor(queue_name="bench")
def stamp(t_enqueued):
    common.stamp_body(t_enqueued)
