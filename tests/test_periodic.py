"""Periodic jobs on a clock the test sets (R33): cron time zones, daylight-saving
changes, the UTC default, and the warning for a job that names no zone."""
from __future__ import annotations

import logging
import time
from datetime import datetime, timezone
from zoneinfo import ZoneInfo

import pytest

import jobpool
from jobpool.config import PoolConfig
from jobpool.errors import RegistryError
from jobpool.supervisor import Supervisor

PARIS = ZoneInfo("Europe/Paris")


@jobpool.job(name="periodic.nightly", cron="30 2 * * *", tz="Europe/Paris")
def nightly():
    pass


@jobpool.job(name="periodic.noon_utc", cron="0 12 * * *")
def noon():
    pass


def run_pool_at(store, name: str, wall: datetime) -> None:
    """A --burst pool whose clock reads ``wall`` (an aware datetime) when it starts."""
    offset = wall.timestamp() - time.time()
    config = PoolConfig(db=str(store.path), procs=1, burst=True, names=(name,),
                        poll_interval=0.05)
    assert Supervisor(config, clock=lambda: time.time() + offset).run() == 0


def occurrences(store, name: str) -> list[datetime]:
    """When each enqueued occurrence was due, in UTC, from the rows' keys."""
    keys = [job["key"] for job in store.list_jobs(name=name)]
    return [datetime.fromtimestamp(float(k.split("@")[1]), timezone.utc) for k in keys]


@pytest.fixture
def store(tmp_path):
    store = jobpool.connect(tmp_path / "jobpool.db")
    yield store
    store.close()


def test_a_time_the_clock_skips_runs_once_right_after_the_jump(store):
    # Paris, 2026-03-29: 02:00 CET jumps to 03:00 CEST, so 02:30 never shows
    run_pool_at(store, "periodic.nightly", datetime(2026, 3, 29, 1, 50, tzinfo=PARIS))
    run_pool_at(store, "periodic.nightly", datetime(2026, 3, 29, 3, 5, tzinfo=PARIS))
    run_pool_at(store, "periodic.nightly", datetime(2026, 3, 29, 3, 40, tzinfo=PARIS))
    assert occurrences(store, "periodic.nightly") == [
        datetime(2026, 3, 28, 1, 30, tzinfo=timezone.utc),   # the night before, 02:30 CET
        datetime(2026, 3, 29, 1, 0, tzinfo=timezone.utc),    # 03:00 CEST, right after the jump
    ]


def test_a_time_the_clock_shows_twice_runs_once(store):
    # Paris, 2026-10-25: 03:00 CEST falls back to 02:00 CET, so 02:30 shows twice
    first_pass = datetime(2026, 10, 25, 0, 40, tzinfo=timezone.utc)    # 02:40 CEST
    second_pass = datetime(2026, 10, 25, 1, 40, tzinfo=timezone.utc)   # 02:40 CET
    assert first_pass.astimezone(PARIS).hour == second_pass.astimezone(PARIS).hour == 2
    run_pool_at(store, "periodic.nightly", first_pass)
    run_pool_at(store, "periodic.nightly", second_pass)
    assert occurrences(store, "periodic.nightly") == [
        datetime(2026, 10, 25, 0, 30, tzinfo=timezone.utc)]  # 02:30 CEST, the first time


def test_a_cron_without_a_zone_runs_on_utc_whatever_the_hosts_zone(store, monkeypatch, caplog):
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        with caplog.at_level(logging.WARNING, logger="jobpool.supervisor"):
            run_pool_at(store, "periodic.noon_utc", datetime(2026, 6, 1, 12, 5, tzinfo=timezone.utc))
        assert occurrences(store, "periodic.noon_utc") == [
            datetime(2026, 6, 1, 12, 0, tzinfo=timezone.utc)]
        (warning,) = [r.getMessage() for r in caplog.records if "names no tz=" in r.getMessage()]
        assert "periodic.noon_utc" in warning and "runs on UTC" in warning
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()


@pytest.mark.parametrize("options, words", [
    (dict(every=60, tz="Europe/Paris"), "an every= interval does not depend on one"),
    (dict(cron="0 * * * *", tz="Mars/Olympus_Mons"), "unknown time zone 'Mars/Olympus_Mons'"),
    (dict(cron="0 * * * *", tz=""), "tz= must name a time zone"),
    (dict(cron=5), "cron= must be a cron expression"),
    # An occurrence is keyed by its millisecond: a shorter interval gave two one key.
    (dict(every=1e-9), r"every= must be a number of seconds from 0.001 to 10 years, not 1e-09"),
    (dict(every=float("inf")), "every= must be a number of seconds from 0.001 to 10 years"),
    (dict(every="60"), "every= must be a number of seconds"),
])
def test_a_zone_that_cannot_apply_is_refused_at_import(options, words):
    with pytest.raises(RegistryError, match=words):
        jobpool.job(name="periodic.bad", **options)(lambda: None)


@pytest.mark.parametrize("expression", [
    "0 3 30 2 *",        # 30 February
    "0 0 31 4 *",        # 31 April
    "0 0 1 1 * 0 2020",  # a year (seventh field) that is over
])
def test_a_cron_expression_that_never_fires_is_refused_at_import_naming_job_and_expression(
        expression):
    # R33: refused where it is written, not by every pool start that meets it
    with pytest.raises(RegistryError) as refused:
        jobpool.job(name="periodic.never", cron=expression)(lambda: None)
    message = str(refused.value)
    assert "periodic.never" in message and repr(expression) in message
    assert "never fires" in message
    assert "periodic.never" not in jobpool.jobs.registered()


def test_a_periodic_job_limited_per_group_is_refused_at_import():
    # R33/R35: its occurrences carry no arguments, so no group: every enqueue of one was
    # refused, and the job never ran, said only at DEBUG level.
    with pytest.raises(RegistryError, match="has no tenant= to be limited by"):
        jobpool.job(name="periodic.grouped", every=60, max_running=1,
                    group_by="tenant")(lambda tenant="all": None)
    assert "periodic.grouped" not in jobpool.jobs.registered()


def test_a_cron_expression_that_fires_once_in_years_is_accepted():
    # 29 February comes every 4 years, sometimes 8 (2096, then 2104)
    leap = jobpool.job(name="periodic.leap_day", cron="0 0 29 2 *")(lambda: None)
    try:
        assert leap.schedule is not None
    finally:
        jobpool.jobs.unregister("periodic.leap_day")


class _Unschedulable:
    """A schedule whose every question fails, as croniter does for an expression
    it cannot place ("failed to find prev date")."""

    def occurrence(self, now: float) -> float:
        raise ValueError("failed to find prev date")

    def __repr__(self) -> str:
        return "cron '0 0 1 1 * 0 2999' in UTC"


@jobpool.job(name="periodic.hourly", every=3600)
def hourly():
    pass


@jobpool.job(name="periodic.plain")
def plain():
    pass


def test_a_schedule_failing_at_run_time_is_logged_for_its_job_and_the_pool_runs_on(
        store, monkeypatch, caplog):
    # R33: one job's schedule failing when the pool asks it stops neither the pool
    # nor any other job, and spends no attempt of a job the pool had claimed
    monkeypatch.setattr(jobpool.jobs.registered()["periodic.noon_utc"], "schedule",
                        _Unschedulable())
    other = store.enqueue_with("periodic.plain")
    config = PoolConfig(db=str(store.path), procs=1, burst=True, poll_interval=0.05,
                        names=("periodic.noon_utc", "periodic.hourly", "periodic.plain"))
    with caplog.at_level(logging.WARNING, logger="jobpool.supervisor"):
        assert Supervisor(config).run() == 0
    row = store.get(other.id)
    assert row["status"] == "done" and row["attempts"] == 1
    assert [job["status"] for job in store.list_jobs(name="periodic.hourly")] == ["done"]
    assert store.list_jobs(name="periodic.noon_utc") == []
    (logged,) = [r for r in caplog.records if "failed to find prev date" in r.getMessage()]
    assert logged.levelno == logging.ERROR
    assert "periodic.noon_utc" in logged.getMessage() and "0 0 1 1 * 0 2999" in logged.getMessage()
