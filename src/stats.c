/* SPDX-License-Identifier: MIT */
/*
 * Statistics, the lag histogram and the watchdog.
 *
 * Counters. Each worker keeps its own (weft__wstats in its struct, and a
 * few the scheduler keeps anyway: tick, spawned, the queues' lengths, the
 * wheel's count, the pending descriptor waits). Only the worker writes
 * them, with a relaxed load and store (weft__stat_add), never a shared
 * read-modify-write, so counting costs a few instructions on lines the
 * worker owns; weft_stats_get reads them with relaxed loads from any
 * worker of the runtime. A snapshot is not atomic as a whole: each figure
 * is exact for some instant during the call.
 *
 * Lag. Timing every wake and every run costs two clock reads per wake
 * (clock_gettime measured 110 to 140 ns on our shared VM; a pingpong round trip
 * is 70 ns): instead each worker stamps one wake in WEFT__LAG_EVERY with the
 * real time (a counter and a predictable branch per wake), and whoever runs the
 * task records the delay in its histogram (a load and a predictable branch per
 * run), sched.c's wake_watch and lag_record.
 *
 * The watchdog. One thread per runtime, beside the workers, never on
 * their path: every half threshold it reads each worker's tick (its
 * scheduling decisions, stored with release) and running task. A worker
 * whose tick has not moved and whose running task is the same task for
 * the threshold is held by that task (a loop that never parks or yields,
 * or a blocking system call): reported once, until the worker moves
 * again. Times are real (CLOCK_MONOTONIC) whatever the runtime's clock: a
 * hog holds its worker in real time, while a virtual clock stands still.
 * Reading the task's name and spawn site from this thread is safe while
 * the task holds its worker (its slot is not reused before it finishes):
 * the fields are atomics (the slot's next task writes them at its spawn,
 * whenever that is), the tick is read before and after, and a report is
 * dropped if the worker moved meanwhile. What is left is a task that
 * finishes in the microsecond between the two reads, after holding its
 * worker for the whole threshold: then the name reported may be its
 * slot's next task's.
 */
#include "observe.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- statistics ---- */

static void worker_read(weft_worker *w, weft_worker_stats *o)
{
    const weft__wstats *st = &w->st;
    memset(o, 0, sizeof(*o));
    uint64_t parked = ld_rlx(&st->parked), yields = ld_rlx(&st->yields);
    o->switches = parked + ld_rlx(&st->resumed) + ld_rlx(&st->finished);
    o->parks = parked - yields;
    o->steals = ld_rlx(&st->steals);
    o->inbox = ld_rlx(&st->inbox);
    o->finished = ld_rlx(&st->finished);
    o->spawned = ld_rlx(&w->spawned);
    o->idle_ns = ld_rlx(&st->idle_ns);
    int64_t dq = ld_rlx(&w->deque.bottom) - ld_rlx(&w->deque.top);
    o->runq = ld_rlx(&w->runq.len) + ld_rlx(&w->yieldq.len) +
              (uint64_t)(dq > 0 ? dq : 0);
    o->timers = ld_rlx(&w->wheel.count);
    int fds = ld_rlx(&w->pending[WEFT__PENDING_IO]);
    o->fd_waits = fds > 0 ? (uint64_t)fds : 0;
    for (int i = 0; i < WEFT_LAG_BUCKETS; i++)
        o->lag[i] = ld_rlx(&st->lag[i]);
}

static void worker_add(weft_worker_stats *sum, const weft_worker_stats *o)
{
    sum->switches += o->switches;
    sum->parks += o->parks;
    sum->steals += o->steals;
    sum->inbox += o->inbox;
    sum->spawned += o->spawned;
    sum->finished += o->finished;
    sum->idle_ns += o->idle_ns;
    sum->runq += o->runq;
    sum->timers += o->timers;
    sum->fd_waits += o->fd_waits;
    for (int i = 0; i < WEFT_LAG_BUCKETS; i++)
        sum->lag[i] += o->lag[i];
}

int weft_stats_get(weft_stats *out, weft_worker_stats *workers, int n)
{
    if (!WEFT__STATS)
        return -ENOTSUP; /* built with WEFT_STATS=OFF */
    if (!out || n < 0 || (!workers && n > 0))
        return -EINVAL;
    weft_worker *me = weft__tl_worker;
    if (!me || !ld_rlx(&me->cur))
        return -EPERM;
    weft_runtime *rt = me->rt;
    memset(out, 0, sizeof(*out));
    out->workers = rt->nworkers;
    for (int i = 0; i < rt->nworkers; i++) {
        weft_worker_stats one;
        worker_read(&rt->workers[i], &one);
        worker_add(&out->all, &one);
        if (i < n)
            workers[i] = one;
    }
    out->spawned = out->all.spawned;
    out->finished = out->all.finished;
    /* A task's spawn is counted before it can finish, but the two are read
     * from different workers at different instants. */
    out->alive =
        out->spawned > out->finished ? out->spawned - out->finished : 0;
    weft_blocking_stats(&out->blocking);
    return rt->nworkers;
}

int64_t weft_lag_quantile(const weft_worker_stats *s, double q)
{
    if (!s || !(q >= 0.0 && q <= 1.0))
        return -EINVAL;
    uint64_t total = 0;
    for (int i = 0; i < WEFT_LAG_BUCKETS; i++)
        total += s->lag[i];
    if (!total)
        return 0;
    double x = q * (double)total;
    uint64_t want = (uint64_t)x;
    if ((double)want < x)
        want++;
    if (!want)
        want = 1;
    uint64_t cum = 0;
    for (int i = 0; i < WEFT_LAG_BUCKETS - 1; i++) {
        cum += s->lag[i];
        if (cum >= want)
            return (int64_t)1 << (i + 1);
    }
    return WEFT_NEVER; /* the last bucket has no upper bound */
}

/* ---- the watchdog ---- */

#define WATCHDOG_DEFAULT_NS (100 * WEFT_MSEC)
#define WATCHDOG_MIN_PERIOD_NS WEFT_MSEC
#define WATCHDOG_MAX_PERIOD_NS WEFT_SEC

/* What the watchdog last saw of a worker. */
struct wd_seen {
    unsigned tick;
    weft_task *cur;
    int64_t since; /* when it first saw this (tick, cur), real time */
    bool reported;
};

struct weft__watchdog {
    weft_runtime *rt;
    int nworkers;
    int64_t threshold, period;
    void (*fn)(const weft_watchdog_report *r, void *arg);
    void *arg;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* on CLOCK_MONOTONIC */
    bool stop;         /* under mu */
    pthread_t thread;
    struct wd_seen seen[];
};

int weft__watchdog_check(const weft_config *c)
{
    return c->watchdog_ns < 0 ? -EINVAL : 0;
}

static void wd_report(struct weft__watchdog *wd, const weft_watchdog_report *r)
{
    if (wd->fn) {
        wd->fn(r, wd->arg);
        return;
    }
    /* One write, so that lines of several reports do not mix. */
    char line[512];
    snprintf(line, sizeof line,
             "weft: watchdog: task \"%s\" (spawned at %s:%d) has held "
             "worker %d for %lld ms without parking or yielding (threshold "
             "%lld ms): a CPU-bound loop or a blocking call? Yield in the "
             "loop (weft_yield) or move the call to weft_blocking\n",
             r->name, r->file, r->line, r->worker,
             (long long)(r->held_ns / WEFT_MSEC),
             (long long)(r->threshold_ns / WEFT_MSEC));
    fputs(line, stderr);
}

static void wd_look(struct weft__watchdog *wd, int64_t now)
{
    for (int i = 0; i < wd->nworkers; i++) {
        weft_worker *w = &wd->rt->workers[i];
        struct wd_seen *s = &wd->seen[i];
        /* Acquire: pairs with pick's release, so the running task's
         * fields, written before it was picked, are visible. */
        unsigned tick = ld_acq(&w->tick);
        weft_task *cur = ld_rlx(&w->cur);
        if (tick != s->tick || cur != s->cur) {
            s->tick = tick;
            s->cur = cur;
            s->since = now;
            s->reported = false;
            continue;
        }
        if (!cur || s->reported || now - s->since < wd->threshold)
            continue;
        const char *name = ld_rlx(&cur->name), *file = ld_rlx(&cur->file);
        weft_watchdog_report r = {
            .worker = i,
            .name = name ? name : "",
            .file = file ? file : "?",
            .line = ld_rlx(&cur->line),
            .held_ns = now - s->since,
            .threshold_ns = wd->threshold,
        };
        if (ld_acq(&w->tick) != tick || ld_rlx(&w->cur) != cur)
            continue; /* it moved while we read: not held after all */
        s->reported = true;
        wd_report(wd, &r);
    }
}

static struct timespec mono_abs(int64_t t)
{
    struct timespec ts = {.tv_sec = (time_t)(t / WEFT_SEC),
                          .tv_nsec = (long)(t % WEFT_SEC)};
    return ts;
}

static void *wd_main(void *arg)
{
    struct weft__watchdog *wd = arg;
    int64_t next = weft__mono_now();
    pthread_mutex_lock(&wd->mu);
    while (!wd->stop) {
        pthread_mutex_unlock(&wd->mu);
        int64_t now = weft__mono_now();
        wd_look(wd, now);
        next += wd->period;
        if (next < now)
            next = now + wd->period; /* we were not run for a while */
        struct timespec until = mono_abs(next);
        pthread_mutex_lock(&wd->mu);
        while (!wd->stop &&
               pthread_cond_timedwait(&wd->cv, &wd->mu, &until) == 0) {
        }
    }
    pthread_mutex_unlock(&wd->mu);
    return NULL;
}

struct weft__watchdog *weft__watchdog_start(weft_runtime *rt,
                                            const weft_config *c)
{
    if (c->watchdog_ns == WEFT_NEVER)
        return NULL;
    int n = rt->nworkers;
    struct weft__watchdog *wd =
        calloc(1, sizeof(*wd) + (size_t)n * sizeof(wd->seen[0]));
    if (!wd)
        goto fail;
    wd->rt = rt;
    wd->nworkers = n;
    wd->threshold = c->watchdog_ns ? c->watchdog_ns : WATCHDOG_DEFAULT_NS;
    /* Looks twice per threshold: a hold is reported between one and one
     * and a half thresholds after it began. */
    wd->period = wd->threshold / 2;
    if (wd->period < WATCHDOG_MIN_PERIOD_NS)
        wd->period = WATCHDOG_MIN_PERIOD_NS;
    if (wd->period > WATCHDOG_MAX_PERIOD_NS)
        wd->period = WATCHDOG_MAX_PERIOD_NS;
    wd->fn = c->watchdog_fn;
    wd->arg = c->watchdog_arg;
    int64_t now = weft__mono_now();
    for (int i = 0; i < n; i++)
        wd->seen[i].since = now;
    pthread_mutex_init(&wd->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&wd->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&wd->thread, NULL, wd_main, wd) != 0) {
        pthread_cond_destroy(&wd->cv);
        pthread_mutex_destroy(&wd->mu);
        free(wd);
        goto fail;
    }
    return wd;
fail:
    fputs("weft: watchdog: cannot start its thread; running without it\n",
          stderr);
    return NULL;
}

void weft__watchdog_stop(struct weft__watchdog *wd)
{
    if (!wd)
        return;
    pthread_mutex_lock(&wd->mu);
    wd->stop = true;
    pthread_cond_signal(&wd->cv);
    pthread_mutex_unlock(&wd->mu);
    pthread_join(wd->thread, NULL);
    pthread_cond_destroy(&wd->cv);
    pthread_mutex_destroy(&wd->mu);
    free(wd);
}
