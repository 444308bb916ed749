"""Trust (R39): a store row never decides to run code, and a new store is private.

Anyone who can write one row of the store chooses its ``serializer`` column, so the
job registered in the worker (or the producer reading a result) decides how far
decoding may go; and a store file holds payloads and tracebacks, so only its owner
reads it unless the caller asks for more.
"""
from __future__ import annotations

import os
import pickle
import sqlite3
import stat
import subprocess
import sys

import pytest

import jobpool
from jobpool import jobs
from jobpool.errors import UnsafeResultError
from jobpool.store.sqlite import statements as sql
from .conftest import ROOT, rows

APP = """
from pathlib import Path
from jobpool import job

HERE = Path(__file__).parent

@job(name="t.plain")
def plain(*args):
    (HERE / "plain.ran").write_text(repr(args))

@job(name="t.pickled", serializer="pickle")
def pickled(*args):
    (HERE / "pickled.ran").write_text(repr(args))
"""


class _RunsCode:
    """Unpickling this runs a shell command that leaves a marker file."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _insert_raw(db, name: str, payload, serializer: str) -> int:
    """What an attacker with write access to the file does: a plain INSERT."""
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        cur = conn.execute(sql.INSERT_JOB, ("default", name, None, payload, serializer, 0, 0.0, 0.0,
                                            5, None, 60.0, 0.0, None, None, None, None))
        return cur.lastrowid
    finally:
        conn.close()


def test_a_pickle_row_for_a_json_job_is_dead_and_never_unpickled(make_app, tmp_path):
    # Given a job registered with JSON (the default) and a row that says pickle
    app = make_app(APP)
    app.store().close()
    marker = tmp_path / "pwned"
    payload = pickle.dumps(((_RunsCode(str(marker)),), {}))
    job_id = _insert_raw(app.db, "t.plain", payload, "pickle")
    # When a pool runs it
    app.start("--procs", "1")
    # Then the payload was never decoded, the job did not run, and it is dead at once
    assert not marker.exists()
    assert not (tmp_path / "plain.ran").exists()
    [row] = app.rows("SELECT * FROM jobs WHERE id = ?", (job_id,))
    assert row["status"] == "dead"
    assert row["attempts"] == 1
    assert "'pickle'" in row["last_error"] and "'json'" in row["last_error"]


def test_a_json_row_for_a_pickle_job_is_decoded_as_json(make_app, tmp_path):
    app = make_app(APP)
    app.store().close()
    job_id = _insert_raw(app.db, "t.pickled", '[["a", 1], {}]', "json")
    app.start("--procs", "1")
    assert app.rows("SELECT status FROM jobs WHERE id = ?", (job_id,)) == [{"status": "done"}]
    assert (tmp_path / "pickled.ran").read_text() == "('a', 1)"


@pytest.fixture
def store(tmp_path):
    s = jobpool.connect(tmp_path / "jobpool.db")
    yield s
    s.close()


def _done_with_result(store, name: str, result: bytes, serializer: str) -> int:
    job_id = _insert_raw(store.path, name, b"", serializer)
    conn = sqlite3.connect(store.path, isolation_level=None)
    conn.execute("UPDATE jobs SET status = 'done', result = ? WHERE id = ?", (result, job_id))
    conn.close()
    return job_id


def test_a_pickled_result_is_not_unpickled_for_a_job_this_process_does_not_register_so(store, tmp_path):
    marker = tmp_path / "pwned"
    job_id = _done_with_result(store, "t.unknown_here", pickle.dumps(_RunsCode(str(marker))), "pickle")
    handle = jobpool.Handle(job_id, store=store)
    with pytest.raises(UnsafeResultError, match="allow_pickle"):
        handle.result(timeout=1)
    assert not marker.exists()
    # The caller may say it trusts the store.
    handle.result(timeout=1, allow_pickle=True)
    assert marker.exists()


def test_a_pickled_result_of_a_job_registered_with_pickle_is_returned(store):
    name = "t.trust_result_pickle"
    jobpool.job(name=name, serializer="pickle")(lambda: None)
    try:
        job_id = _done_with_result(store, name, pickle.dumps({1, 2}), "pickle")
        assert jobpool.Handle(job_id, store=store).result(timeout=1) == {1, 2}
    finally:
        jobs.unregister(name)


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_a_new_store_and_its_wal_are_readable_by_their_owner_only(tmp_path):
    old = os.umask(0)  # even a permissive umask does not widen it
    try:
        store = jobpool.connect(tmp_path / "new.db")
        store.enqueue("t.anything")
    finally:
        os.umask(old)
    try:
        for suffix in ("", "-wal", "-shm"):
            assert _mode(f"{tmp_path}/new.db{suffix}") == 0o600, suffix
    finally:
        store.close()


def test_a_store_can_be_shared_with_a_group_and_an_existing_file_keeps_its_mode(tmp_path):
    store = jobpool.connect(tmp_path / "shared.db", mode=0o660)
    store.close()
    assert _mode(tmp_path / "shared.db") == 0o660
    os.chmod(tmp_path / "shared.db", 0o640)
    jobpool.connect(tmp_path / "shared.db").close()
    assert _mode(tmp_path / "shared.db") == 0o640
    with pytest.raises(ValueError, match="owner"):
        jobpool.connect(tmp_path / "other.db", mode=0o044)
    assert not (tmp_path / "other.db").exists()


def _cli(*args: str, cwd) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "jobpool", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=60)


def test_the_cli_creates_stores_with_the_mode_it_is_given(tmp_path):
    done = _cli("enqueue", "t.anything", "--db", "group.db", "--mode", "660", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert _mode(tmp_path / "group.db") == 0o660
    assert rows(tmp_path / "group.db", "SELECT name FROM jobs") == [{"name": "t.anything"}]
    bad = _cli("enqueue", "t.anything", "--db", "bad.db", "--mode", "rw", cwd=tmp_path)
    assert bad.returncode == 2
    assert len(bad.stderr.strip().splitlines()) == 1 and "--mode" in bad.stderr
    assert not (tmp_path / "bad.db").exists()


@pytest.mark.parametrize("typed, words", [
    ("777", "others could write"),           # world-writable (and executable)
    ("0o666", "others could write"),         # world-writable
    ("4777", "setuid"),                      # was refused as "2559"
    ("1600", "sticky"),
    ("700", "execute"),
    ("670", "execute"),
])
def test_the_cli_refuses_a_mode_that_opens_the_store_quoting_what_was_typed(tmp_path, typed, words):
    # R39: write access to a store means running any registered job; a store is
    # data, never a program, and the special bits mean nothing for it
    bad = _cli("enqueue", "t.anything", "--db", "bad.db", "--mode", typed, cwd=tmp_path)
    assert bad.returncode == 2 and bad.stdout == ""
    (line,) = bad.stderr.strip().splitlines()
    assert line.startswith(f"jobpool: error: --mode {typed}: ") and words in line
    assert "2559" not in line
    assert not (tmp_path / "bad.db").exists()


def test_a_world_writable_store_needs_to_be_asked_for_by_name(tmp_path):
    done = _cli("enqueue", "t.anything", "--db", "open.db", "--mode", "666",
                "--allow-world-writable", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert _mode(tmp_path / "open.db") == 0o666
    # execute and special bits stay refused even then
    bad = _cli("start", "--burst", "--db", "exec.db", "--mode", "777",
               "--allow-world-writable", cwd=tmp_path)
    assert bad.returncode == 2 and "--mode 777: " in bad.stderr and "execute" in bad.stderr
    assert not (tmp_path / "exec.db").exists()


@pytest.mark.parametrize("mode, words", [
    (0o777, "others could write"),
    (0o666, "others could write"),
    (0o4600, "setuid"),
    (0o700, "execute"),
])
def test_connect_refuses_a_mode_that_opens_the_store(tmp_path, mode, words):
    with pytest.raises(ValueError, match=words) as refused:
        jobpool.connect(tmp_path / "bad.db", mode=mode)
    assert f"mode {mode:#o}: " in str(refused.value)
    assert not (tmp_path / "bad.db").exists()


def test_connect_makes_a_world_writable_store_only_when_asked(tmp_path):
    store = jobpool.connect(tmp_path / "open.db", mode=0o666, allow_world_writable=True)
    store.close()
    assert _mode(tmp_path / "open.db") == 0o666
    with pytest.raises(ValueError, match="execute"):
        jobpool.connect(tmp_path / "exec.db", mode=0o777, allow_world_writable=True)
    # a group-writable store stays the documented way to share one (README)
    jobpool.connect(tmp_path / "group.db", mode=0o660).close()
    assert _mode(tmp_path / "group.db") == 0o660
