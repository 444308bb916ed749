"""End-to-end demo: generate CSV exports, queue one import job per file as one
batch, run a pool; the batch's callback writes the summary this prints.

    python -m jobpool.examples.demo [--dir ./demo] [--files 200] [--rows 20000]
                                    [--procs N] [--bad 0]

Everything lives under ``--dir``: the CSV files in ``csv/``, the jobpool store
``jobpool.db``, the application's own database ``warehouse.db``, the import's
``summary.json`` (written by the batch's ``on_complete`` callback) and the pool's log
``pool.log``. All are replaced on each run, so every run starts clean. The pool is the real
``jobpool start --burst`` command in a subprocess; this script only watches the
store's counts while it runs, then checks the warehouse.

Exit status 0 when every job settled, the callback summarised the whole batch and
the warehouse holds exactly the rows of the good files; 1 otherwise.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
import time
from typing import Sequence

import jobpool
from jobpool.errors import StoreError
from jobpool.examples import imports
from jobpool.store.sqlite import SQLiteStore

#: How often the watcher reads the store's counts, seconds.
REFRESH = 1.0


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m jobpool.examples.demo",
        description="Import generated CSV files into a SQLite warehouse with a jobpool pool.")
    parser.add_argument("--dir", default="./demo", help="working directory (default ./demo)")
    parser.add_argument("--files", type=int, default=200, help="CSV files to import (default 200)")
    parser.add_argument("--rows", type=int, default=20_000, help="rows per file (default 20000)")
    parser.add_argument("--procs", type=int, default=os.cpu_count() or 1,
                        help="worker processes (default: CPU count)")
    parser.add_argument("--bad", type=int, default=0,
                        help="files with a malformed row; their jobs go dead (default 0)")
    parser.add_argument("--seed", type=int, default=0, help="seed for the generated data")
    args = parser.parse_args(argv)
    if args.files < 1 or args.rows < 1 or args.procs < 1:
        parser.error("--files, --rows and --procs must be at least 1")
    if not 0 <= args.bad <= args.files:
        parser.error("--bad must be between 0 and --files")
    return args


def remove_database(path: str) -> None:
    """Delete an SQLite database with its WAL and shared-memory files."""
    for suffix in ("", "-wal", "-shm", "-journal"):
        try:
            os.remove(path + suffix)
        except FileNotFoundError:
            pass


def read_stats(store: SQLiteStore, last: dict[str, int]) -> dict[str, int]:
    """The store's counts; on a momentary lock, the last counts we had."""
    try:
        return store.stats()
    except StoreError:
        return last


def files_ended(store: SQLiteStore, batch_id: int, last: int) -> int:
    """The batch's members that have ended (R34: the store's own count)."""
    try:
        status = store.batch_status(batch_id)
    except StoreError:
        return last
    return status.done + status.dead


def watch(pool: subprocess.Popen, store: SQLiteStore, batch_id: int, files: int,
          started: float) -> None:
    """Show progress, from the batch's counts and the store's, until the pool exits."""
    counts = dict.fromkeys(("ready", "scheduled", "running", "done", "dead"), 0)
    ended = 0
    if sys.stdout.isatty():
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                                   TimeElapsedColumn)
        columns = (TextColumn("importing"), BarColumn(bar_width=30), MofNCompleteColumn(),
                   TimeElapsedColumn(), TextColumn("{task.fields[detail]}"))
        with Progress(*columns, refresh_per_second=4) as bar:
            task = bar.add_task("import", total=files, detail="")
            while True:
                exited = _wait(pool)
                counts = read_stats(store, counts)
                ended = files_ended(store, batch_id, ended)
                bar.update(task, completed=ended, detail=_short_detail(counts))
                if exited:
                    return
    while True:
        exited = _wait(pool)
        counts = read_stats(store, counts)
        ended = files_ended(store, batch_id, ended)
        print(f"[{time.monotonic() - started:6.1f} s] {ended}/{files} settled  "
              f"{_detail(counts)}", flush=True)
        if exited:
            return


def _wait(pool: subprocess.Popen) -> bool:
    """Wait up to REFRESH seconds for the pool to exit; True if it has."""
    try:
        pool.wait(timeout=REFRESH)
    except subprocess.TimeoutExpired:
        return False
    return True


def _short_detail(counts: dict[str, int]) -> str:
    """What fits beside the bar in an 80-column terminal."""
    text = f"{counts['running']} running  {counts['dead']} dead"
    if counts["scheduled"]:
        text += f"  {counts['scheduled']} retrying"
    return text


def _detail(counts: dict[str, int]) -> str:
    return (f"done {counts['done']}  dead {counts['dead']}  running {counts['running']}  "
            f"ready {counts['ready']}  scheduled {counts['scheduled']}")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        return run(args)
    except KeyboardInterrupt:
        # Ctrl-C reached the pool too (same process group): it drains, releases its
        # leases and exits; nothing is lost, and a re-run starts clean anyway.
        print("interrupted", file=sys.stderr)
        return 130


def run(args: argparse.Namespace) -> int:
    directory = os.path.abspath(args.dir)
    csv_dir = os.path.join(directory, "csv")
    store_path = os.path.join(directory, "jobpool.db")
    warehouse = os.path.join(directory, "warehouse.db")
    summary_path = os.path.join(directory, "summary.json")

    # A clean slate: old exports (a previous run may have had more files), store, warehouse.
    os.makedirs(csv_dir, exist_ok=True)
    for old in glob.glob(os.path.join(csv_dir, "sales-*.csv")):
        os.remove(old)
    remove_database(store_path)
    remove_database(warehouse)
    if os.path.exists(summary_path):
        os.remove(summary_path)

    began = time.monotonic()
    paths = imports.generate(csv_dir, args.files, args.rows, args.seed, bad=args.bad,
                             workers=args.procs)
    generating = time.monotonic() - began
    print(f"generated {args.files} files of {args.rows:,} rows in {csv_dir} "
          f"in {generating:.1f} s", flush=True)

    imports.prepare_warehouse(warehouse)
    store = jobpool.connect(store_path)
    # R34: one batch; its callback runs once, after the last file's last attempt. The
    # store gives it batch=, which a type checker cannot know of.
    callback = imports.summarize.s(warehouse, summary_path)  # type: ignore[call-arg]
    with store.batch(on_complete=callback) as batch:
        batch.add_many(imports.load_csv.name, [(path, warehouse) for path in paths])
    print(f"queued {len(paths)} jobs in {store_path} as batch {batch.id}; "
          f"starting {args.procs} workers", flush=True)

    command = [sys.executable, "-m", "jobpool", "start", "--app", "jobpool.examples.imports",
               "--db", store_path, "--procs", str(args.procs), "--burst", "-q"]
    # The pool's warnings (a dead job, a crashed child) go to a log file, not over the
    # progress display; the summary lists dead jobs, and a failed pool's log is shown.
    log_path = os.path.join(directory, "pool.log")
    started = time.monotonic()
    with open(log_path, "w") as log:
        pool = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        try:
            watch(pool, store, batch.id, args.files, started)
        finally:
            pool.wait()
    wall = time.monotonic() - started
    summary = _read_summary(summary_path)
    rows = summary["rows"] if summary else imports.count_rows(warehouse)
    expected = (args.files - args.bad) * args.rows
    settled = summary["imported"] + summary["failed"] if summary else 0
    print()
    print(f"files           {summary['files'] if summary else '?'} "
          f"(the batch's summary, written by its callback)")
    print(f"rows imported   {rows:,} (expected {expected:,})")
    if summary:
        print(f"files ok/failed {summary['imported']} / {summary['failed']}")
    print(f"wall            {wall:.1f} s with {args.procs} workers "
          f"(+ {generating:.1f} s generating the files)")
    print(f"throughput      {settled / wall:.1f} jobs/s, {rows / wall:,.0f} rows/s")
    if summary and summary["failed"]:
        print(f"\nfailed files (see: jobpool batches show {batch.id} --db {store_path}):")
        for job_id in summary["failed_jobs"][:5]:
            row = store.get(job_id)
            print(f"  job {job_id}: {(row['last_error'] or '?').splitlines()[0]}")

    problems = []
    if pool.returncode != 0:
        problems.append(f"the pool exited with status {pool.returncode} (log: {log_path})")
        with open(log_path) as log:
            sys.stderr.writelines(log.readlines()[-20:])
    if summary is None:
        problems.append(f"the batch's callback wrote no summary at {summary_path}")
    elif settled != args.files or summary["files"] != args.files:
        problems.append(f"the summary counts {settled} settled of {summary['files']} files, "
                        f"expected {args.files}")
    if rows != expected:
        problems.append(f"the warehouse has {rows:,} rows, expected {expected:,}")
    for problem in problems:
        print(f"demo: FAILED: {problem}", file=sys.stderr)
    return 1 if problems else 0


def _read_summary(path: str) -> dict | None:
    """What the batch's callback wrote, or None if it never ran."""
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except FileNotFoundError:
        return None


if __name__ == "__main__":
    sys.exit(main())
