"""The example import job (``jobpool/examples/imports.py``) as a resumable job (R37):
a child killed between a chunk's commit and its save point, and the retry that goes
on after it, leave the warehouse with every row of the file exactly once."""
from __future__ import annotations

import sqlite3
import time

import pytest

import jobpool
from jobpool.examples import imports

APP = """
import os
from pathlib import Path
import pytest

import jobpool
from jobpool.examples import imports

HERE = Path(__file__).parent
imports.CHUNK_ROWS = 100
_save = imports.checkpoint


def checkpoint(rows_done):
    # After the second chunk's commit, before its save point: the child dies, once.
    marker = HERE / "killed"
    if rows_done == 200 and not marker.exists():
        marker.write_text("once")
        os.kill(os.getpid(), 9)
    with open(HERE / "saves.txt", "a") as fh:
        fh.write(f"{rows_done}\\n")
    _save(rows_done)


imports.checkpoint = checkpoint
"""


def test_a_child_killed_between_a_chunks_commit_and_its_save_imports_nothing_twice(make_app):
    app = make_app(APP)
    (path,) = imports.generate(str(app.dir / "csv"), files=1, rows=450, seed=3)
    warehouse = str(app.dir / "warehouse.db")
    imports.prepare_warehouse(warehouse)
    job_id = app.store().enqueue(imports.load_csv.name, path, warehouse).id
    app.start("--procs", "1")
    assert (app.dir / "killed").exists()
    # The crash's retry waits out its backoff (a --burst pool does not wait for it).
    retry_at = app.store().get(job_id)["run_at"]
    time.sleep(max(0.0, retry_at - time.time()) + 0.05)
    app.start("--procs", "1")
    row = app.store().get(job_id)
    assert (row["status"], row["attempts"]) == ("done", 2)
    assert [a["outcome"] for a in app.store().attempts(job_id)] == ["crash", "done"]
    # The retry went on after the warehouse's last chunk (200), not from its own last
    # save (100), nor from the start.
    assert (app.dir / "saves.txt").read_text().split() == ["100", "300", "400", "450"]
    conn = sqlite3.connect(warehouse)
    try:
        assert conn.execute("SELECT count(*), count(DISTINCT line) FROM sales").fetchone() == (
            450, 450)
        assert conn.execute("SELECT rows FROM imports").fetchall() == [(450,)]
    finally:
        conn.close()


def test_a_chunk_is_written_only_where_the_warehouse_count_says(tmp_path):
    # Two runs of one file (an attempt whose lease was taken back, a second job):
    # the one behind writes nothing and is retried, to go on from the count.
    warehouse = str(tmp_path / "warehouse.db")
    (path,) = imports.generate(str(tmp_path / "csv"), files=1, rows=200, seed=1)
    rows = imports.read_sales(path)
    conn = imports.open_warehouse(warehouse)
    try:
        imports.start_import(conn, "/data/a.csv")
        imports.write_chunk(conn, "/data/a.csv", rows, 0, 100)
        with pytest.raises(jobpool.Retry, match="another run of /data/a.csv moved on"):
            imports.write_chunk(conn, "/data/a.csv", rows, 0, 100)
        assert conn.execute("SELECT count(*) FROM sales").fetchone()[0] == 100
        assert imports.rows_imported(conn, "/data/a.csv", 200) == 100
    finally:
        conn.close()
