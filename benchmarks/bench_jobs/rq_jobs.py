"""The benchmark jobs for RQ: plain functions, queued by import path on queue ``bench``."""
from bench_jobs import common


def noop(i):
    common.noop_body(i)


def cpu(ms):
    common.cpu_body(ms)


def stamp(t_enqueued):
    common.stamp_body(t_enqueued)
