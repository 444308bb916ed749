"""Pick the claim/settle core: compiled ``_core`` when built, else the pure twin.

``JOBPOOL_PURE=1`` forces the twin (for debugging, and so the test suite can run
every core test against both). Both modules stay importable for the tests.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING

from jobpool import _core_py
from jobpool.lifecycle import (CANCEL, CRASH, DEFER, DONE, ERROR, FATAL, INTERRUPTED, KIND_NAMES,
                               LEASE_SLACK, RELEASE, RESCHEDULE, RETRY, TIMEOUT)

if TYPE_CHECKING:
    from jobpool._core_py import Core, SlotTable, backoff
    NAME = "pure"
else:
    _impl = _core_py
    NAME = "pure"
    if os.environ.get("JOBPOOL_PURE", "") not in ("1", "true", "yes"):
        try:
            from jobpool import _core as _impl  # type: ignore[no-redef]
            NAME = "compiled"
        except ImportError:
            pass
    Core = _impl.Core
    SlotTable = _impl.SlotTable
    backoff = _impl.backoff

__all__ = ["NAME", "Core", "SlotTable", "backoff", "LEASE_SLACK", "KIND_NAMES", "DONE", "ERROR",
           "FATAL", "CRASH", "TIMEOUT", "RETRY", "DEFER", "RESCHEDULE", "RELEASE", "CANCEL",
           "INTERRUPTED"]
