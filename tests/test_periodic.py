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
])
def test_a_zone_that_cannot_apply_is_refused_at_import(options, words):
    with pytest.raises(RegistryError, match=words):
        jobpool.job(name="periodic.bad", **options)(lambda: None)
