/* SPDX-License-Identifier: MIT */
/*
 * examples/pg/weft_pg.c against a real PostgreSQL server, which each test
 * starts in a temporary directory with scripts/pg-test-server.sh (a Unix
 * socket only, fsync off) and stops when it ends, also when it fails (a
 * watchdog process stops it once the test process is gone). Where no
 * server can be started (no PostgreSQL installed), the tests are skipped,
 * saying why. Real time: a real server cannot run on the virtual clock.
 */
#include <fcntl.h>
#include <stdatomic.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "t.h"
#include "weft_pg.h"

static char t_dir[64];
static char t_conninfo[256];

/* Runs scripts/pg-test-server.sh CMD on the test's directory; returns the
 * script's exit status. Its output goes to DIR.log. */
static int t_pg_script(const char *cmd)
{
    char line[1024];
    snprintf(line, sizeof(line),
             "'%s/scripts/pg-test-server.sh' %s '%s' >>'%s.log' 2>&1",
             WEFT_SOURCE_DIR, cmd, t_dir, t_dir);
    int st = system(line);
    return st == -1 ? -1 : WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static void t_pg_cleanup(void)
{
    char line[256];
    t_pg_script("stop");
    snprintf(line, sizeof(line), "rm -rf '%s' '%s.log'", t_dir, t_dir);
    if (system(line) != 0)
        fprintf(stderr, "could not remove %s\n", t_dir);
}

static void t_pg_atexit(void)
{
    if (t_dir[0])
        t_pg_cleanup();
    t_dir[0] = 0;
}

/* Starts the server, or skips the test saying why. A watchdog child waits
 * for this process to end (its pipe's end closes) and stops the server,
 * so that an abort (a failed ASSERT) leaves no server behind either. */
static void t_pg_start(void)
{
    snprintf(t_dir, sizeof(t_dir), "/tmp/weft-pg.XXXXXX");
    ASSERT(mkdtemp(t_dir) != NULL);
    /* Close-on-exec: the server (started by the script) must not hold the
     * pipe open. */
    int fds[2];
    ASSERT(pipe2(fds, O_CLOEXEC) == 0);
    pid_t pid = fork();
    ASSERT(pid >= 0);
    if (pid == 0) {
        close(fds[1]);
        setsid(); /* not in the test's process group */
        char b;
        while (read(fds[0], &b, 1) > 0)
            ;
        t_pg_cleanup();
        _exit(0);
    }
    close(fds[0]); /* fds[1] stays open until this process ends */
    atexit(t_pg_atexit);
    if (t_pg_script("start") != 0) {
        char line[256];
        snprintf(line, sizeof(line), "cat '%s.log' >&2", t_dir);
        if (system(line) != 0)
            fprintf(stderr, "no log\n");
        T_NEED("pg", "could not start a PostgreSQL server "
                     "(scripts/pg-test-server.sh; scripts/deps.sh pg installs "
                     "it)");
    }
    snprintf(t_conninfo, sizeof(t_conninfo),
             "host=%s dbname=postgres user=postgres connect_timeout=5", t_dir);
}

static int t_run_pg(int workers, weft_fn fn)
{
    weft_config cfg = {0};
    cfg.workers = workers;
    return weft_run(&cfg, fn, NULL);
}

/* ---- many queries through a pool ---- */

#define Q_TASKS 64
static pg_pool *q_pool;
static long q_per_task;
static atomic_long q_ok;

static int q_task(void *arg)
{
    long base = (long)(intptr_t)arg * 1000000;
    for (long i = 0; i < q_per_task; i++) {
        char num[32];
        snprintf(num, sizeof(num), "%ld", base + i);
        const char *params[1] = {num};
        PGresult *r;
        int rc = pg_pool_query(q_pool, "SELECT $1::int + 1", 1, params,
                               weft_now() + 10 * WEFT_SEC, &r);
        if (rc != 0)
            T_FAIL("query %ld: %s", base + i, weft_strerror(rc));
        ASSERT_EQ(PQntuples(r), 1);
        ASSERT_EQ(atol(PQgetvalue(r, 0, 0)), base + i + 1);
        PQclear(r);
        atomic_fetch_add(&q_ok, 1);
    }
    return 0;
}

static int q_main(void *arg)
{
    (void)arg;
    ASSERT_EQ(pg_pool_new(&q_pool, t_conninfo, 8, 5 * WEFT_SEC), 0);
    weft_scope *s;
    ASSERT_EQ(weft_scope_open(&s, NULL), 0);
    for (long t = 0; t < Q_TASKS; t++)
        ASSERT(weft_spawn(s, q_task, (void *)(intptr_t)t) >= 0);
    ASSERT_EQ(weft_scope_join(s), 0);
    weft_scope_free(s);
    weft_pool_stats st;
    ASSERT_EQ(weft_pool_stats_get(q_pool->pool, &st), 0);
    fprintf(stderr, "%ld queries, %lld connections made\n", (long)st.acquired,
            (long long)st.created);
    ASSERT(st.created >= 1 && st.created <= 8);
    ASSERT_EQ(st.destroyed, 0);
    ASSERT_EQ(st.in_use, 0);
    ASSERT_EQ(st.waiting, 0);
    ASSERT_EQ(st.acquired, Q_TASKS * q_per_task);
    ASSERT_EQ(pg_pool_free(q_pool, weft_now() + 5 * WEFT_SEC), 0);
    return 0;
}

/* 64 tasks on 2 workers run 10,000 queries through 8 connections, each
 * result checked; the pool never made more than 8 and lends none at the
 * end. */
TEST(pool_queries)
{
    t_pg_start();
    q_per_task = (T_SCALE(10000) + Q_TASKS - 1) / Q_TASKS;
    ASSERT_EQ(t_run_pg(2, q_main), 0);
    ASSERT_EQ(atomic_load(&q_ok), Q_TASKS * q_per_task);
}

/* ---- a query cancelled by its deadline, or by its scope ---- */

/* How many backends run pg_sleep(10) now (seen on another connection). */
static long sleeping_queries(pg_conn *c)
{
    PGresult *r;
    int rc = pg_query(c,
                      "SELECT count(*) FROM pg_stat_activity WHERE "
                      "state = 'active' AND query = 'SELECT pg_sleep(10)'",
                      0, NULL, weft_now() + 5 * WEFT_SEC, &r);
    if (rc != 0)
        T_FAIL("pg_stat_activity: %s", weft_strerror(rc));
    long n = atol(PQgetvalue(r, 0, 0));
    PQclear(r);
    return n;
}

/* Waits (up to 5 s) until the server runs no pg_sleep(10): the cancel
 * reached it. Statistics may trail a backend's state by a moment. */
static void assert_no_sleeper(pg_conn *watch)
{
    weft_time end = weft_now() + 5 * WEFT_SEC;
    while (sleeping_queries(watch) != 0) {
        ASSERT(weft_now() < end);
        ASSERT_EQ(weft_sleep_for(10 * WEFT_MSEC), 0);
    }
}

static void assert_usable(pg_conn *c)
{
    PGresult *r;
    ASSERT_EQ(
        pg_query(c, "SELECT 41 + 1", 0, NULL, weft_now() + 5 * WEFT_SEC, &r),
        0);
    ASSERT_EQ(atol(PQgetvalue(r, 0, 0)), 42);
    PQclear(r);
}

static int deadline_main(void *arg)
{
    (void)arg;
    pg_conn *c, *watch;
    ASSERT_EQ(pg_connect(t_conninfo, weft_now() + 5 * WEFT_SEC, &c), 0);
    ASSERT_EQ(pg_connect(t_conninfo, weft_now() + 5 * WEFT_SEC, &watch), 0);
    PGresult *r;
    weft_time t0 = weft_now();
    ASSERT_EQ(
        pg_query(c, "SELECT pg_sleep(10)", 0, NULL, t0 + 200 * WEFT_MSEC, &r),
        -ETIMEDOUT);
    ASSERT(r == NULL);
    /* Promptly: the deadline, the cancel and the drain, well under the 10
     * s the statement would take. */
    int64_t took = weft_now() - t0;
    ASSERT(took >= 200 * WEFT_MSEC && took < 3 * WEFT_SEC);
    ASSERT(!c->broken);
    assert_no_sleeper(watch);
    assert_usable(c); /* drained: the next query works on it */
    pg_close(c);
    pg_close(watch);
    return 0;
}

/* SELECT pg_sleep(10) with a 200 ms deadline returns -ETIMEDOUT within a
 * few hundred ms, the server no longer runs it (pg_stat_activity, seen on
 * another connection), and the connection serves the next query. */
TEST(query_deadline_cancels_on_server)
{
    t_pg_start();
    ASSERT_EQ(t_run_pg(1, deadline_main), 0);
}

static pg_conn *sc_conn;
static int sc_rc;

static int sc_query(void *arg)
{
    (void)arg;
    PGresult *r;
    sc_rc = pg_query(sc_conn, "SELECT pg_sleep(10)", 0, NULL, WEFT_NEVER, &r);
    ASSERT(r == NULL);
    return 0;
}

static int scope_main(void *arg)
{
    (void)arg;
    pg_conn *watch;
    ASSERT_EQ(pg_connect(t_conninfo, weft_now() + 5 * WEFT_SEC, &sc_conn), 0);
    ASSERT_EQ(pg_connect(t_conninfo, weft_now() + 5 * WEFT_SEC, &watch), 0);
    weft_time t0 = weft_now();
    weft_scope *s;
    weft_scope_opts o = {.deadline = t0 + 200 * WEFT_MSEC};
    ASSERT_EQ(weft_scope_open(&s, &o), 0);
    ASSERT(weft_spawn(s, sc_query, NULL) >= 0);
    ASSERT_EQ(weft_scope_join(s), -ETIMEDOUT);
    ASSERT_EQ(sc_rc, -ECANCELED);
    weft_scope_free(s);
    ASSERT(weft_now() - t0 < 3 * WEFT_SEC);
    ASSERT(!sc_conn->broken);
    assert_no_sleeper(watch);
    assert_usable(sc_conn);
    pg_close(sc_conn);
    pg_close(watch);
    return 0;
}

/* A query whose task is cancelled (its scope's deadline) returns
 * -ECANCELED promptly; the cancel still reaches the server (from a
 * shielded scope) and the connection is drained for the next query. */
TEST(query_cancelled_by_scope)
{
    t_pg_start();
    ASSERT_EQ(t_run_pg(1, scope_main), 0);
}

/* ---- the server restarted under a running pool ---- */

#define R_TASKS 12
static pg_pool *r_pool;
static atomic_int r_restarted;
static atomic_long r_before, r_failed, r_reset, r_after;
static weft_event r_warm = WEFT_EVENT_INIT;

static int r_task(void *arg)
{
    (void)arg;
    int after = 0;
    weft_time end = weft_now() + 20 * WEFT_SEC;
    while (after < 3) {
        ASSERT(weft_now() < end);
        int restarted = atomic_load(&r_restarted);
        PGresult *r;
        int rc = pg_pool_query(r_pool, "SELECT pg_sleep(0.02), 7", 0, NULL,
                               weft_now() + 5 * WEFT_SEC, &r);
        if (rc == 0) {
            ASSERT_EQ(atol(PQgetvalue(r, 0, 1)), 7);
            PQclear(r);
            if (restarted) {
                after++;
                atomic_fetch_add(&r_after, 1);
            } else if (atomic_fetch_add(&r_before, 1) + 1 == 2 * R_TASKS) {
                weft_event_set(&r_warm);
            }
            continue;
        }
        PQclear(r);
        /* The server went away: the query in flight, or the connection
         * being made, failed. */
        if (rc != -ECONNRESET && rc != -ECONNREFUSED && rc != -EIO)
            T_FAIL("query: %s", weft_strerror(rc));
        atomic_fetch_add(&r_failed, 1);
        if (rc == -ECONNRESET)
            atomic_fetch_add(&r_reset, 1);
    }
    return 0;
}

static int r_restart(void *arg)
{
    (void)arg;
    return t_pg_script("restart") == 0 ? 0 : -EIO;
}

static int restart_main(void *arg)
{
    (void)arg;
    ASSERT_EQ(pg_pool_new(&r_pool, t_conninfo, 4, 5 * WEFT_SEC), 0);
    weft_scope *s;
    ASSERT_EQ(weft_scope_open(&s, NULL), 0);
    for (int t = 0; t < R_TASKS; t++)
        ASSERT(weft_spawn(s, r_task, NULL) >= 0);
    /* Queries are flowing on every connection; restart under them. */
    ASSERT_EQ(weft_event_wait_until(&r_warm, weft_now() + 10 * WEFT_SEC), 0);
    weft_pool_stats st0;
    ASSERT_EQ(weft_pool_stats_get(r_pool->pool, &st0), 0);
    ASSERT_EQ(weft_blocking(r_restart, NULL), 0);
    atomic_store(&r_restarted, 1);
    ASSERT_EQ(weft_scope_join(s), 0);
    weft_scope_free(s);

    weft_pool_stats st;
    ASSERT_EQ(weft_pool_stats_get(r_pool->pool, &st), 0);
    fprintf(stderr,
            "before %ld, failed %ld (%ld reset), after %ld; created %lld, "
            "destroyed %lld\n",
            atomic_load(&r_before), atomic_load(&r_failed),
            atomic_load(&r_reset), atomic_load(&r_after), (long long)st.created,
            (long long)st.destroyed);
    /* The queries in flight failed with the connection... */
    ASSERT(atomic_load(&r_reset) >= 1);
    /* ... each was given back as broken and destroyed (and the idle ones
     * the server closed failed validation), and new ones were made. */
    ASSERT(st.destroyed >= atomic_load(&r_reset));
    ASSERT(st.destroyed >= st0.created);
    ASSERT(st.created > st0.created);
    ASSERT(st.size <= 4 && st.in_use == 0);
    ASSERT_EQ(st.created - st.destroyed, st.size);
    ASSERT_EQ(atomic_load(&r_after), 3 * R_TASKS);
    ASSERT_EQ(pg_pool_free(r_pool, weft_now() + 5 * WEFT_SEC), 0);
    return 0;
}

/* pg_ctl restart -m fast under 12 tasks querying through 4 connections:
 * the queries in flight fail (-ECONNRESET), their connections are given
 * back as broken and replaced, and every task's later queries succeed. */
TEST(server_restart_recovers)
{
    t_pg_start();
    ASSERT_EQ(t_run_pg(2, restart_main), 0);
}
