"""jobpool.contrib.django (R52) in a real Django project: settings, enqueues that follow
the project's transactions, and ``manage.py jobpool start`` running the jobs (with the ORM)
in a real pool. Each step is a process of its own, as a project runs it."""
from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

import pytest

pytest.importorskip("django")

from tests.conftest import ROOT, _pg_admin  # noqa: E402

SETTINGS = """
SECRET_KEY = "test"
USE_TZ = True
INSTALLED_APPS = ["jobpool.contrib.django", "shop"]
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"
DATABASES = {databases}
JOBPOOL = {jobpool}
"""

MODELS = """
from django.db import models

class Order(models.Model):
    shipped = models.BooleanField(default=False)
"""

JOBS = """
from django.db import transaction
from jobpool import job
from shop.models import Order

@job(name="shop.ship", store_result=True)
def ship(order_id):
    # The ORM in a pool's child: the child opens its own connection.
    return Order.objects.filter(id=order_id).update(shipped=True)

@job(name="shop.leave_open")
def leave_open():
    # A job that leaves its transaction open: the next job in its child must not inherit it.
    transaction.set_autocommit(False)
    Order.objects.create()

@job(name="shop.add", store_result=True)
def add():
    return Order.objects.create().id
"""

MANAGE = """
import os, sys
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mysite.settings")
from django.core.management import execute_from_command_line
execute_from_command_line(sys.argv)
"""


class Project:
    """A Django project in a temp dir: ``mysite`` settings, a ``shop`` app with a model
    and a ``jobs`` module, ``manage.py``."""

    def __init__(self, root: Path, databases: dict, jobpool: dict) -> None:
        self.root = root
        for package in ("mysite", "shop"):
            (root / package).mkdir()
            (root / package / "__init__.py").write_text("")
        (root / "mysite" / "settings.py").write_text(SETTINGS.format(
            databases=repr(databases), jobpool=repr(jobpool)))
        (root / "shop" / "models.py").write_text(MODELS)
        (root / "shop" / "jobs.py").write_text(JOBS)
        (root / "manage.py").write_text(MANAGE)
        self.env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(root), str(ROOT)]),
                        DJANGO_SETTINGS_MODULE="mysite.settings", JOBPOOL_POLL_INTERVAL="0.2")
        self.env.pop("JOBPOOL_DB", None)

    def manage(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        result = subprocess.run([sys.executable, "manage.py", *args], cwd=self.root, env=self.env,
                                capture_output=True, text=True, timeout=90)
        if check and result.returncode != 0:
            raise AssertionError(f"manage.py {' '.join(args)} exited {result.returncode}:\n"
                                 f"{result.stdout}\n{result.stderr}")
        return result

    def script(self, source: str) -> dict:
        """Run ``source`` after ``django.setup()``; what it prints last, as JSON."""
        path = self.root / "scenario.py"
        path.write_text("import django, json\ndjango.setup()\n" + textwrap.dedent(source))
        result = subprocess.run([sys.executable, str(path)], cwd=self.root, env=self.env,
                                capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout.strip().splitlines()[-1])


SCENARIO = """
from django.db import transaction
import jobpool
from jobpool.contrib import django as jobs
from shop.jobs import ship
from shop.models import Order

seen = {}
store = jobs.store()
with transaction.atomic():
    kept = Order.objects.create()
    seen["inside"] = jobs.enqueue(ship, kept.id)
    # Before the commit the store has nothing to run.
    seen["before_commit"] = len(store.list_jobs())
seen["after_commit"] = len(store.list_jobs())
try:
    with transaction.atomic():
        lost = Order.objects.create()
        jobs.enqueue_with("shop.ship", args=(lost.id,), key="lost")
        raise RuntimeError("roll back")
except RuntimeError:
    pass
seen["after_rollback"] = len(store.list_jobs())
outside = jobs.enqueue(ship, kept.id)
seen["outside"] = outside.id
try:
    with transaction.atomic():
        jobs.enqueue(ship, kept.id, nope=1)
except jobpool.EnqueueError as exc:
    seen["refused"] = str(exc)
seen["orders"] = sorted(Order.objects.values_list("id", flat=True))
seen["kept"] = kept.id
# using=: another database's transaction decides
with transaction.atomic(using="archive"):
    seen["archive_inside"] = jobs.enqueue_with(ship, args=(kept.id,), using="archive",
                                               meta={"order": kept.id})
    seen["archive_before_commit"] = len(store.list_jobs())
seen["archive_after_commit"] = len(store.list_jobs())
seen["meta"] = [job["meta"] for job in store.list_jobs()]
try:
    with transaction.atomic():
        jobs.enqueue_with(ship, args=(kept.id,), meta=["not", "a", "dict"])
except jobpool.EnqueueError as exc:
    seen["meta_refused"] = str(exc)
with transaction.atomic():  # a block of "default" does not hold back an enqueue for "archive"
    seen["archive_at_once"] = jobs.enqueue_with(ship, args=(kept.id,), using="archive") is not None
jobs.enqueue("shop.leave_open")
jobs.enqueue("shop.add")
print(json.dumps(seen, default=str))
"""


def test_django_enqueue_waits_for_the_commit_and_a_pool_runs_it_with_the_orm(tmp_path):
    # Given a project on SQLite with its store in a file of its own
    project = Project(tmp_path, {"default": {"ENGINE": "django.db.backends.sqlite3",
                                             "NAME": str(tmp_path / "app.sqlite3")},
                                 "archive": {"ENGINE": "django.db.backends.sqlite3",
                                             "NAME": str(tmp_path / "archive.sqlite3")}},
                      {"DB": str(tmp_path / "jobpool.db")})
    project.manage("migrate", "--run-syncdb", "-v", "0")
    # When it enqueues inside committed and rolled-back atomic blocks and outside one
    seen = project.script(SCENARIO)
    # Then the job inside the block is written only at the commit, the rolled-back
    # one never, the one outside at once, and a bad call is refused at the call
    assert seen["inside"] is None
    assert seen["before_commit"] == 0
    assert seen["after_commit"] == 1
    assert seen["after_rollback"] == 1
    assert isinstance(seen["outside"], int)
    assert "unexpected keyword argument 'nope'" in seen["refused"]
    assert seen["orders"] == [seen["kept"]]
    assert (seen["archive_inside"], seen["archive_before_commit"], seen["archive_after_commit"],
            seen["archive_at_once"]) == (None, 2, 3, True)
    # R54: metadata goes with the deferred write; bad metadata is refused at the call
    assert seen["meta"] == [None, None, {"order": seen["kept"]}]
    assert seen["meta_refused"].startswith("meta must be a dict")
    # And manage.py jobpool runs them in a real pool (one child, so one after the
    # other), the jobs' ORM reaching the project's database
    started = project.manage("jobpool", "start", "--burst", "--procs", "1", "--no-dashboard")
    assert "job_dead" not in started.stderr
    with sqlite3.connect(tmp_path / "jobpool.db") as db:
        done = db.execute("SELECT name, status, result FROM jobs ORDER BY id").fetchall()
    assert [row[:2] for row in done] == [("shop.ship", "done")] * 4 + [
        ("shop.leave_open", "done"), ("shop.add", "done")]
    added = int(done[5][2])
    # The job after the one that left its transaction open got a connection of its own:
    # its row committed, the other's was rolled back with the connection it left
    with sqlite3.connect(tmp_path / "app.sqlite3") as db:
        assert db.execute("SELECT id, shipped FROM shop_order ORDER BY id").fetchall() == [
            (seen["kept"], 1), (added, 0)]
    # And the other jobpool commands read the project's store
    status = project.manage("jobpool", "status", "--json")
    assert json.loads(status.stdout)["done"] == 6


SAME_TRANSACTION = """
from django.db import connection, transaction
from jobpool.contrib import django as jobs
from jobpool.errors import JobNotFound
from shop.jobs import ship
from shop.models import Order

def committed(job_id):
    try:
        jobs.store().get(job_id)
        return True
    except JobNotFound:
        return False

seen = {}
with transaction.atomic():
    kept = Order.objects.create()
    handle = jobs.enqueue(ship, kept.id)
    seen["kept_job"] = handle.id
    # Written in this very transaction: visible here, not yet to the store's own connection
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM {schema}.jobs WHERE id = %s", [handle.id])
        seen["seen_inside"] = cursor.fetchone()[0]
    seen["committed_inside"] = committed(handle.id)
seen["committed_after"] = committed(handle.id)
try:
    with transaction.atomic():
        lost = Order.objects.create()
        seen["lost_job"] = jobs.enqueue(ship, lost.id).id
        raise RuntimeError("roll back")
except RuntimeError:
    pass
seen["lost_committed"] = committed(seen["lost_job"])
seen["kept"] = kept.id

# A store that refuses the insert (its table locked past lock_timeout) costs the
# enqueue, not the caller's transaction: the row beside it still commits
import psycopg
from jobpool.errors import StoreError
locker = psycopg.connect("{plain}")
locker.execute("LOCK TABLE {schema}.jobs IN ACCESS EXCLUSIVE MODE")
with transaction.atomic():
    survivor = Order.objects.create()
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL lock_timeout = '200ms'")
    try:
        jobs.enqueue(ship, survivor.id)
    except StoreError as exc:
        seen["refused"] = str(exc)
    seen["usable_after"] = Order.objects.filter(id=survivor.id).count()
locker.rollback()
locker.close()
seen["survivor"] = survivor.id
print(json.dumps(seen))
"""


def test_django_on_postgresql_enqueues_in_the_same_transaction(pg_url, tmp_path):
    # Given a project whose store lives in its own PostgreSQL database (psycopg 3 backend)
    schema = dict(parse_qsl(urlsplit(pg_url).query))["schema"]
    admin = _pg_admin()
    admin.execute(f"CREATE SCHEMA {schema}")
    admin.close()
    url = urlsplit(pg_url)
    database = {"ENGINE": "django.db.backends.postgresql", "NAME": url.path.lstrip("/"),
                "USER": url.username or "", "HOST": url.hostname or "", "PORT": url.port or "",
                "OPTIONS": {"options": f"-c search_path={schema}"}}
    project = Project(tmp_path, {"default": database}, {"DB": pg_url, "DATABASE": "default"})
    project.manage("migrate", "--run-syncdb", "-v", "0")
    # When it enqueues in a committed and in a rolled-back atomic block
    plain = pg_url.split("?")[0]
    seen = project.script(SAME_TRANSACTION.replace("{schema}", schema).replace("{plain}", plain))
    # Then each job shares its transaction: a handle at once, the row visible inside
    # the transaction only, committed with it, gone with the rollback
    assert seen["seen_inside"] == 1
    assert seen["committed_inside"] is False
    assert seen["committed_after"] is True
    assert seen["lost_committed"] is False
    assert "lock timeout" in seen["refused"]
    assert seen["usable_after"] == 1
    # And a pool started by manage.py runs it, the ORM in its child on PostgreSQL
    project.manage("jobpool", "start", "--burst", "--no-dashboard")
    admin = _pg_admin()
    try:
        shipped = admin.execute(f"SELECT id, shipped FROM {schema}.shop_order").fetchall()
    finally:
        admin.close()
    assert sorted(shipped) == [(seen["kept"], True), (seen["survivor"], False)]


def test_django_settings_mistakes_are_one_line(tmp_path):
    project = Project(tmp_path, {"default": {"ENGINE": "django.db.backends.sqlite3",
                                             "NAME": str(tmp_path / "app.sqlite3")}},
                      {"DBB": "jobpool.db", "DATABASE": "default"})
    result = project.manage("jobpool", "start", "--burst", check=False)
    assert result.returncode == 1
    assert result.stderr.strip() == ("CommandError: settings.JOBPOOL has unknown keys DBB; "
                                     "it takes DB, DATABASE, MODULES")
    assert not (tmp_path / "jobpool.db").exists()
    bare = project.manage("jobpool", check=False)
    assert bare.returncode == 1
    assert bare.stderr.strip().startswith("CommandError: name a jobpool command: manage.py jobpool start")


HOOKED = """
from django.db import transaction
import jobpool
from jobpool.contrib import django as jobs
from shop.jobs import ship

calls = []

class Stamp(jobpool.Middleware):
    def before_enqueue(self, job, meta):
        calls.append(job.name)
        meta["serial"] = len(calls)

jobpool.add_middleware(Stamp())
with transaction.atomic():
    jobs.enqueue(ship, 1)
    at_call = len(calls)
jobs.enqueue_with(ship, args=(2,), then=ship.s(3))
print(json.dumps({"at_call": at_call, "calls": len(calls),
                  "meta": sorted(job["meta"]["serial"] for job in jobs.store().list_jobs())}))
"""


def test_django_enqueues_run_the_before_enqueue_hooks_once_at_the_call(tmp_path):
    """R55: the helper runs the producer's hooks at the call (in the request's
    context, its checks seeing what they stamped), never again at the write, even
    one that waits for the commit."""
    project = Project(tmp_path, {"default": {"ENGINE": "django.db.backends.sqlite3",
                                             "NAME": str(tmp_path / "app.sqlite3")}},
                      {"DB": str(tmp_path / "jobpool.db")})
    seen = project.script(HOOKED)
    # Three jobs (the chain's step stamped at the call): three calls, the first one
    # made before the commit wrote it
    assert seen == {"at_call": 1, "calls": 3, "meta": [1, 2]}
