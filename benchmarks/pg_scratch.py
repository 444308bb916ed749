"""What the PostgreSQL operator benchmarks share: the server's URL as their first
argument, and a store in a schema of its own, dropped after."""
from __future__ import annotations

import argparse
import contextlib
import os
import secrets
from collections.abc import Iterator
from typing import Any

import psycopg

import jobpool

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"


def url_argument(parser: argparse.ArgumentParser) -> None:
    """The server: the first argument, else ``$JOBPOOL_BENCH_PG``, else the local one."""
    parser.add_argument("url", nargs="?", default=os.environ.get("JOBPOOL_BENCH_PG", DEFAULT_URL))


@contextlib.contextmanager
def scratch_store(url: str, prefix: str) -> Iterator[Any]:
    """A store in a fresh schema named ``prefix_<random>``, dropped when the block ends."""
    schema = f"{prefix}_{secrets.token_hex(4)}"
    store = jobpool.connect(f"{url}?schema={schema}")
    try:
        yield store
    finally:
        store.close()
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
