"""The job's life, decided in one place (jobpool.lifecycle): each transition in
isolation, with no store, no clock and no randomness but what the test passes in.

The cores' tests (tests/test_core.py) check that both cores apply these decisions
to SQLite rows; these pin the decisions themselves.
"""
from __future__ import annotations

import pytest

from jobpool import lifecycle as L

NOW = 1_000.0
POLICY = L.Policy(backoff_base=2.0, backoff_max=60.0, max_crashes=2, max_attempts=3, timeout=10.0)


class FixedRandom:
    def __init__(self, value: float) -> None:
        self.value = value
        self.draws = 0

    def random(self) -> float:
        self.draws += 1
        return self.value


def lease(attempt=1, max_attempts=3, crashes=0, deadline=None):
    return L.Lease(7, "t.job", attempt, max_attempts, crashes, deadline, NOW - 1, 0)


def decide(kind, error=None, delay=None, *, rng=None, causes=(), **lease_fields):
    outcome = L.Outcome(7, lease_fields.get("attempt", 1), kind, error, delay)
    return L.decide(lease(**lease_fields), outcome, POLICY, NOW, rng, lambda job_id: list(causes))


def test_success_is_done_and_enqueues_the_chain_no_hook():
    d = decide(L.DONE)
    assert (d.statement, d.status, d.reason, d.successor, d.hook) == ("done", "done", None, True, False)


def test_an_error_is_a_retry_after_the_backoff_with_jitter_that_only_subtracts():
    rng = FixedRandom(1.0)
    d = decide(L.ERROR, "boom", attempt=2, rng=rng)
    assert (d.statement, d.status, d.reason) == ("retry", "ready", "boom")
    assert d.delay == pytest.approx(4.0 * 0.75)  # base 2 * 2**(2-1), less 25 %
    assert rng.draws == 1


def test_retry_after_overrides_the_backoff_and_draws_no_jitter():
    rng = FixedRandom(0.5)
    d = decide(L.RETRY, "Retry: later", 42.0, rng=rng)
    assert (d.statement, d.delay) == ("retry", 42.0)
    assert rng.draws == 0


def test_the_last_attempt_is_dead_naming_the_budget():
    d = decide(L.TIMEOUT, "timed out after 10 s", attempt=3)
    assert (d.status, d.reason) == ("dead", "timed out after 10 s; no attempts left after 3")
    assert d.hook


def test_a_retry_past_the_deadline_is_dead_and_says_so():
    d = decide(L.ERROR, "boom", deadline=NOW + 1.0)  # backoff 2 s lands past it
    assert (d.status, d.reason) == ("dead", "boom; retry would fall past its deadline")


def test_the_crash_that_reaches_max_crashes_quarantines_with_every_cause():
    d = decide(L.CRASH, "child killed by SIGKILL", crashes=1,
               causes=["child killed by SIGSEGV"])
    assert (d.status, d.crashes) == ("dead", 2)
    assert d.reason == ("quarantined: killed its child 2 times (child killed by SIGSEGV; "
                        "child killed by SIGKILL)")


def test_a_crash_below_max_crashes_is_a_retry_counting_the_crash():
    d = decide(L.CRASH, "child killed by SIGSEGV")
    assert (d.statement, d.crashes) == ("retry", 1)


@pytest.mark.parametrize("kind", [L.FATAL, L.CANCEL])
def test_fatal_and_cancel_are_dead_at_once(kind):
    d = decide(kind, "why", attempt=1)
    assert (d.statement, d.status, d.reason) == ("dead", "dead", "why")


def test_defer_keeps_the_attempt_unless_it_would_pass_the_deadline():
    assert decide(L.DEFER, None, 5.0)[:4] == ("defer", "ready", None, 5.0)
    d = decide(L.DEFER, None, 5.0, deadline=NOW + 1)
    assert (d.status, d.reason) == ("dead", "deferred; deferred past its deadline")


def test_reschedule_and_release_go_back_in_line():
    assert decide(L.RESCHEDULE, None, 60.0)[:2] == ("reschedule", "ready")
    assert decide(L.RELEASE, None, attempt=3)[:2] == ("release", "ready")  # R25: never dead


@pytest.mark.parametrize("kind", [L.EXPIRED, L.OWNER_DIED])
def test_a_lease_nobody_settles_is_requeued_at_once_or_dead_without_attempts(kind):
    d = decide(kind, "lease expired (owner a:1:2)", attempt=1)
    assert (d.statement, d.status, d.delay) == ("requeue", "ready", 0.0)
    d = decide(kind, "lease expired (owner a:1:2)", attempt=3)
    assert (d.status, d.reason) == ("dead", "lease expired (owner a:1:2); no attempts left after 3")


def test_backoff_is_capped_and_never_overflows():
    assert L.backoff(1, 1.0, 3600.0, 0.0) == 1.0
    assert L.backoff(10**9, 1.0, 3600.0, 0.0) == 3600.0
    assert L.backoff(5, 0.0, 3600.0, 0.9) == 0.0


def test_the_default_policy_is_the_one_jobs_get():
    from jobpool import jobs
    fn = jobs.job(name="t.lifecycle_default")(lambda: None)
    try:
        assert fn.policy == L.DEFAULT_POLICY
    finally:
        jobs.unregister("t.lifecycle_default")


def test_a_lease_without_a_budget_of_its_own_uses_the_policys():
    d = decide(L.EXPIRED, "lease expired (owner a:1:2)", attempt=3, max_attempts=None)
    assert (d.status, d.reason) == ("dead", "lease expired (owner a:1:2); no attempts left after 3")
    assert decide(L.ERROR, "boom", attempt=2, max_attempts=None).status == "ready"
