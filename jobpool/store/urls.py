"""Which store a ``--db`` names: a ``postgresql://`` URL, or else an SQLite file.

Apart from the stores themselves so that the CLI and ``connect`` can tell without
importing either store's driver (psycopg loads only for a PostgreSQL URL).

What looks like a URL (section 7, R26a): a value that starts with a scheme, two or
more of the characters a URL scheme is made of (a letter, then letters, digits,
``+``, ``-`` or ``.``) and a colon, with nothing before it: ``mysql://db/app``,
``sqlite:jobs.db``, ``postgresq://…``. A scheme jobpool does not know is refused
naming the ones it does, rather than taken for a file name. Everything else is a
path: ``./a:b.db`` and ``/tmp/x:y.db`` (a slash comes before the colon), ``C:\\jobs.db``
(one letter, a drive), ``jobs.db``. A file whose name itself starts ``word:`` is
written ``./word:…``. An SQLite store is named by its path only: ``sqlite:`` and
``file:`` URLs are refused too, with that said, since SQLite's own URI options
(``?mode=ro``, ``?immutable=1``) would not mean what they say to jobpool.
"""
from __future__ import annotations

import os
import re

#: Where the store lives when neither ``connect(db)`` nor ``$JOBPOOL_DB`` says.
DEFAULT_DB = "jobpool.db"

#: URL schemes that open a PostgreSQL store.
POSTGRES_SCHEMES = ("postgresql://", "postgres://")

#: A leading URL scheme (RFC 3986's characters), two characters or more.
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]+):(//)?")

#: Schemes that name an SQLite file in other tools' conventions.
_SQLITE_SCHEMES = ("sqlite", "sqlite3", "file")


def is_postgres_url(db: str) -> bool:
    return db.startswith(POSTGRES_SCHEMES)


def check_store_name(db: str, flag: str = "") -> None:
    """Refuse ``db`` if it looks like a URL jobpool does not open (``ValueError``).

    Only the scheme is quoted, never the rest: a URL may carry a password. A name that
    is not UTF-8 text (bytes the shell passed, which Python holds as lone surrogates) is
    refused too: SQLite opens a file by a UTF-8 path, and its encoder's error named no
    flag."""
    try:
        db.encode("utf-8")
    except UnicodeEncodeError:
        try:  # the bytes the shell passed, as they were
            shown = db.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        except UnicodeEncodeError:  # a lone surrogate of Python's own
            shown = db.encode("utf-8", "backslashreplace").decode("utf-8")
        raise ValueError(f"{flag + ' ' if flag else ''}{shown}: a store's name must be UTF-8 "
                         f"text") from None
    if is_postgres_url(db):
        return
    found = _SCHEME.match(db)
    if found is None:
        return
    scheme = f"{flag} {found.group(0)}" if flag else found.group(0)
    name = found.group(1)
    known = "jobpool opens postgresql://… and postgres://… URLs (PostgreSQL) and plain paths (SQLite)"
    if name.lower() in _SQLITE_SCHEMES:
        raise ValueError(f"{scheme}…: name an SQLite store by its path (jobs.db, /srv/jobs.db), "
                         f"not a URL; {known}")
    if name.lower() in ("postgresql", "postgres"):
        raise ValueError(f"{scheme}…: a PostgreSQL URL starts postgresql:// or postgres://; {known}")
    raise ValueError(f"{scheme}…: no store jobpool knows has the scheme {name!r}; {known} "
                     f"(a file whose name starts so is written ./{name}:…)")


def resolve_path(db: str | os.PathLike | None = None) -> str:
    """The store path: the argument, else ``$JOBPOOL_DB``, else ``./jobpool.db``.

    A string that starts with a URL scheme jobpool does not open (``mysql://…``,
    ``sqlite:jobs.db``) is refused (``ValueError``) rather than taken for a file
    name (``urls.check_store_name``); a ``PathLike`` is a path whatever it says."""
    if db is None:
        env = os.environ.get("JOBPOOL_DB")
        if not env:
            return DEFAULT_DB
        check_store_name(env, "$JOBPOOL_DB")
        return env
    if isinstance(db, str):
        check_store_name(db)
    return os.fspath(db)
