"""A few rows among many on SQLite (issue 27, R47): the skewed store of
tests/test_web_plans.py (ROWS done rows with 5 dead among them, a tenth as many ready
rows with 5 scheduled and 5 running at the oldest, two 5-row batches at the oldest ids),
as one SQLite file, with statistics; then the time of a page's reads of each
(``list_jobs`` newest first, 50, and ``count_jobs`` to 10 001), median of 3, in ms.

    .venv/bin/python benchmarks/skewed_sqlite.py 1000000
"""
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import jobpool  # noqa: E402
from tests.test_web_plans import fill_skewed_sqlite  # noqa: E402

rows = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
with tempfile.TemporaryDirectory() as d:
    path = f"{d}/s.db"
    fill_skewed_sqlite(path, rows)
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
