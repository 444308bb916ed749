"""R40 beside a job's own session (issue 23): the child leads its process group, so
``os.setsid()`` in a job fails; a process the job starts in a session of its own works,
and still ends with the attempt. The README and docs/RULES.md say so, with the error a
job really gets."""
from __future__ import annotations

import re

from tests.conftest import ROOT

from .conftest import alive, wait_for

APP = """
import os, subprocess
from pathlib import Path
from jobpool import job

HERE = Path(__file__).parent

@job(name="t.setsid", max_attempts=1)
def own_session():
    os.setsid()

@job(name="t.new_session", max_attempts=1)
def new_session():
    sleeper = subprocess.Popen(["sleep", "300"], start_new_session=True)
    (HERE / "sleeper.pid").write_text(str(sleeper.pid))
    assert os.getsid(sleeper.pid) == sleeper.pid  # a session of its own
"""


def _r40_paragraph() -> str:
    rules = (ROOT / "docs" / "RULES.md").read_text(encoding="utf-8")
    return rules[rules.index('<a id="r40"></a>'):rules.index('<a id="r41"></a>')]


def test_setsid_in_a_job_fails_and_a_new_session_for_what_it_starts_ends_with_it(make_app):
    app = make_app(APP)
    store = app.store()
    refused = store.enqueue("t.setsid").id
    started = store.enqueue("t.new_session").id
    app.start("--procs", "1")

    row = store.get(refused)
    assert row["status"] == "dead"
    reason = row["last_error"].splitlines()[0]
    assert reason.startswith("PermissionError: [Errno 1] Operation not permitted"), reason
    error = reason.split(";")[0]  # "PermissionError: [Errno 1] Operation not permitted"

    assert store.get(started)["status"] == "done"
    sleeper = int((app.dir / "sleeper.pid").read_text())
    wait_for(lambda: not alive(sleeper), timeout=10)
    assert [a["strays"] for a in store.attempts(started)] == [1]

    # What the documentation says is what happened.
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    for text in (" ".join(_r40_paragraph().split()), readme):
        assert "os.setsid()" in text and error in text and "start_new_session=True" in text
    assert re.search(r"killed when the attempt ends", " ".join(_r40_paragraph().split()))
