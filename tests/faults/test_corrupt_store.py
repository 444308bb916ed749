"""Scenario 9 (R26a): a corrupt store is refused in one line and never written.

A compact variant of tests/test_store_open.py, over this suite's app, plus
``jobpool doctor`` on each damaged file and a salvage of what is readable.
"""
from __future__ import annotations

import sqlite3

import pytest

import jobpool

from ..test_store_open import corrupt as _corrupt
from .conftest import record_figure

JOBS = 2000
HOWS = ("garbage over a page", "truncated", "zeroed header")  # what _corrupt knows


def _filled(path) -> None:
    store = jobpool.connect(path)
    store.enqueue_many("f.work", [(i, 0) for i in range(JOBS)])
    store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    store.close()


@pytest.mark.parametrize("how", HOWS)
def test_start_refuses_a_corrupt_store_and_leaves_its_bytes(fault_app, how):
    app = fault_app
    _filled(app.db)
    for sidecar in ("-wal", "-shm"):
        app.db.with_name(app.db.name + sidecar).unlink(missing_ok=True)
    _corrupt(app.db, how)
    before = app.db.read_bytes()
    result = app.cli("start", "--app", app.module, "--db", str(app.db), "--burst")
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 1
    assert len(lines) == 1 and lines[0].startswith("jobpool: error:"), result.stderr
    assert "corrupt" in lines[0] or "not a jobpool store" in lines[0]
    assert app.db.read_bytes() == before
    doctor = app.cli("doctor", "--db", str(app.db))
    assert doctor.returncode != 0
    salvaged = app.dir / "salvaged.db"
    salvage = app.cli("doctor", "--db", str(app.db), "--salvage", str(salvaged))
    assert app.db.read_bytes() == before  # doctor only reads the damaged file
    recovered = 0
    if salvaged.exists():
        conn = sqlite3.connect(salvaged)
        try:
            recovered = conn.execute("SELECT count(*) FROM jobs").fetchone()[0]
        finally:
            conn.close()
    if how == "garbage over a page":
        assert recovered >= JOBS * 0.9  # one bad page costs the rows on it, not the store
    record_figure(f"9. Corrupt store: {how}",
                  start_exit=result.returncode, stderr_lines=len(lines),
                  message=lines[0].replace(str(app.db), "<db>"), bytes_unchanged=True,
                  doctor_exit=doctor.returncode, salvage_exit=salvage.returncode,
                  jobs_before=JOBS, jobs_salvaged=recovered)


@pytest.mark.parametrize("version", ["99", "abc"])
def test_doctor_names_a_schema_this_jobpool_cannot_read(fault_app, version):
    """R26a: `doctor` said "ok" of a store of a schema every other command refuses (a
    newer one, or one that is no number), and `--salvage` copied a newer one's rows into
    today's schema as if they meant the same."""
    app = fault_app
    _filled(app.db)
    conn = sqlite3.connect(app.db)
    with conn:
        conn.execute("UPDATE jobpool_meta SET value = ? WHERE key = 'schema'", (version,))
    conn.close()
    doctor = app.cli("doctor", "--db", str(app.db))
    assert doctor.returncode != 0, doctor.stdout
    said = "newer than schema" if version == "99" else "without a schema version"
    assert said in doctor.stdout + doctor.stderr, (doctor.stdout, doctor.stderr)
    if version == "99":
        salvaged = app.dir / "salvaged.db"
        salvage = app.cli("doctor", "--db", str(app.db), "--salvage", str(salvaged))
        assert salvage.returncode == 1 and "upgrade jobpool" in salvage.stderr, salvage.stderr
        assert "Traceback" not in salvage.stderr and not salvaged.exists()


def test_a_salvage_onto_a_full_disk_is_one_line_and_leaves_no_half_store(fault_app, tmpfs):
    """A salvage that fills its disk printed a traceback and left a half-made store."""
    app = fault_app
    _filled(app.db)
    full = tmpfs("96k")
    salvaged = full / "salvaged.db"
    salvage = app.cli("doctor", "--db", str(app.db), "--salvage", str(salvaged))
    lines = salvage.stderr.strip().splitlines()
    assert salvage.returncode == 1 and len(lines) == 1, salvage.stderr
    assert lines[0].startswith("jobpool: error: salvage into") and "full" in lines[0], lines
    assert list(full.iterdir()) == []


def test_a_failed_salvage_removes_only_what_it_made(fault_app, tmpfs):
    """A salvage's cleanup removed the path it was given whenever the copy failed: an
    empty file the user had made there (or, given /dev/null, a size of 0, /dev/null)."""
    app = fault_app
    _filled(app.db)
    full = tmpfs("96k")
    mine = full / "salvaged.db"
    mine.write_bytes(b"")  # the user's own empty file: salvage may write into it
    salvage = app.cli("doctor", "--db", str(app.db), "--salvage", str(mine))
    assert salvage.returncode == 1 and "full" in salvage.stderr, salvage.stderr
    assert mine.exists()  # not the salvage's to remove
    assert sorted(p.name for p in full.iterdir()) == ["salvaged.db"]


def test_doctor_reads_a_schema_value_as_every_command_does(fault_app):
    """A version written " 15" opens with every command; doctor called it none."""
    app = fault_app
    _filled(app.db)
    conn = sqlite3.connect(app.db)
    with conn:
        conn.execute("UPDATE jobpool_meta SET value = ' ' || value WHERE key = 'schema'")
    conn.close()
    assert app.cli("status", "--db", str(app.db)).returncode == 0
    doctor = app.cli("doctor", "--db", str(app.db))
    assert doctor.returncode == 0, (doctor.stdout, doctor.stderr)
