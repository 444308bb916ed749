"""R69 on PostgreSQL: a waiter LISTENs on its store's finished-jobs channel, marks the
job it waits for (``jobs.waited``), and every statement that finishes a marked row
notifies its id at commit (``statements.told_if_waited``); rows nobody waits for send
nothing. The waiter still looks again every ``LOOK_AGAIN`` seconds: a job that ends
another way (a retention sweep, a row moved by hand) or a notification lost with a
connection costs that long at most.
"""
from __future__ import annotations

import time
from typing import Any

from jobpool.errors import StoreError
from jobpool.store.finish_wait import PollingWaiter, Waiter, interval

#: Seconds between looks at the job while waiting to be told.
LOOK_AGAIN = 1.0


class NotifiedWaiter(Waiter):
    """A connection of its own that LISTENs for the end of one job."""

    told = True

    def __init__(self, target: Any, job_id: int) -> None:
        import psycopg
        from psycopg import sql as pgsql

        from jobpool.store.postgres import statements as pg_sql
        from jobpool.store.postgres.connection import open_connection
        self._id = str(job_id)
        self._conn: Any = open_connection(target, application="jobpool-result")
        try:
            [(channel,)] = self._conn.execute(pg_sql.FINISHED_CHANNEL_NAME).fetchall()
            self._conn.execute(pgsql.SQL("LISTEN {}").format(pgsql.Identifier(channel)))
            self._conn.execute(pg_sql.MARK_WAITED, {"id": job_id})
        except psycopg.Error as exc:
            self.close()
            raise StoreError(f"waiting for job {job_id} failed: {exc}") from None

    def wait(self, left: float | None) -> bool:
        """Until the job's end is told, or ``LOOK_AGAIN`` (at most ``left``) passed."""
        limit = interval(LOOK_AGAIN, left)
        if self._conn is None:
            time.sleep(limit)
            return False
        return self._told(limit)

    async def await_(self, left: float | None) -> bool:
        """``wait`` on the running loop: it watches the connection's socket itself and
        reads what came without blocking, so no worker thread waits (the loop's
        executor has a handful, which a few waits would use up)."""
        import asyncio
        loop = asyncio.get_running_loop()
        end = loop.time() + interval(LOOK_AGAIN, left)
        while self._conn is not None:
            if self._told(0.0):
                return True
            remaining = end - loop.time()
            if remaining <= 0 or self._conn is None:
                return False
            readable = loop.create_future()
            fd = self._conn.fileno()
            loop.add_reader(fd, lambda ready=readable: ready.done() or ready.set_result(None))
            try:
                await asyncio.wait_for(readable, remaining)
            except TimeoutError:
                pass
            finally:
                loop.remove_reader(fd)
        await asyncio.sleep(max(0.0, end - loop.time()))
        return False

    def _told(self, limit: float) -> bool:
        """Whether this job's end came within ``limit`` seconds (0: what is already
        on the socket); a lost connection lets go of it (look again on the timer)."""
        import psycopg
        conn = self._conn
        if conn is None:
            return False
        try:
            for note in conn.notifies(timeout=limit):
                if note.payload == self._id:
                    return True
        except psycopg.Error:
            self.close()
        return False

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()


def finish_waiter(target: Any, job_id: int, poll: float) -> NotifiedWaiter | PollingWaiter:
    """The waiter for ``job_id`` on the store at ``target``: notified, or polling
    every ``poll`` seconds behind a transaction-mode pooler (no LISTEN there) or when
    a connection of its own cannot be had (the server's connections all in use): a
    wait is never refused for want of being told."""
    if target.pooler:
        return PollingWaiter(poll)
    try:
        return NotifiedWaiter(target, job_id)
    except StoreError:
        return PollingWaiter(poll)
