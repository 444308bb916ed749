"""The enqueue side of every benchmark, run by ``compare.py`` in a fresh process.

It runs under jobpool's venv for ``jobpool``, ``jobpool-pg``, ``jobpool-pg-normal``,
``jobpool-normal``, ``sqlite-full`` and ``sqlite-normal``, and under
``benchmarks/.venv-peers`` for the peers (pgqueuer and procrastinate: ``BENCH_PG_DSN``
and the schema in ``BENCH_PG_SCHEMA``), and prints one JSON object on stdout. Settings come
from the environment the harness sets: ``BENCH_DB`` (jobpool and raw SQLite: a SQLite file, or for
``jobpool-pg`` a ``postgresql://`` URL), ``BENCH_HUEY_DB``, ``BENCH_REDIS_URL``,
``BENCH_COUNTER``.

    driver.py flush                       empty the Redis database the peers use
    driver.py fill SYSTEM JOB N ARG       queue N jobs (untimed): noop(i) or cpu(ARG)
    driver.py single SYSTEM N             time N one-at-a-time enqueues of noop(i)
    driver.py bulk SYSTEM N               time one bulk enqueue of N noop(i)
    driver.py stamps SYSTEM N GAP_MS IDLE_S
                                          queue a warm-up noop, wait until it ran,
                                          stay idle IDLE_S, then queue N stamp jobs
                                          GAP_MS apart, one at a time
"""
from __future__ import annotations

import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

from bench_jobs import common  # noqa: E402


class NotAvailable(Exception):
    """This system has no such API."""


class System:
    """How one system enqueues. ``noop``/``cpu``/``stamp`` queue one job each."""

    def noop(self, i):
        raise NotImplementedError

    def cpu(self, ms):
        raise NotImplementedError

    def stamp(self, t):
        raise NotImplementedError

    def prepare_bulk(self, n):
        raise NotAvailable("no bulk enqueue API")

    def run_bulk(self, prepared):
        raise NotAvailable("no bulk enqueue API")

    def fill(self, job, n, arg):
        if job == "noop":
            try:
                self.run_bulk(self.prepare_bulk(n))
                return
            except NotAvailable:
                pass
            for i in range(n):
                self.noop(i)
        else:
            for _ in range(n):
                self.cpu(arg)


class Jobpool(System):
    """jobpool's own ``connect`` on BENCH_DB: a SQLite file or a PostgreSQL URL.

    ``durability`` is a SQLite setting, passed only when given: a PostgreSQL store
    has no such argument."""

    def __init__(self, durability=None):
        import jobpool
        from bench_jobs import jobpool_jobs  # registers the jobs, as an app would
        del jobpool_jobs
        options = {"durability": durability} if durability else {}
        self.store = jobpool.connect(os.environ["BENCH_DB"], **options)

    def noop(self, i):
        self.store.enqueue("bench.noop", i)

    def cpu(self, ms):
        self.store.enqueue("bench.cpu", ms)

    def stamp(self, t):
        self.store.enqueue("bench.stamp", t)

    def prepare_bulk(self, n):
        return [(i,) for i in range(n)]

    def run_bulk(self, items):
        self.store.enqueue_many("bench.noop", items)


class RawSQLite(System):
    """The floor: the same row into the same schema, rows built before timing,
    one ``BEGIN IMMEDIATE; INSERT; COMMIT`` per job, WAL, the given synchronous.

    The row is copied from one that jobpool itself wrote (then deleted), so this
    reference follows any change to the schema or to what an enqueue stores."""

    TIMES = ("run_at", "line_at", "created_at")

    def __init__(self, synchronous):
        import sqlite3

        import jobpool
        from bench_jobs import jobpool_jobs
        del jobpool_jobs
        from jobpool.serialize import MAX_PAYLOAD_BYTES, encode_payload
        path = os.environ["BENCH_DB"]
        store = jobpool.connect(path)
        job_id = store.enqueue("bench.noop", 0).id
        store.close()
        self.db = sqlite3.connect(path, isolation_level=None)
        cur = self.db.execute("SELECT * FROM jobs WHERE id = ?", (job_id,))
        template = dict(zip((d[0] for d in cur.description), cur.fetchone()))
        self.db.execute("DELETE FROM jobs WHERE id = ?", (job_id,))
        del template["id"]
        self.columns = list(template)
        self.template = template
        self.insert = (f"INSERT INTO jobs ({', '.join(self.columns)}) "
                       f"VALUES ({', '.join('?' for _ in self.columns)})")
        self.encode = lambda args: encode_payload(args, None, "json", MAX_PAYLOAD_BYTES)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute(f"PRAGMA synchronous={synchronous}")
        self._rows = []

    def row(self, i):
        now = time.time()
        values = dict(self.template, payload=self.encode((i,)))
        for column in self.TIMES:
            if column in values:
                values[column] = now
        return tuple(values[c] for c in self.columns)

    def prepare_single(self, n):
        self._rows = [self.row(i) for i in range(n)]

    def noop(self, i):
        db = self.db
        db.execute("BEGIN IMMEDIATE")
        db.execute(self.insert, self._rows[i] if i < len(self._rows) else self.row(i))
        db.execute("COMMIT")

    def prepare_bulk(self, n):
        return [self.row(i) for i in range(n)]

    def run_bulk(self, rows):
        db = self.db
        db.execute("BEGIN IMMEDIATE")
        db.executemany(self.insert, rows)
        db.execute("COMMIT")


class Huey(System):
    def __init__(self):
        from bench_jobs import huey_jobs
        self.m = huey_jobs

    def noop(self, i):
        self.m.noop(i)

    def cpu(self, ms):
        self.m.cpu(ms)

    def stamp(self, t):
        self.m.stamp(t)


class Celery(System):
    def __init__(self):
        from bench_jobs import celery_jobs
        self.m = celery_jobs

    def noop(self, i):
        self.m.noop.delay(i)

    def cpu(self, ms):
        self.m.cpu.delay(ms)

    def stamp(self, t):
        self.m.stamp.delay(t)


class RQ(System):
    def __init__(self):
        from redis import Redis
        from rq import Queue

        from bench_jobs import rq_jobs
        self.m = rq_jobs
        self.Queue = Queue
        self.q = Queue("bench", connection=Redis.from_url(os.environ["BENCH_REDIS_URL"]))

    def noop(self, i):
        self.q.enqueue(self.m.noop, i)

    def cpu(self, ms):
        self.q.enqueue(self.m.cpu, ms)

    def stamp(self, t):
        self.q.enqueue(self.m.stamp, t)

    def prepare_bulk(self, n):
        return [self.Queue.prepare_data(self.m.noop, (i,)) for i in range(n)]

    def run_bulk(self, datas):
        # enqueue_many sends everything through one Redis pipeline.
        chunk = 10_000
        for start in range(0, len(datas), chunk):
            self.q.enqueue_many(datas[start:start + chunk])


class Dramatiq(System):
    def __init__(self):
        from bench_jobs import dramatiq_jobs
        self.m = dramatiq_jobs

    def noop(self, i):
        self.m.noop.send(i)

    def cpu(self, ms):
        self.m.cpu.send(ms)

    def stamp(self, t):
        self.m.stamp.send(t)


class PgQueuer(System):
    """pgqueuer's batch insert (``Queries.enqueue`` of lists), after its schema is
    installed into ``$PGQUEUER_SCHEMA`` (W1 drain only)."""

    def fill(self, job, n, arg):
        import asyncio

        from bench_jobs import pgqueuer_jobs
        if job != "noop":
            raise NotAvailable("pgqueuer runs the W1 drain only here")
        asyncio.run(pgqueuer_jobs.fill(n))


class Procrastinate(System):
    """procrastinate's ``batch_defer``, after its schema is applied into
    ``$BENCH_PG_SCHEMA`` (W1 drain only)."""

    def fill(self, job, n, arg):
        from bench_jobs import procrastinate_jobs
        if job != "noop":
            raise NotAvailable("procrastinate runs the W1 drain only here")
        procrastinate_jobs.fill(n)


SYSTEMS = {
    "jobpool": lambda: Jobpool(),
    "jobpool-pg": lambda: Jobpool(),
    "jobpool-pg-normal": lambda: Jobpool(),
    "pgqueuer": PgQueuer,
    "pgqueuer-batch": PgQueuer,
    "procrastinate": Procrastinate,
    "jobpool-normal": lambda: Jobpool("normal"),
    "sqlite-full": lambda: RawSQLite("FULL"),
    "sqlite-normal": lambda: RawSQLite("NORMAL"),
    "huey": Huey,
    "celery": Celery,
    "rq": RQ,
    "dramatiq": Dramatiq,
}


def flush() -> dict:
    from redis import Redis
    Redis.from_url(os.environ["BENCH_REDIS_URL"]).flushdb()
    return {"ok": True}


def single(system: System, n: int) -> dict:
    if isinstance(system, RawSQLite):
        system.prepare_single(n + 1)
    system.noop(n)  # warm-up: connection and first-use costs stay out of the timing
    t0 = time.perf_counter()
    for i in range(n):
        system.noop(i)
    return {"seconds": time.perf_counter() - t0, "n": n}


def bulk(system: System, n: int) -> dict:
    try:
        prepared = system.prepare_bulk(n)
    except NotAvailable as exc:
        return {"na": str(exc)}
    t0 = time.perf_counter()
    system.run_bulk(prepared)
    return {"seconds": time.perf_counter() - t0, "n": n}


def stamps(system: System, n: int, gap_ms: float, idle_s: float) -> dict:
    counter = os.environ["BENCH_COUNTER"]
    system.noop(0)  # proves the workers consume, and warms this connection
    deadline = time.monotonic() + 120
    while common.count(counter) < 1:
        if time.monotonic() > deadline:
            raise SystemExit("the warm-up job never ran")
        time.sleep(0.005)
    time.sleep(idle_s)
    gap = gap_ms / 1000.0
    before, after = [], []
    start = time.perf_counter()
    for i in range(n):
        wait = start + i * gap - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        t = time.time()
        system.stamp(t)
        before.append(t)
        after.append(time.time())
    return {"before": before, "after": after}


def main(argv: list[str]) -> int:
    action = argv[0]
    if action == "flush":
        out = flush()
    else:
        system = SYSTEMS[argv[1]]()
        if action == "fill":
            system.fill(argv[2], int(argv[3]), float(argv[4]))
            out = {"ok": True}
        elif action == "single":
            out = single(system, int(argv[2]))
        elif action == "bulk":
            out = bulk(system, int(argv[2]))
        elif action == "stamps":
            out = stamps(system, int(argv[2]), float(argv[3]), float(argv[4]))
        else:
            raise SystemExit(f"unknown action {action!r}")
    sys.stdout.write(json.dumps(out) + "\n")
    sys.stdout.flush()
    # Celery and Dramatiq keep non-daemon threads; a benchmark driver need not wait for them.
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
