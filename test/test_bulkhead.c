/* SPDX-License-Identifier: MIT */
/*
 * Bulkhead. Who holds a turn, and when, is checked exactly on the virtual
 * clock under several scheduling seeds (and on two workers): at most
 * max_calls at once (the measured maximum is exactly max_calls), waiters
 * served in arrival order with no barging, a full queue rejected at once,
 * deadlines and cancels leaving no waiter behind, and a turn handed to a
 * waiter that is being cancelled passed on. Across workers, with rounds
 * cancelled at random moments, no turn is ever lost or doubled.
 */
#include "future/future.h" /* its wait kinds */
#include "t.h"
#include "wait/seen.h" /* a parked task's wait record */
#include "weft.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>

#define TICK (100 * WEFT_MSEC)

static void run_seeds(weft_fn fn)
{
    for (uint64_t seed = 1; seed <= 6; seed++)
        ASSERT_EQ(t_run(1, WEFT_CLOCK_VIRTUAL, T_SEED(seed), fn, NULL), 0);
    ASSERT_EQ(t_run_virtual(2, fn, NULL), 0);
}

static weft_bulkhead *mk(int max_calls, int max_queue)
{
    weft_bulkhead *b = NULL;
    ASSERT_EQ(weft_bulkhead_new(&b, max_calls, max_queue), 0);
    ASSERT(b != NULL);
    return b;
}

static void until(weft_time t)
{
    ASSERT_EQ(weft_sleep_until(t), 0);
    ASSERT_EQ(weft_now(), t);
}

/* Exactly n turns are free and nobody waits: n enters pass at once, the
 * next one finds none (a deadline already past: -ETIMEDOUT, or a full
 * queue: -EBUSY); then all are given back. */
static void expect_free_turns(weft_bulkhead *b, int n)
{
    weft_time t0 = weft_now();
    for (int i = 0; i < n; i++)
        ASSERT_EQ(weft_bulkhead_enter(b, t0), 0);
    int rc = weft_bulkhead_enter(b, t0); /* at once: nothing queued */
    ASSERT(rc == -ETIMEDOUT || rc == -EBUSY);
    for (int i = 0; i < n; i++)
        ASSERT_EQ(weft_bulkhead_leave(b), 0);
}

/* A task that arrives at `arrive` ticks, enters (with a deadline if set),
 * holds the turn `hold` ticks, and leaves. */
struct bw {
    weft_bulkhead *b;
    int arrive, hold;
    weft_time deadline; /* 0: none */
    int rc;
    weft_time at; /* when enter returned */
    int order;    /* order in which it got its turn */
    int done;
};

static atomic_int bw_next;
static atomic_int bw_inside, bw_max;

static void note_inside(int delta)
{
    int v = atomic_fetch_add(&bw_inside, delta) + delta;
    int m = atomic_load(&bw_max);
    while (v > m && !atomic_compare_exchange_weak(&bw_max, &m, v))
        ;
}

static int bw_task(void *arg)
{
    struct bw *w = arg;
    ASSERT_EQ(weft_sleep_until(w->arrive * TICK), 0);
    w->rc = weft_bulkhead_enter(w->b, w->deadline ? w->deadline : WEFT_NEVER);
    w->at = weft_now();
    if (w->rc == 0) {
        w->order = atomic_fetch_add(&bw_next, 1);
        note_inside(1);
        ASSERT_EQ(weft_sleep_for(w->hold * TICK), 0);
        note_inside(-1);
        ASSERT_EQ(weft_bulkhead_leave(w->b), 0);
    }
    w->done = 1;
    return 0;
}

static void reset_counters(void)
{
    atomic_store(&bw_next, 0);
    atomic_store(&bw_inside, 0);
    atomic_store(&bw_max, 0);
}

/* ---- misuse -------------------------------------------------------------- */

static int fn_never(void *arg)
{
    (void)arg;
    T_FAIL("fn called");
    return 0;
}

static int fn_seven(void *arg)
{
    (void)arg;
    return 7;
}

static int misuse_root(void *arg)
{
    (void)arg;
    weft_bulkhead *b = mk(1, 1);
    ASSERT_EQ(weft_bulkhead_enter(NULL, WEFT_NEVER), -EINVAL);
    ASSERT_EQ(weft_bulkhead_call(NULL, fn_never, NULL, WEFT_NEVER), -EINVAL);
    ASSERT_EQ(weft_bulkhead_call(b, NULL, NULL, WEFT_NEVER), -EINVAL);
    ASSERT_EQ(weft_bulkhead_leave(b), -EINVAL); /* no turn held */
    ASSERT_EQ(weft_bulkhead_enter(b, WEFT_NEVER), 0);
    ASSERT_EQ(weft_bulkhead_free(b), -EBUSY); /* a turn is held */
    ASSERT_EQ(weft_bulkhead_leave(b), 0);
    ASSERT_EQ(weft_bulkhead_leave(b), -EINVAL); /* given back already */
    ASSERT_EQ(weft_bulkhead_call(b, fn_seven, NULL, WEFT_NEVER), 7);
    /* A deadline already past does not matter while a turn is free. */
    ASSERT_EQ(weft_bulkhead_call(b, fn_seven, NULL, 0), 7);

    /* free with a task waiting: -EBUSY. */
    ASSERT_EQ(weft_bulkhead_enter(b, WEFT_NEVER), 0);
    struct bw w = {.b = b, .arrive = 1, .hold = 1};
    weft_scope *s = scope_open();
    spawn(bw_task, &w);
    until(2 * TICK);
    ASSERT(!w.done);
    ASSERT_EQ(weft_bulkhead_free(b), -EBUSY);
    ASSERT_EQ(weft_bulkhead_leave(b), 0);
    ASSERT_EQ(weft_bulkhead_free(b), -EBUSY); /* w holds it now */
    scope_end(s);
    ASSERT_EQ(w.rc, 0);
    ASSERT_EQ(w.at, 2 * TICK);

    /* A cancelled scope: -ECANCELED at once, even with a turn free. */
    s = scope_open();
    ASSERT_EQ(weft_scope_cancel(s), 0);
    ASSERT_EQ(weft_bulkhead_enter(b, WEFT_NEVER), -ECANCELED);
    ASSERT_EQ(weft_bulkhead_call(b, fn_never, NULL, WEFT_NEVER), -ECANCELED);
    ASSERT_EQ(weft_scope_join(s), -ECANCELED);
    ASSERT_EQ(weft_scope_free(s), 0);
    expect_free_turns(b, 1);
    ASSERT_EQ(weft_bulkhead_free(b), 0);
    return 0;
}

TEST(bulkhead_misuse)
{
    weft_bulkhead *b = NULL;
    ASSERT_EQ(weft_bulkhead_new(NULL, 1, 0), -EINVAL);
    ASSERT_EQ(weft_bulkhead_new(&b, 0, 0), -EINVAL);
    ASSERT_EQ(weft_bulkhead_new(&b, -1, 0), -EINVAL);
    ASSERT_EQ(weft_bulkhead_new(&b, 1, -1), -EINVAL);
    ASSERT(b == NULL);
    ASSERT_EQ(weft_bulkhead_free(NULL), -EINVAL);
    ASSERT_EQ(weft_bulkhead_leave(NULL), -EINVAL);
    b = mk(2, 0);
    /* Outside a task: enter is -EPERM; leave and free work anywhere. */
    ASSERT_EQ(weft_bulkhead_enter(b, WEFT_NEVER), -EPERM);
    ASSERT_EQ(weft_bulkhead_call(b, fn_never, NULL, WEFT_NEVER), -EPERM);
    ASSERT_EQ(weft_bulkhead_leave(b), -EINVAL);
    ASSERT_EQ(weft_bulkhead_free(b), 0);
    ASSERT_EQ(t_run_virtual(1, misuse_root, NULL), 0);
}

/* ---- at most max_calls at once; waves at exact instants ------------------ */

#define MC_N 20
#define MC_MAX 3

static int max_calls_root(void *arg)
{
    (void)arg;
    reset_counters();
    weft_bulkhead *b = mk(MC_MAX, MC_N);
    struct bw w[MC_N];
    weft_scope *s = scope_open();
    for (int i = 0; i < MC_N; i++) {
        w[i] = (struct bw){.b = b, .arrive = 1, .hold = 10};
        spawn(bw_task, &w[i]);
    }
    scope_end(s);
    ASSERT_EQ(atomic_load(&bw_max), MC_MAX);
    /* The k-th to get a turn got it in wave k / 3, at 1 + 10 * wave ticks. */
    for (int i = 0; i < MC_N; i++) {
        ASSERT_EQ(w[i].rc, 0);
        ASSERT_EQ(w[i].at, (1 + 10 * (w[i].order / MC_MAX)) * TICK);
    }
    ASSERT_EQ(weft_now(), (1 + 10 * ((MC_N + MC_MAX - 1) / MC_MAX)) * TICK);
    expect_free_turns(b, MC_MAX);
    ASSERT_EQ(weft_bulkhead_free(b), 0);
    return 0;
}

TEST(bulkhead_at_most_max_calls)
{
    run_seeds(max_calls_root);
}

/* ---- FIFO, no barging ---------------------------------------------------- */

#define NARR 5
static const int arrivals[NARR] = {3, 1, 5, 2, 4};

static int fifo_root(void *arg)
{
    (void)arg;
    reset_counters();
    weft_bulkhead *b = mk(1, NARR + 1);
    ASSERT_EQ(weft_bulkhead_enter(b, WEFT_NEVER), 0); /* held until 10 */
    atomic_store(&bw_next, 0);
    struct bw w[NARR];
    weft_scope *s = scope_open();
    for (int i = 0; i < NARR; i++) {
        w[i] = (struct bw){.b = b, .arrive = arrivals[i], .hold = 2};
        spawn(bw_task, &w[i]);
    }
    /* One more arrives at the very instant the turn is given back: it
     * must queue behind the others, not take the turn. */
    struct bw late = {.b = b, .arrive = 10, .hold = 2};
    spawn(bw_task, &late);
    until(10 * TICK);
    ASSERT_EQ(weft_bulkhead_leave(b), 0);
    scope_end(s);
    for (int i = 0; i < NARR; i++) {
        ASSERT_EQ(w[i].rc, 0);
        /* arrival k (1..5) is served k-th, 2 ticks each from 10 */
        ASSERT_EQ(w[i].order, arrivals[i] - 1);
        ASSERT_EQ(w[i].at, (10 + 2 * (arrivals[i] - 1)) * TICK);
    }
    ASSERT_EQ(late.rc, 0);
    ASSERT_EQ(late.order, NARR);
    ASSERT_EQ(late.at, (10 + 2 * NARR) * TICK);
    ASSERT_EQ(atomic_load(&bw_max), 1);
    expect_free_turns(b, 1);
    ASSERT_EQ(weft_bulkhead_free(b), 0);
    return 0;
}

TEST(bulkhead_fifo_no_barging)
{
    run_seeds(fifo_root);
}

/* ---- a full queue rejects at once ---------------------------------------- */

static int full_root(void *arg)
{
    (void)arg;
    reset_counters();
    weft_bulkhead *b = mk(1, 2);
    ASSERT_EQ(weft_bulkhead_enter(b, WEFT_NEVER), 0);
    struct bw w[2] = {{.b = b, .arrive = 1, .hold = 1},
                      {.b = b, .arrive = 2, .hold = 1}};
    weft_scope *s = scope_open();
    spawn(bw_task, &w[0]);
    spawn(bw_task, &w[1]);
    until(3 * TICK);
    ASSERT_EQ(weft_bulkhead_enter(b, WEFT_NEVER), -EBUSY);
    ASSERT_EQ(weft_now(), 3 * TICK);
    ASSERT_EQ(weft_bulkhead_call(b, fn_never, NULL, WEFT_NEVER), -EBUSY);
    ASSERT_EQ(weft_bulkhead_leave(b), 0); /* w[0] in, w[1] waits */
    until(3 * TICK + 1);
    ASSERT_EQ(weft_bulkhead_enter(b, 3 * TICK + 2), -ETIMEDOUT); /* queued */
    ASSERT_EQ(weft_now(), 3 * TICK + 2);
    scope_end(s);
    ASSERT_EQ(w[0].at, 3 * TICK);
    ASSERT_EQ(w[1].at, 4 * TICK);
    expect_free_turns(b, 1);
    ASSERT_EQ(weft_bulkhead_free(b), 0);

    /* max_queue 0: nobody waits. */
    b = mk(2, 0);
    ASSERT_EQ(weft_bulkhead_enter(b, WEFT_NEVER), 0);
    ASSERT_EQ(weft_bulkhead_enter(b, WEFT_NEVER), 0);
    weft_time t0 = weft_now();
    ASSERT_EQ(weft_bulkhead_enter(b, WEFT_NEVER), -EBUSY);
    ASSERT_EQ(weft_now(), t0);
    ASSERT_EQ(weft_bulkhead_leave(b), 0);
    ASSERT_EQ(weft_bulkhead_leave(b), 0);
    ASSERT_EQ(weft_bulkhead_free(b), 0);
    return 0;
}

TEST(bulkhead_queue_full_ebusy_at_once)
{
    run_seeds(full_root);
}

/* ---- deadlines and cancels leave no waiter ------------------------------- */

static int leave_root(void *arg)
{
    (void)arg;
    reset_counters();
    weft_bulkhead *b = mk(1, 2);
    ASSERT_EQ(weft_bulkhead_enter(b, WEFT_NEVER), 0);
    struct bw t1 = {.b = b, .arrive = 1, .hold = 1, .deadline = 5 * TICK};
    struct bw t2 = {.b = b, .arrive = 2, .hold = 1};
    weft_scope *s = scope_open();
    spawn(bw_task, &t1);
    spawn(bw_task, &t2);
    until(5 * TICK - 1);
    ASSERT(!t1.done);
    until(5 * TICK + 1);
    ASSERT(t1.done);
    ASSERT_EQ(t1.rc, -ETIMEDOUT);
    ASSERT_EQ(t1.at, 5 * TICK);
    /* Its place is free: another can queue beside t2 (max_queue 2). */
    struct bw t3 = {.b = b, .arrive = 6, .hold = 1};
    spawn(bw_task, &t3);
    until(7 * TICK);
    ASSERT(!t3.done);
    ASSERT_EQ(weft_bulkhead_enter(b, WEFT_NEVER), -EBUSY); /* t2, t3 wait */
    ASSERT_EQ(weft_bulkhead_leave(b), 0); /* to t2, from 7 to 8 */

    /* A waiter cancelled (in its own scope) leaves at the cancel. */
    struct bw c1 = {.b = b, .arrive = 7, .hold = 1};
    weft_scope *inner = scope_open();
    spawn(bw_task, &c1); /* queues behind t3 */
    until(7 * TICK + TICK / 2);
    ASSERT(!c1.done);
    scope_cancel_end(inner);
    ASSERT_EQ(c1.rc, -ECANCELED);
    ASSERT_EQ(c1.at, 7 * TICK + TICK / 2);
    /* Its place is free too: the root can queue (and time out). */
    weft_time t = weft_now();
    ASSERT_EQ(weft_bulkhead_enter(b, t + 1), -ETIMEDOUT);
    ASSERT_EQ(weft_now(), t + 1);
    scope_end(s);
    ASSERT_EQ(t2.rc, 0);
    ASSERT_EQ(t2.at, 7 * TICK);
    ASSERT_EQ(t3.rc, 0);
    ASSERT_EQ(t3.at, 8 * TICK);
    ASSERT_EQ(weft_now(), 9 * TICK);
    expect_free_turns(b, 1);
    ASSERT_EQ(weft_bulkhead_free(b), 0);

    /* A deadline already past when it would wait: -ETIMEDOUT at once,
     * queueing nothing. */
    b = mk(1, 1);
    ASSERT_EQ(weft_bulkhead_enter(b, WEFT_NEVER), 0);
    weft_time t0 = weft_now();
    ASSERT_EQ(weft_bulkhead_enter(b, t0), -ETIMEDOUT);
    ASSERT_EQ(weft_bulkhead_enter(b, 0), -ETIMEDOUT);
    ASSERT_EQ(weft_now(), t0);
    ASSERT_EQ(weft_bulkhead_enter(b, t0 + 1), -ETIMEDOUT); /* queued */
    ASSERT_EQ(weft_now(), t0 + 1);
    ASSERT_EQ(weft_bulkhead_leave(b), 0);
    ASSERT_EQ(weft_bulkhead_free(b), 0);
    return 0;
}

TEST(bulkhead_deadline_and_cancel_leave_no_waiter)
{
    run_seeds(leave_root);
}

/* ---- a turn handed to a waiter being cancelled is passed on -------------- */

/* The holder gives its turn back and, at once, cancels the scope of the
 * first waiter (or cancels first and leaves second). */
struct holder {
    weft_bulkhead *b;
    weft_scope *victim;
    int cancel_first;
};

static int holder_task(void *arg)
{
    struct holder *h = arg;
    ASSERT_EQ(weft_bulkhead_enter(h->b, WEFT_NEVER), 0);
    ASSERT_EQ(weft_sleep_for(3 * TICK), 0);
    if (h->cancel_first) {
        ASSERT_EQ(weft_scope_cancel(h->victim), 0);
        ASSERT_EQ(weft_bulkhead_leave(h->b), 0);
    } else {
        ASSERT_EQ(weft_bulkhead_leave(h->b), 0);
        ASSERT_EQ(weft_scope_cancel(h->victim), 0);
    }
    return 0;
}

static int handover_root(void *arg)
{
    int cancel_first = (int)(intptr_t)arg;
    reset_counters();
    weft_bulkhead *b = mk(1, 2);
    /* w2 gives up at 100 ticks: if the turn were lost it would say so. */
    struct bw w1 = {.b = b, .arrive = 1, .hold = 1};
    struct bw w2 = {.b = b, .arrive = 2, .hold = 1, .deadline = 100 * TICK};
    /* w1 and the holder share worker 0, so that the holder's leave and
     * cancel reach w1 together (with w1 on another worker it could run in
     * between, take the turn, and only then see the cancel: a fine
     * outcome, but not the race this test is about); w2 is on the last
     * worker, so with two the turn passes on across workers. */
    weft_spawn_opts on0 = {.worker = 1}, onlast = {.worker = weft_workers()};
    weft_scope *outer = scope_open();
    ASSERT(weft_spawn_ex(NULL, bw_task, &w2, &onlast) >= 0);
    weft_scope *inner = scope_open();
    ASSERT(weft_spawn_ex(NULL, bw_task, &w1, &on0) >= 0);
    struct holder h = {b, inner, cancel_first};
    ASSERT(weft_spawn_ex(outer, holder_task, &h, &on0) >= 0);
    ASSERT_EQ(weft_scope_join(inner), -ECANCELED);
    ASSERT_EQ(weft_scope_free(inner), 0);
    scope_end(outer);
    ASSERT_EQ(w1.rc, -ECANCELED);
    ASSERT_EQ(w1.at, 3 * TICK);
    ASSERT_EQ(w2.rc, 0);
    ASSERT_EQ(w2.at, 3 * TICK);
    ASSERT_EQ(w2.order, 0);
    ASSERT_EQ(weft_now(), 4 * TICK);
    expect_free_turns(b, 1);
    ASSERT_EQ(weft_bulkhead_free(b), 0);
    return 0;
}

TEST(bulkhead_turn_to_cancelled_waiter_passes_on)
{
    /* One worker: the holder's leave claims w1 and the cancel lands before
     * w1 runs again (w1 then passes the turn on); or the cancel wakes w1
     * first and the leave skips it. Both: w2 gets the turn at once. */
    for (int cancel_first = 0; cancel_first <= 1; cancel_first++) {
        for (uint64_t seed = 1; seed <= 6; seed++)
            ASSERT_EQ(t_run(1, WEFT_CLOCK_VIRTUAL, T_SEED(seed), handover_root,
                            (void *)(intptr_t)cancel_first),
                      0);
        ASSERT_EQ(
            t_run_virtual(2, handover_root, (void *)(intptr_t)cancel_first), 0);
    }
}

/* ---- leave from a plain thread hands the turn to a task ------------------ */

static atomic_int pt_entered;

static void *pt_thread(void *arg)
{
    weft_bulkhead *b = arg;
    while (atomic_load(&pt_entered) < 1)
        sched_yield();
    ASSERT_EQ(weft_bulkhead_leave(b), 0); /* the root's turn */
    return NULL;
}

static int pt_waiter(void *arg)
{
    weft_bulkhead *b = arg;
    ASSERT_EQ(weft_bulkhead_enter(b, WEFT_NEVER), 0);
    ASSERT_EQ(weft_bulkhead_leave(b), 0);
    return 0;
}

static int pt_root(void *arg)
{
    weft_bulkhead *b = arg;
    ASSERT_EQ(weft_bulkhead_enter(b, WEFT_NEVER), 0);
    weft_scope *s = scope_open();
    spawn(pt_waiter, b);
    ASSERT_EQ(weft_sleep_for(WEFT_MSEC), 0); /* let it queue */
    pthread_t th;
    ASSERT_EQ(pthread_create(&th, NULL, pt_thread, b), 0);
    atomic_store(&pt_entered, 1);
    scope_end(s);
    ASSERT_EQ(pthread_join(th, NULL), 0);
    expect_free_turns(b, 1);
    return 0;
}

TEST(bulkhead_leave_from_plain_thread)
{
    weft_bulkhead *b = mk(1, 4);
    ASSERT_EQ(t_run_mono(2, pt_root, b), 0);
    ASSERT_EQ(weft_bulkhead_free(b), 0);
}

/* ---- cross-worker stress: nothing lost, nothing doubled ------------------ */

#define ST_TASKS 32
#define ST_MAX 4
#define ST_QUEUE 12

struct st {
    weft_bulkhead *b;
    weft_scope *round;
    long threshold;
    atomic_long ops;
    atomic_long entered, busy, timedout, cancelled, ran;
    atomic_int inside, max_inside;
    int64_t max_wait;
    uint64_t rng[ST_TASKS];
};

static struct st *st_cur;

static int st_fn(void *arg)
{
    uint64_t *rng = arg;
    struct st *x = st_cur;
    int v = atomic_fetch_add(&x->inside, 1) + 1;
    if (v > ST_MAX)
        T_FAIL("%d turns held of %d", v, ST_MAX);
    int m = atomic_load(&x->max_inside);
    while (v > m && !atomic_compare_exchange_weak(&x->max_inside, &m, v))
        ;
    atomic_fetch_add(&x->ran, 1);
    uint64_t r = rnd(rng);
    if (r & 1)
        ASSERT_EQ(weft_yield(), 0);
    else if (r & 2)
        (void)weft_sleep_for((int64_t)(r >> 40) % (2 * WEFT_USEC));
    atomic_fetch_sub(&x->inside, 1);
    return 0;
}

static int st_task(void *arg)
{
    uint64_t *rng = arg;
    struct st *x = st_cur;
    for (;;) {
        uint64_t r = rnd(rng);
        int rc;
        switch (r % 3) {
        case 0:
            rc = weft_bulkhead_call(x->b, st_fn, rng, WEFT_NEVER);
            break;
        case 1:
            rc = weft_bulkhead_call(
                x->b, st_fn, rng,
                weft_now() + (int64_t)((r >> 8) % (uint64_t)x->max_wait));
            break;
        default:
            rc = weft_bulkhead_enter(
                x->b, weft_now() + (int64_t)((r >> 8) % (uint64_t)x->max_wait));
            if (rc == 0) {
                st_fn(rng);
                ASSERT_EQ(weft_bulkhead_leave(x->b), 0);
            }
        }
        switch (rc) {
        case 0:
            atomic_fetch_add(&x->entered, 1);
            break;
        case -EBUSY:
            atomic_fetch_add(&x->busy, 1);
            (void)weft_sleep_for(WEFT_USEC);
            break;
        case -ETIMEDOUT:
            atomic_fetch_add(&x->timedout, 1);
            break;
        case -ECANCELED:
            atomic_fetch_add(&x->cancelled, 1);
            break;
        default:
            T_FAIL("enter returned %d", rc);
        }
        if (atomic_fetch_add(&x->ops, 1) + 1 == x->threshold)
            ASSERT_EQ(weft_scope_cancel(x->round), 0);
        if (rc == -ECANCELED || weft_cancelled())
            return 0;
    }
}

static int st_root(void *arg)
{
    struct st *x = arg;
    uint64_t rng = 11;
    int64_t budget = weft_workers() > 1 ? 20 * WEFT_MSEC : WEFT_SEC;
    long rounds = T_SCALE(100);
    for (long round = 0; round < rounds; round++) {
        x->threshold = 1 + (long)(rnd(&rng) % 20000);
        atomic_store(&x->ops, 0);
        weft_scope_opts o = {.policy = WEFT_COLLECT,
                             .deadline = weft_now() + budget};
        ASSERT_EQ(weft_scope_open(&x->round, &o), 0);
        for (int i = 0; i < ST_TASKS; i++) {
            x->rng[i] = rnd(&rng);
            int rc = weft_spawn(x->round, st_task, &x->rng[i]);
            ASSERT(rc >= 0 || rc == -ECANCELED);
        }
        int rc = weft_scope_join(x->round);
        ASSERT(rc == -ECANCELED || rc == -ETIMEDOUT);
        ASSERT_EQ(weft_scope_free(x->round), 0);
        /* Every turn is free again, nobody waits. */
        ASSERT_EQ(atomic_load(&x->inside), 0);
        expect_free_turns(x->b, ST_MAX);
    }
    return 0;
}

static void run_st(int workers, weft_clock_kind clock, uint64_t seed)
{
    static struct st x;
    memset(&x, 0, sizeof x);
    st_cur = &x;
    x.b = mk(ST_MAX, ST_QUEUE);
    x.max_wait = 30 * WEFT_USEC;
    ASSERT_EQ(t_run(workers, clock, seed, st_root, &x), 0);
    ASSERT_EQ(atomic_load(&x.entered), atomic_load(&x.ran));
    ASSERT(atomic_load(&x.entered) > 0);
    ASSERT(atomic_load(&x.cancelled) > 0);
    ASSERT(atomic_load(&x.busy) + atomic_load(&x.timedout) > 0);
    ASSERT_EQ(atomic_load(&x.max_inside), ST_MAX);
    ASSERT_EQ(weft_bulkhead_free(x.b), 0);
}

TEST(bulkhead_stress_across_workers)
{
    run_st(1, WEFT_CLOCK_VIRTUAL, T_SEED(5));
    run_st(2, WEFT_CLOCK_MONOTONIC, 0);
    run_st(4, WEFT_CLOCK_MONOTONIC, 0);
}

/* ---- what a waiter records ---------------------------------------------- */

/* A task queued on a bulkhead records it (kind and address) as what it
 * waits on, for the task dump and the deadlock detector. */
struct rec {
    weft_bulkhead *b;
    weft_task *task;
};

static int rec_waiter(void *arg)
{
    struct rec *r = arg;
    r->task = weft__current();
    ASSERT_EQ(weft_bulkhead_enter(r->b, WEFT_NEVER), 0);
    ASSERT_EQ(weft_bulkhead_leave(r->b), 0);
    return 0;
}

static int record_root(void *arg)
{
    (void)arg;
    struct rec r = {.b = mk(1, 1)};
    ASSERT_EQ(weft_bulkhead_enter(r.b, WEFT_NEVER), 0);
    weft_scope *s = scope_open();
    spawn(rec_waiter, &r);
    until(TICK); /* one worker: the waiter has queued and parked */
    ASSERT(r.task != NULL);
    ASSERT(weft__task_wait_kind(r.task) == &weft__wk_bulkhead);
    ASSERT(weft__task_wait_obj(r.task) == r.b);
    ASSERT_EQ(weft_bulkhead_leave(r.b), 0);
    scope_end(s);
    expect_free_turns(r.b, 1);
    ASSERT_EQ(weft_bulkhead_free(r.b), 0);
    return 0;
}

TEST(bulkhead_waiter_records_the_bulkhead)
{
    ASSERT_EQ(t_run_virtual(1, record_root, NULL), 0);
}
