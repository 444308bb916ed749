"""R63 on the dashboards: a slot running a chunk shows how many rows of its chunk
wait behind its job (`jobpool top`, the web overview's running jobs and the pools
page), those rows never show as slots of their own, and the job list shows them
running under the pool that claimed them, as the store records them. On both stores,
through a real pool; and a heartbeat whose list of waiting rows is not job ids (R44)
shows none.
"""
from __future__ import annotations

import io
import json
import sqlite3
import time

import pytest

from jobpool.dashboard import render
from jobpool.snapshot import read_snapshot
from tests.conftest import wait_for

pytestmark = pytest.mark.filterwarnings("ignore:Using `httpx`:UserWarning")

#: A chunk of four rows of ``c.hold``; each row waits for its own ``go.N`` file.
CHUNK_APP = """
import time
from pathlib import Path
from jobpool import job

HERE = Path(__file__).parent

@job(name="c.hold", chunk=4, timeout=120)
def hold(n):
    (HERE / f"running.{n}").touch()
    while not (HERE / f"go.{n}").exists():
        time.sleep(0.02)
"""


#: How long the first row of the chunk runs at least, so the next one waits that long.
HELD = 1.5


def _slots(store):
    return read_snapshot(store).slots


def _cells(line: str) -> list[str]:
    return line.split()


def test_a_slot_running_a_chunk_shows_its_waiting_rows_on_every_dashboard(make_any_app):
    from starlette.testclient import TestClient

    from jobpool.web import create_app
    app = make_any_app(CHUNK_APP)
    store = app.store()
    ids = [store.enqueue("c.hold", n).id for n in range(6)]
    pool = app.spawn("--procs", "1")
    try:
        wait_for(lambda: (app.dir / "running.0").exists(), timeout=60)
        # After the pool's next heartbeat: one slot, its job the first row, three waiting.
        wait_for(lambda: [(s.job_id, s.waiting) for s in _slots(store)] == [(ids[0], 3)],
                 timeout=30)
        # The rows of the chunk are running rows of the store, claimed by the pool.
        running = store.list_jobs(status="running")
        assert sorted(j["id"] for j in running) == ids[:4]
        (owner,) = {j["lease_owner"] for j in running}
        assert [p["owner"] for p in store.pools()] == [owner]
        listed = app.cli("jobs", "list", "--status", "running", "--db", str(app.db),
                         check=True).stdout
        assert sorted(int(line.split()[0]) for line in listed.splitlines()[1:]) == ids[:4]

        app.env["COLUMNS"] = "80"
        top = app.cli("top", "--once", "--db", str(app.db), check=True).stdout
        lines = top.splitlines()
        header = next(line for line in lines if " job " in f" {line} " and "progress" in line)
        assert _cells(header)[:6] == ["slot", "pid", "job", "name", "wait", "time"], top
        (row,) = [line for line in lines if f" {ids[0]} " in f" {line} " and "c.hold" in line]
        assert _cells(row)[2:5] == [str(ids[0]), "c.hold", "3"], top
        # No row of the chunk is drawn as a slot of its own.
        assert [line for line in lines if "c.hold" in line] == [row], top

        with TestClient(create_app(str(app.db)), follow_redirects=False) as client:
            overview = client.get("/").text
            pools_page = client.get("/pools").text
            running_page = client.get("/jobs?status=running").text
        listed_rows = running_page.split('id="jobs"', 1)[1].split("</table>", 1)[0]
        assert sorted(int(part.split('"', 1)[0]) for part in
                      listed_rows.split('data-id="')[1:]) == ids[:4], listed_rows
        for page, table in ((overview, "running"), (pools_page, "slots")):
            shown = page.split(f'id="{table}"', 1)[1].split("</table>", 1)[0]
            assert "<th>chunk waiting</th>" in shown, shown
            assert shown.count('class="job"') == 1, shown
            assert f'data-id="{ids[0]}"' in shown and '<td class="waiting">3</td>' in shown, shown

        # The first row runs a while (HELD seconds at least since the chunk's claim) and
        # ends: the next row of the chunk runs in the slot, two behind it.
        claimed_at = store.get(ids[0])["started_at"]
        wait_for(lambda: time.time() >= claimed_at + HELD, timeout=30)
        (app.dir / "go.0").touch()
        wait_for(lambda: (app.dir / "running.1").exists(), timeout=60)
        wait_for(lambda: [(s.job_id, s.waiting) for s in _slots(store)] == [(ids[1], 2)],
                 timeout=30)
        # Once a heartbeat has seen it run, its time counts from its own start, not from
        # the chunk's claim that the row's started_at records (the wait behind the first
        # row is not its running time).
        wait_for(lambda: store.pools()[0]["slots"][0]["job_id"] == ids[1], timeout=30)
        (second,) = _slots(store)
        row_started = store.get(ids[1])["started_at"]
        assert row_started == claimed_at
        assert second.started >= row_started + HELD, (second, row_started)
        assert second.elapsed is not None and second.elapsed <= time.time() - row_started - HELD
        # The last row of the chunk runs with nothing behind it: no wait column.
        for n in (1, 2):
            (app.dir / f"go.{n}").touch()
        wait_for(lambda: [(s.job_id, s.waiting) for s in _slots(store)] == [(ids[3], 0)],
                 timeout=30)
        top = app.cli("top", "--once", "--db", str(app.db), check=True).stdout
        header = next(line for line in top.splitlines()
                      if " job " in f" {line} " and "progress" in line)
        assert "wait" not in _cells(header), top
        with TestClient(create_app(str(app.db)), follow_redirects=False) as client:
            assert "chunk waiting" not in client.get("/").text
    finally:
        for n in range(6):
            (app.dir / f"go.{n}").touch()
        wait_for(lambda: all(store.get(i)["status"] == "done" for i in ids), timeout=60)
        pool.terminate()
        pool.wait(timeout=60)
        store.close()


def test_a_heartbeat_listing_waiting_rows_that_are_not_job_ids_shows_none(tmp_path):
    """R44: a pools row is data. A slot whose ``waiting`` holds what is not a job id
    (text, markup, a float, a true) counts no waiting row, and the frame still draws."""
    import jobpool
    db = str(tmp_path / "jobpool.db")
    store = jobpool.connect(db)
    try:
        first, second = (store.enqueue_with("c.hold", args=(n,)).id for n in range(2))
        now = time.time()
        owner = "elsewhere:1:1"
        beat = [{"slot": 0, "pid": None, "job_id": first, "attempt": 1, "started": now,
                 "timeout": 120, "progress": None, "stage": None, "rss": None,
                 "waiting": ["<script>x</script>", "[b]\x1b[2J", 2.5, True, second]}]
        conn = sqlite3.connect(db, isolation_level=None)
        try:
            conn.execute("INSERT INTO pools (owner, host, pid, procs, queues, core, started_at, "
                         "heartbeat_at, slots) VALUES (?, 'elsewhere', 1, 1, 'default', 'pure', "
                         "?, ?, ?)", (owner, now, now, json.dumps(beat)))
            conn.execute("UPDATE jobs SET status = 'running', attempts = 1, lease_owner = ?, "
                         "started_at = ?, lease_expires_at = ? WHERE id IN (?, ?)",
                         (owner, now, now + 3600, first, second))
        finally:
            conn.close()
        snapshot = read_snapshot(store)
        assert [(s.job_id, s.waiting) for s in snapshot.slots] == [(first, 0), (second, 0)]
        from rich.console import Console
        console = Console(width=80, record=True, file=io.StringIO())
        console.print(render(snapshot, 80, 24))
        drawn = console.export_text()
        header = next(line for line in drawn.splitlines() if "progress" in line)
        assert "wait" not in _cells(header) and "script" not in drawn and "\x1b" not in drawn
        # A slot's time waited in its chunk is read the same way: anything but a number
        # from 0 to the row's time since its claim counts as no wait.
        for waited in ("<script>x</script>", -5, 1e12, True, [1], float("nan")):
            beat[0]["waited"] = waited
            conn = sqlite3.connect(db, isolation_level=None)
            try:
                conn.execute("UPDATE pools SET slots = ? WHERE owner = ?",
                             (json.dumps(beat), owner))
            finally:
                conn.close()
            first_view = read_snapshot(store).slots[0]
            assert first_view.started == now, (waited, first_view)
    finally:
        store.close()
