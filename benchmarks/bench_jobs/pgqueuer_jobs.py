"""The benchmark jobs for pgqueuer on PostgreSQL: one asyncio process, its jobs as
tasks in one event loop (``max_concurrent_tasks`` of them at once), fetched
``batch_size`` at a time; run with ``python -m bench_jobs.pgqueuer_jobs BATCH_SIZE
MAX_CONCURRENT_TASKS``, which starts it as ``pgq run`` does (``pgqueuer.run``; the
``pgq run`` command of pgqueuer 1.6.0 fails in its logging set-up here). Its
tables live in the schema ``$PGQUEUER_SCHEMA`` (the harness makes one per run) of
``$BENCH_PG_DSN``; its default durability (logged tables, durable commits)."""
import asyncio
import contextlib
import os
import sys
from collections.abc import AsyncIterator
from datetime import timedelta

import asyncpg
from pgqueuer import AsyncpgDriver, PgQueuer, Queries, run
from pgqueuer.models import Job

from bench_jobs import common


async def connect() -> asyncpg.Connection:
    return await asyncpg.connect(os.environ["BENCH_PG_DSN"],
                                 server_settings={"search_path": os.environ["PGQUEUER_SCHEMA"]})


@contextlib.asynccontextmanager
async def main() -> AsyncIterator[PgQueuer]:
    conn = await connect()
    pgq = PgQueuer(AsyncpgDriver(conn))

    @pgq.entrypoint("noop")
    async def noop(job: Job) -> None:
        common.noop_body(int(job.payload or b"0"))

    try:
        yield pgq
    finally:
        await conn.close()


async def fill(n: int) -> None:
    """Install the schema, then queue ``n`` noop jobs in one batch insert."""
    conn = await connect()
    try:
        queries = Queries(AsyncpgDriver(conn))
        await queries.install()
        await queries.enqueue(["noop"] * n, [str(i).encode() for i in range(n)], [0] * n)
    finally:
        await conn.close()


if __name__ == "__main__":
    batch_size, concurrency = int(sys.argv[1]), int(sys.argv[2])
    asyncio.run(run(main, batch_size=batch_size, max_concurrent_tasks=concurrency,
                    dequeue_timeout=timedelta(seconds=30)))
