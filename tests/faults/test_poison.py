"""Scenario 4 (R19, R19a): poison jobs are classified, never counted as success, and the
ones that kill their child are quarantined after max_crashes (here 2 of 3 attempts)."""
from __future__ import annotations

from .conftest import record_figure

# name -> (outcome of every attempt, attempts spent, first line of last_error)
EXPECTED = {
    "f.abort": ("crash", 2, "quarantined: killed its child 2 times (child killed by SIGABRT; "
                            "child killed by SIGABRT)"),
    "f.segfault": ("crash", 2, "quarantined: killed its child 2 times (child killed by SIGSEGV; "
                               "child killed by SIGSEGV)"),
    "f.exit0": ("crash", 2, "quarantined: killed its child 2 times (child exited with status 0; "
                            "child exited with status 0)"),
    "f.sys_exit": ("error", 3, "SystemExit: 0; no attempts left after 3"),
    "f.keyboard_interrupt": ("error", 3, "KeyboardInterrupt; no attempts left after 3"),
    "f.recursion": ("error", 3, "RecursionError: maximum recursion depth exceeded; "
                                "no attempts left after 3"),
}


def test_poison_jobs_are_classified_and_crashers_quarantined(fault_app):
    app = fault_app
    store = app.store()
    ids = {name: store.enqueue(name).id for name in EXPECTED}
    healthy = [store.enqueue("f.work", i).id for i in range(10)]
    result = app.start("--procs", "2", timeout=60)

    table = {}
    for name, (outcome, attempts, reason) in EXPECTED.items():
        job = store.get(ids[name])
        log = store.attempts(ids[name])
        assert job["status"] == "dead", (name, job)
        assert job["attempts"] == attempts, (name, job)
        assert job["last_error"].splitlines()[0] == reason, (name, job["last_error"])
        assert [a["outcome"] for a in log] == [outcome] * attempts, (name, log)
        assert job["crashes"] == (attempts if outcome == "crash" else 0)
        table[name] = f"{outcome} x{attempts} -> dead"
    assert [store.get(i)["status"] for i in healthy] == ["done"] * 10
    assert app.count("status = 'done'") == 10  # no poison job counted as a success
    assert result.stderr.count("child_died") == 6
    record_figure("4. Poison jobs (max_crashes=2, max_attempts=3)",
                  jobs=len(EXPECTED), counted_as_success=0, healthy_jobs_done=len(healthy),
                  quarantined=sum(1 for o, _a, _r in EXPECTED.values() if o == "crash"),
                  **{name.removeprefix("f."): text for name, text in table.items()})
