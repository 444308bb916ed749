"""What a child does around every job, compiled and pure alike: its look after the
job (R20, R40, R43) and the pipe's message written (the job to it, its reply back).

``core.OpenFiles`` answers R43's question (did the job point a standard stream
elsewhere, or close it?), ``core.has_children`` R40's (did it leave a process
behind?) and ``core.Limits`` R20's (did it change a resource limit?). The compiled
core makes these calls in C; its twin in ``_core_py`` is the
reference. Real pools exercise both through ``tests/test_integrity.py`` and the fault
suite; here each answer is checked on both implementations.
"""
from __future__ import annotations

import io
import os
import signal
import sys
import threading
import time
import types

import pytest

import multiprocess

from jobpool import _core_py, channel


@pytest.fixture(params=["pure", pytest.param("compiled", marks=pytest.mark.c_extension)])
def impl(request):
    if request.param == "pure":
        return _core_py
    return request.getfixturevalue("compiled_core")


def _identity(fd: int) -> tuple[int, int, int]:
    st = os.fstat(fd)
    return fd, st.st_dev, st.st_ino


def _a_sleeping_child() -> int:
    """A child process of this one that sleeps until it is killed: its pid."""
    kid = os.fork()
    if kid == 0:
        time.sleep(30)
        os._exit(0)
    return kid


def _in_a_process_of_its_own(body) -> None:
    """Run ``body()`` in a forked process (it may change the process's limits, signal
    state, directory and children) and hold that it answered True."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = 0 if body() else 2
        finally:
            os._exit(code)
    _pid, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_open_files_names_each_descriptor_closed_or_pointed_elsewhere(impl, tmp_path):
    fds = [os.open(tmp_path / f"f{i}", os.O_CREAT | os.O_WRONLY) for i in range(3)]
    other = os.open(tmp_path / "other", os.O_CREAT | os.O_WRONLY)
    try:
        files = impl.OpenFiles([_identity(fd) for fd in fds])
        assert files.changed() == ()
        os.dup2(other, fds[2])  # the job pointed one at another file
        assert files.changed() == (fds[2],)
        os.close(fds[0])  # and closed another
        assert files.changed() == (fds[0], fds[2])  # in the order given
        again = os.open(tmp_path / "f0", os.O_WRONLY)
        os.dup2(again, fds[0])  # the same file again
        if again != fds[0]:
            os.close(again)
        assert files.changed() == (fds[2],)
    finally:
        for fd in (*fds, other):
            try:
                os.close(fd)
            except OSError:
                pass


def test_limits_names_each_resource_limit_a_job_changed(impl):
    # In a process of its own: a limit lowered (soft, then hard) is named in the order
    # given, and one put back is not.
    import resource

    def body() -> bool:
        mine = [resource.RLIMIT_CPU, resource.RLIMIT_FSIZE, resource.RLIMIT_NOFILE]
        limits = impl.Limits(mine)
        answers = [limits.changed()]
        nofile = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, nofile[1]))
        resource.setrlimit(resource.RLIMIT_CPU, (3600, resource.getrlimit(resource.RLIMIT_CPU)[1]))
        answers.append(limits.changed())
        resource.setrlimit(resource.RLIMIT_NOFILE, nofile)
        answers.append(limits.changed())
        resource.setrlimit(resource.RLIMIT_CPU, (3600, 3600))  # for good
        answers.append(limits.changed())
        return answers == [(), (resource.RLIMIT_CPU, resource.RLIMIT_NOFILE),
                           (resource.RLIMIT_CPU,), (resource.RLIMIT_CPU,)]
    _in_a_process_of_its_own(body)


def test_a_working_directory_removed_under_the_child_is_left_as_the_job_left_it(impl, tmp_path):
    # R20's amendment: a deploy may remove the directory the pool started in; the
    # child then goes on from where the job left it, and does not retire for it.
    from jobpool.child import ProcessSettings
    started, elsewhere = tmp_path / "release-1", tmp_path / "elsewhere"
    started.mkdir()
    elsewhere.mkdir()

    def body() -> bool:
        os.chdir(started)
        settings = ProcessSettings()
        end = impl.JobEnd((), (), impl.OpenFiles([]), impl.Limits(ProcessSettings.RESOURCES),
                          settings.mask, settings.cwd)
        os.rmdir(started)
        os.chdir(elsewhere)  # the job's
        return end.look() == 0 and os.getcwd() == str(elsewhere)
    _in_a_process_of_its_own(body)


def test_the_look_after_a_job_puts_back_what_it_must_and_names_the_rest(impl, tmp_path):
    # R20, R40, R43, in a process of its own: after each "job" below, ``JobEnd.look``
    # puts back the timer, the signal mask, the file mode mask and the directory
    # itself, and answers the flags of a handler, a child process, a pipe, a limit and
    # a standard stream the job changed; both twins alike, the flags the same in both.
    import resource
    from jobpool import _core_py
    flags = ("HANDLERS", "STRAYS", "PIPES", "LIMITS", "STREAMS")
    assert [getattr(impl.JobEnd, f) for f in flags] == [getattr(_core_py.JobEnd, f) for f in flags] \
        == [1, 2, 4, 8, 16]
    home, away = tmp_path / "home", tmp_path / "away"
    home.mkdir()
    away.mkdir()

    def body() -> bool:
        end_of = impl.JobEnd
        os.chdir(home)
        os.umask(0o022)
        mine = lambda signum, frame: None  # noqa: E731 - the handler a job finds
        signal.signal(signal.SIGUSR1, mine)
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, ())
        read_end, write_end = os.pipe()
        pipes = impl.OpenFiles([_identity(read_end), _identity(write_end)])
        limits = impl.Limits([resource.RLIMIT_NOFILE])
        # The standard streams a job finds: a descriptor's file, and a ``sys`` object.
        stream_r, stream_w = os.pipe()
        streams = types.SimpleNamespace(files=impl.OpenFiles([_identity(stream_r)]),
                                        objects={"stdout": sys.stdout})
        end = end_of(mask, ((signal.SIGUSR1, mine), (signal.SIGUSR2, None)), pipes, limits,
                     0o022, str(home), streams)
        until = time.process_time() + 0.05  # CPU for the look to count (10 ms ticks)
        while time.process_time() < until:
            pass
        answers = [end.look()]
        spent = os.times()
        began = end.cpu
        # What os.times() counts, as it counts it; the peak RSS in bytes.
        counted = spent.user + spent.system + spent.children_user + spent.children_system
        good = 0 < end.cpu <= counted <= end.clock() < counted + 0.05 and end.peak_rss > 1 << 20
        # A job that left a timer armed, SIGALRM blocked, its own mode mask and
        # directory: all put back, nothing for the caller.
        signal.setitimer(signal.ITIMER_REAL, 30)
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
        os.umask(0o077)
        os.chdir(away)
        answers.append(end.look())
        good = good and signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
        good = good and signal.pthread_sigmask(signal.SIG_BLOCK, ()) == mask
        good = good and os.umask(0o022) == 0o022 and os.getcwd() == str(home)
        good = good and end.cpu >= began
        # A handler changed; a handler that had none set (SIGUSR2) is not looked at.
        signal.signal(signal.SIGUSR1, signal.SIG_IGN)
        signal.signal(signal.SIGUSR2, signal.SIG_IGN)
        answers.append(end.look())
        signal.signal(signal.SIGUSR1, mine)
        # A process left behind, running, then killed and reaped.
        kid = _a_sleeping_child()
        answers.append(end.look())
        os.kill(kid, signal.SIGKILL)
        os.waitpid(kid, 0)
        # A pipe's number pointed at another file, then put back.
        saved = os.dup(read_end)
        other = os.open(tmp_path / "other", os.O_CREAT | os.O_WRONLY)
        os.dup2(other, read_end)
        answers.append(end.look())
        os.dup2(saved, read_end)
        # A limit lowered.
        nofile = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, nofile[1]))
        answers.append(end.look())
        resource.setrlimit(resource.RLIMIT_NOFILE, nofile)
        answers.append(end.look())
        # A stream's descriptor pointed elsewhere, then put back; ``sys.stdout`` replaced,
        # then put back; the stream object closed.
        kept = os.dup(stream_r)
        os.dup2(other, stream_r)
        answers.append(end.look())
        os.dup2(kept, stream_r)
        mine_out, sys.stdout = sys.stdout, io.StringIO()
        answers.append(end.look())
        sys.stdout = mine_out
        answers.append(end.look())
        mine_out.close()
        answers.append(end.look())
        return good and answers == [0, 0, end_of.HANDLERS, end_of.STRAYS, end_of.PIPES,
                                    end_of.LIMITS, 0, end_of.STREAMS, end_of.STREAMS, 0,
                                    end_of.STREAMS]
    _in_a_process_of_its_own(body)


def test_has_children_sees_a_child_until_it_is_reaped(impl):
    # In a process of its own, whose children the test knows: none, one running, one
    # ended but not reaped (still a child), then none again.
    def body() -> bool:
        answers = [impl.has_children()]
        kid = _a_sleeping_child()
        answers.append(impl.has_children())
        os.kill(kid, signal.SIGKILL)
        answers.append(impl.has_children())  # killed, not reaped: still a child
        os.waitpid(kid, 0)
        answers.append(impl.has_children())
        return answers == [False, True, True, False]
    _in_a_process_of_its_own(body)


@pytest.mark.parametrize("size", [0, 5, 70_000, 3_000_000])
def test_a_message_written_is_what_send_bytes_writes_and_recv_bytes_reads(impl, size):
    # The same bytes on the wire as multiprocessing's own send (its length prefix
    # included), read back whole by ``recv_bytes``; a message larger than the pipe
    # holds goes out in parts while the other end reads.
    data = os.urandom(size)
    ours, theirs = channel.pair()
    reference, reference_end = multiprocess.get_context("fork").Pipe(duplex=True)
    try:
        writer = threading.Thread(target=impl.write_message, args=(ours, data))
        writer.start()
        assert theirs.poll(30), "nothing came"  # a writer that failed sends nothing
        assert theirs.recv_bytes() == data
        writer.join()
        impl.write_message(ours, data[:64])
        reference.send_bytes(data[:64])
        assert os.read(theirs.fileno(), 4096) == os.read(reference_end.fileno(), 4096)
        theirs.close()
        with pytest.raises(OSError):
            impl.write_message(ours, b"after the other end closed")
    finally:
        for conn in (ours, reference, reference_end):
            conn.close()
