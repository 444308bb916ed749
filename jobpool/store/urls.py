"""Which store a ``--db`` names: a ``postgresql://`` URL, or else an SQLite file.

Apart from the stores themselves so that the CLI and ``connect`` can tell without
importing either store's driver (psycopg loads only for a PostgreSQL URL).
"""
from __future__ import annotations

#: URL schemes that open a PostgreSQL store.
POSTGRES_SCHEMES = ("postgresql://", "postgres://")


def is_postgres_url(db: str) -> bool:
    return db.startswith(POSTGRES_SCHEMES)
