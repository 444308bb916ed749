"""The one job the whole-process runs of ``benchmarks/whole/run.sh`` drain.

``BENCH_CHUNK=N`` declares it ``chunk=N`` (R63, ``benchmarks/chunks.py``); unset, the job
is declared as on any checkout, so old trees run it too. ``BENCH_LIMIT=N`` declares it
``max_running=N`` (R35: every turn of the pool is a limited one, a lane walk, whether or
not the limit binds). ``BENCH_JOB_MS=M`` makes each
job take M milliseconds, asleep (as a job waiting on I/O does), or with
``BENCH_JOB_SPIN=1`` on the CPU: what a pool's turns can overlap (R66)."""
import os
import time

from jobpool import job

_CHUNK = {"chunk": int(os.environ["BENCH_CHUNK"])} if os.environ.get("BENCH_CHUNK") else {}
_LIMIT = ({"max_running": int(os.environ["BENCH_LIMIT"])} if os.environ.get("BENCH_LIMIT")
          else {})
_TAKES = float(os.environ.get("BENCH_JOB_MS") or 0) / 1000
_SPIN = bool(os.environ.get("BENCH_JOB_SPIN"))


@job(name="ab.noop", **_CHUNK, **_LIMIT)
def noop(n):
    if _TAKES:
        if _SPIN:
            until = time.perf_counter() + _TAKES
            while time.perf_counter() < until:
                pass
        else:
            time.sleep(_TAKES)
    return None
