"""The compiled driver's WAL writes gathered into one a commit (``jobpool/_walbuf.h``,
issue 26): the same bytes in the same order, in the file before the commit returns.

What could go wrong, each asked here: a commit published in the WAL index before its
frames are in the file (another process would read pages that are not there), a
commit whose write failed but was answered as done (the full disk's error must be the
commit's), a writer killed with gathered bytes (a commit it was told was done must be
there, a half one must not), writes SQLite makes out of order (a page rewritten inside
its transaction, a transaction larger than the gathering's 64 KiB), and the guard that
counts a commit published with bytes still gathered (it must stay 0).
"""
from __future__ import annotations

import gc
import os
import random
import resource
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import jobpool
from jobpool.config import PoolConfig
from jobpool.supervisor import Supervisor

pytestmark = pytest.mark.c_extension

ROWS = 200
TOTAL = ROWS * 1000


def _wal_file(path, *tables: str) -> sqlite3.Connection:
    """A database of its own kind, in WAL mode with the stores' 1 KiB pages and these
    tables, and Python's connection to it (autocommit)."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA page_size=1024")
    conn.execute("PRAGMA journal_mode=WAL")
    for table in tables:
        conn.execute(f"CREATE TABLE {table}")
    return conn


def _ledger(path) -> None:
    """``ROWS`` accounts of 1 000 each, each row padded so a transfer dirties pages
    across the file."""
    conn = _wal_file(path, "accounts (id INTEGER PRIMARY KEY, balance INTEGER, pad BLOB)")
    conn.execute("BEGIN")
    conn.executemany("INSERT INTO accounts VALUES (?, 1000, ?)",
                     [(i, os.urandom(300)) for i in range(ROWS)])
    conn.commit()
    conn.close()


def _open(compiled_core, path):
    """The compiled connection as a supervisor's driver sets it: its commits not synced
    (``synchronous=NORMAL``, R26a), so nothing but the gathering's own rule writes them."""
    db = compiled_core.Connection(str(path), 30.0)
    db.changes("PRAGMA synchronous=NORMAL")
    return db


def _transfer(db, rng: random.Random, moves: int) -> None:
    """One transaction of ``moves`` transfers between random accounts (the sum stays)."""
    db.changes("BEGIN IMMEDIATE")
    for _ in range(moves):
        a, b = rng.sample(range(ROWS), 2)
        amount = rng.randint(1, 50)
        db.changes("UPDATE accounts SET balance = balance - :n, pad = :pad WHERE id = :id",
                   {"n": amount, "pad": os.urandom(300), "id": a})
        db.changes("UPDATE accounts SET balance = balance + :n WHERE id = :id",
                   {"n": amount, "id": b})
    db.changes("COMMIT")


def test_a_pools_turns_reach_the_wal_in_one_write_a_commit(compiled_core, tmp_path):
    # Through the public road: an in-process pool over the compiled driver drains plain
    # jobs; its commits each gathered several of SQLite's writes into one, and none
    # was published with bytes still gathered.
    path = tmp_path / "jobpool.db"
    store = jobpool.connect(path)
    store.enqueue_many("walbuf.noop", [(i,) for i in range(300)])
    store.close()
    late0, writes0, gathered0 = compiled_core.wal_writes()
    pool = Supervisor(PoolConfig(db=str(path), procs=2, burst=True, names=("walbuf.noop",),
                                 poll_interval=0.05))
    assert pool.run() == 0
    late, writes, gathered = compiled_core.wal_writes()
    assert late == late0
    assert writes - writes0 >= 150  # a turn carries a job or two: a write a turn
    # Each commit's frames (a header and a page each, several pages a turn) in one write.
    assert (gathered - gathered0) >= 4 * (writes - writes0)
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert conn.execute("SELECT status, count(*) FROM jobs GROUP BY 1").fetchall() == [
            ("done", 300)]


@jobpool.job(name="walbuf.noop")
def noop(i):
    return None


READER = textwrap.dedent("""
    import sqlite3, sys, time
    path, total, until = sys.argv[1], int(sys.argv[2]), time.monotonic() + float(sys.argv[3])
    conn = sqlite3.connect(path, timeout=30)
    reads = 0
    while time.monotonic() < until:
        (got,) = conn.execute("SELECT sum(balance) FROM accounts").fetchone()
        if got != total:
            sys.exit(f"read a sum of {got}, not {total}, after {reads} reads")
        reads += 1
    print(reads)
""")


def test_another_process_reads_every_commit_whole(compiled_core, tmp_path):
    # A reader in another process sums the accounts over and over while the compiled
    # connection commits transfers of every size: small ones (a few frames), ones past
    # the gathering's 64 KiB, and ones whose pages spill from a tiny cache and are
    # written again inside their transaction (a write back in the WAL, out of order).
    # Were a commit published before its frames were in the file, the reader would
    # read pages that are not there: a wrong sum or a malformed image.
    path = tmp_path / "ledger.db"
    _ledger(path)
    db = _open(compiled_core, path)
    late0 = compiled_core.wal_writes()[0]
    reader = subprocess.Popen([sys.executable, "-c", READER, str(path), str(TOTAL), "4"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    rng = random.Random(5)
    commits = 0
    try:
        deadline = time.monotonic() + 3.5
        while time.monotonic() < deadline:
            if commits % 50 == 25:
                db.changes("PRAGMA cache_size=8")      # spills, pages written twice
                _transfer(db, rng, 400)
                db.changes("PRAGMA cache_size=-2000")
            elif commits % 10 == 5:
                _transfer(db, rng, 300)                # past 64 KiB of frames
            else:
                _transfer(db, rng, 2)
            commits += 1
            if commits % 4 == 0:
                time.sleep(0.002)  # the reader's moment, right after a commit
    finally:
        out, err = reader.communicate(timeout=60)
        db.close()
    assert reader.returncode == 0, err
    assert int(out) > 10 and commits > 50
    assert compiled_core.wal_writes()[0] == late0
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert conn.execute("SELECT sum(balance) FROM accounts").fetchone() == (TOTAL,)


def test_a_writer_killed_mid_commit_leaves_every_commit_it_made_and_no_half_one(
        compiled_core, tmp_path):
    # A forked writer commits transfers and notes after each commit of its counter how
    # many it has made; it is killed (SIGKILL) mid-run. Every commit it noted is in the
    # store, the sum holds, and the image is whole.
    path = tmp_path / "ledger.db"
    noted = tmp_path / "noted"
    _ledger(path)
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE made (n INTEGER)")
        conn.execute("INSERT INTO made VALUES (0)")
    for seed in range(3):
        noted.write_bytes(bytes(8))
        pid = os.fork()
        if pid == 0:  # the writer
            try:
                fd = os.open(noted, os.O_WRONLY)
                db = _open(compiled_core, path)
                rng = random.Random(seed)
                while True:
                    db.changes("BEGIN IMMEDIATE")
                    db.changes("UPDATE made SET n = n + 1")
                    db.changes("COMMIT")
                    (made,) = db.rows("SELECT n FROM made")[0]
                    os.pwrite(fd, made.to_bytes(8, "little"), 0)
                    time.sleep(0.001)  # the kill's likeliest moment: right after a commit
                    _transfer(db, rng, rng.choice((2, 2, 2, 300)))
            finally:
                os._exit(1)
        time.sleep(0.3 + 0.2 * seed)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        last = int.from_bytes(noted.read_bytes(), "little")
        with sqlite3.connect(path) as conn:
            assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
            assert conn.execute("SELECT sum(balance) FROM accounts").fetchone() == (TOTAL,)
            (made,) = conn.execute("SELECT n FROM made").fetchone()
        assert last > 0 and made >= last  # a commit it noted done is there


@pytest.mark.parametrize("moves", [2, 300])
def test_a_commit_whose_write_fails_fails_and_applies_nothing(compiled_core, tmp_path, moves):
    # The WAL may not grow past 4 KiB (RLIMIT_FSIZE: the write fails with EFBIG, as on
    # a full disk): the gathered write that ends a small commit fails (2 transfers), or
    # the one a large commit makes at 64 KiB before its end (300), the commit says so,
    # and the store holds what it held before, whole.
    path = tmp_path / "ledger.db"
    _ledger(path)
    with sqlite3.connect(path) as conn:
        before = conn.execute("SELECT id, balance FROM accounts ORDER BY id").fetchall()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 3
        try:
            os.close(read_end)
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            db = _open(compiled_core, path)
            db.rows("SELECT count(*) FROM accounts")  # the WAL open, its size fixed
            wal = os.path.getsize(f"{path}-wal")
            resource.setrlimit(resource.RLIMIT_FSIZE, (wal + 4096, wal + 4096))
            try:
                _transfer(db, random.Random(1), moves)
                code = 4  # the commit said it was done
            except compiled_core.SqliteError as exc:
                os.write(write_end, str(exc).encode())
                code = 0
            if db.in_transaction:
                db.changes("ROLLBACK")
            db.close()
        finally:
            os._exit(code)
    os.close(write_end)
    _, status = os.waitpid(pid, 0)
    said = os.read(read_end, 4096).decode()
    os.close(read_end)
    assert os.waitstatus_to_exitcode(status) == 0, said
    assert said
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert conn.execute("SELECT id, balance FROM accounts ORDER BY id").fetchall() == before


def test_a_commit_of_any_size_ends_in_its_own_write(compiled_core, tmp_path):
    # Commits of 1 to 150 pages of 1 KiB: wherever the commit frame's page falls against
    # the gathering's 64 KiB (the page that makes room for itself must still end the
    # commit), no commit is left for the guard to write.
    path = tmp_path / "pages.db"
    _wal_file(path, "t (x BLOB)").close()
    db = _open(compiled_core, path)
    db.changes("PRAGMA wal_autocheckpoint=0")
    late0 = compiled_core.wal_writes()[0]
    for rows in range(1, 151):
        db.changes("BEGIN IMMEDIATE")
        db.changes("WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < :n)"
                   " INSERT INTO t SELECT randomblob(900) FROM c", {"n": rows})
        db.changes("COMMIT")
        assert compiled_core.wal_writes()[0] == late0, f"a commit of {rows} rows"
    db.close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert conn.execute("SELECT count(*) FROM t").fetchone() == (150 * 151 // 2,)


def test_a_rolled_back_transactions_early_frames_never_land_on_another_writers(
        compiled_core, tmp_path):
    # A full cache makes SQLite write a transaction's frames before its end; the
    # transaction is then rolled back. Another writer (Python's sqlite3, the unix VFS)
    # then commits frames at those very offsets of the WAL. The rolled-back frames must
    # have gone to the file while the first writer held the lock, never later over the
    # second writer's commits (the checkpoint first, so the rollback reads nothing
    # back from the WAL).
    path = tmp_path / "two.db"
    other = _wal_file(path, "t (x BLOB)", "u (y BLOB)")
    other.execute("PRAGMA wal_autocheckpoint=0")
    other.execute("INSERT INTO u VALUES (randomblob(10))")
    other.execute("PRAGMA wal_checkpoint(PASSIVE)")
    db = _open(compiled_core, path)
    db.changes("PRAGMA cache_size=20")
    late0 = compiled_core.wal_writes()[0]
    db.changes("BEGIN IMMEDIATE")
    db.changes("WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 100)"
               " INSERT INTO t SELECT randomblob(900) FROM c")
    db.changes("ROLLBACK")
    for _ in range(30):
        other.execute("INSERT INTO u VALUES (randomblob(500))")
    other.execute("WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 40)"
                  " INSERT INTO u SELECT randomblob(900) FROM c")
    assert db.rows("SELECT count(*) FROM t") == [(0,)]
    assert db.rows("SELECT count(*) FROM u") == [(71,)]
    db.close()
    other.close()
    assert compiled_core.wal_writes()[0] == late0
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert conn.execute("SELECT count(*) FROM u").fetchone() == (71,)


def test_a_producers_enqueues_go_through_the_vfs_and_read_back_anywhere(compiled_core, tmp_path):
    # A store opened by ``jobpool.connect`` in a process whose core is built enqueues
    # through the VFS: each enqueue's commit one write standing for several. What it
    # wrote reads back the same through SQLite's own VFS (another connection) and
    # drains in a pool.
    path = tmp_path / "jobpool.db"
    store = jobpool.connect(path)
    _late0, writes0, gathered0 = compiled_core.wal_writes()
    for i in range(200):
        store.enqueue("walbuf.noop", i)
    late, writes, gathered = compiled_core.wal_writes()
    store.close()
    assert late == _late0
    assert writes - writes0 >= 200
    assert gathered - gathered0 >= 4 * (writes - writes0)
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT count(*), count(DISTINCT payload) FROM jobs"
                            " WHERE status = 'ready'").fetchone() == (200, 200)
    pool = Supervisor(PoolConfig(db=str(path), procs=2, burst=True, names=("walbuf.noop",),
                                 poll_interval=0.05))
    assert pool.run() == 0
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert conn.execute("SELECT status, count(*) FROM jobs GROUP BY 1").fetchall() == [
            ("done", 200)]


def test_the_pure_road_opens_stores_through_sqlites_own_vfs(tmp_path):
    # JOBPOOL_PURE=1 means no compiled part at all: a store's connections go through
    # SQLite's own VFS (the core, built or not, is never asked).
    script = textwrap.dedent("""
        import sys, jobpool
        from jobpool import core
        assert core.NAME == "pure" and core.WAL_VFS is None, (core.NAME, core.WAL_VFS)
        store = jobpool.connect(sys.argv[1])
        store.enqueue("walbuf.any", 1)
        assert "jobpool._core" not in sys.modules
        print(store.stats()["ready"])
    """)
    found = subprocess.run([sys.executable, "-c", script, str(tmp_path / "pure.db")],
                           env={**os.environ, "JOBPOOL_PURE": "1"}, capture_output=True,
                           text=True, timeout=60)
    assert found.returncode == 0, found.stderr
    assert found.stdout.strip() == "1"


def test_a_forked_child_never_writes_its_parents_gathered_frames(compiled_core, tmp_path):
    # A transaction larger than the cache writes frames early; the process forks with
    # them gathered. The parent rolls back, empties the WAL and commits new rows through
    # other connections; then the child lets the store it inherited go (finalised: its
    # connection closes, rolling back the parent's transaction in its copy). Written from
    # the child, the gathered frames would land on the parent's new commits.
    path = tmp_path / "forked.db"
    store = jobpool.connect(path)
    conn = store.conn
    conn.execute("CREATE TABLE big (x BLOB)")
    conn.execute("PRAGMA cache_size=20")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.execute("BEGIN IMMEDIATE")
    for _ in range(200):
        conn.execute("INSERT INTO big VALUES (randomblob(1000))")
    go_r, go_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: waits, then lets the inherited store go
        code = 1
        try:
            os.read(go_r, 1)
            del conn, store
            gc.collect()
            code = 0
        finally:
            os._exit(code)
    conn.execute("ROLLBACK")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    for _ in range(120):
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("INSERT INTO big VALUES (randomblob(3000))")
        other.close()
    os.write(go_w, b"x")
    _, status = os.waitpid(pid, 0)
    os.close(go_r)
    os.close(go_w)
    assert os.waitstatus_to_exitcode(status) == 0
    store.close()
    check = subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
        import sqlite3
        conn = sqlite3.connect({str(path)!r})
        print(conn.execute("PRAGMA integrity_check").fetchall(),
              conn.execute("SELECT count(*) FROM big").fetchone())
    """)], capture_output=True, text=True, timeout=60)
    assert check.stdout.strip() == "[('ok',)] (120,)", check.stdout + check.stderr


def test_a_path_that_starts_with_two_slashes_is_the_same_file(compiled_core, tmp_path):
    # "//tmp/x.db" names "/tmp/x.db" to the system, and so to SQLite's own opening; in
    # the VFS's URI form it must not become a host ("file://tmp/x.db").
    plain = tmp_path / "slashes.db"
    store = jobpool.connect("/" + str(plain))
    store.enqueue("walbuf.noop", 1)
    store.close()
    with sqlite3.connect(plain) as conn:
        assert conn.execute("SELECT name FROM jobs").fetchall() == [("walbuf.noop",)]


def test_a_name_sqlite_reads_as_a_uri_opens_one_file_on_every_road(
        compiled_core, tmp_path, monkeypatch):
    # SQLite reads a name starting "file:" as a URI (this build opens URIs by default),
    # and so do the store's other openers (its checkpointer, a claimer's driver): a
    # store given such a path (``connect`` takes a ``Path`` as a path) must write the
    # file they read.
    monkeypatch.chdir(tmp_path)
    name = Path("file:uri.db")
    store = jobpool.connect(name)
    store.enqueue_many("walbuf.noop", [(i,) for i in range(5)])
    store.close()
    other = sqlite3.connect(str(name))  # SQLite's own reading of the name
    try:
        assert other.execute("SELECT count(*) FROM jobs").fetchone() == (5,)
    finally:
        other.close()
    db = compiled_core.Connection(str(name), 5.0)
    try:
        assert db.rows("SELECT count(*) FROM jobs") == [(5,)]
    finally:
        db.close()
