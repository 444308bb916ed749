"""The compiled SQLite driver: ``SqliteDriver`` over the C connection of
``jobpool/_core.pyx``, with the claim's codec (R44) answered in C, and the plain
turn (R68) stepped in C.

Only the road to SQLite is compiled; every statement, transaction and follow-up is
the pure driver's own code, so the two cannot drift. The plain turn runs the pure
driver's own texts (``SETTLE_DONE``, a success's follow-ups ``SUCCESS_ENDS`` and the
claim), bound from the leases and outcomes in C; the engine offers it only a turn whose
every outcome is a success of a lease it holds with no follow-ups but a chain's next
step and a batch's count (never a lane), and takes its own turn whenever it answers None
(tests/test_parity.py and tests/test_pump.py hold the two roads equal). Importing this module fails
(``ImportError``) where the extension is not built, or links a libsqlite3 other than
the one Python's ``sqlite3`` loaded (R42); ``claimer.driver_class`` then takes the
pure driver.
"""
from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from jobpool import _core
from jobpool.errors import StoreError
from jobpool.lifecycle import LEASE_SLACK, Lease, Outcome, Settled
from jobpool.queueplan import Share
from jobpool.store.row_codec import Decoded
from jobpool.store.sqlite import statements as sql
from jobpool.store.sqlite.driver import SqliteDriver


class CompiledSqliteDriver(SqliteDriver):
    """The SQLite driver with prepared statements bound and stepped in C."""

    name = "compiled"
    connection = _core.Connection
    decode_claims = staticmethod(_core.decode_claims)

    def plain_turn(self, now: float, done: Sequence[tuple[Lease, Outcome]],
                   shares: tuple[Share, ...], want: int
                   ) -> tuple[list[Settled], list[Decoded]] | None:
        """R68: settle ``done`` (successes of leases with no follow-ups but a chain's
        next step and a batch's count, R12, R34) and claim up to
        ``want`` rows shared among queues by ``shares`` (``queueplan.claim_in_shares``'s
        way) in one transaction stepped in C
        (``_core.Connection.plain_turn``): ``(settled, decoded)``, or None, with
        nothing applied, when a claimed row needs the engine's own turn (R10, R44). A
        failure rolls back and raises ``StoreError`` with nothing applied (R26)."""
        self.now = now
        db = self._db
        try:
            claim = self.claim_text
            return db.plain_turn(sql.SETTLE_DONE, sql.SUCCESS_ENDS, claim.pick, claim.take,
                                 self.owner, now, LEASE_SLACK, shares, want, done)
        except BaseException as exc:
            self._rollback()
            if isinstance(exc, sqlite3.Error):
                raise StoreError(f"turn failed: {exc}") from exc
            raise
