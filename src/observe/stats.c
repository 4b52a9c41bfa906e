/* SPDX-License-Identifier: MIT */
/*
 * Statistics, the lag histogram, slow slices and the watchdog.
 *
 * Counters. Each worker keeps its own (weft__wstats in its struct, and a
 * few the scheduler keeps anyway: tick, spawned, the queues' lengths, the
 * wheel's count, the pending descriptor waits). Only the worker writes
 * them, with a relaxed load and store (weft__stat_add), never a shared
 * read-modify-write, so counting costs a few instructions on lines the
 * worker owns; weft_stats_get reads them with relaxed loads from any
 * thread. Each counter is one word that only grows, and a thread's
 * relaxed loads of one atomic never go back in time (coherence), so each
 * reader sees every counter monotone: no figure is derived by a
 * difference of two counters (parks and yields are counted apart, where
 * the switch is made). A snapshot is not atomic as a whole: each figure
 * is exact for some instant during the call.
 *
 * Lag. Timing every wake and every run costs two clock reads per wake
 * (clock_gettime measured 110 to 140 ns on our shared VM; a pingpong round trip
 * is 70 ns): instead each worker stamps one wake in WEFT__LAG_EVERY with the
 * real time (a counter and a predictable branch per wake), and whoever runs the
 * task records the delay in its histogram (a load and a predictable branch per
 * run), sched.c's wake_watch and lag_record. Sampling alone misses a stall
 * that repeats: a task that computes 30 ms between sleeps makes a 10 ms
 * ticker on its worker late at every tick, and the ticker's timer fires
 * only when the worker comes back (so even its wake-to-run delay is
 * short), or fires on time and the ticker waits in the queue behind the
 * computing task. So every task a timer wakes is timed from the timer's
 * deadline to its run, and counted if that is WEFT__LAG_LATE_NS or more
 * (sched.c's timer_lag: a clock read per timer that fires, not per
 * wake; on the virtual clock, how late the timer fired, from the wheel's
 * time, with no clock read), and lag_max keeps the largest delay
 * counted.
 *
 * Slices, and the watchdog. A clock read at every switch in and out would
 * cost several switches (a switch is 8 ns; clock_gettime 28 ns at best
 * here, up to 140),
 * so slices are measured from outside: one thread per runtime, beside
 * the workers and never on their path, reads each worker's tick (its
 * scheduling decisions, stored with release) and running task every
 * period (a tenth of slow_slice_ns, 1 ms by default; half the watchdog's
 * threshold if that is shorter; 16 periods, at most 20 ms, while every
 * worker is idle). A worker whose tick and task have not moved between
 * two looks is in one slice of that task: its length is known to within
 * a period, and counted as the time between the first and the latest
 * look that saw it (a lower bound). A slice that reaches slow_slice_ns is
 * counted once as slow, and each worker keeps a small table of the tasks
 * with the longest slices; the watchdog reports a slice that reaches its
 * threshold, once, and again when it ends, with its whole length. Times
 * are real (CLOCK_MONOTONIC) whatever the runtime's clock: a hog holds
 * its worker in real time, while a virtual clock stands still; and a
 * worker thread the kernel does not run counts as held by its task.
 *
 * Reading the running task's id, name and spawn site from this thread
 * (once per slice, when a slice has lasted a period) needs the task, its
 * slot and its name to stay alive meanwhile: a task may finish at any
 * moment, its name may be freed once its end is known (the string must
 * outlive the task, no more), its slot may be laid out again for another
 * task (slot_init's memset) or unmapped (a custom stack size). Nothing on
 * the switch path keeps them, so the monitor holds a hazard pointer, and
 * only a task's exit pays, with two stores and a load:
 * - the monitor stores the task in its worker's hazard (seq_cst), then
 *   makes a full barrier on every thread (weft__cancel_fence: membarrier
 *   where the kernel has it, else a seq_cst fence that the workers match),
 *   then checks that the task is not its worker's leaving task, and that
 *   the worker's tick and running task have not moved since the slice was
 *   seen. Only then does it read the fields and copy the name; it clears
 *   the hazard (release) when done;
 * - a task whose function has returned becomes its worker's leaving task,
 *   then (a compiler barrier, or a fence where there is no membarrier)
 *   waits while the hazard holds it (weft__watch_leave), before the
 *   layers above make its end known, and so before its slot is released.
 *   The worker clears the mark (release) once cur is the next task. A
 *   task that parks while it finishes (joining scopes it left open) is
 *   marked again when it is done with that (spawn.c's task_exit).
 * Either side sees the other's store (Dekker): the monitor reads nothing,
 * or the task waits until it is done (a few hundred nanoseconds). The
 * fields are atomics, written by the slot's next task's spawn
 * (weft__task_prepare), and the tick is stored with release after the
 * pick, so the monitor's acquire load of it sees the spawner's writes of
 * the task it runs, wherever it was spawned. The name's characters are
 * copied, so a report made when the slice ends never reads a name its
 * task no longer owns.
 */
#include "io/io.h"
#include "observe/observe.h"
#include "sched/scheduler.h"
#include "util/fault.h"
#include "util/json.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- statistics ---- */

static void worker_read(weft_worker *w, weft_worker_stats *o)
{
    const weft__wstats *st = &w->st;
    memset(o, 0, sizeof(*o));
    o->parks = ld_rlx(&st->parks);
    o->yields = ld_rlx(&st->yields);
    o->finished = ld_rlx(&st->finished);
    o->switches = o->parks + o->yields + ld_rlx(&st->resumed) + o->finished;
    o->steals = ld_rlx(&st->steals);
    o->moved = ld_rlx(&st->moved);
    o->inbox = ld_rlx(&st->inbox);
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
    o->lag_max_ns = ld_rlx(&st->lag_max);
}

/* Puts e into top (WEFT_SLICE_TOP entries, longest first) if it is among
 * the longest; one entry per task. */
static void top_insert(weft_slice_info *top, const weft_slice_info *e)
{
    if (!e->id)
        return;
    int at = WEFT_SLICE_TOP - 1;
    for (int i = 0; i < WEFT_SLICE_TOP; i++)
        if (top[i].id == e->id) {
            if (top[i].ns >= e->ns)
                return;
            at = i; /* moves up from its old place */
            break;
        }
    if (top[at].id && top[at].id != e->id && top[at].ns >= e->ns)
        return;
    while (at > 0 && (!top[at - 1].id || top[at - 1].ns < e->ns)) {
        top[at] = top[at - 1];
        at--;
    }
    top[at] = *e;
}

static void worker_add(weft_worker_stats *sum, const weft_worker_stats *o)
{
    sum->switches += o->switches;
    sum->parks += o->parks;
    sum->yields += o->yields;
    sum->steals += o->steals;
    sum->moved += o->moved;
    sum->inbox += o->inbox;
    sum->spawned += o->spawned;
    sum->finished += o->finished;
    sum->idle_ns += o->idle_ns;
    sum->runq += o->runq;
    sum->timers += o->timers;
    sum->fd_waits += o->fd_waits;
    for (int i = 0; i < WEFT_LAG_BUCKETS; i++)
        sum->lag[i] += o->lag[i];
    if (o->lag_max_ns > sum->lag_max_ns)
        sum->lag_max_ns = o->lag_max_ns;
    sum->slow_slices += o->slow_slices;
    for (int i = 0; i < WEFT_SLICE_TOP; i++)
        top_insert(sum->top, &o->top[i]);
}

static void slices_read(struct weft__watchdog *wd, int i, weft_worker_stats *o);

void weft__stats_read(weft_runtime *rt, weft_stats *out,
                      weft_worker_stats *workers, int n)
{
    memset(out, 0, sizeof(*out));
    out->workers = rt->nworkers;
    for (int i = 0; i < rt->nworkers; i++) {
        weft_worker_stats one;
        worker_read(&rt->workers[i], &one);
        slices_read(weft__observe_rt(rt)->watchdog, i, &one);
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
    weft__blocking_info(rt, &out->blocking);
}

int64_t weft_lag_quantile(const weft_worker_stats *s, double q)
{
    if (!s || !(q >= 0.0 && q <= 1.0))
        return -EINVAL;
    uint64_t total = 0;
    for (int i = 0; i < WEFT_LAG_BUCKETS; i++)
        total += s->lag[i];
    if (!total)
        return -ENODATA;
    double x = q * (double)total;
    uint64_t want = (uint64_t)x;
    if ((double)want < x)
        want++;
    if (!want)
        want = 1;
    uint64_t cum = 0;
    int64_t bound = WEFT_NEVER; /* the last bucket has no upper bound */
    for (int i = 0; i < WEFT_LAG_BUCKETS - 1; i++) {
        cum += s->lag[i];
        if (cum >= want) {
            bound = (int64_t)1 << (i + 1);
            break;
        }
    }
    /* No delay was above the maximum: a tighter bound, when known. */
    return s->lag_max_ns > 0 && s->lag_max_ns < bound ? s->lag_max_ns : bound;
}

/* ---- slices and the watchdog ---- */

#define WATCHDOG_DEFAULT_NS (100 * WEFT_MSEC)
#define SLICE_DEFAULT_NS (10 * WEFT_MSEC)
#define PERIOD_MIN_NS (250 * WEFT_USEC)
#define PERIOD_MAX_NS WEFT_SEC
#define IDLE_LOOKS 8                     /* idle looks before the idle period */
#define IDLE_PERIOD_MAX (20 * WEFT_MSEC) /* the idle period, at most */
#define NAME_KEPT 128                    /* bytes of a name a report shows */
#define WORKERS_SHOWN 64                 /* per-worker counts in the dump */

/* What the monitor last saw of a worker (its thread only). */
struct wd_seen {
    unsigned tick;
    weft_task *cur;
    int64_t since;        /* when it first saw this (tick, cur), real time */
    int64_t last;         /* when it last saw it */
    bool known;           /* who is read (once per slice) */
    bool slow;            /* counted as a slow slice */
    bool reported;        /* the watchdog reported it */
    weft_slice_info who;  /* the task, its ns and slow unused */
    char name[NAME_KEPT]; /* its name, for the watchdog's reports */
};

/* A worker's slice figures: written by the monitor, read by
 * weft_stats_get, under data_mu. */
struct wd_table {
    uint64_t slow_slices;
    weft_slice_info top[WEFT_SLICE_TOP]; /* longest first */
};

/* A report a look made, told after it. */
struct wd_pending {
    weft_watchdog_report r; /* r.worker < 0: none */
    char name[NAME_KEPT];   /* r.name */
};

struct weft__watchdog {
    weft_runtime *rt;
    int nworkers;        /* as the thread started (rt->nworkers) */
    int64_t threshold;   /* the watchdog's; WEFT_NEVER: no reports */
    int64_t slow;        /* slow_slice_ns; WEFT_NEVER: no slices */
    int64_t period;      /* between looks while a worker is busy */
    int64_t idle_period; /* between looks while every worker is idle */
    void (*fn)(const weft_watchdog_report *r, void *arg);
    void *arg;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* on CLOCK_MONOTONIC */
    bool stop;         /* under mu */
    bool started;      /* the thread runs (weft_run's thread) */
    pthread_t thread;
    pthread_mutex_t data_mu;    /* the tables */
    struct wd_table *table;     /* per worker */
    struct wd_seen *seen;       /* per worker, the thread's */
    struct wd_pending *reports; /* per worker: made by a look, told
                                 * after it (no lock held) */
};

int weft__watchdog_check(const weft_config *c)
{
    return c->watchdog_ns < 0 || c->slow_slice_ns < 0 ? -EINVAL : 0;
}

static void slices_read(struct weft__watchdog *wd, int i, weft_worker_stats *o)
{
    if (!wd || wd->slow == WEFT_NEVER || i >= wd->nworkers)
        return;
    pthread_mutex_lock(&wd->data_mu);
    o->slow_slices = wd->table[i].slow_slices;
    memcpy(o->top, wd->table[i].top, sizeof o->top);
    pthread_mutex_unlock(&wd->data_mu);
}

static void wd_report(struct weft__watchdog *wd, const weft_watchdog_report *r)
{
    if (wd->fn) {
        wd->fn(r, wd->arg);
        return;
    }
    /* One write, so that lines of several reports do not mix. */
    char line[512];
    if (r->ended)
        snprintf(line, sizeof line,
                 "weft: watchdog: task \"%s\" (spawned at %s:%d) held worker "
                 "%d for %lld ms in all without parking or yielding\n",
                 r->name, r->file, r->line, r->worker,
                 (long long)(r->held_ns / WEFT_MSEC));
    else
        snprintf(line, sizeof line,
                 "weft: watchdog: task \"%s\" (spawned at %s:%d) has held "
                 "worker %d for %lld ms without parking or yielding "
                 "(threshold %lld ms): a CPU-bound loop or a blocking call? "
                 "Yield in the loop (weft_yield) or move the call to "
                 "weft_blocking\n",
                 r->name, r->file, r->line, r->worker,
                 (long long)(r->held_ns / WEFT_MSEC),
                 (long long)(r->threshold_ns / WEFT_MSEC));
    fputs(line, stderr);
}

static void copy_name(char *dst, size_t cap, const char *src)
{
    size_t i = 0;
    for (; src && src[i] && i + 1 < cap; i++)
        dst[i] = src[i];
    dst[i] = '\0';
}

/* Reads who runs the slice s (cur on worker w, at tick): false if the
 * worker moved or the task is leaving (then nothing is read), under the
 * hazard pointer (see the top). */
static bool who_read(weft_worker *w, struct wd_seen *s, int i)
{
    weft_task *cur = s->cur;
    st_sc(&w->hazard, cur);
    weft__cancel_fence();
    /* The mark first (acquire): once cleared, tick and cur have moved. */
    bool same = ld_acq(&w->leaving) != cur && ld_acq(&w->tick) == s->tick &&
                ld_rlx(&w->cur) == cur;
    if (same) {
        const char *name = ld_rlx(&cur->name), *file = ld_rlx(&cur->file);
        s->who = (weft_slice_info){.id = ld_rlx(&cur->id),
                                   .file = file ? file : "?",
                                   .line = ld_rlx(&cur->line),
                                   .worker = i};
        copy_name(s->name, sizeof s->name, name);
        copy_name(s->who.name, sizeof s->who.name, s->name);
        s->known = true;
    }
    st_rel(&w->hazard, NULL);
    return same;
}

/* The slice s has run held ns so far: its worker's table (under data_mu). */
static void slice_grow(struct weft__watchdog *wd, int i, struct wd_seen *s,
                       int64_t held)
{
    struct wd_table *tb = &wd->table[i];
    bool now_slow = !s->slow && held >= wd->slow;
    if (now_slow) {
        s->slow = true;
        tb->slow_slices++;
    }
    weft_slice_info e = s->who;
    e.ns = held;
    e.slow = s->slow;
    for (int k = 0; k < WEFT_SLICE_TOP; k++)
        if (tb->top[k].id == e.id) {
            /* its count so far, plus this slice if it just became slow */
            e.slow = tb->top[k].slow + (now_slow ? 1 : 0);
            if (tb->top[k].ns > e.ns)
                e.ns = tb->top[k].ns;
            tb->top[k].slow = e.slow;
            break;
        }
    top_insert(tb->top, &e);
}

static void report_make(struct weft__watchdog *wd, struct wd_seen *s, int i,
                        int64_t held, int ended)
{
    struct wd_pending *p = &wd->reports[i];
    memcpy(p->name, s->name, sizeof p->name);
    p->r = (weft_watchdog_report){
        .worker = i,
        .name = p->name,
        .file = s->who.file,
        .line = s->who.line,
        .held_ns = held,
        .threshold_ns = wd->threshold,
        .id = s->who.id,
        .ended = ended,
    };
}

/* One look at every worker at real time now; returns whether any runs a
 * task. Reports to make are left in wd->reports (worker < 0: none). */
static bool wd_look(struct weft__watchdog *wd, int64_t now)
{
    bool busy = false;
    pthread_mutex_lock(&wd->data_mu);
    for (int i = 0; i < wd->nworkers; i++) {
        weft_worker *w = &wd->rt->workers[i];
        struct wd_seen *s = &wd->seen[i];
        wd->reports[i].r.worker = -1;
        /* Acquire: pairs with pick's release (who_read reads the task's
         * fields after another acquire load that sees this tick). */
        unsigned tick = ld_acq(&w->tick);
        weft_task *cur = ld_rlx(&w->cur);
        if (tick != s->tick || cur != s->cur) {
            if (s->reported) /* the hold is over: its whole length */
                report_make(wd, s, i, s->last - s->since, 1);
            *s = (struct wd_seen){
                .tick = tick, .cur = cur, .since = now, .last = now};
            busy |= cur != NULL;
            continue;
        }
        s->last = now;
        if (!cur)
            continue;
        busy = true;
        if (!s->known && !who_read(w, s, i))
            continue; /* it moved while we read: the next look sees it */
        int64_t held = now - s->since;
        if (wd->slow != WEFT_NEVER)
            slice_grow(wd, i, s, held);
        if (!s->reported && held >= wd->threshold) {
            s->reported = true;
            report_make(wd, s, i, held, 0);
        }
    }
    pthread_mutex_unlock(&wd->data_mu);
    return busy;
}

static struct timespec mono_abs(int64_t t)
{
    struct timespec ts = {.tv_sec = (time_t)(t / WEFT_SEC),
                          .tv_nsec = (long)(t % WEFT_SEC)};
    return ts;
}

/* A look, then its reports; returns whether a worker was busy. */
static bool wd_round(struct weft__watchdog *wd, int64_t now)
{
    bool busy = wd_look(wd, now);
    for (int i = 0; i < wd->nworkers; i++)
        if (wd->reports[i].r.worker >= 0)
            wd_report(wd, &wd->reports[i].r);
    return busy;
}

static void *wd_main(void *arg)
{
    struct weft__watchdog *wd = arg;
    int64_t next = weft__mono_now();
    int idle = 0;
    pthread_mutex_lock(&wd->mu);
    while (!wd->stop) {
        pthread_mutex_unlock(&wd->mu);
        int64_t now = weft__mono_now();
        idle = wd_round(wd, now) ? 0 : idle + 1;
        next += idle >= IDLE_LOOKS ? wd->idle_period : wd->period;
        if (next < now)
            next = now + wd->period; /* we were not run for a while */
        struct timespec until = mono_abs(next);
        pthread_mutex_lock(&wd->mu);
        while (!wd->stop &&
               pthread_cond_timedwait(&wd->cv, &wd->mu, &until) == 0) {
        }
    }
    pthread_mutex_unlock(&wd->mu);
    /* The tasks are done: the end of a hold reported in the last period
     * (a hog that finished the run) is told too. */
    wd_round(wd, weft__mono_now());
    return NULL;
}

static int64_t clamp(int64_t v, int64_t lo, int64_t hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

void weft__watchdog_init(weft_runtime *rt, const weft_config *c)
{
    int64_t threshold = c->watchdog_ns ? c->watchdog_ns : WATCHDOG_DEFAULT_NS;
    int64_t slow = c->slow_slice_ns ? c->slow_slice_ns : SLICE_DEFAULT_NS;
    if (!WEFT__STATS)
        slow = WEFT_NEVER; /* weft_stats_get is -ENOTSUP: nobody reads them */
    weft__observe_rt(rt)->watchdog = NULL;
    if (threshold == WEFT_NEVER && slow == WEFT_NEVER)
        return;
    int n = rt->nworkers;
    struct weft__watchdog *wd = weft__calloc(1, sizeof(*wd));
    if (wd) {
        wd->table = weft__calloc((size_t)n, sizeof(*wd->table));
        wd->seen = weft__calloc((size_t)n, sizeof(*wd->seen));
        wd->reports = weft__calloc((size_t)n, sizeof(*wd->reports));
    }
    if (!wd || !wd->table || !wd->seen || !wd->reports) {
        if (wd) {
            free(wd->table);
            free(wd->seen);
            free(wd->reports);
        }
        free(wd);
        fputs("weft: watchdog: out of memory; running without it\n", stderr);
        return;
    }
    wd->rt = rt;
    wd->nworkers = n;
    wd->threshold = threshold;
    wd->slow = slow;
    /* Slices are known to within a period: a tenth of the threshold. The
     * watchdog looks twice per threshold: a hold is reported between one
     * and one and a half thresholds after it began. */
    int64_t p = WEFT_NEVER;
    if (threshold != WEFT_NEVER)
        p = threshold / 2;
    if (slow != WEFT_NEVER && slow / 10 < p)
        p = slow / 10;
    wd->period = clamp(p, PERIOD_MIN_NS, PERIOD_MAX_NS);
    wd->idle_period =
        clamp(16 * wd->period, wd->period,
              wd->period > IDLE_PERIOD_MAX ? wd->period : IDLE_PERIOD_MAX);
    wd->fn = c->watchdog_fn;
    wd->arg = c->watchdog_arg;
    pthread_mutex_init(&wd->mu, NULL);
    pthread_mutex_init(&wd->data_mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&wd->cv, &ca);
    pthread_condattr_destroy(&ca);
    weft__observe_rt(rt)->watchdog = wd;
}

void weft__watchdog_start(weft_runtime *rt)
{
    struct weft__watchdog *wd = weft__observe_rt(rt)->watchdog;
    if (!wd)
        return;
    wd->nworkers = rt->nworkers; /* fewer if not all could start */
    int64_t now = weft__mono_now();
    for (int i = 0; i < wd->nworkers; i++)
        wd->seen[i].since = wd->seen[i].last = now;
    if (!weft__fault_fails(WEFT_FAULT_THREAD) &&
        pthread_create(&wd->thread, NULL, wd_main, wd) == 0)
        wd->started = true;
    else
        fputs("weft: watchdog: cannot start its thread; running without "
              "it\n",
              stderr);
}

void weft__watchdog_stop(weft_runtime *rt)
{
    struct weft__watchdog *wd = weft__observe_rt(rt)->watchdog;
    if (!wd || !wd->started)
        return;
    pthread_mutex_lock(&wd->mu);
    wd->stop = true;
    pthread_cond_signal(&wd->cv);
    pthread_mutex_unlock(&wd->mu);
    pthread_join(wd->thread, NULL);
    wd->started = false;
}

void weft__watchdog_free(weft_runtime *rt)
{
    struct weft__watchdog *wd = weft__observe_rt(rt)->watchdog;
    if (!wd)
        return;
    weft__observe_rt(rt)->watchdog = NULL;
    pthread_cond_destroy(&wd->cv);
    pthread_mutex_destroy(&wd->mu);
    pthread_mutex_destroy(&wd->data_mu);
    free(wd->table);
    free(wd->seen);
    free(wd->reports);
    free(wd);
}

/* ---- the slices in the task dump ---- */

struct fmt {
    char *buf;
    size_t cap, len; /* len may pass cap: what it needed */
};

static void fput(struct fmt *f, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void fput(struct fmt *f, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    size_t room = f->len < f->cap ? f->cap - f->len : 0;
    int n = vsnprintf(room ? f->buf + f->len : NULL, room, fmt, ap);
    va_end(ap);
    if (n > 0)
        f->len += (size_t)n;
}

/* s as a JSON string's contents (quotes, backslashes and controls
 * escaped). */
static void fput_json(struct fmt *f, const char *s)
{
    for (char e[6]; *s; s++)
        fput(f, "%.*s", (int)weft__json_char((unsigned char)*s, e), e);
}

static void fput_slice(struct fmt *f, const weft_slice_info *e, bool json)
{
    unsigned long long hi = e->id >> WEFT__ID_BITS,
                       lo = e->id & ((UINT64_C(1) << WEFT__ID_BITS) - 1);
    if (json) {
        fput(f, "{\"id\":\"%llu.%llu\",\"name\":\"", hi, lo);
        fput_json(f, e->name);
        fput(f, "\",\"file\":\"");
        fput_json(f, e->file);
        fput(f, "\",\"line\":%d,\"worker\":%d,\"ns\":%lld,\"slow\":%llu}",
             e->line, e->worker, (long long)e->ns, (unsigned long long)e->slow);
        return;
    }
    fput(f,
         "  task %llu.%llu \"%s\" (spawned at %s:%d) on worker %d: longest "
         "%lld.%03lld ms, %llu slow\n",
         hi, lo, e->name, e->file, e->line, e->worker,
         (long long)(e->ns / WEFT_MSEC),
         (long long)(e->ns % WEFT_MSEC / WEFT_USEC),
         (unsigned long long)e->slow);
}

size_t weft__slices_format(weft_runtime *rt, bool json, char *buf, size_t cap)
{
    struct weft__watchdog *wd = weft__observe_rt(rt)->watchdog;
    struct fmt f = {.buf = buf, .cap = cap};
    if (cap)
        buf[0] = '\0';
    if (!wd || wd->slow == WEFT_NEVER)
        return 0;
    weft_worker_stats all, one;
    memset(&all, 0, sizeof all);
    uint64_t slow[WORKERS_SHOWN];
    int n = wd->nworkers;
    for (int i = 0; i < n; i++) {
        memset(&one, 0, sizeof one);
        slices_read(wd, i, &one);
        if (i < WORKERS_SHOWN)
            slow[i] = one.slow_slices;
        worker_add(&all, &one);
    }
    int shown = n < WORKERS_SHOWN ? n : WORKERS_SHOWN;
    if (json) {
        fput(&f,
             "{\"type\":\"slices\",\"threshold_ns\":%lld,\"slow\":%llu,"
             "\"workers\":[",
             (long long)wd->slow, (unsigned long long)all.slow_slices);
        for (int i = 0; i < shown; i++)
            fput(&f, "%s%llu", i ? "," : "", (unsigned long long)slow[i]);
        fput(&f, "],\"top\":[");
        for (int i = 0; i < WEFT_SLICE_TOP && all.top[i].id; i++) {
            fput(&f, "%s", i ? "," : "");
            fput_slice(&f, &all.top[i], true);
        }
        fput(&f, "]}\n");
    } else {
        fput(&f,
             "slow slices (%lld ms or more without parking or yielding): "
             "%llu",
             (long long)(wd->slow / WEFT_MSEC),
             (unsigned long long)all.slow_slices);
        for (int i = 0; i < shown; i++)
            fput(&f, "%s%llu",
                 i ? ", " : " (by worker: ", (unsigned long long)slow[i]);
        fput(&f, "%s\n", shown ? ")" : "");
        if (all.top[0].id)
            fput(&f, "longest slices:\n");
        for (int i = 0; i < WEFT_SLICE_TOP && all.top[i].id; i++)
            fput_slice(&f, &all.top[i], false);
    }
    if (cap && f.len >= cap)
        buf[cap - 1] = '\0';
    return f.len < cap ? f.len : (cap ? cap - 1 : 0);
}
