"""What a PostgreSQL statement costs on this machine before jobpool adds anything
(issue 25: which of its targets a floor puts out of reach).

    .venv/bin/python benchmarks/pg_floors.py [--db URL] [--n 3000] [--producers 4] [--turns 2000]

From Python with psycopg 3, one connection in autocommit, every statement prepared:

* ``select1``: a bare ``SELECT 1`` round trip (the protocol and the client, no commit);
* ``update``: a one-row ``UPDATE ... RETURNING`` on a one-row table, committed as it runs,
  with synchronous commit (it waits for its WAL flush) and with it off;
* ``insert``: a one-row ``INSERT`` committed as it runs, alone and with a
  ``pg_notify`` in the same statement (the shape of a single enqueue), a session
  LISTENing on the channel and reading what comes;
* ``insert, N sessions``: the same two, ``--producers`` sessions inserting at once
  (a transaction that notifies holds the server's one notification lock from just
  before its commit record until its commit has ended, so notifying commits of all
  sessions go one at a time): the
  aggregate rate, and wall per statement as its inverse;
* ``turn``: jobpool's turn statement settling the jobs the turn before claimed and
  claiming as many, for 1 and 2 jobs a turn, durable and ``durability=normal``
  (``pg_turn.py``'s loop).

Each line: median and mean wall per statement, the client's CPU and its server
backend's CPU per statement (``/proc``: the server on this host). With ``--procs 2``
and R6 a no-op drain carries about one job a turn, so 1 / (a one-job turn's wall) is
what one pool can drain at most; the section of BENCHMARKS.md that quotes these says
how that compares with the issue's targets.
"""
from __future__ import annotations

import argparse
import statistics
import threading
import time
import uuid

import psycopg

from pg_turn import backend_cpu, run_turns


def _time(conn: psycopg.Connection, query: str, n: int) -> dict[str, float]:
    backend = conn.info.backend_pid
    for _ in range(50):  # prepared after a few runs; warm the caches too
        conn.execute(query, prepare=True).fetchall()
    walls = []
    cpu0, server0 = time.process_time(), backend_cpu(backend)
    for _ in range(n):
        began = time.perf_counter()
        conn.execute(query, prepare=True).fetchall()
        walls.append(time.perf_counter() - began)
    cpu, server = time.process_time() - cpu0, backend_cpu(backend) - server0
    return {"wall_median_us": statistics.median(walls) * 1e6, "wall_mean_us": sum(walls) / n * 1e6,
            "client_cpu_us": cpu / n * 1e6, "backend_cpu_us": server / n * 1e6}


def bare(db: str, n: int, producers: int) -> list[tuple[str, dict[str, float]]]:
    """The bare statements' lines, in a schema of their own dropped after."""
    schema = "bench_floor_" + uuid.uuid4().hex[:8]
    rows = []
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
        try:
            conn.execute(f"CREATE TABLE {schema}.t (id int PRIMARY KEY, n bigint NOT NULL)")
            conn.execute(f"INSERT INTO {schema}.t VALUES (1, 0)")
            rows.append(("SELECT 1", _time(conn, "SELECT 1", n)))
            rows += _inserts(conn, db, schema, n, producers)
            update = f"UPDATE {schema}.t SET n = n + 1 WHERE id = 1 RETURNING n"
            for setting in ("on", "off"):
                conn.execute(f"SET synchronous_commit = {setting}")
                rows.append((f"UPDATE RETURNING, synchronous_commit={setting}",
                             _time(conn, update, n)))
        finally:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")
    return rows


def _together(db: str, query: str, n: int, producers: int) -> dict[str, float]:
    """``producers`` sessions each running ``query`` ``n`` times at once: their
    aggregate rate (statements a second) and its inverse."""
    conns = [psycopg.connect(db, autocommit=True) for _ in range(producers)]
    start = threading.Barrier(producers + 1)

    def run(conn: psycopg.Connection) -> None:
        for _ in range(20):
            conn.execute(query, prepare=True).fetchall()
        start.wait()
        for _ in range(n):
            conn.execute(query, prepare=True).fetchall()
    threads = [threading.Thread(target=run, args=(conn,)) for conn in conns]
    for thread in threads:
        thread.start()
    start.wait()
    began = time.perf_counter()
    for thread in threads:
        thread.join()
    took = time.perf_counter() - began
    for conn in conns:
        conn.close()
    return {"per_s": producers * n / took, "wall_per_statement_us": took / (producers * n) * 1e6}


def _inserts(conn: psycopg.Connection, db: str, schema: str, n: int,
             producers: int) -> list[tuple[str, dict[str, float]]]:
    """A one-row insert alone and with its notification, a listener reading them."""
    conn.execute(f"CREATE TABLE {schema}.q (id bigserial PRIMARY KEY, queue text NOT NULL)")
    channel = schema + "_wake"
    listener = psycopg.connect(db, autocommit=True)
    listener.execute(f"LISTEN {channel}")
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set():
            for _ in listener.notifies(timeout=0.1):
                pass
    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        insert = f"INSERT INTO {schema}.q (queue) VALUES ('default') RETURNING id"
        notify = (f"WITH i AS ({insert}) SELECT id, pg_notify('{channel}', 'default') FROM i")
        return [("INSERT RETURNING", _time(conn, insert, n)),
                ("INSERT RETURNING + pg_notify, a listener", _time(conn, notify, n)),
                (f"INSERT RETURNING, {producers} sessions", _together(db, insert, n, producers)),
                (f"INSERT RETURNING + pg_notify, {producers} sessions",
                 _together(db, notify, n, producers))]
    finally:
        stop.set()
        reader.join()
        listener.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--n", type=int, default=3000, help="runs of each bare statement")
    parser.add_argument("--producers", type=int, default=4,
                        help="sessions inserting at once in the insert lines")
    parser.add_argument("--turns", type=int, default=2000, help="turns of each turn line")
    args = parser.parse_args()
    rows = bare(args.db, args.n, args.producers)
    for per_turn in (1, 2):
        for durability in ("full", "normal"):
            rows.append((f"turn, {per_turn} job(s), durability={durability}",
                         run_turns(args.db, args.turns, per_turn, durability)))
    for what, row in rows:
        print(f"{what:48} " + " ".join(f"{key}={value:.0f}" for key, value in row.items()))


if __name__ == "__main__":
    main()
