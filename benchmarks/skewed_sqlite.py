"""A few rows among many on SQLite (issue 27, R47): the skewed store of
tests/test_web_plans.py's PostgreSQL test, as one SQLite file (ROWS done rows with 5
dead among them, a tenth as many ready rows with 5 scheduled and 5 running at the
oldest, two 5-row batches at the oldest ids), with statistics; then the time of a
page's reads of each (``list_jobs`` newest first, 50, and ``count_jobs`` to 10 001),
median of 3, in ms.

    .venv/bin/python benchmarks/skewed_sqlite.py 1000000
"""
import os
import sqlite3
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import jobpool  # noqa: E402

rows = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
EPOCH = 1_700_000_000.0
with tempfile.TemporaryDirectory() as d:
    path = f"{d}/s.db"
    jobpool.connect(path).close()
    conn = sqlite3.connect(path)
    live = rows // 10
    with conn:
        conn.execute("""
INSERT INTO jobs (queue, name, payload, serializer, priority, status, run_at, line_at, attempts,
                  max_attempts, timeout, lease_owner, lease_expires_at, last_error, created_at,
                  started_at, finished_at, batch_id)
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < :rows + :live)
SELECT 'q' || (i % 4), 'skew.n' || (i % 10), '[[],{}]', 'json', 0,
       CASE WHEN i > :rows AND i - :rows BETWEEN 7 AND 11 THEN 'running'
            WHEN i > :rows THEN 'ready' WHEN i % (:rows / 5) = 1 THEN 'dead' ELSE 'done' END,
       CASE WHEN i > :rows AND (i - :rows) % (:live / 5) = 1 THEN 1e12 ELSE :epoch + i END,
       :epoch + i, 1, 3, 60,
       CASE WHEN i > :rows AND i - :rows BETWEEN 7 AND 11 THEN 'p' END,
       CASE WHEN i > :rows AND i - :rows BETWEEN 7 AND 11 THEN 1e12 END, NULL,
       :epoch + i, :epoch + i, CASE WHEN i <= :rows THEN :epoch + i + 1 END,
       CASE WHEN i BETWEEN 2 AND 6 THEN 1 WHEN i BETWEEN :rows + 2 AND :rows + 6 THEN 2 END
  FROM n""", {"rows": rows, "live": live, "epoch": EPOCH})
    conn.execute("ANALYZE")
    conn.close()
    store = jobpool.connect(path)
    for kw in ({"status": "dead"}, {"status": "scheduled"}, {"status": "running"},
               {"status": "done"}, {"status": "ready"}, {"batch": 1}, {"batch": 2}):
        took = []
        for _ in range(3):
            t = time.perf_counter()
            got = store.list_jobs(limit=50, newest_first=True, **kw)
            n = store.count_jobs(at_most=10_001, **kw)
            took.append((time.perf_counter() - t) * 1000)
        print(f"{str(kw):28} {len(got):4} listed {n:6} counted  {sorted(took)[1]:8.1f} ms")
    store.close()
