"""`jobpool start` on a real pseudo-terminal shows the live dashboard (R29)."""
from __future__ import annotations

import os
import pty
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import fcntl
import time

APP = """
import time
from jobpool import job, progress

@job(name="imports.slow_file", timeout=120)
def slow_file(name):
    progress(40, "parsing")
    time.sleep(60)
"""

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\x1b[()][A-Z0-9]")


def test_start_on_a_terminal_shows_slots_queues_and_progress(make_app):
    app = make_app(APP)
    app.store().enqueue_many("imports.slow_file", [("a.csv",), ("b.csv",), ("c.csv",)])
    pid, fd = pty.fork()
    if pid == 0:  # the child: a pool on the terminal, 80x24
        os.chdir(app.dir)
        env = dict(app.env, TERM="xterm-256color", COLUMNS="80", LINES="24",
                   JOBPOOL_HEARTBEAT="0.2")
        os.execve(sys.executable, [sys.executable, "-m", "jobpool", "start", "--app", app.module,
                                   "--db", str(app.db), "--procs", "2"], env)
    try:
        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
        screen = []

        def read_until(needles, pattern=None):
            end = time.monotonic() + 45
            while time.monotonic() < end:
                ready, _, _ = select.select([fd], [], [], 0.2)
                if ready:
                    try:
                        screen.append(os.read(fd, 65536).decode("utf-8", "replace"))
                    except OSError:
                        break
                text = _ANSI.sub("", "".join(screen))
                if all(n in text for n in needles) and (pattern is None or re.search(pattern, text)):
                    return text
            raise AssertionError("screen never showed " + repr(needles) + ":\n"
                                 + _ANSI.sub("", "".join(screen))[-3000:])

        # The queue row: one job ready, both slots' jobs running.
        text = read_until(["imports.slow_file", "parsing", "40%"], r"default\s+1\s+0\s+2\s+0")
        # Each busy slot shows its child's pid (children are the pool's only children).
        found = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True)
        children = found.stdout.split()
        assert len(children) == 2, found
        text = read_until(children)
        for line in text.splitlines():
            assert len(line) <= 80, line
    finally:
        os.kill(pid, signal.SIGTERM)
        os.kill(pid, signal.SIGTERM)  # second one: stop at once, releasing leases
        _, status = os.waitpid(pid, 0)
        os.close(fd)
    assert os.waitstatus_to_exitcode(status) == 0
    assert app.store().stats()["running"] == 0  # leases released on the way out
