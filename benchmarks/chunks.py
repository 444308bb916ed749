#!/usr/bin/env python3
"""R63: the no-op drain of tiny jobs in chunks, and what chunks cost a pool without them.

    .venv/bin/python benchmarks/chunks.py drain [--jobs 20000] [--pairs 6] [--chunk 16]
    .venv/bin/python benchmarks/chunks.py ab OLD_TREE [--jobs 20000] [--pairs 8]

One SQLite store of ``--jobs`` no-op jobs (``benchmarks/whole/noop_app.py``'s ``ab.noop``)
is built once; each run drains a fresh copy of it with a whole ``jobpool start --burst -q
--procs 2 --no-dashboard`` process, timed from outside (wall, and the CPU of the pool and
its children, from ``wait4``). Runs alternate, so a change in the machine's speed falls on
both sides alike; medians are printed.

* ``drain``: the job unchunked (``chunk=1``, the default) against ``chunk=N``, this tree.
* ``ab OLD_TREE``: this tree against another checkout (say, main in a worktree), the job
  unchunked on both: what the option costs a pool that does not use it.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
WHOLE = BENCH / "whole"
PYTHON = ROOT / ".venv" / "bin" / "python"


def build(tree: Path, path: Path, jobs: int) -> None:
    """A store of ``jobs`` ready no-op rows, made by ``tree``'s jobpool."""
    subprocess.run([str(PYTHON), "-c",
                    "import sys, jobpool, noop_app; s = jobpool.connect(sys.argv[1]); "
                    "s.enqueue_many('ab.noop', [(i,) for i in range(int(sys.argv[2]))]); s.close()",
                    str(path), str(jobs)], check=True, cwd="/", env=_env(tree, None))


def _env(tree: Path, chunk: int | None) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=f"{WHOLE}:{tree}")
    env.pop("BENCH_CHUNK", None)
    if chunk is not None:
        env["BENCH_CHUNK"] = str(chunk)
    return env


def drain(tree: Path, template: Path, jobs: int, chunk: int | None) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one pool draining a copy of ``template``."""
    with tempfile.TemporaryDirectory() as work:
        db = Path(work) / "jobpool.db"
        shutil.copyfile(template, db)
        start = time.perf_counter()
        proc = subprocess.Popen([str(PYTHON), "-m", "jobpool", "start", "--app", "noop_app",
                                 "--db", str(db), "--burst", "-q", "--procs", "2",
                                 "--no-dashboard"], cwd="/", env=_env(tree, chunk),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _pid, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            raise SystemExit(f"the pool exited with {proc.returncode}")
        check = subprocess.run([str(PYTHON), "-c",
                                "import sys, jobpool; print(jobpool.connect(sys.argv[1]).stats()['done'])",
                                str(db)], cwd="/", env=_env(tree, None), capture_output=True,
                               text=True, check=True)
        if int(check.stdout) != jobs:
            raise SystemExit(f"done: {check.stdout.strip()} of {jobs}")
        return wall, usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=("drain", "ab"))
    parser.add_argument("old", nargs="?", help="ab: the other checkout")
    parser.add_argument("--jobs", type=int, default=20000)
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--chunk", type=int, default=16)
    args = parser.parse_args()
    if args.mode == "ab":
        if not args.old:
            parser.error("ab needs OLD_TREE")
        sides = [("old", Path(args.old).resolve(), None), ("new", ROOT, None)]
    else:
        sides = [("chunk=1", ROOT, None), (f"chunk={args.chunk}", ROOT, args.chunk)]
    with tempfile.TemporaryDirectory() as work:
        template = Path(work) / "template.db"
        build(ROOT, template, args.jobs)
        results: dict[str, list[tuple[float, float]]] = {label: [] for label, _, _ in sides}
        for pair in range(args.pairs):
            # The order alternates too: the first of a pair runs on a cooler page cache.
            order = sides if pair % 2 == 0 else sides[::-1]
            for label, tree, chunk in order:
                wall, cpu = drain(tree, template, args.jobs, chunk)
                results[label].append((wall, cpu))
                print(f"pair {pair + 1} {label:>9}: {wall:6.3f} s wall, {cpu:6.3f} s cpu, "
                      f"{args.jobs / wall:7.0f} jobs/s", flush=True)
    print(f"\nmedians of {args.pairs} ({args.jobs} no-op jobs, --procs 2, SQLite):")
    (first, a), (second, b) = results.items()
    for what, index in (("wall", 0), ("cpu", 1)):
        ratios = sorted(y[index] / x[index] for x, y in zip(a, b))
        print(f"  {second} / {first} {what} per pair (min / median / max): {ratios[0]:.3f} / "
              f"{statistics.median(ratios):.3f} / {ratios[-1]:.3f}")
    for label, runs in results.items():
        wall = statistics.median(r[0] for r in runs)
        cpu = statistics.median(r[1] for r in runs)
        print(f"  {label:>9}: {wall:6.3f} s wall, {cpu:6.3f} s cpu, {args.jobs / wall:7.0f} jobs/s, "
              f"{cpu / args.jobs * 1e6:5.0f} us cpu/job")


if __name__ == "__main__":
    main()
