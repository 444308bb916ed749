# cython: language_level=3
"""The SQLite driver's accelerator, and the supervisor's slot table, compiled.

Nothing here decides anything about a job's life: the engine (``jobpool.engine``)
does, over the SQLite driver (``store/sqlite/driver.py``). The compiled driver
(``store/sqlite/compiled.py``) is that driver with two parts taken from here:

- ``Connection``: the driver's road to SQLite through the C API of the system's
  shared libsqlite3 (the library Python's ``sqlite3`` module uses too, so a process
  never holds two copies of SQLite's POSIX lock tables, R42). Each statement text is
  prepared once and kept; parameters are bound by name from the caller's mapping;
  a step runs without the GIL, since it may sleep in the busy handler, which waits
  for a lock in steps of at most a millisecond (``_busy_wait``). Its pure
  twin is ``driver.PythonConnection`` (Python's ``sqlite3``); both answer ``rows``,
  ``lenient_rows``, ``changes`` and ``in_transaction`` alike, and a failure is one
  ``SqliteError`` carrying SQLite's result code.
- ``decode_claims``: R44's codec for the claim's rows (``row_codec.decode_claims``
  is the specification), answering in C the rows whose every column is plainly
  sound, and handing every other row to the codec itself, so the two never differ
  (a property test holds them equal on generated rows).

``SlotTable`` is ``_core_py.SlotTable`` with its deadlines in a C array. ``Pump``
(``_pump.pxi``) is the supervisor's pump, ``supervisor/pump.py``'s class compiled (R68).

``read_message`` is ``_core_py.read_message``: a child's message read off its pipe in C,
R68's success frame taken apart on the way (the struct module's unpack costs more than
marshal's whole message; this costs none of the ``Connection`` framing's Python); the
child reads its next job with it too. ``write_message`` is its other half: a message
and its length prefix in one ``writev``.

Every ``Connection`` opens its store through ``_walbuf.h``'s VFS, so each commit's WAL
frames go to the file in one write (``wal_writes`` counts them). So does every store
connection Python's ``sqlite3`` opens in a process that loaded this module, and each
of those gets an SQL function that makes it wait for a lock in short sleeps too
(``jobpool_busy_waits``, R26a: a producer beside a pool).
``OpenFiles`` and ``has_children`` are a child's two checks after every job (R43's look
at its standard streams' files, R40's look for a process left behind), their system
calls made here with no Python result built for them.
"""
cimport cython
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_CheckBuffer, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.long cimport PyLong_AsLongLongAndOverflow
from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_New, PyTuple_SET_ITEM
from cpython.unicode cimport PyUnicode_AsUTF8AndSize, PyUnicode_DecodeUTF8
from libc.limits cimport INT_MAX
from libc.math cimport INFINITY, isfinite
from libc.stdint cimport int32_t, int64_t, uint32_t
from libc.stdlib cimport free, realloc
from libc.string cimport memcpy, memset
from posix.resource cimport RUSAGE_SELF, getrlimit, getrusage, rlimit, rusage
from posix.types cimport sigset_t
from posix.unistd cimport _SC_CLK_TCK, chdir, sysconf
from posix.stat cimport struct_stat, fstat
from posix.types cimport dev_t, ino_t
from posix.uio cimport iovec, writev
from posix.wait cimport P_ALL, WEXITED, WNOHANG, WNOWAIT, siginfo_t, waitid

import os
import sqlite3 as _pysqlite  # the base class of SqliteError only; same shared libsqlite3

from jobpool import bounds as _bounds
from jobpool.bounds import INT32_MAX, MAX_MESSAGE_BYTES, PRIORITY_MAX, PRIORITY_MIN
from jobpool.lifecycle import DONE as _DONE, Claimed, Lease, Settled
from jobpool.lifecycle import FOLLOW_ENDS as _FOLLOW_ENDS, FOLLOW_MEMBER as _FOLLOW_MEMBER
from jobpool.lifecycle import PLAIN_FOLLOW_UPS as _PLAIN_FOLLOW_UPS
from jobpool.store import row_codec
from jobpool.errors import StoreError
from jobpool.store.row_codec import Decoded


cdef extern from "<unistd.h>" nogil:
    int usleep(unsigned int usec)
    ssize_t read(int fd, void* buf, size_t count)


cdef extern from "<errno.h>" nogil:
    int errno
    int EINTR
    int EAGAIN
    int EWOULDBLOCK
    int ECHILD


cdef extern from "<poll.h>" nogil:
    cdef struct pollfd:
        int fd
        short events
        short revents
    int poll(pollfd* fds, unsigned long nfds, int timeout)
    short POLLIN


cdef extern from "<time.h>" nogil:
    cdef struct timespec:
        long tv_sec
        long tv_nsec
    int clock_gettime(int clk_id, timespec* tp)
    int CLOCK_MONOTONIC


cdef extern from "Python.h":
    int PyErr_CheckSignals() except -1
    object PyErr_SetFromErrno(object kind)


cdef extern from "sqlite3.h" nogil:
    ctypedef struct sqlite3
    ctypedef struct sqlite3_stmt
    ctypedef long long sqlite3_int64
    ctypedef void (*sqlite3_destructor_type)(void*)

    int SQLITE_OK
    int SQLITE_NOMEM
    int SQLITE_MISMATCH
    int SQLITE_MISUSE
    int SQLITE_RANGE
    int SQLITE_ROW
    int SQLITE_DONE
    int SQLITE_OPEN_READWRITE
    unsigned int SQLITE_PREPARE_PERSISTENT
    int SQLITE_INTEGER
    int SQLITE_FLOAT
    int SQLITE_TEXT
    int SQLITE_BLOB
    int SQLITE_NULL
    sqlite3_destructor_type SQLITE_STATIC
    sqlite3_destructor_type SQLITE_TRANSIENT

    int sqlite3_open_v2(const char* filename, sqlite3** db, int flags, const char* vfs)
    int sqlite3_close_v2(sqlite3* db)
    int sqlite3_busy_handler(sqlite3* db, int (*handler)(void*, int) noexcept nogil, void* arg)
    int sqlite3_errcode(sqlite3* db)
    int sqlite3_extended_errcode(sqlite3* db)
    const char* sqlite3_errmsg(sqlite3* db)
    const char* sqlite3_libversion()
    int sqlite3_changes(sqlite3* db)
    int sqlite3_get_autocommit(sqlite3* db)

    int sqlite3_prepare_v3(sqlite3* db, const char* text, int nbytes, unsigned int flags,
                           sqlite3_stmt** stmt, const char** tail)
    int sqlite3_finalize(sqlite3_stmt* stmt)
    int sqlite3_reset(sqlite3_stmt* stmt)
    int sqlite3_clear_bindings(sqlite3_stmt* stmt)
    int sqlite3_step(sqlite3_stmt* stmt)
    int sqlite3_stmt_readonly(sqlite3_stmt* stmt)

    int sqlite3_bind_parameter_count(sqlite3_stmt* stmt)
    const char* sqlite3_bind_parameter_name(sqlite3_stmt* stmt, int index)
    int sqlite3_bind_null(sqlite3_stmt* stmt, int index)
    int sqlite3_bind_int64(sqlite3_stmt* stmt, int index, sqlite3_int64 value)
    int sqlite3_bind_double(sqlite3_stmt* stmt, int index, double value)
    int sqlite3_bind_text(sqlite3_stmt* stmt, int index, const char* text, int nbytes,
                          sqlite3_destructor_type destructor)
    int sqlite3_bind_blob(sqlite3_stmt* stmt, int index, const void* data, int nbytes,
                          sqlite3_destructor_type destructor)

    int sqlite3_column_count(sqlite3_stmt* stmt)
    int sqlite3_column_type(sqlite3_stmt* stmt, int col)
    sqlite3_int64 sqlite3_column_int64(sqlite3_stmt* stmt, int col)
    double sqlite3_column_double(sqlite3_stmt* stmt, int col)
    const unsigned char* sqlite3_column_text(sqlite3_stmt* stmt, int col)
    const void* sqlite3_column_blob(sqlite3_stmt* stmt, int col)
    int sqlite3_column_bytes(sqlite3_stmt* stmt, int col)
    const char* sqlite3_column_name(sqlite3_stmt* stmt, int col)

    ctypedef struct sqlite3_vfs
    ctypedef struct sqlite3_context
    ctypedef struct sqlite3_value
    int SQLITE_UTF8
    int SQLITE_DIRECTONLY
    int SQLITE_FCNTL_VFS_POINTER
    int sqlite3_auto_extension(void (*entry)() noexcept nogil)
    int sqlite3_file_control(sqlite3* db, const char* name, int op, void* arg)
    int sqlite3_create_function_v2(
        sqlite3* db, const char* name, int nargs, int flags, void* app,
        void (*call)(sqlite3_context*, int, sqlite3_value**) noexcept nogil,
        void (*step)(sqlite3_context*, int, sqlite3_value**) noexcept nogil,
        void (*final)(sqlite3_context*) noexcept nogil,
        void (*destroy)(void*) noexcept nogil)
    sqlite3* sqlite3_context_db_handle(sqlite3_context* context)
    void* sqlite3_user_data(sqlite3_context* context)
    int sqlite3_value_type(sqlite3_value* value)
    sqlite3_int64 sqlite3_value_int64(sqlite3_value* value)
    void sqlite3_result_int(sqlite3_context* context, int value)
    void sqlite3_result_error(sqlite3_context* context, const char* text, int nbytes)
    void* sqlite3_malloc64(unsigned long long size)
    void sqlite3_free(void* memory)


def _same_sqlite_as_python():
    """R42: the address of ``sqlite3_libversion`` as this module was linked against
    it, and as the library Python's ``sqlite3`` module loaded resolves it. Two copies
    of SQLite in one process keep two tables of POSIX locks, and closing a file in
    one drops the other's locks: the compiled driver refuses to load beside a
    different copy (the pure driver, over Python's module, takes its place)."""
    import ctypes
    import _sqlite3
    ours = <size_t>&sqlite3_libversion
    theirs = ctypes.cast(ctypes.CDLL(_sqlite3.__file__).sqlite3_libversion, ctypes.c_void_p).value
    return ours, theirs


_ours, _theirs = _same_sqlite_as_python()
if _ours != _theirs:
    raise ImportError(f"jobpool._core links a libsqlite3 other than the one Python's sqlite3 "
                      f"module loaded ({_ours:#x} != {_theirs or 0:#x}); using the pure driver")


# -- the WAL's writes, one a commit (``_walbuf.h``) -----------------------------------------

cdef extern from "_walbuf.h" nogil:
    int walbuf_register()
    long long walbuf_late
    long long walbuf_flushes
    long long walbuf_gathered

#: The VFS every ``Connection`` opens its store through: the unix VFS, its WAL writes
#: gathered into one a commit (see ``_walbuf.h``).
WAL_VFS = "jobpool-walbuf"
cdef const char* _VFS = b"jobpool-walbuf"
if walbuf_register() != SQLITE_OK:
    raise ImportError("jobpool._core could not register its SQLite VFS; using the pure driver")


def wal_writes():
    """``(late, writes, gathered)`` in this process so far: the commits whose WAL bytes
    the guard had to write (0 while SQLite writes its WAL as ``_walbuf.h`` expects),
    the writes made of gathered bytes, and the writes SQLite asked for that they hold."""
    return walbuf_late, walbuf_flushes, walbuf_gathered


# -- the connection ---------------------------------------------------------------------

class SqliteError(_pysqlite.DatabaseError):
    """A failure SQLite reported, with its (extended) result code as
    ``sqlite_errorcode``. A subclass of ``sqlite3.DatabaseError`` so that the driver
    handles a failure on either road in one place (R26: ``StoreError`` with nothing
    applied), and the checks that read the code (a full disk, a statement that failed
    alone) read it the same way."""

    def __init__(self, message, code=1):   # 1: SQLITE_ERROR, a failure of no other kind
        super().__init__(message)
        self.sqlite_errorcode = code


cdef object _db_error(sqlite3* db):
    """The error the connection's last call left (read before anything else runs)."""
    if db == NULL or sqlite3_errcode(db) == SQLITE_NOMEM:
        return MemoryError()
    return SqliteError((<bytes>sqlite3_errmsg(db)).decode("utf-8", "replace"),
                       sqlite3_extended_errcode(db))


cdef inline bint _only_comments(const char* p) noexcept:
    """True if ``p`` holds nothing but whitespace, semicolons and SQL comments: a
    text the driver prepares must be one statement."""
    while p[0] != 0:
        if p[0] == b' ' or p[0] == b'\t' or p[0] == b'\n' or p[0] == b'\r' or p[0] == b';':
            p += 1
        elif p[0] == b'-' and p[1] == b'-':
            while p[0] != 0 and p[0] != b'\n':
                p += 1
        elif p[0] == b'/' and p[1] == b'*':
            p += 2
            while p[0] != 0 and not (p[0] == b'*' and p[1] == b'/'):
                p += 1
            if p[0] == 0:
                return True
            p += 2
        else:
            return False
    return True


cdef int _bind_value(sqlite3_stmt* st, int index, object value) except -1:
    """Bind one of the values a store holds (NULL, integer, real, text, bytes)."""
    cdef sqlite3_int64 i
    cdef int overflow = 0
    cdef const char* text
    cdef Py_ssize_t size = 0
    cdef Py_buffer view
    cdef int rc
    if value is None:
        return sqlite3_bind_null(st, index)
    if isinstance(value, int):
        i = PyLong_AsLongLongAndOverflow(value, &overflow)
        if overflow:
            raise OverflowError("Python int too large to convert to SQLite INTEGER")
        return sqlite3_bind_int64(st, index, i)
    if isinstance(value, float):
        return sqlite3_bind_double(st, index, <double>value)
    if isinstance(value, str):
        text = PyUnicode_AsUTF8AndSize(value, &size)
        if size > INT_MAX:
            raise OverflowError("string longer than INT_MAX bytes")
        # Static: the caller's parameters hold ``value`` until the statement is reset.
        return sqlite3_bind_text(st, index, text, <int>size, SQLITE_STATIC)
    if isinstance(value, bytes):
        size = PyBytes_GET_SIZE(value)
        if size > INT_MAX:
            raise OverflowError("BLOB longer than INT_MAX bytes")
        return sqlite3_bind_blob(st, index, PyBytes_AS_STRING(value), <int>size, SQLITE_STATIC)
    if PyObject_CheckBuffer(value):
        PyObject_GetBuffer(value, &view, PyBUF_SIMPLE)
        try:
            if view.len > INT_MAX:
                raise OverflowError("BLOB longer than INT_MAX bytes")
            rc = sqlite3_bind_blob(st, index, view.buf, <int>view.len, SQLITE_TRANSIENT)
        finally:
            PyBuffer_Release(&view)
        return rc
    raise SqliteError(f"parameter {index}: a store holds no {type(value).__name__}",
                      SQLITE_MISMATCH)


cdef object _column(sqlite3_stmt* st, int col, bint lenient):
    """One column as a Python value; text as str (``lenient``: text that is not UTF-8
    kept as lone surrogates, ``row_codec.lenient_text``, for the codec to name, R44)."""
    cdef int t = sqlite3_column_type(st, col)
    cdef const char* text
    if t == SQLITE_NULL:
        return None
    if t == SQLITE_INTEGER:
        return sqlite3_column_int64(st, col)
    if t == SQLITE_FLOAT:
        return sqlite3_column_double(st, col)
    if t == SQLITE_TEXT:
        text = <const char*>sqlite3_column_text(st, col)
        if text == NULL:
            raise MemoryError()
        if lenient:
            return PyUnicode_DecodeUTF8(text, sqlite3_column_bytes(st, col), "surrogateescape")
        try:
            return PyUnicode_DecodeUTF8(text, sqlite3_column_bytes(st, col), NULL)
        except UnicodeDecodeError:
            name = (<bytes>sqlite3_column_name(st, col)).decode("utf-8", "replace")
            raise SqliteError(f"column {name} holds text that is not UTF-8") from None
    return PyBytes_FromStringAndSize(<char*>sqlite3_column_blob(st, col),
                                     sqlite3_column_bytes(st, col))


@cython.final
cdef class _Prepared:
    """One statement text, prepared once, and the names of its parameters by index
    (None for a positional ``?``)."""
    cdef sqlite3_stmt* st
    cdef tuple names
    cdef bytes done_fields      # the compiled turn's field of each parameter (``_done_fields``)

    def __dealloc__(self):
        if self.st != NULL:
            sqlite3_finalize(self.st)
            self.st = NULL


cdef enum:
    BUSY_FIRST_US = 50      # the driver's busy handler's first sleep, microseconds
    BUSY_LONGEST_US = 1000  # and its longest (a producer's too)
    # A producer's first sleep: longer than the driver's, whose turns hold the lock for
    # tens of microseconds. Producers' commits hold it through their fsync, and with
    # shorter first sleeps producers beside each other handed the lock back and forth
    # after every commit (every enqueue waited; BENCHMARKS.md, R26a).
    PRODUCER_FIRST_US = 200


cdef struct BusyWait:
    long long limit_us      # the connection's busy timeout
    long long waited_us     # slept so far for the lock being waited on
    long long first_us      # its first sleep (doubling up to ``BUSY_LONGEST_US``)


#: How many sleeps ``_busy_wait`` made in this process (a test asks whether a
#: connection waits in it; an increment lost between two threads does not matter).
cdef long long _busy_sleeps = 0


cdef int _busy_wait(void* arg, int count) noexcept nogil:
    """SQLite's busy handler for a driver's connection and a producer's: wait for the
    lock up to the busy timeout, as ``sqlite3_busy_timeout`` does, but in sleeps of 50
    µs (a producer's: 200 µs) doubling to at most 1 ms, where SQLite's own handler
    sleeps 1, 2, 5, 10, 15… ms. A lock a producer's commit or a checkpoint holds for a
    millisecond or two then costs the supervisor's turn about that long instead of the
    next step of that ladder (3, 8, 18 ms): the pickup latency of a job enqueued while
    the pool turns. And a producer beside a pool gets in between its turns."""
    cdef BusyWait* wait = <BusyWait*>arg
    cdef long long step
    if count == 0:
        wait.waited_us = 0
    if wait.waited_us >= wait.limit_us:
        return 0
    step = wait.first_us << (count if count < 5 else 5)
    if step > BUSY_LONGEST_US:
        step = BUSY_LONGEST_US
    if step > wait.limit_us - wait.waited_us:
        step = wait.limit_us - wait.waited_us
    usleep(<unsigned int>step)
    wait.waited_us += step
    global _busy_sleeps
    _busy_sleeps += 1
    return 1


def busy_sleeps():
    """How many sleeps the short busy waits (``_busy_wait``) made in this process."""
    return _busy_sleeps


# -- a producer's busy waits (R26a) ------------------------------------------------------------
#
# Python's ``sqlite3`` gives a connection SQLite's own busy handler (sleeps of 1, 2, 5,
# 10 ... 100 ms) and no way to choose another. A producer that meets a pool's turn
# (which holds the write lock for tens of microseconds, thousands of times a second)
# then sleeps a millisecond, meets the next turn, sleeps longer: while a pool drains,
# its enqueues slow down tenfold and some wait a second. So every connection opened
# through this module's VFS (``connect_file`` opens a store's so when the core is built)
# gets an SQL function, ``jobpool_busy_waits(ms)``, that gives it short waits
# (``_busy_wait``, from 200 µs) up to ``ms`` milliseconds; ``connect_file`` calls it
# once, after Python set its own timeout. The function is DIRECTONLY: no view or
# trigger a store holds can call it. Other connections of the process are left alone.

cdef extern from *:
    """
    static sqlite3_vfs* walbuf_vfs_pointer(void) { return &walbuf_vfs; }
    """
    sqlite3_vfs* walbuf_vfs_pointer() nogil


cdef void _set_busy_waits(sqlite3_context* context, int nargs,
                          sqlite3_value** args) noexcept nogil:
    cdef BusyWait* wait = <BusyWait*>sqlite3_user_data(context)
    cdef sqlite3_int64 ms
    if sqlite3_value_type(args[0]) != SQLITE_INTEGER:
        sqlite3_result_error(context, "jobpool_busy_waits takes whole milliseconds", -1)
        return
    ms = sqlite3_value_int64(args[0])
    if ms < 0:
        sqlite3_result_error(context, "jobpool_busy_waits takes no negative time", -1)
        return
    wait.limit_us = (ms if ms < INT_MAX else INT_MAX) * 1000
    wait.waited_us = 0
    sqlite3_busy_handler(sqlite3_context_db_handle(context), _busy_wait, wait)
    sqlite3_result_int(context, 1)


cdef void _free_busy_wait(void* wait) noexcept nogil:
    sqlite3_free(wait)


cdef int _on_open(sqlite3* db, const char** error, const void* api) noexcept nogil:
    """SQLite's auto-extension entry, run for every connection the process opens:
    ``jobpool_busy_waits`` for those whose store goes through ``walbuf_vfs``."""
    cdef sqlite3_vfs* vfs = NULL
    cdef BusyWait* wait
    if sqlite3_file_control(db, "main", SQLITE_FCNTL_VFS_POINTER, &vfs) != SQLITE_OK \
            or vfs != walbuf_vfs_pointer():
        return SQLITE_OK
    wait = <BusyWait*>sqlite3_malloc64(sizeof(BusyWait))
    if wait == NULL:
        # No function: ``connect_file``'s call of it fails, and the store with it, as
        # on any allocation that fails while a store opens.
        return SQLITE_OK
    wait.limit_us = 0
    wait.waited_us = 0
    wait.first_us = PRODUCER_FIRST_US
    # On failure SQLite itself frees ``wait`` (the destructor runs).
    sqlite3_create_function_v2(db, "jobpool_busy_waits", 1, SQLITE_UTF8 | SQLITE_DIRECTONLY,
                               wait, _set_busy_waits, NULL, NULL, _free_busy_wait)
    return SQLITE_OK


if sqlite3_auto_extension(<void (*)() noexcept nogil>_on_open) != SQLITE_OK:
    raise ImportError("jobpool._core could not register its SQLite auto-extension; "
                      "using the pure driver")


@cython.final
cdef class Connection:
    """One connection to an existing store file, for one driver (see the module
    docstring). Not shared between threads: a driver belongs to one supervisor."""

    cdef sqlite3* _db
    cdef dict _prepared         # statement text -> _Prepared
    cdef BusyWait _busy         # the busy handler's state (``_busy_wait``)

    def __cinit__(self, *args, **kwargs):
        self._db = NULL
        self._prepared = {}

    def __init__(self, path, double busy_timeout):
        cdef bytes filename = os.fsencode(path)
        cdef const char* c_filename
        cdef sqlite3* db = NULL
        cdef double timeout_ms = busy_timeout * 1000.0
        cdef int rc
        if b"\0" in filename:
            raise ValueError("embedded null byte")
        c_filename = filename
        with nogil:
            # Never created here (no SQLITE_OPEN_CREATE): a store is made by its store.
            rc = sqlite3_open_v2(c_filename, &db, SQLITE_OPEN_READWRITE, _VFS)
        if rc != SQLITE_OK:
            exc = _db_error(db)
            sqlite3_close_v2(db)
            raise exc
        self._db = db
        self._busy.limit_us = <long long>(min(timeout_ms, <double>INT_MAX) * 1000.0)
        self._busy.waited_us = 0
        self._busy.first_us = BUSY_FIRST_US
        sqlite3_busy_handler(db, _busy_wait, &self._busy)

    def __dealloc__(self):
        self._close()

    cdef void _close(self) noexcept:
        # Statements first: close_v2 would otherwise keep the file open until they go.
        for prepared in self._prepared.values():
            sqlite3_finalize((<_Prepared>prepared).st)
            (<_Prepared>prepared).st = NULL
        self._prepared.clear()
        if self._db != NULL:
            sqlite3_close_v2(self._db)
            self._db = NULL

    def close(self):
        self._close()

    @property
    def in_transaction(self):
        return self._db != NULL and not sqlite3_get_autocommit(self._db)

    cdef _Prepared _statement(self, str text):
        cdef _Prepared prepared = self._prepared.get(text)
        cdef sqlite3_stmt* st = NULL
        cdef const char* tail = NULL
        cdef const char* c_text
        cdef const char* name
        cdef int rc, index, nbytes
        if prepared is not None:
            return prepared
        if self._db == NULL:
            raise SqliteError("the connection is closed", SQLITE_MISUSE)
        utf8 = text.encode("utf-8")
        c_text = utf8
        nbytes = <int>len(utf8) + 1
        with nogil:
            rc = sqlite3_prepare_v3(self._db, c_text, nbytes, SQLITE_PREPARE_PERSISTENT, &st,
                                    &tail)
        if rc != SQLITE_OK:
            exc = _db_error(self._db)
            sqlite3_finalize(st)
            raise exc
        if st == NULL or (tail != NULL and not _only_comments(tail)):
            sqlite3_finalize(st)
            raise SqliteError(f"not one statement: {text[:60]!r}", SQLITE_MISUSE)
        names = []
        for index in range(1, sqlite3_bind_parameter_count(st) + 1):
            name = sqlite3_bind_parameter_name(st, index)
            names.append(None if name == NULL else (<bytes>name)[1:].decode("utf-8"))
        prepared = _Prepared.__new__(_Prepared)
        prepared.st = st
        prepared.names = tuple(names)
        self._prepared[text] = prepared
        return prepared

    cdef sqlite3_stmt* _bound(self, str text, object params) except NULL:
        """The statement of ``text`` with ``params`` bound: a mapping by name, or a
        sequence by position."""
        cdef _Prepared prepared = self._statement(text)
        cdef sqlite3_stmt* st = prepared.st
        cdef int index = 0
        cdef int rc
        try:
            for name in prepared.names:
                index += 1
                try:
                    value = params[index - 1] if name is None else params[name]
                except (KeyError, IndexError, TypeError):
                    raise SqliteError(f"no value for parameter {name or index}",
                                      SQLITE_RANGE) from None
                rc = _bind_value(st, index, value)
                if rc != SQLITE_OK:
                    raise _db_error(self._db)
        except BaseException:
            sqlite3_clear_bindings(st)
            raise
        return st

    cdef list _run(self, str text, object params, bint lenient, bint want_rows):
        cdef sqlite3_stmt* st = self._bound(text, params)
        cdef int rc, i
        cdef int ncol = sqlite3_column_count(st)
        cdef list rows = [] if want_rows else None
        cdef tuple row
        try:
            while True:
                with nogil:
                    rc = sqlite3_step(st)
                if rc == SQLITE_DONE:
                    break
                if rc != SQLITE_ROW:
                    raise _db_error(self._db)
                if want_rows:
                    row = PyTuple_New(ncol)
                    for i in range(ncol):
                        value = _column(st, i, lenient)
                        Py_INCREF(value)
                        PyTuple_SET_ITEM(row, i, value)
                    rows.append(row)
        finally:
            sqlite3_reset(st)
            sqlite3_clear_bindings(st)
        return rows

    def rows(self, str text, params=()):
        """Run one statement; its rows as tuples."""
        return self._run(text, params, False, True)

    def lenient_rows(self, str text, params=()):
        """R44: ``rows``, with text that is not UTF-8 kept for the codec to name."""
        return self._run(text, params, True, True)

    def changes(self, str text, params=()):
        """Run one statement; how many rows it changed (0 for a statement that reads)."""
        cdef sqlite3_stmt* st
        self._run(text, params, False, False)
        st = (<_Prepared>self._prepared[text]).st
        return 0 if sqlite3_stmt_readonly(st) else sqlite3_changes(self._db)

    def plain_turn(self, str settle_text, tuple ends, str pick_text, str take_text, owner,
                   double now, double slack, tuple shares, long long want, list done):
        """R68: a whole turn whose every outcome is a success of a lease with no
        follow-ups but a chain's next step and a batch's count, stepped from here:
        ``BEGIN IMMEDIATE``, ``settle_text`` (the driver's ``SETTLE_DONE``, which writes
        the success's attempt line into its row, R61) bound straight from each ``(lease,
        outcome)`` pair of ``done``, and after the settle of a lease flagged
        ``FOLLOW_ENDS`` that held, its follow-ups from ``ends`` (``_settle_ends``), then, when
        ``want`` > 0, the claim of up to ``want`` rows shared among queues by ``shares``
        (``(queue, quota)`` pairs: ``queueplan.claim_in_shares``'s two passes, each
        queue up to its quota, then what is left from the queues that still had rows;
        each queue's claim is ``pick_text``, then ``take_text`` for each row picked: the
        driver's claim), then ``COMMIT``.
        Returns ``(settled, decoded)``: a ``Settled`` per pair, in order (``done``, or
        ``lost`` when the fenced update matched no row), and the claim's rows as
        ``decode_claims`` answers them, in claim order (R7).

        A row the C codec does not answer plainly (R44: the codec must read it), or
        past its deadline (R10: retired, not run), would need the engine's own turn:
        the transaction is rolled back, nothing applied, and the answer is None (the
        engine then runs its turn). A failure raises with the transaction still open:
        the caller rolls back (R26)."""
        cdef _Prepared prepared = self._statement(settle_text)
        cdef sqlite3_stmt* st = prepared.st
        cdef const unsigned char* fields
        cdef Py_ssize_t nfields, i
        cdef int rc
        cdef list settled = []
        cdef list decoded = []
        for share in shares:  # before anything is begun
            if not (isinstance(share, tuple) and len(<tuple>share) == 2):
                raise TypeError("plain_turn takes (queue, quota) shares")
        if prepared.done_fields is None:
            prepared.done_fields = _done_fields(prepared.names)
        fields = <const unsigned char*>PyBytes_AS_STRING(prepared.done_fields)
        nfields = len(prepared.done_fields)
        self._run("BEGIN IMMEDIATE", (), False, False)
        for lease, outcome in done:
            if not (isinstance(lease, tuple) and isinstance(outcome, tuple)):
                raise TypeError("plain_turn takes (Lease, Outcome) pairs")
            try:
                for i in range(nfields):
                    value = _done_value(fields[i], <tuple>lease, <tuple>outcome, owner, now)
                    rc = _bind_value(st, <int>i + 1, value)
                    if rc != SQLITE_OK:
                        raise _db_error(self._db)
                with nogil:
                    rc = sqlite3_step(st)
                if rc != SQLITE_DONE:
                    raise _db_error(self._db)
                changed = sqlite3_changes(self._db)
            finally:
                sqlite3_reset(st)
                sqlite3_clear_bindings(st)
            job_id, name, attempt = (<tuple>lease)[0], (<tuple>lease)[1], (<tuple>lease)[2]
            if changed == 1 and <long long>(<tuple>lease)[7] & _FOLLOW_ENDS:
                self._settle_ends(ends, job_id, <long long>(<tuple>lease)[7], now)
            settled.append(_record(Settled, (job_id, name, attempt, "done", None)) if changed == 1
                           else _record(Settled, (job_id, name, attempt, "lost", "lease lost")))
        cdef long long left, asked, taken
        cdef int second
        if want > 0:
            taking = {"owner": owner, "now": now, "slack": slack, "id": 0}
            emptied = set()
            for second in range(2):
                for share in shares:
                    queue = (<tuple>share)[0]
                    left = want - len(decoded)
                    if left <= 0:
                        break
                    if second:
                        if queue in emptied:
                            continue
                        asked = left
                    else:
                        asked = min(<long long>(<tuple>share)[1], left)
                        if asked <= 0:
                            continue
                    taken = self._claim_plain(pick_text, take_text, taking, queue, asked, now,
                                              decoded)
                    if taken < 0:
                        self._run("ROLLBACK", (), False, False)
                        return None
                    if taken < asked:
                        emptied.add(queue)
        self._run("COMMIT", (), False, False)
        return settled, decoded

    cdef int _settle_ends(self, tuple ends, object job_id, long long follow_ups,
                          double now) except -1:
        """``SqliteDriver.settle``'s follow-ups of a success that held, in its order: the
        chain's next step and its lane (R12, R35), unless the lease is a batch member
        with no chain (``FOLLOW_MEMBER``); a step the row's chain cannot make stops the
        chain there (R44: the statement failed alone, the row says why, the turn goes
        on); then its batch's count (R34; of no batch, no row). ``ends``: the driver's
        ``ENQUEUE_SUCCESSOR``, ``LANE_OF_LAST_ROW``, ``CHAIN_STOPPED`` and ``MEMBER_DONE``."""
        params = {"id": job_id, "now": now}
        if not follow_ups & _FOLLOW_MEMBER:
            try:
                self._run(ends[0], params, False, False)
            except SqliteError as exc:
                from jobpool.store.sqlite.statements import statement_failed_alone
                if not statement_failed_alone(exc, not sqlite3_get_autocommit(self._db)):
                    raise
                self._run(ends[2], {"id": job_id,
                                    "error": f"{row_codec.CHAIN_STOPPED} ({exc})"}, False, False)
            else:
                self._run(ends[1], (), False, False)
        self._run(ends[3], params, False, False)
        return 0

    cdef long long _claim_plain(self, str pick_text, str take_text, dict taking, object queue,
                                long long asked, double now, list decoded) except -2:
        """``plain_turn``'s claim of up to ``asked`` rows of ``queue``, appended to
        ``decoded`` in claim order (R7): how many it took, or -1 at a row the engine's
        own turn must settle (one the codec refuses, R44, or one past its deadline,
        R10). A row the C codec does not answer plainly is the Python codec's to read,
        as the engine's claim reads it."""
        found = self._run(pick_text, {"now": now, "queue": queue, "limit": asked}, True, True)
        for row in found:
            item = _plain_claim(row, queue, now, 0.0)
            if item is None:
                item = row_codec.decode_claim(row, queue, now, 0.0)
                if type(item) is not Decoded:
                    return -1  # Malformed: dead at once, by the engine's turn
            if (<tuple>item)[1].deadline is not None and (<tuple>item)[1].deadline < now:
                return -1
            taking["id"] = (<tuple>row)[0]
            self._run(take_text, taking, False, False)
            if sqlite3_changes(self._db) != 1:
                raise SqliteError(f"the claim of job {(<tuple>row)[0]} found it no longer ready")
            decoded.append(item)  # in claim order: the pick's ORDER BY (R7)
        return len(found)


# -- the compiled turn's settle (R68) ----------------------------------------------------

cdef enum:
    FROM_OUTCOME = 16   # a field code from here on is ``Outcome``'s field (code - 16)
    OWNER = 40          # the turn's owner
    NOW = 41            # the turn's now
    NOTHING = 42        # NULL

#: Each parameter ``SETTLE_DONE`` may name, and where ``plain_turn`` takes its value:
#: the same values ``SqliteDriver.settle`` binds for a success (``decide`` gives a
#: success no reason, its own crash count, and no delay). Below ``FROM_OUTCOME``, a
#: field of the ``Lease`` (job_id 0, attempt 2, crashes 4); from it, of the ``Outcome``
#: (result 5, pid 6, exit_status 7, peak_rss 8, cpu_s 9, strays 10).
_DONE_FIELDS = {"id": 0, "attempt": 2, "crashes": 4, "result": FROM_OUTCOME + 5,
                "pid": FROM_OUTCOME + 6, "exit_status": FROM_OUTCOME + 7,
                "peak_rss": FROM_OUTCOME + 8, "cpu_s": FROM_OUTCOME + 9,
                "strays": FROM_OUTCOME + 10, "owner": OWNER, "now": NOW, "run_at": NOW,
                "error": NOTHING}


cdef bytes _done_fields(tuple names):
    """The field code of each parameter of the settle's text, in order; a parameter the
    compiled turn does not know is an error (never a value left unbound)."""
    codes = []
    for name in names:
        code = _DONE_FIELDS.get(name)
        if code is None:
            raise SqliteError(f"the compiled turn binds no parameter {name!r}", SQLITE_RANGE)
        codes.append(code)
    return bytes(codes)


cdef inline object _done_value(unsigned char code, tuple lease, tuple outcome, object owner,
                               double now):
    if code < FROM_OUTCOME:
        return lease[code]
    if code < OWNER:
        return outcome[code - FROM_OUTCOME]
    if code == OWNER:
        return owner
    if code == NOW:
        return now
    return None


# -- the claim's codec (R44), accelerated ---------------------------------------------------

cdef inline bint _real(object value) noexcept:
    return type(value) is float or type(value) is int


cdef inline object _record(type cls, tuple fields):
    """A lifecycle record (a NamedTuple) by tuple's own constructor: half the cost of
    calling the class, whose ``__new__`` is a Python function."""
    return tuple.__new__(cls, fields)


cdef inline bint _utf8_text(object value):
    """``row_codec._utf8`` of a ``str``, ASCII answered here: no lone surrogate, which
    is how a store's bytes that are not UTF-8 are read (``bounds.not_unicode``)."""
    return (<str>value).isascii() or not _bounds.not_unicode(value)


cdef object _plain_claim(object row, object queue, double now, double to_pool_clock):
    """The codec's answer for a row whose every column is plainly sound (exact types,
    within bounds, UTF-8 text, a chain the codec's own rule passes); None for any other
    row, which the codec itself then reads. Never a row the codec would refuse (the
    property test). A chain (R12) is JSON only Python reads (``row_codec.chain``, the
    rule the codec applies), asked last, of a row sound in every other column.
    The batch id and metadata (R58) are carried as they are: an integer or NULL, and
    UTF-8 text or NULL. A payload read as text goes to the child as the codec sends it
    (its UTF-8 bytes, any bytes that were not UTF-8 given back as they were stored)."""
    if type(row) is not tuple or len(<tuple>row) != 16:
        return None
    (job_id, name, data, serializer, attempt, max_attempts, crashes, timeout, deadline,
     priority, line_at, follow_ups, run_at, chain, batch, meta) = <tuple>row
    if batch is not None and type(batch) is not int:
        return None
    if meta is not None and (type(meta) is not str or not _utf8_text(meta)):
        return None
    if (type(job_id) is not int or type(attempt) is not int or type(max_attempts) is not int
            or type(crashes) is not int or type(priority) is not int
            or type(follow_ups) is not int):
        return None
    if (not 1 <= attempt < INT32_MAX or max_attempts < 1 or not 0 <= crashes < INT32_MAX
            or not PRIORITY_MIN <= priority <= PRIORITY_MAX):
        return None
    if (type(name) is not str or not _utf8_text(name) or type(serializer) is not str
            or not _utf8_text(serializer)):
        return None
    if type(data) is str:
        if (<str>data).isascii():
            data = (<str>data).encode("ascii")
        else:
            try:
                data = (<str>data).encode("utf-8", "surrogateescape")
            except UnicodeEncodeError:
                return None
    elif type(data) is not bytes:
        return None
    if not (_real(timeout) and _real(line_at) and _real(run_at)):
        return None
    if not (timeout > 0 and isfinite(timeout) and isfinite(line_at) and isfinite(run_at)):
        return None
    if deadline is not None and not (_real(deadline) and deadline == deadline):
        return None
    if chain is not None and row_codec.chain(chain) is not None:
        return None
    return _record(Decoded, (
        _record(Lease, (job_id, name, attempt, max_attempts, crashes, deadline, now, follow_ups)),
        _record(Claimed, (job_id, name, data, serializer, attempt, float(timeout), deadline, queue,
                          float(run_at) + to_pool_clock, batch, meta)),
        priority, float(line_at)))


#: R68: ``protocol.SUCCESS`` ("=BqiqdB": tag, job id, attempt, peak RSS, CPU, retiring),
#: its size and its fields' offsets; tests/test_parity.py holds the two readers equal.
cdef enum:
    SUCCESS_SIZE = 30
    AT_JOB_ID = 1
    AT_ATTEMPT = 9
    AT_RSS = 13
    AT_CPU = 21
    AT_RETIRING = 29


cdef tuple _frame_fields(const unsigned char* at, Py_ssize_t size):
    """The fields of a zero-tagged message of ``size`` bytes, or ValueError."""
    cdef int64_t job_id, peak_rss
    cdef int32_t attempt
    cdef double cpu_s
    if size != SUCCESS_SIZE or at[AT_RETIRING] > 1:
        raise ValueError(f"a success frame of {size} bytes, not {SUCCESS_SIZE}, "
                         f"or its retiring flag not 0 or 1")
    memcpy(&job_id, at + AT_JOB_ID, 8)
    memcpy(&attempt, at + AT_ATTEMPT, 4)
    memcpy(&peak_rss, at + AT_RSS, 8)
    memcpy(&cpu_s, at + AT_CPU, 8)
    return (job_id, attempt, peak_rss, cpu_s, at[AT_RETIRING] == 1)


#: R65, from ``bounds``: copied into C once. (``MESSAGE_STALL`` is read from there
#: when a message stalls, as the pure reader reads it.)
cdef long long _MAX_MESSAGE_BYTES = MAX_MESSAGE_BYTES


cdef double _monotonic() noexcept nogil:
    cdef timespec now
    clock_gettime(CLOCK_MONOTONIC, &now)
    return now.tv_sec + now.tv_nsec * 1e-9


cdef int _read_exactly(int fd, char* into, Py_ssize_t size, bint begun) except -1:
    """Read ``size`` bytes from a pipe as ``channel._read_exactly`` does: EOFError at
    the end of the pipe before a message, OSError inside one, a signal's handler run
    (and what it raises raised) on EINTR. On an end that does not block (the
    supervisor's) it waits for the bytes, inside a message at most ``MESSAGE_STALL``
    seconds in all (R65: then ValueError, no message)."""
    cdef Py_ssize_t got = 0
    cdef ssize_t n
    cdef pollfd waiter
    cdef int ready, wait_ms
    cdef double give_up = -1.0, left, stall = 0.0
    while got < size:
        with nogil:
            n = read(fd, into + got, size - got)
        if n > 0:
            got += n
        elif n == 0:
            if got == 0 and not begun:
                raise EOFError
            raise OSError("got end of file during message")
        elif errno == EINTR:
            PyErr_CheckSignals()
        elif errno == EAGAIN or errno == EWOULDBLOCK:
            waiter.fd = fd
            waiter.events = POLLIN
            if got == 0 and not begun:
                wait_ms = -1  # before a message: as long as a blocking read would wait
            else:
                if give_up < 0:
                    stall = _bounds.MESSAGE_STALL
                    give_up = _monotonic() + stall
                left = give_up - _monotonic()
                wait_ms = 0 if left <= 0 else <int>(left * 1000.0) + 1
            with nogil:
                ready = poll(&waiter, 1, wait_ms)
            if ready < 0:
                if errno == EINTR:
                    PyErr_CheckSignals()
                    continue
                PyErr_SetFromErrno(OSError)
            if ready == 0 and wait_ms >= 0 and _monotonic() >= give_up:
                raise ValueError(f"a message stalled: {got} of its {size} bytes came "
                                 f"within {stall:g} s")  # R65: no message
        else:
            PyErr_SetFromErrno(OSError)
    return 0


def read_message(conn):
    """``conn.recv_bytes()`` with R68's success frame read on the way (what
    ``_core_py.read_message`` does in Python): the frame's fields, any other message's
    bytes, ValueError for a zero tag of the wrong size or a flag out of range. The
    length prefix is multiprocessing's (4 bytes big-endian, -1 then 8 for a long one);
    the header and the message are two reads, no buffer kept between calls."""
    return _read_message_from(conn.fileno())


cdef object _read_message_from(int fd):
    """``read_message`` off the pipe ``fd`` (the compiled pump reads with it too)."""
    cdef unsigned char header[8]
    cdef unsigned char frame[SUCCESS_SIZE]
    cdef long long size
    cdef int i
    _read_exactly(fd, <char*>header, 4, False)
    size = <int32_t>((<uint32_t>header[0] << 24) | (<uint32_t>header[1] << 16)
                     | (<uint32_t>header[2] << 8) | <uint32_t>header[3])
    if size == -1:
        _read_exactly(fd, <char*>header, 8, True)
        size = 0
        for i in range(8):
            size = (size << 8) | header[i]
    if size < 0 or size > _MAX_MESSAGE_BYTES:
        raise ValueError(f"a message length of {size}")  # R65: no message
    if size == SUCCESS_SIZE:
        _read_exactly(fd, <char*>frame, SUCCESS_SIZE, True)
        if frame[0] == 0:
            return _frame_fields(frame, SUCCESS_SIZE)
        return PyBytes_FromStringAndSize(<char*>frame, SUCCESS_SIZE)
    data = PyBytes_FromStringAndSize(NULL, size)
    _read_exactly(fd, PyBytes_AS_STRING(data), size, True)
    if size and (<unsigned char*>PyBytes_AS_STRING(data))[0] == 0:
        _frame_fields(<const unsigned char*>PyBytes_AS_STRING(data), size)  # raises
    return data


def write_message(conn, bytes data not None):
    """``conn.send_bytes(data)`` (what ``_core_py.write_message`` calls) in one system
    call: multiprocessing's length prefix (4 bytes big-endian; -1 then 8 for a message
    over 2 GiB) and the bytes written together (``writev``), a partial write carried
    on as ``Connection._send`` does; OSError when the other end is gone, a signal's
    handler run (and what it raises raised) on EINTR. ``data`` is ``bytes`` (what
    ``protocol`` builds), never another buffer. ``conn`` is a ``channel.Channel``: the
    bytes go to its ``write_fileno``."""
    _write_message_to(conn.write_fileno(), data)


cdef int _write_message_to(int fd, bytes data) except -1:
    """``write_message`` onto the pipe ``fd`` (the compiled pump dispatches with it)."""
    cdef unsigned long long size = <unsigned long long>PyBytes_GET_SIZE(data)
    cdef unsigned char header[12]
    cdef iovec parts[2]
    cdef ssize_t n
    cdef size_t left
    cdef int i
    if size > 0x7fffffff:
        for i in range(4):
            header[i] = 0xff
        for i in range(8):
            header[4 + i] = (size >> (8 * (7 - i))) & 0xff
        parts[0].iov_len = 12
    else:
        for i in range(4):
            header[i] = (size >> (8 * (3 - i))) & 0xff
        parts[0].iov_len = 4
    parts[0].iov_base = header
    parts[1].iov_base = PyBytes_AS_STRING(data)
    parts[1].iov_len = size
    left = parts[0].iov_len + size
    while left:
        with nogil:
            n = writev(fd, parts, 2)
        if n < 0:
            if errno == EINTR:
                PyErr_CheckSignals()
                continue
            PyErr_SetFromErrno(OSError)
        left -= <size_t>n
        if <size_t>n >= parts[0].iov_len:
            n -= parts[0].iov_len
            parts[0].iov_len = 0
            parts[1].iov_base = <char*>parts[1].iov_base + n
            parts[1].iov_len -= <size_t>n
        else:
            parts[0].iov_base = <char*>parts[0].iov_base + n
            parts[0].iov_len -= <size_t>n
    return 0


def _claim_order(decoded):
    # R7: priority first, then line, then id (as ``row_codec.decode_claims`` sorts).
    return (-decoded[2], decoded[3], decoded[1][0])


def decode_claims(rows, queue, double now, double to_pool_clock=0.0):
    """``row_codec.decode_claims``, answered in C where a row is plainly sound."""
    cdef list decoded = []
    cdef list refused = []
    for row in rows:
        item = _plain_claim(row, queue, now, to_pool_clock)
        if item is None:
            item = row_codec.decode_claim(row, queue, now, to_pool_clock)
            if type(item) is row_codec.Malformed:
                refused.append(item)
                continue
        decoded.append(item)
    if len(decoded) > 1:
        decoded.sort(key=_claim_order)
    return decoded, refused


# -- slots (R6, R20) ---------------------------------------------------------------------

@cython.final
cdef class SlotTable:
    """Which job each slot runs and when its hard timeout falls (R6, R20).

    A slot is reserved (``assign``) for a job the moment it is dispatched, and the
    supervisor claims at most ``len(free_slots())`` rows, so no lease is ever held
    for a job that waits for a child.
    """

    cdef list _jobs
    cdef double* _deadlines
    cdef Py_ssize_t _capacity

    def __cinit__(self, *args, **kwargs):
        self._jobs = []
        self._deadlines = NULL
        self._capacity = 0

    def __init__(self, Py_ssize_t size):
        self._jobs = []
        self._grow(size)

    def __dealloc__(self):
        free(self._deadlines)
        self._deadlines = NULL

    cdef int _grow(self, Py_ssize_t size) except -1:
        cdef Py_ssize_t n = len(self._jobs)
        cdef Py_ssize_t capacity
        cdef double* grown
        if size <= n:
            return 0
        if size > self._capacity:
            capacity = max(size, 2 * self._capacity, 8)
            grown = <double*>realloc(self._deadlines, capacity * sizeof(double))
            if grown == NULL:
                raise MemoryError()
            self._deadlines = grown
            self._capacity = capacity
        while n < size:
            self._jobs.append(None)
            self._deadlines[n] = INFINITY
            n += 1
        return 0

    cdef inline Py_ssize_t _index(self, Py_ssize_t slot, str message) except -1:
        # A list's index semantics, negative indices included.
        cdef Py_ssize_t n = len(self._jobs)
        if slot < 0:
            slot += n
        if slot < 0 or slot >= n:
            raise IndexError(message)
        return slot

    @property
    def size(self):
        return len(self._jobs)

    def resize(self, Py_ssize_t size):
        """Grow at once; shrink only over idle slots at the end (R27)."""
        self._grow(size)
        while len(self._jobs) > size and self._jobs[len(self._jobs) - 1] is None:
            self._jobs.pop()

    def free_slots(self):
        cdef list jobs = self._jobs
        return [i for i in range(len(jobs)) if jobs[i] is None]

    cpdef Py_ssize_t busy_count(self):
        cdef Py_ssize_t i, busy = 0
        cdef list jobs = self._jobs
        for i in range(len(jobs)):
            if jobs[i] is not None:
                busy += 1
        return busy

    cpdef assign(self, Py_ssize_t slot, job_id, attempt, double deadline):
        cdef Py_ssize_t i = self._index(slot, "list index out of range")
        if self._jobs[i] is not None:
            raise ValueError(f"slot {slot} is busy")
        self._jobs[i] = (job_id, attempt)
        self._deadlines[i] = deadline

    cpdef clear(self, Py_ssize_t slot):
        cdef Py_ssize_t i = self._index(slot, "list index out of range")
        job = self._jobs[i]
        self._jobs[i] = None
        self._deadlines[i] = INFINITY
        return job

    def extend_deadline(self, Py_ssize_t slot, double deadline):
        self._deadlines[self._index(slot, "list assignment index out of range")] = deadline

    cpdef double next_deadline(self):
        # min() semantics: the first element, replaced only by a smaller one.
        cdef Py_ssize_t i, n = len(self._jobs)
        cdef double best
        if n == 0:
            return INFINITY
        best = self._deadlines[0]
        for i in range(1, n):
            if self._deadlines[i] < best:
                best = self._deadlines[i]
        return best

    def overdue(self, double now):
        cdef Py_ssize_t n = len(self._jobs)
        return [i for i in range(n) if self._deadlines[i] <= now]




# -- a child's checks after each job (R40, R43), as ``_core_py``'s ---------------------------

cdef class _Kept:
    """What ``OpenFiles`` and ``Limits`` share: items kept as they were when made, each
    asked after a job whether it moved (``_moved``), and named by ``_item`` in the
    answer to ``changed``."""

    cdef int _count

    cdef bint _moved(self, int i) noexcept:
        return False

    cdef int _item(self, int i) noexcept:
        return 0

    cdef bint _any_changed(self) noexcept:
        cdef int i
        for i in range(self._count):
            if self._moved(i):
                return True
        return False

    def changed(self):
        cdef int i
        return tuple([self._item(i) for i in range(self._count) if self._moved(i)])


cdef class OpenFiles(_Kept):
    """``_core_py.OpenFiles``: the descriptors' files looked at with ``fstat`` in C, no
    stat result built (R43's question after every job)."""

    cdef int _fds[8]
    cdef dev_t _devs[8]
    cdef ino_t _inos[8]

    def __init__(self, identities):
        identities = list(identities)
        if len(identities) > 8:
            raise ValueError(f"{len(identities)} descriptors; at most 8")
        self._count = 0
        for fd, dev, ino in identities:
            self._fds[self._count] = fd
            self._devs[self._count] = dev
            self._inos[self._count] = ino
            self._count += 1

    cdef bint _moved(self, int i) noexcept:
        """Whether the ``i``-th descriptor no longer names its file (closed, or another)."""
        cdef struct_stat st
        return (fstat(self._fds[i], &st) != 0 or st.st_dev != self._devs[i]
                or st.st_ino != self._inos[i])

    cdef int _item(self, int i) noexcept:
        return self._fds[i]


cdef class Limits(_Kept):
    """``_core_py.Limits``: the resource limits looked at with ``getrlimit`` in C, no
    tuple built per limit (the child's question after every job, R20)."""

    cdef int _resources[16]
    cdef rlimit _limits[16]

    def __init__(self, resources):
        cdef int at
        cdef list wanted = list(resources)
        if len(wanted) > 16:
            raise ValueError(f"{len(wanted)} resource limits; at most 16")
        for at in range(len(wanted)):
            self._resources[at] = wanted[at]
            if getrlimit(self._resources[at], &self._limits[at]) != 0:
                raise OSError(errno, f"getrlimit({wanted[at]})")
        self._count = len(wanted)

    cdef bint _moved(self, int i) noexcept:
        """Whether the ``i``-th resource's limits are not what they were."""
        cdef rlimit now
        return (getrlimit(self._resources[i], &now) != 0 or now.rlim_cur != self._limits[i].rlim_cur
                or now.rlim_max != self._limits[i].rlim_max)

    cdef int _item(self, int i) noexcept:
        return self._resources[i]


cdef extern from "<sys/socket.h>" nogil:
    ctypedef unsigned int socklen_t
    struct sockaddr:
        pass
    ssize_t sendto(int fd, const void* buf, size_t n, int flags, const sockaddr* addr,
                   socklen_t addrlen)
    int MSG_DONTWAIT
    int MSG_NOSIGNAL


cdef extern from "<sys/un.h>" nogil:
    struct sockaddr_un:
        unsigned short sun_family
        char sun_path[108]
    int AF_UNIX


cdef extern from "<errno.h>" nogil:
    int ECONNREFUSED
    int ENOENT


def wake(sock, tuple addresses):
    """``_core_py.wake``, its ``sendto`` calls made in C: no exception is raised and
    caught for the first place nobody listens on, which every enqueue meets."""
    cdef sockaddr_un addr
    cdef int fd = sock.fileno()
    cdef Py_ssize_t size
    cdef ssize_t sent
    cdef int err
    cdef size_t path_at = <size_t>(<char*>addr.sun_path - <char*>&addr)
    addr.sun_family = AF_UNIX
    for address in addresses:
        size = PyBytes_GET_SIZE(<bytes>address)
        if size > <Py_ssize_t>sizeof(addr.sun_path):
            raise ValueError(f"a wake-up address of {size} bytes")
        memcpy(addr.sun_path, PyBytes_AS_STRING(<bytes>address), size)
        sent = sendto(fd, b"!", 1, MSG_DONTWAIT | MSG_NOSIGNAL, <sockaddr*>&addr,
                      <socklen_t>(path_at + size))
        if sent < 0:
            err = errno
            if err == ECONNREFUSED or err == ENOENT:
                return  # nobody listens here, so nobody above (``wakeup``'s docstring)
            # else its buffer is full (it is awake anyway) or the socket failed: go on


cdef bint _has_children() except -1:
    """``waitid`` with ``WNOWAIT``: whether this process has a child, running or not yet
    reaped; ECHILD (none) raises nothing."""
    cdef siginfo_t info
    cdef int failed = waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT)
    cdef int err = errno  # read before any Python object is made
    if failed == 0:
        return True
    if err == ECHILD:
        return False
    raise OSError(err, os.strerror(err))


def has_children():
    """``_core_py.has_children``, the ``waitid`` made in C (no exception raised when
    there is no child, the common case after a job)."""
    return _has_children()


cdef extern from "<signal.h>" nogil:
    int sigemptyset(sigset_t* sigs)
    int sigaddset(sigset_t* sigs, int signum)
    int pthread_sigmask(int how, const sigset_t* sigs, sigset_t* old)
    int SIG_SETMASK


cdef extern from "<sys/time.h>" nogil:
    cdef struct timeval:
        long tv_sec
        long tv_usec
    cdef struct itimerval:
        timeval it_interval
        timeval it_value
    int getitimer(int which, itimerval* value)
    int setitimer(int which, const itimerval* value, itimerval* old)
    int ITIMER_REAL


cdef extern from "<sys/times.h>" nogil:
    ctypedef long clock_t
    cdef struct tms:
        clock_t tms_utime
        clock_t tms_stime
        clock_t tms_cutime
        clock_t tms_cstime
    clock_t times(tms* buf)


cdef extern from "<sys/stat.h>" nogil:
    unsigned int umask(unsigned int mask)


cdef enum:
    # ``JobEnd.look``'s flags (the class's names for them below).
    LOOK_HANDLERS = 1
    LOOK_STRAYS = 2
    LOOK_PIPES = 4
    LOOK_LIMITS = 8
    LOOK_STREAMS = 16


cdef inline double _cpu_clock(double ticks) noexcept:
    """This process's CPU and its reaped processes', as ``os.times`` adds them up."""
    cdef tms spent
    times(&spent)
    return (spent.tms_utime + spent.tms_stime + spent.tms_cutime + spent.tms_cstime) / ticks


cdef class JobEnd:
    """``_core_py.JobEnd`` (the reference: what is looked at, in which order, and why),
    its system calls made in C: no Python step between them, no result built but the
    flags, ``cpu`` and ``peak_rss``."""

    HANDLERS, STRAYS, PIPES, LIMITS, STREAMS = (LOOK_HANDLERS, LOOK_STRAYS, LOOK_PIPES,
                                                LOOK_LIMITS, LOOK_STREAMS)

    cdef sigset_t _mask
    cdef tuple _handlers
    cdef object _getsignal
    cdef OpenFiles _pipes
    cdef Limits _limits
    cdef unsigned int _umask
    cdef bytes _cwd
    cdef object _streams, _sys
    cdef double _ticks
    #: What the last ``look`` read: seconds of CPU, and the peak RSS in bytes.
    cdef public double cpu
    cdef public long long peak_rss

    def __init__(self, mask, handlers, OpenFiles pipes not None, Limits limits not None,
                 int umask, cwd, streams=None):
        import _signal
        import sys
        sigemptyset(&self._mask)
        for signum in mask:
            if sigaddset(&self._mask, int(signum)) != 0:
                raise ValueError(f"not a signal: {signum!r}")
        self._handlers = tuple([(int(signum), handler) for signum, handler in handlers
                                if handler is not None])
        self._getsignal = _signal.getsignal
        self._pipes, self._limits = pipes, limits
        self._umask = umask
        self._cwd = None if cwd is None else os.fsencode(cwd)
        self._streams, self._sys = streams, sys
        self._ticks = sysconf(_SC_CLK_TCK)
        self.cpu = 0.0
        self.peak_rss = 0

    def clock(self):
        """``_core_py.JobEnd.clock``: one ``times`` call."""
        return _cpu_clock(self._ticks)

    def look(self):
        cdef itimerval timer
        cdef rusage usage
        cdef int flags = 0
        if getitimer(ITIMER_REAL, &timer) == 0 and (timer.it_value.tv_sec or timer.it_value.tv_usec):
            memset(&timer, 0, sizeof(timer))
            setitimer(ITIMER_REAL, &timer, NULL)
        pthread_sigmask(SIG_SETMASK, &self._mask, NULL)
        for signum, handler in self._handlers:
            if self._getsignal(signum) != handler:
                flags |= LOOK_HANDLERS
                break
        if _has_children():
            flags |= LOOK_STRAYS
        self.cpu = _cpu_clock(self._ticks)
        if self._pipes._any_changed():
            flags |= LOOK_PIPES
        umask(self._umask)
        if self._cwd is not None:
            chdir(self._cwd)  # a directory removed meanwhile: left as the job left it
        if self._limits._any_changed():
            flags |= LOOK_LIMITS
        streams = self._streams
        if streams is not None:
            if (<OpenFiles?>streams.files)._any_changed():
                flags |= LOOK_STREAMS
            else:
                for name, stream in (<dict?>streams.objects).items():
                    if getattr(self._sys, name, None) is not stream or stream is None or stream.closed:
                        flags |= LOOK_STREAMS
                        break
        getrusage(RUSAGE_SELF, &usage)
        self.peak_rss = <long long>usage.ru_maxrss * 1024  # KiB on Linux
        return flags


include "_pump.pxi"
