#!/usr/bin/env python
"""jobpool against Huey, Celery, RQ and Dramatiq on the same jobs, on this machine.

    .venv/bin/python benchmarks/compare.py [--repeat N] [--quick] [--only NAME[,NAME...]]
                                           [--db postgresql://...]

Run it with the project's venv (jobpool importable). It creates
``benchmarks/.venv-peers`` on first use (``python3 -m venv`` and ``pip install
huey celery[redis] rq dramatiq[redis] redis``), starts its own ``redis-server`` on
a free loopback port (6390 or above, no persistence), runs each workload for
each system ``--repeat`` times (3 by default; interleaved, so drift hits every
system alike) and prints one table: the median, min-max, and how many times
better jobpool is ("jobpool ×"; above 1 means jobpool wins).

With ``--db URL`` (a ``postgresql://`` URL) jobpool also runs every workload on
a PostgreSQL store, the row "jobpool on PostgreSQL" (system ``jobpool-pg``),
whose "jobpool ×" is SQLite's jobpool over it. Each of its runs gets a schema of
its own (``?schema=bench_<random>``), dropped before the next and at the end, so
every run starts from an empty store and the database is left as it was.

Workloads (sizes of a full run; ``--quick`` shrinks them and repeats once):

* W1 drain: 10 000 ``noop(i)`` queued first, then 2 workers started; jobs/s from
  worker start until the counter reaches 10 000. jobpool is timed as the whole
  ``jobpool start --burst -q --procs 2`` process, exit included.
* W1 drain, 8 procs (``w1-drain8``): the same with 8 workers (jobpool ``--procs 8``,
  Huey ``-w 8``, Celery ``-c 8``, RQ 8, Dramatiq ``-p 8``) on the same 2 cores: how the
  pool's overhead grows with more slots than cores, as users run CPU-bound pools.
* W1 enqueue: 2 000 one-at-a-time enqueues of ``noop(i)``, no worker running:
  jobpool (durable default), jobpool ``durability="normal"``, raw SQLite
  (same schema and row, one transaction per row, WAL, synchronous FULL and
  NORMAL: the floor), and each peer's own enqueue call.
* W1 bulk: one bulk enqueue of 100 000 rows: jobpool ``enqueue_many``, raw
  SQLite ``executemany``, RQ ``enqueue_many``; "n/a" for peers without one.
* W2: 400 ``cpu(20)`` jobs (a pure-Python loop calibrated here to 20 ms of CPU)
  queued first, then 2 workers; efficiency = total job CPU (the sum of what
  each body measured with ``time.process_time``) ÷ (2 cores × wall, timed as
  W1 drain). The JSON also keeps ``w2_eff_est``: 400 × one body's CPU measured
  by the harness before the run, ÷ (2 × wall). Its floor in the same sitting: the
  400 bodies in two processes the harness forks, no pool at all ("two bare
  processes"); where that floor takes more than 0.9 of Huey's wall, the wall target
  is beyond any pool on these cores, and the targets say so.
* W3: idle workers (a warm-up job has run, then 1 s of nothing), 200
  ``stamp(t)`` jobs enqueued one at a time 20 ms apart; p50 and p99 of
  (job start - time just before the enqueue call), their max (the slowest
  pickup of the run), and p99 and max measured from the moment the enqueue call
  returned. jobpool runs twice: its durable default, and its producer at
  ``durability="normal"`` (no fsync a commit, as the Redis of the peers here).

Every job body lives in ``bench_jobs/common.py``: each job appends one
fixed-size record to a file opened ``O_APPEND``; done = size ÷ record size.

Every process it starts gets its own session (``start_new_session=True``); they
are stopped by process group and then by session id, in ``finally`` blocks, so
nothing is left running, even after Ctrl-C.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import random
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
WORK = BENCH / ".work"
LOGS = WORK / "logs"
PEERS_VENV = BENCH / ".venv-peers"
PEERS_PY = PEERS_VENV / "bin" / "python"
PEER_PACKAGES = ["huey", "celery[redis]", "rq", "dramatiq[redis]", "redis", "pgqueuer[asyncpg]",
                 "procrastinate", "psycopg[binary]"]
PEERS = ("huey", "celery", "rq", "dramatiq")
REDIS_PEERS = ("celery", "rq", "dramatiq")
#: Peers on the PostgreSQL server ``--db`` names (W1 drain only), each run in a schema of
#: its own: pgqueuer with 2 concurrent jobs fetched one at a time, pgqueuer with its
#: default batch of 10 and 20 concurrent jobs, procrastinate with 2 concurrent jobs.
PG_PEERS = ("pgqueuer", "pgqueuer-batch", "procrastinate")
SYSTEMS = ("jobpool",) + PEERS + PG_PEERS
WORKLOADS = ("w1-drain", "w1-drain8", "w1-enqueue", "w1-bulk", "w2", "w3")
#: jobpool on the PostgreSQL store that ``--db`` names.
JOBPOOL_PG = "jobpool-pg"
#: jobpool on that store with ``?durability=normal`` (R26a; W1 drain only).
JOBPOOL_PG_NORMAL = "jobpool-pg-normal"
#: Systems whose workers are ``jobpool start`` (timed with ``--burst`` in a drain).
JOBPOOL_POOLS = ("jobpool", JOBPOOL_PG, JOBPOOL_PG_NORMAL)
#: Systems whose runs each take a schema of their own in the ``--db`` database.
PG_SYSTEMS = (JOBPOOL_PG, JOBPOOL_PG_NORMAL) + PG_PEERS

sys.path.insert(0, str(BENCH))
sys.path.insert(1, str(ROOT))  # this checkout's jobpool, as the pools it starts import
from bench_jobs import common  # noqa: E402

FULL = dict(drain=10_000, cpu_jobs=400, cpu_ms=20.0, stamps=200, gap_ms=20.0, idle_s=1.0,
            single=2_000, bulk=100_000)
QUICK = dict(drain=1_000, cpu_jobs=40, cpu_ms=20.0, stamps=30, gap_ms=20.0, idle_s=0.5,
             single=200, bulk=10_000)

# metric key -> (title, unit, higher is better)
METRICS = {
    "w1_drain": ("W1 drain {drain} noop jobs, 2 procs", "jobs/s", True),
    "w1_drain8": ("W1 drain {drain} noop jobs, 8 procs", "jobs/s", True),
    "w1_single": ("W1 enqueue one at a time ({single})", "jobs/s", True),
    "w1_bulk": ("W1 bulk enqueue ({bulk} rows)", "rows/s", True),
    "w2_eff": ("W2 {cpu_jobs} × {cpu_ms:g} ms CPU jobs, 2 procs", "efficiency", True),
    "w2_wall": ("W2 wall", "s", False),
    "w3_p50": ("W3 pickup p50 ({stamps} jobs {gap_ms:g} ms apart)", "ms", False),
    "w3_p99": ("W3 pickup p99", "ms", False),
    "w3_p99_ret": ("W3 p99 from enqueue return", "ms", False),
    "w3_max": ("W3 pickup max", "ms", False),
    "w3_max_ret": ("W3 max from enqueue return", "ms", False),
}
METRIC_WORKLOAD = {"w1_drain": "w1-drain", "w1_drain8": "w1-drain8", "w1_single": "w1-enqueue",
                   "w1_bulk": "w1-bulk",
                   "w2_eff": "w2", "w2_wall": "w2", "w3_p50": "w3", "w3_p99": "w3",
                   "w3_p99_ret": "w3", "w3_max": "w3", "w3_max_ret": "w3"}
#: W2's floor: the same bodies in two bare forked processes, no pool at all.
BARE = "bare"
ROW_ORDER = ("jobpool", JOBPOOL_PG, JOBPOOL_PG_NORMAL, "jobpool-normal", "sqlite-full",
             "sqlite-normal", BARE) + PEERS + PG_PEERS
LABELS = {
    "jobpool": "jobpool",
    JOBPOOL_PG: "jobpool on PostgreSQL",
    JOBPOOL_PG_NORMAL: "jobpool on PostgreSQL, durability=normal",
    "jobpool-normal": "jobpool durability=normal",
    "sqlite-full": "raw SQLite, synchronous=FULL",
    "sqlite-normal": "raw SQLite, synchronous=NORMAL",
    BARE: "two bare processes (the floor)",
}


#: How often the harness looks at the counter while workers run, seconds: coarse
#: enough to cost the 2 cores nothing measurable, fine enough for multi-second runs.
POLL = 0.005


class BenchError(Exception):
    pass


# -- processes ------------------------------------------------------------------------

def session_members(sid: int) -> list[int]:
    """Pids whose session id is ``sid`` (read from /proc/PID/stat only)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        # after the command name: state ppid pgrp session ...
        if len(fields) > 3 and int(fields[3]) == sid and fields[0] != b"Z":
            found.append(int(entry))
    return found


class Procs:
    """Everything this run starts: each in its own session, all ended in ``finally``."""

    def __init__(self) -> None:
        self.sessions: set[int] = set()
        self.live: list[subprocess.Popen] = []

    def popen(self, cmd, *, env, log_name: str, cwd=BENCH) -> subprocess.Popen:
        LOGS.mkdir(parents=True, exist_ok=True)
        log = open(LOGS / f"{log_name}.log", "ab")
        log.write(f"\n$ {' '.join(map(str, cmd))}\n".encode())
        log.flush()
        try:
            proc = subprocess.Popen([str(c) for c in cmd], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                                    stdout=log, stderr=log, start_new_session=True)
        finally:
            log.close()
        proc.log_path = LOGS / f"{log_name}.log"  # type: ignore[attr-defined]
        self.sessions.add(proc.pid)
        self.live.append(proc)
        return proc

    def run(self, cmd, *, env, timeout: float, log_name: str) -> str:
        """Run to completion; stdout returned, stderr to the log; raise on failure."""
        LOGS.mkdir(parents=True, exist_ok=True)
        with open(LOGS / f"{log_name}.log", "ab") as log:
            log.write(f"\n$ {' '.join(map(str, cmd))}\n".encode())
            log.flush()
            proc = subprocess.Popen([str(c) for c in cmd], cwd=BENCH, env=env,
                                    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log,
                                    start_new_session=True)
            self.sessions.add(proc.pid)
            self.live.append(proc)
            try:
                out, _ = proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.stop(proc, grace=0)
                raise BenchError(f"{cmd[1] if len(cmd) > 1 else cmd[0]} timed out after "
                                 f"{timeout:.0f} s (log: {LOGS / (log_name + '.log')})") from None
            finally:
                self.stop(proc, grace=0)
        if proc.returncode != 0:
            raise BenchError(f"{' '.join(map(str, cmd[1:4]))} exited {proc.returncode}: "
                             f"{tail(LOGS / (log_name + '.log'))}")
        return out.decode()

    def stop(self, proc: subprocess.Popen, grace: float = 5.0) -> None:
        """TERM the leader (each system stops its own children on TERM), KILL the
        process group after ``grace``, then KILL any straggler that left the group
        but not the session (RQ's work horses call setpgrp)."""
        if proc.poll() is None and grace > 0:
            try:
                os.kill(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        self.kill_session(proc.pid)
        if proc in self.live:
            self.live.remove(proc)

    def kill_session(self, sid: int) -> int:
        killed = 0
        for _ in range(50):
            members = session_members(sid)
            if not members:
                break
            for pid in members:
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed += 1
                except ProcessLookupError:
                    pass
            time.sleep(0.02)
        return killed

    def stop_all(self) -> int:
        for proc in list(self.live):
            self.stop(proc, grace=2.0)
        return sum(self.kill_session(sid) for sid in self.sessions)

    def leftovers(self) -> list[int]:
        return [pid for sid in self.sessions for pid in session_members(sid)]


def tail(path: Path, lines: int = 6) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "(no log)"
    return " | ".join(line.strip() for line in text[-lines:])


# -- environment ----------------------------------------------------------------------

def check_jobpool() -> str:
    venv_python = ROOT / ".venv" / "bin" / "python"
    try:
        import jobpool  # noqa: F401
    except ImportError:
        if venv_python.exists() and Path(sys.executable).absolute() != venv_python.absolute() \
                and not os.environ.get("BENCH_REEXEC"):
            # `python benchmarks/compare.py` from anywhere: continue under the project's venv.
            os.environ["BENCH_REEXEC"] = "1"
            os.execv(str(venv_python), [str(venv_python), __file__, *sys.argv[1:]])
    try:
        import jobpool  # noqa: F401
        from jobpool import core
    except ImportError as exc:
        raise SystemExit(f"compare.py: jobpool is not importable by {sys.executable} ({exc}); "
                         f"run it as {ROOT / '.venv/bin/python'} benchmarks/compare.py") from None
    expected = ROOT / ".venv" / "bin" / "python"
    if Path(sys.executable).absolute() != expected.absolute():
        print(f"note: running under {sys.executable}, not {expected}", file=sys.stderr)
    byte_compile(Path(jobpool.__file__).parent, BENCH / "bench_jobs")
    return core.NAME


def byte_compile(*packages: Path) -> None:
    """Write the .pyc files an ordinary ``pip install`` writes, as it did for the
    peers: jobpool is installed editable here, and with PYTHONDONTWRITEBYTECODE set
    every timed ``jobpool start`` would otherwise compile its modules again
    (~80 ms of a W1 run)."""
    import compileall
    for package in packages:
        compileall.compile_dir(str(package), quiet=1)


def ensure_peers_venv() -> str | None:
    """Create benchmarks/.venv-peers if missing. Returns None, or why the peers cannot run."""
    check = [str(PEERS_PY), "-c",
             "import huey, celery, rq, dramatiq, redis, pgqueuer, procrastinate, asyncpg"]
    if PEERS_PY.exists() and subprocess.run(check, capture_output=True).returncode == 0:
        return None
    print(f"creating {PEERS_VENV} and installing {' '.join(PEER_PACKAGES)} ...", file=sys.stderr)
    python3 = shutil.which("python3") or sys.executable
    try:
        subprocess.run([python3, "-m", "venv", str(PEERS_VENV)], check=True)
        subprocess.run([str(PEERS_PY), "-m", "pip", "install", "-q", *PEER_PACKAGES], check=True)
    except (subprocess.CalledProcessError, OSError) as exc:
        return f"could not build {PEERS_VENV}: {exc}"
    result = subprocess.run(check, capture_output=True, text=True)
    if result.returncode != 0:
        return f"peers not importable after install: {result.stderr.strip().splitlines()[-1:]}"
    return None


def peer_versions() -> dict[str, str]:
    code = ("import importlib.metadata as m, json; print(json.dumps({n: m.version(n) for n in "
            "('huey', 'celery', 'kombu', 'rq', 'dramatiq', 'redis', 'pgqueuer', 'procrastinate', "
            "'asyncpg', 'psycopg')}))")
    code = code.replace("print(json.dumps({n:", "print(json.dumps({(n if n != 'redis' else 'redis-py'):")
    try:
        out = subprocess.run([str(PEERS_PY), "-c", code], capture_output=True, text=True, check=True)
        return json.loads(out.stdout)
    except (subprocess.CalledProcessError, OSError, json.JSONDecodeError):
        return {}


def machine_info() -> dict[str, str]:
    import sqlite3
    model = "?"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    redis_version = "?"
    try:
        redis_version = subprocess.run(["redis-server", "--version"], capture_output=True,
                                       text=True).stdout.strip().split(" sha=")[0]
    except OSError:
        pass
    return {"nproc": str(os.cpu_count()), "cpu": model, "kernel": platform.release(),
            "python": platform.python_version(), "sqlite": sqlite3.sqlite_version,
            "redis": redis_version}


def port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def redis_ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def start_redis(procs: Procs, env) -> tuple[str, str | None]:
    """Our own redis-server on a free loopback port. Returns (url, note)."""
    if shutil.which("redis-server") is None:
        if redis_ping(6379):
            return "redis://127.0.0.1:6379/15", "no redis-server binary: using 127.0.0.1:6379 db 15"
        raise BenchError("no redis-server binary and nothing on 127.0.0.1:6379")
    port = next(p for p in range(6390, 6490) if port_free(p))
    procs.popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                 "--appendonly", "no", "--daemonize", "no"], env=env, log_name="redis-server")
    deadline = time.monotonic() + 10
    while not redis_ping(port):
        if time.monotonic() > deadline:
            raise BenchError(f"redis-server did not answer on port {port}")
        time.sleep(0.05)
    return f"redis://127.0.0.1:{port}/0", None


def with_schema(url: str, schema: str | None) -> str:
    """``url`` with ``?schema=NAME`` set to ``schema``, whether or not it had a query:
    its other parameters (``sslmode``, jobpool's ``pooler``) are kept, so the pool
    and the driver reach the server exactly as the URL given to ``--db`` says. None:
    without one (the URL a peer's own driver opens)."""
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != "schema"]
    ours = [("schema", schema)] if schema is not None else []
    return urlunsplit(parts._replace(query=urlencode(query + ours)))


def postgres_execute(url: str, statement) -> list:
    """Run one statement on the database of the store URL ``url`` and return its rows.
    libpq gets the URL as the store itself gives it (jobpool's ``schema`` and
    ``pooler`` parameters taken off, which libpq would refuse)."""
    try:
        import psycopg

        from jobpool.errors import StoreError
        from jobpool.store.postgres.connection import parse_url, redact
    except ImportError as exc:
        raise BenchError(f"--db needs psycopg in {sys.executable}: {exc}") from None
    try:
        with psycopg.connect(parse_url(url).conninfo, autocommit=True) as conn:
            cursor = conn.execute(statement)
            return cursor.fetchall() if cursor.description else []
    except (psycopg.Error, StoreError) as exc:
        first_line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise BenchError(f"PostgreSQL at {redact(url)}: {first_line}") from None


def drop_schema(url: str, schema: str) -> None:
    """Drop ``schema`` and every table in it, so no run leaves a store behind."""
    from psycopg import sql
    postgres_execute(url, sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


@contextlib.contextmanager
def scratch_store(db: str | None, tag: str, work: Path):
    """A store URL for one benchmark run: a schema of its own in the PostgreSQL database
    ``db`` (dropped after), or an SQLite file in ``work`` when ``db`` is None."""
    if not db:
        yield str(work / f"{tag}.db")
        return
    schema = f"bench_{tag}_{random.randrange(1 << 30):x}"
    try:
        yield with_schema(db, schema)
    finally:
        drop_schema(db, schema)


# -- the harness ----------------------------------------------------------------------

class Harness:
    def __init__(self, procs: Procs, sizes: dict, redis_url: str | None, loops_per_ms: int,
                 job_cpu_s: float, postgres_url: str | None = None) -> None:
        self.procs = procs
        self.sizes = sizes
        self.redis_url = redis_url
        self.db = WORK / "jobpool.db"
        self.postgres_url = postgres_url
        #: The schema of the current jobpool-pg run; None once dropped.
        self.postgres_schema: str | None = None
        self.huey_db = WORK / "huey.db"
        self.counter = WORK / "counter.bin"
        self.job_cpu_s = job_cpu_s
        self.env = dict(os.environ)
        # ROOT too: the systems' processes import this checkout's jobpool, not whatever
        # copy the interpreter has installed (an editable install of another checkout).
        self.env.update(PYTHONPATH=os.pathsep.join((str(BENCH), str(ROOT))),
                        BENCH_COUNTER=str(self.counter),
                        BENCH_DB=str(self.db), BENCH_HUEY_DB=str(self.huey_db),
                        BENCH_LOOPS_PER_MS=str(loops_per_ms), PYTHONDONTWRITEBYTECODE="1")
        self.env.pop("JOBPOOL_DB", None)
        self.env.pop("JOBPOOL_DURABILITY", None)
        self.env.pop("JOBPOOL_POLL_INTERVAL", None)
        if redis_url:
            self.env["BENCH_REDIS_URL"] = redis_url
        self.rq_pool = None
        self.counted_s = None

    # fresh state --------------------------------------------------------------------

    def reset(self, system: str) -> None:
        for path in (self.counter, self.db, self.huey_db):
            for suffix in ("", "-wal", "-shm", "-journal"):
                try:
                    os.unlink(f"{path}{suffix}")
                except FileNotFoundError:
                    pass
        self.counter.touch()
        if system in PG_SYSTEMS:
            self.drop_postgres_schema()
            self.postgres_schema = f"bench_{secrets.token_hex(6)}"
            if system in PG_PEERS:  # jobpool makes its own; the peers install into it
                postgres_execute(self.postgres_url, f"CREATE SCHEMA {self.postgres_schema}")
        if system in REDIS_PEERS:
            self.driver(system, "flush", log_name=f"{system}-driver")

    def drop_postgres_schema(self) -> None:
        """Drop the last PostgreSQL run's schema, if not yet dropped: at the next
        PostgreSQL run's reset (so a failure there is that run's) and at the end."""
        if self.postgres_schema is not None:
            drop_schema(self.postgres_url, self.postgres_schema)
            self.postgres_schema = None

    def store_for(self, system: str) -> str:
        """The store a jobpool system's pool and driver open: the SQLite file, or the
        PostgreSQL URL naming this run's schema."""
        if system == JOBPOOL_PG:
            return with_schema(self.postgres_url, self.postgres_schema)
        if system == JOBPOOL_PG_NORMAL:
            return with_schema(self.postgres_url, self.postgres_schema) + "&durability=normal"
        return str(self.db)

    def env_for(self, system: str) -> dict:
        """The environment of ``system``'s processes: BENCH_DB is its store."""
        if system in (JOBPOOL_PG, JOBPOOL_PG_NORMAL):
            return dict(self.env, BENCH_DB=self.store_for(system))
        if system in PG_PEERS:
            from jobpool.store.postgres.connection import parse_url
            base = parse_url(self.postgres_url).conninfo  # jobpool's own parameters taken off
            return dict(self.env, BENCH_PG_DSN=base, BENCH_PG_SCHEMA=self.postgres_schema,
                        PGQUEUER_SCHEMA=self.postgres_schema)
        return self.env

    def python_for(self, system: str) -> str:
        return str(PEERS_PY) if system in PEERS + PG_PEERS else sys.executable

    def driver(self, system: str, action: str, *args, timeout: float = 600,
               log_name: str | None = None) -> dict:
        argv = [self.python_for(system), str(BENCH / "driver.py"), action]
        if action != "flush":
            argv.append(system)
        argv += [str(a) for a in args]
        out = self.procs.run(argv, env=self.env_for(system), timeout=timeout,
                             log_name=log_name or f"{system}-driver")
        lines = [line for line in out.splitlines() if line.startswith("{")]
        if not lines:
            raise BenchError(f"driver {action} {system} printed no result")
        return json.loads(lines[-1])

    # workers ------------------------------------------------------------------------

    def start_workers(self, system: str, log_name: str, burst: bool = False,
                      workers: int = 2) -> list:
        """``system``'s workers: ``workers`` processes (or slots) in all."""
        bin_ = PEERS_VENV / "bin"
        n = str(workers)
        if system in JOBPOOL_POOLS + ("jobpool-normal",):  # the same pool; its producer differs
            cmd = [sys.executable, "-m", "jobpool", "start", "--app", "bench_jobs.jobpool_jobs",
                   "--db", self.store_for(system), "--procs", n, "-q"] + (["--burst"] if burst else [])
            return [self.procs.popen(cmd, env=self.env_for(system), log_name=log_name)]
        if system == "huey":
            cmd = [bin_ / "huey_consumer", "bench_jobs.huey_jobs.huey", "-k", "process", "-w", n,
                   "-q"]
        elif system == "celery":
            cmd = [bin_ / "celery", "-A", "bench_jobs.celery_jobs", "worker", "-c", n, "-P",
                   "prefork", "-Q", "bench", "-l", "WARNING", "--without-gossip",
                   "--without-mingle", "--without-heartbeat"]
        elif system == "rq":
            if self.rq_pool is None:
                help_text = subprocess.run([bin_ / "rq", "--help"], capture_output=True,
                                           text=True).stdout
                self.rq_pool = "worker-pool" in help_text
            if self.rq_pool:
                cmd = [bin_ / "rq", "worker-pool", "-n", n, "-u", self.redis_url, "-q", "bench"]
            else:
                return [self.procs.popen([bin_ / "rq", "worker", "-u", self.redis_url, "-q",
                                          "bench"], env=self.env, log_name=log_name)
                        for _ in range(workers)]
        elif system == "dramatiq":
            cmd = [bin_ / "dramatiq", "bench_jobs.dramatiq_jobs", "-p", n, "-t", "1"]
        elif workers != 2:
            raise BenchError(f"{system} runs with 2 workers only here")
        elif system in ("pgqueuer", "pgqueuer-batch"):
            # BATCH_SIZE MAX_CONCURRENT_TASKS: jobs fetched per dequeue, asyncio tasks at once.
            sizes = ("1", "2") if system == "pgqueuer" else ("10", "20")
            cmd = [PEERS_PY, "-m", "bench_jobs.pgqueuer_jobs", *sizes]
        elif system == "procrastinate":
            cmd = [bin_ / "procrastinate", "--log-level", "warning", "--app",
                   "bench_jobs.procrastinate_jobs.app", "worker", "--concurrency", "2",
                   "--queues", "bench"]
        else:
            raise BenchError(f"unknown system {system}")
        return [self.procs.popen(cmd, env=self.env_for(system), log_name=log_name)]

    def wait_count(self, n: int, workers: list, timeout: float) -> float:
        """Poll the counter until it reaches ``n``; the time it did (perf_counter)."""
        deadline = time.perf_counter() + timeout
        path = str(self.counter)
        while True:
            if common.count(path) >= n:
                return time.perf_counter()
            now = time.perf_counter()
            if now > deadline:
                raise BenchError(f"only {common.count(path)} of {n} jobs done after {timeout:.0f} s "
                                 f"(log: {workers[0].log_path})")
            for w in workers:
                if w.poll() is not None:
                    time.sleep(0.05)
                    if common.count(path) >= n:
                        return time.perf_counter()
                    raise BenchError(f"worker exited {w.returncode} with {common.count(path)} of "
                                     f"{n} jobs done: {tail(w.log_path)}")
            time.sleep(POLL)

    def stop_workers(self, workers: list) -> None:
        for w in workers:
            self.procs.stop(w, grace=5.0)

    def timed_drain(self, system: str, n: int, log_name: str, workers: int = 2) -> float:
        """``workers`` workers started on a full queue; seconds until ``n`` jobs ran
        (jobpool: until its ``--burst`` process exited)."""
        timeout = 120 + n * 0.1
        count, workers = workers, []
        try:
            t0 = time.perf_counter()
            workers = self.start_workers(system, log_name, burst=(system in JOBPOOL_POOLS),
                                         workers=count)
            if system in JOBPOOL_POOLS:
                proc = workers[0]
                counted = None
                end = t0 + timeout
                while proc.poll() is None:
                    if counted is None and common.count(str(self.counter)) >= n:
                        counted = time.perf_counter()
                    if time.perf_counter() > end:
                        raise BenchError(f"jobpool start --burst still running after {timeout:.0f} s "
                                         f"with {common.count(str(self.counter))} of {n} done")
                    time.sleep(POLL)
                t1 = time.perf_counter()
                # For the JSON: when the last job ran, i.e. without the --burst exit.
                self.counted_s = (counted or t1) - t0
                done = common.count(str(self.counter))
                if proc.returncode != 0 or done != n:
                    raise BenchError(f"jobpool start --burst exited {proc.returncode} with {done} "
                                     f"of {n} jobs done: {tail(proc.log_path)}")
            else:
                t1 = self.wait_count(n, workers, timeout)
            return t1 - t0
        finally:
            self.stop_workers(workers)

    # workloads ----------------------------------------------------------------------

    def w1_drain(self, system: str, workers: int = 2) -> dict:
        n = self.sizes["drain"]
        metric = "w1_drain" if workers == 2 else f"w1_drain{workers}"
        self.reset(system)
        self.driver(system, "fill", "noop", n, 0, timeout=60 + n * 0.05)
        self.counted_s = None
        seconds = self.timed_drain(system, n, f"{system}-{metric}", workers)
        out = {metric: n / seconds}
        if self.counted_s:
            out[f"{metric}_until_counted"] = n / self.counted_s
        return out

    def w1_drain8(self, system: str) -> dict:
        return self.w1_drain(system, workers=8)

    def w1_single(self, system: str) -> dict:
        n = self.sizes["single"]
        self.reset(system)
        out = self.driver(system, "single", n, timeout=60 + n * 0.1)
        return {"w1_single": n / out["seconds"]}

    def w1_bulk(self, system: str) -> dict:
        n = self.sizes["bulk"]
        self.reset(system)
        out = self.driver(system, "bulk", n, timeout=120 + n * 0.01)
        if "na" in out:
            return {"w1_bulk": None}
        return {"w1_bulk": n / out["seconds"]}

    def w2(self, system: str) -> dict:
        n, ms = self.sizes["cpu_jobs"], self.sizes["cpu_ms"]
        self.reset(system)
        if system == BARE:
            return self.w2_bare(n, ms)
        self.driver(system, "fill", "cpu", n, ms, timeout=60 + n * 0.05)
        seconds = self.timed_drain(system, n, f"{system}-w2")
        cpu = [v for tag, v, _t in common.read_records(str(self.counter)) if tag == common.CPU]
        if len(cpu) < n:
            raise BenchError(f"{len(cpu)} cpu records for {n} jobs")
        # The definition: total job CPU (as the bodies measured it) ÷ 2 cores.
        # w2_eff_est is the same with 400 × one body measured by the harness.
        return {"w2_eff": sum(cpu) / (2 * seconds), "w2_wall": seconds,
                "w2_eff_est": n * self.job_cpu_s / (2 * seconds),
                "w2_job_cpu_ms": 1000 * sum(cpu) / len(cpu)}

    def w2_bare(self, n: int, ms: float) -> dict:
        """W2's floor in this sitting: the same ``n`` bodies split between two processes
        forked from this one, with no pool, no queue and no interpreter start: what
        any pool on these two cores can at best do. Timed from the first fork to the
        second exit; its efficiency is W2's, from the bodies' own CPU."""
        half = (n // 2, n - n // 2)
        t0 = time.perf_counter()
        pids = []
        for share in half:
            pid = os.fork()
            if pid == 0:
                code = 1
                try:
                    os.environ.update(BENCH_COUNTER=str(self.counter),
                                      BENCH_LOOPS_PER_MS=self.env["BENCH_LOOPS_PER_MS"])
                    for _ in range(share):
                        common.cpu_body(ms)
                    code = 0
                finally:
                    os._exit(code)
            pids.append(pid)
        failed = [pid for pid in pids if os.waitpid(pid, 0)[1] != 0]
        seconds = time.perf_counter() - t0
        cpu = [v for tag, v, _t in common.read_records(str(self.counter)) if tag == common.CPU]
        if failed or len(cpu) < n:
            raise BenchError(f"bare W2: {len(cpu)} cpu records for {n} bodies")
        return {"w2_eff": sum(cpu) / (2 * seconds), "w2_wall": seconds}

    def w3(self, system: str) -> dict:
        n, gap, idle = self.sizes["stamps"], self.sizes["gap_ms"], self.sizes["idle_s"]
        self.reset(system)
        workers = []
        try:
            workers = self.start_workers(system, f"{system}-w3")
            out = self.driver(system, "stamps", n, gap, idle, timeout=180 + n * gap / 1000)
            self.wait_count(1 + n, workers, timeout=60 + n * gap / 1000)
        finally:
            self.stop_workers(workers)
        recs = [r for r in common.read_records(str(self.counter)) if r[0] == common.STAMP]
        if len(recs) != n:
            raise BenchError(f"{len(recs)} stamp records for {n} jobs")
        lat = [value * 1000.0 for _tag, value, _t in recs]
        # Match each record to its enqueue by t_enqueued = t - value (20 ms apart).
        by_enqueue = sorted(recs, key=lambda r: r[2] - r[1])
        ret = [(t - after) * 1000.0 for (_tag, _v, t), after in zip(by_enqueue, out["after"])]
        return {"w3_p50": percentile(lat, 50), "w3_p99": percentile(lat, 99),
                "w3_p99_ret": percentile(ret, 99), "w3_max": max(lat), "w3_max_ret": max(ret)}


def percentile(values: list[float], p: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    s = sorted(values)
    if len(s) == 1:
        return s[0]
    k = (len(s) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


# -- plan, run, report ----------------------------------------------------------------

def plan(systems: list[str], workloads: list[str]) -> list[tuple[str, str]]:
    """(workload, system) pairs of one repeat, in run order."""
    steps = []
    for w in workloads:
        for s in systems:
            if s in PG_PEERS + (JOBPOOL_PG_NORMAL,) and w != "w1-drain":
                continue  # measured in the drain alone
            if w == "w2" and s == "jobpool":
                steps += [(w, "jobpool"), (w, BARE)]
            elif w == "w3" and s == "jobpool":
                steps += [(w, "jobpool"), (w, "jobpool-normal")]
            elif w in ("w1-enqueue", "w1-bulk") and s == "jobpool":
                steps.append((w, "jobpool"))
                if w == "w1-enqueue":
                    steps += [(w, "jobpool-normal"), (w, "sqlite-full"), (w, "sqlite-normal")]
                else:
                    steps.append((w, "sqlite-full"))
            else:
                steps.append((w, s))
    return steps


def fmt(metric: str, value: float | None) -> str:
    if value is None:
        return "n/a"
    unit = METRICS[metric][1]
    if unit == "efficiency":
        return f"{value:.3f}"
    if unit in ("ms", "s"):
        return f"{value:.2f}"
    return f"{value:,.0f}"


def table(results: dict, sizes: dict, failures: dict) -> list[str]:
    rows = [("workload", "system", "median", "min–max", "jobpool ×")]
    for metric, (title, unit, higher) in METRICS.items():
        per = results.get(metric, {})
        workload = METRIC_WORKLOAD[metric]
        failed = {s for (w, s) in failures if w in (workload, "all")}
        if not per and not failed:
            continue
        ref_vals = [v for v in per.get("jobpool", []) if v is not None]
        ref = statistics.median(ref_vals) if ref_vals else None
        first = True
        for system in ROW_ORDER:
            if system not in per and system not in failed:
                continue
            label = title.format(**sizes) + f" ({unit})" if first else ""
            first = False
            name = LABELS.get(system, system)
            vals = [v for v in per.get(system, []) if v is not None]
            if system in failed and not vals:
                rows.append((label, name, "FAILED", "", ""))
                continue
            if not vals:
                rows.append((label, name, "n/a", "", ""))
                continue
            med = statistics.median(vals)
            spread = f"{fmt(metric, min(vals))}–{fmt(metric, max(vals))}" if len(vals) > 1 else ""
            ratio = ""
            if ref is not None and system != "jobpool" and med > 0 and ref > 0:
                ratio = f"{(ref / med if higher else med / ref):.2f}"
            rows.append((label, name, fmt(metric, med), spread, ratio))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    align = ["<", "<", ">", ">", ">"]
    out = []
    for j, r in enumerate(rows):
        out.append("| " + " | ".join(f"{c:{a}{w}}" for c, a, w in zip(r, align, widths)) + " |")
        if j == 0:
            out.append("|" + "|".join(("-" * (w + 1) + ":") if a == ">" else ("-" * (w + 2))
                                      for a, w in zip(align, widths)) + "|")
    return out


#: What the profiles in BENCHMARKS.md ("What limits us now") found stops each
#: target this machine does not meet; printed under a row that is not met.
LIMITS = {
    "w1": "the supervisor's CPU per job, now SQLite's and the kernel's more than Python's: "
          "its turn (SQLite's work on jobpool's schema: eight pages a one-job turn writes, "
          "the settle and the take ~9-15 us each) about 60 %, the compiled pump's system "
          "calls and the wake-ups of the children it hands jobs most of the rest (a write "
          "that wakes a sleeping child costs its writer ~12-16 us on this VM, against ~1 "
          "to a running one: sqlite_floors.py --only wake), the "
          "Python left in the loop ~3 %; and the children's own per-job checks (22 system "
          "calls) and Python, on the same two cores (BENCHMARKS.md, 2026-12-07, the pump's "
          "own plain turn). At --procs 2 a turn carries one job (18 522 turns for 20 000 "
          "jobs; 4.2 jobs a turn at --procs 8, at about half the CPU a job): each child's "
          "outcome comes while the other's turn runs, R6 claims nothing ahead, and holding "
          "one for the other idles both (BENCHMARKS.md, 2026-12-07 14 UTC). No floor rules "
          "it out: the "
          "bare R6 pool of sqlite_floors.py drains ~7x Huey in C, ~3x around jobpool's own "
          "turn in Python, whose read-path indexes cost it ~a fifth (BENCHMARKS.md, the "
          "floor in C)",
    "enqueue": "the WAL fsync, whose own rate varies by a third between repeats, and "
               "SQLite's insert of jobpool's row (40 columns, six B-trees: ~26 us of CPU "
               "against Huey's ~8 for four columns and two); at Huey's rate in most "
               "sittings since the enqueue is one statement (BENCHMARKS.md, W1 enqueue; "
               "the claim in two statements)",
    "bulk": "SQLite's insert of this row's index entries and the commit: the statement "
            "takes ~2/3 of a 100 000-row call and the commit ~1/4 (the WAL's write and fsync, "
            "then the producer's own checkpoint of what it wrote, a third of the commit, which "
            "a live pool's checkpointer takes over: bulk_beside_pool.py, ~1.16x; W1's store "
            "has no pool); the statement alone ~160k rows/s into a jobpool store on a slower machine, ~440k "
            "with the jobs table's indexes dropped (the claim order and the read paths R28, "
            "R47 need: five entries a ready row), ~1.8M for the payloads into a bare table "
            "(sqlite_floors.py --only bulk; BENCHMARKS.md, 2026-12-07 03 and 11 UTC)",
    "w2": "the pool's own share of the cores (benchmarks/w2_split.py, 2026-12-06): the gap "
          "between a child's jobs, ~0.4 ms a job (0.017-0.020), the pool's start before each "
          "child's first job (~0.022), bodies descheduled by the pool's own processes "
          "(~0.012); two bare processes give 0.99 (BENCHMARKS.md, W2's floor)",
    "w3": "the enqueuer's own durable commit and two processes woken: a bare fsync'd commit "
          "here has a p99 of 0.7-1.0 ms and a bare chain of two wake-ups ~0.3 ms, about half "
          "of Celery's p99 in this machine's recent sittings (benchmarks/w3_split.py; "
          "BENCHMARKS.md, W3)",
    "pg": "with 2 procs a turn carries one or two jobs (R6) and turns run one after another; "
          "a bare one-row write alone takes 277-323 us durable, 158-178 us with synchronous "
          "commit off, beyond the per-job budget at one job a turn, and a 2-job turn here "
          "takes 2.3-4.9x a bare write (BENCHMARKS.md, the floors under the PostgreSQL targets)",
}


def targets(results: dict, postgres: bool = False) -> list[str]:
    """The issue's targets, met or not; with ``postgres`` (``--db`` given) also the
    two for jobpool on PostgreSQL."""
    def med(metric, system):
        vals = [v for v in results.get(metric, {}).get(system, []) if v is not None]
        return statistics.median(vals) if vals else None

    def best_peer(metric, higher=True):
        vals = [(med(metric, p), p) for p in PEERS if med(metric, p) is not None]
        if not vals:
            return None, None
        return max(vals) if higher else min(vals)

    lines = []

    def line(text, value, goal, ok, limit=None):
        if value is None:
            lines.append(f"- {text}: not measured")
        else:
            lines.append(f"- {text}: {value} (target {goal}) {'MET' if ok else 'NOT MET'}")
            if not ok and limit:
                lines.append(f"    what stops it: {LIMITS[limit]}")

    jp = med("w1_drain", "jobpool")
    peer, who = best_peer("w1_drain")
    r = jp / peer if jp and peer else None
    line(f"W1 drain, jobpool ÷ best peer ({who})", f"{r:.2f}×" if r else None, "≥ 4×", r and r >= 4,
         "w1")
    jp = med("w1_drain8", "jobpool")
    peer, who = best_peer("w1_drain8")
    if jp and peer:
        lines.append(f"- W1 drain with 8 procs, jobpool ÷ best peer ({who}): {jp / peer:.2f}× "
                     "(reported beside the 2-proc target, no target of its own)")
    jp, raw = med("w1_single", "jobpool"), med("w1_single", "sqlite-full")
    r = jp / raw if jp and raw else None
    line("W1 enqueue, durable jobpool ÷ raw SQLite FULL", f"{r:.2f}" if r else None, "≥ 0.90",
         r and r >= 0.90, "enqueue")
    jp, huey = med("w1_single", "jobpool"), med("w1_single", "huey")
    r = jp / huey if jp and huey else None
    line("W1 enqueue, durable jobpool ÷ Huey (issue 26)", f"{r:.2f}×" if r else None, "≥ 1×",
         r and r >= 1, "enqueue")
    jp = med("w1_single", "jobpool-normal")
    peer, who = best_peer("w1_single")
    r = jp / peer if jp and peer else None
    line(f"W1 enqueue, jobpool normal ÷ best peer ({who})", f"{r:.2f}×" if r else None, "≥ 3×",
         r and r >= 3)
    jp = med("w1_bulk", "jobpool")
    line("W1 bulk, jobpool enqueue_many", f"{jp:,.0f} rows/s" if jp else None, "≥ 300,000 rows/s",
         jp and jp >= 300_000, "bulk")
    jp = med("w2_eff", "jobpool")
    line("W2 efficiency, jobpool", f"{jp:.3f}" if jp else None, "≥ 0.95", jp and jp >= 0.95, "w2")
    jp, huey = med("w2_wall", "jobpool"), med("w2_wall", "huey")
    r = jp / huey if jp and huey else None
    line("W2 wall, jobpool ÷ Huey", f"{r:.2f}" if r else None, "≤ 0.90", r and r <= 0.9, "w2")
    floor = med("w2_wall", BARE)
    if r and floor and huey and not r <= 0.9:
        lines.append(f"    the floor this sitting: two bare processes running the same bodies took "
                     f"{floor / huey:.3f} of Huey's wall ({floor:.2f} s), "
                     + ("so no pool on these cores could meet it" if floor / huey > 0.9
                        else "so the target is within reach"))
    jp, cel = med("w3_p99", "jobpool"), med("w3_p99", "celery")
    r = jp / cel if jp and cel else None
    line("W3 p99, jobpool ÷ Celery", f"{r:.2f}" if r else None, "≤ 0.50", r and r <= 0.5, "w3")
    normal = med("w3_p99", "jobpool-normal")
    if normal and cel:
        lines.append(f"- W3 p99 with durability=normal enqueues (no fsync, as Celery's Redis here), "
                     f"jobpool ÷ Celery: {normal / cel:.2f} (reported beside the target, which is "
                     f"the durable default's)")
    worst = max((v for v in results.get("w3_max", {}).get("jobpool", []) if v is not None),
                default=None)
    line("W3 pickup max, jobpool (every run)", f"{worst:.1f} ms" if worst else None, "≤ 20 ms",
         worst is not None and worst <= 20, "w3")
    if postgres:
        sq = med("w1_drain", "jobpool")
        for system, goal in ((JOBPOOL_PG, 0.4), (JOBPOOL_PG_NORMAL, 0.6)):
            pg = med("w1_drain", system)
            r = pg / sq if pg and sq else None
            line(f"W1 drain, {LABELS[system]} ÷ SQLite", f"{r:.2f}" if r else None,
                 f"≥ {goal}", r and r >= goal, "pg")
        pg = med("w1_drain", JOBPOOL_PG)
        for peer, goal, what in (("pgqueuer", 2, "batch 1, 2 tasks"),
                                 ("procrastinate", 2, "concurrency 2"),
                                 ("pgqueuer-batch", 1, "batch 10, 20 tasks")):
            other = med("w1_drain", peer)
            r = pg / other if pg and other else None
            line(f"W1 drain, jobpool on PostgreSQL (2 procs) ÷ {peer} ({what})",
                 f"{r:.2f}×" if r else None, f"≥ {goal}×", r and r >= goal, "pg")
        pg = med("w1_bulk", JOBPOOL_PG)
        line("W1 bulk on PostgreSQL", f"{pg:,.0f} rows/s" if pg else None, "≥ 150,000 rows/s",
             pg and pg >= 150_000)
    lines.append("- backlog of 1 000 000 rows vs 1 000: see benchmarks/test_core_bench.py")
    return lines


def parse_only(text: str | None) -> tuple[list[str], list[str]]:
    systems, workloads = list(SYSTEMS), list(WORKLOADS)
    if not text:
        return systems, workloads
    names = [n.strip().lower() for n in text.split(",") if n.strip()]
    bad = [n for n in names if n not in SYSTEMS and n not in WORKLOADS]
    if bad:
        raise SystemExit(f"compare.py: --only takes systems ({', '.join(SYSTEMS)}) and/or "
                         f"workloads ({', '.join(WORKLOADS)}), not {', '.join(bad)}")
    chosen_s = [n for n in names if n in SYSTEMS]
    chosen_w = [n for n in names if n in WORKLOADS]
    if chosen_s:
        # jobpool always runs: every ratio is to jobpool.
        systems = ["jobpool"] + [s for s in chosen_s if s != "jobpool"]
    if chosen_w:
        workloads = [w for w in WORKLOADS if w in chosen_w]
    return systems, workloads


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=None,
                        help="runs of each workload per system (default 3; 1 with --quick)")
    parser.add_argument("--quick", action="store_true", help="small sizes, for development")
    parser.add_argument("--only", metavar="NAME[,NAME]",
                        help=f"systems ({', '.join(SYSTEMS)}; jobpool always runs) and/or "
                             f"workloads ({', '.join(WORKLOADS)})")
    parser.add_argument("--db", metavar="URL",
                        help="a postgresql:// URL: jobpool also runs every workload on a "
                             "PostgreSQL store there, each run in a schema of its own "
                             "(any ?schema= in URL is replaced), dropped afterwards")
    parser.add_argument("--drain", type=int, metavar="N",
                        help="jobs in each W1 drain (default 10 000; 1 000 with --quick)")
    parser.add_argument("--json", metavar="PATH", default=str(WORK / "last-run.json"),
                        help="where to write every measurement (default benchmarks/.work/last-run.json)")
    args = parser.parse_args(argv)
    sizes = dict(QUICK if args.quick else FULL)
    if args.drain:
        sizes["drain"] = args.drain
    repeat = args.repeat or (1 if args.quick else 3)
    systems, workloads = parse_only(args.only)
    from jobpool.store.urls import POSTGRES_SCHEMES, is_postgres_url
    if args.db and not is_postgres_url(args.db):
        parser.error(f"--db takes a PostgreSQL URL ({' or '.join(POSTGRES_SCHEMES)}...), "
                     f"not {args.db!r}: SQLite is always measured, in {WORK}")

    core_name = check_jobpool()
    info = machine_info()
    started = time.time()
    info["load average at start"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    info["jobpool core"] = core_name
    WORK.mkdir(exist_ok=True)
    if LOGS.exists():
        shutil.rmtree(LOGS)

    failures: dict[tuple[str, str], str] = {}
    notes: list[str] = []
    if not args.db:
        # The PostgreSQL peers run on the server --db names, beside jobpool there.
        named = [n.strip().lower() for n in (args.only or "").split(",")]
        if any(n in PG_PEERS for n in named):
            notes.append(f"{', '.join(n for n in named if n in PG_PEERS)}: need --db")
        systems = [s for s in systems if s not in PG_PEERS]
    peers_wanted = [s for s in systems if s in PEERS + PG_PEERS]
    if peers_wanted:
        why = ensure_peers_venv()
        if why:
            for s in peers_wanted:
                failures[("all", s)] = why
            systems = [s for s in systems if s not in PEERS + PG_PEERS]
        else:
            info.update({k: v for k, v in peer_versions().items()})
    if args.db:
        # Checked once here, so a server that cannot be reached is one failure, not five.
        try:
            info["postgresql"] = postgres_execute(args.db, "SHOW server_version")[0][0]
            at = systems.index("jobpool") + 1
            systems[at:at] = [JOBPOOL_PG, JOBPOOL_PG_NORMAL]
        except BenchError as exc:
            for s in (JOBPOOL_PG, JOBPOOL_PG_NORMAL) + PG_PEERS:
                failures[("all", s)] = str(exc)
            systems = [s for s in systems if s not in PG_PEERS]

    # SIGTERM/SIGHUP end the run through the same finally blocks as Ctrl-C.
    def _stop(signum, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGHUP, _stop)

    procs = Procs()
    harness: Harness | None = None
    results: dict[str, dict[str, list]] = {}
    interrupted = False
    try:
        redis_url = None
        if any(s in REDIS_PEERS for s in systems):
            try:
                redis_url, note = start_redis(procs, dict(os.environ))
                if note:
                    notes.append(note)
            except BenchError as exc:
                for s in REDIS_PEERS:
                    if s in systems:
                        failures[("all", s)] = str(exc)
                systems = [s for s in systems if s not in REDIS_PEERS]

        loops = common.calibrate()
        samples = []
        for _ in range(5):
            c0 = time.process_time()
            common.burn(int(loops * sizes["cpu_ms"]))
            samples.append(time.process_time() - c0)
        job_cpu = statistics.median(samples)
        info["cpu job"] = f"{loops} loops/ms; one cpu({sizes['cpu_ms']:g}) body = {job_cpu * 1000:.2f} ms CPU"

        harness = Harness(procs, sizes, redis_url, loops, job_cpu, args.db)
        steps = plan(systems, workloads)
        method = {"w1-drain": harness.w1_drain, "w1-drain8": harness.w1_drain8,
                  "w1-enqueue": harness.w1_single,
                  "w1-bulk": harness.w1_bulk, "w2": harness.w2, "w3": harness.w3}
        print(f"# {len(steps)} runs × {repeat} repeats; logs in {LOGS}", file=sys.stderr)
        for rep in range(repeat):
            for workload, system in steps:
                key = (workload, system)
                if key in failures:
                    continue
                t0 = time.monotonic()
                try:
                    got = method[workload](system)
                except BenchError as exc:
                    failures[key] = str(exc)
                    print(f"[{rep + 1}/{repeat}] {workload:10} {system:14} FAILED: {exc}",
                          file=sys.stderr)
                    continue
                for metric, value in got.items():
                    results.setdefault(metric, {}).setdefault(system, []).append(value)
                shown = ", ".join(f"{m}={fmt(m, v)}" for m, v in got.items() if m in METRICS)
                print(f"[{rep + 1}/{repeat}] {workload:10} {system:14} {shown}  "
                      f"({time.monotonic() - t0:.1f} s)", file=sys.stderr)
    except KeyboardInterrupt:
        interrupted = True
        print("interrupted: stopping everything this run started", file=sys.stderr)
    finally:
        procs.stop_all()
        left = procs.leftovers()
        if harness is not None:
            try:
                harness.drop_postgres_schema()
            except BenchError as exc:
                notes.append(f"schema {harness.postgres_schema} left in the database: {exc}")

    info["load average at end"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    info["duration"] = f"{time.time() - started:.0f} s"
    print()
    print("## machine")
    for k, v in info.items():
        print(f"- {k}: {v}")
    for note in notes:
        print(f"- note: {note}")
    print()
    print(f"## results: median of {repeat} (min–max); jobpool × = how many times better "
          f"jobpool's median is (above 1: jobpool wins)")
    print()
    for line in table(results, sizes, failures):
        print(line)
    print()
    print("## targets (issue)")
    for line in targets(results, postgres=bool(args.db)):
        print(line)
    if failures:
        print()
        print("## failures")
        for (workload, system), why in failures.items():
            print(f"- {system} {workload}: {why}")
    print()
    print(f"processes left behind: {len(left)}" + (f" {left}" if left else ""))
    try:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        with open(args.json, "w") as fh:
            json.dump({"sizes": sizes, "repeat": repeat, "machine": info, "results": results,
                       "failures": {f"{s} {w}": why for (w, s), why in failures.items()}},
                      fh, indent=1)
    except OSError as exc:
        print(f"could not write {args.json}: {exc}", file=sys.stderr)
    return 130 if interrupted else (1 if left else 0)


if __name__ == "__main__":
    sys.exit(main())
