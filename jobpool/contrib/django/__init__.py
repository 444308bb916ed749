"""jobpool in a Django project (R52): the store named in settings, enqueues that follow
Django's transactions, and ``manage.py jobpool start`` with the project's settings.

    # settings.py
    INSTALLED_APPS = [..., "jobpool.contrib.django"]
    JOBPOOL = {"DB": BASE_DIR / "jobpool.db"}            # or a postgresql:// URL

    # views.py
    from jobpool.contrib import django as jobs

    with transaction.atomic():
        order = Order.objects.create(...)
        jobs.enqueue(ship, order.id)     # runs only if this block commits

An enqueue inside an atomic block is written when the outermost block commits
(``transaction.on_commit``), and never if it rolls back; outside one it is written at
once. With ``"DATABASE": "default"`` the store lives in that Django database
(PostgreSQL, Django's psycopg 3 backend): an enqueue inside an atomic block is written
on Django's own connection, in the same transaction as the rows beside it (R5).
"""
from __future__ import annotations

import importlib
import os
import threading
import weakref
from datetime import datetime, timedelta
from typing import Any, NamedTuple
from urllib.parse import parse_qsl, unquote, urlsplit

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import DEFAULT_DB_ALIAS, close_old_connections, connections, transaction

import jobpool
from jobpool import extensions
from jobpool.errors import EnqueueError
from jobpool.jobs import Job
from jobpool.store import rows
from jobpool.store.urls import is_postgres_url

__all__ = ["Settings", "settings_of", "store", "close", "enqueue", "enqueue_with", "job_modules",
           "import_job_modules", "start_child"]

#: The keys ``settings.JOBPOOL`` may hold; any other is refused, so a typo is not ignored.
KNOWN_KEYS = ("DB", "DATABASE", "MODULES")
#: The schema a PostgreSQL store uses when its URL names none (``?schema=``).
DEFAULT_SCHEMA = "jobpool"


class Settings(NamedTuple):
    """``settings.JOBPOOL``, checked."""

    #: The store: an SQLite path or a ``postgresql://`` URL; None: ``jobpool.connect()``'s
    #: own default (``$JOBPOOL_DB``, else ./jobpool.db).
    db: str | None
    #: The Django database alias the store lives in (same-transaction enqueues), or None.
    database: str | None
    #: The modules whose import registers the jobs; None: each installed app's ``jobs``.
    modules: tuple[str, ...] | None


def settings_of() -> Settings:
    """``settings.JOBPOOL`` checked; ``ImproperlyConfigured`` naming what is wrong."""
    given = getattr(settings, "JOBPOOL", {})
    if not isinstance(given, dict):
        raise ImproperlyConfigured(f"settings.JOBPOOL must be a dict, not {type(given).__name__}")
    unknown = sorted(str(k) for k in given if k not in KNOWN_KEYS)
    if unknown:
        raise ImproperlyConfigured(f"settings.JOBPOOL has unknown keys {', '.join(unknown)}; "
                                   f"it takes {', '.join(KNOWN_KEYS)}")
    db = given.get("DB")
    if db is not None:
        if not isinstance(db, (str, os.PathLike)) or not os.fspath(db):
            raise ImproperlyConfigured(f"settings.JOBPOOL['DB'] must be a path or a postgresql:// "
                                       f"URL, not {db!r}")
        db = os.fspath(db)
    database = given.get("DATABASE")
    if database is not None:
        if database not in settings.DATABASES:
            raise ImproperlyConfigured(f"settings.JOBPOOL['DATABASE'] is {database!r}, which is not "
                                       f"in settings.DATABASES")
        engine = settings.DATABASES[database].get("ENGINE", "")
        if not engine.endswith("postgresql") or not (isinstance(db, str) and is_postgres_url(db)):
            raise ImproperlyConfigured(
                "settings.JOBPOOL['DATABASE'] shares a PostgreSQL database with the store: it needs "
                "a postgresql ENGINE and JOBPOOL['DB'] the postgresql:// URL of the same database")
    modules = given.get("MODULES")
    if modules is not None:
        if isinstance(modules, str) or not all(isinstance(m, str) and m for m in modules):
            raise ImproperlyConfigured("settings.JOBPOOL['MODULES'] must be a list of module names")
        modules = tuple(modules)
    return Settings(db, database, modules)


_stores: dict[tuple[int, str | None], Any] = {}
_stores_lock = threading.Lock()


def store() -> Any:
    """The project's store, opened once per process (a forked web worker opens its own)
    and shared by its threads (R42)."""
    db = settings_of().db
    key = (os.getpid(), db)
    with _stores_lock:
        found = _stores.get(key)
        if found is None:
            found = _stores[key] = jobpool.connect(db)
        return found


def close() -> None:
    """Close this process's store (tests; a process that is done enqueueing)."""
    with _stores_lock:
        for key in [k for k in _stores if k[0] == os.getpid()]:
            _stores.pop(key).close()


def enqueue(job: Any, *args: Any, **kwargs: Any) -> Any:
    """Queue ``job(*args, **kwargs)`` (a ``@job`` function or a registered name) on the
    project's store, following the current transaction: see ``enqueue_with``."""
    return enqueue_with(job, args=args, kwargs=kwargs)


def enqueue_with(job: Any, *, args: tuple | list = (), kwargs: dict | None = None,
                 key: str | None = None, delay: float | timedelta | None = None,
                 priority: int | None = None, deadline: datetime | float | None = None,
                 max_attempts: int | None = None, queue: str | None = None,
                 timeout: float | None = None, then: Any = None,
                 key_period: float | timedelta | None = None, group: Any = None,
                 meta: dict[str, Any] | None = None, using: str | None = None) -> Any:
    """Queue one job with ``Job.enqueue_with``'s options, bound to the transaction of
    the Django database ``using`` (default: ``JOBPOOL['DATABASE']``, else "default").

    Everything is checked now (R1: an ``EnqueueError``, nothing written or deferred).
    Then: inside an atomic block of the store's own database (``JOBPOOL['DATABASE']``)
    the row is written on Django's connection, in a savepoint of the same transaction,
    and its ``Handle`` returned; inside any other atomic block the write waits for the
    outermost block to commit (``transaction.on_commit``), is dropped by a rollback,
    and None is returned; outside an atomic block it is written at once (a ``Handle``).
    """
    name = _name_of(job)
    conf = settings_of()
    alias = using or conf.database or DEFAULT_DB_ALIAS
    target = store()
    # R55: the producer's before_enqueue hooks run now, once: in this request's
    # context, and before the checks, which then hold what they stamped.
    meta, then = rows.stamp_call(name, args, kwargs, meta, then)
    options = dict(args=args, kwargs=kwargs, key=key, delay=delay, priority=priority,
                   deadline=deadline, max_attempts=max_attempts, queue=queue, timeout=timeout,
                   then=then, key_period=key_period, group=group, meta=meta)
    _check(target, name, options)
    django_conn = connections[alias]
    if not django_conn.in_atomic_block:
        return _write(target, name, options)
    if alias == conf.database:
        raw = _same_database_connection(django_conn, alias, conf)
        # A savepoint: a failed insert rolls back to it and leaves the caller's
        # transaction usable, as Django expects of any statement in an atomic block.
        with transaction.atomic(using=alias):
            return _write(target, name, dict(options, connection=raw))
    # robust=False: a store that refuses the write after the commit raises from the
    # atomic block's exit, so the caller hears of it (the data committed; the job did not).
    transaction.on_commit(lambda: _write(target, name, options), using=alias)
    return None


def _write(target: Any, name: str, options: dict[str, Any]) -> Any:
    """The store's enqueue of a call whose hooks ran at the call (R55: not again)."""
    with extensions.hooks_already_ran():
        return target.enqueue_with(name, **options)


def _name_of(job: Any) -> str:
    if isinstance(job, str):
        return job
    name = getattr(job, "name", None)
    if isinstance(job, Job) and isinstance(name, str):
        return name
    raise EnqueueError(f"enqueue takes a @job function or a registered job name, not {job!r}")


def _check(target: Any, name: str, options: dict[str, Any]) -> None:
    """R1 before anything is written or deferred: the same checks the store makes."""
    max_payload = getattr(target, "max_payload", rows.MAX_PAYLOAD_BYTES)
    rows.key_period(options["key_period"], options["key"])
    rows.new_job(name, options["args"], options["kwargs"], options["key"], options["delay"],
                 options["priority"], options["deadline"], options["max_attempts"],
                 options["queue"], options["timeout"], 0.0,
                 rows.chain_json(options["then"], max_payload, name), max_payload, options["group"],
                 options["meta"])


#: Django's raw connections already found to hold the store's tables.
_checked: weakref.WeakSet[Any] = weakref.WeakSet()


def _same_database_connection(django_conn: Any, alias: str, conf: Settings) -> Any:
    """Django's psycopg 3 connection of ``alias``, once checked to be the store's
    database (its name, and the store's jobs table in it)."""
    from django.db.backends.postgresql.psycopg_any import is_psycopg3
    if not is_psycopg3:
        raise ImproperlyConfigured(
            f"settings.JOBPOOL['DATABASE'] = {alias!r}: a same-transaction enqueue needs Django's "
            f"psycopg 3 backend (pip install 'psycopg[binary]'), and this Django uses psycopg2")
    django_conn.ensure_connection()
    raw = django_conn.connection
    if raw in _checked:
        return raw
    assert conf.db is not None  # settings_of() holds DATABASE to a postgresql:// DB
    parts = urlsplit(conf.db)
    schema = dict(parse_qsl(parts.query)).get("schema", DEFAULT_SCHEMA)
    wanted = unquote(parts.path.lstrip("/"))
    found, has_jobs = raw.execute("SELECT current_database(), to_regclass(%s) IS NOT NULL",
                                  (f"{schema}.jobs",)).fetchone()
    if (wanted and found != wanted) or not has_jobs:
        raise ImproperlyConfigured(
            f"settings.JOBPOOL['DATABASE'] = {alias!r}, but that database ({found}) does not hold "
            f"the store JOBPOOL['DB'] names (database {wanted or '(default)'}, schema {schema})")
    _checked.add(raw)
    return raw


# -- the pool ---------------------------------------------------------------------------------

def job_modules() -> tuple[str, ...]:
    """The modules ``manage.py jobpool`` imports: ``JOBPOOL['MODULES']``, else the
    ``jobs`` module of each installed app that has one."""
    from django.apps import apps
    from importlib.util import find_spec
    conf = settings_of()
    if conf.modules is not None:
        return conf.modules
    found = []
    for app in apps.get_app_configs():
        name = f"{app.name}.jobs"
        try:
            if find_spec(name) is not None:
                found.append(name)
        except ImportError:  # the app is a module, not a package: it has no submodule
            continue
    return tuple(found)


def import_job_modules() -> tuple[str, ...]:
    """Import ``job_modules()`` (registering the jobs) and name them."""
    modules = job_modules()
    for module in modules:
        importlib.import_module(module)
    return modules


class _Connections(jobpool.Middleware):
    """Around each attempt in a pool's child: Django's connections as a request has them
    (``CONN_MAX_AGE``, a connection left broken or mid-transaction by the last job)."""

    def before(self, job: Any) -> None:
        close_old_connections()

    def after(self, job: Any, result: Any) -> None:
        close_old_connections()


_middleware = _Connections()


def start_child() -> None:
    """``on_child_start`` (registered by the app's ``ready()``): only a pool's child gets
    the middleware, never a test running jobs in its own atomic block (``drain``)."""
    jobpool.add_middleware(_middleware)
