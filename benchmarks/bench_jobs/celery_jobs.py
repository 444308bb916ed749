"""The benchmark jobs for Celery: Redis broker, prefork pool, ``acks_late``; no
result backend (Celery's default)."""
import os

from celery import Celery

from bench_jobs import common

app = Celery("bench", broker=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6390/0"))
app.conf.task_acks_late = True
app.conf.broker_connection_retry_on_startup = True  # the default; set only to silence a warning
app.conf.task_default_queue = "bench"


@app.task(name="bench.noop")
def noop(i):
    common.noop_body(i)


@app.task(name="bench.cpu")
def cpu(ms):
    common.cpu_body(ms)


@app.task(name="bench.stamp")
def stamp(t_enqueued):
    common.stamp_body(t_enqueued)
