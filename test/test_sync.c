/* SPDX-License-Identifier: MIT */
/*
 * Task-aware synchronisation: mutex, semaphore, event and wait group.
 * Exclusion and conservation are checked with exact counts across workers;
 * order (arrival order, FIFO permits) and times are checked exactly on the
 * virtual clock, under several scheduling seeds.
 */
#include "sync/cases.h" /* select's semaphore case: weft__sem_case_* */
#include "sync/sync.h"
#include "t.h"
#include "wait/many.h"
#include "wait/wake.h"
#include "weft.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>

#define NARR 5
static const int arrivals[NARR] = {3, 1, 5, 2, 4};

/* Randomised rounds of tasks cancelled after a random number of
 * operations (by whichever task does it) or by the round's deadline. */
struct rounds {
    weft_scope *round;
    long threshold;
    atomic_long ops;
    atomic_long cancelled, timedout, succeeded;
};

static void round_op(struct rounds *r, int rc)
{
    if (rc == -ECANCELED)
        atomic_fetch_add(&r->cancelled, 1);
    else if (rc == -ETIMEDOUT)
        atomic_fetch_add(&r->timedout, 1);
    else if (rc == 0)
        atomic_fetch_add(&r->succeeded, 1);
    if (atomic_fetch_add(&r->ops, 1) + 1 == r->threshold)
        ASSERT_EQ(weft_scope_cancel(r->round), 0);
}

static void run_rounds(struct rounds *r, int nrounds, uint64_t seed,
                       long max_ops, int64_t budget, int ntasks, weft_fn fn,
                       void *(*arg_of)(int i, uint64_t rng))
{
    uint64_t rng = seed;
    for (int round = 0; round < nrounds; round++) {
        r->threshold = 1 + (long)(rnd(&rng) % (uint64_t)max_ops);
        atomic_store(&r->ops, 0);
        weft_scope_opts o = {.policy = WEFT_COLLECT,
                             .deadline = weft_now() + budget};
        ASSERT_EQ(weft_scope_open(&r->round, &o), 0);
        for (int i = 0; i < ntasks; i++) {
            /* The round may end before every task is spawned. */
            int rc = weft_spawn(r->round, fn, arg_of(i, rnd(&rng)));
            ASSERT(rc >= 0 || rc == -ECANCELED);
        }
        int rc = weft_scope_join(r->round);
        ASSERT(rc == -ECANCELED || rc == -ETIMEDOUT);
        ASSERT_EQ(weft_scope_free(r->round), 0);
    }
}

/* =========================== mutex ===================================== */

/* ---- mutual exclusion across workers ---------------------------------- */

#define MX_TASKS 64

struct mx {
    weft_mutex m;
    long counter; /* plain: only touched under m */
    long per_task;
    atomic_int inside;
    atomic_long per_worker[4];
};

static int mx_task(void *arg)
{
    struct mx *x = arg;
    int id = weft_worker_id();
    ASSERT(id >= 0 && id < 4);
    atomic_fetch_add(&x->per_worker[id], 1);
    for (long i = 0; i < x->per_task; i++) {
        if (i % 3 == 2)
            ASSERT_EQ(weft_mutex_lock_until(&x->m, WEFT_NEVER), 0);
        else
            ASSERT_EQ(weft_mutex_lock(&x->m), 0);
        ASSERT_EQ(atomic_exchange(&x->inside, 1), 0);
        long c = x->counter;
        if (i % 16 == 0)
            ASSERT_EQ(weft_yield(), 0); /* hold it across a switch */
        x->counter = c + 1;
        atomic_store(&x->inside, 0);
        ASSERT_EQ(weft_mutex_unlock(&x->m), 0);
    }
    return 0;
}

static int mx_root(void *arg)
{
    struct mx *x = arg;
    weft_scope *s = scope_open();
    for (int i = 0; i < MX_TASKS; i++)
        spawn_on(i, mx_task, x);
    scope_end(s);
    ASSERT_EQ(x->counter, MX_TASKS * x->per_task);
    ASSERT_EQ(weft_mutex_try_lock(&x->m), 0); /* left free */
    ASSERT_EQ(weft_mutex_unlock(&x->m), 0);
    return 0;
}

static int workers_used(atomic_long *per_worker)
{
    int used = 0;
    for (int i = 0; i < 4; i++)
        used += atomic_load(&per_worker[i]) > 0;
    return used;
}

TEST(mutex_exclusion_across_workers)
{
    static struct mx x;
    x.per_task = T_SCALE(5000);
    ASSERT_EQ(t_run_mono(4, mx_root, &x), 0);
    ASSERT_EQ(workers_used(x.per_worker), 4); /* spawned on each */
    /* And with one worker, where every hold spans a yield. */
    memset(&x, 0, sizeof x);
    x.per_task = T_SCALE(5000);
    ASSERT_EQ(t_run_mono(1, mx_root, &x), 0);
}

/* ---- fairness: arrival order ------------------------------------------ */

struct fw {
    weft_mutex *m;
    int arrive;
    int order;
    weft_time at;
};

static int fair_next;

static int fair_waiter(void *arg)
{
    struct fw *w = arg;
    ASSERT_EQ(weft_sleep_for(w->arrive * WEFT_SEC), 0);
    ASSERT_EQ(weft_mutex_lock(w->m), 0);
    w->order = fair_next++; /* under the lock */
    w->at = weft_now();
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0);
    ASSERT_EQ(weft_mutex_unlock(w->m), 0);
    return 0;
}

static int fair_root(void *arg)
{
    (void)arg;
    weft_mutex m = WEFT_MUTEX_INIT;
    struct fw w[NARR];
    fair_next = 0;
    ASSERT_EQ(weft_mutex_lock(&m), 0);
    weft_scope *s = scope_open();
    for (int i = 0; i < NARR; i++) {
        w[i] = (struct fw){.m = &m, .arrive = arrivals[i], .order = -1};
        spawn(fair_waiter, &w[i]);
    }
    ASSERT_EQ(weft_sleep_for(10 * WEFT_SEC), 0);
    ASSERT_EQ(weft_mutex_unlock(&m), 0);
    /* Handed to the first waiter: no barging back in. */
    ASSERT_EQ(weft_mutex_try_lock(&m), -EBUSY);
    ASSERT_EQ(weft_mutex_lock(&m), 0); /* behind all five */
    ASSERT_EQ(weft_now(), 15 * WEFT_SEC);
    ASSERT_EQ(fair_next, NARR);
    ASSERT_EQ(weft_mutex_unlock(&m), 0);
    scope_end(s);
    for (int i = 0; i < NARR; i++) {
        ASSERT_EQ(w[i].order, w[i].arrive - 1);
        ASSERT_EQ(w[i].at, (10 + w[i].arrive - 1) * WEFT_SEC);
    }
    return 0;
}

TEST(mutex_fair_arrival_order)
{
    for (uint64_t seed = 1; seed <= 6; seed++)
        ASSERT_EQ(t_run(1, WEFT_CLOCK_VIRTUAL, T_SEED(seed), fair_root, NULL),
                  0);
    ASSERT_EQ(t_run_virtual(2, fair_root, NULL), 0);
}

/* ---- misuse: EPERM, EDEADLK, EBUSY, EINVAL ---------------------------- */

static int foreign_unlock(void *arg)
{
    weft_mutex *m = arg;
    weft_time t0 = weft_now();
    ASSERT_EQ(weft_mutex_unlock(m), -EPERM);   /* held by the root */
    ASSERT_EQ(weft_mutex_try_lock(m), -EBUSY); /* still held */
    ASSERT_EQ(weft_mutex_lock_until(m, t0 + WEFT_SEC), -ETIMEDOUT);
    ASSERT_EQ(weft_now(), t0 + WEFT_SEC);
    ASSERT_EQ(weft_mutex_unlock(m), -EPERM);
    return 0;
}

static int misuse_root(void *arg)
{
    (void)arg;
    weft_mutex m = WEFT_MUTEX_INIT;
    ASSERT_EQ(weft_mutex_unlock(&m), -EPERM); /* not held */
    ASSERT_EQ(weft_mutex_try_lock(&m), 0);
    ASSERT_EQ(weft_mutex_try_lock(&m), -EBUSY);
    weft_time t0 = weft_now();
    ASSERT_EQ(weft_mutex_lock(&m), -EDEADLK);
    ASSERT_EQ(weft_mutex_lock_until(&m, t0 + WEFT_SEC), -EDEADLK);
    ASSERT_EQ(weft_now(), t0);
    weft_scope *s = scope_open();
    spawn(foreign_unlock, &m);
    scope_end(s);
    ASSERT_EQ(weft_mutex_unlock(&m), 0); /* still ours */
    ASSERT_EQ(weft_mutex_unlock(&m), -EPERM);
    /* A zeroed mutex is ready too. */
    weft_mutex z;
    memset(&z, 0, sizeof z);
    ASSERT_EQ(weft_mutex_lock(&z), 0);
    ASSERT_EQ(weft_mutex_unlock(&z), 0);
    ASSERT_EQ(weft_mutex_lock(NULL), -EINVAL);
    ASSERT_EQ(weft_mutex_lock_until(NULL, WEFT_NEVER), -EINVAL);
    return 0;
}

TEST(mutex_misuse_errors)
{
    ASSERT_EQ(t_run_virtual(1, misuse_root, NULL), 0);
}

/* ---- barging, and the starvation bound ------------------------------- */

/* A hog holds the mutex for 100 us at a time and locks it again at once
 * after each unlock. Waiters are woken to compete and lose (the hog runs
 * on, and relocks before they run): that is the barging that keeps a lock
 * on one worker. But once the first waiter has waited 1 ms, unlock hands
 * the lock to it directly. On the virtual clock every time is exact. */
#define HOG_HOLD (100 * WEFT_USEC)

struct hog {
    weft_mutex m;
    atomic_int stop;
    int holds;        /* the hog's lock acquisitions */
    weft_time got[3]; /* when each waiter got the lock */
    int holds_at[3];  /* the hog's holds by then */
    int rc[3];
    weft_time dl[3]; /* waiters' deadlines (0: none) */
    weft_time late;  /* how long the root's lock took */
};

static int hog_task(void *arg)
{
    struct hog *h = arg;
    ASSERT_EQ(weft_mutex_lock(&h->m), 0);
    h->holds++;
    while (!atomic_load(&h->stop)) {
        ASSERT_EQ(weft_sleep_for(HOG_HOLD), 0);
        ASSERT_EQ(weft_mutex_unlock(&h->m), 0);
        ASSERT_EQ(weft_mutex_lock(&h->m), 0);
        h->holds++;
    }
    ASSERT_EQ(weft_mutex_unlock(&h->m), 0);
    return 0;
}

static struct hog *hog_of;

static int hog_waiter(void *arg)
{
    int i = (int)(intptr_t)arg;
    struct hog *h = hog_of;
    ASSERT_EQ(weft_sleep_for(i * WEFT_USEC), 0); /* arrive in order 1, 2 */
    h->rc[i] = h->dl[i] ? weft_mutex_lock_until(&h->m, h->dl[i])
                        : weft_mutex_lock(&h->m);
    h->got[i] = weft_now();
    if (h->rc[i] == 0) {
        h->holds_at[i] = h->holds; /* under the lock */
        atomic_store(&h->stop, 1);
        ASSERT_EQ(weft_mutex_unlock(&h->m), 0);
    }
    return 0;
}

static int hog_root(void *arg)
{
    struct hog *h = arg;
    hog_of = h;
    weft_scope *s = scope_open();
    spawn(hog_task, h);
    ASSERT_EQ(weft_sleep_for(0), 0);
    weft_scope *w = scope_open();
    spawn(hog_waiter, (void *)(intptr_t)1);
    spawn(hog_waiter, (void *)(intptr_t)2);
    scope_end(w);
    /* A late locker is served within the bound too, so no waiter that
     * left kept the wake-up that unlock owes the queue. */
    weft_time t0 = weft_now();
    ASSERT_EQ(weft_mutex_lock(&h->m), 0);
    h->late = weft_now() - t0;
    atomic_store(&h->stop, 1);
    ASSERT_EQ(weft_mutex_unlock(&h->m), 0);
    scope_end(s);
    return 0;
}

TEST(mutex_barging_bounded_by_starvation_handoff)
{
    /* No deadlines: the hog barges for 1 ms, then hands over. */
    static struct hog h;
    memset(&h, 0, sizeof h);
    ASSERT_EQ(t_run_virtual(1, hog_root, &h), 0);
    ASSERT_EQ(h.rc[1], 0);
    /* Waiter 1 queued at 1 us; unlocks come every 100 us; the first one at
     * or after 1.001 ms is the one at 1.1 ms. */
    ASSERT_EQ(h.got[1], 1100 * WEFT_USEC);
    ASSERT_EQ(h.holds_at[1], 11); /* the hog barged in 10 times */
    /* Waiter 2 was behind it: served next, by hand-off too. */
    ASSERT_EQ(h.rc[2], 0);
    ASSERT(h.got[2] >= h.got[1]);

    /* The first waiter gives up at 450 us (between two unlocks), the
     * second at 500 us (at an unlock); then the root queues, and is handed
     * the lock 1 ms later, at the unlock at 1.5 ms. */
    for (uint64_t seed = 0; seed <= 4; seed++) {
        memset(&h, 0, sizeof h);
        h.dl[1] = 450 * WEFT_USEC;
        h.dl[2] = 500 * WEFT_USEC;
        if (seed == 0)
            ASSERT_EQ(t_run_virtual(1, hog_root, &h), 0);
        else
            ASSERT_EQ(t_run(1, WEFT_CLOCK_VIRTUAL, T_SEED(seed), hog_root, &h),
                      0);
        ASSERT_EQ(h.rc[1], -ETIMEDOUT);
        ASSERT_EQ(h.got[1], 450 * WEFT_USEC);
        ASSERT_EQ(h.rc[2], -ETIMEDOUT);
        ASSERT_EQ(h.got[2], 500 * WEFT_USEC);
        ASSERT_EQ(h.late, 1000 * WEFT_USEC);
    }

    /* Two workers: a waiter woken from the other worker may win the race
     * for the lock (on real threads), or lose it and then look again every
     * 10 us, keeping the wake-up. Either way it gets the lock at one of the
     * hog's unlocks and by the 1 ms bound, or leaves exactly at its
     * deadline. */
    for (int round = 0; round < 4; round++) {
        memset(&h, 0, sizeof h);
        ASSERT_EQ(t_run_virtual(2, hog_root, &h), 0);
        ASSERT_EQ(h.rc[1], 0);
        ASSERT_EQ(h.got[1] % HOG_HOLD, 0);
        ASSERT(h.got[1] >= HOG_HOLD && h.got[1] <= 1100 * WEFT_USEC);
        ASSERT_EQ(h.holds_at[1], h.got[1] / HOG_HOLD);
        ASSERT_EQ(h.rc[2], 0);
        ASSERT(h.got[2] <= h.got[1] + 1100 * WEFT_USEC);
        ASSERT(h.late <= 1100 * WEFT_USEC);
        memset(&h, 0, sizeof h);
        h.dl[1] = 450 * WEFT_USEC;
        h.dl[2] = 500 * WEFT_USEC;
        ASSERT_EQ(t_run_virtual(2, hog_root, &h), 0);
        for (int i = 1; i <= 2; i++) {
            if (h.rc[i] == 0) {
                ASSERT_EQ(h.got[i] % HOG_HOLD, 0);
                ASSERT(h.got[i] <= h.dl[i]);
            } else {
                ASSERT_EQ(h.rc[i], -ETIMEDOUT);
                ASSERT_EQ(h.got[i], h.dl[i]);
            }
        }
        ASSERT(h.late <= 1100 * WEFT_USEC);
    }
}

/* ---- destroy ----------------------------------------------------------- */

static int destroy_waiter(void *arg)
{
    weft_mutex *m = arg;
    ASSERT_EQ(weft_mutex_lock(m), 0);
    ASSERT_EQ(weft_mutex_unlock(m), 0);
    return 0;
}

static int destroy_root(void *arg)
{
    (void)arg;
    weft_mutex m = WEFT_MUTEX_INIT;
    ASSERT_EQ(weft_mutex_lock(&m), 0);
    ASSERT_EQ(weft_mutex_destroy(&m), -EBUSY); /* held */
    weft_scope *s = scope_open();
    spawn(destroy_waiter, &m);
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0);
    ASSERT_EQ(weft_mutex_unlock(&m), 0);
    ASSERT_EQ(weft_mutex_destroy(&m), -EBUSY); /* handed to the waiter */
    scope_end(s);
    ASSERT_EQ(weft_mutex_destroy(&m), 0);
    ASSERT_EQ(weft_mutex_lock(&m), -EINVAL);
    ASSERT_EQ(weft_mutex_lock_until(&m, weft_now() + 1), -EINVAL);
    ASSERT_EQ(weft_mutex_try_lock(&m), -EINVAL);
    ASSERT_EQ(weft_mutex_unlock(&m), -EPERM);
    ASSERT_EQ(weft_mutex_destroy(&m), -EINVAL);
    ASSERT_EQ(weft_mutex_destroy(NULL), -EINVAL);
    weft_mutex fresh = WEFT_MUTEX_INIT;
    m = fresh; /* initialised again: usable */
    ASSERT_EQ(weft_mutex_lock(&m), 0);
    ASSERT_EQ(weft_mutex_unlock(&m), 0);
    return 0;
}

TEST(mutex_destroy_held_or_waited_is_ebusy)
{
    ASSERT_EQ(t_run_virtual(1, destroy_root, NULL), 0);
}

/* ---- lock_until times out exactly; cancel while waiting --------------- */

struct lw {
    weft_mutex *m;
    int arrive;
    weft_time deadline;
    int rc;
    weft_time at;
};

static int lw_task(void *arg)
{
    struct lw *w = arg;
    ASSERT_EQ(weft_sleep_for(w->arrive * WEFT_SEC), 0);
    w->rc = w->deadline ? weft_mutex_lock_until(w->m, w->deadline)
                        : weft_mutex_lock(w->m);
    w->at = weft_now();
    if (w->rc == 0) {
        int r =
            weft_sleep_for(WEFT_SEC); /* hold it for 1 s, or till cancelled */
        ASSERT(r == 0 || r == -ECANCELED);
        ASSERT_EQ(weft_mutex_unlock(w->m), 0);
    } else {
        ASSERT_EQ(weft_mutex_unlock(w->m), -EPERM); /* not taken */
    }
    return 0;
}

static int lock_timeout_root(void *arg)
{
    (void)arg;
    weft_mutex m = WEFT_MUTEX_INIT;
    ASSERT_EQ(weft_mutex_lock(&m), 0);
    struct lw w1 = {&m, 1, 3 * WEFT_SEC, 99, 0};
    struct lw w2 = {&m, 2, 100 * WEFT_SEC, 99, 0};
    weft_scope *s = scope_open();
    spawn(lw_task, &w1);
    spawn(lw_task, &w2);
    ASSERT_EQ(weft_sleep_for(10 * WEFT_SEC), 0);
    ASSERT_EQ(weft_mutex_unlock(&m), 0);
    scope_end(s);
    ASSERT_EQ(w1.rc, -ETIMEDOUT);
    ASSERT_EQ(w1.at, 3 * WEFT_SEC);
    ASSERT_EQ(w2.rc, 0); /* the timed-out waiter did not keep its place */
    ASSERT_EQ(w2.at, 10 * WEFT_SEC);
    ASSERT_EQ(weft_now(), 11 * WEFT_SEC);
    ASSERT_EQ(weft_mutex_try_lock(&m), 0);
    /* A deadline already passed on a held mutex: at once. */
    struct lw w3 = {&m, 0, 5 * WEFT_SEC, 99, 0};
    s = scope_open();
    spawn(lw_task, &w3);
    scope_end(s);
    ASSERT_EQ(w3.rc, -ETIMEDOUT);
    ASSERT_EQ(w3.at, 11 * WEFT_SEC);
    ASSERT_EQ(weft_mutex_unlock(&m), 0);
    ASSERT_EQ(weft_mutex_destroy(&m), 0); /* no waiter mark left behind */
    return 0;
}

TEST(mutex_lock_until_times_out_exactly)
{
    ASSERT_EQ(t_run_virtual(1, lock_timeout_root, NULL), 0);
    ASSERT_EQ(t_run_virtual(2, lock_timeout_root, NULL), 0);
}

static int lock_cancel_root(void *arg)
{
    (void)arg;
    weft_mutex m = WEFT_MUTEX_INIT;
    ASSERT_EQ(weft_mutex_lock(&m), 0);
    struct lw w1 = {&m, 1, 0, 99, 0};
    struct lw w2 = {&m, 2, 100 * WEFT_SEC, 99, 0};
    weft_scope *outer = scope_open();
    spawn(lw_task, &w2);
    weft_scope *inner = scope_open();
    spawn(lw_task, &w1);
    ASSERT_EQ(weft_sleep_for(3 * WEFT_SEC), 0);
    scope_cancel_end(inner);
    ASSERT_EQ(w1.rc, -ECANCELED);
    ASSERT_EQ(w1.at, 3 * WEFT_SEC);
    ASSERT_EQ(weft_sleep_for(7 * WEFT_SEC), 0);
    ASSERT_EQ(weft_mutex_unlock(&m), 0);
    scope_end(outer);
    ASSERT_EQ(w2.rc, 0); /* the next waiter still gets it */
    ASSERT_EQ(w2.at, 10 * WEFT_SEC);
    ASSERT_EQ(weft_mutex_try_lock(&m), 0);
    ASSERT_EQ(weft_mutex_unlock(&m), 0);

    /* The first waiter cancelled while two wait: the second, then the
     * third, in order. */
    ASSERT_EQ(weft_mutex_lock(&m), 0);
    weft_time t0 = weft_now();
    struct lw a = {&m, 1, 0, 99, 0}, b = {&m, 2, 0, 99, 0},
              c = {&m, 3, 0, 99, 0};
    outer = scope_open();
    spawn(lw_task, &b);
    spawn(lw_task, &c);
    inner = scope_open();
    spawn(lw_task, &a);
    ASSERT_EQ(weft_sleep_for(5 * WEFT_SEC), 0);
    ASSERT_EQ(weft_mutex_unlock(&m), 0); /* handed to a, ... */
    scope_cancel_end(inner);             /* ... which is cancelled */
    scope_end(outer);
    /* a either kept the lock it was handed (and let go when its hold was
     * cancelled) or gave it up; either way at once, and b then c follow. */
    ASSERT(a.rc == 0 || a.rc == -ECANCELED);
    ASSERT_EQ(a.at, t0 + 5 * WEFT_SEC);
    ASSERT_EQ(b.rc, 0);
    ASSERT_EQ(b.at, t0 + 5 * WEFT_SEC);
    ASSERT_EQ(c.rc, 0);
    ASSERT_EQ(c.at, t0 + 6 * WEFT_SEC);
    ASSERT_EQ(weft_mutex_try_lock(&m), 0);
    ASSERT_EQ(weft_mutex_unlock(&m), 0);
    return 0;
}

TEST(mutex_cancel_while_waiting)
{
    ASSERT_EQ(t_run_virtual(1, lock_cancel_root, NULL), 0);
    ASSERT_EQ(t_run_virtual(2, lock_cancel_root, NULL), 0);
}

/* ---- cancel and timeout under contention ------------------------------ */

#define MCS_TASKS 16

struct mcs {
    struct rounds r;
    weft_mutex m;
    long counter; /* plain: only touched under m */
    atomic_int inside;
    int64_t max_wait;
    uint64_t rng[MCS_TASKS];
};

static struct mcs *mcs_cur;

static void *mcs_arg(int i, uint64_t rng)
{
    mcs_cur->rng[i] = rng;
    return &mcs_cur->rng[i];
}

static int mcs_task(void *arg)
{
    uint64_t *rng = arg;
    struct mcs *x = mcs_cur;
    for (;;) {
        uint64_t r = rnd(rng);
        int rc;
        if (r % 3 == 0)
            rc = weft_mutex_lock(&x->m);
        else
            rc = weft_mutex_lock_until(
                &x->m,
                weft_now() + (int64_t)((r >> 8) % (uint64_t)x->max_wait));
        if (rc == 0) {
            ASSERT_EQ(atomic_exchange(&x->inside, 1), 0);
            x->counter++;
            if (r & 0x10000)
                ASSERT_EQ(weft_yield(), 0);
            atomic_store(&x->inside, 0);
            ASSERT_EQ(weft_mutex_unlock(&x->m), 0);
        } else {
            if (rc != -ECANCELED && rc != -ETIMEDOUT)
                T_FAIL("lock returned %d", rc);
            ASSERT_EQ(weft_mutex_unlock(&x->m), -EPERM); /* not taken */
        }
        round_op(&x->r, rc);
        if (rc == -ECANCELED || weft_cancelled())
            return 0;
    }
}

static int mcs_root(void *arg)
{
    struct mcs *x = arg;
    int64_t budget = weft_workers() > 1 ? 20 * WEFT_MSEC : WEFT_SEC;
    run_rounds(&x->r, (int)T_SCALE(100), 42, 20000, budget, MCS_TASKS, mcs_task,
               mcs_arg);
    ASSERT_EQ(x->counter, atomic_load(&x->r.succeeded));
    ASSERT_EQ(weft_mutex_try_lock(&x->m), 0); /* nobody kept it */
    ASSERT_EQ(weft_mutex_unlock(&x->m), 0);
    return 0;
}

static void run_mcs(int workers, weft_clock_kind clock, uint64_t seed)
{
    static struct mcs x;
    memset(&x, 0, sizeof x);
    x.max_wait = 30 * WEFT_USEC;
    mcs_cur = &x;
    ASSERT_EQ(t_run(workers, clock, seed, mcs_root, &x), 0);
    ASSERT(atomic_load(&x.r.succeeded) > 0);
    ASSERT(atomic_load(&x.r.cancelled) > 0);
}

TEST(mutex_cancel_and_timeout_under_contention)
{
    run_mcs(1, WEFT_CLOCK_VIRTUAL, T_SEED(3));
    run_mcs(2, WEFT_CLOCK_MONOTONIC, 0);
    run_mcs(4, WEFT_CLOCK_MONOTONIC, 0);
}

/* ---- level-triggered cancellation ------------------------------------- */

/* In a cancelled scope every waiting call returns -ECANCELED, even one that
 * would not have to wait (as in Trio, whose checkpoints check first), and
 * takes nothing; the non-blocking calls still work. */
static int level_root(void *arg)
{
    (void)arg;
    weft_mutex m = WEFT_MUTEX_INIT;
    weft_sem s;
    ASSERT_EQ(weft_sem_init(&s, 3), 0);
    weft_event e = WEFT_EVENT_INIT;
    ASSERT_EQ(weft_event_set(&e), 0);
    weft_wg wg = WEFT_WG_INIT;
    weft_scope *sc = scope_open();
    ASSERT_EQ(weft_scope_cancel(sc), 0);
    weft_time t0 = weft_now();
    for (int i = 0; i < 3; i++) {
        ASSERT_EQ(weft_mutex_lock(&m), -ECANCELED);
        ASSERT_EQ(weft_mutex_lock_until(&m, t0 + WEFT_SEC), -ECANCELED);
        ASSERT_EQ(weft_mutex_unlock(&m), -EPERM); /* not taken */
        ASSERT_EQ(weft_sem_acquire(&s, 1), -ECANCELED);
        ASSERT_EQ(weft_sem_acquire_until(&s, 2, WEFT_NEVER), -ECANCELED);
        ASSERT_EQ(weft_sem_available(&s), 3);
        ASSERT_EQ(weft_event_wait(&e), -ECANCELED);
        ASSERT_EQ(weft_event_wait_until(&e, WEFT_NEVER), -ECANCELED);
        ASSERT_EQ(weft_wg_wait(&wg), -ECANCELED);
        ASSERT_EQ(weft_wg_wait_until(&wg, WEFT_NEVER), -ECANCELED);
    }
    ASSERT_EQ(weft_now(), t0);
    /* The non-blocking calls are not cancellation points. */
    ASSERT_EQ(weft_mutex_try_lock(&m), 0);
    ASSERT_EQ(weft_mutex_unlock(&m), 0);
    ASSERT_EQ(weft_sem_try_acquire(&s, 1), 0);
    ASSERT_EQ(weft_sem_release(&s, 1), 0);
    ASSERT_EQ(weft_scope_join(sc), -ECANCELED);
    ASSERT_EQ(weft_scope_free(sc), 0);
    /* Out of the cancelled scope, they work again. */
    ASSERT_EQ(weft_mutex_lock(&m), 0);
    ASSERT_EQ(weft_mutex_unlock(&m), 0);
    ASSERT_EQ(weft_sem_acquire(&s, 3), 0);
    ASSERT_EQ(weft_event_wait(&e), 0);
    ASSERT_EQ(weft_wg_wait(&wg), 0);
    return 0;
}

TEST(cancelled_scope_every_wait_returns_ecanceled)
{
    ASSERT_EQ(t_run_virtual(1, level_root, NULL), 0);
}

/* ---- outside a task ---------------------------------------------------- */

TEST(blocking_calls_outside_a_task_eperm)
{
    weft_mutex m = WEFT_MUTEX_INIT;
    ASSERT_EQ(weft_mutex_lock(&m), -EPERM);
    ASSERT_EQ(weft_mutex_lock_until(&m, WEFT_NEVER), -EPERM);
    ASSERT_EQ(weft_mutex_try_lock(&m), -EPERM);
    ASSERT_EQ(weft_mutex_unlock(&m), -EPERM);
    weft_sem s;
    ASSERT_EQ(weft_sem_init(&s, 5), 0);
    ASSERT_EQ(weft_sem_acquire(&s, 1), -EPERM);
    ASSERT_EQ(weft_sem_acquire_until(&s, 1, WEFT_NEVER), -EPERM);
    ASSERT_EQ(weft_sem_available(&s), 5);
    ASSERT_EQ(weft_sem_release(&s, 2), 0); /* any thread */
    ASSERT_EQ(weft_sem_available(&s), 7);
    weft_event e = WEFT_EVENT_INIT;
    ASSERT_EQ(weft_event_wait(&e), -EPERM);
    ASSERT_EQ(weft_event_wait_until(&e, WEFT_NEVER), -EPERM);
    ASSERT_EQ(weft_event_set(&e), 0); /* any thread */
    ASSERT(weft_event_is_set(&e));
    ASSERT_EQ(weft_event_wait(&e), -EPERM); /* even when it would not wait */
    ASSERT_EQ(weft_event_reset(&e), 0);
    ASSERT(!weft_event_is_set(&e));
    weft_wg wg = WEFT_WG_INIT;
    ASSERT_EQ(weft_wg_wait(&wg), -EPERM);
    ASSERT_EQ(weft_wg_wait_until(&wg, WEFT_NEVER), -EPERM);
    ASSERT_EQ(weft_wg_add(&wg, 2), 0); /* any thread */
    ASSERT_EQ(weft_wg_done(&wg), 0);
    ASSERT_EQ(weft_wg_done(&wg), 0);
    ASSERT_EQ(weft_wg_done(&wg), -EINVAL);
}

/* ========================= semaphore =================================== */

static int sem_basic_root(void *arg)
{
    (void)arg;
    weft_sem s;
    ASSERT_EQ(weft_sem_init(&s, -1), -EINVAL);
    ASSERT_EQ(weft_sem_init(NULL, 1), -EINVAL);
    ASSERT_EQ(weft_sem_init(&s, 3), 0);
    ASSERT_EQ(weft_sem_available(&s), 3);
    ASSERT_EQ(weft_sem_try_acquire(&s, 2), 0);
    ASSERT_EQ(weft_sem_available(&s), 1);
    ASSERT_EQ(weft_sem_try_acquire(&s, 2), -EAGAIN);
    ASSERT_EQ(weft_sem_available(&s), 1);
    ASSERT_EQ(weft_sem_release(&s, 2), 0);
    ASSERT_EQ(weft_sem_available(&s), 3);
    weft_time t0 = weft_now();
    ASSERT_EQ(weft_sem_acquire(&s, 3), 0); /* there: no waiting */
    ASSERT_EQ(weft_now(), t0);
    ASSERT_EQ(weft_sem_available(&s), 0);
    ASSERT_EQ(weft_sem_acquire_until(&s, 1, t0 + 2 * WEFT_SEC), -ETIMEDOUT);
    ASSERT_EQ(weft_now(), t0 + 2 * WEFT_SEC);
    ASSERT_EQ(weft_sem_available(&s), 0);
    ASSERT_EQ(weft_sem_release(&s, 3), 0);
    ASSERT_EQ(weft_sem_acquire(&s, 0), -EINVAL);
    ASSERT_EQ(weft_sem_acquire(&s, -2), -EINVAL);
    ASSERT_EQ(weft_sem_acquire_until(&s, 0, WEFT_NEVER), -EINVAL);
    ASSERT_EQ(weft_sem_release(&s, -1), -EINVAL);
    ASSERT_EQ(weft_sem_available(&s), 3);
    /* More than there will ever be, with a deadline: times out. */
    ASSERT_EQ(weft_sem_acquire_until(&s, 4, weft_now() + WEFT_SEC), -ETIMEDOUT);
    ASSERT_EQ(weft_sem_available(&s), 3);
    /* A zeroed semaphore has no permits. */
    weft_sem z;
    memset(&z, 0, sizeof z);
    ASSERT_EQ(weft_sem_available(&z), 0);
    ASSERT_EQ(weft_sem_try_acquire(&z, 1), -EAGAIN);
    ASSERT_EQ(weft_sem_release(&z, 2), 0);
    ASSERT_EQ(weft_sem_try_acquire(&z, 2), 0);
    ASSERT_EQ(weft_sem_available(&z), 0);
    return 0;
}

TEST(sem_basics)
{
    ASSERT_EQ(t_run_virtual(1, sem_basic_root, NULL), 0);
}

/* A release that would take the count past LONG_MAX is bad input: it
 * returns -EINVAL and changes nothing (it used to wrap the count negative,
 * after which no acquire could ever succeed). */
TEST(sem_release_overflow_is_einval)
{
    weft_sem s;
    ASSERT_EQ(weft_sem_init(&s, LONG_MAX), 0);
    ASSERT_EQ(weft_sem_release(&s, 1), -EINVAL);
    ASSERT_EQ(weft_sem_available(&s), LONG_MAX);
    ASSERT_EQ(weft_sem_try_acquire(&s, 2), 0);
    ASSERT_EQ(weft_sem_release(&s, LONG_MAX), -EINVAL);
    ASSERT_EQ(weft_sem_available(&s), LONG_MAX - 2);
    ASSERT_EQ(weft_sem_release(&s, 2), 0);
    ASSERT_EQ(weft_sem_available(&s), LONG_MAX);
}

struct sw {
    weft_sem *s;
    int arrive; /* seconds */
    long n;
    weft_time deadline; /* 0: none */
    int rc;
    weft_time at;
    int done;
};

static int sw_task(void *arg)
{
    struct sw *w = arg;
    ASSERT_EQ(weft_sleep_for(w->arrive * WEFT_SEC), 0);
    w->rc = w->deadline ? weft_sem_acquire_until(w->s, w->n, w->deadline)
                        : weft_sem_acquire(w->s, w->n);
    w->at = weft_now();
    w->done = 1;
    return 0;
}

static int sem_fifo_root(void *arg)
{
    (void)arg;
    weft_sem s;
    ASSERT_EQ(weft_sem_init(&s, 0), 0);
    struct sw a = {.s = &s, .arrive = 1, .n = 5};
    struct sw b = {.s = &s, .arrive = 2, .n = 1};
    weft_scope *sc = scope_open();
    spawn(sw_task, &a);
    spawn(sw_task, &b);
    ASSERT_EQ(weft_sleep_for(3 * WEFT_SEC), 0);
    ASSERT_EQ(weft_sem_release(&s, 3), 0);
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0);
    /* 3 there, the small request behind the large one waits. */
    ASSERT(!a.done && !b.done);
    ASSERT_EQ(weft_sem_available(&s), 3);
    ASSERT_EQ(weft_sem_try_acquire(&s, 1), -EAGAIN); /* others wait */
    ASSERT_EQ(weft_sem_release(&s, 2), 0);
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0);
    ASSERT(a.done && !b.done);
    ASSERT_EQ(a.rc, 0);
    ASSERT_EQ(a.at, 4 * WEFT_SEC);
    ASSERT_EQ(weft_sem_available(&s), 0);
    ASSERT_EQ(weft_sem_release(&s, 1), 0);
    scope_end(sc);
    ASSERT_EQ(b.rc, 0);
    ASSERT_EQ(b.at, 5 * WEFT_SEC);
    ASSERT_EQ(weft_sem_available(&s), 0);

    /* Release one at a time: waiters served in arrival order. */
    struct sw w[NARR];
    weft_time t0 = weft_now();
    sc = scope_open();
    for (int i = 0; i < NARR; i++) {
        w[i] = (struct sw){.s = &s, .arrive = arrivals[i], .n = 1};
        spawn(sw_task, &w[i]);
    }
    ASSERT_EQ(weft_sleep_for(10 * WEFT_SEC), 0);
    for (int k = 0; k < NARR; k++) {
        ASSERT_EQ(weft_sem_release(&s, 1), 0);
        ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0);
    }
    scope_end(sc);
    for (int i = 0; i < NARR; i++) {
        ASSERT_EQ(w[i].rc, 0);
        ASSERT_EQ(w[i].at, t0 + (10 + w[i].arrive - 1) * WEFT_SEC);
    }
    ASSERT_EQ(weft_sem_available(&s), 0);

    /* One release covering several waiters of mixed sizes wakes them all
     * at once, and only as many as it covers. */
    long sizes[4] = {2, 1, 3, 1};
    t0 = weft_now();
    sc = scope_open();
    for (int i = 0; i < 4; i++) {
        w[i] = (struct sw){.s = &s, .arrive = i + 1, .n = sizes[i]};
        spawn(sw_task, &w[i]);
    }
    ASSERT_EQ(weft_sleep_for(10 * WEFT_SEC), 0);
    ASSERT_EQ(weft_sem_release(&s, 6), 0); /* 2 + 1 + 3; the 4th waits */
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0);
    for (int i = 0; i < 3; i++) {
        ASSERT(w[i].done);
        ASSERT_EQ(w[i].at, t0 + 10 * WEFT_SEC);
    }
    ASSERT(!w[3].done);
    ASSERT_EQ(weft_sem_available(&s), 0);
    ASSERT_EQ(weft_sem_release(&s, 2), 0);
    scope_end(sc);
    ASSERT_EQ(w[3].at, t0 + 11 * WEFT_SEC);
    ASSERT_EQ(weft_sem_available(&s), 1);
    return 0;
}

TEST(sem_fifo_large_request_not_overtaken)
{
    for (uint64_t seed = 1; seed <= 4; seed++)
        ASSERT_EQ(
            t_run(1, WEFT_CLOCK_VIRTUAL, T_SEED(seed), sem_fifo_root, NULL), 0);
    ASSERT_EQ(t_run_virtual(2, sem_fifo_root, NULL), 0);
}

/* A large request at the head times out or is cancelled: it takes nothing,
 * and the small one behind it, which the permits already cover, is served
 * at that very moment. */
static int sem_leave_root(void *arg)
{
    (void)arg;
    weft_sem s;
    ASSERT_EQ(weft_sem_init(&s, 1), 0);
    struct sw a = {.s = &s, .arrive = 1, .n = 3, .deadline = 4 * WEFT_SEC};
    struct sw b = {.s = &s, .arrive = 2, .n = 1, .deadline = 100 * WEFT_SEC};
    weft_scope *sc = scope_open();
    spawn(sw_task, &a);
    spawn(sw_task, &b);
    ASSERT_EQ(weft_sleep_for(3 * WEFT_SEC), 0);
    ASSERT(!a.done && !b.done);
    scope_end(sc);
    ASSERT_EQ(a.rc, -ETIMEDOUT);
    ASSERT_EQ(a.at, 4 * WEFT_SEC);
    ASSERT_EQ(b.rc, 0);
    ASSERT_EQ(b.at, 4 * WEFT_SEC);
    ASSERT_EQ(weft_sem_available(&s), 0);
    ASSERT_EQ(weft_sem_release(&s, 1), 0);

    weft_time t0 = weft_now();
    a = (struct sw){.s = &s, .arrive = 1, .n = 3};
    b = (struct sw){.s = &s, .arrive = 2, .n = 1, .deadline = WEFT_NEVER};
    weft_scope *outer = scope_open();
    spawn(sw_task, &b);
    weft_scope *inner = scope_open();
    spawn(sw_task, &a);
    ASSERT_EQ(weft_sleep_for(5 * WEFT_SEC), 0);
    ASSERT(!a.done && !b.done);
    scope_cancel_end(inner);
    ASSERT_EQ(a.rc, -ECANCELED);
    ASSERT_EQ(a.at, t0 + 5 * WEFT_SEC);
    scope_end(outer);
    ASSERT_EQ(b.rc, 0);
    ASSERT_EQ(b.at, t0 + 5 * WEFT_SEC);
    ASSERT_EQ(weft_sem_available(&s), 0);
    ASSERT_EQ(weft_sem_release(&s, 1), 0);
    ASSERT_EQ(weft_sem_available(&s), 1); /* conserved */
    return 0;
}

TEST(sem_timeout_and_cancel_take_nothing)
{
    ASSERT_EQ(t_run_virtual(1, sem_leave_root, NULL), 0);
    ASSERT_EQ(t_run_virtual(2, sem_leave_root, NULL), 0);
}

/* ---- select's semaphore case, driven as weft_select will drive it ---- */

/* Under every case's lock, tries each case; if none can take effect, waits
 * on all of them (weft__wait_many) until one is granted or the deadline.
 * Returns the chosen index, with the waker's code in *code, or the wait's
 * error. */
static int sc_select(weft_case *c, int n, weft_time deadline, int *code)
{
    weft__arm arms[2];
    weft__lock *order[2];
    ASSERT(n <= 2);
    memset(arms, 0, sizeof(arms));
    for (int i = 0; i < n; i++) {
        ASSERT_EQ(weft__sem_case_check(&c[i]), 0);
        arms[i].lock = weft__sem_case_lock(&c[i]);
    }
    int k = weft__locks_order(arms, n, order);
    weft__locks_acquire(order, k);
    weft__chain woken;
    weft__chain_init(&woken);
    for (int i = 0; i < n; i++) {
        int rc = weft__sem_case_try(&c[i], &arms[i], &woken);
        if (rc == 0) {
            weft__locks_release(order, k);
            ASSERT(woken.head == NULL);
            *code = 0;
            return i;
        }
        ASSERT_EQ(rc, -EAGAIN);
        /* The arm waits on the semaphore's own queue, for one permit. */
        ASSERT((char *)arms[i].q >= (char *)c[i].sem &&
               (char *)arms[i].q < (char *)(c[i].sem + 1));
        ASSERT_EQ(arms[i].w.n, 1);
    }
    int idx =
        weft__wait_many(order, k, arms, n, WEFT__W_SELECT, c, deadline, code);
    if (idx >= 0)
        weft__sem_case_won(&c[idx], *code);
    return idx;
}

struct sc_rel {
    weft_sem *s[2]; /* released in this order, at the same instant */
    long n;
    weft_time at;
};

static int sc_rel_task(void *arg)
{
    struct sc_rel *r = arg;
    ASSERT_EQ(weft_sleep_until(r->at), 0);
    for (int i = 0; i < 2 && r->s[i]; i++)
        ASSERT_EQ(weft_sem_release(r->s[i], r->n), 0);
    return 0;
}

static int sem_case_root(void *arg)
{
    (void)arg;
    weft_sem s, s2;
    ASSERT_EQ(weft_sem_init(&s, 1), 0);
    ASSERT_EQ(weft_sem_init(&s2, 0), 0);
    weft_case off = {.op = WEFT_OP_SEM, .sem = NULL};
    ASSERT_EQ(weft__sem_case_check(&off), 1);
    weft_case c = {.op = WEFT_OP_SEM, .sem = &s, .rc = 99};
    ASSERT_EQ(weft__sem_case_check(&c), 0);

    /* A free permit, nobody waiting: taken at once, nothing to wait on. */
    weft__arm a;
    memset(&a, 0, sizeof(a));
    weft__chain woken;
    weft__chain_init(&woken);
    weft__lock *l = weft__sem_case_lock(&c);
    weft__lock_acquire(l);
    ASSERT_EQ(weft__sem_case_try(&c, &a, &woken), 0);
    weft__lock_release(l);
    ASSERT_EQ(c.rc, 0);
    ASSERT(a.q == NULL);
    ASSERT(woken.head == NULL);
    ASSERT_EQ(weft_sem_available(&s), 0);

    /* None left: -EAGAIN, the arm set to wait for one permit of s. */
    c.rc = 99;
    weft__lock_acquire(l);
    ASSERT_EQ(weft__sem_case_try(&c, &a, &woken), -EAGAIN);
    weft__lock_release(l);
    ASSERT((char *)a.q >= (char *)&s && (char *)a.q < (char *)(&s + 1));
    ASSERT_EQ(a.w.n, 1);
    ASSERT_EQ(c.rc, 99);

    /* Queued, then granted by a release from another task: one permit
     * is ours, the rest stay. */
    weft_time t0 = weft_now();
    struct sc_rel r = {.s = {&s, NULL}, .n = 3, .at = t0 + 2 * WEFT_SEC};
    weft_scope *sc = scope_open();
    spawn(sc_rel_task, &r);
    int code = 99;
    ASSERT_EQ(sc_select(&c, 1, t0 + 5 * WEFT_SEC, &code), 0);
    ASSERT_EQ(code, 0);
    ASSERT_EQ(c.rc, 0);
    ASSERT_EQ(weft_now(), t0 + 2 * WEFT_SEC);
    scope_end(sc);
    ASSERT_EQ(weft_sem_available(&s), 2);
    ASSERT_EQ(weft_sem_release(&s, 1), 0); /* give ours back */
    ASSERT_EQ(weft_sem_available(&s), 3);

    /* A timeout takes nothing and leaves no waiter behind. */
    ASSERT_EQ(weft_sem_try_acquire(&s, 3), 0);
    t0 = weft_now();
    c.rc = 99;
    ASSERT_EQ(sc_select(&c, 1, t0 + 3 * WEFT_SEC, &code), -ETIMEDOUT);
    ASSERT_EQ(weft_now(), t0 + 3 * WEFT_SEC);
    ASSERT_EQ(c.rc, 99);
    ASSERT_EQ(weft_sem_available(&s), 0);
    ASSERT_EQ(weft_sem_release(&s, 1), 0);
    ASSERT_EQ(weft_sem_available(&s), 1); /* nobody took it */
    ASSERT_EQ(weft_sem_try_acquire(&s, 1), 0);
    /* A deadline already past: at once. */
    ASSERT_EQ(sc_select(&c, 1, t0, &code), -ETIMEDOUT);
    ASSERT_EQ(weft_now(), t0 + 3 * WEFT_SEC);

    /* Two semaphores released at the same instant, s2 first: only the
     * chosen case takes a permit (s's grant finds the select claimed and
     * passes it by), even while its waiter is still on s's queue. */
    weft_case cs[2] = {{.op = WEFT_OP_SEM, .sem = &s, .rc = 99},
                       {.op = WEFT_OP_SEM, .sem = &s2, .rc = 99}};
    t0 = weft_now();
    r = (struct sc_rel){.s = {&s2, &s}, .n = 1, .at = t0 + WEFT_SEC};
    sc = scope_open();
    spawn(sc_rel_task, &r);
    ASSERT_EQ(sc_select(cs, 2, WEFT_NEVER, &code), 1);
    ASSERT_EQ(code, 0);
    ASSERT_EQ(cs[1].rc, 0);
    ASSERT_EQ(cs[0].rc, 99);
    ASSERT_EQ(weft_now(), t0 + WEFT_SEC);
    scope_end(sc);
    ASSERT_EQ(weft_sem_available(&s), 1);
    ASSERT_EQ(weft_sem_available(&s2), 0);

    /* In line with weft_sem_acquire: behind a waiting request of 2, the
     * free permit is not the select's; one release serves both, in
     * order. */
    t0 = weft_now();
    struct sw big = {.s = &s, .arrive = 1, .n = 2};
    r = (struct sc_rel){.s = {&s, NULL}, .n = 2, .at = t0 + 3 * WEFT_SEC};
    sc = scope_open();
    spawn(sw_task, &big);
    spawn(sc_rel_task, &r);
    ASSERT_EQ(weft_sleep_for(2 * WEFT_SEC), 0);
    ASSERT(!big.done);
    ASSERT_EQ(weft_sem_available(&s), 1);
    c.rc = 99;
    ASSERT_EQ(sc_select(&c, 1, WEFT_NEVER, &code), 0);
    ASSERT_EQ(c.rc, 0);
    ASSERT_EQ(weft_now(), t0 + 3 * WEFT_SEC);
    scope_end(sc);
    ASSERT_EQ(big.rc, 0);
    ASSERT_EQ(big.at, t0 + 3 * WEFT_SEC);
    ASSERT_EQ(weft_sem_available(&s), 0); /* 1 + 2 = 2 + 1 */

    ASSERT_EQ(weft_sem_destroy(&s), 0); /* nobody queued on either */
    ASSERT_EQ(weft_sem_destroy(&s2), 0);
    return 0;
}

TEST(sem_select_case)
{
    for (uint64_t seed = 1; seed <= 4; seed++)
        ASSERT_EQ(
            t_run(1, WEFT_CLOCK_VIRTUAL, T_SEED(seed), sem_case_root, NULL), 0);
    ASSERT_EQ(t_run_virtual(2, sem_case_root, NULL), 0);
}

/* Release from a plain thread wakes tasks on the workers. */
#define SP_N 8
struct sp {
    weft_sem s;
    atomic_int parked, got;
};

static int sp_task(void *arg)
{
    struct sp *p = arg;
    atomic_fetch_add(&p->parked, 1);
    ASSERT_EQ(weft_sem_acquire(&p->s, 1), 0);
    atomic_fetch_add(&p->got, 1);
    return 0;
}

static void *sp_thread(void *arg)
{
    struct sp *p = arg;
    while (atomic_load(&p->parked) < SP_N)
        sched_yield();
    for (int i = 0; i < SP_N; i++)
        ASSERT_EQ(weft_sem_release(&p->s, 1), 0);
    return NULL;
}

static int sp_root(void *arg)
{
    struct sp *p = arg;
    weft_scope *s = scope_open();
    for (int i = 0; i < SP_N; i++)
        spawn(sp_task, p);
    pthread_t th;
    ASSERT_EQ(pthread_create(&th, NULL, sp_thread, p), 0);
    scope_end(s);
    ASSERT_EQ(pthread_join(th, NULL), 0);
    ASSERT_EQ(atomic_load(&p->got), SP_N);
    ASSERT_EQ(weft_sem_available(&p->s), 0);
    return 0;
}

TEST(sem_release_from_plain_pthread)
{
    static struct sp p;
    ASSERT_EQ(weft_sem_init(&p.s, 0), 0);
    ASSERT_EQ(t_run_mono(2, sp_root, &p), 0);
}

/* ---- permits are conserved under cross-worker stress ------------------ */

#define SS_TASKS 32
#define SS_PERMITS 5

struct ss {
    struct rounds r;
    weft_sem s;
    atomic_long inuse;
    int64_t max_wait;
    uint64_t rng[SS_TASKS];
};

static struct ss *ss_cur;

static void *ss_arg(int i, uint64_t rng)
{
    ss_cur->rng[i] = rng;
    return &ss_cur->rng[i];
}

static int ss_task(void *arg)
{
    uint64_t *rng = arg;
    struct ss *x = ss_cur;
    for (;;) {
        uint64_t r = rnd(rng);
        long n = 1 + (long)(r % 3);
        int rc;
        switch ((r >> 4) % 4) {
        case 0:
            rc = weft_sem_acquire(&x->s, n);
            break;
        case 1:
            rc = weft_sem_try_acquire(&x->s, n);
            break;
        default:
            rc = weft_sem_acquire_until(
                &x->s, n,
                weft_now() + (int64_t)((r >> 8) % (uint64_t)x->max_wait));
        }
        if (rc == 0) {
            long used = atomic_fetch_add(&x->inuse, n) + n;
            if (used > SS_PERMITS)
                T_FAIL("%ld permits in use of %d", used, SS_PERMITS);
            if (r & 0x100000)
                ASSERT_EQ(weft_yield(), 0);
            atomic_fetch_sub(&x->inuse, n);
            ASSERT_EQ(weft_sem_release(&x->s, n), 0);
        } else if (rc != -ECANCELED && rc != -ETIMEDOUT && rc != -EAGAIN) {
            T_FAIL("acquire returned %d", rc);
        }
        round_op(&x->r, rc);
        if (rc == -ECANCELED || weft_cancelled())
            return 0;
        if (rc == -EAGAIN)
            ASSERT_EQ(weft_yield(), 0);
    }
}

static int ss_root(void *arg)
{
    struct ss *x = arg;
    int64_t budget = weft_workers() > 1 ? 20 * WEFT_MSEC : WEFT_SEC;
    run_rounds(&x->r, (int)T_SCALE(100), 7, 20000, budget, SS_TASKS, ss_task,
               ss_arg);
    ASSERT_EQ(atomic_load(&x->inuse), 0);
    ASSERT_EQ(weft_sem_available(&x->s), SS_PERMITS);
    ASSERT_EQ(weft_sem_try_acquire(&x->s, SS_PERMITS), 0);
    ASSERT_EQ(weft_sem_release(&x->s, SS_PERMITS), 0);
    return 0;
}

static void run_ss(int workers, weft_clock_kind clock, uint64_t seed)
{
    static struct ss x;
    memset(&x, 0, sizeof x);
    ASSERT_EQ(weft_sem_init(&x.s, SS_PERMITS), 0);
    x.max_wait = 30 * WEFT_USEC;
    ss_cur = &x;
    ASSERT_EQ(t_run(workers, clock, seed, ss_root, &x), 0);
    ASSERT(atomic_load(&x.r.succeeded) > 0);
    ASSERT(atomic_load(&x.r.cancelled) > 0);
    ASSERT_EQ(weft_sem_available(&x.s), SS_PERMITS);
}

TEST(sem_permits_conserved_under_stress)
{
    run_ss(1, WEFT_CLOCK_VIRTUAL, T_SEED(5));
    run_ss(2, WEFT_CLOCK_MONOTONIC, 0);
    run_ss(4, WEFT_CLOCK_MONOTONIC, 0);
}

/* ========================== event ====================================== */

struct ew {
    weft_event *e;
    weft_time deadline; /* 0: plain wait */
    int rc;
    weft_time at;
};

static int ew_task(void *arg)
{
    struct ew *w = arg;
    w->rc = w->deadline ? weft_event_wait_until(w->e, w->deadline)
                        : weft_event_wait(w->e);
    w->at = weft_now();
    return 0;
}

#define EW_N 5

static int event_root(void *arg)
{
    (void)arg;
    weft_event e = WEFT_EVENT_INIT;
    struct ew w[EW_N];
    ASSERT(!weft_event_is_set(&e));
    weft_scope *s = scope_open();
    for (int i = 0; i < EW_N; i++) {
        w[i] = (struct ew){
            .e = &e, .deadline = i % 2 ? 100 * WEFT_SEC : 0, .rc = 99};
        spawn(ew_task, &w[i]);
    }
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0);
    ASSERT_EQ(weft_event_set(&e), 0);
    ASSERT(weft_event_is_set(&e));
    scope_end(s);
    for (int i = 0; i < EW_N; i++) {
        ASSERT_EQ(w[i].rc, 0);
        ASSERT_EQ(w[i].at, WEFT_SEC);
    }
    /* Set: waits go through at once. */
    ASSERT_EQ(weft_event_wait(&e), 0);
    ASSERT_EQ(weft_event_wait_until(&e, weft_now() + WEFT_SEC), 0);
    ASSERT_EQ(weft_now(), WEFT_SEC);
    ASSERT_EQ(weft_event_set(&e), 0); /* idempotent */
    ASSERT_EQ(weft_event_reset(&e), 0);
    ASSERT_EQ(weft_event_reset(&e), 0);
    ASSERT(!weft_event_is_set(&e));
    ASSERT_EQ(weft_event_wait_until(&e, 4 * WEFT_SEC), -ETIMEDOUT);
    ASSERT_EQ(weft_now(), 4 * WEFT_SEC);

    /* set wakes every waiter even if reset follows at once. */
    s = scope_open();
    for (int i = 0; i < EW_N; i++) {
        w[i] = (struct ew){.e = &e, .rc = 99};
        spawn(ew_task, &w[i]);
    }
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0);
    ASSERT_EQ(weft_event_set(&e), 0);
    ASSERT_EQ(weft_event_reset(&e), 0);
    scope_end(s);
    for (int i = 0; i < EW_N; i++) {
        ASSERT_EQ(w[i].rc, 0);
        ASSERT_EQ(w[i].at, 5 * WEFT_SEC);
    }

    /* Timeouts and cancellation while waiting. */
    struct ew t1 = {.e = &e, .deadline = 7 * WEFT_SEC, .rc = 99};
    struct ew c1 = {.e = &e, .rc = 99};
    struct ew later = {.e = &e, .deadline = 100 * WEFT_SEC, .rc = 99};
    weft_scope *outer = scope_open();
    spawn(ew_task, &t1);
    spawn(ew_task, &later);
    weft_scope *inner = scope_open();
    spawn(ew_task, &c1);
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0);
    scope_cancel_end(inner);
    ASSERT_EQ(c1.rc, -ECANCELED);
    ASSERT_EQ(c1.at, 6 * WEFT_SEC);
    ASSERT_EQ(weft_sleep_for(3 * WEFT_SEC), 0);
    ASSERT_EQ(t1.rc, -ETIMEDOUT);
    ASSERT_EQ(t1.at, 7 * WEFT_SEC);
    ASSERT_EQ(weft_event_set(&e), 0);
    scope_end(outer);
    ASSERT_EQ(later.rc, 0);
    ASSERT_EQ(later.at, 9 * WEFT_SEC);

    ASSERT_EQ(weft_event_wait(NULL), -EINVAL);
    ASSERT_EQ(weft_event_wait_until(NULL, WEFT_NEVER), -EINVAL);
    ASSERT_EQ(weft_event_set(NULL), -EINVAL);
    return 0;
}

TEST(event_set_wakes_all_reset_timeout_cancel)
{
    ASSERT_EQ(t_run_virtual(1, event_root, NULL), 0);
    ASSERT_EQ(t_run_virtual(4, event_root, NULL), 0);
}

/* Set from a plain pthread (real clock, then the virtual one while the
 * root holds its worker in pthread_join). */
#define EP_N 16
struct ep {
    weft_event e;
    atomic_int parked, ok;
    weft_time expect_at; /* virtual clock: the time they must wake at */
};

static int ep_task(void *arg)
{
    struct ep *p = arg;
    atomic_fetch_add(&p->parked, 1);
    int rc = p->expect_at ? weft_event_wait_until(&p->e, 100 * WEFT_SEC)
                          : weft_event_wait(&p->e);
    if (rc == 0 && (!p->expect_at || weft_now() == p->expect_at))
        atomic_fetch_add(&p->ok, 1);
    return 0;
}

static void *ep_thread(void *arg)
{
    struct ep *p = arg;
    while (atomic_load(&p->parked) < EP_N)
        sched_yield();
    ASSERT(weft_scope_current() == NULL);
    ASSERT_EQ(weft_event_set(&p->e), 0);
    return NULL;
}

static int ep_root(void *arg)
{
    struct ep *p = arg;
    weft_scope *s = scope_open();
    for (int i = 0; i < EP_N; i++)
        spawn(ep_task, p);
    if (p->expect_at)
        ASSERT_EQ(weft_sleep_for(p->expect_at), 0);
    pthread_t th;
    ASSERT_EQ(pthread_create(&th, NULL, ep_thread, p), 0);
    if (p->expect_at) {
        /* Hold this worker while the thread sets: others must wake. */
        ASSERT_EQ(pthread_join(th, NULL), 0);
        scope_end(s);
    } else {
        scope_end(s);
        ASSERT_EQ(pthread_join(th, NULL), 0);
    }
    ASSERT_EQ(atomic_load(&p->ok), EP_N);
    return 0;
}

TEST(event_set_from_plain_pthread)
{
    static struct ep p;
    ASSERT_EQ(t_run_mono(2, ep_root, &p), 0);
    memset(&p, 0, sizeof p);
    p.expect_at = WEFT_SEC;
    ASSERT_EQ(t_run_virtual(4, ep_root, &p), 0);
}

/* ======================== wait group =================================== */

struct wgt {
    weft_wg *wg;
    int64_t sleep;
    atomic_int *count;
};

static int wg_worker(void *arg)
{
    struct wgt *w = arg;
    if (w->sleep)
        ASSERT_EQ(weft_sleep_for(w->sleep), 0);
    atomic_fetch_add(w->count, 1);
    ASSERT_EQ(weft_wg_done(w->wg), 0);
    return 0;
}

struct wgw {
    weft_wg *wg;
    int rc;
    weft_time at;
};

static int wg_waiter(void *arg)
{
    struct wgw *w = arg;
    w->rc = weft_wg_wait(w->wg);
    w->at = weft_now();
    return 0;
}

static int wg_root(void *arg)
{
    (void)arg;
    weft_wg wg = WEFT_WG_INIT;
    atomic_int count = 0;
    ASSERT_EQ(weft_wg_wait(&wg), 0); /* zero: at once */
    ASSERT_EQ(weft_wg_wait_until(&wg, WEFT_SEC), 0);
    ASSERT_EQ(weft_wg_add(&wg, -1), -EINVAL);
    ASSERT_EQ(weft_wg_done(&wg), -EINVAL);
    ASSERT_EQ(weft_wg_wait(&wg), 0);
    ASSERT_EQ(weft_now(), 0);

    ASSERT_EQ(weft_wg_add(&wg, 3), 0);
    ASSERT_EQ(weft_wg_add(&wg, -4), -EINVAL); /* nothing changed */
    struct wgt t[3];
    weft_scope *s = scope_open();
    for (int i = 0; i < 3; i++) {
        t[i] = (struct wgt){&wg, (i + 1) * WEFT_SEC, &count};
        spawn(wg_worker, &t[i]);
    }
    ASSERT_EQ(weft_wg_wait_until(&wg, 2 * WEFT_SEC + 1), -ETIMEDOUT);
    ASSERT_EQ(weft_now(), 2 * WEFT_SEC + 1);
    ASSERT_EQ(atomic_load(&count), 2);
    ASSERT_EQ(weft_wg_wait(&wg), 0);
    ASSERT_EQ(weft_now(), 3 * WEFT_SEC);
    ASSERT_EQ(atomic_load(&count), 3);
    scope_end(s);
    ASSERT_EQ(weft_wg_done(&wg), -EINVAL);

    /* Several waiters, all woken by the last done; reused after zero. */
    struct wgw w[4];
    ASSERT_EQ(weft_wg_add(&wg, 2), 0);
    ASSERT_EQ(weft_wg_add(&wg, -1), 0);
    s = scope_open();
    for (int i = 0; i < 4; i++) {
        w[i] = (struct wgw){&wg, 99, 0};
        spawn(wg_waiter, &w[i]);
    }
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0);
    ASSERT_EQ(weft_wg_done(&wg), 0);
    scope_end(s);
    for (int i = 0; i < 4; i++) {
        ASSERT_EQ(w[i].rc, 0);
        ASSERT_EQ(w[i].at, 4 * WEFT_SEC);
    }

    /* Cancelled while waiting; the count stays. */
    ASSERT_EQ(weft_wg_add(&wg, 1), 0);
    s = scope_open();
    w[0] = (struct wgw){&wg, 99, 0};
    spawn(wg_waiter, &w[0]);
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0);
    scope_cancel_end(s);
    ASSERT_EQ(w[0].rc, -ECANCELED);
    ASSERT_EQ(w[0].at, 5 * WEFT_SEC);
    ASSERT_EQ(weft_wg_wait_until(&wg, weft_now()), -ETIMEDOUT);
    ASSERT_EQ(weft_wg_done(&wg), 0);
    ASSERT_EQ(weft_wg_wait_until(&wg, weft_now()), 0);

    ASSERT_EQ(weft_wg_add(NULL, 1), -EINVAL);
    ASSERT_EQ(weft_wg_wait(NULL), -EINVAL);
    ASSERT_EQ(weft_wg_wait_until(NULL, WEFT_NEVER), -EINVAL);
    return 0;
}

TEST(wg_add_done_wait_deadline)
{
    ASSERT_EQ(t_run_virtual(1, wg_root, NULL), 0);
    ASSERT_EQ(t_run_virtual(2, wg_root, NULL), 0);
}

/* An add that would take the count past LONG_MAX returns -EINVAL and
 * changes nothing, as one that would take it below zero does (the check
 * itself overflowed: undefined behaviour, which UBSan reports). */
TEST(wg_add_overflow_is_einval)
{
    weft_wg wg = WEFT_WG_INIT;
    ASSERT_EQ(weft_wg_add(&wg, LONG_MAX), 0);
    ASSERT_EQ(weft_wg_add(&wg, 1), -EINVAL);
    ASSERT_EQ(weft_wg_add(&wg, LONG_MAX), -EINVAL);
    ASSERT_EQ(weft_wg_add(&wg, LONG_MIN), -EINVAL);
    ASSERT_EQ(weft_wg_add(&wg, -LONG_MAX), 0);
    ASSERT_EQ(weft_wg_destroy(&wg), 0);
}

/* Many tasks across workers, the count set up front or per task; and done
 * from plain threads. */
struct wgx {
    weft_wg wg;
    atomic_long done_tasks;
    atomic_long per_worker[4];
};

static int wgx_task(void *arg)
{
    struct wgx *x = arg;
    atomic_fetch_add(&x->per_worker[weft_worker_id() & 3], 1);
    if (atomic_load(&x->done_tasks) % 7 == 0)
        ASSERT_EQ(weft_yield(), 0);
    atomic_fetch_add(&x->done_tasks, 1);
    ASSERT_EQ(weft_wg_done(&x->wg), 0);
    return 0;
}

static void *wgx_thread(void *arg)
{
    struct wgx *x = arg;
    atomic_fetch_add(&x->done_tasks, 1);
    ASSERT_EQ(weft_wg_done(&x->wg), 0);
    return NULL;
}

static int wgx_root(void *arg)
{
    struct wgx *x = arg;
    long n = T_LIVE(10000);
    for (int rep = 0; rep < 5; rep++) {
        atomic_store(&x->done_tasks, 0);
        weft_scope *s = scope_open();
        if (rep % 2 == 0) {
            ASSERT_EQ(weft_wg_add(&x->wg, n), 0);
            for (long i = 0; i < n; i++)
                spawn_on((int)i, wgx_task, x);
        } else {
            for (long i = 0; i < n; i++) {
                ASSERT_EQ(weft_wg_add(&x->wg, 1), 0);
                spawn_on((int)i, wgx_task, x);
            }
        }
        ASSERT_EQ(weft_wg_wait(&x->wg), 0);
        /* Every done came after its task's work. */
        ASSERT_EQ(atomic_load(&x->done_tasks), n);
        scope_end(s);
    }
    /* done from plain threads. */
    atomic_store(&x->done_tasks, 0);
    pthread_t th[4];
    ASSERT_EQ(weft_wg_add(&x->wg, 4), 0);
    for (int i = 0; i < 4; i++)
        ASSERT_EQ(pthread_create(&th[i], NULL, wgx_thread, x), 0);
    ASSERT_EQ(weft_wg_wait(&x->wg), 0);
    ASSERT_EQ(atomic_load(&x->done_tasks), 4);
    for (int i = 0; i < 4; i++)
        ASSERT_EQ(pthread_join(th[i], NULL), 0);
    return 0;
}

TEST(wg_across_workers)
{
    static struct wgx x;
    ASSERT_EQ(t_run_mono(4, wgx_root, &x), 0);
    ASSERT_EQ(workers_used(x.per_worker), 4); /* spawned on each */
}

/* ---- destroy of the other primitives: -EBUSY while waited on --------- */

struct dw {
    weft_sem s;
    weft_event e;
    weft_wg wg;
};

static int dw_sem(void *arg)
{
    struct dw *d = arg;
    ASSERT_EQ(weft_sem_acquire(&d->s, 1), 0);
    return 0;
}

static int dw_event(void *arg)
{
    struct dw *d = arg;
    ASSERT_EQ(weft_event_wait(&d->e), 0);
    return 0;
}

static int dw_wg(void *arg)
{
    struct dw *d = arg;
    ASSERT_EQ(weft_wg_wait(&d->wg), 0);
    return 0;
}

static int destroy_others_root(void *arg)
{
    (void)arg;
    struct dw d;
    memset(&d, 0, sizeof d);
    ASSERT_EQ(weft_sem_init(&d.s, 0), 0);
    ASSERT_EQ(weft_wg_add(&d.wg, 1), 0);
    weft_scope *s = scope_open();
    spawn(dw_sem, &d);
    spawn(dw_event, &d);
    spawn(dw_wg, &d);
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0); /* all three wait */
    ASSERT_EQ(weft_sem_destroy(&d.s), -EBUSY);
    ASSERT_EQ(weft_event_destroy(&d.e), -EBUSY);
    ASSERT_EQ(weft_wg_destroy(&d.wg), -EBUSY);
    /* Nothing changed: each wait completes normally. */
    ASSERT_EQ(weft_sem_release(&d.s, 1), 0);
    ASSERT_EQ(weft_event_set(&d.e), 0);
    ASSERT_EQ(weft_wg_done(&d.wg), 0);
    scope_end(s);
    ASSERT_EQ(weft_sem_destroy(&d.s), 0);
    ASSERT_EQ(weft_sem_available(&d.s), 0);
    ASSERT_EQ(weft_event_destroy(&d.e), 0);
    ASSERT_EQ(weft_event_is_set(&d.e), 0);
    ASSERT_EQ(weft_wg_destroy(&d.wg), 0);
    ASSERT_EQ(weft_sem_destroy(NULL), -EINVAL);
    ASSERT_EQ(weft_event_destroy(NULL), -EINVAL);
    ASSERT_EQ(weft_wg_destroy(NULL), -EINVAL);
    return 0;
}

TEST(sem_event_wg_destroy_waited_is_ebusy)
{
    ASSERT_EQ(t_run_virtual(1, destroy_others_root, NULL), 0);
}
