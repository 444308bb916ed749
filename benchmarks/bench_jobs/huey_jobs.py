"""The benchmark jobs for Huey: ``SqliteHuey`` (its defaults: WAL, SQLite's default
synchronous), run with ``huey_consumer bench_jobs.huey_jobs.huey -k process -w 2``."""
import os

from huey import SqliteHuey

from bench_jobs import common

huey = SqliteHuey("bench", filename=os.environ.get("BENCH_HUEY_DB", "huey-bench.db"))


@huey.task()
def noop(i):
    common.noop_body(i)


@huey.task()
def cpu(ms):
    common.cpu_body(ms)


@huey.task()
def stamp(t_enqueued):
    common.stamp_body(t_enqueued)
