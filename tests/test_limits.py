"""R35 and R36 through real pools and the CLI, on every store: two pools on one store
never run more of a group at once than its limit (and the same jobs without the
limit do), a queue's limit holds across pools, rates hold, and the limits are
what pools declared, listed and set from the CLI."""
from __future__ import annotations

import json

APP = """
import os, time
from pathlib import Path
from jobpool import job, Retry

HERE = Path(__file__).parent


def _run(kind, customer, n):
    # Each running job is a file in its group's folder: the folder's size when a job
    # has started is how many of that group run at once, whoever runs them. A job
    # waits (up to 1.5 s) for a third of its group to join it, so that without a
    # limit the overlap happens whatever the machine's load.
    folder = HERE / kind / customer
    folder.mkdir(parents=True, exist_ok=True)
    mine = folder / f"{n}-{os.getpid()}"
    mine.write_text("")
    seen = 0
    end = time.monotonic() + 1.5
    while time.monotonic() < end:
        seen = max(seen, len(list(folder.iterdir())))
        if seen >= 3:
            break
        time.sleep(0.02)
    with open(HERE / f"{kind}.seen", "a") as fh:
        fh.write(f"{customer} {seen}\\n")
    mine.unlink()


@job(name="l.limited", max_running=2, group_by="customer", backoff_base=0)
def limited(customer, n):
    if n == 0 and not (HERE / f"retried-{customer}").exists():
        (HERE / f"retried-{customer}").write_text("")
        raise Retry("a retried job comes back under the limit")
    _run("limited", customer, n)


@job(name="l.unlimited")
def unlimited(customer, n):
    _run("unlimited", customer, n)


@job(name="l.queued", queue="warehouse")
def queued(customer, n):
    _run("queued", "all", n)


@job(name="l.rated", rate="5/s", burst=1)
def rated(n):
    with open(HERE / "rated.times", "a") as fh:
        fh.write(f"{time.time()}\\n")
"""


def _seen(app, kind):
    path = app.dir / f"{kind}.seen"
    found: dict[str, int] = {}
    for line in path.read_text().splitlines():
        customer, seen = line.split()
        found[customer] = max(found.get(customer, 0), int(seen))
    return found


def _enqueue(app, name, calls):
    """As a user would: ``jobpool enqueue --app --from``, so each row's group comes
    from the job's own ``group_by``."""
    source = app.dir / f"{name}.jsonl"
    source.write_text("".join(json.dumps({"kwargs": {"customer": customer, "n": n}}) + "\n"
                              for customer, n in calls))
    app.cli("enqueue", name, "--app", app.module, "--from", str(source), "--db", str(app.db),
            check=True)


def _run_pools(app, *args):
    pools = [app.spawn("--burst", "--procs", "4", "--no-dashboard", *args) for _ in range(2)]
    for pool in pools:
        assert pool.wait(timeout=180) == 0, pool.stderr.read() if pool.stderr else ""


def test_two_pools_never_run_more_of_a_group_than_its_limit(make_any_app):
    app = make_any_app(APP)
    store = app.store()
    for name in ("l.limited", "l.unlimited"):
        _enqueue(app, name, [("acme", n) for n in range(8)] + [("globex", n) for n in range(8)])
    _run_pools(app)
    # The control: the same jobs, the same pools, no limit: more than 2 at once.
    assert max(_seen(app, "unlimited").values()) >= 3
    limited = _seen(app, "limited")
    assert set(limited) == {"acme", "globex"}
    assert max(limited.values()) <= 2
    assert {j["status"] for j in store.list_jobs(name="l.limited")} == {"done"}


def test_a_queue_limit_holds_across_pools(make_any_app):
    app = make_any_app(APP)
    # Six: more than the limit, fewer than the two pools' eight slots.
    _enqueue(app, "l.queued", [("all", n) for n in range(6)])
    app.cli("limits", "set", "--queue", "warehouse", "--running", "2", "--db", str(app.db),
            check=True)
    _run_pools(app, "--queues", "warehouse")
    assert _seen(app, "queued")["all"] <= 2


def test_a_rate_holds_across_pools(make_any_app):
    app = make_any_app(APP)
    store = app.store()
    store.enqueue_many("l.rated", [(n,) for n in range(12)])
    _run_pools(app)
    times = sorted(float(t) for t in (app.dir / "rated.times").read_text().split())
    assert len(times) == 12
    # R36: any window of length w sees at most 5 w + 1 starts (a little slack for the
    # time between a claim and the job's own clock reading).
    for i in range(len(times)):
        for j in range(i + 1, len(times)):
            assert j - i + 1 <= 5 * (times[j] - times[i] + 0.3) + 1, (i, j)


def test_limits_are_declared_listed_and_set_from_the_cli(make_any_app):
    app = make_any_app(APP)
    app.start("--procs", "1", "--no-dashboard")  # a pool declares its jobs' limits
    listed = json.loads(app.cli("limits", "list", "--json", "--db", str(app.db),
                                check=True).stdout)
    by_name = {row["target"]: row for row in listed["limits"]}
    assert by_name["l.limited"]["max_running"] == 2
    assert by_name["l.limited"]["group_by"] == "customer"
    assert (by_name["l.rated"]["rate"], by_name["l.rated"]["burst"]) == ("5/s", 1)
    assert "l.unlimited" not in by_name
    app.cli("limits", "set", "--queue", "warehouse", "--running", "4", "--db", str(app.db),
            check=True)
    text = app.cli("limits", "list", "--db", str(app.db), check=True).stdout
    assert "warehouse" in text and "l.limited" in text
    cleared = app.cli("limits", "clear", "--queue", "warehouse", "--db", str(app.db), check=True)
    assert "no limit" in cleared.stdout
    bad = app.cli("limits", "set", "--queue", "warehouse", "--running", "0", "--db", str(app.db))
    assert bad.returncode != 0 and "Traceback" not in bad.stderr
    missing = app.cli("enqueue", "l.limited", "--app", app.module, "--kwargs", '{"n": 1}',
                      "--db", str(app.db))
    assert missing.returncode == 1
    assert missing.stderr.strip().splitlines() == [
        "jobpool: error: l.limited is limited per 'customer': pass customer= as a keyword "
        "argument (or group=) when you enqueue it"]


def test_a_salvaged_store_keeps_its_limits_and_lanes(tmp_path):
    import time

    import jobpool
    from jobpool.limits import NameLimit
    from jobpool.store.sqlite.doctor import salvage
    old = jobpool.connect(tmp_path / "old.db")
    old.limits.declare({"l.limited": NameLimit("l.limited", 1, None, 1, "customer")}, "test")
    for customer in ("a", "a", "b"):
        old.enqueue_with("l.limited", kwargs={"customer": customer}, group=customer)
    old.limits.set_queue("default", 5)
    old.close()
    salvage(str(tmp_path / "old.db"), str(tmp_path / "new.db"))
    new = jobpool.connect(tmp_path / "new.db")
    plan = new.limits.plan()
    assert (plan.names["l.limited"].max_running, plan.queues) == (1, {"default": 5})
    claimer = new.claimer("pool", ["l.limited"], ["default"], {})
    claimer.set_limits(plan.for_pool(["l.limited"], ["default"]))
    claimed = claimer.turn([], 8, time.time(), None)[1]
    assert sorted(json.loads(new.get(j.job_id)["payload"])[1]["customer"] for j in claimed) == [
        "a", "b"]
    claimer.close()
    new.close()


def test_a_salvage_keeps_rate_buckets_and_the_charts_minutes(tmp_path):
    # R36: a bucket's spent tokens stay spent (a salvage refilled every bucket); R47:
    # the minutes the charts draw stay (they were lost).
    import sqlite3

    import jobpool
    from jobpool.store.sqlite.doctor import salvage
    jobpool.connect(tmp_path / "old.db").close()
    conn = sqlite3.connect(tmp_path / "old.db", isolation_level=None)
    conn.execute("INSERT INTO jobpool_groups (name, grp, tokens, refilled_at) "
                 "VALUES ('l.rated', 'a', 0.25, 1800000000.0)")
    conn.execute("INSERT INTO jobpool_rollups (minute, name, done) VALUES (30000000, 'l.rated', 7)")
    conn.close()
    salvage(str(tmp_path / "old.db"), str(tmp_path / "new.db"))
    copied = sqlite3.connect(tmp_path / "new.db")
    try:
        assert copied.execute("SELECT name, grp, tokens, refilled_at FROM jobpool_groups"
                              ).fetchall() == [("l.rated", "a", 0.25, 1800000000.0)]
        assert copied.execute("SELECT minute, name, done FROM jobpool_rollups").fetchall() == [
            (30000000, "l.rated", 7)]
    finally:
        copied.close()
