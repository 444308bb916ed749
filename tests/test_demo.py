"""The demo (``scripts/demo``) end to end, small: its summary is the work of the
import batch's ``on_complete`` callback (R34), run once after every file ended."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

from jobpool.examples import demo

ROOT = Path(__file__).resolve().parent.parent


def test_the_demo_imports_a_batch_and_its_callback_writes_the_summary(tmp_path, capsys):
    assert demo.main(["--dir", str(tmp_path), "--files", "6", "--rows", "50", "--bad", "1",
                      "--procs", "2"]) == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert (summary["files"], summary["imported"], summary["failed"], summary["rows"]) == (
        6, 5, 1, 250)
    assert len(summary["failed_jobs"]) == 1
    printed = capsys.readouterr().out
    assert "files ok/failed 5 / 1" in printed and "rows imported   250 (expected 250)" in printed


def test_the_demo_counts_the_files_not_the_callback(tmp_path, capsys):
    """The batch's callback is a job of its own, not a member: 6 files end 5 done and 1
    dead, and the summary callback is reported beside them (issue 23: "200/200 settled
    done 201")."""
    assert demo.main(["--dir", str(tmp_path), "--files", "6", "--rows", "50", "--bad", "1",
                      "--procs", "2"]) == 0
    watched = [line for line in capsys.readouterr().out.splitlines() if line.startswith("[")]
    assert re.fullmatch(r"\[ *[\d.]+ s\] files 6/6 ended \(5 done, 1 dead\), 0 running, 0 waiting; "
                        r"summary callback: job \d+ done", watched[-1]), watched[-1]


def test_the_demo_says_what_it_leaves_on_disk_and_cleans_it(tmp_path, capsys):
    directory = tmp_path / "demo"
    assert demo.main(["--dir", str(directory), "--files", "2", "--rows", "5000",
                      "--procs", "2"]) == 0
    printed = capsys.readouterr().out
    warehouse = directory / "warehouse.db"
    csv_bytes = sum(p.stat().st_size for p in (directory / "csv").glob("sales-*.csv"))
    assert f"left on disk    {demo.megabytes(warehouse.stat().st_size)} in {warehouse}, " \
           f"{demo.megabytes(csv_bytes)} of CSV in {directory / 'csv'}" in printed
    assert f"scripts/demo --clean --dir {directory}" in printed
    # --help's (and the README's) sizes for the defaults come from these per-row figures.
    assert 0.8 < warehouse.stat().st_size / 10_000 / demo.WAREHOUSE_BYTES_PER_ROW < 1.2
    assert 0.9 < csv_bytes / 10_000 / demo.CSV_BYTES_PER_ROW < 1.1
    help_text = " ".join(demo.build_parser().format_help().split())
    assert demo.disk_note(demo.DEFAULT_FILES, demo.DEFAULT_ROWS) in help_text
    rows = demo.DEFAULT_FILES * demo.DEFAULT_ROWS
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    assert (f"about {demo.megabytes(rows * demo.WAREHOUSE_BYTES_PER_ROW)} in `demo/warehouse.db` "
            f"and {demo.megabytes(rows * demo.CSV_BYTES_PER_ROW)} of CSV") in readme
    assert "`scripts/demo --clean` removes them" in readme

    (directory / "mine.txt").write_text("not the demo's")
    assert demo.main(["--dir", str(directory), "--clean"]) == 0
    assert sorted(p.name for p in directory.iterdir()) == ["mine.txt"]


def test_the_first_run_of_scripts_demo_says_what_it_installs_before_it_starts(tmp_path):
    """Creating .venv and installing into it is the first run's silent half-minute: the
    script says so before it starts (issue 23). A python3 that only reports its call
    shows what came first."""
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "demo", tmp_path / "scripts" / "demo")
    (tmp_path / "bin").mkdir()
    fake = tmp_path / "bin" / "python3"
    fake.write_text('#!/bin/sh\necho "python3 was run: $*" >&2\nexit 7\n')
    fake.chmod(0o755)
    result = subprocess.run(["bash", str(tmp_path / "scripts" / "demo")], capture_output=True,
                            text=True, env=dict(os.environ, PATH=f"{tmp_path / 'bin'}:/usr/bin:/bin"),
                            timeout=30)
    assert result.returncode == 7
    lines = result.stderr.splitlines()
    assert len(lines) == 2, result.stderr
    said, ran = lines
    assert said.startswith("scripts/demo: first run: creating .venv and installing jobpool and "
                           "its dependencies"), result.stderr
    assert ran == "python3 was run: -m venv .venv"
