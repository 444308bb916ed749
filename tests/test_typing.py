"""The ``@job`` decorator keeps the function's parameters (ParamSpec, R1): a type
checker holds ``fn(...)``, ``fn.enqueue(...)`` and ``fn.s(...)`` to the function.
mypy runs on a sample file whose wrong lines are marked; it must report exactly
those lines and no others."""
from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("mypy")

ROOT = Path(__file__).resolve().parent.parent

SAMPLE = '''
import jobpool
from jobpool import job


@job(name="typing.add")
def add(x: int, y: int = 0) -> int:
    return x + y


@job
def bare(path: str, *, sep: str = ",") -> None:
    return None


total: int = add(1, 2)
add.enqueue(1)
add.enqueue(1, y=2)
add.s(1, 2)
bare.enqueue("a.csv", sep=";")
bare.s("a.csv")
add.enqueue_with(args=(1, 2, 3))   # a tuple: not checked by the type, refused at enqueue

add.enqueue("one")                 # WRONG
add.enqueue(1, 2, 3)               # WRONG
add.enqueue(1, nope=True)          # WRONG
add.s("x")                         # WRONG
bare.s("a.csv", ";")               # WRONG
bare.enqueue(path=1)               # WRONG
text: str = add(1)                 # WRONG
'''


def test_mypy_checks_enqueue_and_signatures_against_the_function(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text(textwrap.dedent(SAMPLE))
    wrong = {number for number, line in enumerate(sample.read_text().splitlines(), 1)
             if line.rstrip().endswith("# WRONG")}
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-incremental", "--cache-dir", str(tmp_path / "cache"),
         "--follow-imports=silent", "--no-error-summary", "--hide-error-context", str(sample)],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "MYPYPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    errors = [line for line in result.stdout.splitlines() if ": error:" in line]
    reported = {int(m.group(1)) for line in errors
                if (m := re.match(rf"{re.escape(str(sample))}:(\d+):", line))}
    assert reported == wrong, result.stdout + result.stderr
    assert len(errors) >= len(wrong)
