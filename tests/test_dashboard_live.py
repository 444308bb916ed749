"""`jobpool start` and `jobpool top` on a real pseudo-terminal show the live dashboard (R29)."""
from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import time

from .test_dashboard import header_lines, screen_after

APP = """
import time
from jobpool import job, progress

@job(name="imports.slow_file", timeout=120)
def slow_file(name):
    progress(40, "parsing")
    time.sleep(60)
"""

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\x1b[()][A-Z0-9]")


class Terminal:
    """A jobpool command on an 80x24 pseudo-terminal, and all it wrote there."""

    def __init__(self, app, *args: str, prefix: tuple[str, ...] = ()) -> None:
        """``prefix``: a command the jobpool command runs under (``("nohup",)``)."""
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: the command on the terminal
            os.chdir(app.dir)
            env = dict(app.env, TERM="xterm-256color", COLUMNS="80", LINES="24",
                       JOBPOOL_HEARTBEAT="0.2", PYTHONFAULTHANDLER="1")
            argv = [*prefix, sys.executable, "-m", "jobpool", *args]
            os.execvpe(argv[0], argv, env)
        fcntl.ioctl(self.fd, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
        self.output: list[str] = []
        self.status: int | None = None

    @property
    def text(self) -> str:
        return _ANSI.sub("", "".join(self.output))

    def read_until(self, needles, pattern=None, timeout: float = 45) -> str:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if not self._read(0.2):
                break
            text = self.text
            if all(n in text for n in needles) and (pattern is None or re.search(pattern, text)):
                return text
        raise AssertionError("screen never showed " + repr(needles) + ":\n" + self.text[-3000:])

    def press_ctrl_c(self) -> None:
        os.write(self.fd, b"\x03")  # the line discipline signals the foreground and echoes ^C

    def wait(self, timeout: float = 45) -> int:
        """Read to the end of the output and reap the command; its exit code.

        A command still running after ``timeout`` is made to dump every thread's
        stack (faulthandler, on SIGABRT) onto the terminal, and the test fails
        showing it: where it hung, rather than a bare timeout."""
        end = time.monotonic() + timeout
        while time.monotonic() < end and self._read(0.2):
            pass
        # Its terminal may close (EIO) a moment before the process is gone.
        grace = time.monotonic() + 15
        pid, status = os.waitpid(self.pid, os.WNOHANG)
        while pid == 0 and time.monotonic() < grace:
            time.sleep(0.05)
            pid, status = os.waitpid(self.pid, os.WNOHANG)
        if pid == 0:
            os.kill(self.pid, signal.SIGABRT)
            end = time.monotonic() + 5
            while time.monotonic() < end and self._read(0.2):
                pass
            _, self.status = os.waitpid(self.pid, 0)
            raise AssertionError(f"the command did not exit within {timeout} s:\n"
                                 + "".join(self.output)[-4000:])
        self.status = status
        return os.waitstatus_to_exitcode(status)

    def close(self) -> None:
        if self.status is None:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        os.close(self.fd)

    def _read(self, wait: float) -> bool:
        ready, _, _ = select.select([self.fd], [], [], wait)
        if ready:
            try:
                chunk = os.read(self.fd, 65536)
            except OSError:  # EIO: the command has exited and closed the terminal
                return False
            if not chunk:
                return False
            self.output.append(chunk.decode("utf-8", "replace"))
        return True


def test_start_on_a_terminal_shows_slots_queues_and_progress(make_app):
    app = make_app(APP)
    app.store().enqueue_many("imports.slow_file", [("a.csv",), ("b.csv",), ("c.csv",)])
    term = Terminal(app, "start", "--app", app.module, "--db", str(app.db), "--procs", "2")
    try:
        # The queue row: one job ready, both slots' jobs running.
        term.read_until(["imports.slow_file", "parsing", "40%"], r"default\s+1\s+0\s+2\s+0")
        # Each busy slot shows its child's pid (the pool also runs its checkpointer and
        # this dashboard as processes: the slots' pids are the ones running jobs).
        found = subprocess.run(["pgrep", "-P", str(term.pid)], capture_output=True, text=True)
        running = {str(r["pid"]) for r in app.store().pools()[0]["slots"] if r["job_id"]}
        children = [pid for pid in found.stdout.split() if pid in running]
        assert len(children) == 2, (found, running)
        text = term.read_until(children)
        for line in text.splitlines():
            assert len(line) <= 80, line
        os.kill(term.pid, signal.SIGTERM)
        os.kill(term.pid, signal.SIGTERM)  # second one: stop at once, releasing leases
        assert term.wait() == 0
    finally:
        term.close()
    assert app.store().stats()["running"] == 0  # leases released on the way out


def _last_frame_once(term) -> list[str]:
    """The screen after exit holds one header and no echoed ^C; returns its lines."""
    screen = screen_after("".join(term.output))
    assert len(header_lines(screen)) == 1, "\n".join(screen)
    assert not any("^C" in line for line in screen)
    return screen


def test_ctrl_c_on_start_shows_the_drain_and_leaves_the_last_frame_once(make_app):
    app = make_app(APP)
    app.store().enqueue_many("imports.slow_file", [("a.csv",), ("b.csv",), ("c.csv",)])
    term = Terminal(app, "start", "--app", app.module, "--db", str(app.db), "--procs", "2",
                    "--drain", "30")
    try:
        term.read_until(["imports.slow_file", "parsing", "40%"], r"default\s+1\s+0\s+2\s+0")
        # When Ctrl-C asks for a graceful stop, the frame says the pool is draining
        term.press_ctrl_c()
        term.read_until(["stopping: 2 running, drain ends in"])
        # and a second Ctrl-C stops it at once
        term.press_ctrl_c()
        assert term.wait() == 0
    finally:
        term.close()
    # Then the terminal holds the last frame once: the echoed ^C moved no redraw down
    screen = _last_frame_once(term)
    # Beside its own pool the frame never says there is none: starting, then stopped.
    assert "no live pool" not in term.text
    assert "pool stopped" in header_lines(screen)[0]


def test_ctrl_c_on_top_leaves_the_last_frame_once(make_app):
    app = make_app(APP)
    app.store().enqueue_many("imports.slow_file", [("a.csv",), ("b.csv",)])
    term = Terminal(app, "top", "--db", str(app.db), "--refresh", "0.2")
    try:
        term.read_until(["no live pool"], r"default\s+2\s+0\s+0\s+0")
        time.sleep(0.5)  # a few redraws
        term.press_ctrl_c()
        assert term.wait() == 0
    finally:
        term.close()
    screen = _last_frame_once(term)
    assert re.match(r"default\s+2\s+0\s+0\s+0\s+0$", [line for line in screen if line][-1])


ASKING_APP = """
import os
from pathlib import Path
from jobpool import Fatal, job

@job(name="t.asks", timeout=60, max_attempts=1, store_result=True)
def asks():
    try:
        return "answered " + input("your name? ")
    except EOFError:
        return "end of input"

def asks_too(job, reason):  # an on_dead hook that reads its stdin
    try:
        heard = "answered " + input("and yours? ")
    except EOFError:
        heard = "end of input"
    (Path(__file__).parent / "hook.txt").write_text(heard)

@job(name="t.dies", max_attempts=1, on_dead=asks_too)
def dies():
    raise Fatal("for the hook")
"""


def test_a_job_that_reads_its_stdin_meets_its_end_on_a_terminal(make_app):
    """R43's amendment: a job's stdin is at end-of-file, as multiprocessing gives its
    processes. Before, on the pool's terminal the child (in a process group of its
    own, not the terminal's foreground) was stopped by its read until the hard timeout."""
    app = make_app(ASKING_APP)
    handle = app.store().enqueue("t.asks")
    app.store().enqueue("t.dies")
    began = time.monotonic()
    term = Terminal(app, "start", "--app", app.module, "--db", str(app.db), "--burst",
                    "--procs", "1", "--no-dashboard", "-q")
    try:
        assert term.wait() == 0
    finally:
        term.close()
    assert handle.result(timeout=5) == "end of input"
    assert (app.dir / "hook.txt").read_text() == "end of input"  # its on_dead hook's too
    assert time.monotonic() - began < 30  # not the hard timeout's 60 s


def test_a_job_that_reads_its_stdin_does_not_take_the_pools_input(make_app):
    """The same from a pipe: the pool's input is not the job's."""
    app = make_app(ASKING_APP)
    handle = app.store().enqueue("t.asks")
    app.store().enqueue("t.dies")
    ran = subprocess.run([sys.executable, "-m", "jobpool", "start", "--app", app.module, "--db",
                          str(app.db), "--burst", "--procs", "1", "-q"], cwd=app.dir, env=app.env,
                         input=b"secret\n", capture_output=True, timeout=60)
    assert ran.returncode == 0, ran.stderr
    assert handle.result(timeout=5) == "end of input"
    assert (app.dir / "hook.txt").read_text() == "end of input"


def test_an_app_that_starts_a_thread_at_import_is_one_line_on_a_terminal(make_app):
    """The live dashboard is the pool's first fork: the same one line before it."""
    app = make_app(ASKING_APP + """
import threading, time
threading.Thread(target=time.sleep, args=(60,), daemon=True, name="apm-agent").start()
""")
    term = Terminal(app, "start", "--app", app.module, "--db", str(app.db), "--procs", "1")
    try:
        assert term.wait() == 1
    finally:
        term.close()
    assert "runs 1 more ('apm-agent')" in term.text and "Traceback" not in term.text
