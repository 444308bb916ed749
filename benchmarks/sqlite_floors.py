"""What one no-op job's round costs on this machine before jobpool adds anything
(issue 26: which of its SQLite targets a physical floor puts out of reach).

    .venv/bin/python benchmarks/sqlite_floors.py [--jobs 20000] [--procs 2] [--repeat 3]

Each figure is measured here, in one sitting, with nothing of jobpool's on the path
except where the line says so:

* ``fork``: ``os.fork()``, the child's ``os._exit(0)`` and the parent's ``waitpid``,
  from a process that has imported jobpool (the size of a supervisor that forks);
* ``pipe``: one 64-byte frame to a child and a 64-byte answer back, with raw
  ``os.write``/``os.read`` on two pipes, and the same through ``multiprocess``'s
  ``Connection.send_bytes``/``recv_bytes`` (what jobpool's slots use);
* ``transaction``: one bare SQLite transaction of a turn's shape (``BEGIN IMMEDIATE``,
  a one-row settle ``UPDATE``, a one-row claim ``UPDATE ... RETURNING``, ``COMMIT``),
  WAL, ``synchronous=NORMAL``, 1 KiB pages (jobpool's settings), on a three-column
  table with one index (the claim order), from Python's ``sqlite3``;
* ``jobpool's turn``: the same turn as jobpool runs it (the engine over the compiled
  SQLite driver: its schema, its settle with the attempt's line, its claim);
* ``bare pool``: the smallest pool that keeps R6 (nothing claimed ahead of a free
  slot): a parent and ``--procs`` children over raw pipes; the parent waits in
  ``select``, and each wake-up settles what came back and claims one row per free
  child in one such transaction, then writes each child its job id; a child answers
  at once. Jobs/s, the parent's CPU per job (``getrusage``) and jobs per transaction.
  It is the floor of any design that commits one transaction per turn under R6; a
  compiled loop can take the Python out of it, not the transaction or the pipe;
* ``bare pool, compiled``: the same pool in C (``bare_pool.c``, built here with the
  machine's C compiler against the system's libsqlite3): its store, statements and
  loop, prepared statements stepped with sqlite3's C API, children that answer in C;
  and ``with Python children``: the same C parent, each child a Python process that
  reads the id, calls a Python function with it and answers (what any Python job pool
  must do per job). The floor of the design with no interpreter in the parent: what
  the issue allows a target to be given up against. "n/a" where there is no compiler;
* ``bare pool over jobpool's turn``: the same bare loop, raw pipes and children, but
  each wake-up is jobpool's own turn (the engine's ``Claimer.turn`` over the compiled
  driver, on a store made by ``jobpool.connect``): what jobpool's schema and statements
  allow a pool whose loop and children cost nothing more than the bare ones. The
  distance from here to ``bare pool`` is the store's; from ``jobpool`` to here, the
  supervisor's loop and the children's;
* ``jobpool``: ``jobpool start --burst -q --procs N`` over the same number of no-op
  jobs on a fresh store, run in a forked process so that the supervisor's own CPU
  (``RUSAGE_SELF``) and its children's (``RUSAGE_CHILDREN``) are read apart;
* ``wake``: the writer's own time in one ``os.write`` of a byte to a child that
  waits in a blocking ``read`` (its CPU asleep: the kernel wakes it, which on a virtual
  machine whose idle CPUs do not poll is a trip through the hypervisor) against one
  to a child that polls the pipe without sleeping: what each job handed to a waiting
  child costs the supervisor before anything of jobpool's;
* ``bulk``: ``enqueue_many``'s own statement (``INSERT_BATCH``, 100 000 argument lists
  in one transaction, ``synchronous=FULL``, a 64 MiB cache) into a store made by
  ``jobpool.connect``, with every index, with the jobs table's indexes dropped, and the
  same rows' payloads into a bare two-column table: rows/s, the floor under the bulk
  target.

``--only fork,pipe,turn,pools,jobpool,wake,bulk`` runs some of them (default: all).

The section of BENCHMARKS.md that quotes these says how they compare with the
issue's targets (per-job budgets at ``--procs 2`` on two cores).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import resource
import select
import sqlite3
import statistics
import sys
import tempfile
import time

FRAME = b"x" * 64
#: The floors ``--only`` may choose.
PARTS = ("fork", "pipe", "turn", "pools", "jobpool", "wake", "bulk")


def fork_cost(n: int) -> float:
    """Microseconds for one fork + exit + wait."""
    import jobpool  # noqa: F401  (a supervisor-sized process forks)
    began = time.perf_counter()
    for _ in range(n):
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
    return (time.perf_counter() - began) / n * 1e6


def _echo_child(size: int, polling: bool = False) -> tuple[int, int, int]:
    """A forked child that answers each frame of up to ``size`` bytes with the same
    bytes, raw pipes (``polling``: it polls its pipe instead of sleeping in ``read``)
    and exits at the end of its input: ``(pid, to_child, from_child)``."""
    to_child_r, to_child_w = os.pipe()
    to_parent_r, to_parent_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(to_child_w)
        os.close(to_parent_r)
        os.set_blocking(to_child_r, not polling)
        while True:
            try:
                frame = os.read(to_child_r, size)
            except BlockingIOError:
                continue
            if not frame:
                os._exit(0)
            os.write(to_parent_w, frame)
    os.close(to_child_r)
    os.close(to_parent_w)
    return pid, to_child_w, to_parent_r


def raw_pipe_round_trip(n: int) -> float:
    """Microseconds for a 64-byte frame to a child and its answer, raw pipes."""
    pid, to_child_w, to_parent_r = _echo_child(64)
    for _ in range(200):
        os.write(to_child_w, FRAME)
        os.read(to_parent_r, 64)
    began = time.perf_counter()
    for _ in range(n):
        os.write(to_child_w, FRAME)
        os.read(to_parent_r, 64)
    elapsed = time.perf_counter() - began
    os.close(to_child_w)
    os.waitpid(pid, 0)
    os.close(to_parent_r)
    return elapsed / n * 1e6


def connection_round_trip(n: int) -> float:
    """The same through ``multiprocess`` connections (length-prefixed frames)."""
    import multiprocess
    parent, child = multiprocess.Pipe(duplex=True)
    pid = os.fork()
    if pid == 0:
        parent.close()
        while True:
            try:
                child.send_bytes(child.recv_bytes())
            except EOFError:
                os._exit(0)
    child.close()
    for _ in range(200):
        parent.send_bytes(FRAME)
        parent.recv_bytes()
    began = time.perf_counter()
    for _ in range(n):
        parent.send_bytes(FRAME)
        parent.recv_bytes()
    elapsed = time.perf_counter() - began
    parent.close()
    os.waitpid(pid, 0)
    return elapsed / n * 1e6


def wake_cost(n: int, polling: bool) -> float:
    """Microseconds of the writer's ``os.write`` of one byte to a child reading the pipe,
    the child asleep in a blocking read (``polling`` False) or polling it (True); the
    writer then waits for the child's answer and does a little work, as a supervisor
    between two hand-overs."""
    pid, to_child_w, to_parent_r = _echo_child(1, polling)
    spent = 0
    for i in range(n + 200):
        began = time.perf_counter_ns()
        os.write(to_child_w, b"x")
        if i >= 200:
            spent += time.perf_counter_ns() - began
        os.read(to_parent_r, 1)
        sum(range(200))  # the supervisor's own work before the next hand-over
    os.close(to_child_w)
    os.waitpid(pid, 0)
    os.close(to_parent_r)
    return spent / n / 1000


def bulk_insert_rate(rows: int, kind: str) -> float:
    """Rows/s of ``enqueue_many``'s statement alone (one transaction of ``rows`` argument
    lists): ``kind`` "every index" (a store made by ``jobpool.connect``), "no index" (its
    jobs table's indexes dropped), or "bare" (the payloads into a two-column table)."""
    import jobpool
    from jobpool.store.sqlite import statements as sql
    from jobpool.store.sqlite.store import BULK_CACHE_KIB
    batch = json.dumps([[i] for i in range(rows)])
    with tempfile.TemporaryDirectory() as where:
        path = os.path.join(where, "store.db")
        if kind == "bare":
            db = sqlite3.connect(path, isolation_level=None)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, payload TEXT)")
            text = "INSERT INTO t (payload) SELECT '[' || value || ',{}]' FROM json_each(:batch)"
            params: dict = {"batch": batch}
        else:
            jobpool.connect(path).close()
            db = sqlite3.connect(path, isolation_level=None)
            if kind == "no index":
                for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'index' "
                                          "AND tbl_name = 'jobs' AND sql IS NOT NULL").fetchall():
                    db.execute(f"DROP INDEX {name}")
            now = time.time()
            text = sql.INSERT_BATCH
            params = {"batch": batch, "queue": "default", "name": "floors.noop", "args_only": 1,
                      "priority": 0, "run_at": now, "max_attempts": 3, "timeout": 60.0,
                      "now": now, "batch_id": None, "first": 1}  # the store is empty
        db.execute("PRAGMA synchronous=FULL")
        db.execute(f"PRAGMA cache_size=-{BULK_CACHE_KIB}")  # enqueue_many's own for a batch this big
        began = time.perf_counter()
        db.execute("BEGIN IMMEDIATE")
        db.execute(text, params)
        db.execute("COMMIT")
        elapsed = time.perf_counter() - began
        db.close()
    return rows / elapsed


def bare_store(path: str, jobs: int) -> sqlite3.Connection:
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    db.execute("PRAGMA page_size=1024")
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.execute("CREATE TABLE jobs (id INTEGER PRIMARY KEY, status INTEGER NOT NULL, lease REAL)")
    db.execute("CREATE INDEX jobs_ready ON jobs (id) WHERE status = 0")
    db.execute("BEGIN")
    db.executemany("INSERT INTO jobs (status) VALUES (0)", ((),) * jobs)
    db.execute("COMMIT")
    return db


SETTLE = "UPDATE jobs SET status = 2, lease = NULL WHERE id = ? AND status = 1"
CLAIM = ("UPDATE jobs SET status = 1, lease = ? WHERE id IN "
         "(SELECT id FROM jobs WHERE status = 0 ORDER BY id LIMIT ?) RETURNING id")


def transaction_cost(n: int) -> float:
    """Microseconds for one bare turn: settle one row, claim one row, commit."""
    with tempfile.TemporaryDirectory() as where:
        db = bare_store(os.path.join(where, "floor.db"), n + 1)
        held = db.execute("BEGIN IMMEDIATE") and db.execute(CLAIM, (1.0, 1)).fetchall()
        db.execute("COMMIT")
        began = time.perf_counter()
        for _ in range(n):
            db.execute("BEGIN IMMEDIATE")
            db.execute(SETTLE, (held[0][0],))
            held = db.execute(CLAIM, (1.0, 1)).fetchall()
            db.execute("COMMIT")
        elapsed = time.perf_counter() - began
        db.close()
        return elapsed / n * 1e6


def jobpool_turn_cost(n: int) -> float:
    """Microseconds for jobpool's own turn (the engine over the SQLite driver, its
    schema and statements) settling one success and claiming one job."""
    import random

    import jobpool
    from jobpool import job
    from jobpool.lifecycle import DONE, Outcome

    @job(name="floors.turn")
    def turn_noop(i):
        return None

    with tempfile.TemporaryDirectory() as where:
        store = jobpool.connect(os.path.join(where, "turn.db"))
        store.enqueue_many("floors.turn", [(i,) for i in range(n + 1)])
        claimer = store.claimer("floors-owner", ["floors.turn"], ["default"], {})
        rng = random.Random(1)
        claimed, _ = claimer.claim(1, time.time())
        began = time.perf_counter()
        for _ in range(n):
            job_row = claimed[0]
            _, claimed, _ = claimer.turn([Outcome(job_row.job_id, job_row.attempt, DONE)], 1,
                                         time.time(), rng)
        elapsed = time.perf_counter() - began
        claimer.close()
        store.close()
        return elapsed / n * 1e6


def _bare_child(jobs_r: int, answers_w: int) -> None:
    while True:
        frame = os.read(jobs_r, 8)
        if not frame:
            os._exit(0)
        os.write(answers_w, frame)


class _BareTurn:
    """The bare pool's transaction: settle the ids that came back, claim ``want``."""

    def __init__(self, path: str, jobs: int) -> None:
        self.db = bare_store(path, jobs)

    def turn(self, finished: list[int], want: int) -> list[int]:
        db = self.db
        db.execute("BEGIN IMMEDIATE")
        for job_id in finished:
            db.execute(SETTLE, (job_id,))
        claimed = db.execute(CLAIM, (1.0, want)).fetchall() if want else []
        db.execute("COMMIT")
        return [job_id for (job_id,) in claimed]

    def left(self) -> int:
        left = self.db.execute("SELECT count(*) FROM jobs WHERE status != 2").fetchone()[0]
        self.db.close()
        return left


class _JobpoolTurn:
    """jobpool's own turn (the engine over the compiled driver) in the bare loop: a
    finished id settles as a success of the attempt its claim gave."""

    def __init__(self, path: str, jobs: int) -> None:
        import random

        import jobpool
        from jobpool import job

        @job(name="floors.pool")
        def pool_noop(i):
            return None

        self.store = jobpool.connect(path)
        self.store.enqueue_many("floors.pool", [(i,) for i in range(jobs)])
        self.claimer = self.store.claimer("floors-owner", ["floors.pool"], ["default"], {})
        self.rng = random.Random(1)
        self.attempts: dict[int, int] = {}

    def turn(self, finished: list[int], want: int) -> list[int]:
        from jobpool.lifecycle import DONE, Outcome
        outcomes = [Outcome(job_id, self.attempts.pop(job_id), DONE) for job_id in finished]
        _, claimed, _ = self.claimer.turn(outcomes, want, time.time(), self.rng)
        for row in claimed:
            self.attempts[row.job_id] = row.attempt
        return [row.job_id for row in claimed]

    def left(self) -> int:
        self.claimer.close()
        counts = self.store.stats()
        left = counts["ready"] + counts["running"]
        self.store.close()
        return left


def bare_pool(jobs: int, procs: int, store_kind: type = _BareTurn) -> dict[str, float]:
    """Drain ``jobs`` rows with the smallest R6 pool: see the module's docstring.
    ``store_kind``: whose transaction each wake-up runs (the bare one, or jobpool's)."""
    with tempfile.TemporaryDirectory() as where:
        store = store_kind(os.path.join(where, "pool.db"), jobs)
        children = []
        for _ in range(procs):
            jobs_r, jobs_w = os.pipe()
            answers_r, answers_w = os.pipe()
            pid = os.fork()
            if pid == 0:
                for fd in [jobs_w, answers_r, *(fd for _, w, r in children for fd in (w, r))]:
                    os.close(fd)  # only the parent may hold a writer, or EOF never comes
                _bare_child(jobs_r, answers_w)
            os.close(jobs_r)
            os.close(answers_w)
            children.append((pid, jobs_w, answers_r))
        by_answer = {answers_r: jobs_w for _, jobs_w, answers_r in children}
        free = [jobs_w for _, jobs_w, _ in children]
        finished: list[int] = []
        done = turns = 0
        before = resource.getrusage(resource.RUSAGE_SELF)
        began = time.perf_counter()
        while done < jobs:
            claimed = store.turn(finished, len(free))
            turns += 1
            done += len(finished)
            finished = []
            for job_id in claimed:
                os.write(free.pop(), job_id.to_bytes(8, "little"))
            if done >= jobs:
                break
            ready, _, _ = select.select(list(by_answer), [], [])
            for answers_r in ready:
                finished.append(int.from_bytes(os.read(answers_r, 8), "little"))
                free.append(by_answer[answers_r])
        wall = time.perf_counter() - began
        after = resource.getrusage(resource.RUSAGE_SELF)
        for pid, jobs_w, answers_r in children:
            os.close(jobs_w)
            os.close(answers_r)
            os.waitpid(pid, 0)
        left = store.left()
        if left:
            raise SystemExit(f"bare pool: {left} rows not done")
        cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
        return {"jobs_per_s": jobs / wall, "parent_cpu_us": cpu / jobs * 1e6,
                "jobs_per_turn": jobs / turns}


#: The Python child of the compiled bare pool: answers each id after calling a function
#: with it, as a job pool's child must (``bare_pool.c`` passes the two pipes' numbers).
_PYTHON_CHILD = """
import os, sys
jobs_r, answers_w = int(sys.argv[-2]), int(sys.argv[-1])
def job(i):
    return None
os.write(answers_w, b"r")
while frame := os.read(jobs_r, 8):
    job(int.from_bytes(frame, "little"))
    os.write(answers_w, frame)
"""


def build_bare_pool(where: str) -> str | None:
    """``bare_pool.c`` compiled into ``where``: the program's path, or None when this
    machine has no C compiler or no SQLite headers (the lines say "n/a")."""
    import shutil
    import subprocess
    compiler = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if compiler is None:
        return None
    program = os.path.join(where, "bare_pool")
    source = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bare_pool.c")
    built = subprocess.run([compiler, "-O2", "-o", program, source, "-lsqlite3"],
                           capture_output=True, text=True)
    if built.returncode != 0:
        print(f"bare_pool.c did not build: {built.stderr.strip()}", file=sys.stderr)
        return None
    return program


def compiled_bare_pool(program: str, jobs: int, procs: int,
                       python_children: bool = False) -> dict[str, float]:
    """The compiled bare pool over a fresh store (``bare_pool.c``); ``python_children``:
    each child a Python process calling a function per job."""
    import subprocess
    with tempfile.TemporaryDirectory() as where:
        child = [sys.executable, "-c", _PYTHON_CHILD] if python_children else []
        ran = subprocess.run([program, os.path.join(where, "bare.db"), str(jobs), str(procs),
                              *child], capture_output=True, text=True, timeout=600)
        if ran.returncode != 0:
            raise SystemExit(f"bare_pool: exit {ran.returncode}: {ran.stderr.strip()}")
        return json.loads(ran.stdout)


def jobpool_drain(jobs: int, procs: int, *extra: str) -> dict[str, float]:
    """``jobpool start --burst`` in a forked process: throughput and CPU by process
    (``extra``: more flags for ``jobpool start``)."""
    import jobpool
    from jobpool import job

    @job(name="floors.noop")
    def noop(i):
        return None

    with tempfile.TemporaryDirectory() as where:
        path = os.path.join(where, "jobpool.db")
        store = jobpool.connect(path)
        store.enqueue_many("floors.noop", [(i,) for i in range(jobs)])
        store.close()
        answer_r, answer_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            from jobpool import cli
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.dup2(devnull, 2)
            began = time.perf_counter()
            code = cli.main(["start", "--db", path, "--burst", "-q", "--procs", str(procs),
                             "--no-dashboard", *extra])
            wall = time.perf_counter() - began
            own = resource.getrusage(resource.RUSAGE_SELF)
            kids = resource.getrusage(resource.RUSAGE_CHILDREN)
            os.write(answer_w, json.dumps([code, wall, own.ru_utime + own.ru_stime,
                                           kids.ru_utime + kids.ru_stime]).encode())
            os._exit(0)
        os.close(answer_w)
        answer = b""
        while chunk := os.read(answer_r, 4096):
            answer += chunk
        os.waitpid(pid, 0)
        code, wall, own, kids = json.loads(answer)
        done = jobpool.connect(path).stats()["done"]
        if code != 0 or done != jobs:
            raise SystemExit(f"jobpool drain: exit {code}, {done} of {jobs} done")
        return {"jobs_per_s": jobs / wall, "supervisor_cpu_us": own / jobs * 1e6,
                "children_cpu_us": kids / jobs * 1e6}


def bare_pools(jobs: int, procs: int, program: str | None, keep) -> None:
    """The bare pools (in Python, in C with C and with Python children, and over
    jobpool's turn), each figure handed to ``keep(name, value)``."""
    pool = bare_pool(jobs, procs)
    keep(f"bare pool --procs {procs} (jobs/s)", pool["jobs_per_s"])
    keep("bare pool: parent CPU per job (µs)", pool["parent_cpu_us"])
    keep("bare pool: jobs per transaction", pool["jobs_per_turn"])
    for python_children, label in ((False, "bare pool, compiled"),
                                   (True, "bare pool, compiled, with Python children")):
        pool = (compiled_bare_pool(program, jobs, procs, python_children)
                if program else {"jobs_per_s": math.nan, "parent_cpu_us": math.nan,
                                 "jobs_per_turn": math.nan})
        keep(f"{label} --procs {procs} (jobs/s)", pool["jobs_per_s"])
        keep(f"{label}: parent CPU per job (µs)", pool["parent_cpu_us"])
        keep(f"{label}: jobs per transaction", pool["jobs_per_turn"])
    pool = bare_pool(jobs, procs, _JobpoolTurn)
    keep(f"bare pool over jobpool's turn --procs {procs} (jobs/s)", pool["jobs_per_s"])
    keep("bare pool over jobpool's turn: parent CPU per job (µs)", pool["parent_cpu_us"])
    keep("bare pool over jobpool's turn: jobs per transaction", pool["jobs_per_turn"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=20000)
    parser.add_argument("--procs", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--only", default=",".join(PARTS),
                        help=f"comma-separated, of: {', '.join(PARTS)}")
    args = parser.parse_args()
    parts = {part.strip() for part in args.only.split(",")} - {""}
    if not parts or not parts <= set(PARTS):
        parser.error(f"--only takes some of {', '.join(PARTS)}, not {args.only!r}")
    rows: dict[str, list[float]] = {}

    def keep(name: str, value: float) -> None:
        rows.setdefault(name, []).append(value)

    built = tempfile.TemporaryDirectory()
    program = build_bare_pool(built.name) if "pools" in parts else None
    for _ in range(args.repeat):
        if "fork" in parts:
            keep("fork + exit + wait (µs)", fork_cost(500))
        if "pipe" in parts:
            keep("pipe round trip, raw (µs)", raw_pipe_round_trip(5000))
            keep("pipe round trip, multiprocess Connection (µs)", connection_round_trip(5000))
        if "wake" in parts:
            keep("write waking a sleeping reader (µs)", wake_cost(5000, polling=False))
            keep("write to a polling reader (µs)", wake_cost(5000, polling=True))
        if "turn" in parts:
            keep("bare turn transaction, 1 settle + 1 claim (µs)", transaction_cost(5000))
            keep("jobpool's turn, 1 settle + 1 claim (µs)", jobpool_turn_cost(5000))
        if "pools" in parts:
            bare_pools(args.jobs, args.procs, program, keep)
        if "jobpool" in parts:
            drain = jobpool_drain(args.jobs, args.procs)
            keep(f"jobpool --procs {args.procs} (jobs/s)", drain["jobs_per_s"])
            keep("jobpool: supervisor CPU per job (µs)", drain["supervisor_cpu_us"])
            keep("jobpool: children's CPU per job (µs)", drain["children_cpu_us"])
        if "bulk" in parts:  # last: its durable writes are not the pools' to wait behind
            for kind in ("every index", "no index", "bare"):
                keep(f"bulk insert of 100 000 rows, {kind} (k rows/s)",
                     bulk_insert_rate(100_000, kind) / 1000)
    width = max(len(name) for name in rows)
    print(f"{'floor':<{width}}  {'median':>9}  {'min':>9}  {'max':>9}   ({args.repeat} repeats,"
          f" {args.jobs} jobs)")
    for name, values in rows.items():
        if any(math.isnan(v) for v in values):
            print(f"{name:<{width}}  {'n/a':>9}   (no C compiler or SQLite headers here)")
            continue
        print(f"{name:<{width}}  {statistics.median(values):>9.1f}  {min(values):>9.1f}  "
              f"{max(values):>9.1f}")
    sys.stdout.flush()
    built.cleanup()


if __name__ == "__main__":
    main()
