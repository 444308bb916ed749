"""End-to-end demo: generate CSV exports, queue one import job per file as one
batch, run a pool; the batch's callback writes the summary this prints.

    python -m jobpool.examples.demo [--dir ./demo] [--files 200] [--rows 20000]
                                    [--procs N] [--bad 0] [--clean]

Everything lives under ``--dir``: the CSV files in ``csv/``, the jobpool store
``jobpool.db``, the application's own database ``warehouse.db``, the import's
``summary.json`` (written by the batch's ``on_complete`` callback) and the pool's log
``pool.log``. All are replaced on each run, so every run starts clean, and stay after
it: with the defaults the warehouse and the CSV files take hundreds of megabytes
(``--help`` and the run's last lines say how much); ``--clean`` removes them. The pool
is the real ``jobpool start --burst`` command in a subprocess; this script only
watches the batch's counts while it runs, then checks the warehouse.

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
from typing import NamedTuple, Sequence

import jobpool
from jobpool.display import counted
from jobpool.errors import StoreError
from jobpool.examples import imports
from jobpool.store.sqlite.store import SQLiteStore

#: How often the watcher reads the store's counts, seconds.
REFRESH = 1.0
DEFAULT_FILES = 200
DEFAULT_ROWS = 20_000
#: What a run leaves under --dir, per CSV row: the CSV itself and the warehouse's copy
#: (measured: 20 files of 20,000 rows are 33 MB of CSV and a 61 MB warehouse).
CSV_BYTES_PER_ROW = 83
WAREHOUSE_BYTES_PER_ROW = 153


def disk_note(files: int, rows: int) -> str:
    """What a run of ``files`` x ``rows`` leaves on disk, roughly, and how to remove it."""
    total = files * rows
    return (f"A run of {files} files of {rows:,} rows leaves about "
            f"{megabytes(total * WAREHOUSE_BYTES_PER_ROW)} in DIR/warehouse.db (the imported "
            f"rows) and {megabytes(total * CSV_BYTES_PER_ROW)} of CSV in DIR/csv/. They stay "
            f"for you to look at; the next run replaces them, and --clean removes them.")


def megabytes(size: float) -> str:
    return f"{size / 1e6:,.0f} MB" if size >= 1e6 else f"{size / 1e3:,.0f} kB"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="scripts/demo",
        description="Import generated CSV files into a SQLite warehouse with a jobpool pool.",
        epilog=disk_note(DEFAULT_FILES, DEFAULT_ROWS) + " The first run of scripts/demo "
               "creates .venv and installs jobpool and its dependencies into it (a minute "
               "or so, once).")
    parser.add_argument("--dir", default="./demo", help="working directory (default ./demo)")
    parser.add_argument("--files", type=int, default=DEFAULT_FILES,
                        help=f"CSV files to import (default {DEFAULT_FILES})")
    parser.add_argument("--rows", type=int, default=DEFAULT_ROWS,
                        help=f"rows per file (default {DEFAULT_ROWS})")
    parser.add_argument("--procs", type=int, default=os.cpu_count() or 1,
                        help="worker processes (default: CPU count)")
    parser.add_argument("--bad", type=int, default=0,
                        help="files with a malformed row; their jobs go dead (default 0)")
    parser.add_argument("--seed", type=int, default=0, help="seed for the generated data")
    parser.add_argument("--clean", action="store_true",
                        help="remove what an earlier run left in --dir (the warehouse, the CSV "
                             "files, the store, the summary and the log) and exit")
    return parser


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.files < 1 or args.rows < 1 or args.procs < 1:
        parser.error("--files, --rows and --procs must be at least 1")
    if not 0 <= args.bad <= args.files:
        parser.error("--bad must be between 0 and --files")
    return args


class Paths(NamedTuple):
    """Everything a run writes, under its --dir."""

    directory: str
    csv: str
    store: str
    warehouse: str
    summary: str
    log: str

    @classmethod
    def under(cls, directory: str) -> "Paths":
        directory = os.path.abspath(directory)
        return cls(directory, *(os.path.join(directory, name) for name in (
            "csv", "jobpool.db", "warehouse.db", "summary.json", "pool.log")))

    def remove(self) -> None:
        """Remove what a run wrote (only that), then the directories if left empty."""
        for old in glob.glob(os.path.join(self.csv, "sales-*.csv")):
            os.remove(old)
        remove_database(self.store)
        remove_database(self.warehouse)
        for path in (self.summary, self.summary + ".partial", self.log):
            if os.path.exists(path):
                os.remove(path)
        for directory in (self.csv, self.directory):
            try:
                os.rmdir(directory)
            except OSError:
                pass  # absent, or holding files that are not the demo's

    def sizes(self) -> tuple[int, int]:
        """Bytes of the warehouse (with its WAL) and of the CSV files."""
        warehouse = sum(os.path.getsize(self.warehouse + suffix) for suffix in ("", "-wal")
                        if os.path.exists(self.warehouse + suffix))
        return warehouse, sum(os.path.getsize(p)
                              for p in glob.glob(os.path.join(self.csv, "sales-*.csv")))


def remove_database(path: str) -> None:
    """Delete an SQLite database with its WAL and shared-memory files."""
    for suffix in ("", "-wal", "-shm", "-journal"):
        try:
            os.remove(path + suffix)
        except FileNotFoundError:
            pass


class Progress(NamedTuple):
    """Where the import stands: the batch's members (the files), counted by the store
    (R34), and its summary callback, which is a job of its own, not a member."""

    total: int
    done: int = 0
    dead: int = 0
    running: int = 0
    callback: str = "waits for the last file"

    @property
    def ended(self) -> int:
        return self.done + self.dead

    @property
    def waiting(self) -> int:
        return self.total - self.ended - self.running

    def line(self) -> str:
        return (f"files {self.ended}/{self.total} ended ({self.done} done, {self.dead} dead), "
                f"{self.running} running, {self.waiting} waiting; summary callback: "
                f"{self.callback}")

    def short(self) -> str:
        """What fits beside the bar in an 80-column terminal."""
        return f"{self.running} running  {self.dead} dead"


def read_progress(store: SQLiteStore, batch_id: int, last: Progress) -> Progress:
    """The batch's counts and its callback's state; on a momentary lock, the last ones."""
    try:
        status = store.batch_status(batch_id)
        running = store.batches.members(batch_id).get("running", 0)
        callback = last.callback
        if status.complete_job is not None:
            callback = f"job {status.complete_job} {store.get(status.complete_job)['status']}"
    except StoreError:
        return last
    return Progress(status.total, status.done, status.dead, running, callback)


def watch(pool: subprocess.Popen, store: SQLiteStore, batch_id: int, files: int,
          started: float) -> Progress:
    """Show progress, from the batch's counts, until the pool exits; the last counts."""
    progress = Progress(files)
    if sys.stdout.isatty():
        from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
        from rich.progress import Progress as Bar
        columns = (TextColumn("importing"), BarColumn(bar_width=30), MofNCompleteColumn(),
                   TimeElapsedColumn(), TextColumn("{task.fields[detail]}"))
        with Bar(*columns, refresh_per_second=4) as bar:
            task = bar.add_task("import", total=files, detail="")
            while True:
                exited = _wait(pool)
                progress = read_progress(store, batch_id, progress)
                bar.update(task, completed=progress.ended, detail=progress.short())
                if exited:
                    break
        print(progress.line(), flush=True)
        return progress
    while True:
        exited = _wait(pool)
        progress = read_progress(store, batch_id, progress)
        print(f"[{time.monotonic() - started:6.1f} s] {progress.line()}", flush=True)
        if exited:
            return progress


def _wait(pool: subprocess.Popen) -> bool:
    """Wait up to REFRESH seconds for the pool to exit; True if it has."""
    try:
        pool.wait(timeout=REFRESH)
    except subprocess.TimeoutExpired:
        return False
    return True


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.clean:
        paths = Paths.under(args.dir)
        paths.remove()
        print(f"removed the demo's files from {paths.directory}")
        return 0
    try:
        return run(args)
    except KeyboardInterrupt:
        # Ctrl-C reached the pool too (same process group): it drains, releases its
        # leases and exits; nothing is lost, and a re-run starts clean anyway.
        print("interrupted", file=sys.stderr)
        return 130


def run(args: argparse.Namespace) -> int:
    where = Paths.under(args.dir)
    # A clean slate: old exports (a previous run may have had more files), store, warehouse.
    where.remove()
    os.makedirs(where.csv, exist_ok=True)

    began = time.monotonic()
    paths = imports.generate(where.csv, args.files, args.rows, args.seed, bad=args.bad,
                             workers=args.procs)
    generating = time.monotonic() - began
    print(f"generated {args.files} files of {args.rows:,} rows in {where.csv} "
          f"in {generating:.1f} s", flush=True)

    imports.prepare_warehouse(where.warehouse)
    store = jobpool.connect(where.store)
    # R34: one batch; its callback runs once, after the last file's last attempt. The
    # store gives it batch=, which a type checker cannot know of.
    callback = imports.summarize.s(where.warehouse, where.summary)  # type: ignore[call-arg]
    with store.batch(on_complete=callback) as batch:
        batch.add_many(imports.load_csv.name, [(path, where.warehouse) for path in paths])
    jobs, workers = len(paths), args.procs
    print(f"queued {counted(jobs, 'job')} in {where.store} as batch {batch.id}, "
          f"with a summary callback; starting {counted(workers, 'worker')}",
          flush=True)

    command = [sys.executable, "-m", "jobpool", "start", "--app", "jobpool.examples.imports",
               "--db", where.store, "--procs", str(args.procs), "--burst", "-q"]
    # The pool's warnings (a dead job, a crashed child) go to a log file, not over the
    # progress display; the summary lists dead jobs, and a failed pool's log is shown.
    started = time.monotonic()
    with open(where.log, "w") as log:
        pool = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        try:
            progress = watch(pool, store, batch.id, args.files, started)
        finally:
            pool.wait()
    wall = time.monotonic() - started
    summary = _read_summary(where.summary)
    rows = summary["rows"] if summary else imports.count_rows(where.warehouse)
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
    warehouse_bytes, csv_bytes = where.sizes()
    print(f"left on disk    {megabytes(warehouse_bytes)} in {where.warehouse}, "
          f"{megabytes(csv_bytes)} of CSV in {where.csv}")
    print(f"                (the next run replaces them; remove them: "
          f"scripts/demo --clean{'' if args.dir == './demo' else ' --dir ' + args.dir})")
    if summary and summary["failed"]:
        print(f"\nfailed files (see: jobpool batches show {batch.id} --db {where.store}):")
        for job_id in summary["failed_jobs"][:5]:
            row = store.get(job_id)
            print(f"  job {job_id}: {(row['last_error'] or '?').splitlines()[0]}")

    problems = []
    if pool.returncode != 0:
        problems.append(f"the pool exited with status {pool.returncode} (log: {where.log})")
        with open(where.log) as log:
            sys.stderr.writelines(log.readlines()[-20:])
    if summary is None:
        problems.append(f"the batch's callback wrote no summary at {where.summary}")
    elif settled != args.files or summary["files"] != args.files:
        problems.append(f"the summary counts {settled} settled of {summary['files']} files, "
                        f"expected {args.files}")
    if progress.ended != args.files:
        problems.append(f"the batch counts {progress.ended} files ended, expected {args.files}")
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
