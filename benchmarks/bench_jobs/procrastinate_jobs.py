"""The benchmark jobs for procrastinate on PostgreSQL (psycopg 3): one worker
process whose ``--concurrency`` sub-workers are asyncio tasks; a plain (sync) task
runs in a thread of its own, one per sub-worker. Run with ``procrastinate --app
bench_jobs.procrastinate_jobs.app worker --concurrency 2 --queues bench``. Its
tables live in the schema ``$BENCH_PG_SCHEMA`` (the harness makes one per run) of
``$BENCH_PG_DSN``."""
import os

import procrastinate

from bench_jobs import common

app = procrastinate.App(connector=procrastinate.PsycopgConnector(
    conninfo=os.environ.get("BENCH_PG_DSN", ""),
    kwargs={"options": f"-c search_path={os.environ.get('BENCH_PG_SCHEMA', 'public')}"}))


@app.task(name="noop", queue="bench")
def noop(i):
    common.noop_body(i)


def fill(n: int) -> None:
    """Apply the schema, then queue ``n`` noop jobs with one batch defer."""
    with app.open():
        app.schema_manager.apply_schema()
        noop.batch_defer(*({"i": i} for i in range(n)))
