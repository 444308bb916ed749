"""Where a child's time goes between two jobs, on the no-op drain.

    .venv/bin/python benchmarks/child_split.py [--jobs 40000] [--procs 2]

Runs ``jobpool start --burst -q`` (in this process, forked children) over ``--jobs``
no-op jobs on a fresh SQLite store, with the child's per-job steps wrapped in timers
before the pool forks: the loop's work from one message read to the next read call
(``loop``: everything a child does for one job but wait), the attempt (``run_job``)
and what it is made of, the reply's write, and the job frame's decoding. Each child
writes its averages (wall microseconds per call, ``time.perf_counter``) to standard
output when the pool ends. A step that the jobpool on ``PYTHONPATH`` does not have is
left out, so two trees can be compared by running this over each
(``PYTHONPATH=TREE``): what each child-side feature costs a job.

Wall time in a child includes the moments the supervisor or the other child held
its core: on two cores the figures are larger than the same calls timed alone; they
are for comparing steps and trees in one sitting, not a floor.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys
import tempfile
import time
from typing import Any, Callable

#: (module, class or None, attribute) of each step timed, where this jobpool has it.
STEPS = (
    ("jobpool.child", None, "run_job"),
    ("jobpool.child", None, "run_attempt"),
    ("jobpool.child", None, "_cpu_seconds"),
    ("jobpool.child", None, "_peak_rss_bytes"),
    ("jobpool.child", "StandardStreams", "restore"),
    ("jobpool.proctree", None, "kill_strays"),
    ("jobpool.protocol", None, "loads"),
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=40_000)
    parser.add_argument("--procs", type=int, default=2)
    args = parser.parse_args()
    import multiprocess.connection

    import jobpool
    from jobpool import cli, job

    @job(name="split.noop")
    def noop(i):
        return None

    where = tempfile.mkdtemp()
    path = os.path.join(where, "jobpool.db")
    store = jobpool.connect(path)
    store.enqueue_many("split.noop", [(i,) for i in range(args.jobs)])
    store.close()
    print(f"jobpool from {os.path.dirname(os.path.dirname(jobpool.__file__))}; "
          f"{args.jobs} no-op jobs, --procs {args.procs}; µs a call (wall)")
    sys.stdout.flush()
    totals: dict[str, list[float]] = {}
    clock = time.perf_counter

    def timed(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def step(*a: Any, **k: Any) -> Any:
            began = clock()
            try:
                return fn(*a, **k)
            finally:
                total = totals.setdefault(name, [0, 0.0])
                total[0] += 1
                total[1] += clock() - began
        return step

    for module, cls, name in STEPS:
        try:
            owner: Any = importlib.import_module(module)
        except ImportError:
            continue
        if cls is not None:
            owner = getattr(owner, cls, None)
        if owner is not None and hasattr(owner, name):
            setattr(owner, name, timed(name, getattr(owner, name)))
    connection = multiprocess.connection.Connection
    connection.send_bytes = timed("send_bytes", connection.send_bytes)
    last: list[float] = []
    me = os.getpid()

    reading: list[bool] = []

    def reader(read: Callable[..., Any]) -> Callable[..., Any]:
        """A child's read of its next job: the loop's boundary, and at the pipe's end
        (the pool ending) the child's averages written out. A read inside another (the
        pure ``read_message`` calls ``recv_bytes``) is not counted again."""
        def next_job(*a: Any, **k: Any) -> Any:
            if os.getpid() == me or reading:
                return read(*a, **k)  # the supervisor's own reads are not a child's
            if last:
                total = totals.setdefault("loop", [0, 0.0])
                total[0] += 1
                total[1] += clock() - last[0]
            reading.append(True)
            try:
                data = read(*a, **k)
            except EOFError:
                lines = [f"  {name:<16} {count:>7} calls {spent / count * 1e6:>8.2f}"
                         for name, (count, spent) in sorted(totals.items())]
                os.write(1, (f"child {os.getpid()}\n" + "\n".join(lines) + "\n").encode())
                raise
            finally:
                reading.clear()
            last[:] = [clock()]
            return data
        return next_job
    # Older trees read with the connection's own call, newer ones through the core.
    connection.recv_bytes = reader(connection.recv_bytes)
    core = importlib.import_module("jobpool.core")
    if hasattr(core, "write_message"):
        core.read_message = reader(core.read_message)
        core.write_message = timed("write_message", core.write_message)
    code = cli.main(["start", "--db", path, "--burst", "-q", "--procs", str(args.procs),
                     "--no-dashboard"])
    if code:
        raise SystemExit(f"the pool exited {code}")


if __name__ == "__main__":
    main()
