"""The demo (``scripts/demo``) end to end, small: its summary is the work of the
import batch's ``on_complete`` callback (R34), run once after every file ended."""
from __future__ import annotations

import json

from jobpool.examples import demo


def test_the_demo_imports_a_batch_and_its_callback_writes_the_summary(tmp_path, capsys):
    assert demo.main(["--dir", str(tmp_path), "--files", "6", "--rows", "50", "--bad", "1",
                      "--procs", "2"]) == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert (summary["files"], summary["imported"], summary["failed"], summary["rows"]) == (
        6, 5, 1, 250)
    assert len(summary["failed_jobs"]) == 1
    printed = capsys.readouterr().out
    assert "files ok/failed 5 / 1" in printed and "rows imported   250 (expected 250)" in printed
