/* SPDX-License-Identifier: MIT */
/*
 * The blocking pool: weft_blocking runs fn on a pool thread while the task
 * waits. Results and counts are checked exactly; the queue bound, FIFO
 * order and what a cancel or a timeout leaves behind (a queued call
 * dropped, a running one finished and discarded) are checked from the
 * pool's statistics at points the test makes stable. Jobs block on gates
 * (a pthread mutex and condition) that tasks open, and tell tasks they
 * started through weft semaphores, which any thread may release: nothing
 * sleeps to wait for something. Thread and fd counts are compared before
 * and after each run.
 */
#include "io/io.h" /* weft__blocking_keepalive_ns */
#include "t.h"
#include "weft.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

/* Internal (src/io/blocking.c): how long an idle pool thread lives. */

/* ---- helpers ----------------------------------------------------------- */

/* A gate pool threads wait at until a task opens it. */
struct gate {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int open;
};
#define GATE_INIT                                                              \
    {                                                                          \
        PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0                 \
    }

/* Waits until the gate is open: 0, or -ETIMEDOUT after 10 s (so a test
 * whose gate cannot open fails instead of hanging). */
static int gate_wait(struct gate *g)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 10;
    int rc = 0;
    pthread_mutex_lock(&g->mu);
    while (!g->open && rc == 0)
        rc = pthread_cond_timedwait(&g->cv, &g->mu, &until);
    int open = g->open;
    pthread_mutex_unlock(&g->mu);
    return open ? 0 : -ETIMEDOUT;
}

static void gate_open(struct gate *g)
{
    pthread_mutex_lock(&g->mu);
    g->open = 1;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

/* A job: counts its runs, optionally says it started, waits at a gate,
 * does some work, says it finished and returns its status. */
struct job {
    int status;
    struct gate *gate;
    weft_sem *started, *finished;
    int64_t work_ns; /* real time it takes after the gate */
    atomic_int ran, done;
    int *order; /* if set: its place among jobs that ran */
};

static pthread_mutex_t order_mu = PTHREAD_MUTEX_INITIALIZER;
static int order_next;

static int job_fn(void *arg)
{
    struct job *j = arg;
    ASSERT_EQ(atomic_fetch_add(&j->ran, 1), 0); /* at most once */
    if (j->order) {
        pthread_mutex_lock(&order_mu);
        *j->order = order_next++;
        pthread_mutex_unlock(&order_mu);
    }
    if (j->started)
        ASSERT_EQ(weft_sem_release(j->started, 1), 0);
    if (j->gate)
        ASSERT_EQ(gate_wait(j->gate), 0);
    if (j->work_ns) {
        struct timespec ts = {0, (long)j->work_ns};
        nanosleep(&ts, NULL); /* the work itself, not a wait */
    }
    atomic_store(&j->done, 1);
    if (j->finished)
        ASSERT_EQ(weft_sem_release(j->finished, 1), 0);
    return j->status;
}

/* A task that makes one call, in a scope of its own that a test may
 * cancel (the scope is published while the call may be cancelled), and
 * keeps its result. */
struct caller {
    struct job *job;
    int rc;
    _Atomic(weft_scope *) scope;
    atomic_int returned;
};

static int caller_fn(void *arg)
{
    struct caller *c = arg;
    weft_scope *s = scope_open();
    atomic_store(&c->scope, s);
    c->rc = weft_blocking(job_fn, c->job);
    atomic_store(&c->returned, 1);
    int rc = weft_scope_join(s);
    ASSERT(rc == 0 || rc == -ECANCELED);
    ASSERT_EQ(weft_scope_free(s), 0);
    return 0;
}

/* Cancels c's call, which is blocked, and waits until it has returned. */
static void cancel_caller(struct caller *c)
{
    ASSERT_EQ(weft_scope_cancel(atomic_load(&c->scope)), 0);
    T_SETTLE(atomic_load(&c->returned));
}

static int run_pool(int workers, weft_clock_kind clock, int threads, int queue,
                    weft_fn fn, void *arg)
{
    weft_config cfg = {.workers = workers,
                       .clock = clock,
                       .blocking_threads = threads,
                       .blocking_queue = queue};
    return weft_run(&cfg, fn, arg);
}

static weft_blocking_info stats(void)
{
    weft_blocking_info i;
    ASSERT_EQ(weft_blocking_stats_get(&i), 0);
    return i;
}

/* Calls in the pool: running, queued or waiting for room. */
static int in_pool(void)
{
    weft_blocking_info i = stats();
    return i.running + i.queued + i.waiting;
}

static int count_threads(void)
{
    return t_proc_count("/proc/self/task");
}

static int count_fds(void)
{
    return t_proc_count("/proc/self/fd");
}

/* Thread and fd counts, compared before and after runs: a run leaves
 * none of its threads (workers, pool threads) or fds behind. */
struct snapshot {
    int threads, fds;
};

static void *note_tid(void *arg)
{
    *(pid_t *)arg = gettid();
    return NULL;
}

static struct snapshot snap(void)
{
    /* A first thread makes the sanitizers start their own helper thread
     * (TSan's background thread), so it is counted before and after.
     * Joined, it may stay listed in /proc a moment longer (seen under
     * qemu-user): wait (bounded) until its own entry is gone, so that the
     * snapshot does not count it. */
    pthread_t th;
    pid_t tid = 0;
    ASSERT_EQ(pthread_create(&th, NULL, note_tid, &tid), 0);
    ASSERT_EQ(pthread_join(th, NULL), 0);
    char path[64];
    snprintf(path, sizeof path, "/proc/self/task/%d", (int)tid);
    int64_t end = t_real_ns() + 10 * WEFT_SEC;
    while (access(path, F_OK) == 0) {
        ASSERT(t_real_ns() < end);
        sched_yield();
    }
    return (struct snapshot){count_threads(), count_fds()};
}

static void assert_nothing_left(struct snapshot before)
{
    /* pthread_join returns when a thread is done, but the kernel may list
     * it in /proc a moment longer (seen under qemu-user): give the count up
     * to 2 s to settle; a thread really left behind stays counted. */
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do {
        if (count_threads() == before.threads)
            break;
        sched_yield();
        clock_gettime(CLOCK_MONOTONIC, &now);
    } while (now.tv_sec - t0.tv_sec < 2);
    ASSERT_EQ(count_threads(), before.threads);
    ASSERT_EQ(count_fds(), before.fds);
}

/* ---- results ----------------------------------------------------------- */

static int where_fn(void *arg)
{
    pthread_t *self = arg;
    *self = pthread_self();
    return -EIO;
}

/* arg: non-NULL on the real clock. */
static int results_root(void *arg)
{
    weft_blocking_info i = stats();
    ASSERT(i.threads == 0 && i.running == 0 && i.queued == 0 &&
           i.waiting == 0); /* nothing before the first call */
    struct job j = {.status = 42};
    ASSERT_EQ(weft_blocking(job_fn, &j), 42);
    ASSERT_EQ(atomic_load(&j.ran), 1);
    ASSERT_EQ(atomic_load(&j.done), 1);
    /* A negative status passes through; fn ran on another thread. With
     * the virtual clock too the deadline does not pass while fn runs (the
     * clock gives the pool real time before it jumps), and fn takes no
     * virtual time. */
    pthread_t where = pthread_self();
    weft_time t0 = weft_now();
    ASSERT_EQ(weft_blocking_until(where_fn, &where, t0 + 10 * WEFT_SEC), -EIO);
    ASSERT(!pthread_equal(where, pthread_self()));
    if (!arg)
        ASSERT_EQ(weft_now(), t0);
    i = stats();
    ASSERT_EQ(i.threads, 1);
    ASSERT_EQ(i.running, 0);
    ASSERT_EQ(i.queued, 0);
    ASSERT_EQ(i.waiting, 0);
    return 0;
}

TEST(results_returned)
{
    struct snapshot s = snap();
    /* The call must finish before the clock moves, on a machine however
     * loaded (qemu in CI took longer than the default 50 ms): a long
     * autojump, which costs nothing when the call ends first. */
    weft_config vc = {.workers = 1,
                      .clock = WEFT_CLOCK_VIRTUAL,
                      .autojump_ns = 10 * WEFT_SEC};
    ASSERT_EQ(weft_run(&vc, results_root, NULL), 0);
    ASSERT_EQ(t_run_mono(2, results_root, &s), 0);
    assert_nothing_left(s);
}

/* ---- a pool thread is reused ------------------------------------------- */

static int tid_fn(void *arg)
{
    *(pid_t *)arg = gettid();
    return 0;
}

static int reuse_root(void *arg)
{
    (void)arg;
    pid_t first = 0, tid = 0;
    ASSERT_EQ(weft_blocking(tid_fn, &first), 0);
    ASSERT(first != gettid());
    for (int k = 0; k < 50; k++) {
        ASSERT_EQ(weft_blocking(tid_fn, &tid), 0);
        ASSERT_EQ(tid, first);
    }
    ASSERT_EQ(stats().threads, 1);
    return 0;
}

TEST(thread_reused)
{
    ASSERT_EQ(t_run_virtual(1, reuse_root, NULL), 0);
}

/* ---- many callers across workers --------------------------------------- */

#define MANY_CALLS 3
#define MANY_THREADS 8

struct many {
    int ncallers;
    atomic_long calls;
    atomic_int busy, max_busy;
    atomic_int bad;
};

static struct many many;

static int many_fn(void *arg)
{
    intptr_t v = (intptr_t)arg;
    int b = atomic_fetch_add(&many.busy, 1) + 1;
    int m = atomic_load(&many.max_busy);
    while (b > m && !atomic_compare_exchange_weak(&many.max_busy, &m, b))
        ;
    atomic_fetch_add(&many.calls, 1);
    atomic_fetch_sub(&many.busy, 1);
    return (int)(v * 7 + 1);
}

static int many_caller(void *arg)
{
    intptr_t i = (intptr_t)arg;
    for (intptr_t k = 0; k < MANY_CALLS; k++) {
        intptr_t v = i * MANY_CALLS + k;
        if (weft_blocking(many_fn, (void *)v) != (int)(v * 7 + 1))
            atomic_fetch_add(&many.bad, 1);
    }
    return 0;
}

static int many_root(void *arg)
{
    (void)arg;
    weft_scope *s = scope_open();
    for (intptr_t i = 0; i < many.ncallers; i++)
        spawn(many_caller, (void *)i);
    scope_end(s);
    weft_blocking_info i = stats();
    ASSERT(i.threads >= 1 && i.threads <= MANY_THREADS);
    ASSERT_EQ(i.running, 0);
    ASSERT_EQ(i.queued, 0);
    ASSERT_EQ(i.waiting, 0);
    return 0;
}

TEST(many_callers_across_workers)
{
    static const int workers[] = {1, 2, 4};
    struct snapshot s = snap();
    for (int w = 0; w < 3; w++) {
        memset(&many, 0, sizeof many);
        many.ncallers = (int)T_LIVE(1000);
        /* A queue of 4: most callers also wait for room. */
        ASSERT_EQ(run_pool(workers[w], WEFT_CLOCK_MONOTONIC, MANY_THREADS, 4,
                           many_root, NULL),
                  0);
        ASSERT_EQ(atomic_load(&many.bad), 0);
        ASSERT_EQ(atomic_load(&many.calls), (long)many.ncallers * MANY_CALLS);
        ASSERT(atomic_load(&many.max_busy) <= MANY_THREADS);
    }
    assert_nothing_left(s);
}

/* ---- the worker runs other tasks while a call blocks ------------------- */

struct side {
    struct gate gate;
    weft_sem started;
    struct job job;
    struct caller caller;
};

static int opener(void *arg)
{
    struct side *x = arg;
    ASSERT_EQ(weft_sem_acquire(&x->started, 1), 0);
    gate_open(&x->gate); /* only a task on this worker can open it */
    return 0;
}

static int side_root(void *arg)
{
    struct side *x = arg;
    weft_scope *s = scope_open();
    spawn(caller_fn, &x->caller);
    spawn(opener, x);
    scope_end(s);
    ASSERT_EQ(x->caller.rc, 5);
    ASSERT_EQ(atomic_load(&x->job.done), 1);
    return 0;
}

TEST(worker_runs_tasks_while_call_blocks)
{
    static struct side x = {.gate = GATE_INIT};
    ASSERT_EQ(weft_sem_init(&x.started, 0), 0);
    x.job = (struct job){.status = 5, .gate = &x.gate, .started = &x.started};
    x.caller = (struct caller){.job = &x.job};
    /* One worker: if the call held it, the opener could never run and
     * the job's gate would time out. */
    ASSERT_EQ(t_run_mono(1, side_root, &x), 0);
}

/* ---- queue bound and FIFO ---------------------------------------------- */

#define FIFO_CALLERS 6

struct line {
    struct gate gate;
    weft_sem started;
    struct job job[10];
    struct caller caller[10];
    int order[10];
};

/* Spawns callers first..n-1 one at a time, each in the pool before the
 * next starts (on one worker, the spawned caller runs when we yield). */
static void line_up(struct line *x, int first, int n)
{
    for (int k = first; k < n; k++) {
        spawn(caller_fn, &x->caller[k]);
        T_SETTLE(in_pool() == k + 1);
    }
}

static void line_init(struct line *x, int n)
{
    memset(x, 0, sizeof *x);
    x->gate = (struct gate)GATE_INIT;
    ASSERT_EQ(weft_sem_init(&x->started, 0), 0);
    for (int k = 0; k < n; k++) {
        x->order[k] = -1;
        x->job[k] = (struct job){.status = 100 + k,
                                 .gate = &x->gate,
                                 .started = &x->started,
                                 .order = &x->order[k]};
        x->caller[k] = (struct caller){.job = &x->job[k]};
    }
}

static int fifo_root(void *arg)
{
    struct line *x = arg;
    weft_scope *s = scope_open();
    spawn(caller_fn, &x->caller[0]);
    ASSERT_EQ(weft_sem_acquire(&x->started, 1), 0); /* job 0 runs */
    line_up(x, 1, FIFO_CALLERS);
    weft_blocking_info i = stats();
    ASSERT_EQ(i.threads, 1);
    ASSERT_EQ(i.running, 1);
    ASSERT_EQ(i.queued, 2); /* the bound */
    ASSERT_EQ(i.waiting, 3);
    gate_open(&x->gate);
    scope_end(s);
    for (int k = 0; k < FIFO_CALLERS; k++) {
        ASSERT_EQ(x->caller[k].rc, 100 + k);
        ASSERT_EQ(x->order[k], k); /* run in call order */
    }
    return 0;
}

TEST(queue_bound_fifo)
{
    static struct line x;
    line_init(&x, FIFO_CALLERS);
    order_next = 0;
    ASSERT_EQ(run_pool(1, WEFT_CLOCK_MONOTONIC, 1, 2, fifo_root, &x), 0);
}

#define BOUND_CALLERS 10

static int bound_root(void *arg)
{
    struct line *x = arg;
    weft_scope *s = scope_open();
    for (int k = 0; k < BOUND_CALLERS; k++)
        spawn(caller_fn, &x->caller[k]);
    /* Two run (and wait at the gate), three are queued, five wait. */
    ASSERT_EQ(weft_sem_acquire(&x->started, 2), 0);
    T_SETTLE(stats().waiting == 5);
    weft_blocking_info i = stats();
    ASSERT_EQ(i.threads, 2);
    ASSERT_EQ(i.running, 2);
    ASSERT_EQ(i.queued, 3);
    ASSERT_EQ(i.waiting, 5);
    ASSERT_EQ(weft_sem_available(&x->started), 0); /* nobody else ran */
    gate_open(&x->gate);
    scope_end(s);
    for (int k = 0; k < BOUND_CALLERS; k++)
        ASSERT_EQ(x->caller[k].rc, 100 + k);
    return 0;
}

TEST(queue_bound_threads_and_queue)
{
    static struct line x;
    line_init(&x, BOUND_CALLERS);
    ASSERT_EQ(run_pool(2, WEFT_CLOCK_MONOTONIC, 2, 3, bound_root, &x), 0);
}

/* ---- cancel: a queued call is dropped, a running one discarded --------- */

/* One thread, a queue of one: call 0 runs, 1 is queued, 2 and 3 wait for
 * room. Cancelling 2 (waiting) and 1 (queued) drops them: their fns never
 * run, and 1's slot goes to 3, the next in line. */
static int cancel_queued_root(void *arg)
{
    struct line *x = arg;
    weft_scope *s = scope_open();
    spawn(caller_fn, &x->caller[0]);
    ASSERT_EQ(weft_sem_acquire(&x->started, 1), 0);
    line_up(x, 1, 4);
    weft_blocking_info i = stats();
    ASSERT(i.running == 1 && i.queued == 1 && i.waiting == 2);

    cancel_caller(&x->caller[2]);
    ASSERT_EQ(x->caller[2].rc, -ECANCELED);
    i = stats();
    ASSERT(i.running == 1 && i.queued == 1 && i.waiting == 1);

    cancel_caller(&x->caller[1]);
    ASSERT_EQ(x->caller[1].rc, -ECANCELED);
    i = stats();
    ASSERT(i.running == 1 && i.queued == 1 && i.waiting == 0); /* 3 moved up */

    gate_open(&x->gate);
    scope_end(s);
    ASSERT_EQ(x->caller[0].rc, 100);
    ASSERT_EQ(x->caller[3].rc, 103);
    ASSERT_EQ(atomic_load(&x->job[1].ran), 0);
    ASSERT_EQ(atomic_load(&x->job[2].ran), 0);
    ASSERT_EQ(x->order[0], 0);
    ASSERT_EQ(x->order[3], 1);
    return 0;
}

TEST(cancel_queued_call_never_runs)
{
    static struct line x;
    struct snapshot s = snap();
    line_init(&x, 4);
    order_next = 0;
    ASSERT_EQ(run_pool(1, WEFT_CLOCK_MONOTONIC, 1, 1, cancel_queued_root, &x),
              0);
    ASSERT_EQ(atomic_load(&x.job[1].ran), 0);
    ASSERT_EQ(atomic_load(&x.job[2].ran), 0);
    assert_nothing_left(s);
}

/* A running call's caller returns -ECANCELED while fn still waits at its
 * gate; fn then finishes on its thread, its status discarded, and the
 * job's record is freed (ASan reports it otherwise). */
struct abandon {
    struct gate gate;
    weft_sem started, finished;
    struct job job, next;
    struct caller caller;
};

static void abandon_init(struct abandon *x, int64_t work_ns)
{
    memset(x, 0, sizeof *x);
    x->gate = (struct gate)GATE_INIT;
    ASSERT_EQ(weft_sem_init(&x->started, 0), 0);
    ASSERT_EQ(weft_sem_init(&x->finished, 0), 0);
    x->job = (struct job){.status = 7,
                          .gate = &x->gate,
                          .started = &x->started,
                          .finished = &x->finished,
                          .work_ns = work_ns};
    x->next = (struct job){.status = 8};
    x->caller = (struct caller){.job = &x->job};
}

/* Starts the call, cancels it while fn runs; fn has not finished. */
static void abandon_call(struct abandon *x)
{
    spawn(caller_fn, &x->caller);
    ASSERT_EQ(weft_sem_acquire(&x->started, 1), 0);
    cancel_caller(&x->caller);
    ASSERT_EQ(x->caller.rc, -ECANCELED);
    ASSERT_EQ(atomic_load(&x->job.done), 0); /* returned at once */
    weft_blocking_info i = stats();
    ASSERT(i.threads == 1 && i.running == 1 && i.queued == 0);
}

static int cancel_running_root(void *arg)
{
    struct abandon *x = arg;
    weft_scope *s = scope_open();
    abandon_call(x);
    gate_open(&x->gate);
    ASSERT_EQ(weft_sem_acquire(&x->finished, 1), 0);
    T_SETTLE(stats().running == 0);
    ASSERT_EQ(x->caller.rc, -ECANCELED); /* 7 was discarded */
    scope_end(s);
    /* The thread is free again for the next call. */
    ASSERT_EQ(weft_blocking(job_fn, &x->next), 8);
    ASSERT_EQ(stats().threads, 1);
    return 0;
}

TEST(cancel_running_call_discarded)
{
    static struct abandon x;
    struct snapshot s = snap();
    abandon_init(&x, 0);
    ASSERT_EQ(run_pool(1, WEFT_CLOCK_MONOTONIC, 1, 0, cancel_running_root, &x),
              0);
    ASSERT_EQ(atomic_load(&x.job.ran), 1);
    ASSERT_EQ(atomic_load(&x.job.done), 1);
    assert_nothing_left(s);
}

/* The root returns while an abandoned fn still works (50 ms after its
 * gate opens): weft_run returns only after it has. */
static int abandon_root(void *arg)
{
    struct abandon *x = arg;
    weft_scope *s = scope_open();
    abandon_call(x);
    scope_end(s);
    gate_open(&x->gate);
    return 0;
}

TEST(run_waits_for_abandoned_call)
{
    static struct abandon x;
    struct snapshot s = snap();
    abandon_init(&x, 50 * WEFT_MSEC);
    ASSERT_EQ(run_pool(2, WEFT_CLOCK_MONOTONIC, 1, 0, abandon_root, &x), 0);
    ASSERT_EQ(atomic_load(&x.job.done), 1);
    assert_nothing_left(s);
}

/* ---- the virtual clock waits for quick calls --------------------------- */

static atomic_int slept;

static int sleep_one_second(void *arg)
{
    (void)arg;
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0);
    atomic_store(&slept, 1);
    return 0;
}

static int count_fn(void *arg)
{
    return 100 + atomic_fetch_add((atomic_int *)arg, 1);
}

/* While a call runs on the pool and every task is blocked, the clock does
 * not jump to the next deadline (a sleeper's, or the call's own): each
 * call returns its status at the instant it started, before the sleeper
 * wakes. Before the pool was counted, the first call timed out at t0 +
 * 10 ms and the sleeper woke during it. */
static int virtual_waits_root(void *arg)
{
    (void)arg;
    atomic_store(&slept, 0);
    weft_time t0 = weft_now();
    weft_scope *s = scope_open();
    spawn(sleep_one_second, NULL);
    atomic_int n = 0;
    for (int i = 0; i < 20; i++) {
        ASSERT_EQ(weft_blocking_until(count_fn, &n, t0 + 10 * WEFT_MSEC),
                  100 + i);
        ASSERT_EQ(weft_now(), t0);
    }
    ASSERT_EQ(atomic_load(&slept), 0);
    scope_end(s);
    ASSERT_EQ(weft_now(), t0 + WEFT_SEC);
    ASSERT_EQ(atomic_load(&slept), 1);
    return 0;
}

TEST(virtual_clock_waits_for_running_calls)
{
    struct snapshot s = snap();
    /* The clock waits for a running call only so long in real time (50 ms
     * by default): on a loaded machine a pool thread can be kept off a CPU
     * longer than that, and the clock would move on. A long threshold
     * makes the test about the rule, not the machine's load. */
    for (int workers = 1; workers <= 2; workers++) {
        weft_config cfg = {.workers = workers,
                           .clock = WEFT_CLOCK_VIRTUAL,
                           .autojump_ns = 60 * WEFT_SEC};
        ASSERT_EQ(weft_run(&cfg, virtual_waits_root, NULL), 0);
    }
    assert_nothing_left(s);
}

/* A call that takes longer, in real time, than the clock's threshold:
 * with the default (50 ms) the clock moves on and the call times out at
 * its virtual deadline; with a long weft_config.autojump_ns it returns at
 * the instant it started. */
static int slow_fn(void *arg)
{
    (void)arg;
    struct timespec ts = {0, 150 * 1000 * 1000}; /* the work itself */
    nanosleep(&ts, NULL);
    return 7;
}

static int autojump_root(void *arg)
{
    int expect = *(int *)arg;
    weft_time t0 = weft_now();
    ASSERT_EQ(weft_blocking_until(slow_fn, NULL, t0 + 10 * WEFT_MSEC), expect);
    ASSERT_EQ(weft_now(), expect == 7 ? t0 : t0 + 10 * WEFT_MSEC);
    return 0;
}

TEST(autojump_threshold_is_the_configured_one)
{
    int expect = 7;
    weft_config cfg = {.workers = 1,
                       .clock = WEFT_CLOCK_VIRTUAL,
                       .autojump_ns = 60 * WEFT_SEC};
    ASSERT_EQ(weft_run(&cfg, autojump_root, &expect), 0);
    expect = -ETIMEDOUT;
    cfg.autojump_ns = WEFT_MSEC;
    ASSERT_EQ(weft_run(&cfg, autojump_root, &expect), 0);
}

/* ---- timeouts ---------------------------------------------------------- */

struct tmo {
    struct gate gate;
    weft_sem finished;
    struct job running, queued, late;
};

/* Keeps the virtual clock still (a runnable task) until j has started. */
static int hold_clock(void *arg)
{
    struct job *j = arg;
    T_SETTLE(atomic_load(&j->ran));
    return 0;
}

static int timeout_root(void *arg)
{
    struct tmo *x = arg;
    weft_time t0 = weft_now();
    /* Running: -ETIMEDOUT exactly at the deadline, fn still at its gate. */
    weft_scope *s = scope_open();
    spawn(hold_clock, &x->running);
    ASSERT_EQ(weft_blocking_until(job_fn, &x->running, t0 + WEFT_SEC),
              -ETIMEDOUT);
    ASSERT_EQ(weft_now(), t0 + WEFT_SEC);
    ASSERT_EQ(atomic_load(&x->running.done), 0);
    scope_end(s);
    /* Queued behind it: dropped at its deadline. */
    ASSERT_EQ(weft_blocking_until(job_fn, &x->queued, t0 + 2 * WEFT_SEC),
              -ETIMEDOUT);
    ASSERT_EQ(weft_now(), t0 + 2 * WEFT_SEC);
    weft_blocking_info i = stats();
    ASSERT(i.running == 1 && i.queued == 0 && i.waiting == 0);
    /* Already past: not even queued. */
    ASSERT_EQ(weft_blocking_until(job_fn, &x->late, weft_now()), -ETIMEDOUT);
    ASSERT_EQ(stats().queued, 0);
    gate_open(&x->gate);
    ASSERT_EQ(weft_sem_acquire(&x->finished, 1), 0);
    T_SETTLE(stats().running == 0);
    return 0;
}

/* On the real clock, with a short deadline. On a loaded machine the pool
 * thread may not even have taken the call by then: it is dropped, never
 * runs, and the next round tries again with a new job. The round in which
 * it ran (it waits at its gate) is the one this test is about. */
static int timeout_mono_root(void *arg)
{
    struct tmo *x = arg;
    for (int round = 0;; round++) {
        ASSERT(round < 50);
        x->running.ran = 0;
        ASSERT_EQ(weft_blocking_until(job_fn, &x->running,
                                      weft_now() + 10 * WEFT_MSEC),
                  -ETIMEDOUT);
        weft_blocking_info i = stats(); /* a taken call counts as running */
        ASSERT(i.queued == 0 && i.waiting == 0);
        if (i.running == 1)
            break;
        ASSERT_EQ(i.running, 0);
        ASSERT_EQ(atomic_load(&x->running.ran), 0); /* dropped */
    }
    gate_open(&x->gate);
    ASSERT_EQ(weft_sem_acquire(&x->finished, 1), 0);
    return 0;
}

static void tmo_init(struct tmo *x)
{
    memset(x, 0, sizeof *x);
    x->gate = (struct gate)GATE_INIT;
    ASSERT_EQ(weft_sem_init(&x->finished, 0), 0);
    x->running =
        (struct job){.status = 1, .gate = &x->gate, .finished = &x->finished};
    x->queued = (struct job){.status = 2};
    x->late = (struct job){.status = 3};
}

TEST(timeout_drops_queued_discards_running)
{
    static struct tmo x;
    struct snapshot s = snap();
    tmo_init(&x);
    ASSERT_EQ(run_pool(1, WEFT_CLOCK_VIRTUAL, 1, 0, timeout_root, &x), 0);
    ASSERT_EQ(atomic_load(&x.running.ran), 1);
    ASSERT_EQ(atomic_load(&x.running.done), 1);
    ASSERT_EQ(atomic_load(&x.queued.ran), 0);
    ASSERT_EQ(atomic_load(&x.late.ran), 0);
    tmo_init(&x);
    ASSERT_EQ(run_pool(2, WEFT_CLOCK_MONOTONIC, 1, 0, timeout_mono_root, &x),
              0);
    ASSERT_EQ(atomic_load(&x.running.done), 1);
    assert_nothing_left(s);
}

/* ---- a cancellation storm ---------------------------------------------- */

/* Rounds of callers in a scope; one random call's fn cancels the round
 * while it runs (and waits until its own caller has returned, so that
 * caller's status is surely discarded), and a quarter of the callers have
 * short deadlines. Afterwards every call is accounted for: its fn ran at
 * most once, every fn that ran finished before weft_run returned, and the
 * caller got fn's status (delivered) or -ECANCELED/-ETIMEDOUT (fn never
 * ran: dropped; or ran: discarded). */
/* One round; abandoned fns of a round may still run during the next. */
struct sround {
    weft_scope *scope;
    atomic_int cancel_done; /* the trigger's weft_scope_cancel returned */
};

struct scall {
    struct sround *round;
    int index;
    bool trigger; /* its fn cancels the round */
    int spins;
    int64_t timeout; /* 0: no deadline */
    int rc;
    bool spawned;
    atomic_int ran, done, returned;
};

struct storm {
    int n, nrounds;
    struct scall *calls;   /* nrounds * n */
    struct sround *rounds; /* nrounds */
};

static int storm_fn(void *arg)
{
    struct scall *c = arg;
    ASSERT_EQ(atomic_fetch_add(&c->ran, 1), 0);
    if (c->trigger) {
        ASSERT_EQ(weft_scope_cancel(c->round->scope), 0);
        atomic_store(&c->round->cancel_done, 1);
        int64_t end = t_real_ns() + 10 * WEFT_SEC;
        while (!atomic_load(&c->returned)) {
            ASSERT(t_real_ns() < end);
            sched_yield();
        }
    }
    for (int i = 0; i < c->spins; i++)
        sched_yield();
    atomic_store(&c->done, 1);
    return 1000 + c->index;
}

static int storm_caller(void *arg)
{
    struct scall *c = arg;
    c->rc = c->timeout
                ? weft_blocking_until(storm_fn, c, weft_now() + c->timeout)
                : weft_blocking(storm_fn, c);
    atomic_store(&c->returned, 1);
    return 0;
}

static void storm_round(int n, struct sround *r, struct scall *calls,
                        uint64_t *rng)
{
    int trigger = (int)(rnd(rng) % (uint64_t)n);
    for (int i = 0; i < n; i++) {
        struct scall *c = &calls[i];
        c->round = r;
        c->index = i;
        c->trigger = i == trigger;
        c->spins = (int)(rnd(rng) % 8);
        if (i != trigger && rnd(rng) % 4 == 0)
            c->timeout = (int64_t)(rnd(rng) % 200) * WEFT_USEC;
    }
    weft_scope_opts o = {.policy = WEFT_COLLECT};
    ASSERT_EQ(weft_scope_open(&r->scope, &o), 0);
    for (int i = 0; i < n; i++) {
        int rc = weft_spawn(r->scope, storm_caller, &calls[i]);
        ASSERT(rc >= 0 || rc == -ECANCELED);
        calls[i].spawned = rc >= 0;
    }
    ASSERT_EQ(weft_scope_join(r->scope), -ECANCELED);
    T_SETTLE(atomic_load(&r->cancel_done)); /* before freeing the scope */
    ASSERT_EQ(weft_scope_free(r->scope), 0);
    weft_blocking_info i = stats();
    ASSERT(i.queued == 0 && i.waiting == 0); /* nothing left in line */
}

static int storm_root(void *arg)
{
    struct storm *st = arg;
    uint64_t rng =
        0x5EED0000u + (unsigned)st->n; /* real threads: not replayable */
    for (int r = 0; r < st->nrounds; r++)
        storm_round(st->n, &st->rounds[r], &st->calls[r * st->n], &rng);
    return 0;
}

static void storm_check(struct storm *st)
{
    int delivered = 0, discarded = 0, dropped = 0;
    for (int i = 0; i < st->nrounds * st->n; i++) {
        struct scall *c = &st->calls[i];
        int ran = atomic_load(&c->ran);
        ASSERT(ran <= 1);
        ASSERT_EQ(atomic_load(&c->done), ran); /* weft_run waited */
        if (!c->spawned) {
            ASSERT_EQ(ran, 0);
            dropped++;
        } else if (c->rc == 1000 + c->index) {
            ASSERT_EQ(ran, 1);
            delivered++;
        } else {
            ASSERT(c->rc == -ECANCELED || c->rc == -ETIMEDOUT);
            if (ran)
                discarded++;
            else
                dropped++;
        }
    }
    ASSERT_EQ(delivered + discarded + dropped, st->nrounds * st->n);
    ASSERT(discarded >= st->nrounds); /* each round's trigger, at least */
}

TEST(cancellation_storm)
{
    static const int workers[] = {1, 2, 4};
    struct snapshot s = snap();
    for (int w = 0; w < 3; w++) {
        struct storm st = {.n = (int)T_LIVE(300), .nrounds = (int)T_SCALE(20)};
        st.calls = calloc((size_t)(st.nrounds * st.n), sizeof(*st.calls));
        st.rounds = calloc((size_t)st.nrounds, sizeof(*st.rounds));
        ASSERT(st.calls != NULL && st.rounds != NULL);
        ASSERT_EQ(
            run_pool(workers[w], WEFT_CLOCK_MONOTONIC, 4, 8, storm_root, &st),
            0);
        storm_check(&st);
        free(st.calls);
        free(st.rounds);
    }
    assert_nothing_left(s);
}

/* ---- idle threads exit ------------------------------------------------- */

/* n jobs that each wait until all n run at once: n threads. */
struct meet {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int n, arrived;
};

static int meet_fn(void *arg)
{
    struct meet *m = arg;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 10;
    pthread_mutex_lock(&m->mu);
    if (++m->arrived == m->n)
        pthread_cond_broadcast(&m->cv);
    int rc = 0;
    while (m->arrived < m->n && rc == 0)
        rc = pthread_cond_timedwait(&m->cv, &m->mu, &until);
    int all = m->arrived >= m->n;
    pthread_mutex_unlock(&m->mu);
    return all ? 0 : -ETIMEDOUT;
}

#define IDLE_THREADS 4

struct idle {
    struct meet meet;
    int base;      /* threads of the process with the runtime's workers */
    atomic_int ok; /* calls that met the others */
};

static int idle_caller(void *arg)
{
    struct idle *x = arg;
    if (weft_blocking(meet_fn, &x->meet) == 0)
        atomic_fetch_add(&x->ok, 1);
    return 0;
}

static int idle_root(void *arg)
{
    struct idle *x = arg;
    x->base = count_threads();
    weft_scope *s = scope_open();
    for (int k = 0; k < IDLE_THREADS; k++)
        spawn(idle_caller, x);
    scope_end(s);
    ASSERT_EQ(atomic_load(&x->ok), IDLE_THREADS); /* four threads at once */
    /* Each exits once idle for the keep-alive (shortened to 20 ms). */
    T_SETTLE(stats().threads == 0);
    T_SETTLE(count_threads() == x->base);
    /* The next call starts a thread again. */
    struct job j = {.status = 9};
    ASSERT_EQ(weft_blocking(job_fn, &j), 9);
    ASSERT_EQ(stats().threads, 1);
    return 0;
}

TEST(idle_threads_exit)
{
    static struct idle x = {.meet = {PTHREAD_MUTEX_INITIALIZER,
                                     PTHREAD_COND_INITIALIZER, IDLE_THREADS,
                                     0}};
    struct snapshot s = snap();
    int64_t keepalive = weft__blocking_keepalive_ns;
    weft__blocking_keepalive_ns = 20 * WEFT_MSEC;
    ASSERT_EQ(run_pool(2, WEFT_CLOCK_MONOTONIC, IDLE_THREADS, 0, idle_root, &x),
              0);
    weft__blocking_keepalive_ns = keepalive;
    assert_nothing_left(s);
}

/* ---- errors ------------------------------------------------------------ */

/* From fn, on a pool thread: not a task. */
static int nested_fn(void *arg)
{
    struct job *j = arg;
    weft_blocking_info i;
    if (weft_blocking(job_fn, j) != -EPERM)
        return -1;
    if (weft_blocking_stats_get(&i) != -EPERM)
        return -2;
    return 0;
}

static int errors_root(void *arg)
{
    struct job *j = arg;
    ASSERT_EQ(weft_blocking(NULL, j), -EINVAL);
    ASSERT_EQ(weft_blocking_until(NULL, j, WEFT_NEVER), -EINVAL);
    ASSERT_EQ(weft_blocking_stats_get(NULL), -EINVAL);
    ASSERT_EQ(weft_blocking(nested_fn, j), 0);
    /* A cancelled scope: -ECANCELED on entry, fn not run. */
    weft_scope *s = scope_open();
    ASSERT_EQ(weft_scope_cancel(s), 0);
    ASSERT_EQ(weft_blocking(job_fn, j), -ECANCELED);
    ASSERT_EQ(weft_blocking_until(job_fn, j, WEFT_NEVER), -ECANCELED);
    ASSERT_EQ(weft_scope_join(s), -ECANCELED);
    ASSERT_EQ(weft_scope_free(s), 0);
    ASSERT_EQ(atomic_load(&j->ran), 0);
    return 0;
}

TEST(errors)
{
    static struct job j = {.status = 1};
    weft_blocking_info i;
    ASSERT_EQ(weft_blocking(job_fn, &j), -EPERM);
    ASSERT_EQ(weft_blocking_until(job_fn, &j, WEFT_NEVER), -EPERM);
    ASSERT_EQ(weft_blocking_stats_get(&i), -EPERM);
    ASSERT_EQ(t_run_virtual(1, errors_root, &j), 0);
    ASSERT_EQ(atomic_load(&j.ran), 0);
    weft_config bad = {.blocking_threads = -1};
    ASSERT_EQ(weft_run(&bad, errors_root, &j), -EINVAL);
    bad = (weft_config){.blocking_queue = -1};
    ASSERT_EQ(weft_run(&bad, errors_root, &j), -EINVAL);
}
