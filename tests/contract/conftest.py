"""One contract, every store: each test here runs against SQLite and PostgreSQL
(the ``store_url`` and ``any_store`` fixtures of tests/conftest.py).

PostgreSQL comes from ``$JOBPOOL_TEST_PG`` (default the local server CI runs);
each test gets a schema of its own, dropped after it. Without a server the
PostgreSQL half is skipped, unless ``JOBPOOL_REQUIRE_PG=1`` (CI sets it), which
makes a missing server a failure.
"""
from __future__ import annotations

