"""Microbenchmarks of the core's hot path: one turn (settle the last job, claim the next).

Run on demand (benchmarks/ is outside the default testpaths):

    .venv/bin/python -m pytest benchmarks/test_core_bench.py --benchmark-only

Each test runs the engine over the pure SQLite driver and over the compiled one
(skipped when not built), over a store with a backlog of 1 000 or
1 000 000 ready rows (the issue's target: the claim rate at 1 000 000 within 10 %
of the rate at 1 000). The store is built once per backlog size through
jobpool's own schema (``jobpool.connect``), with rows copied from one that
``enqueue`` wrote, and copied afresh for every test. The backlog never drops below
its nominal size during a test: the store holds that many plus every round's row.

The claimer is built with the positional arguments only (path, owner, names,
queues, policies), so its defaults apply: synchronous=NORMAL and SQLite's inline
WAL autocheckpoint (the supervisor hands checkpoints to a thread instead).
The summary printed at the end gives the compiled/pure and 1M/1k ratios.
"""
from __future__ import annotations

import functools
import importlib
import os
import random
import shutil
import sqlite3
import time
from types import SimpleNamespace

import pytest

import jobpool
from jobpool import job
from jobpool.lifecycle import DONE, Outcome
from jobpool.store.sqlite.claimer import SqliteClaimer, driver_class

pytestmark = [pytest.mark.bench, pytest.mark.timeout(3600)]

NAME = "bench.core"
OWNER = "benchhost:1:1"
BACKLOGS = tuple(int(b) for b in os.environ.get("BENCH_BACKLOGS", "1000,1000000").split(","))
ROUNDS = 2_000
WARMUP = 100


@job(name=NAME)
def core_job(i):  # never runs: the benchmark settles it DONE without running it
    return None


def _compiled():
    try:
        return importlib.import_module("jobpool._core")
    except ImportError:
        return None


def build_store(path: str, rows: int) -> None:
    """A store with ``rows`` ready rows like the ones ``enqueue`` writes."""
    store = jobpool.connect(path)
    template_id = store.enqueue(NAME, 0).id
    store.close()
    db = sqlite3.connect(path, isolation_level=None)
    cur = db.execute("SELECT * FROM jobs WHERE id = ?", (template_id,))
    template = dict(zip((d[0] for d in cur.description), cur.fetchone()))
    db.execute("DELETE FROM jobs WHERE id = ?", (template_id,))
    del template["id"]
    columns = list(template)
    select = ", ".join("'[[' || x || '],{}]'" if c == "payload" else "?" for c in columns)
    params = [v for c, v in template.items() if c != "payload"]
    db.execute("BEGIN IMMEDIATE")
    db.execute(f"WITH RECURSIVE seq(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM seq "
               f"WHERE x < {int(rows)}) "
               f"INSERT INTO jobs ({', '.join(columns)}) SELECT {select} FROM seq", params)
    db.execute("COMMIT")
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()


@pytest.fixture(scope="session")
def template_stores(tmp_path_factory):
    built: dict[int, str] = {}

    def get(backlog: int) -> str:
        if backlog not in built:
            path = str(tmp_path_factory.mktemp(f"backlog{backlog}") / "store.db")
            t0 = time.perf_counter()
            build_store(path, backlog + ROUNDS + WARMUP + 10)
            print(f"\nbuilt a store of {backlog:,} (+{ROUNDS + WARMUP + 10}) ready rows "
                  f"in {time.perf_counter() - t0:.1f} s")
            built[backlog] = path
        return built[backlog]
    return get


@pytest.fixture(params=["pure", "compiled"])
def impl(request):
    if request.param == "compiled" and _compiled() is None:
        pytest.skip("compiled driver (jobpool._core) not built")
    return request.param, SimpleNamespace(
        Core=functools.partial(SqliteClaimer, driver=driver_class(request.param)))


@pytest.mark.parametrize("backlog", BACKLOGS, ids=lambda b: f"backlog{b}")
def test_turn(benchmark, impl, backlog, template_stores, tmp_path, request):
    """What a supervisor does per job: one turn settles the job a child just
    finished and claims the next, in one transaction (``Core.turn``)."""
    name, module = impl
    path = str(tmp_path / "store.db")
    shutil.copyfile(template_stores(backlog), path)
    policies = {NAME: core_job.policy}
    core = module.Core(path, OWNER, [NAME], ["default"], policies)
    rng = random.Random(1)
    pid = os.getpid()
    finished: list[Outcome] = []

    def cycle():
        _settled, claimed, _expired = core.turn(finished, 1, time.time(), rng)
        job = claimed[0]
        finished[:] = [Outcome(job.job_id, job.attempt, DONE, pid=pid, exit_status="0",
                               peak_rss=0, cpu_s=0.0)]

    try:
        benchmark.extra_info.update(core=name, backlog=backlog)
        benchmark.pedantic(cycle, rounds=ROUNDS, iterations=1, warmup_rounds=WARMUP)
    finally:
        core.close()
    db = sqlite3.connect(path)
    left = db.execute("SELECT count(*) FROM jobs WHERE status = 'ready'").fetchone()[0]
    done_rows = db.execute("SELECT count(*) FROM jobs WHERE status = 'done'").fetchone()[0]
    db.close()
    assert left >= backlog
    assert done_rows >= ROUNDS
    stats = getattr(getattr(benchmark, "stats", None), "stats", None)
    if stats is not None:
        results = request.config.__dict__.setdefault("core_bench_results", {})
        results[(name, backlog)] = stats.median
