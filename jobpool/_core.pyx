# cython: language_level=3, boundscheck=True, wraparound=True, cdivision=False
"""The compiled claim/settle core; ``_core_py.py`` is its readable twin.

Same names, signatures and behaviour as ``jobpool._core_py`` (that module is the
specification; read it first). The difference is the road to SQLite: ``Core``
opens its own connection through the C API of the system's shared libsqlite3
(the library Python's ``sqlite3`` module uses too, so one process never holds
two copies of SQLite's POSIX lock tables), prepares each statement once, binds
parameters by name and steps without the GIL, since a step may sleep in the busy
handler.

Every SQL text comes from ``jobpool.store.sqlite.statements``. SQLite failures are raised as
the same ``sqlite3.Error`` subclasses Python's module raises (with
``sqlite_errorcode``/``sqlite_errorname``) and surface, as in the twin, as
``StoreError("<what> failed: <sqlite message>")`` chained to that error.

Boundscheck and wraparound stay on in this module: outcomes are caller tuples
and the twin's negative-index semantics (``KIND_NAMES[kind]``,
``causes[-crashes:]``) must hold. Not thread-safe: one supervisor thread owns a
``Core``; a nested call (from a signal handler, say) that would open a second
transaction fails like the twin's, and ``close()`` during an operation is
deferred until that operation ends.
"""
cimport cython
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_CheckBuffer, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.long cimport PyLong_AsLongLongAndOverflow
from cpython.ref cimport Py_INCREF, PyObject
from cpython.tuple cimport PyTuple_New, PyTuple_SET_ITEM
from cpython.unicode cimport PyUnicode_AsUTF8AndSize, PyUnicode_DecodeUTF8
from libc.limits cimport INT_MAX
from libc.math cimport INFINITY, isfinite
from libc.stdlib cimport free, qsort, realloc

import json
import os
import sqlite3 as _pysqlite  # exception classes and adapters only; same shared libsqlite3

from jobpool.errors import StoreError
# The transitions are decided in jobpool.lifecycle, written once for both cores and
# every store; this module applies them to SQLite (claim, statement stepping, slots).
from jobpool.lifecycle import (CANCEL, CRASH, DEADLINE_PASSED, DEFAULT_POLICY, DEFER, DONE, ERROR,
                               EXPIRED, FOLLOW_ALL, FOLLOW_ENDS, FOLLOW_LANE,
                               FATAL, KIND_NAMES, LEASE_SLACK, OWNER_DIED, RELEASE, RESCHEDULE,
                               RETRY, TIMEOUT, Claimed, Lease, Outcome, Policy, Settled, backoff,
                               decide, with_reason)  # the core's API
from jobpool.limits import charge, plan_claim, sooner
from jobpool.queueplan import claim_in_shares
from jobpool.store import row_codec
from jobpool.store.sqlite import statements as sql
from jobpool.store.limit_claim import SqlLimitedSource, sqlite_limited_claim


cdef extern from "sqlite3.h" nogil:
    ctypedef struct sqlite3
    ctypedef struct sqlite3_stmt
    ctypedef long long sqlite3_int64
    ctypedef void (*sqlite3_destructor_type)(void*)
    ctypedef int (*sqlite3_callback)(void*, int, char**, char**)

    int SQLITE_OK
    int SQLITE_ERROR
    int SQLITE_INTERNAL
    int SQLITE_PERM
    int SQLITE_ABORT
    int SQLITE_BUSY
    int SQLITE_LOCKED
    int SQLITE_NOMEM
    int SQLITE_READONLY
    int SQLITE_INTERRUPT
    int SQLITE_IOERR
    int SQLITE_CORRUPT
    int SQLITE_NOTFOUND
    int SQLITE_FULL
    int SQLITE_CANTOPEN
    int SQLITE_PROTOCOL
    int SQLITE_EMPTY
    int SQLITE_SCHEMA
    int SQLITE_TOOBIG
    int SQLITE_CONSTRAINT
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
    int sqlite3_busy_timeout(sqlite3* db, int ms)
    int sqlite3_exec(sqlite3* db, const char* text, sqlite3_callback cb, void* arg, char** errmsg)
    void sqlite3_free(void* p)
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

    int sqlite3_bind_parameter_count(sqlite3_stmt* stmt)
    int sqlite3_bind_parameter_index(sqlite3_stmt* stmt, const char* name)
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


cdef extern from *:
    """
    static const char *jobpool_type_name(PyObject *o) { return Py_TYPE(o)->tp_name; }
    """
    const char* jobpool_type_name(PyObject* o)


# Prepared statements, one slot each; all but the transaction verbs are prepared
# on first use (as the twin's statements are), then kept until close().
cdef enum:
    S_BEGIN = 0
    S_COMMIT
    S_ROLLBACK
    S_CLAIM
    S_DONE
    S_SUCCESSOR
    S_RETRY
    S_DEAD
    S_DEFER
    S_RESCHEDULE
    S_RELEASE
    S_ATTEMPT
    S_CAUSES
    S_RECLAIM
    S_RECLAIM_OWNER
    S_OWNERS
    S_REQUEUE
    S_INTERRUPT
    S_MEMBER_DONE
    S_MEMBER_DEAD
    S_LANE_READY
    S_CLAIM_IDS
    S_LANE_OF_LAST
    NSTMT

# Named parameters the core supplies; their indices are looked up per statement
# once, when it is prepared.
cdef enum:
    P_ID = 0
    P_OWNER
    P_ATTEMPT
    P_NOW
    P_RESULT
    P_ERROR
    P_CRASHES
    P_RUN_AT
    P_SLACK
    P_QUEUE
    P_LIMIT
    P_PID
    P_STARTED_AT
    P_OUTCOME
    P_EXIT_STATUS
    P_PEAK_RSS
    P_CPU_S
    P_STRAYS
    P_IDS
    NPARAM

_PARAM_NAMES = (":id", ":owner", ":attempt", ":now", ":result", ":error", ":crashes",
                ":run_at", ":slack", ":queue", ":limit", ":pid", ":started_at", ":outcome",
                ":exit_status", ":peak_rss", ":cpu_s", ":strays", ":ids")
_PARAM_NAMES_UTF8 = tuple(p.encode() for p in _PARAM_NAMES)

cdef enum:
    V_INT = 1
    V_DOUBLE = 2
    V_OBJECT = 3

ctypedef struct Value:
    int kind
    sqlite3_int64 i
    double d
    PyObject* o     # borrowed: the caller keeps it alive until the step is done

ctypedef struct RowKey:
    # One claimed row's place in claim order (R7): priority desc, line_at, id.
    bint int_priority
    sqlite3_int64 ipriority
    double priority
    double line_at
    sqlite3_int64 id
    Py_ssize_t index

# The claim's RETURNING columns, in order.
cdef enum:
    C_ID = 0
    C_NAME
    C_PAYLOAD
    C_SERIALIZER
    C_ATTEMPTS
    C_MAX_ATTEMPTS
    C_CRASHES
    C_TIMEOUT
    C_DEADLINE
    C_PRIORITY
    C_LINE_AT
    C_CHAINED
    C_RUN_AT
    C_CHAIN
    NCLAIMCOLS

cdef inline object _record(type cls, tuple fields):
    """A lifecycle record (a NamedTuple) from its fields, by tuple's own constructor:
    half the cost of calling the class, whose ``__new__`` is a Python function."""
    return tuple.__new__(cls, fields)


#: ``lifecycle.Decision.statement`` -> the statement slot that applies it.
_SETTLE_STATEMENTS = {"done": S_DONE, "retry": S_RETRY, "dead": S_DEAD, "defer": S_DEFER,
                      "reschedule": S_RESCHEDULE, "release": S_RELEASE, "requeue": S_REQUEUE,
                      "interrupt": S_INTERRUPT}
if _SETTLE_STATEMENTS.keys() != sql.SETTLE.keys():
    raise ImportError("jobpool._core's settle statements differ from jobpool.store.sqlite.statements.SETTLE")


# -- slots (R6, R20) -----------------------------------------------------------------

def _same_sqlite_as_python():
    """R42: the address of ``sqlite3_libversion`` as this module was linked against
    it, and as the library Python's ``sqlite3`` module loaded resolves it. Two copies
    of SQLite in one process keep two tables of POSIX locks, and closing a file in
    one drops the other's locks: the compiled core refuses to load beside a
    different copy (the pure core, over Python's module, takes its place)."""
    import ctypes
    import _sqlite3
    ours = <size_t>&sqlite3_libversion
    theirs = ctypes.cast(ctypes.CDLL(_sqlite3.__file__).sqlite3_libversion, ctypes.c_void_p).value
    return ours, theirs


_ours, _theirs = _same_sqlite_as_python()
if _ours != _theirs:
    raise ImportError(f"jobpool._core links a libsqlite3 other than the one Python's sqlite3 "
                      f"module loaded ({_ours:#x} != {_theirs or 0:#x}); using the pure core")


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

    def busy_count(self):
        cdef Py_ssize_t i, busy = 0
        cdef list jobs = self._jobs
        for i in range(len(jobs)):
            if jobs[i] is not None:
                busy += 1
        return busy

    def assign(self, Py_ssize_t slot, job_id, attempt, double deadline):
        cdef Py_ssize_t i = self._index(slot, "list index out of range")
        if self._jobs[i] is not None:
            raise ValueError(f"slot {slot} is busy")
        self._jobs[i] = (job_id, attempt)
        self._deadlines[i] = deadline

    def clear(self, Py_ssize_t slot):
        cdef Py_ssize_t i = self._index(slot, "list index out of range")
        job = self._jobs[i]
        self._jobs[i] = None
        self._deadlines[i] = INFINITY
        return job

    def extend_deadline(self, Py_ssize_t slot, double deadline):
        self._deadlines[self._index(slot, "list assignment index out of range")] = deadline

    def next_deadline(self):
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


# -- errors: what Python's sqlite3 module would have raised ---------------------------

_PRIMARY_NAMES = {
    0: "SQLITE_OK", 1: "SQLITE_ERROR", 2: "SQLITE_INTERNAL", 3: "SQLITE_PERM",
    4: "SQLITE_ABORT", 5: "SQLITE_BUSY", 6: "SQLITE_LOCKED", 7: "SQLITE_NOMEM",
    8: "SQLITE_READONLY", 9: "SQLITE_INTERRUPT", 10: "SQLITE_IOERR", 11: "SQLITE_CORRUPT",
    12: "SQLITE_NOTFOUND", 13: "SQLITE_FULL", 14: "SQLITE_CANTOPEN", 15: "SQLITE_PROTOCOL",
    16: "SQLITE_EMPTY", 17: "SQLITE_SCHEMA", 18: "SQLITE_TOOBIG", 19: "SQLITE_CONSTRAINT",
    20: "SQLITE_MISMATCH", 21: "SQLITE_MISUSE", 22: "SQLITE_NOLFS", 23: "SQLITE_AUTH",
    24: "SQLITE_FORMAT", 25: "SQLITE_RANGE", 26: "SQLITE_NOTADB", 27: "SQLITE_NOTICE",
    28: "SQLITE_WARNING", 100: "SQLITE_ROW", 101: "SQLITE_DONE",
}
cdef dict _error_names = None


cdef object _error_name(int code):
    """``sqlite_errorname`` for an (extended) result code, as Python's module names it."""
    global _error_names
    if _error_names is None:
        names = dict(_PRIMARY_NAMES)
        for attr in dir(_pysqlite):
            value = getattr(_pysqlite, attr)
            if type(value) is int and value > 255 and (value & 0xff) in _PRIMARY_NAMES \
                    and attr.startswith(_PRIMARY_NAMES[value & 0xff] + "_"):
                names[value] = attr
        _error_names = names
    return _error_names.get(code)


cdef object _error_class(int code):
    if code == SQLITE_INTERNAL or code == SQLITE_NOTFOUND:
        return _pysqlite.InternalError
    if (code == SQLITE_ERROR or code == SQLITE_PERM or code == SQLITE_ABORT or code == SQLITE_BUSY
            or code == SQLITE_LOCKED or code == SQLITE_READONLY or code == SQLITE_INTERRUPT
            or code == SQLITE_IOERR or code == SQLITE_FULL or code == SQLITE_CANTOPEN
            or code == SQLITE_PROTOCOL or code == SQLITE_EMPTY or code == SQLITE_SCHEMA
            or code == SQLITE_OK):
        return _pysqlite.OperationalError
    if code == SQLITE_TOOBIG:
        return _pysqlite.DataError
    if code == SQLITE_CONSTRAINT or code == SQLITE_MISMATCH:
        return _pysqlite.IntegrityError
    if code == SQLITE_MISUSE or code == SQLITE_RANGE:
        return _pysqlite.InterfaceError
    return _pysqlite.DatabaseError


cdef object _db_error(sqlite3* db):
    """The exception for the connection's last error (read it before anything else runs)."""
    cdef int code
    cdef int extended
    if db == NULL:
        return MemoryError()
    code = sqlite3_errcode(db)
    if code == SQLITE_NOMEM:
        return MemoryError()
    extended = sqlite3_extended_errcode(db)
    message = (<bytes>sqlite3_errmsg(db)).decode("utf-8", "replace")
    exc = _error_class(code)(message)
    exc.sqlite_errorcode = extended
    exc.sqlite_errorname = _error_name(extended)
    return exc


cdef object _programming_error(message):
    return _pysqlite.ProgrammingError(message)


cdef inline bint _only_comments(const char* p) noexcept:
    """True if ``p`` holds nothing but whitespace and SQL comments (one statement only)."""
    while p[0] != 0:
        if p[0] == b' ' or p[0] == b'\t' or p[0] == b'\n' or p[0] == b'\r' or p[0] == b'\f':
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


# -- values in and out, as Python's sqlite3 module converts them ---------------------

cdef int _bind_value(sqlite3_stmt* st, int index, object value) except -1:
    """Bind ``value`` the way Python's module does (adapters, then by type); return rc."""
    cdef type t = type(value)
    cdef sqlite3_int64 i
    cdef int overflow = 0
    cdef const char* text
    cdef Py_ssize_t size = 0
    cdef Py_buffer view
    cdef int rc
    cdef sqlite3_destructor_type keep = SQLITE_STATIC
    if value is None:
        return sqlite3_bind_null(st, index)
    if t is not int and t is not float and t is not str and t is not bytes:
        adapted = _pysqlite.adapt(value, _pysqlite.PrepareProtocol, value)
        if adapted is not value:
            # A new object dies with this frame: SQLite must copy it.
            keep = SQLITE_TRANSIENT
            value = adapted
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
        # Static unless adapted: the caller holds ``value`` until the statement is
        # reset and its bindings cleared.
        return sqlite3_bind_text(st, index, text, <int>size, keep)
    if isinstance(value, bytes):
        size = PyBytes_GET_SIZE(value)
        if size > INT_MAX:
            raise OverflowError("BLOB longer than INT_MAX bytes")
        return sqlite3_bind_blob(st, index, PyBytes_AS_STRING(value), <int>size, keep)
    if PyObject_CheckBuffer(value):
        PyObject_GetBuffer(value, &view, PyBUF_SIMPLE)
        try:
            if view.len > INT_MAX:
                raise OverflowError("BLOB longer than INT_MAX bytes")
            rc = sqlite3_bind_blob(st, index, view.buf, <int>view.len, SQLITE_TRANSIENT)
        finally:
            PyBuffer_Release(&view)
        return rc
    raise _programming_error(f"Error binding parameter {index}: type "
                             f"'{jobpool_type_name(<PyObject*>value).decode()}' is not supported")


cdef object _column(sqlite3_stmt* st, int col):
    """One column as Python's module returns it (no converters, text as str)."""
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
        try:
            return PyUnicode_DecodeUTF8(<char*>text, sqlite3_column_bytes(st, col), NULL)
        except UnicodeDecodeError:
            name = (<bytes>sqlite3_column_name(st, col)).decode("utf-8", "replace")
            raise _pysqlite.OperationalError(
                f"Could not decode to UTF-8 column '{name}' with text "
                f"'{(<bytes>text).decode('utf-8', 'replace')}'") from None
    return PyBytes_FromStringAndSize(<char*>sqlite3_column_blob(st, col),
                                     sqlite3_column_bytes(st, col))


cdef object _column_bytes(sqlite3_stmt* st, int col):
    """A payload column as bytes, whether it was stored as TEXT or as BLOB."""
    cdef int t = sqlite3_column_type(st, col)
    cdef const char* data
    if t == SQLITE_TEXT:
        data = <const char*>sqlite3_column_text(st, col)   # UTF-8 whatever the file's encoding
        if data == NULL:
            raise MemoryError()
    elif t == SQLITE_BLOB:
        data = <const char*>sqlite3_column_blob(st, col)
    else:
        return _column(st, col)     # the twin passes a non-text value through unchanged
    return PyBytes_FromStringAndSize(<char*>data, sqlite3_column_bytes(st, col))


cdef tuple _row(sqlite3_stmt* st, int ncol, bint lenient=False):
    """A row as Python's module returns it (``lenient``: text that is not UTF-8 kept
    for the codec, R44)."""
    cdef tuple row = PyTuple_New(ncol)
    cdef int i
    for i in range(ncol):
        value = _column_lenient(st, i) if lenient else _column(st, i)
        Py_INCREF(value)
        PyTuple_SET_ITEM(row, i, value)
    return row


cdef object _column_lenient(sqlite3_stmt* st, int col):
    """R44: one column as ``_column`` reads it, except text that is not UTF-8, kept
    as lone surrogates (``row_codec.lenient_text``) for the codec to name."""
    cdef const char* text
    if sqlite3_column_type(st, col) != SQLITE_TEXT:
        return _column(st, col)
    text = <const char*>sqlite3_column_text(st, col)
    if text == NULL:
        raise MemoryError()
    return PyUnicode_DecodeUTF8(<char*>text, sqlite3_column_bytes(st, col), "surrogateescape")


cdef object _utf8_or_none(sqlite3_stmt* st, int col):
    """A TEXT column as str, or None when it is not UTF-8 (the codec then names it)."""
    cdef const char* text = <const char*>sqlite3_column_text(st, col)
    if text == NULL:
        raise MemoryError()
    try:
        return PyUnicode_DecodeUTF8(<char*>text, sqlite3_column_bytes(st, col), NULL)
    except UnicodeDecodeError:
        return None


cdef inline bint _numeric(int t) noexcept nogil:
    return t == SQLITE_INTEGER or t == SQLITE_FLOAT


cdef inline double _number(sqlite3_stmt* st, int col, int t) noexcept nogil:
    # Read as stored (no conversion of the value SQLite holds).
    if t == SQLITE_INTEGER:
        return <double>sqlite3_column_int64(st, col)
    return sqlite3_column_double(st, col)


cdef bint _plain_claim_row(sqlite3_stmt* st) noexcept nogil:
    """R44's hot path: whether every claimed column is of a type and within the bounds
    ``row_codec.CLAIM_COLUMNS`` accepts, read in C from the column types. Never true
    of a row the codec would refuse; false for some it accepts (a chained row: only
    the codec reads JSON), which then go through it. Types are read before any value
    (a read may convert what SQLite holds)."""
    cdef int t_payload, t_timeout, t_deadline, t_line, t_run
    cdef double d
    cdef sqlite3_int64 i
    if (sqlite3_column_type(st, C_ID) != SQLITE_INTEGER
            or sqlite3_column_type(st, C_NAME) != SQLITE_TEXT
            or sqlite3_column_type(st, C_SERIALIZER) != SQLITE_TEXT
            or sqlite3_column_type(st, C_ATTEMPTS) != SQLITE_INTEGER
            or sqlite3_column_type(st, C_MAX_ATTEMPTS) != SQLITE_INTEGER
            or sqlite3_column_type(st, C_CRASHES) != SQLITE_INTEGER
            or sqlite3_column_type(st, C_PRIORITY) != SQLITE_INTEGER
            or sqlite3_column_type(st, C_CHAINED) != SQLITE_INTEGER
            or sqlite3_column_type(st, C_CHAIN) != SQLITE_NULL):
        return False
    t_payload = sqlite3_column_type(st, C_PAYLOAD)
    t_timeout = sqlite3_column_type(st, C_TIMEOUT)
    t_deadline = sqlite3_column_type(st, C_DEADLINE)
    t_line = sqlite3_column_type(st, C_LINE_AT)
    t_run = sqlite3_column_type(st, C_RUN_AT)
    if (not (t_payload == SQLITE_TEXT or t_payload == SQLITE_BLOB) or not _numeric(t_timeout)
            or not (t_deadline == SQLITE_NULL or _numeric(t_deadline))
            or not _numeric(t_line) or not _numeric(t_run)):
        return False
    if (sqlite3_column_int64(st, C_ATTEMPTS) < 1 or sqlite3_column_int64(st, C_MAX_ATTEMPTS) < 1
            or sqlite3_column_int64(st, C_CRASHES) < 0):
        return False
    i = sqlite3_column_int64(st, C_PRIORITY)
    if i < -2147483648 or i > 2147483647:
        return False
    d = _number(st, C_TIMEOUT, t_timeout)
    if not (d > 0.0 and isfinite(d)):
        return False
    if t_deadline != SQLITE_NULL and _number(st, C_DEADLINE, t_deadline) != _number(
            st, C_DEADLINE, t_deadline):
        return False    # NaN (SQLite stores none; kept in step with the codec)
    return isfinite(_number(st, C_LINE_AT, t_line)) and isfinite(_number(st, C_RUN_AT, t_run))


cdef inline void _reset(sqlite3_stmt* st) noexcept:
    if st != NULL:
        sqlite3_reset(st)
        sqlite3_clear_bindings(st)


cdef int _cmp_rows(const void* a, const void* b) noexcept nogil:
    cdef const RowKey* x = <const RowKey*>a
    cdef const RowKey* y = <const RowKey*>b
    if x.int_priority and y.int_priority:
        if x.ipriority != y.ipriority:
            return -1 if x.ipriority > y.ipriority else 1
    elif x.priority != y.priority:
        return -1 if x.priority > y.priority else 1
    if x.line_at != y.line_at:
        return -1 if x.line_at < y.line_at else 1
    if x.id != y.id:
        return -1 if x.id < y.id else 1
    return 0


# -- the core -----------------------------------------------------------------------

@cython.final
cdef class Core:
    """Claims and settles jobs for one supervisor over its own connection.

    Every write is one ``BEGIN IMMEDIATE`` transaction; a failure rolls back and
    raises ``StoreError`` with nothing applied, so the caller can keep its
    outcomes and try again (R26).
    """

    #: What claims, as ``pools`` shows it (the Claimer protocol).
    name = "compiled"

    cdef public object owner
    cdef public object queues
    cdef public object policies
    cdef object _claim_sql
    cdef object _names
    cdef object _limits                # R35/R36: a LimitedClaim, or None (the ordinary claim)
    cdef object _limit_source
    #: R36: after a turn, the seconds until a group its claim passed over for want of
    #: a token has one (the Claimer protocol); None: no such group.
    cdef public object token_wait
    cdef dict _adhoc                   # query(): statement text -> prepared statement
    cdef object _causes                # self.crash_causes, bound once (decide's reader)
    cdef dict _inflight

    cdef sqlite3* _db
    cdef sqlite3_stmt* _st[NSTMT]
    cdef int _pidx[NSTMT][NPARAM]      # parameter index per statement, 0 = not used
    cdef list _bad                     # per statement: why binding by name cannot work
    cdef Value _vals[NPARAM]
    cdef unsigned int _supplied        # parameters set since the last statement ran
    cdef RowKey* _keys
    cdef Py_ssize_t _keys_capacity
    cdef int _depth                    # operations in progress (nested calls)
    cdef bint _in_txn
    cdef bint _close_pending
    cdef object _opening               # _open()'s arguments, to reopen after a fork's release
    cdef bint _released                # closed by release_before_fork: reopen on next use
    cdef object __weakref__            # fork_safety holds cores weakly

    def __cinit__(self, *args, **kwargs):
        cdef int s
        self._db = NULL
        for s in range(NSTMT):
            self._st[s] = NULL
        self._keys = NULL
        self._keys_capacity = 0
        self._supplied = 0
        self._depth = 0
        self._in_txn = False
        self._close_pending = False
        self._inflight = {}
        self._bad = [None] * NSTMT
        self._adhoc = {}
        self._limits = None
        self._limit_source = None
        self._opening = None
        self._released = False

    def __init__(self, path, owner, names, queues, policies=None, *,
                 busy_timeout=5.0, synchronous="NORMAL", wal_autocheckpoint=1000,
                 journal_size_limit=sql.WAL_KEEP_BYTES):
        self.owner = owner
        self.queues = tuple(queues)
        # Named once here, not per settle (a caller may pass plain 5-tuples).
        self.policies = {name: Policy(*policy) for name, policy in (policies or {}).items()}
        self._names = tuple(names)
        self._claim_sql = sql.claim_sql(names, self.policies, DEFAULT_POLICY)
        self._causes = self.crash_causes
        self._inflight = {}
        self._close_db()
        self._opening = (path, busy_timeout, synchronous, wal_autocheckpoint, journal_size_limit)
        self._reopen()

    cdef int _reopen(self) except -1:
        self._released = False
        try:
            path, busy_timeout, synchronous, wal_autocheckpoint, journal_size_limit = self._opening
            self._open(path, busy_timeout, synchronous, wal_autocheckpoint, journal_size_limit)
        except _pysqlite.Error as exc:
            self._close_db()
            raise StoreError(f"cannot open store {self._opening[0]}: {exc}") from exc
        return 0

    def release_before_fork(self):
        """R42/R43: close the connection before the process forks, so the child
        inherits no SQLite state of the store; reopened (and its statements prepared
        again) on next use. Never during an operation or a transaction."""
        if self._db == NULL or self._depth or self._in_txn:
            return
        self._close_db()
        self._released = True

    def __dealloc__(self):
        self._close_db()
        free(self._keys)
        self._keys = NULL

    # -- connection ---------------------------------------------------------------

    cdef int _open(self, path, busy_timeout, synchronous, wal_autocheckpoint,
                   journal_size_limit) except -1:
        cdef bytes filename = os.fsencode(path)
        cdef const char* c_filename
        cdef sqlite3* db = NULL
        cdef double timeout_ms = <double>busy_timeout * 1000.0
        cdef int rc
        cdef int s
        if b"\0" in filename:
            raise ValueError("embedded null byte")
        c_filename = filename
        with nogil:
            rc = sqlite3_open_v2(c_filename, &db, SQLITE_OPEN_READWRITE, NULL)
        if rc != SQLITE_OK:
            exc = _db_error(db)
            sqlite3_close_v2(db)
            raise exc
        self._db = db
        if timeout_ms > INT_MAX:
            timeout_ms = INT_MAX
        sqlite3_busy_timeout(db, <int>timeout_ms)
        self._pragma(f"PRAGMA synchronous={synchronous}")
        self._pragma("PRAGMA mmap_size=0")
        # 0 hands checkpoints to the supervisor's checkpointer process, so the
        # fsyncs of a checkpoint never stall a claim or a settle (R26a).
        self._pragma(f"PRAGMA wal_autocheckpoint={int(wal_autocheckpoint)}")
        # This connection is the one that starts the WAL over after a checkpoint,
        # so its limit is the one that trims a file a burst grew.
        self._pragma(f"PRAGMA journal_size_limit={int(journal_size_limit)}")
        for s in (S_BEGIN, S_COMMIT, S_ROLLBACK):
            self._stmt(s)
        return 0

    cdef int _pragma(self, str text) except -1:
        """Run one PRAGMA with sqlite3_exec, refusing (as Python does) a second statement."""
        cdef bytes utf8 = text.encode("utf-8")
        cdef const char* c_text = utf8
        cdef const char* p = c_text
        cdef bint quoted = False
        cdef char* errmsg = NULL
        cdef int rc
        if b"\0" in utf8:
            raise _programming_error("the query contains a null character")
        # Where the first statement ends: its first ';' outside quotes.
        while p[0] != 0:
            if p[0] == b"'":
                quoted = not quoted
            elif p[0] == b";" and not quoted:
                if not _only_comments(p + 1):
                    raise _programming_error("You can only execute one statement at a time.")
                break
            p += 1
        with nogil:
            rc = sqlite3_exec(self._db, c_text, NULL, NULL, &errmsg)
        sqlite3_free(errmsg)
        if rc != SQLITE_OK:
            raise _db_error(self._db)
        return 0

    cdef sqlite3_stmt* _stmt(self, int s) except NULL:
        """Statement ``s``, prepared (persistent) on first use."""
        cdef sqlite3_stmt* st
        if self._released:
            self._reopen()
        st = self._st[s]
        if st != NULL:
            return st
        st = self._prepare(self._sql_text(s))
        self._map_parameters(s, st)
        self._st[s] = st
        return st

    cdef sqlite3_stmt* _prepare(self, object text) except NULL:
        """One statement of ``text``, prepared to be kept; refused as Python's module
        refuses it (a NUL, nothing, or more than one statement)."""
        cdef sqlite3_stmt* prepared = NULL
        cdef const char* c_text
        cdef const char* tail = NULL
        cdef int nbytes
        cdef int rc
        if self._db == NULL and self._released:
            self._reopen()
        if self._db == NULL:
            raise _programming_error("Cannot operate on a closed database.")
        utf8 = (<str?>text).encode("utf-8")
        if b"\0" in utf8:
            raise _programming_error("the query contains a null character")
        c_text = utf8
        nbytes = <int>len(utf8) + 1
        with nogil:
            rc = sqlite3_prepare_v3(self._db, c_text, nbytes, SQLITE_PREPARE_PERSISTENT,
                                    &prepared, &tail)
        if rc != SQLITE_OK:
            exc = _db_error(self._db)
            sqlite3_finalize(prepared)
            raise exc
        if prepared == NULL:
            raise _programming_error(f"empty statement: {text!r}")
        if tail != NULL and not _only_comments(tail):
            sqlite3_finalize(prepared)
            raise _programming_error("You can only execute one statement at a time.")
        return prepared

    cdef object _sql_text(self, int s):
        if s == S_BEGIN:
            return "BEGIN IMMEDIATE"
        if s == S_COMMIT:
            return "COMMIT"
        if s == S_ROLLBACK:
            return "ROLLBACK"
        if s == S_CLAIM:
            return self._claim_sql
        if s == S_DONE:
            return sql.SETTLE_DONE
        if s == S_SUCCESSOR:
            return sql.ENQUEUE_SUCCESSOR
        if s == S_RETRY:
            return sql.SETTLE_RETRY
        if s == S_DEAD:
            return sql.SETTLE_DEAD
        if s == S_DEFER:
            return sql.SETTLE_DEFER
        if s == S_RESCHEDULE:
            return sql.SETTLE_RESCHEDULE
        if s == S_RELEASE:
            return sql.SETTLE_RELEASE
        if s == S_ATTEMPT:
            return sql.INSERT_ATTEMPT
        if s == S_CAUSES:
            return sql.CRASH_CAUSES
        if s == S_RECLAIM:
            return sql.RECLAIMABLE_EXPIRED
        if s == S_RECLAIM_OWNER:
            return sql.RECLAIMABLE_OWNER
        if s == S_REQUEUE:
            return sql.SETTLE_REQUEUE
        if s == S_INTERRUPT:
            return sql.SETTLE_INTERRUPT
        if s == S_MEMBER_DONE:
            return sql.MEMBER_DONE
        if s == S_MEMBER_DEAD:
            return sql.MEMBER_DEAD
        if s == S_LANE_READY:
            return sql.LANE_READY
        if s == S_CLAIM_IDS:
            return self._limits.claim_ids
        if s == S_LANE_OF_LAST:
            return sql.LANE_OF_LAST_ROW
        return sql.LEASE_OWNERS

    cdef int _map_parameters(self, int s, sqlite3_stmt* st) except -1:
        """Look up each known name's index; note a parameter nobody will supply."""
        cdef int k, index, count = sqlite3_bind_parameter_count(st)
        cdef const char* name
        cdef bytes pname
        seen = set()
        for k in range(NPARAM):
            pname = _PARAM_NAMES_UTF8[k]
            index = sqlite3_bind_parameter_index(st, pname)
            self._pidx[s][k] = index
            if index:
                seen.add(index)
        self._bad[s] = None
        if s == S_CAUSES:       # positional, like the twin's ``(job_id,)``
            return 0
        for index in range(1, count + 1):
            if index in seen:
                continue
            name = sqlite3_bind_parameter_name(st, index)
            if name == NULL:
                self._bad[s] = (f"Binding {index} has no name, but you supplied a dictionary "
                                "(which has only names).")
            else:
                self._bad[s] = (f"You did not supply a value for binding parameter "
                                f"{(<bytes>name).decode('utf-8', 'replace')}.")
            break
        return 0

    cdef void _close_db(self) noexcept:
        cdef int s
        for s in range(NSTMT):
            if self._st[s] != NULL:
                sqlite3_finalize(self._st[s])
                self._st[s] = NULL
        self._finalize_adhoc()
        if self._db != NULL:
            sqlite3_close_v2(self._db)
            self._db = NULL
        self._in_txn = False

    # -- parameters and statements ------------------------------------------------

    cdef inline void _set_i(self, int k, sqlite3_int64 value) noexcept:
        self._vals[k].kind = V_INT
        self._vals[k].i = value
        self._supplied |= (1u << k)

    cdef inline void _set_d(self, int k, double value) noexcept:
        self._vals[k].kind = V_DOUBLE
        self._vals[k].d = value
        self._supplied |= (1u << k)

    cdef inline void _set_o(self, int k, object value) noexcept:
        # Borrowed: every caller holds ``value`` in a local until the step is done.
        self._vals[k].kind = V_OBJECT
        self._vals[k].o = <PyObject*>value
        self._supplied |= (1u << k)

    cdef int _bind(self, int s, sqlite3_stmt* st) except -1:
        """Bind the parameters set since the last statement, by name; consume them."""
        cdef unsigned int supplied = self._supplied
        cdef int k, index, rc
        cdef Value* v
        self._supplied = 0
        if self._bad[s] is not None:
            raise _programming_error(self._bad[s])
        for k in range(NPARAM):
            index = self._pidx[s][k]
            if index == 0:
                continue
            if not (supplied >> k) & 1u:
                sqlite3_clear_bindings(st)
                raise _programming_error(
                    f"You did not supply a value for binding parameter {_PARAM_NAMES[k]}.")
            v = &self._vals[k]
            if v.kind == V_INT:
                rc = sqlite3_bind_int64(st, index, v.i)
            elif v.kind == V_DOUBLE:
                rc = sqlite3_bind_double(st, index, v.d)
            else:
                try:
                    rc = _bind_value(st, index, <object>v.o)
                except BaseException:
                    sqlite3_clear_bindings(st)
                    raise
            if rc != SQLITE_OK:
                sqlite3_clear_bindings(st)
                raise _programming_error(
                    f"Error binding parameter {index}: type "
                    f"'{jobpool_type_name(v.o).decode() if v.kind == V_OBJECT else 'float'}' "
                    "is not supported")
        return 0

    cdef int _fail(self, sqlite3_stmt* st) except -1:
        """Raise the step's error, after putting the statement back to rest."""
        exc = _db_error(self._db)
        _reset(st)
        raise exc

    cdef sqlite3_stmt* _ready(self, int s) except NULL:
        """Statement ``s`` prepared and bound to the parameters set since the last
        statement ran; on a failure to prepare, those parameters are dropped too."""
        cdef sqlite3_stmt* st
        try:
            st = self._stmt(s)
        except BaseException:
            self._supplied = 0
            raise
        self._bind(s, st)
        return st

    cdef Py_ssize_t _exec(self, int s) except -1:
        """Run a statement that returns no rows we need; the number of rows changed."""
        cdef sqlite3_stmt* st
        cdef int rc
        cdef int changes
        st = self._ready(s)
        with nogil:
            rc = sqlite3_step(st)
        if rc != SQLITE_DONE and rc != SQLITE_ROW:
            self._fail(st)
        changes = sqlite3_changes(self._db)
        _reset(st)
        return changes

    cdef list _fetch(self, int s, bint lenient=False):
        """Run a statement and return all of its rows as tuples (``lenient``: text
        that is not UTF-8 kept for the codec, R44)."""
        cdef sqlite3_stmt* st
        cdef list rows
        st = self._ready(s)
        try:
            rows = self._step_all(st, lenient)
        except BaseException:
            _reset(st)
            raise
        _reset(st)
        return rows

    cdef list _step_all(self, sqlite3_stmt* st, bint lenient=False):
        """Step a bound statement to its end; its rows as tuples (the caller resets it)."""
        cdef int rc
        cdef int ncol = sqlite3_column_count(st)
        cdef list rows = []
        while True:
            with nogil:
                rc = sqlite3_step(st)
            if rc == SQLITE_ROW:
                rows.append(_row(st, ncol, lenient))
            elif rc == SQLITE_DONE:
                return rows
            else:
                self._fail(st)

    cdef int _begin(self) except -1:
        if self._in_txn:
            # A nested call (a signal handler, an rng): what SQLite would say.
            exc = _pysqlite.OperationalError("cannot start a transaction within a transaction")
            exc.sqlite_errorcode = SQLITE_ERROR
            exc.sqlite_errorname = "SQLITE_ERROR"
            raise exc
        self._in_txn = True     # set before the step: BEGIN may wait out the busy timeout
        try:
            self._exec(S_BEGIN)
        except BaseException:
            self._in_txn = False
            raise
        return 0

    cdef int _commit(self) except -1:
        self._exec(S_COMMIT)
        self._in_txn = False
        return 0

    cdef int _rollback(self) except -1:
        """Roll back, resetting every statement first; a failure here is swallowed."""
        cdef int s
        self._supplied = 0
        self._in_txn = False
        for s in range(NSTMT):
            _reset(self._st[s])
        try:
            self._exec(S_ROLLBACK)
        except _pysqlite.Error:
            pass  # no transaction open: the failure happened before BEGIN took hold
        return 0

    cdef inline void _enter(self) noexcept:
        self._depth += 1

    cdef inline void _leave(self) noexcept:
        self._depth -= 1
        if self._depth == 0 and self._close_pending:
            self._close_pending = False
            self._close_db()

    cdef int _reserve_keys(self, Py_ssize_t n) except -1:
        cdef Py_ssize_t capacity
        cdef RowKey* grown
        if n <= self._keys_capacity:
            return 0
        capacity = max(n, 2 * self._keys_capacity, 16)
        grown = <RowKey*>realloc(self._keys, capacity * sizeof(RowKey))
        if grown == NULL:
            raise MemoryError()
        self._keys = grown
        self._keys_capacity = capacity
        return 0

    # -- limits (R35, R36) ------------------------------------------------------------

    def set_limits(self, plan):
        """R35/R36: the part of the store's limits this pool obeys from now on
        (``limits.LimitPlan.for_pool``); None: the ordinary claim."""
        if plan == (self._limits.plan if self._limits is not None else None):
            return
        if self._depth:
            raise _programming_error("limits change between turns, not inside one")
        # The claim of chosen ids names the pool's policies: prepared again when used.
        if self._st[S_CLAIM_IDS] != NULL:
            sqlite3_finalize(self._st[S_CLAIM_IDS])
            self._st[S_CLAIM_IDS] = NULL
        if plan is None:
            self._limits = None
            self._limit_source = None
            return
        self._limits = sqlite_limited_claim(plan, self._names, self.policies, DEFAULT_POLICY)
        self._limit_source = SqlLimitedSource(sql, self.query, self._limits)

    def query(self, text, params):
        """Run one statement with named parameters (a dict) in the current
        transaction, and return its rows: the limited claim's reads and writes, which
        are not on the ordinary claim's path. Statements are prepared once and kept."""
        cdef sqlite3_stmt* st = self._adhoc_stmt(text)
        cdef int count = sqlite3_bind_parameter_count(st)
        cdef int index
        cdef const char* pname
        cdef list rows = []
        try:
            for index in range(1, count + 1):
                pname = sqlite3_bind_parameter_name(st, index)
                if pname == NULL:
                    raise _programming_error("query() binds named parameters only")
                key = (<bytes>pname)[1:].decode("utf-8")
                try:
                    value = params[key]
                except KeyError:
                    raise _programming_error(
                        f"You did not supply a value for binding parameter :{key}.") from None
                if _bind_value(st, index, value) != SQLITE_OK:
                    raise _programming_error(f"Error binding parameter :{key}")
            rows = self._step_all(st)
        finally:
            _reset(st)
            sqlite3_clear_bindings(st)
        return rows

    cdef sqlite3_stmt* _adhoc_stmt(self, str text) except NULL:
        cdef sqlite3_stmt* prepared
        found = self._adhoc.get(text)
        if found is not None:
            return <sqlite3_stmt*><Py_ssize_t>found
        prepared = self._prepare(text)
        self._adhoc[text] = <Py_ssize_t>prepared
        return prepared

    cdef void _finalize_adhoc(self) noexcept:
        if self._adhoc is None:
            return
        for address in self._adhoc.values():
            sqlite3_finalize(<sqlite3_stmt*><Py_ssize_t>address)
        self._adhoc.clear()

    # -- claiming (R6-R10) ----------------------------------------------------------

    def claim(self, Py_ssize_t n, double now):
        """A turn with nothing to settle: ``(claimed, expired)``."""
        _settled, claimed, expired = self.turn((), n, now, None)
        return claimed, expired

    cdef Py_ssize_t _claim_queue(self, object queue, Py_ssize_t want, double now,
                                 list claimed, list expired) except -1:
        """Claim up to ``want`` rows of ``queue``; how many rows the claim took (rows
        retired past their deadline included, R10)."""
        cdef sqlite3_stmt* st
        cdef int rc
        cdef int ncol
        cdef Py_ssize_t count = 0
        cdef Py_ssize_t i
        cdef RowKey* key
        cdef list rows = []
        cdef list leases = []
        cdef list refused = []
        owner = self.owner
        slack = LEASE_SLACK
        limited = self._limits
        if limited is not None:
            # R35/R36: the rows the limits let this claim take, chosen in Python.
            # The page's counts are exact here (one writer at a time): no caps, and
            # the claim takes every row picked.
            picked = plan_claim(self._limit_source, limited.plan, queue, want, now,
                                limited.has_unlimited)
            self.token_wait = sooner(self.token_wait, picked.token_wait)
            ids = picked.ids
            if not ids:
                return 0
            charge(self._limit_source, picked, None, now)
            ids_json = json.dumps(ids)
            self._set_o(P_OWNER, owner)
            self._set_d(P_NOW, now)
            self._set_o(P_SLACK, slack)
            self._set_o(P_IDS, ids_json)
            st = self._ready(S_CLAIM_IDS)
        else:
            self._set_o(P_OWNER, owner)
            self._set_d(P_NOW, now)
            self._set_o(P_SLACK, slack)
            self._set_o(P_QUEUE, queue)
            self._set_i(P_LIMIT, want)
            st = self._ready(S_CLAIM)
        ncol = sqlite3_column_count(st)
        try:
            while True:
                with nogil:
                    rc = sqlite3_step(st)
                if rc == SQLITE_DONE:
                    break
                if rc != SQLITE_ROW:
                    self._fail(st)
                if ncol != NCLAIMCOLS:
                    if ncol > NCLAIMCOLS:
                        raise ValueError(f"too many values to unpack (expected {NCLAIMCOLS})")
                    raise ValueError(f"not enough values to unpack (expected {NCLAIMCOLS}, got {ncol})")
                serializer = _utf8_or_none(st, C_SERIALIZER) if _plain_claim_row(st) else None
                if serializer is None:
                    # R44: a row C could not vouch for: the codec decides, and names what
                    # is wrong with it, if anything.
                    item = row_codec.decode_claim(_row(st, ncol, True), queue, now)
                    if isinstance(item, row_codec.Malformed):
                        refused.append(item)
                        continue
                    self._reserve_keys(count + 1)
                    key = &self._keys[count]
                    key.id = item.job.job_id
                    key.index = count
                    key.int_priority = True
                    key.ipriority = item.priority
                    key.priority = <double>item.priority
                    key.line_at = item.line_at
                    leases.append(item.lease)
                    rows.append(item.job)
                    count += 1
                    continue
                self._reserve_keys(count + 1)
                key = &self._keys[count]
                key.id = sqlite3_column_int64(st, C_ID)
                key.index = count
                key.int_priority = True     # an INTEGER (_plain_claim_row)
                key.ipriority = sqlite3_column_int64(st, C_PRIORITY)
                key.priority = sqlite3_column_double(st, C_PRIORITY)
                key.line_at = sqlite3_column_double(st, C_LINE_AT)

                job_id = _column(st, C_ID)
                name = _column(st, C_NAME)
                attempt = sqlite3_column_int64(st, C_ATTEMPTS)
                deadline = _column(st, C_DEADLINE)
                leases.append(_record(Lease, (job_id, name, attempt,
                                              sqlite3_column_int64(st, C_MAX_ATTEMPTS),
                                              sqlite3_column_int64(st, C_CRASHES), deadline, now,
                                              sqlite3_column_int64(st, C_CHAINED))))
                rows.append(_record(Claimed, (job_id, name, _column_bytes(st, C_PAYLOAD),
                                              serializer, attempt,
                                              sqlite3_column_double(st, C_TIMEOUT), deadline,
                                              queue, sqlite3_column_double(st, C_RUN_AT))))
                count += 1
        except BaseException:
            _reset(st)
            raise
        _reset(st)
        # R44: a refused row is dead at once, in a statement of its own.
        for bad in refused:
            expired.append(row_codec.settle_malformed(self.query, sql, bad, owner, now))
        # RETURNING has no order; dispatch in claim order (R7).
        if count > 1:
            qsort(self._keys, count, sizeof(RowKey), _cmp_rows)
        order = [self._keys[i].index for i in range(count)]
        for i in order:
            lease = leases[i]
            row = rows[i]
            deadline = lease.deadline
            if deadline is not None and deadline < now:
                # R10: claimed after its deadline, it is retired without running.
                self._settle_one(lease, Outcome(lease.job_id, lease.attempt, FATAL,
                                                DEADLINE_PASSED),
                                 now, None, expired, "deadline")
                continue
            self._inflight[lease.job_id] = lease
            claimed.append(row)
        return count + len(refused)

    # -- settling (section 4) --------------------------------------------------------

    def settle(self, outcomes, double now, rng):
        """A turn that claims nothing: what became of each outcome."""
        return self.turn(outcomes, 0, now, rng)[0]

    def turn(self, outcomes, Py_ssize_t n, double now, rng, shares=None):
        """One loop turn in one transaction: settle ``outcomes``, then claim up to ``n``,
        shared among queues by ``shares`` (``queueplan.Share`` records, as
        ``queueplan.claim_in_shares`` reads them; None: ``queues`` in order).

        Returns ``(settled, claimed, expired)``. Sharing the commit halves what a
        job costs the store; on a failure nothing is applied and the caller keeps
        its outcomes (R26).
        """
        cdef list settled = []
        cdef list taken = []
        cdef list claimed = []
        cdef list expired = []
        cdef dict dropped = {}
        cdef Py_ssize_t want
        self.token_wait = None
        if not outcomes and n <= 0:
            return settled, claimed, expired
        self._enter()
        try:
            try:
                self._begin()
                try:
                    self._settle_all(outcomes, now, rng, settled, taken)
                    # A job settled back to ready may be claimed again in this turn:
                    # its old lease goes before the claim records the new one.
                    for job_id in taken:
                        dropped[job_id] = self._inflight.pop(job_id, None)
                    if shares is None:
                        for queue in self.queues:
                            want = n - len(claimed)
                            if want <= 0:
                                break
                            self._claim_queue(queue, want, now, claimed, expired)
                    else:
                        claim_in_shares(shares, self.queues, n, claimed,
                                        lambda queue, want: self._claim_queue(
                                            queue, want, now, claimed, expired))
                    self._commit()
                except BaseException:
                    self._rollback()
                    for job in claimed:
                        self._inflight.pop((<tuple>job)[0], None)
                    for job_id, lease in dropped.items():
                        if lease is not None:
                            self._inflight[job_id] = lease
                    raise
            except _pysqlite.Error as exc:
                raise StoreError(f"turn failed: {exc}") from exc
        finally:
            self._leave()
        return settled, claimed, expired

    cdef int _settle_all(self, object outcomes, double now, object rng, list settled,
                         list taken) except -1:
        for outcome in outcomes:
            job_id = outcome[0]
            lease = self._inflight.get(job_id)
            if lease is None or lease.attempt != outcome[1]:
                settled.append(Settled(job_id, lease.name if lease is not None else "",
                                       outcome[1], "lost", "not leased by this supervisor"))
                continue
            taken.append(job_id)
            self._settle_one(lease, outcome, now, rng, settled, None)
        return 0

    cdef int _settle_one(self, object lease, object outcome, double now, object rng, list out,
                         object log_as, object owner=None) except -1:
        """Apply ``lifecycle.decide`` to one attempt: the fenced UPDATE it names, the
        chain's next step (R12), and the attempt's line in the log (R19a)."""
        cdef int stmt
        job_id = lease.job_id
        policy = self.policies.get(lease.name, DEFAULT_POLICY)
        decision = decide(lease, outcome, policy, now, rng, self._causes)
        stmt = _SETTLE_STATEMENTS[decision.statement]
        if owner is None:
            owner = self.owner      # a reclaim settles another owner's lease
        attempt = lease.attempt
        reason = decision.reason
        self._set_o(P_ID, job_id)
        self._set_o(P_OWNER, owner)
        self._set_o(P_ATTEMPT, attempt)
        self._set_d(P_NOW, now)
        if stmt == S_DONE:
            result = outcome.result
            self._set_o(P_RESULT, result)
        elif stmt == S_DEAD or stmt == S_REQUEUE:
            self._set_o(P_ERROR, reason)
            self._set_i(P_CRASHES, decision.crashes)
        elif stmt == S_RETRY:
            self._set_o(P_ERROR, reason)
            self._set_d(P_RUN_AT, now + decision.delay)
            self._set_i(P_CRASHES, decision.crashes)
        elif stmt == S_DEFER or stmt == S_RESCHEDULE:
            self._set_d(P_RUN_AT, now + decision.delay)
        if self._exec(stmt) != 1:
            out.append(_record(Settled, (job_id, lease.name, attempt, "lost", "lease lost")))
            return 0
        follow = lease.follow_ups
        if follow & FOLLOW_ENDS:
            if decision.successor and self._enqueue_successor(job_id, now):
                self._exec(S_LANE_OF_LAST)  # R35: the step's lane, if limited
            status = decision.status
            if status == "done" or status == "dead":
                # R34: its batch counts its end in this transaction.
                self._set_o(P_ID, job_id)
                self._set_d(P_NOW, now)
                self._exec(S_MEMBER_DONE if status == "done" else S_MEMBER_DEAD)
        if follow & FOLLOW_LANE and decision.status == "ready":
            # R35: a limited row back in line is in its lane again.
            self._set_o(P_ID, job_id)
            self._exec(S_LANE_READY)
        pid = outcome.pid
        exit_status = outcome.exit_status
        peak_rss = outcome.peak_rss
        cpu_s = outcome.cpu_s
        strays = outcome.strays
        started_at = lease.started_at
        log_outcome = log_as or KIND_NAMES[outcome.kind]
        error = outcome.error
        self._set_o(P_ID, job_id)
        self._set_o(P_ATTEMPT, attempt)
        self._set_o(P_OWNER, owner)
        self._set_o(P_PID, pid)
        self._set_o(P_STARTED_AT, started_at)
        self._set_d(P_NOW, now)
        self._set_o(P_OUTCOME, log_outcome)
        self._set_o(P_ERROR, error)
        self._set_o(P_EXIT_STATUS, exit_status)
        self._set_o(P_PEAK_RSS, peak_rss)
        self._set_o(P_CPU_S, cpu_s)
        self._set_o(P_STRAYS, strays)
        self._exec(S_ATTEMPT)
        out.append(_record(Settled, (job_id, lease.name, attempt, decision.status, reason)))
        return 0

    cdef int _enqueue_successor(self, object job_id, double now) except -1:
        """R12: a chain's next step, enqueued in the transaction that completes this
        one; 1 when the insert ran. R44: should the row's chain have changed since the
        claim checked it and its step not fit, the insert fails alone (SQLite rolls
        back that statement, not the transaction): 0, the job's end stands and its row
        says why the chain stopped, so the turn commits."""
        self._set_o(P_ID, job_id)
        self._set_d(P_NOW, now)
        try:
            self._exec(S_SUCCESSOR)
        except _pysqlite.Error as exc:
            if not sql.statement_failed_alone(exc, not sqlite3_get_autocommit(self._db)):
                raise
            self.query(sql.CHAIN_STOPPED, {"id": job_id,
                                           "error": f"{row_codec.CHAIN_STOPPED} ({exc})"})
            return 0
        return 1

    def crash_causes(self, job_id):
        """R19a: the errors of this job's earlier child deaths, oldest first."""
        return self._crash_causes(job_id)

    cdef list _crash_causes(self, object job_id):
        """R19a: the errors of this job's earlier child deaths, oldest first."""
        cdef sqlite3_stmt* st = self._stmt(S_CAUSES)
        cdef int count = sqlite3_bind_parameter_count(st)
        cdef int rc
        cdef list causes = []
        if count != 1:
            raise _programming_error(f"Incorrect number of bindings supplied. The current "
                                     f"statement uses {count}, and there are 1 supplied.")
        try:
            rc = _bind_value(st, 1, job_id)
            if rc != SQLITE_OK:
                raise _programming_error(
                    f"Error binding parameter 1: type "
                    f"'{jobpool_type_name(<PyObject*>job_id).decode()}' is not supported")
            while True:
                with nogil:
                    rc = sqlite3_step(st)
                if rc == SQLITE_ROW:
                    causes.append(_column(st, 0) or "?")
                elif rc == SQLITE_DONE:
                    break
                else:
                    self._fail(st)
        except BaseException:
            _reset(st)
            raise
        _reset(st)
        return causes

    # -- recovery (R23, R24) ----------------------------------------------------------

    def reclaim(self, double now):
        """Expired leases of any owner go back to ready, or dead without attempts (R23)."""
        return self._recover(S_RECLAIM, now, None, EXPIRED, None)

    def reclaim_owner(self, owner, reason, double now):
        """A dead supervisor's leases come back at once (R24)."""
        if owner == self.owner:
            raise ValueError("a supervisor cannot reclaim its own leases")
        return self._recover(S_RECLAIM_OWNER, now, owner, OWNER_DIED, reason)

    def lease_owners(self):
        # No parameters; keep those of an operation this call may be nested in.
        cdef unsigned int supplied = self._supplied
        self._supplied = 0
        self._enter()
        try:
            return [r[0] for r in self._fetch(S_OWNERS)]
        except _pysqlite.Error as exc:
            raise StoreError(f"reading lease owners failed: {exc}") from exc
        finally:
            self._supplied = supplied
            self._leave()

    cdef list _recover(self, int s, double now, object owner, object kind, object reason):
        """Settle leases nobody will settle through ``lifecycle.decide``, like any
        attempt's end, fenced by their old owner; one transaction."""
        cdef list settled = []
        self._enter()
        try:
            try:
                self._begin()
                try:
                    self._set_d(P_NOW, now)
                    if s == S_RECLAIM_OWNER:
                        self._set_o(P_OWNER, owner)
                    for row in self._fetch(s, True):
                        held_by = row[7]
                        # Follow-ups always: a reclaim may end a batch member (dead) or
                        # put a limited row back in line.
                        lease = row_codec.decode_lease(row, FOLLOW_ALL)
                        if isinstance(lease, row_codec.Malformed):  # R44
                            settled.append(row_codec.settle_malformed(self.query, sql, lease,
                                                                      held_by, now))
                            continue
                        error = reason if reason is not None else f"lease expired (owner {held_by})"
                        self._settle_one(lease, Outcome(lease.job_id, lease.attempt, kind, error),
                                         now, None, settled, None, held_by)
                    self._commit()
                except BaseException:
                    self._rollback()
                    raise
            except _pysqlite.Error as exc:
                raise StoreError(f"reclaim failed: {exc}") from exc
        finally:
            self._leave()
        return settled

    # -- bookkeeping ----------------------------------------------------------------

    @property
    def inflight(self):
        return len(self._inflight)

    def close(self):
        self._released = False
        if self._depth > 0:
            self._close_pending = True   # closed when the running operation ends
        else:
            self._close_db()
