"""The benchmark jobs for jobpool (``jobpool start --app bench_jobs.jobpool_jobs``)."""
from jobpool import job

from bench_jobs import common


@job(name="bench.noop")
def noop(i):
    common.noop_body(i)


@job(name="bench.cpu")
def cpu(ms):
    common.cpu_body(ms)


@job(name="bench.stamp")
def stamp(t_enqueued):
    common.stamp_body(t_enqueued)
