/* SPDX-License-Identifier: MIT */
/*
 * The blocking pool: OS threads that run calls which would block a worker.
 *
 * One pool per runtime, made by the first weft_blocking under
 * weft__io_rt(rt)->blocking_mu, which then guards every field of the pool and
 * of its jobs (a task holds it only for a few list operations, never across a
 * park; a pool thread never holds it while fn runs).
 *
 * A call, step by step:
 *   1. The caller allocates a job (never on its stack: it may leave before
 *      fn ends) and, under the lock, puts it in the queue, or, when the
 *      queue is full (or others already wait), in `room`, the line of
 *      callers waiting for room. Both are FIFO. It waits on the job's
 *      waiter (the wait layer's entry for a pthread mutex,
 *      weft__wait_pmutex, as the lock is one its threads also wait on a
 *      condition variable with; kind weft__wk_blocking, the job as the
 *      object).
 *   2. A pool thread pops the oldest queued job (RUNNING), moves the first
 *      caller waiting for room into the freed slot (claiming it first, as
 *      sync.c's wakers do, and waking it with W_GRANTED), and runs fn
 *      without the lock.
 *   3. A caller woken with W_GRANTED arms its waiter again under the
 *      lock (unless its job is DONE already) and parks again.
 *   4. When fn returns, the thread marks the job DONE under the lock and
 *      claims the caller with the job's token. If that works, it wakes the
 *      caller with W_DONE and the caller frees the job. If it fails, the
 *      caller is awake (its deadline or a cancel won the race, or it is
 *      between step 3's parks) and will find DONE under the lock.
 *   5. A caller woken by its deadline or a cancel is back under the lock,
 *      off the queue it was on (the wait layer unlinks it), and looks at
 *      its job: waiting for room or queued, it frees it (fn
 *      never runs; a freed queue slot goes to the next caller waiting for
 *      room); RUNNING, it marks it abandoned and leaves: the thread frees
 *      it after fn; DONE, it returns fn's status (fn won the race).
 * So each job is freed exactly once, by whichever side finishes last, and
 * every decision about who frees is taken under the lock.
 *
 * Threads: a job queued while fewer threads are free (not running a job)
 * than jobs are queued starts a thread, up to max_threads; a thread counts
 * as free from the moment its fn returns, so a caller that calls again at
 * once finds it rather than starting another. A thread with no work for
 * keepalive (10 s, Tokio's keep-alive) exits, so an idle program holds no
 * extra threads. Threads are joinable: each one that exits joins the one
 * that exited before it and leaves itself in `last` for the next one (or
 * for weft__blocking_fini) to join, so at most one exited thread is
 * unjoined.
 *
 * Shutdown (weft__blocking_fini, after every task has finished): no caller
 * is left, so the queue and `room` are empty; only abandoned jobs may still
 * run. It sets `stopping`, wakes idle threads (they exit), waits until the
 * last thread is gone, joins it and frees the pool.
 */
#include "io/io.h"
#include "sched/clock.h"
#include "util/fault.h"
#include "wait/wait.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

const weft__wait_kind weft__wk_blocking = {WEFT_WAIT_BLOCKING, "blocking call"};

#define DEFAULT_THREADS 64
#define DEFAULT_QUEUE 1024

/* How long an idle pool thread waits for work before it exits. Internal:
 * tests shorten it (set it before weft_run). */
int64_t weft__blocking_keepalive_ns = 10 * WEFT_SEC;

/* Park results handed by the pool (positive: never a weft error). */
enum { W_GRANTED = 1, W_DONE = 2 };

enum {
    J_ROOM = 0, /* in pool->room (or popped by a claim that failed) */
    J_QUEUED,   /* in pool->queue, waiting for a thread */
    J_RUNNING,  /* fn runs on a pool thread */
    J_DONE,     /* fn returned; result holds its status */
};

/* One weft_blocking call. Every field is guarded by
 * weft__io_rt(rt)->blocking_mu. */
typedef struct job {
    weft__waiter w; /* first: in room or queue; the caller and its token */
    weft_fn fn;
    void *arg;
    int result;     /* fn's status, once DONE */
    int state;      /* J_* */
    bool abandoned; /* the caller left while RUNNING: the thread frees it */
} job;

typedef struct weft__blocking {
    weft_runtime *rt;
    int max_threads, max_queue;
    int64_t keepalive_ns;
    weft__waitq queue;   /* jobs waiting for a thread, oldest first */
    int nqueued;         /* jobs in queue, at most max_queue */
    weft__waitq room;    /* callers waiting for a queue slot, FIFO */
    int threads;         /* pool threads alive */
    int idle;            /* threads waiting on `work` */
    int running;         /* jobs whose fn runs now, abandoned ones too */
    uint64_t calls;      /* jobs whose fn has returned */
    bool stopping;       /* fini: idle threads exit */
    pthread_cond_t work; /* idle threads wait here for a job */
    pthread_cond_t gone; /* fini waits here for threads == 0 */
    pthread_t last;      /* the thread that exited last, not joined yet */
    bool has_last;
} pool;

/* ---- the pool ---- */

static struct timespec mono_after(int64_t ns)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    int64_t t = (int64_t)ts.tv_sec * WEFT_SEC + ts.tv_nsec + ns;
    ts.tv_sec = (time_t)(t / WEFT_SEC);
    ts.tv_nsec = (long)(t % WEFT_SEC);
    return ts;
}

static pool *pool_new(weft_runtime *rt)
{
    pool *p = weft__calloc(1, sizeof(*p));
    if (!p)
        return NULL;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&p->work, &ca);
    pthread_condattr_destroy(&ca);
    pthread_cond_init(&p->gone, NULL);
    p->rt = rt;
    p->max_threads = weft__io_rt(rt)->blocking_threads
                         ? weft__io_rt(rt)->blocking_threads
                         : DEFAULT_THREADS;
    p->max_queue = weft__io_rt(rt)->blocking_queue
                       ? weft__io_rt(rt)->blocking_queue
                       : DEFAULT_QUEUE;
    p->keepalive_ns = weft__blocking_keepalive_ns;
    return p;
}

/* Locks weft__io_rt(rt)->blocking_mu and returns the pool, made if need be; or
 * NULL (out of memory), unlocked. */
static pool *pool_lock(weft_runtime *rt)
{
    pthread_mutex_lock(&weft__io_rt(rt)->blocking_mu);
    if (!weft__io_rt(rt)->blocking &&
        !(weft__io_rt(rt)->blocking = pool_new(rt))) {
        pthread_mutex_unlock(&weft__io_rt(rt)->blocking_mu);
        return NULL;
    }
    return weft__io_rt(rt)->blocking;
}

static void *pool_thread(void *arg);

/* Under the lock: starts threads while queued jobs outnumber the threads
 * not running one (idle, starting, or back from a job: each of those looks
 * at the queue before it waits). */
static void dispatch(pool *p)
{
    while (p->threads - p->running < p->nqueued &&
           p->threads < p->max_threads) {
        pthread_t th;
        pthread_attr_t attr, *ap = NULL;
        if (weft__rtpub(p->rt)->pinned && pthread_attr_init(&attr) == 0) {
            /* Not the pinned CPU of the worker that starts it. */
            pthread_attr_setaffinity_np(&attr, sizeof weft__rtpub(p->rt)->cpus,
                                        &weft__rtpub(p->rt)->cpus);
            ap = &attr;
        }
        p->threads++;
        int rc = weft__fault_fails(WEFT_FAULT_THREAD)
                     ? errno
                     : pthread_create(&th, ap, pool_thread, p);
        if (ap)
            pthread_attr_destroy(ap);
        if (rc != 0) {
            p->threads--; /* the threads we have will get to it */
            break;
        }
    }
    if (p->idle > 0)
        pthread_cond_signal(&p->work);
}

/* Under the lock: queues j for a thread. */
static void enqueue(pool *p, job *j)
{
    j->state = J_QUEUED;
    weft__waitq_push(&p->queue, &j->w);
    p->nqueued++;
    dispatch(p);
}

/* Under the lock, after a queue slot was freed: gives it to the first
 * caller waiting for room. Returns that caller's task, claimed, to wake
 * with W_GRANTED after unlocking; or NULL. */
static weft_task *grant_room(pool *p)
{
    if (p->nqueued >= p->max_queue)
        return NULL;
    weft__waiter *w = weft__waitq_claim(&p->room);
    if (!w)
        return NULL;
    enqueue(p, (job *)w);
    return w->task;
}

static void wake_granted(weft_task *t)
{
    if (t)
        weft__wake_finish(t, W_GRANTED);
}

/* ---- pool threads ---- */

/* Under the lock: the oldest queued job, marked RUNNING; waits for one up
 * to keepalive. NULL: exit (idle too long, or stopping). */
static job *next_job(pool *p)
{
    struct timespec until = mono_after(p->keepalive_ns);
    while (!p->queue.head) {
        if (p->stopping)
            return NULL;
        p->idle++;
        int rc = pthread_cond_timedwait(
            &p->work, &weft__io_rt(p->rt)->blocking_mu, &until);
        p->idle--;
        if (rc == ETIMEDOUT && !p->queue.head)
            return NULL;
    }
    job *j = (job *)p->queue.head;
    weft__waitq_remove(&p->queue, &j->w);
    p->nqueued--;
    j->state = J_RUNNING;
    p->running++;
    return j;
}

/* Called with the lock held, j RUNNING; returns with the lock held. */
static void run_job(pool *p, job *j)
{
    pthread_mutex_t *mu = &weft__io_rt(p->rt)->blocking_mu;
    weft_task *granted = grant_room(p);
    pthread_mutex_unlock(mu);
    wake_granted(granted);

    int result = j->fn(j->arg);

    pthread_mutex_lock(mu);
    p->running--;
    p->calls++;
    j->state = J_DONE;
    j->result = result;
    weft_task *caller = NULL;
    bool abandoned = j->abandoned;
    if (!abandoned && weft__waiter_claim(&j->w))
        caller = j->w.task;
    /* Else the caller is awake: it sees DONE under the lock and frees j. */
    pthread_mutex_unlock(mu);
    if (caller)
        weft__wake_finish(caller, W_DONE); /* j is the caller's now */
    if (abandoned)
        free(j);
    pthread_mutex_lock(mu);
}

/* Called with the lock held: leaves the pool, unlocks, and joins the
 * thread that exited before this one. */
static void thread_exit(pool *p)
{
    pthread_t prev = p->last;
    bool join_prev = p->has_last;
    p->last = pthread_self();
    p->has_last = true;
    if (--p->threads == 0)
        pthread_cond_broadcast(&p->gone);
    pthread_mutex_unlock(&weft__io_rt(p->rt)->blocking_mu);
    if (join_prev)
        pthread_join(prev, NULL);
}

static void *pool_thread(void *arg)
{
    pool *p = arg;
    pthread_setname_np(pthread_self(), "weft-blocking");
    pthread_mutex_lock(&weft__io_rt(p->rt)->blocking_mu);
    job *j;
    while ((j = next_job(p)) != NULL)
        run_job(p, j);
    thread_exit(p);
    return NULL;
}

void weft__blocking_fini(weft_runtime *rt)
{
    pool *p = weft__io_rt(rt)->blocking;
    if (!p)
        return;
    pthread_mutex_lock(&weft__io_rt(rt)->blocking_mu);
    if (p->queue.head || p->room.head)
        weft__fatal("weft: blocking calls left queued at the end of weft_run");
    p->stopping = true;
    pthread_cond_broadcast(&p->work);
    while (p->threads > 0)
        pthread_cond_wait(&p->gone, &weft__io_rt(rt)->blocking_mu);
    pthread_mutex_unlock(&weft__io_rt(rt)->blocking_mu);
    if (p->has_last)
        pthread_join(p->last, NULL);
    pthread_cond_destroy(&p->work);
    pthread_cond_destroy(&p->gone);
    free(p);
    weft__io_rt(rt)->blocking = NULL;
}

/* ---- callers ---- */

/* Under the lock: the caller's deadline or a cancel (rc) ended its park,
 * which took j off its queue (room or queue), or fn finished between two
 * parks. Drops or abandons j (see the essay, step 5) and unlocks. Returns
 * rc, or fn's status if fn finished first. */
static int leave(pool *p, job *j, int rc, bool *abandoned)
{
    weft_task *granted = NULL;
    bool drop = true;
    switch (j->state) {
    case J_ROOM:
        break;
    case J_QUEUED:
        p->nqueued--;
        granted = grant_room(p);
        break;
    case J_RUNNING:
        j->abandoned = true;
        *abandoned = true;
        drop = false;
        break;
    default: /* J_DONE */
        rc = j->result;
        break;
    }
    pthread_mutex_unlock(&weft__io_rt(p->rt)->blocking_mu);
    wake_granted(granted);
    if (drop)
        free(j);
    return rc;
}

/* Called with the lock held, j in room or queue. Parks until fn's status
 * is known or the caller leaves; returns the call's result, unlocked.
 * keep: a caller whose deadline or cancel comes while fn runs does not
 * leave but waits (firm) for fn's status, which it returns. */
static int wait_job(pool *p, job *j, int64_t deadline, bool keep,
                    bool *abandoned)
{
    pthread_mutex_t *mu = &weft__io_rt(p->rt)->blocking_mu;
    int flags = WEFT__WAIT_QUEUED;
    for (;;) {
        /* Under the lock, after everything that can fail. The queue j is
         * on, or none (RUNNING: a thread popped it; a claim that failed
         * popped it from room). */
        int rc = weft__wait_pmutex(
            &j->w,
            &(weft__wait_spec){.kind = &weft__wk_blocking,
                               .obj = j,
                               .q = j->state == J_ROOM ? &p->room : &p->queue,
                               .deadline = deadline,
                               .flags = flags},
            mu);
        if (rc == W_DONE) {
            int result = j->result; /* the thread is done with j */
            free(j);
            return result;
        }
        if (rc == W_GRANTED) {
            pthread_mutex_lock(mu);
            if (j->state != J_DONE)
                continue; /* queued now: park again */
        } else if (keep && j->state == J_RUNNING) {
            deadline = WEFT_NEVER; /* under the lock: wait for its end */
            flags |= WEFT__WAIT_FIRM;
            continue;
        }
        return leave(p, j, rc, abandoned);
    }
}

/* Under the lock: queues j, or lines it up for room. Returns false if no
 * thread could run it (none alive and none could be started). */
static bool submit(pool *p, job *j)
{
    if (p->room.head || p->nqueued >= p->max_queue) {
        j->state = J_ROOM;
        weft__waitq_push(&p->room, &j->w);
        return true;
    }
    enqueue(p, j);
    if (p->threads > 0)
        return true;
    weft__waitq_remove(&p->queue, &j->w);
    p->nqueued--;
    return false;
}

static int call(weft_fn fn, void *arg, int64_t deadline, bool keep,
                bool *abandoned)
{
    *abandoned = false;
    if (!fn)
        return -EINVAL;
    int rc = weft__checkpoint();
    if (rc)
        return rc;
    weft_worker *wk = weft__tl_worker;
    /* Past by the wheel, or by the clock (the wheel may lag it): fn must
     * not run, as weft.h says, so the clock is read. */
    if (WEFT_UNLIKELY(deadline != WEFT_NEVER) &&
        (weft__wait_past(deadline) ||
         deadline <= weft__now(weft__wpub(wk)->rt)))
        return -ETIMEDOUT;
    /* Simulation: no thread and no real time; fn runs here, at the virtual
     * instant of the call, so the run stays a function of its seed. */
    if (weft__rtpub(weft__wpub(wk)->rt)->sim)
        return fn(arg);
    job *j = weft__calloc(1, sizeof(*j));
    if (!j)
        return -ENOMEM;
    j->fn = fn;
    j->arg = arg;
    pool *p = pool_lock(weft__wpub(wk)->rt);
    if (!p) {
        free(j);
        return -ENOMEM;
    }
    if (!submit(p, j)) {
        pthread_mutex_unlock(&weft__io_rt(weft__wpub(wk)->rt)->blocking_mu);
        free(j);
        return -EAGAIN;
    }
    /* Counted while parked, so that the virtual clock gives fn time to
     * finish before it jumps (the pending hook; clock.c's autojump). */
    weft__pending_park(wk, WEFT__PENDING_POOL, 1);
    rc = wait_job(p, j, deadline, keep, abandoned);
    weft__pending_park(wk, WEFT__PENDING_POOL, -1);
    return rc;
}

int weft__blocking_call(weft_fn fn, void *arg, int64_t deadline,
                        bool *abandoned)
{
    return call(fn, arg, deadline, false, abandoned);
}

int weft__blocking_finish(weft_fn fn, void *arg, int64_t deadline)
{
    bool abandoned;
    return call(fn, arg, deadline, true, &abandoned);
}

int weft_blocking(weft_fn fn, void *arg)
{
    bool abandoned;
    return weft__blocking_call(fn, arg, WEFT_NEVER, &abandoned);
}

int weft_blocking_until(weft_fn fn, void *arg, weft_time deadline)
{
    bool abandoned;
    return weft__blocking_call(fn, arg, deadline, &abandoned);
}

void weft__blocking_info(weft_runtime *rt, weft_blocking_info *out)
{
    memset(out, 0, sizeof(*out));
    pthread_mutex_lock(&weft__io_rt(rt)->blocking_mu);
    pool *p = weft__io_rt(rt)->blocking;
    if (p) {
        out->threads = p->threads;
        out->running = p->running;
        out->queued = p->nqueued;
        out->calls = p->calls;
        for (weft__waiter *w = p->room.head; w; w = w->next)
            out->waiting++;
    }
    pthread_mutex_unlock(&weft__io_rt(rt)->blocking_mu);
}

int weft_blocking_stats_get(weft_blocking_info *out)
{
    if (!out)
        return -EINVAL;
    weft_worker *wk = weft__tl_worker;
    if (!wk)
        return -EPERM;
    weft__blocking_info(weft__wpub(wk)->rt, out);
    return 0;
}
