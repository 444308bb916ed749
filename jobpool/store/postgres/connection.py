"""A PostgreSQL store's URL, its connections and its schema: what the store, its
claimer and ``jobpool doctor`` each open the server with (DESIGN section 7).

``parse_url`` reads a ``postgresql://`` URL into a ``Target`` (with the password kept
out of everything shown); ``open_connection`` opens an autocommit connection scoped
to the store's schema with R26's session limits; ``ensure_schema`` creates the tables
or upgrades an older revision under an advisory lock. Imported only when a
``postgresql://`` URL is opened, like psycopg itself.
"""
from __future__ import annotations

import logging
import os
import re
import weakref
from typing import Any, NamedTuple
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit, urlunsplit

from jobpool.errors import NotAStoreError, StoreError, StoreSettingError
from jobpool.store.postgres import statements as pg_sql
try:
    import psycopg
    from psycopg import sql as pgsql
except ImportError:  # pragma: no cover - exercised by the one-line error of _require_psycopg
    psycopg = None  # type: ignore[assignment]

log = logging.getLogger(__name__)

#: The schema a store lives in unless the URL says ``?schema=NAME``.
DEFAULT_SCHEMA = "jobpool"
#: Schema names jobpool accepts: lower-case, so they need no quoting anywhere.
_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}\Z")

#: R26: per-session limits, so a stuck statement, a held lock or a forgotten open
#: transaction becomes a StoreError (and a pause), never a pool that hangs (ms).
SESSION_OPTIONS = {"statement_timeout": 30_000, "lock_timeout": 10_000,
                   "idle_in_transaction_session_timeout": 60_000}
#: TCP keepalives: a server that vanished is noticed within about a minute.
KEEPALIVES: dict[str, Any] = {"keepalives": 1, "keepalives_idle": 30, "keepalives_interval": 10,
              "keepalives_count": 3}


class Target(NamedTuple):
    """Where a PostgreSQL store lives, parsed from its URL."""

    conninfo: str        # the URL libpq gets, without jobpool's own parameters
    schema: str
    pooler: str | None   # "transaction": behind a transaction-mode pooler
    shown: str           # the URL as operators see it: never the password
    #: The password as written and as decoded, to scrub from any error text.
    secrets: tuple[str, ...] = ()
    #: R26a: ``full`` (every commit waits for its WAL flush) or ``normal`` (this
    #: store's connections commit asynchronously: a server crash may lose the last
    #: commits, never a process crash).
    durability: str = "full"

    def __repr__(self) -> str:
        return f"Target({self.shown!r}, schema={self.schema!r})"

    def scrub(self, text: str) -> str:
        """``text`` (a driver's error, say) with the password replaced."""
        for secret in self.secrets:
            if secret:
                text = text.replace(secret, "***")
        return text


def redact(url: str) -> str:
    """The URL with its password replaced, for anything printed or logged."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)
    user = netloc[0].split(":", 1)[0]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{netloc[1]}"))


#: R26a: what ``durability`` may be, on either store.
DURABILITIES = ("full", "normal")


def parse_url(url: str, durability: str | None = None) -> Target:
    """Split jobpool's parameters (``schema``, ``pooler``, ``durability``) off a
    PostgreSQL URL. ``durability`` (``connect(url, durability=...)``) must agree with the
    URL's when both say; without either, ``$JOBPOOL_DURABILITY``, else ``full``."""
    try:
        parts = urlsplit(url)
        secrets = _secrets(parts)
    except ValueError as exc:
        raise StoreError(f"not a usable PostgreSQL URL: {exc}") from None
    query = parse_qsl(parts.query, keep_blank_values=True)
    schema = DEFAULT_SCHEMA
    pooler = None
    in_url = None
    kept = []
    ours = [key for key, _value in query if key in ("schema", "pooler", "durability")]
    for key in sorted(set(ours)):
        if ours.count(key) > 1:
            # Each read the last, silently: a URL built by joining two meant one store.
            raise StoreSettingError(f"?{key}= is given {ours.count(key)} times in the URL: "
                                    f"give it once")
    for key, value in query:
        if key == "schema":
            schema = value
        elif key == "pooler":
            pooler = value
        elif key == "durability":
            in_url = value
        elif key == "password":
            raise StoreSettingError("put the password in the URL's user part or in ~/.pgpass, "
                             "not in ?password=")
        else:
            kept.append((key, value))
    if not _SCHEMA_NAME.match(schema):
        raise StoreSettingError(f"schema must be a lower-case name of letters, digits and _ "
                         f"(at most 63), not {schema!r}")
    if pooler not in (None, "transaction"):
        raise StoreSettingError(f"pooler must be 'transaction', not {pooler!r}")
    for given, where in ((in_url, "?durability= in the URL"), (durability, "durability")):
        if given is not None and given not in DURABILITIES:
            raise StoreSettingError(f"{where} must be 'full' or 'normal', not {given!r}")
    if in_url is not None and durability is not None and in_url != durability:
        raise StoreSettingError(f"durability={durability!r} and the URL's ?durability={in_url} "
                         f"disagree: say it once")
    chosen = in_url or durability or os.environ.get("JOBPOOL_DURABILITY") or "full"
    if chosen not in DURABILITIES:
        raise StoreSettingError(f"$JOBPOOL_DURABILITY must be 'full' or 'normal', not {chosen!r}")
    conninfo = urlunsplit(parts._replace(query=urlencode(kept, quote_via=quote)))
    # What operators see names the very store (its schema and pooler too), so it can
    # be passed back to --db or connect(); only the password is left out.
    ours = ([("schema", schema)] if schema != DEFAULT_SCHEMA else []) + (
        [("pooler", pooler)] if pooler else []) + (
        [("durability", chosen)] if chosen != "full" else [])
    shown = urlunsplit(parts._replace(query=urlencode(kept + ours, quote_via=quote)))
    return Target(conninfo, schema, pooler, redact(shown), secrets, chosen)


def _secrets(parts: Any) -> tuple[str, ...]:
    """The URL's password as written (percent-encoded) and decoded."""
    netloc = parts.netloc.rsplit("@", 1)
    if len(netloc) < 2 or ":" not in netloc[0]:
        return ()
    raw = netloc[0].split(":", 1)[1]
    return tuple(sorted({raw, unquote(raw)}, key=len, reverse=True))


def _require_psycopg() -> None:
    if psycopg is None:
        raise StoreError("PostgreSQL stores need psycopg 3: pip install 'jobpool[postgres]'")


#: Every connection jobpool opened (``open_connection``), for ``_RepeatedByUs``.
_OURS: weakref.WeakSet = weakref.WeakSet()


class _RepeatedByUs(logging.Filter):
    """R26, R30: psycopg's warnings that it ignored an error while it ended a pipeline,
    a transaction or a COPY on one of jobpool's connections ("error ignored
    terminating <psycopg.Pipeline [BAD] ...>", twice for the claimer's pipeline, which
    its transaction nests). psycopg logs them, as they are, only while another error
    leaves that block: the one that broke the connection, which reaches jobpool and
    is reported in jobpool's own words (a ``StoreError``, a pool's ``store_error``
    line), so they would only repeat it, unformatted. They go to jobpool's log at
    debug level instead; psycopg's warnings about other connections pass."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not (isinstance(record.msg, str) and record.msg.startswith("error ignored")
                and isinstance(record.args, tuple) and record.args):
            return True
        subject = record.args[0]
        conn = subject if isinstance(subject, psycopg.Connection) else (
            getattr(subject, "connection", None) or getattr(subject, "_conn", None))
        if conn is None or conn not in _OURS:
            return True
        log.debug("psycopg: %s", record.getMessage())
        return False


if psycopg is not None:
    # A logger's filters see only the records logged to it, not its children's.
    for _name in ("psycopg", "psycopg.transaction"):
        logging.getLogger(_name).addFilter(_RepeatedByUs())


#: The claimer's session. Generic plans: each of its statements has one shape whatever
#: its parameters, and the server otherwise planned the larger ones (a limited claim's
#: page of lanes) anew every turn, which cost that claim more than running them did
#: (a plan is kept once psycopg prepares a statement, after its fifth run; PostgreSQL
#: 12 or later). READ COMMITTED, whatever the database's default: a limited claim's
#: statement counts a group's running jobs again in a snapshot taken after the page's
#: locks (``pg_sql.CLAIM_IDS``), which a transaction-wide snapshot would not be. Not
#: behind a pooler, which refuses startup options (and prepares nothing).
CLAIMER_OPTIONS = {"plan_cache_mode": "force_generic_plan",
                   "default_transaction_isolation": "read\\ committed"}


def session_options(target: Target) -> dict[str, Any]:
    """R26's limits, and R26a's commit setting of a ``normal`` store."""
    if target.durability == "normal":
        return dict(SESSION_OPTIONS, synchronous_commit="off")
    return SESSION_OPTIONS


def open_connection(target: Target, *, application: str = "jobpool",
                    settings: dict[str, Any] | None = None) -> Any:
    """A new autocommit connection whose search_path is the store's schema (behind a
    transaction-mode pooler: each transaction sets it, see ``scope``); ``settings``
    are more session settings (not behind a pooler)."""
    _require_psycopg()
    options = " ".join(f"-c {k}={v}"
                       for k, v in dict(session_options(target), **(settings or {})).items())
    options += f" -c search_path={target.schema}"
    user_options = dict(parse_qsl(urlsplit(target.conninfo).query)).get("options")
    if target.pooler:
        options = user_options or ""  # PgBouncer refuses startup options it does not know
    elif user_options:
        options = f"{user_options} {options}"  # the URL's own settings, then ours
    extra: dict[str, Any] = {"options": options} if options else {}
    try:
        conn = psycopg.connect(target.conninfo, autocommit=True, **extra,
                               application_name=application,
                               prepare_threshold=None if target.pooler else 5, **KEEPALIVES)
    except psycopg.Error as exc:
        # Not chained: libpq's message may quote the URL, password and all.
        raise StoreError(f"cannot connect to {target.shown}: "
                         f"{target.scrub(first_line(exc))}") from None
    _OURS.add(conn)
    return conn


def scope(conn: Any, target: Target) -> None:
    """The first statement of every transaction behind a transaction-mode pooler: the
    store's schema and R26's limits, for this transaction alone (elsewhere the
    connection's own options set them once)."""
    if target.pooler:
        conn.execute(pg_sql.SET_LOCAL_SESSION, dict(
            {k: str(v) for k, v in SESSION_OPTIONS.items()}, schema=target.schema,
            synchronous_commit="off" if target.durability == "normal" else None))


def close_quietly(conn: Any) -> None:
    """Close a connection that may be broken already (the server dropped it), once the
    statement another thread may be running on it has its answer (R42: a store's
    ``close`` closes every thread's connection; closed under a running statement, its
    thread would wait for an answer on a socket that is gone, for ever). psycopg
    holds the connection's lock for each statement."""
    with conn.lock:
        try:
            conn.close()
        except psycopg.Error:
            pass


def first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def ensure_schema(conn: Any, target: Target, *, create: bool, upgrade: bool) -> None:
    """Create the store's schema and tables (``create``), bring an older revision up to
    this one (``upgrade``), or check the revision of those there; under an advisory
    lock, so hosts starting together create and migrate once.

    A store of a newer revision is used as it is, as long as this code is at least
    the oldest revision it says can use it (``READABLE_FROM``): newer revisions only
    add what older code never names."""
    with conn.transaction():
        scope(conn, target)
        conn.execute(pg_sql.MIGRATION_LOCK, {"schema": target.schema})
        exists = conn.execute(pg_sql.HAS_META).fetchone()[0]
        if not exists:
            if not create:
                raise StoreError(f"no jobpool store in schema {target.schema} at {target.shown}")
            clash = [r[0] for r in conn.execute(pg_sql.CLASHING_TABLES,
                                                {"schema": target.schema,
                                                 "names": list(pg_sql.TABLES)})]
            if clash:
                raise NotAStoreError(
                    f"schema {target.schema} at {target.shown} is not a jobpool store but has "
                    f"tables jobpool would use ({', '.join(sorted(clash))}): choose another "
                    f"with ?schema=NAME")
            conn.execute(pgsql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(
                pgsql.Identifier(target.schema)))
            for statement in pg_sql.SCHEMA:
                conn.execute(statement)
            _write_revision(conn)
            return
        revision_text, floor_text = conn.execute(pg_sql.READ_SCHEMA_VERSION).fetchone()
        try:
            floor = int(floor_text)
            revision = int(revision_text) if revision_text is not None else floor
        except (TypeError, ValueError):
            raise NotAStoreError(f"schema {target.schema} at {target.shown} has a jobpool_meta "
                                 f"table without a schema version: not a jobpool store") from None
        current = int(pg_sql.SCHEMA_VERSION)
        if floor > current:
            raise NotAStoreError(
                f"schema {target.schema} at {target.shown} holds a jobpool store of schema "
                f"version {revision}, which needs at least version {floor}; this jobpool "
                f"reads version {current}: upgrade jobpool")
        if revision >= current:
            return
        if not upgrade:
            raise NotAStoreError(
                f"schema {target.schema} at {target.shown} holds a jobpool store of schema "
                f"version {revision}; this jobpool reads version {current}: jobpool start, "
                f"jobpool enqueue or connect() upgrades it")
        log.warning("upgrading the store in schema %s at %s from jobpool schema %d to %d",
                    target.schema, target.shown, revision, current)
        # The store's own step runs again: builds made while a revision was being
        # written labelled stores with it before its step was whole (revision 11
        # without ``jobs.waited``), and every step is written to be run twice.
        for step in range(max(revision, min(pg_sql.STEPS)), current + 1):
            for statement in pg_sql.STEPS[step]:
                conn.execute(statement)
        _write_revision(conn)


def _write_revision(conn: Any) -> None:
    conn.execute(pg_sql.WRITE_SCHEMA_VERSION, {"version": pg_sql.SCHEMA_VERSION,
                                               "readable_from": pg_sql.READABLE_FROM})
