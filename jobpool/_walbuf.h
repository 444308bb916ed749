/* The compiled driver's WAL writes, one system call a commit (issue 26).

SQLite's WAL writer appends each frame of a commit as two writes, its 24-byte header
and then its page, so a supervisor's turn (about five pages) costs ten pwrite calls.
This VFS ("jobpool-walbuf") is the system's unix VFS with one change: the writes to a
WAL file are gathered while they run on from one another and written together, as one
write, when the commit's last frame (the frame whose header carries the database's
size) has been given, and before anything else is done with that file (a read, a sync,
a truncation, its size, a file control, its close), before a write elsewhere in it,
past 64 KiB, and when the write transaction ends (its writer's lock let go: a
rolled-back transaction's frames that a full cache wrote early go then, as SQLite wrote
them, so nothing is left to land later on another writer's frames). Every byte reaches
the file in the order SQLite wrote it and before the call that ends the commit returns,
so what SQLite answers (an error such as a full disk included) is what the write
answered, and a commit is published in the WAL index only after its frames are in the
file. As a guard, the main file's ``xShmBarrier``
(which SQLite calls while it publishes a commit) writes whatever a commit left
gathered, and counts it: ``late`` stays 0 while SQLite writes as described above
(tests/test_walbuf.py asks it after a pool's drain).

The supervisor's compiled connection opens its store through it, and so does every
store connection Python's ``sqlite3`` opens in a process whose core is built (a
producer's enqueue: one write where SQLite makes two a page; ``store/sqlite/store.py``).
Everything else (the main database file, the locks, the shared memory, temporary
files) goes to the unix VFS's own methods, on files the unix VFS opened, so POSIX locks
stay in its one table per process (R42). */
#ifndef JOBPOOL_WALBUF_H
#define JOBPOOL_WALBUF_H

#include <pthread.h>
#include <string.h>
#include <sqlite3.h>

#define WALBUF_CAP (64 * 1024)
#define WALBUF_FRAME_HEADER 24
#define WALBUF_WRITE_LOCK 0            /* the WAL index's writer lock (SQLite's WAL_WRITE_LOCK) */

typedef struct WalbufFile WalbufFile;
struct WalbufFile {
    sqlite3_file base;
    sqlite3_file *real;        /* the unix VFS's file, just after this record */
    /* a WAL file: the bytes gathered, from offset ``start`` */
    char *buf;
    int len;
    sqlite3_int64 start;
    int commit_given;          /* the commit frame's header is gathered: its page ends it */
    sqlite3_int64 end;         /* past the last byte this write transaction wrote */
    WalbufFile *main;          /* its database's main file, while both are open */
    /* a main database file: its WAL, while open; the list of main files open */
    WalbufFile *wal;
    const char *name;
    WalbufFile *next;
    unsigned long forks;       /* ``walbuf_forks`` when opened: in a child, an inherited file */
};

/* Where the unix VFS's own file record starts in ours. */
#define WALBUF_HEAD ((sizeof(WalbufFile) + 15) & ~(size_t)15)

static sqlite3_vfs walbuf_vfs;
static sqlite3_vfs *walbuf_real;
static sqlite3_io_methods walbuf_main_methods;
static sqlite3_io_methods walbuf_wal_methods;
static pthread_mutex_t walbuf_lock = PTHREAD_MUTEX_INITIALIZER;
static WalbufFile *walbuf_mains;
/* What the guard wrote (a commit SQLite published with bytes still gathered), the
   writes made, and the writes they stood for. */
static sqlite3_int64 walbuf_late, walbuf_flushes, walbuf_gathered;
/* How many forks this process is from the one that opened the files it holds: a file
   opened before a fork is its parent's, and so are the bytes it gathered. */
static unsigned long walbuf_forks;

static void walbuf_count(sqlite3_int64 *counter) {
    __atomic_fetch_add(counter, 1, __ATOMIC_RELAXED);
}

static int walbuf_flush(WalbufFile *p) {
    int rc;
    p->commit_given = 0;
    if (p->len == 0) {
        return SQLITE_OK;
    }
    if (p->forks != walbuf_forks) {
        /* A forked child's copy of its parent's transaction (a child that closes what it
           inherited rolls it back): the parent writes these bytes, or drops them, itself;
           written from here they could land on frames committed since. */
        p->len = 0;
        return SQLITE_OK;
    }
    rc = p->real->pMethods->xWrite(p->real, p->buf, p->len, p->start);
    p->len = 0;
    walbuf_count(&walbuf_flushes);
    return rc;
}

/* -- a WAL file's methods ------------------------------------------------------------ */

static int walbuf_wal_close(sqlite3_file *f) {
    WalbufFile *p = (WalbufFile *)f;
    int rc = walbuf_flush(p);
    int closed;
    pthread_mutex_lock(&walbuf_lock);
    if (p->main != NULL && p->main->wal == p) {
        p->main->wal = NULL;
    }
    p->main = NULL;
    pthread_mutex_unlock(&walbuf_lock);
    sqlite3_free(p->buf);
    p->buf = NULL;
    closed = p->real->pMethods->xClose(p->real);
    return rc != SQLITE_OK ? rc : closed;
}

static int walbuf_wal_read(sqlite3_file *f, void *into, int amt, sqlite3_int64 off) {
    WalbufFile *p = (WalbufFile *)f;
    int rc = walbuf_flush(p);
    return rc != SQLITE_OK ? rc : p->real->pMethods->xRead(p->real, into, amt, off);
}

static int walbuf_wal_write(sqlite3_file *f, const void *data, int amt, sqlite3_int64 off) {
    WalbufFile *p = (WalbufFile *)f;
    int rc;
    /* Whether this is the commit frame's page (its header came last): the commit ends
       with it, whatever is written before it to make room. */
    int ends_commit = p->commit_given;
    sqlite3_int64 end = p->end;
    p->end = off + amt > end ? off + amt : end;
    if (amt == WALBUF_FRAME_HEADER && off < end) {
        /* A header of this transaction's frames written again: the commit's checksums
           rewritten (a page of the transaction was written twice), the last of them the
           commit frame's, with no page after it. Written at once, after what was
           gathered. */
        rc = walbuf_flush(p);
        return rc != SQLITE_OK ? rc : p->real->pMethods->xWrite(p->real, data, amt, off);
    }
    if (p->len && off != p->start + p->len) {
        rc = walbuf_flush(p);                 /* a write elsewhere: what came first, first */
        if (rc != SQLITE_OK) {
            return rc;
        }
    }
    if (p->buf == NULL && p->main != NULL) {
        p->buf = sqlite3_malloc(WALBUF_CAP);  /* gathered only under the guard, below */
    }
    if (p->buf == NULL || amt > WALBUF_CAP - p->len) {
        rc = walbuf_flush(p);                 /* no room: what was gathered goes first */
        if (rc != SQLITE_OK) {
            return rc;
        }
        if (p->buf == NULL || amt > WALBUF_CAP) {
            return p->real->pMethods->xWrite(p->real, data, amt, off);
        }
    }
    if (p->len == 0) {
        p->start = off;
    }
    memcpy(p->buf + p->len, data, (size_t)amt);
    p->len += amt;
    walbuf_count(&walbuf_gathered);
    if (ends_commit) {
        return walbuf_flush(p);               /* the commit frame's page: the commit ends */
    }
    if (amt == WALBUF_FRAME_HEADER) {
        const unsigned char *h = (const unsigned char *)data;
        p->commit_given = (h[4] | h[5] | h[6] | h[7]) != 0;
    }
    return SQLITE_OK;
}

static int walbuf_wal_truncate(sqlite3_file *f, sqlite3_int64 size) {
    WalbufFile *p = (WalbufFile *)f;
    int rc = walbuf_flush(p);
    return rc != SQLITE_OK ? rc : p->real->pMethods->xTruncate(p->real, size);
}

static int walbuf_wal_sync(sqlite3_file *f, int flags) {
    WalbufFile *p = (WalbufFile *)f;
    int rc = walbuf_flush(p);
    return rc != SQLITE_OK ? rc : p->real->pMethods->xSync(p->real, flags);
}

static int walbuf_wal_size(sqlite3_file *f, sqlite3_int64 *size) {
    WalbufFile *p = (WalbufFile *)f;
    int rc = walbuf_flush(p);
    return rc != SQLITE_OK ? rc : p->real->pMethods->xFileSize(p->real, size);
}

static int walbuf_wal_control(sqlite3_file *f, int op, void *arg) {
    WalbufFile *p = (WalbufFile *)f;
    int rc = walbuf_flush(p);
    return rc != SQLITE_OK ? rc : p->real->pMethods->xFileControl(p->real, op, arg);
}

/* -- the main file's methods, and what both pass on as they are ------------------------ */

static int walbuf_main_close(sqlite3_file *f) {
    WalbufFile *p = (WalbufFile *)f;
    WalbufFile **at;
    pthread_mutex_lock(&walbuf_lock);
    for (at = &walbuf_mains; *at != NULL; at = &(*at)->next) {
        if (*at == p) {
            *at = p->next;
            break;
        }
    }
    if (p->wal != NULL) {
        p->wal->main = NULL;
        p->wal = NULL;
    }
    pthread_mutex_unlock(&walbuf_lock);
    return p->real->pMethods->xClose(p->real);
}

static int walbuf_read(sqlite3_file *f, void *into, int amt, sqlite3_int64 off) {
    sqlite3_file *r = ((WalbufFile *)f)->real;
    return r->pMethods->xRead(r, into, amt, off);
}
static int walbuf_write(sqlite3_file *f, const void *data, int amt, sqlite3_int64 off) {
    sqlite3_file *r = ((WalbufFile *)f)->real;
    return r->pMethods->xWrite(r, data, amt, off);
}
static int walbuf_truncate(sqlite3_file *f, sqlite3_int64 size) {
    sqlite3_file *r = ((WalbufFile *)f)->real;
    return r->pMethods->xTruncate(r, size);
}
static int walbuf_sync(sqlite3_file *f, int flags) {
    sqlite3_file *r = ((WalbufFile *)f)->real;
    return r->pMethods->xSync(r, flags);
}
static int walbuf_size(sqlite3_file *f, sqlite3_int64 *size) {
    sqlite3_file *r = ((WalbufFile *)f)->real;
    return r->pMethods->xFileSize(r, size);
}
static int walbuf_control(sqlite3_file *f, int op, void *arg) {
    sqlite3_file *r = ((WalbufFile *)f)->real;
    return r->pMethods->xFileControl(r, op, arg);
}
static int walbuf_lock_file(sqlite3_file *f, int level) {
    sqlite3_file *r = ((WalbufFile *)f)->real;
    return r->pMethods->xLock(r, level);
}
static int walbuf_unlock(sqlite3_file *f, int level) {
    sqlite3_file *r = ((WalbufFile *)f)->real;
    return r->pMethods->xUnlock(r, level);
}
static int walbuf_reserved(sqlite3_file *f, int *out) {
    sqlite3_file *r = ((WalbufFile *)f)->real;
    return r->pMethods->xCheckReservedLock(r, out);
}
static int walbuf_sector(sqlite3_file *f) {
    sqlite3_file *r = ((WalbufFile *)f)->real;
    return r->pMethods->xSectorSize(r);
}
static int walbuf_device(sqlite3_file *f) {
    sqlite3_file *r = ((WalbufFile *)f)->real;
    return r->pMethods->xDeviceCharacteristics(r);
}
static int walbuf_shm_map(sqlite3_file *f, int page, int size, int extend, void volatile **out) {
    sqlite3_file *r = ((WalbufFile *)f)->real;
    return r->pMethods->xShmMap(r, page, size, extend, out);
}
static int walbuf_shm_lock(sqlite3_file *f, int offset, int n, int flags) {
    WalbufFile *p = (WalbufFile *)f;
    WalbufFile *wal = offset == WALBUF_WRITE_LOCK ? p->wal : NULL;
    int rc;
    if (wal != NULL && flags == (SQLITE_SHM_UNLOCK | SQLITE_SHM_EXCLUSIVE)) {
        /* A write transaction ends. A commit wrote its bytes when it ended; what is left
           is a rolled-back transaction's frames that a full cache wrote early (past the
           WAL's last commit, never read). They go now, while the lock is held, as SQLite
           wrote them: kept, they would later land on another writer's frames. */
        walbuf_flush(wal);
    }
    rc = p->real->pMethods->xShmLock(p->real, offset, n, flags);
    if (rc == SQLITE_OK && wal != NULL && flags == (SQLITE_SHM_LOCK | SQLITE_SHM_EXCLUSIVE)) {
        wal->end = 0;                         /* a write transaction begins */
        wal->commit_given = 0;
    }
    return rc;
}
static void walbuf_shm_barrier(sqlite3_file *f) {
    WalbufFile *p = (WalbufFile *)f;
    WalbufFile *wal = p->wal;
    if (wal != NULL && wal->len) {
        walbuf_count(&walbuf_late);           /* the guard: see the header's comment */
        walbuf_flush(wal);
    }
    p->real->pMethods->xShmBarrier(p->real);
}
static int walbuf_shm_unmap(sqlite3_file *f, int delete_flag) {
    sqlite3_file *r = ((WalbufFile *)f)->real;
    return r->pMethods->xShmUnmap(r, delete_flag);
}
static int walbuf_fetch(sqlite3_file *f, sqlite3_int64 off, int amt, void **out) {
    sqlite3_file *r = ((WalbufFile *)f)->real;
    return r->pMethods->xFetch(r, off, amt, out);
}
static int walbuf_unfetch(sqlite3_file *f, sqlite3_int64 off, void *at) {
    sqlite3_file *r = ((WalbufFile *)f)->real;
    return r->pMethods->xUnfetch(r, off, at);
}

/* -- the VFS ---------------------------------------------------------------------------- */

static int walbuf_open(sqlite3_vfs *vfs, const char *name, sqlite3_file *f, int flags,
                       int *out_flags) {
    WalbufFile *p = (WalbufFile *)f;
    int rc, is_wal;
    memset(p, 0, sizeof(*p));
    p->forks = walbuf_forks;
    p->real = (sqlite3_file *)((char *)p + WALBUF_HEAD);
    rc = walbuf_real->xOpen(walbuf_real, name, p->real, flags, out_flags);
    if (rc != SQLITE_OK || p->real->pMethods == NULL) {
        if (p->real->pMethods != NULL) {
            p->real->pMethods->xClose(p->real);
        }
        p->base.pMethods = NULL;              /* nothing opened: SQLite closes nothing */
        return rc != SQLITE_OK ? rc : SQLITE_CANTOPEN;
    }
    if (p->real->pMethods->iVersion < 3) {    /* not the unix VFS as this was written for */
        p->real->pMethods->xClose(p->real);
        p->base.pMethods = NULL;
        return SQLITE_CANTOPEN;
    }
    is_wal = (flags & SQLITE_OPEN_WAL) != 0;
    p->base.pMethods = is_wal ? &walbuf_wal_methods : &walbuf_main_methods;
    if (name != NULL && (flags & SQLITE_OPEN_MAIN_DB)) {
        p->name = name;
        pthread_mutex_lock(&walbuf_lock);
        p->next = walbuf_mains;
        walbuf_mains = p;
        pthread_mutex_unlock(&walbuf_lock);
    } else if (is_wal && name != NULL) {
        const char *db = sqlite3_filename_database(name);
        WalbufFile *m;
        pthread_mutex_lock(&walbuf_lock);
        for (m = walbuf_mains; m != NULL; m = m->next) {
            if (m->name == db && m->wal == NULL) {
                m->wal = p;
                p->main = m;
                break;
            }
        }
        pthread_mutex_unlock(&walbuf_lock);
    }
    return rc;
}

/* A fork while another thread opens or closes a file would leave the child the list's
   lock held by a thread it does not have: the fork waits for the lock instead. The
   child counts the fork, so the files it inherited write none of their parent's
   gathered bytes (``walbuf_flush``). */
static void walbuf_before_fork(void) {
    pthread_mutex_lock(&walbuf_lock);
}
static void walbuf_after_fork(void) {
    pthread_mutex_unlock(&walbuf_lock);
}
static void walbuf_in_child(void) {
    walbuf_forks++;
    pthread_mutex_unlock(&walbuf_lock);
}

/* Registers the VFS (not as the default) once; SQLITE_OK, or what failed. */
static int walbuf_register(void) {
    static int done = 0;
    int rc;
    sqlite3_io_methods *m;
    if (done) {
        return SQLITE_OK;
    }
    walbuf_real = sqlite3_vfs_find("unix");
    if (walbuf_real == NULL) {
        return SQLITE_ERROR;
    }
    walbuf_vfs = *walbuf_real;                /* its pAppData too: the unix VFS's own */
    walbuf_vfs.zName = "jobpool-walbuf";
    walbuf_vfs.pNext = NULL;
    walbuf_vfs.szOsFile = (int)WALBUF_HEAD + walbuf_real->szOsFile;
    walbuf_vfs.xOpen = walbuf_open;
    m = &walbuf_main_methods;
    m->iVersion = 3;
    m->xClose = walbuf_main_close;
    m->xRead = walbuf_read;
    m->xWrite = walbuf_write;
    m->xTruncate = walbuf_truncate;
    m->xSync = walbuf_sync;
    m->xFileSize = walbuf_size;
    m->xLock = walbuf_lock_file;
    m->xUnlock = walbuf_unlock;
    m->xCheckReservedLock = walbuf_reserved;
    m->xFileControl = walbuf_control;
    m->xSectorSize = walbuf_sector;
    m->xDeviceCharacteristics = walbuf_device;
    m->xShmMap = walbuf_shm_map;
    m->xShmLock = walbuf_shm_lock;
    m->xShmBarrier = walbuf_shm_barrier;
    m->xShmUnmap = walbuf_shm_unmap;
    m->xFetch = walbuf_fetch;
    m->xUnfetch = walbuf_unfetch;
    walbuf_wal_methods = walbuf_main_methods;
    m = &walbuf_wal_methods;
    m->xClose = walbuf_wal_close;
    m->xRead = walbuf_wal_read;
    m->xWrite = walbuf_wal_write;
    m->xTruncate = walbuf_wal_truncate;
    m->xSync = walbuf_wal_sync;
    m->xFileSize = walbuf_wal_size;
    m->xFileControl = walbuf_wal_control;
    if (pthread_atfork(walbuf_before_fork, walbuf_after_fork, walbuf_in_child) != 0) {
        return SQLITE_ERROR;
    }
    rc = sqlite3_vfs_register(&walbuf_vfs, 0);
    if (rc == SQLITE_OK) {
        done = 1;
    }
    return rc;
}

#endif
