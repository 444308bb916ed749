/* The bare pool of benchmarks/sqlite_floors.py written in C: the floor of a pool that
 * keeps R6 (nothing claimed ahead of a free slot) and commits one transaction per
 * turn, with no interpreter anywhere on the path (issue 26: which of the W1 targets a
 * physical floor puts out of reach).
 *
 *     cc -O2 -o bare_pool bare_pool.c -lsqlite3 && ./bare_pool DB JOBS PROCS [PROGRAM ARG...]
 *
 * The same store as the Python bare pool (a three-column table, one partial index on
 * the ready rows; WAL, synchronous=NORMAL, 1 KiB pages) and the same statements (a
 * settle UPDATE per finished job, one claim UPDATE ... RETURNING for the free slots),
 * prepared once and stepped with sqlite3's C API. The parent waits in poll(2) on the
 * children's answer pipes; each wake-up is one transaction that settles what came back
 * and claims one row per free child, then writes each child its job id (8 bytes). A
 * child is a read/write loop that answers at once; with PROGRAM, each child execs it
 * instead (``PROGRAM ARG... JOBS_FD ANSWERS_FD``), which must write one byte on
 * ANSWERS_FD when it is ready and then answer each 8-byte id with the same 8 bytes:
 * the clock starts once every child said it is ready. Prints one JSON object: jobs/s,
 * the parent's CPU per job (getrusage) and jobs per transaction. */
#include <poll.h>
#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_PROCS 64

static sqlite3 *db;

static void fail(const char *what) {
    fprintf(stderr, "bare_pool: %s: %s\n", what, db ? sqlite3_errmsg(db) : "no database");
    exit(1);
}

static void run(const char *sql) {
    char *err = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &err) != SQLITE_OK) {
        fprintf(stderr, "bare_pool: %s: %s\n", sql, err);
        exit(1);
    }
}

static sqlite3_stmt *prepare(const char *sql) {
    sqlite3_stmt *stmt;
    if (sqlite3_prepare_v3(db, sql, -1, SQLITE_PREPARE_PERSISTENT, &stmt, NULL) != SQLITE_OK)
        fail(sql);
    return stmt;
}

static void step_done(sqlite3_stmt *stmt, const char *what) {
    if (sqlite3_step(stmt) != SQLITE_DONE) fail(what);
    sqlite3_reset(stmt);
}

static double seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static double cpu_seconds(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec
           + ru.ru_stime.tv_usec / 1e6;
}

static void child(int jobs_r, int answers_w) {
    int64_t id;
    while (read(jobs_r, &id, sizeof id) == (ssize_t)sizeof id)
        if (write(answers_w, &id, sizeof id) != (ssize_t)sizeof id) break;
    _exit(0);
}

static void exec_child(char **program, int jobs_r, int answers_w) {
    int n = 0;
    while (program[n]) n++;
    char **args = calloc(n + 3, sizeof *args);
    char fds[2][16];
    snprintf(fds[0], sizeof fds[0], "%d", jobs_r);
    snprintf(fds[1], sizeof fds[1], "%d", answers_w);
    memcpy(args, program, n * sizeof *args);
    args[n] = fds[0];
    args[n + 1] = fds[1];
    execvp(args[0], args);
    perror("execvp");
    _exit(127);
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: bare_pool DB JOBS PROCS [PROGRAM ARG...]\n");
        return 2;
    }
    const char *path = argv[1];
    long jobs = atol(argv[2]);
    int procs = atoi(argv[3]);
    if (jobs < 1 || procs < 1 || procs > MAX_PROCS) {
        fprintf(stderr, "bare_pool: JOBS >= 1 and 1 <= PROCS <= %d\n", MAX_PROCS);
        return 2;
    }
    if (sqlite3_open(path, &db) != SQLITE_OK) fail("open");
    run("PRAGMA page_size=1024");
    run("PRAGMA journal_mode=WAL");
    run("PRAGMA synchronous=NORMAL");
    run("CREATE TABLE jobs (id INTEGER PRIMARY KEY, status INTEGER NOT NULL, lease REAL)");
    run("CREATE INDEX jobs_ready ON jobs (id) WHERE status = 0");
    run("BEGIN");
    sqlite3_stmt *insert = prepare("INSERT INTO jobs (status) VALUES (0)");
    for (long i = 0; i < jobs; i++) step_done(insert, "insert");
    sqlite3_finalize(insert);
    run("COMMIT");

    sqlite3_stmt *begin = prepare("BEGIN IMMEDIATE");
    sqlite3_stmt *commit = prepare("COMMIT");
    sqlite3_stmt *settle = prepare("UPDATE jobs SET status = 2, lease = NULL WHERE id = ? AND status = 1");
    sqlite3_stmt *claim = prepare(
        "UPDATE jobs SET status = 1, lease = ? WHERE id IN "
        "(SELECT id FROM jobs WHERE status = 0 ORDER BY id LIMIT ?) RETURNING id");

    int jobs_w[MAX_PROCS], answers_r[MAX_PROCS];
    pid_t pids[MAX_PROCS];
    for (int c = 0; c < procs; c++) {
        int jp[2], ap[2];
        if (pipe(jp) || pipe(ap)) { perror("pipe"); return 1; }
        pid_t pid = fork();
        if (pid < 0) { perror("fork"); return 1; }
        if (pid == 0) {
            close(jp[1]);
            close(ap[0]);
            for (int o = 0; o < c; o++) { close(jobs_w[o]); close(answers_r[o]); }
            if (argc > 4) exec_child(argv + 4, jp[0], ap[1]);
            child(jp[0], ap[1]);
        }
        close(jp[0]);
        close(ap[1]);
        jobs_w[c] = jp[1];
        answers_r[c] = ap[0];
        pids[c] = pid;
    }

    int free_slots[MAX_PROCS], n_free = procs;
    for (int c = 0; c < procs; c++) free_slots[c] = c;
    int64_t finished[MAX_PROCS];
    int n_finished = 0;
    long done = 0, turns = 0;
    struct pollfd fds[MAX_PROCS];
    for (int c = 0; c < procs; c++) fds[c] = (struct pollfd){.fd = answers_r[c], .events = POLLIN};
    if (argc > 4) {
        for (int c = 0; c < procs; c++) {
            char ready;
            if (read(answers_r[c], &ready, 1) != 1) {
                fprintf(stderr, "bare_pool: child %d never said it was ready\n", c);
                return 1;
            }
        }
    }
    double cpu0 = cpu_seconds(), t0 = seconds();
    while (done < jobs) {
        step_done(begin, "begin");
        for (int i = 0; i < n_finished; i++) {
            sqlite3_bind_int64(settle, 1, finished[i]);
            step_done(settle, "settle");
        }
        done += n_finished;
        n_finished = 0;
        int64_t claimed[MAX_PROCS];
        int n_claimed = 0;
        if (n_free) {
            sqlite3_bind_double(claim, 1, 1.0);
            sqlite3_bind_int(claim, 2, n_free);
            int rc;
            while ((rc = sqlite3_step(claim)) == SQLITE_ROW) claimed[n_claimed++] = sqlite3_column_int64(claim, 0);
            if (rc != SQLITE_DONE) fail("claim");
            sqlite3_reset(claim);
        }
        step_done(commit, "commit");
        turns++;
        for (int i = 0; i < n_claimed; i++) {
            int c = free_slots[--n_free];
            if (write(jobs_w[c], &claimed[i], sizeof claimed[i]) != (ssize_t)sizeof claimed[i]) {
                perror("write");
                return 1;
            }
        }
        if (done >= jobs) break;
        if (poll(fds, procs, -1) < 0) { perror("poll"); return 1; }
        for (int c = 0; c < procs; c++) {
            if (!(fds[c].revents & POLLIN)) continue;
            if (read(answers_r[c], &finished[n_finished], sizeof finished[0]) != (ssize_t)sizeof finished[0]) {
                perror("read");
                return 1;
            }
            n_finished++;
            free_slots[n_free++] = c;
        }
    }
    double wall = seconds() - t0, cpu = cpu_seconds() - cpu0;
    for (int c = 0; c < procs; c++) {
        close(jobs_w[c]);
        close(answers_r[c]);
        waitpid(pids[c], NULL, 0);
    }
    sqlite3_stmt *left = prepare("SELECT count(*) FROM jobs WHERE status != 2");
    if (sqlite3_step(left) != SQLITE_ROW) fail("count");
    long not_done = (long)sqlite3_column_int64(left, 0);
    sqlite3_finalize(left);
    if (not_done) {
        fprintf(stderr, "bare_pool: %ld rows not done\n", not_done);
        return 1;
    }
    printf("{\"jobs_per_s\": %.1f, \"parent_cpu_us\": %.2f, \"jobs_per_turn\": %.3f}\n",
           jobs / wall, cpu / jobs * 1e6, (double)jobs / turns);
    return 0;
}
