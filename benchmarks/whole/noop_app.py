"""The one job the whole-process runs of ``benchmarks/whole/run.sh`` drain.

``BENCH_CHUNK=N`` declares it ``chunk=N`` (R63, ``benchmarks/chunks.py``); unset, the job
is declared as on any checkout, so old trees run it too."""
import os

from jobpool import job

_CHUNK = {"chunk": int(os.environ["BENCH_CHUNK"])} if os.environ.get("BENCH_CHUNK") else {}


@job(name="ab.noop", **_CHUNK)
def noop(n):
    return None
