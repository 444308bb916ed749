"""What a child does around every job, compiled and pure alike: its two checks after
the job (R40, R43) and the pipe's message written (the job to it, its reply back).

``core.OpenFiles`` answers R43's question (did the job point a standard stream
elsewhere, or close it?), ``core.has_children`` R40's (did it leave a process
behind?) and ``core.Limits`` R20's (did it change a resource limit?). The compiled
core makes these calls in C; its twin in ``_core_py`` is the
reference. Real pools exercise both through ``tests/test_integrity.py`` and the fault
suite; here each answer is checked on both implementations.
"""
from __future__ import annotations

import os
import signal
import threading
import time

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
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
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
            code = 0 if answers == [(), (resource.RLIMIT_CPU, resource.RLIMIT_NOFILE),
                                    (resource.RLIMIT_CPU,), (resource.RLIMIT_CPU,)] else 2
        finally:
            os._exit(code)
    _pid, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_a_working_directory_removed_under_the_child_is_left_as_the_job_left_it(tmp_path):
    # R20's amendment: a deploy may remove the directory the pool started in; the
    # child then goes on from where the job left it, and does not retire for it.
    from jobpool.child import ProcessSettings
    started, elsewhere = tmp_path / "release-1", tmp_path / "elsewhere"
    started.mkdir()
    elsewhere.mkdir()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.chdir(started)
            settings = ProcessSettings()
            os.rmdir(started)
            os.chdir(elsewhere)  # the job's
            kept = settings.restore()
            code = 0 if kept and os.getcwd() == str(elsewhere) else 2
        finally:
            os._exit(code)
    _pid, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_has_children_sees_a_child_until_it_is_reaped(impl):
    # In a process of its own, whose children the test knows: none, one running, one
    # ended but not reaped (still a child), then none again.
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            answers = [impl.has_children()]
            kid = os.fork()
            if kid == 0:
                time.sleep(30)
                os._exit(0)
            answers.append(impl.has_children())
            os.kill(kid, signal.SIGKILL)
            answers.append(impl.has_children())  # killed, not reaped: still a child
            os.waitpid(kid, 0)
            answers.append(impl.has_children())
            code = 0 if answers == [False, True, True, False] else 2
        finally:
            os._exit(code)
    _pid, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


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
