"""R37 in a store: a running attempt's saved state, written and read fenced by its
lease, and forgotten on an operator's word. One implementation for both stores:
their statements have the same names and parameters (PostgreSQL's take the
server's clock instead of ``now``), and each store gives ``transaction(what, fn)``
and ``read_rows(what, query, params)``."""
from __future__ import annotations

import time
from types import ModuleType
from typing import Any

from jobpool import bounds


def save_state(store: Any, statements: ModuleType, owner: str, job_id: int, attempt: int,
               state: str) -> bool:
    """Store a running attempt's state (JSON text), fenced like a settle; False when
    the attempt no longer holds its lease."""
    params = {"id": bounds.row_id(job_id), "owner": owner, "attempt": attempt, "state": state,
              "now": time.time()}
    return bool(store.transaction(f"saving the state of job {job_id}", lambda conn: conn.execute(
        statements.SAVE_STATE, params).rowcount))


def read_state(store: Any, statements: ModuleType, owner: str, job_id: int,
               attempt: int) -> str | None:
    """The state a running attempt resumes from (None: none saved, or not its lease)."""
    found = store.read_rows(f"reading the state of job {job_id}", statements.READ_STATE,
                            {"id": bounds.row_id(job_id), "owner": owner, "attempt": attempt})
    return found[0][0] if found else None


def reset_state(store: Any, statements: ModuleType, job_id: int) -> bool:
    """Forget a job's saved state: its next attempt starts afresh. False if it had none."""
    return bool(store.transaction(f"resetting the state of job {job_id}", lambda conn: conn.execute(
        statements.RESET_STATE, {"id": bounds.row_id(job_id)}).fetchall()))
