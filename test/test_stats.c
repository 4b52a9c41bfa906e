/* SPDX-License-Identifier: MIT */
/*
 * Statistics, the lag histogram, slow slices and the watchdog: counters
 * that add up after known workloads and never decrease whoever reads
 * them, "now" figures while tasks wait on timers, descriptors and the
 * blocking pool, the watchdog catching a task that spins (and not one
 * that yields) and telling the hold's end, and a task computing beside a
 * ticker seen in slow slices, lag and the watchdog.
 */
#include "observe/observe.h" /* weft__slices_format, for the dump */
#include "sched/scheduler.h"
#include "t.h"
#include "weft.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

static weft_stats snap(void)
{
    weft_stats s;
    ASSERT_EQ(weft_stats_get(&s, NULL, 0), weft_workers());
    return s;
}

static int noop(void *arg)
{
    (void)arg;
    return 0;
}

/* ---- spawned, finished, alive ---- */

#define N_SPAWN 200

static int count_root(void *arg)
{
    (void)arg;
    weft_stats s0 = snap();
    ASSERT_EQ(s0.spawned, 1); /* the root task */
    ASSERT_EQ(s0.finished, 0);
    ASSERT_EQ(s0.alive, 1);
    weft_scope *s;
    ASSERT_EQ(weft_scope_open(&s, NULL), 0);
    for (int i = 0; i < N_SPAWN; i++)
        ASSERT(weft_spawn(s, noop, NULL) >= 0);
    weft_stats s1 = snap();
    ASSERT_EQ(s1.spawned, N_SPAWN + 1);
    ASSERT_EQ(s1.alive, s1.spawned - s1.finished);
    ASSERT_EQ(weft_scope_join(s), 0);
    ASSERT_EQ(weft_scope_free(s), 0);
    weft_stats s2 = snap();
    ASSERT_EQ(s2.spawned, N_SPAWN + 1);
    ASSERT_EQ(s2.finished, N_SPAWN);
    ASSERT_EQ(s2.alive, 1);
    /* Per worker, the figures add up to the totals. */
    weft_worker_stats w[4];
    int n = weft_stats_get(&s2, w, 4);
    ASSERT_EQ(n, weft_workers());
    uint64_t sp = 0, fin = 0;
    for (int i = 0; i < n; i++) {
        sp += w[i].spawned;
        fin += w[i].finished;
    }
    ASSERT_EQ(sp, N_SPAWN + 1);
    ASSERT_EQ(fin, N_SPAWN);
    ASSERT(s2.all.switches >= N_SPAWN); /* each child ran at least once */
    return 0;
}

TEST(spawned_finished_alive_one_worker)
{
    ASSERT_EQ(t_run_mono(1, count_root, NULL), 0);
}

TEST(spawned_finished_alive_two_workers)
{
    ASSERT_EQ(t_run_mono(2, count_root, NULL), 0);
}

/* ---- parks and switches ---- */

#define ROUNDS 5000

static int echo(void *arg)
{
    weft_chan **c = arg;
    int v;
    while (weft_chan_recv(c[0], &v) == 0)
        if (weft_chan_send(c[1], &v) != 0)
            break;
    return 0;
}

static int pingpong_root(void *arg)
{
    int rounds = (int)(intptr_t)arg;
    weft_chan *c[2];
    ASSERT_EQ(weft_chan_new(&c[0], sizeof(int), 0), 0);
    ASSERT_EQ(weft_chan_new(&c[1], sizeof(int), 0), 0);
    weft_scope *s;
    ASSERT_EQ(weft_scope_open(&s, NULL), 0);
    ASSERT(weft_spawn(s, echo, c) >= 0);
    weft_stats before = snap();
    for (int i = 0; i < rounds; i++) {
        int v = i;
        ASSERT_EQ(weft_chan_send(c[0], &v), 0);
        ASSERT_EQ(weft_chan_recv(c[1], &v), 0);
        ASSERT_EQ(v, i);
    }
    weft_stats after = snap();
    /* On one worker with rendezvous channels every round parks the root
     * at least once (its receive of the echo) and the echo once (its next
     * receive); each park is one switch away at least. */
    uint64_t parks = after.all.parks - before.all.parks;
    uint64_t switches = after.all.switches - before.all.switches;
    ASSERT(parks >= 2 * (uint64_t)rounds);
    ASSERT(switches >= parks);
    /* The lag histogram has samples: one wake in 1024 is timed. */
    uint64_t samples = 0;
    for (int i = 0; i < WEFT_LAG_BUCKETS; i++)
        samples += after.all.lag[i];
    ASSERT(samples >= (2 * (uint64_t)rounds) / 1024 - 1);
    ASSERT(samples > 0);
    int64_t p50 = weft_lag_quantile(&after.all, 0.5);
    int64_t p99 = weft_lag_quantile(&after.all, 0.99);
    ASSERT(p50 > 0);
    ASSERT(p99 >= p50);
    ASSERT_EQ(weft_chan_close(c[0]), 0);
    ASSERT_EQ(weft_scope_join(s), 0);
    ASSERT_EQ(weft_scope_free(s), 0);
    weft_chan_unref(c[0]);
    weft_chan_unref(c[1]);
    return 0;
}

TEST(parks_switches_and_lag)
{
    ASSERT_EQ(t_run_mono(1, pingpong_root, (void *)(intptr_t)ROUNDS), 0);
}

/* ---- wakes from other workers ---- */

static weft_event ev_cross = WEFT_EVENT_INIT;

static int set_from_worker1(void *arg)
{
    (void)arg;
    ASSERT_EQ(weft_worker_id(), 1);
    /* On the virtual clock this returns only once every worker is idle:
     * the root is parked on the event. */
    ASSERT_EQ(weft_sleep_for(WEFT_MSEC), 0);
    return weft_event_set(&ev_cross);
}

static int cross_root(void *arg)
{
    (void)arg;
    ASSERT_EQ(weft_worker_id(), 0);
    weft_worker_stats w0[2], w1[2];
    weft_stats s;
    ASSERT_EQ(weft_stats_get(&s, w0, 2), 2);
    weft_scope *sc;
    ASSERT_EQ(weft_scope_open(&sc, NULL), 0);
    weft_spawn_opts o = {.name = "setter", .worker = 2}; /* worker 1 */
    ASSERT(weft_spawn_ex(sc, set_from_worker1, NULL, &o) >= 0);
    ASSERT_EQ(weft_event_wait(&ev_cross), 0); /* woken by worker 1 */
    ASSERT_EQ(weft_worker_id(), 0);
    ASSERT_EQ(weft_stats_get(&s, w1, 2), 2);
    /* The root's wake came through worker 0's inbox; the pinned spawn
     * through worker 1's. */
    ASSERT(w1[0].inbox >= w0[0].inbox + 1);
    ASSERT(w1[1].inbox >= w0[1].inbox + 1);
    ASSERT(w1[0].parks >= w0[0].parks + 1);
    ASSERT_EQ(weft_scope_join(sc), 0);
    ASSERT_EQ(weft_scope_free(sc), 0);
    return 0;
}

TEST(wakes_from_other_workers_come_through_the_inbox)
{
    ASSERT_EQ(t_run_virtual(2, cross_root, NULL), 0);
}

/* ---- timers armed, descriptor waits, runnable tasks ---- */

#define N_WAIT 16

static int sleeper(void *arg)
{
    (void)arg;
    return weft_sleep_for(WEFT_SEC);
}

static int timers_root(void *arg)
{
    (void)arg;
    weft_scope *s;
    ASSERT_EQ(weft_scope_open(&s, NULL), 0);
    for (int i = 0; i < N_WAIT; i++)
        ASSERT(weft_spawn(s, sleeper, NULL) >= 0);
    weft_stats st = snap();
    ASSERT_EQ(st.all.runq, N_WAIT); /* spawned, not started */
    ASSERT_EQ(st.all.timers, 0);
    /* A yield goes after everything else: each sleeper runs and parks. */
    ASSERT_EQ(weft_yield(), 0);
    st = snap();
    ASSERT_EQ(st.all.timers, N_WAIT);
    ASSERT_EQ(st.all.runq, 0);
    ASSERT_EQ(st.alive, N_WAIT + 1);
    ASSERT_EQ(weft_scope_join(s), 0); /* the clock jumps a second */
    ASSERT_EQ(weft_scope_free(s), 0);
    st = snap();
    ASSERT_EQ(st.all.timers, 0);
    ASSERT_EQ(st.alive, 1);
    return 0;
}

TEST(timers_armed_while_tasks_sleep)
{
    ASSERT_EQ(t_run_virtual(1, timers_root, NULL), 0);
}

static int pipe_reader(void *arg)
{
    int fd = *(int *)arg;
    int rc = weft_fd_wait(fd, WEFT_IO_READ, WEFT_NEVER);
    ASSERT_EQ(rc, -ECANCELED); /* nothing is written: the scope's cancel */
    return 0;
}

static int fd_root(void *arg)
{
    (void)arg;
    int p[2];
    ASSERT_EQ(pipe2(p, O_NONBLOCK | O_CLOEXEC), 0);
    weft_scope *s;
    ASSERT_EQ(weft_scope_open(&s, NULL), 0);
    for (int i = 0; i < N_WAIT; i++)
        ASSERT(weft_spawn(s, pipe_reader, &p[0]) >= 0);
    ASSERT_EQ(snap().all.fd_waits, 0);
    ASSERT_EQ(weft_yield(), 0); /* each reader parks on the pipe */
    ASSERT_EQ(snap().all.fd_waits, N_WAIT);
    ASSERT_EQ(weft_scope_cancel(s), 0);
    ASSERT_EQ(weft_scope_join(s), -ECANCELED);
    ASSERT_EQ(weft_scope_free(s), 0);
    ASSERT_EQ(snap().all.fd_waits, 0);
    ASSERT_EQ(weft_close(p[0]), 0);
    close(p[1]);
    return 0;
}

TEST(descriptor_waits_while_tasks_wait_on_a_pipe)
{
    ASSERT_EQ(t_run_mono(1, fd_root, NULL), 0);
}

/* ---- the blocking pool ---- */

#define N_POOL 4

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool release;
    atomic_int in;
    weft_event all_in;
} pool_hold = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false, 0,
               WEFT_EVENT_INIT};

static int held_call(void *arg)
{
    (void)arg;
    if (atomic_fetch_add(&pool_hold.in, 1) + 1 == N_POOL)
        weft_event_set(&pool_hold.all_in); /* any thread may set it */
    pthread_mutex_lock(&pool_hold.mu);
    while (!pool_hold.release)
        pthread_cond_wait(&pool_hold.cv, &pool_hold.mu);
    pthread_mutex_unlock(&pool_hold.mu);
    return 0;
}

static int pool_caller(void *arg)
{
    (void)arg;
    return weft_blocking(held_call, NULL);
}

static int pool_root(void *arg)
{
    (void)arg;
    ASSERT_EQ(snap().blocking.threads, 0);
    weft_scope *s;
    ASSERT_EQ(weft_scope_open(&s, NULL), 0);
    for (int i = 0; i < N_POOL; i++)
        ASSERT(weft_spawn(s, pool_caller, NULL) >= 0);
    ASSERT_EQ(weft_event_wait(&pool_hold.all_in), 0);
    weft_stats st = snap();
    ASSERT_EQ(st.blocking.running, N_POOL);
    ASSERT(st.blocking.threads >= N_POOL);
    ASSERT_EQ(st.blocking.queued, 0);
    ASSERT_EQ(st.blocking.calls, 0);
    pthread_mutex_lock(&pool_hold.mu);
    pool_hold.release = true;
    pthread_cond_broadcast(&pool_hold.cv);
    pthread_mutex_unlock(&pool_hold.mu);
    ASSERT_EQ(weft_scope_join(s), 0);
    ASSERT_EQ(weft_scope_free(s), 0);
    st = snap();
    ASSERT_EQ(st.blocking.running, 0);
    ASSERT_EQ(st.blocking.calls, N_POOL);
    return 0;
}

TEST(blocking_pool_busy_while_calls_are_held)
{
    ASSERT_EQ(t_run_mono(2, pool_root, NULL), 0);
}

/* ---- misuse ---- */

static int misuse_root(void *arg)
{
    (void)arg;
    weft_stats s;
    weft_worker_stats w;
    ASSERT_EQ(weft_stats_get(NULL, NULL, 0), -EINVAL);
    ASSERT_EQ(weft_stats_get(&s, NULL, 1), -EINVAL);
    ASSERT_EQ(weft_stats_get(&s, &w, -1), -EINVAL);
    ASSERT_EQ(weft_stats_get(&s, &w, 1), 1);
    return 0;
}

TEST(misuse)
{
    weft_stats s;
    ASSERT_EQ(weft_stats_get(&s, NULL, 0), -EPERM); /* not in a task */
    ASSERT_EQ(t_run_mono(1, misuse_root, NULL), 0);
    weft_worker_stats w = {0};
    ASSERT_EQ(weft_lag_quantile(NULL, 0.5), -EINVAL);
    ASSERT_EQ(weft_lag_quantile(&w, -0.1), -EINVAL);
    ASSERT_EQ(weft_lag_quantile(&w, 1.5), -EINVAL);
    ASSERT_EQ(weft_lag_quantile(&w, 0.5), -ENODATA); /* no samples */
    w.lag[3] = 1;                                    /* 8 to 15 ns */
    w.lag[10] = 3;                                   /* 1024 to 2047 ns */
    ASSERT_EQ(weft_lag_quantile(&w, 0.25), 16);
    ASSERT_EQ(weft_lag_quantile(&w, 0.5), 2048);
    ASSERT_EQ(weft_lag_quantile(&w, 0.0), 16);
    w.lag_max_ns = 1500; /* the exact maximum bounds the last bucket's */
    ASSERT_EQ(weft_lag_quantile(&w, 0.5), 1500);
    ASSERT_EQ(weft_lag_quantile(&w, 0.25), 16);
    w.lag_max_ns = 0;
    w.lag[WEFT_LAG_BUCKETS - 1] = 100;
    ASSERT_EQ(weft_lag_quantile(&w, 1.0), WEFT_NEVER);
    w.lag_max_ns = 3 * WEFT_SEC;
    ASSERT_EQ(weft_lag_quantile(&w, 1.0), 3 * WEFT_SEC);
    weft_config bad = {.watchdog_ns = -1};
    ASSERT_EQ(weft_run(&bad, noop, NULL), -EINVAL);
    weft_config bad_slice = {.slow_slice_ns = -1};
    ASSERT_EQ(weft_run(&bad_slice, noop, NULL), -EINVAL);
}

/* ---- the watchdog ---- */

static const char *wd_only; /* set before weft_run */

static struct {
    atomic_int reports;
    atomic_int worker;
    char name[32]; /* r->name is valid during the call only: copied */
    const char *_Atomic file;
    atomic_int line;
    _Atomic int64_t held_ns;
} wd_seen;

static void on_watchdog(const weft_watchdog_report *r, void *arg)
{
    ASSERT(arg == &wd_seen);
    /* A slow start (a sanitizer's first allocations) or a thread the
     * kernel deschedules on a loaded machine can hold a worker past a
     * short threshold: only reports of the task under test count. */
    if (wd_only && strcmp(r->name, wd_only) != 0)
        return;
    atomic_store(&wd_seen.worker, r->worker);
    snprintf(wd_seen.name, sizeof wd_seen.name, "%s", r->name);
    atomic_store(&wd_seen.file, r->file);
    atomic_store(&wd_seen.line, r->line);
    atomic_store(&wd_seen.held_ns, r->held_ns);
    atomic_fetch_add(&wd_seen.reports, 1); /* last: the hog stops on it */
}

/* Spins, never parking, until the watchdog reports (or 20 s of CPU, a
 * cap far above any report's latency, so a broken watchdog fails the test
 * instead of hanging it). */
static int hog(void *arg)
{
    (void)arg;
    int64_t cap = t_thread_cpu_ns() + 20 * WEFT_SEC;
    while (atomic_load(&wd_seen.reports) == 0 && t_thread_cpu_ns() < cap) {
    }
    return 0;
}

static int hog_line;

static int hog_root(void *arg)
{
    (void)arg;
    weft_scope *s;
    ASSERT_EQ(weft_scope_open(&s, NULL), 0);
    weft_spawn_opts o = {.name = "hog"};
    hog_line = __LINE__ + 1;
    ASSERT(weft_spawn_ex(s, hog, NULL, &o) >= 0);
    ASSERT_EQ(weft_scope_join(s), 0);
    ASSERT_EQ(weft_scope_free(s), 0);
    return 0;
}

static void watchdog_catches(int workers, weft_clock_kind clock)
{
    memset(&wd_seen, 0, sizeof wd_seen);
    wd_only = "hog";
    weft_config cfg = {.workers = workers,
                       .clock = clock,
                       .watchdog_ns = 5 * WEFT_MSEC,
                       .watchdog_fn = on_watchdog,
                       .watchdog_arg = &wd_seen};
    ASSERT_EQ(weft_run(&cfg, hog_root, NULL), 0);
    ASSERT(atomic_load(&wd_seen.reports) >= 1);
    ASSERT(strcmp(wd_seen.name, "hog") == 0);
    const char *file = atomic_load(&wd_seen.file);
    ASSERT(strstr(file, "test_stats.c") != NULL);
    ASSERT_EQ(atomic_load(&wd_seen.line), hog_line);
    int wk = atomic_load(&wd_seen.worker);
    ASSERT(wk >= 0 && wk < workers);
    ASSERT(atomic_load(&wd_seen.held_ns) >= 5 * WEFT_MSEC);
}

TEST(watchdog_reports_a_task_that_spins)
{
    watchdog_catches(1, WEFT_CLOCK_MONOTONIC);
    watchdog_catches(2, WEFT_CLOCK_MONOTONIC);
}

TEST(watchdog_works_in_real_time_on_the_virtual_clock)
{
    watchdog_catches(1, WEFT_CLOCK_VIRTUAL);
}

/* The longest real time between two of any yielder's loop passes. */
static _Atomic int64_t yield_gap_max;

/* Yields for `ns` of real time: the worker moves on at every yield. */
static int yielder(void *arg)
{
    int64_t now = t_real_ns(), until = now + *(int64_t *)arg;
    while (now < until) {
        ASSERT_EQ(weft_yield(), 0);
        int64_t then = now, gap;
        now = t_real_ns();
        gap = now - then;
        int64_t max = atomic_load(&yield_gap_max);
        while (gap > max &&
               !atomic_compare_exchange_weak(&yield_gap_max, &max, gap)) {
        }
    }
    return 0;
}

static int yielders_root(void *arg)
{
    weft_scope *s;
    ASSERT_EQ(weft_scope_open(&s, NULL), 0);
    weft_spawn_opts o = {.name = "yielder"};
    for (int i = 0; i < 3; i++)
        ASSERT(weft_spawn_ex(s, yielder, arg, &o) >= 0);
    ASSERT_EQ(weft_scope_join(s), 0);
    ASSERT_EQ(weft_scope_free(s), 0);
    return 0;
}

TEST(watchdog_is_quiet_for_tasks_that_yield)
{
    /* A threshold well above a descheduled thread's pause on a loaded
     * machine (the watchdog cannot tell the two apart: both hold the
     * worker in real time), and yielding for two and a half thresholds. */
    memset(&wd_seen, 0, sizeof wd_seen);
    wd_only = "yielder";
    int64_t run_ns = 500 * WEFT_MSEC;
    weft_config cfg = {.workers = 2,
                       .watchdog_ns = 200 * WEFT_MSEC,
                       .watchdog_fn = on_watchdog,
                       .watchdog_arg = &wd_seen};
    atomic_store(&yield_gap_max, 0);
    ASSERT_EQ(weft_run(&cfg, yielders_root, &run_ns), 0);
    /* A report is wrong unless the worker really did not move on for that
     * long: the kernel kept its thread off every CPU (a loaded machine),
     * which a yielder sees as a pass as long as the threshold. */
    if (atomic_load(&wd_seen.reports) != 0)
        ASSERT(atomic_load(&yield_gap_max) >= 200 * WEFT_MSEC);
}

static int short_hog(void *arg)
{
    int64_t until = t_thread_cpu_ns() + *(int64_t *)arg;
    while (t_thread_cpu_ns() < until) {
    }
    return 0;
}

TEST(watchdog_off)
{
    memset(&wd_seen, 0, sizeof wd_seen);
    int64_t spin = 20 * WEFT_MSEC;
    weft_config cfg = {.workers = 1,
                       .watchdog_ns = WEFT_NEVER,
                       .watchdog_fn = on_watchdog,
                       .watchdog_arg = &wd_seen};
    ASSERT_EQ(weft_run(&cfg, short_hog, &spin), 0);
    ASSERT_EQ(atomic_load(&wd_seen.reports), 0);
}

/* Without a callback the report is a line on stderr: the hog reads it
 * from the pipe stderr was pointed at. */
static int stderr_pipe[2];
static char stderr_seen[1024];

static int hog_reading_stderr(void *arg)
{
    (void)arg;
    size_t len = 0;
    int64_t cap = t_thread_cpu_ns() + 20 * WEFT_SEC;
    while (!strstr(stderr_seen, "weft: watchdog") && t_thread_cpu_ns() < cap) {
        ssize_t n = read(stderr_pipe[0], stderr_seen + len,
                         sizeof stderr_seen - 1 - len);
        if (n > 0)
            len += (size_t)n;
    }
    return 0;
}

TEST(watchdog_writes_to_stderr_by_default)
{
    ASSERT_EQ(pipe2(stderr_pipe, O_NONBLOCK | O_CLOEXEC), 0);
    int saved = dup(2);
    ASSERT(saved >= 0);
    ASSERT_EQ(dup2(stderr_pipe[1], 2), 2);
    weft_config cfg = {.workers = 1, .watchdog_ns = 5 * WEFT_MSEC};
    int rc = weft_run(&cfg, hog_reading_stderr, NULL);
    dup2(saved, 2);
    close(saved);
    ASSERT_EQ(rc, 0);
    ASSERT(strstr(stderr_seen, "weft: watchdog: task \"root\"") != NULL);
    ASSERT(strstr(stderr_seen, "held worker 0") != NULL);
    /* The hold's end, told when the run ended: its whole length. */
    size_t len = strlen(stderr_seen);
    ssize_t more =
        read(stderr_pipe[0], stderr_seen + len, sizeof stderr_seen - 1 - len);
    if (more > 0)
        stderr_seen[len + (size_t)more] = '\0';
    ASSERT(strstr(stderr_seen, "ms in all without parking or yielding") !=
           NULL);
    close(stderr_pipe[0]);
    close(stderr_pipe[1]);
}

/* ---- counters only grow, whoever reads them ---- */

/* Every counter of s against the previous read p: how many went down. */
static int went_down(const weft_worker_stats *p, const weft_worker_stats *s)
{
    int n = 0;
#define DOWN(f) n += s->f < p->f
    DOWN(switches);
    DOWN(parks);
    DOWN(yields);
    DOWN(steals);
    DOWN(inbox);
    DOWN(spawned);
    DOWN(finished);
    DOWN(idle_ns);
    DOWN(lag_max_ns);
    DOWN(slow_slices);
    DOWN(top[0].ns);
    for (int i = 0; i < WEFT_LAG_BUCKETS; i++)
        DOWN(lag[i]);
#undef DOWN
    return n;
}

/* Reads stats (totals and both workers) and counts decreases against the
 * previous successful read; returns whether this one succeeded. */
struct mono_reader {
    weft_stats prev;
    weft_worker_stats prevw[2];
    bool have;
    long reads, downs;
};

static bool mono_read(struct mono_reader *r)
{
    weft_stats s;
    weft_worker_stats w[2];
    if (weft_stats_get(&s, w, 2) != 2)
        return false;
    if (r->have) {
        r->downs += went_down(&r->prev.all, &s.all);
        for (int i = 0; i < 2; i++)
            r->downs += went_down(&r->prevw[i], &w[i]);
        r->downs += s.spawned < r->prev.spawned;
        r->downs += s.finished < r->prev.finished;
        r->downs += s.blocking.calls < r->prev.blocking.calls;
    }
    r->prev = s;
    r->prevw[0] = w[0];
    r->prevw[1] = w[1];
    r->have = true;
    r->reads++;
    return true;
}

static atomic_int mono_stop;

static void *mono_thread(void *arg)
{
    struct mono_reader *r = arg;
    while (!atomic_load(&mono_stop))
        mono_read(r); /* -EPERM until the runtime runs: retried */
    return NULL;
}

static int mono_yielder(void *arg)
{
    (void)arg;
    while (!atomic_load(&mono_stop))
        ASSERT_EQ(weft_yield(), 0);
    return 0;
}

static int mono_pinger(void *arg)
{
    weft_chan **c = arg;
    for (int v = 0; !atomic_load(&mono_stop); v++) {
        ASSERT_EQ(weft_chan_send(c[0], &v), 0);
        ASSERT_EQ(weft_chan_recv(c[1], &v), 0);
    }
    return weft_chan_close(c[0]);
}

static int mono_root(void *arg)
{
    struct mono_reader *task_reader = arg;
    weft_chan *c[2][2];
    weft_scope *s;
    ASSERT_EQ(weft_scope_open(&s, NULL), 0);
    /* On each worker: two tasks that yield to each other and a pair that
     * parks on a rendezvous channel. */
    for (int wk = 0; wk < 2; wk++) {
        weft_spawn_opts o = {.worker = wk + 1};
        ASSERT_EQ(weft_chan_new(&c[wk][0], sizeof(int), 0), 0);
        ASSERT_EQ(weft_chan_new(&c[wk][1], sizeof(int), 0), 0);
        for (int i = 0; i < 2; i++)
            ASSERT(weft_spawn_ex(s, mono_yielder, NULL, &o) >= 0);
        ASSERT(weft_spawn_ex(s, echo, c[wk], &o) >= 0);
        ASSERT(weft_spawn_ex(s, mono_pinger, c[wk], &o) >= 0);
    }
    ASSERT_EQ(weft_worker_id(), 0);
    /* At least the rounds, and until both kinds of switch were seen on
     * both workers (worker 1 may start late under a sanitizer). */
    long rounds = T_SCALE(20000), cap = 1000 * rounds;
    const weft_worker_stats *w = task_reader->prevw;
    for (long i = 0;
         i < rounds ||
         (i < cap && !(w[0].yields && w[1].yields && w[0].parks && w[1].parks));
         i++) {
        ASSERT(mono_read(task_reader));
        ASSERT_EQ(weft_yield(), 0); /* lets worker 0's tasks switch */
    }
    atomic_store(&mono_stop, 1);
    ASSERT_EQ(weft_scope_join(s), 0);
    ASSERT_EQ(weft_scope_free(s), 0);
    for (int wk = 0; wk < 2; wk++) {
        weft_chan_unref(c[wk][0]);
        weft_chan_unref(c[wk][1]);
    }
    return 0;
}

TEST(counters_never_decrease_from_a_task_or_a_plain_thread)
{
    static struct mono_reader in_task, in_thread;
    atomic_store(&mono_stop, 0);
    pthread_t th;
    ASSERT_EQ(pthread_create(&th, NULL, mono_thread, &in_thread), 0);
    int rc = t_run_mono(2, mono_root, &in_task);
    atomic_store(&mono_stop, 1);
    pthread_join(th, NULL);
    ASSERT_EQ(rc, 0);
    ASSERT(in_task.reads >= T_SCALE(20000));
    ASSERT(in_thread.reads > 0);
    ASSERT_EQ(in_task.downs, 0);
    ASSERT_EQ(in_thread.downs, 0);
    /* Both kinds of switch were made on both workers. */
    ASSERT(in_task.prevw[0].yields > 0 && in_task.prevw[1].yields > 0);
    ASSERT(in_task.prevw[0].parks > 0 && in_task.prevw[1].parks > 0);
}

/* ---- a task that computes between sleeps, beside a ticker ---- */

#define LW_COMPUTE_NS (30 * WEFT_MSEC)

static atomic_int lw_done;

static struct {
    pthread_mutex_t mu;
    int reports, ended;
    char name[32];
    int64_t ended_ns; /* the longest hold reported as ended */
} lw_wd = {PTHREAD_MUTEX_INITIALIZER, 0, 0, "", 0};

static void lw_on_watchdog(const weft_watchdog_report *r, void *arg)
{
    (void)arg;
    if (strcmp(r->name, "compute") != 0)
        return; /* a worker the kernel did not run for a while */
    pthread_mutex_lock(&lw_wd.mu);
    lw_wd.reports++;
    if (r->ended) {
        lw_wd.ended++;
        if (r->held_ns > lw_wd.ended_ns)
            lw_wd.ended_ns = r->held_ns;
        ASSERT(r->held_ns >= r->threshold_ns);
    }
    ASSERT(r->id != 0);
    pthread_mutex_unlock(&lw_wd.mu);
}

static bool lw_watched; /* wait for the monitor to see each slice */

static uint64_t lw_slow_now(void)
{
    weft_stats st;
    ASSERT_EQ(weft_stats_get(&st, NULL, 0), 1);
    return st.all.slow_slices;
}

static int lw_reports_now(void)
{
    pthread_mutex_lock(&lw_wd.mu);
    int n = lw_wd.reports;
    pthread_mutex_unlock(&lw_wd.mu);
    return n;
}

/* Computes 30 ms (a busy loop reading weft time, never parking), then
 * sleeps 5 ms, three times. With lw_watched each run goes on until the
 * monitor has counted it slow and the watchdog has reported it (its
 * thread may not be run for a while on a loaded machine), or 10 s, far
 * above any such pause, so that a broken monitor fails the test instead
 * of hanging it. */
static int lw_compute(void *arg)
{
    (void)arg;
    for (int i = 0; i < 3; i++) {
        uint64_t slow = lw_watched ? lw_slow_now() : 0;
        int reports = lw_reports_now();
        int64_t until = weft_now() + LW_COMPUTE_NS, cap = until + 10 * WEFT_SEC;
        while (weft_now() < until ||
               (lw_watched && weft_now() < cap &&
                (lw_slow_now() == slow || lw_reports_now() == reports))) {
        }
        ASSERT_EQ(weft_sleep_for(5 * WEFT_MSEC), 0);
    }
    atomic_store(&lw_done, 1);
    return 0;
}

static int lw_ticker(void *arg)
{
    (void)arg;
    while (!atomic_load(&lw_done))
        ASSERT_EQ(weft_sleep_for(10 * WEFT_MSEC), 0);
    return 0;
}

/* The loadwatch shape: the ticker beside compute, on one worker; then
 * the runtime's stats into out. */
static void lw_run(weft_fn compute, weft_stats *out)
{
    weft_scope *s;
    ASSERT_EQ(weft_scope_open(&s, NULL), 0);
    weft_spawn_opts tick = {.name = "ticker"}, comp = {.name = "compute"};
    ASSERT(weft_spawn_ex(s, lw_ticker, NULL, &tick) >= 0);
    ASSERT(weft_spawn_ex(s, compute, NULL, &comp) >= 0);
    ASSERT_EQ(weft_scope_join(s), 0);
    ASSERT_EQ(weft_scope_free(s), 0);
    ASSERT_EQ(weft_stats_get(out, NULL, 0), 1);
}

static int lw_root(void *arg)
{
    weft_stats *out = arg;
    lw_run(lw_compute, out);
    /* The dump's lines about slices, as text and as JSON. */
    weft_runtime *rt = weft__tl_worker->rt;
    char text[4096], json[4096], tiny[16];
    size_t n = weft__slices_format(rt, false, text, sizeof text);
    if (out->all.slow_slices == 0) { /* slices_off */
        ASSERT_EQ(n, 0);
        ASSERT_EQ(text[0], '\0');
        return 0;
    }
    ASSERT_EQ(n, strlen(text));
    ASSERT(strncmp(text, "slow slices (10 ms or more", 26) == 0);
    ASSERT(strstr(text, "longest slices:\n  task ") != NULL);
    ASSERT(strstr(text, "\"compute\" (spawned at ") != NULL);
    n = weft__slices_format(rt, true, json, sizeof json);
    ASSERT_EQ(n, strlen(json));
    const char *head = "{\"type\":\"slices\",\"threshold_ns\":10000000,";
    ASSERT(strncmp(json, head, strlen(head)) == 0);
    ASSERT(strstr(json, "\"name\":\"compute\"") != NULL);
    ASSERT_EQ(json[n - 1], '\n');
    ASSERT_EQ(weft__slices_format(rt, false, tiny, sizeof tiny), 15);
    ASSERT_EQ(strlen(tiny), 15);
    return 0;
}

TEST(a_task_that_computes_beside_a_ticker_shows_in_slices_lag_and_watchdog)
{
    /* Real time (slices and the watchdog are measured in it): about
     * 100 ms. Only the shape is asserted; a loaded machine makes every
     * figure larger, never smaller. */
    atomic_store(&lw_done, 0);
    lw_watched = true;
    weft_config cfg = {.workers = 1,
                       .watchdog_ns = 20 * WEFT_MSEC,
                       .watchdog_fn = lw_on_watchdog};
    weft_stats st;
    ASSERT_EQ(weft_run(&cfg, lw_root, &st), 0);
    /* The compute task's slices are slow (10 ms by default) and it is
     * among the longest. */
    ASSERT(st.all.slow_slices >= 3);
    int found = -1;
    for (int i = 0; i < WEFT_SLICE_TOP; i++)
        if (st.all.top[i].id && strcmp(st.all.top[i].name, "compute") == 0)
            found = i;
    ASSERT(found >= 0);
    const weft_slice_info *c = &st.all.top[found];
    ASSERT(c->ns >= 10 * WEFT_MSEC);
    ASSERT(c->slow >= 3);
    ASSERT_EQ(c->worker, 0);
    ASSERT(strstr(c->file, "test_stats.c") != NULL);
    for (int i = 1; i < WEFT_SLICE_TOP; i++) /* longest first */
        ASSERT(st.all.top[i].ns <= st.all.top[i - 1].ns);
    /* The ticker's timer fired late: the lag histogram and its maximum
     * show it, however the wakes were sampled. */
    ASSERT(st.all.lag_max_ns >= 10 * WEFT_MSEC);
    ASSERT(weft_lag_quantile(&st.all, 0.99) >= 8 * WEFT_MSEC);
    /* The watchdog named it, and told each hold's whole length. */
    ASSERT(lw_wd.reports >= 4);
    ASSERT(lw_wd.ended >= 2);
    ASSERT(lw_wd.ended_ns >= 20 * WEFT_MSEC);
}

TEST(slices_off)
{
    atomic_store(&lw_done, 0);
    lw_watched = false;
    weft_config cfg = {
        .workers = 1, .watchdog_ns = WEFT_NEVER, .slow_slice_ns = WEFT_NEVER};
    weft_stats st;
    ASSERT_EQ(weft_run(&cfg, lw_root, &st), 0);
    ASSERT_EQ(st.all.slow_slices, 0);
    ASSERT_EQ(st.all.top[0].id, 0);
    ASSERT(st.all.lag_max_ns >= 10 * WEFT_MSEC); /* lag stays */
}

/* The same shape on the virtual clock, with no real time: the compute
 * task moves the clock 30 ms while it runs (as a busy loop would move a
 * real one), so the ticker's timers fire late in virtual time. */
static int vlw_compute(void *arg)
{
    (void)arg;
    weft_runtime *rt = weft__tl_worker->rt;
    for (int i = 0; i < 3; i++) {
        rt->clock_ops->advance(rt, weft_now() + LW_COMPUTE_NS);
        ASSERT_EQ(weft_sleep_for(5 * WEFT_MSEC), 0);
    }
    atomic_store(&lw_done, 1);
    return 0;
}

static int vlw_root(void *arg)
{
    lw_run(vlw_compute, arg);
    return 0;
}

TEST(late_timers_count_as_lag_on_the_virtual_clock)
{
    atomic_store(&lw_done, 0);
    weft_stats st;
    ASSERT_EQ(t_run_virtual(1, vlw_root, &st), 0);
    /* Each of the compute task's runs made a pending tick fire 20 ms or
     * more late. */
    uint64_t late = 0;
    for (int i = 24; i < WEFT_LAG_BUCKETS; i++) /* from 2^24 ns, 16.8 ms */
        late += st.all.lag[i];
    ASSERT(late >= 2);
    ASSERT(st.all.lag_max_ns >= 20 * WEFT_MSEC);
    ASSERT(st.all.lag_max_ns <= LW_COMPUTE_NS);
    ASSERT(weft_lag_quantile(&st.all, 0.99) >= 16 * WEFT_MSEC);
}

/* ---- the monitor reading tasks that finish ----
 *
 * The monitor reads the running task's name and spawn site once a slice
 * has lasted a period. Here tasks with stacks of their own size (a
 * mapping each, unmapped when the task ends) compute for about a period,
 * so that they end around the monitor's reads, on two workers: each
 * spawned onto the other worker (through its inbox) by a feeder, which
 * joins it, scribbles over its name and frees it at once (some finish
 * in two parts: they park to join a scope they left open). The monitor
 * must read nothing of a task that is ending: under ASan a freed name,
 * under TSan a slot laid out again or a name written without an order
 * with the read, and in any build a scribbled name in the reports or the
 * longest slices would show it. */

#define CH_SLOW_NS WEFT_MSEC        /* slow_slice_ns and the watchdog's */
#define CH_PERIOD (250 * WEFT_USEC) /* the monitor's period then */
#define CH_WINDOW 4                 /* tasks a feeder has alive at once */

struct ch_task {
    char name[32];
    int64_t spin_ns;
    bool open_scope; /* leaves a scope open, with a child */
    weft_task_handle h;
};

static atomic_int ch_reports, ch_bad;
static uint64_t ch_seed; /* the compute times' */

static bool ch_name_ok(const char *name)
{
    return name && strchr(name, '#') == NULL;
}

static void ch_on_watchdog(const weft_watchdog_report *r, void *arg)
{
    (void)arg;
    atomic_fetch_add(&ch_reports, 1);
    if (!ch_name_ok(r->name))
        atomic_fetch_add(&ch_bad, 1);
}

static int ch_spin(void *arg)
{
    int64_t until = t_real_ns() + *(const int64_t *)arg;
    while (t_real_ns() < until) {
    }
    return 0;
}

/* Computes for its time; one in four leaves a scope open with a child on
 * its worker, not run yet, which its exit then joins (parked, and run
 * again, while it finishes). */
static int ch_compute(void *arg)
{
    static const int64_t none = 0;
    struct ch_task *c = arg;
    if (c->open_scope) {
        weft_scope *s = scope_open();
        weft_spawn_opts o = {.worker = weft_worker_id() + 1};
        ASSERT(weft_spawn_ex(s, ch_spin, (void *)&none, &o) >= 0);
    }
    return ch_spin(&c->spin_ns);
}

/* Spawns n tasks onto the other worker, CH_WINDOW alive at once; each
 * one's record (its name) is scribbled over and freed as soon as it is
 * joined. */
static int ch_feeder(void *arg)
{
    long n = (long)(intptr_t)arg;
    int other = (weft_worker_id() + 1) % 2;
    uint64_t rng = ch_seed + (uint64_t)other;
    struct ch_task *live[CH_WINDOW] = {0};
    for (long i = 0; i < n + CH_WINDOW; i++) {
        struct ch_task **slot = &live[i % CH_WINDOW];
        if (*slot) {
            int status = -1;
            ASSERT_EQ(weft_task_join((*slot)->h, &status), 0);
            ASSERT_EQ(status, 0);
            memset((*slot)->name, '#', sizeof((*slot)->name) - 1);
            free(*slot);
            *slot = NULL;
        }
        if (i >= n)
            continue;
        struct ch_task *c = calloc(1, sizeof(*c));
        ASSERT(c != NULL);
        snprintf(c->name, sizeof c->name, "churn %d.%ld", other, i);
        /* Most end between the monitor's first and second look at them,
         * when it reads them; some hold their worker a slow slice. */
        uint64_t r = rnd(&rng);
        c->spin_ns = r % 4 ? CH_PERIOD + (int64_t)(r >> 2) % CH_PERIOD
                           : CH_SLOW_NS + (int64_t)(r >> 2) % (CH_SLOW_NS / 2);
        c->open_scope = i % 4 == 3;
        weft_spawn_opts o = {.name = c->name,
                             .stack_size = (size_t)(24 + 8 * (i % 4)) << 10,
                             .worker = other + 1,
                             .handle = &c->h};
        ASSERT(weft_spawn_ex(NULL, ch_compute, c, &o) >= 0);
        *slot = c;
    }
    return 0;
}

static int ch_root(void *arg)
{
    weft_stats *st = arg;
    weft_scope *s = scope_open();
    long n = T_SCALE(3000) / 2;
    for (int k = 0; k < 2; k++) {
        weft_spawn_opts o = {.name = "feeder", .worker = k + 1};
        ASSERT(weft_spawn_ex(s, ch_feeder, (void *)(intptr_t)n, &o) >= 0);
    }
    scope_end(s);
    ASSERT_EQ(weft_stats_get(st, NULL, 0), 2);
    return 0;
}

static atomic_int ch_stop;

/* Competes for the CPUs with the workers and the monitor, as a loaded
 * machine does: the monitor's thread is then preempted anywhere, also in
 * the middle of a read. */
static void *ch_spinner(void *arg)
{
    (void)arg;
    while (!atomic_load_explicit(&ch_stop, memory_order_relaxed)) {
    }
    return NULL;
}

TEST(monitor_reads_nothing_of_tasks_that_finish)
{
    atomic_store(&ch_reports, 0);
    atomic_store(&ch_bad, 0);
    atomic_store(&ch_stop, 0);
    ch_seed = T_SEED(0x5eed);
    weft_config cfg = {.workers = 2,
                       .slow_slice_ns = CH_SLOW_NS,
                       .watchdog_ns = CH_SLOW_NS,
                       .watchdog_fn = ch_on_watchdog};
    weft_stats st;
    pthread_t spin;
    ASSERT_EQ(pthread_create(&spin, NULL, ch_spinner, NULL), 0);
    ASSERT_EQ(weft_run(&cfg, ch_root, &st), 0);
    atomic_store(&ch_stop, 1);
    ASSERT_EQ(pthread_join(spin, NULL), 0);
    /* The monitor read the tasks: slices of 1 ms or more were counted and
     * named, and none of the names it kept was read after its task. */
    ASSERT(st.all.slow_slices >= 1);
    ASSERT(st.all.top[0].id != 0);
    bool churn = false;
    for (int i = 0; i < WEFT_SLICE_TOP && st.all.top[i].id; i++) {
        ASSERT(ch_name_ok(st.all.top[i].name));
        churn |= strncmp(st.all.top[i].name, "churn ", 6) == 0;
    }
    ASSERT(churn);
    ASSERT(atomic_load(&ch_reports) >= 1);
    ASSERT_EQ(atomic_load(&ch_bad), 0);
}
