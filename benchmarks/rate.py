#!/usr/bin/env python3
"""A rate limit met, not divided by the poll interval (R36).

    .venv/bin/python benchmarks/rate.py [--jobs 40] [--rate 10/s] [--procs 4] [--runs 3]
        [--db postgresql://postgres@127.0.0.1:5432/test]

``--jobs`` no-op jobs of one name limited to ``--rate`` (burst 1) are drained by a real
``jobpool start --burst --procs N`` with its default poll interval, from its start to
its exit. Printed per run: the wall time, the time from the first start to the last
(ideally (jobs - 1) / rate), and the most starts seen in any one-second window (the
bucket allows rate + burst). The starts are read from the store's attempt log. A
figure, not a test: the rule's tests are tests/test_rate_wakeup.py and the limit
contract.
"""
from __future__ import annotations

import argparse
import bisect
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(ROOT))

import jobpool  # noqa: E402
from jobpool.limits import parse_rate  # noqa: E402

APP = '''
from jobpool import job

@job(name="bench.rated", rate={rate!r})
def rated(i):
    return i
'''


def most_in_a_second(starts: list[float]) -> int:
    """The most starts inside any window of one second."""
    starts = sorted(starts)
    return max((bisect.bisect_right(starts, t + 1.0) - i for i, t in enumerate(starts)),
               default=0)


def run(url: str, app_dir: Path, jobs: int, procs: int) -> tuple[float, float, int]:
    store = jobpool.connect(url)
    try:
        ids = [store.enqueue("bench.rated", i).id for i in range(jobs)]
    finally:
        store.close()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(app_dir), str(ROOT)]))
    began = time.perf_counter()
    subprocess.run([sys.executable, "-m", "jobpool", "start", "--app", "rate_app", "--db", url,
                    "--burst", "-q", "--procs", str(procs), "--no-dashboard"],
                   check=True, env=env, cwd=app_dir)
    wall = time.perf_counter() - began
    store = jobpool.connect(url)
    try:
        starts = [a["started_at"] for i in ids for a in store.attempts(i)]
        if len(starts) != jobs or store.stats()["done"] < jobs:
            raise SystemExit(f"expected {jobs} jobs done once each, found {len(starts)} starts")
    finally:
        store.close()
    return wall, max(starts) - min(starts), most_in_a_second(starts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=40)
    parser.add_argument("--rate", default="10/s")
    parser.add_argument("--procs", type=int, default=4)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--db", help="a PostgreSQL URL (a schema of its own is made and "
                                     "dropped); default a SQLite file in a temp dir")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="jobpool-rate-"))
    (work / "rate_app.py").write_text(APP.format(rate=args.rate))
    sys.path.insert(0, str(BENCH))
    from compare import scratch_store
    with scratch_store(args.db, "rate", work) as url:
        ideal = (args.jobs - 1) / parse_rate(args.rate).per_second
        print(f"{args.jobs} jobs at {args.rate} on {args.procs} slots "
              f"(ideal first-to-last start {ideal:.1f} s)")
        for number in range(1, args.runs + 1):
            wall, spread, most = run(url, work, args.jobs, args.procs)
            print(f"run {number}: wall {wall:.2f} s, first to last start {spread:.2f} s, "
                  f"at most {most} starts in a second")


if __name__ == "__main__":
    main()
