"""jobpool's pytest plugin: a fresh store for each test, made the default one.

Installed as the ``jobpool`` plugin (the ``pytest11`` entry point), so every test
suite in an environment with jobpool gets the ``jobpool_store`` fixture;
``-p no:jobpool`` turns it off. It imports no store at load: pytest loads every
installed plugin on every run, including runs of projects that never enqueue a job.
"""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture
def jobpool_store(tmp_path: Path) -> Iterator[Any]:
    """A fresh SQLite store in ``tmp_path``, the default store for the test.

    ``job.enqueue()`` and ``jobpool.testing.drain()`` without a store use it, and so
    do ``jobpool`` commands the test runs (through ``$JOBPOOL_DB``, which is how the
    default store is found). The previous default comes back after the test.
    """
    from jobpool.store.factory import close_default_store, default_store

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("JOBPOOL_DB", str(tmp_path / "jobpool.db"))
        store = default_store()
        try:
            yield store
        finally:
            close_default_store()
