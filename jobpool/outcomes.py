"""What both cores share: outcome kinds, the default policy, lease slack, reasons.

One definition, imported by the compiled core, its pure twin and the child, so
the two cores cannot drift apart on a number or a word.
"""
from __future__ import annotations

#: R8: a lease lasts the job's hard timeout plus this slack, in seconds.
LEASE_SLACK = 30.0

# Outcome kinds, carried in the child's reply and settled by either core.
DONE = 0        # returned normally (R12)
ERROR = 1       # raised an ordinary exception: retry with backoff (R13)
FATAL = 2       # Fatal or a listed fatal type: dead at once (R15)
CRASH = 3       # the child died without an outcome (R19), counts toward quarantine
TIMEOUT = 4     # killed at its hard timeout: retry (R20)
RETRY = 5       # Retry(after=...): retry, ``delay`` overrides the backoff (R14)
DEFER = 6       # Defer(delay): back in line without spending an attempt (R17)
RESCHEDULE = 7  # Reschedule(delay): fresh budget (R18)
RELEASE = 8     # graceful stop: lease given back, attempt stays spent (R25)
CANCEL = 9      # cancelled while running: dead (R31)

KIND_NAMES = ("done", "error", "fatal", "crash", "timeout", "retry", "deferred",
              "rescheduled", "released", "cancelled")

#: A job name's policy: backoff base and cap (R13), max crashes (R19a), and the
#: max_attempts and timeout that apply when its row left them NULL.
#: This one applies to names without a policy.
DEFAULT_POLICY = (1.0, 3600.0, 3, 5, 300.0)


def with_reason(error: str | None, reason: str) -> str:
    """Append ``reason`` to the first line of ``error``, keeping any traceback below it."""
    head, sep, tail = (error or "").partition("\n")
    return f"{head}; {reason}{sep}{tail}" if head else reason + sep + tail
