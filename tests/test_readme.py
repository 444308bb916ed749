"""README.md is checked, not trusted (issue 23): every version it states is the code's,
every ```python example runs as written in an empty directory, and every ``jobpool``
(and ``scripts/demo``) command line it shows is one the CLI's own parser accepts.

A python block whose first line is a comment naming a file (``# myapp/jobs.py``) is a
file of a small project: those blocks are written where they say, test files among
them run under pytest, the others are imported. Every other python block is a script,
run with ``python example.py`` in a directory of its own.
"""
from __future__ import annotations

import importlib.metadata
import os
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from jobpool import cli
from jobpool.examples import demo
from jobpool.store.postgres import statements as pg_sql
from jobpool.store.sqlite import statements as sql
from jobpool.store.urls import check_store_name

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))

FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.M | re.S)
FILE_LABEL = re.compile(r"# ([\w/.-]+\.py)$")


def fenced(language: str) -> list[tuple[int, str]]:
    """(line number, text) of each fenced block in ``language``."""
    return [(README.count("\n", 0, m.start()) + 1, m.group(2))
            for m in FENCE.finditer(README) if m.group(1) == language]


def file_label(text: str) -> str | None:
    first = text.split("\n", 1)[0]
    match = FILE_LABEL.fullmatch(first)
    return match.group(1) if match else None


SCRIPTS = [(line, text) for line, text in fenced("python") if file_label(text) is None]
PROJECT_FILES = [(file_label(text), text) for _line, text in fenced("python")
                 if file_label(text) is not None]


def example_env(directory: Path) -> dict[str, str]:
    """The environment of a user who installed jobpool: it imports from this tree, and
    nothing of the test run's own stores or settings leaks in."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBPOOL_")}
    env["PYTHONPATH"] = os.pathsep.join([str(directory), str(ROOT)])
    return env


# -- versions ---------------------------------------------------------------------------

def _requires_python() -> str:
    spec = PYPROJECT["project"]["requires-python"]
    assert spec.startswith(">="), spec
    return spec[2:]


def _psycopg_major() -> str:
    (spec,) = PYPROJECT["project"]["optional-dependencies"]["postgres"]
    return re.search(r">=(\d+)", spec).group(1)


def _extra_floor(extra: str, package: str) -> str:
    """The lowest version of ``package`` the ``extra`` accepts (``django>=4.2``: 4.2)."""
    (spec,) = [s for s in PYPROJECT["project"]["optional-dependencies"][extra]
               if s.startswith(package)]
    return re.search(r">=([\d.]+)", spec).group(1)


#: Each version the README states, where the code keeps it.
VERSION_CLAIMS = {
    r"SQLite schema (\d+)": lambda: sql.SCHEMA_VERSION,
    r"PostgreSQL revision (\d+)": lambda: pg_sql.SCHEMA_VERSION,
    r"Python (\d+\.\d+)\+": _requires_python,
    r"psycopg (\d+)\b": _psycopg_major,
    r"Django (\d+\.\d+)\+": lambda: _extra_floor("django", "django"),
}

#: What reads as a version: "schema 5", "revision 4", "Python 3.11+", "PgBouncer 1.18".
VERSION_LIKE = re.compile(r"(?i)\b(?:schema|revision|version|release)s?\s+v?\d+(?:\.\d+)*\b"
                          r"|\b[A-Za-z][\w-]*\s+v?\d+\.\d+(?:\.\d+)?(?![.\d])\+?")


@pytest.mark.parametrize("pattern", VERSION_CLAIMS)
def test_each_version_the_readme_states_is_the_codes(pattern):
    stated = re.findall(pattern, README)
    assert stated, f"the README no longer says {pattern!r}: drop it from VERSION_CLAIMS"
    actual = VERSION_CLAIMS[pattern]()
    assert set(stated) == {actual}, f"README says {pattern!r} = {stated}, the code {actual}"


def test_the_readme_states_no_version_the_test_does_not_check():
    checked = [m.span() for p in VERSION_CLAIMS for m in re.finditer(p, README)]
    unchecked = [m.group(0) for m in VERSION_LIKE.finditer(README)
                 if not any(start < m.end() and m.start() < end for start, end in checked)]
    assert unchecked == [], "versions in README.md that no test checks: add them to VERSION_CLAIMS"


def test_the_readme_says_postgresql_is_built():
    assert "being built" not in README


# -- python examples --------------------------------------------------------------------

def test_the_readme_has_examples_to_run():
    assert len(SCRIPTS) >= 8 and PROJECT_FILES


@pytest.mark.parametrize("line, text", SCRIPTS, ids=[f"line{line}" for line, _ in SCRIPTS])
def test_each_python_example_runs_as_written(tmp_path, line, text):
    (tmp_path / "example.py").write_text(text, encoding="utf-8")
    result = subprocess.run([sys.executable, "example.py"], cwd=tmp_path, env=example_env(tmp_path),
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, f"README.md line {line}:\n{result.stdout}{result.stderr}"


def test_the_example_project_files_import_and_its_tests_pass(tmp_path):
    for path, text in PROJECT_FILES:
        target = tmp_path / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    env = example_env(tmp_path)
    tests = [path for path, _ in PROJECT_FILES if Path(path).name.startswith("test_")]
    modules = [path[:-3].replace("/", ".") for path, _ in PROJECT_FILES if path not in tests]
    for module in modules:
        result = subprocess.run([sys.executable, "-c", f"import {module}"], cwd=tmp_path, env=env,
                                capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, f"{module}:\n{result.stderr}"
    # Installed, jobpool's plugin loads on its own (its pytest11 entry point); run from
    # this tree without an install, it is named.
    installed = any(ep.value == "jobpool.pytest_plugin"
                    for ep in importlib.metadata.entry_points(group="pytest11"))
    plugin = [] if installed else ["-p", "jobpool.pytest_plugin"]
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                             *plugin, *tests], cwd=tmp_path, env=env, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{len(tests)} passed" in result.stdout or "passed" in result.stdout, result.stdout


# -- command lines ----------------------------------------------------------------------

def _command_lines() -> list[tuple[int, str]]:
    """(line, command) of each ``jobpool``/``scripts/demo`` line of the sh blocks."""
    found = []
    for start, text in fenced("sh"):
        for offset, line in enumerate(text.replace("\\\n", " ").splitlines()):
            line = line.strip()
            if line.startswith(("jobpool ", "scripts/demo")):
                found.append((start + 1 + offset, line))
    return found


def _inline_commands() -> list[tuple[int, str]]:
    """(line, command) of each ``jobpool ...`` or ``scripts/demo ...`` code span of the prose."""
    prose = FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), README)
    return [(prose.count("\n", 0, m.start()) + 1, m.group(1))
            for m in re.finditer(r"`(jobpool [^`]+|scripts/demo(?: [^`]*)?)`", prose)]


COMMAND_LINES = _command_lines()
INLINE_COMMANDS = _inline_commands()


def _variants(command: str) -> list[list[str]]:
    """The argument lists a line with ``[optional]`` parts stands for: all of them
    given, and none (brackets inside quotes, a JSON array, are words); a
    ``<placeholder>`` is a number."""
    command = re.sub(r"<[^>]+>", "2", command)
    with_all, without, quote, depth = [], [], None, 0
    for previous, char in zip(" " + command, command):
        if quote is None and char == "#" and previous.isspace():
            break  # a comment
        if quote is None and char in "[]":
            depth += 1 if char == "[" else -1
            continue
        if char in "'\"":
            quote = None if quote == char else quote or char
        with_all.append(char)
        if depth == 0:
            without.append(char)
    return [shlex.split("".join(with_all)), shlex.split("".join(without))]


def _parse(argv: list[str], capsys) -> str | None:
    """None if the program's parser takes ``argv``, else what it said."""
    program, args = argv[0], argv[1:]
    parser = cli.build_parser() if program == "jobpool" else demo.build_parser()
    try:
        parsed = parser.parse_args(args)
    except SystemExit as exit_:
        if exit_.code == 0:  # --help
            return None
        return capsys.readouterr().err.strip() or f"exit {exit_.code}"
    if program == "jobpool" and getattr(parsed, "db", None) is not None:
        try:
            check_store_name(parsed.db, "--db")
        except ValueError as exc:
            return str(exc)
    return None


def test_the_readme_shows_command_lines():
    assert len(COMMAND_LINES) > 40 and len(INLINE_COMMANDS) > 10


@pytest.mark.parametrize("line, command", COMMAND_LINES,
                         ids=[f"line{line}" for line, _ in COMMAND_LINES])
def test_each_command_line_the_readme_shows_parses(line, command, capsys):
    for argv in _variants(command):
        problem = _parse(argv, capsys)
        assert problem is None, f"README.md line {line}: {shlex.join(argv)}: {problem}"
    capsys.readouterr()


def _options_of(argv: list[str]) -> tuple[list[str], set[str]]:
    """The subcommands ``argv`` names, and the options of the parser they lead to."""
    parser = cli.build_parser() if argv[0] == "jobpool" else demo.build_parser()
    path = []
    for word in argv[1:]:
        actions = [a for a in parser._actions if a.choices and isinstance(a.choices, dict)]
        if not actions or word.startswith("-"):
            break
        (sub,) = actions
        assert word in sub.choices, f"no command {' '.join([*path, word])!r}"
        path.append(word)
        parser = sub.choices[word]
    return path, {s for a in parser._actions for s in a.option_strings}


@pytest.mark.parametrize("line, command", INLINE_COMMANDS,
                         ids=[f"line{line}" for line, _ in INLINE_COMMANDS])
def test_each_command_named_in_the_prose_exists_with_its_options(line, command):
    """A span of the prose may name a command without all of its arguments
    (`jobpool enqueue`): its commands and options must exist."""
    argv = _variants(command)[0]
    try:
        path, options = _options_of(argv)
    except AssertionError as exc:
        pytest.fail(f"README.md line {line}: `{command}`: {exc}")
    if argv[0] == "jobpool":
        assert path, f"README.md line {line}: `{command}` names no command"
    unknown = [w.split("=", 1)[0] for w in argv[1:]
               if w.startswith("-") and w.split("=", 1)[0] not in options]
    assert unknown == [], f"README.md line {line}: `{command}`: no such option {unknown}"


def test_the_jobpool_command_offers_every_command_the_readme_shows():
    """The parser read above is the one ``jobpool`` runs."""
    result = subprocess.run([sys.executable, "-m", "jobpool", "--help"], cwd=ROOT,
                            env=example_env(ROOT), capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    shown = {_variants(command)[0][1] for _line, command in COMMAND_LINES
             if command.startswith("jobpool ")}
    listed = set(re.findall(r"^    (\w[\w-]*)", result.stdout, re.M))
    assert shown <= listed, shown - listed
