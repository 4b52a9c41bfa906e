/* SPDX-License-Identifier: MIT */
/*
 * The readers-writer lock. Sharing and exclusion are checked with exact
 * counts across workers; arrival order, reader batches, writer priority
 * over later readers and every timeout and cancel are checked exactly on
 * the virtual clock, under several scheduling seeds.
 */
#include "t.h"
#include "weft.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

/* The lock is free, and nobody waits: a writer gets it at once. */
static void assert_free(weft_rwlock *l)
{
    ASSERT_EQ(weft_rwlock_try_wrlock(l), 0);
    ASSERT_EQ(weft_rwlock_wrunlock(l), 0);
    ASSERT_EQ(weft_rwlock_rdunlock(l), -EPERM); /* no reader left behind */
}

static void run_seeds(weft_fn fn)
{
    for (uint64_t seed = 1; seed <= 6; seed++)
        ASSERT_EQ(t_run(1, WEFT_CLOCK_VIRTUAL, T_SEED(seed), fn, NULL), 0);
    ASSERT_EQ(t_run_virtual(2, fn, NULL), 0);
}

/* A task that arrives at `arrive` (in ticks of 100 ms), takes the lock for
 * reading or writing (with a deadline if set), holds it for `hold` ticks,
 * and records what happened. */
#define TICK (100 * WEFT_MSEC)

struct rw {
    weft_rwlock *l;
    int write;
    int arrive, hold;   /* ticks */
    weft_time deadline; /* 0: none */
    int rc;
    weft_time at; /* when the lock call returned */
    int order;    /* entry order among the tasks of a run */
    int inside;   /* readers inside (this one included) when it entered */
};

static atomic_int rw_next, rw_readers_in;

static int rw_task(void *arg)
{
    struct rw *w = arg;
    ASSERT_EQ(weft_sleep_for(w->arrive * TICK), 0);
    if (w->write)
        w->rc = w->deadline ? weft_rwlock_wrlock_until(w->l, w->deadline)
                            : weft_rwlock_wrlock(w->l);
    else
        w->rc = w->deadline ? weft_rwlock_rdlock_until(w->l, w->deadline)
                            : weft_rwlock_rdlock(w->l);
    w->at = weft_now();
    if (w->rc != 0) {
        ASSERT_EQ(w->write ? weft_rwlock_wrunlock(w->l)
                           : weft_rwlock_rdunlock(w->l),
                  -EPERM);
        return 0;
    }
    w->order = atomic_fetch_add(&rw_next, 1);
    if (!w->write)
        w->inside = atomic_fetch_add(&rw_readers_in, 1) + 1;
    else
        ASSERT_EQ(atomic_load(&rw_readers_in), 0);
    int r = weft_sleep_for(w->hold * TICK);
    ASSERT(r == 0 || r == -ECANCELED);
    if (!w->write)
        atomic_fetch_sub(&rw_readers_in, 1);
    ASSERT_EQ(
        w->write ? weft_rwlock_wrunlock(w->l) : weft_rwlock_rdunlock(w->l), 0);
    return 0;
}

static void rw_reset(void)
{
    atomic_store(&rw_next, 0);
    atomic_store(&rw_readers_in, 0);
}

/* ---- readers share ----------------------------------------------------- */

#define SH_N 6

static int share_root(void *arg)
{
    (void)arg;
    weft_rwlock l = WEFT_RWLOCK_INIT;
    struct rw r[SH_N];
    rw_reset();
    weft_scope *s = scope_open();
    for (int i = 0; i < SH_N; i++) {
        r[i] = (struct rw){.l = &l, .arrive = 0, .hold = 10, .rc = 99};
        spawn(rw_task, &r[i]);
    }
    ASSERT_EQ(weft_sleep_for(5 * TICK), 0);
    /* All six inside at once; more readers still get in; no writer. */
    ASSERT_EQ(atomic_load(&rw_readers_in), SH_N);
    ASSERT_EQ(weft_rwlock_try_rdlock(&l), 0);
    ASSERT_EQ(weft_rwlock_rdlock(&l), 0);
    ASSERT_EQ(weft_rwlock_rdlock_until(&l, weft_now()), 0); /* no wait */
    ASSERT_EQ(weft_rwlock_try_wrlock(&l), -EBUSY);
    ASSERT_EQ(weft_rwlock_wrlock_until(&l, weft_now() + TICK), -ETIMEDOUT);
    ASSERT_EQ(weft_now(), 6 * TICK);
    for (int i = 0; i < 3; i++)
        ASSERT_EQ(weft_rwlock_rdunlock(&l), 0);
    scope_end(s);
    int max_inside = 0;
    for (int i = 0; i < SH_N; i++) {
        ASSERT_EQ(r[i].rc, 0);
        ASSERT_EQ(r[i].at, 0);
        if (r[i].inside > max_inside)
            max_inside = r[i].inside;
    }
    ASSERT_EQ(max_inside, SH_N);
    ASSERT_EQ(weft_now(), 10 * TICK);
    assert_free(&l);
    ASSERT_EQ(weft_rwlock_destroy(&l), 0);
    return 0;
}

TEST(rwlock_readers_share)
{
    run_seeds(share_root);
}

/* ---- arrival order, and readers let in together ------------------------ */

/* The root holds the write lock until tick 100; then, arriving one tick
 * apart: R R W R W R R W R. Each holds for 10 ticks. */
#define AO_N 9
static const char ao_kind[AO_N + 1] = "RRWRWRRWR";
/* Expected entry tick of each: batches of readers, writers alone. */
static const int ao_enter[AO_N] = {100, 100, 110, 120, 130, 140, 140, 150, 160};

static int order_root(void *arg)
{
    (void)arg;
    weft_rwlock l = WEFT_RWLOCK_INIT;
    struct rw r[AO_N];
    rw_reset();
    ASSERT_EQ(weft_rwlock_wrlock(&l), 0);
    weft_scope *s = scope_open();
    for (int i = 0; i < AO_N; i++) {
        r[i] = (struct rw){.l = &l,
                           .write = ao_kind[i] == 'W',
                           .arrive = 1 + i,
                           .hold = 10,
                           .rc = 99,
                           .order = -1};
        spawn(rw_task, &r[i]);
    }
    ASSERT_EQ(weft_sleep_for(100 * TICK), 0);
    ASSERT_EQ(atomic_load(&rw_next), 0);
    ASSERT_EQ(weft_rwlock_wrunlock(&l), 0);
    /* Readers queued: no barging in, by a reader or a writer. */
    ASSERT_EQ(weft_rwlock_try_rdlock(&l), -EBUSY);
    ASSERT_EQ(weft_rwlock_try_wrlock(&l), -EBUSY);
    scope_end(s);
    for (int i = 0; i < AO_N; i++) {
        ASSERT_EQ(r[i].rc, 0);
        ASSERT_EQ(r[i].at, ao_enter[i] * TICK);
        if (i > 0 && ao_enter[i] != ao_enter[i - 1])
            ASSERT(r[i].order > r[i - 1].order);
    }
    ASSERT_EQ(r[0].inside + r[1].inside, 3); /* 1 and 2: together */
    ASSERT_EQ(r[5].inside + r[6].inside, 3);
    ASSERT_EQ(r[3].inside, 1);
    ASSERT_EQ(weft_now(), 170 * TICK);
    assert_free(&l);
    return 0;
}

TEST(rwlock_arrival_order_and_reader_batches)
{
    run_seeds(order_root);
}

/* ---- a writer is not starved by overlapping readers -------------------- */

/* Readers arrive every 5 ticks and hold for 10, so at any moment one or
 * two hold the lock and it is never free. A writer arriving at tick 22
 * waits only for the two holding it then (entered at 15 and 20): it enters
 * at 30, and the readers arriving meanwhile wait behind it and enter
 * together when it leaves at 40. */
#define ST_N 20

static int starve_root(void *arg)
{
    (void)arg;
    weft_rwlock l = WEFT_RWLOCK_INIT;
    static struct rw r[ST_N];
    struct rw w;
    rw_reset();
    weft_scope *s = scope_open();
    for (int i = 0; i < ST_N; i++) {
        r[i] = (struct rw){.l = &l, .arrive = 5 * i, .hold = 10, .rc = 99};
        spawn(rw_task, &r[i]);
    }
    w = (struct rw){.l = &l, .write = 1, .arrive = 22, .hold = 10, .rc = 99};
    spawn(rw_task, &w);
    scope_end(s);
    ASSERT_EQ(w.rc, 0);
    ASSERT_EQ(w.at, 30 * TICK);
    for (int i = 0; i < ST_N; i++) {
        ASSERT_EQ(r[i].rc, 0);
        weft_time arrived = 5 * i * TICK;
        if (arrived < 22 * TICK) {
            ASSERT_EQ(r[i].at, arrived); /* before the writer: at once */
            ASSERT(r[i].order < w.order);
        } else if (arrived < 40 * TICK) {
            ASSERT_EQ(r[i].at, 40 * TICK); /* behind it, as one batch */
            ASSERT(r[i].order > w.order);
            ASSERT(r[i].inside >= 1 && r[i].inside <= 4);
        } else {
            ASSERT_EQ(r[i].at, arrived);
        }
    }
    assert_free(&l);
    return 0;
}

TEST(rwlock_writer_not_starved_by_readers)
{
    run_seeds(starve_root);
}

/* ---- timeouts leave nothing behind ------------------------------------- */

static int timeout_root(void *arg)
{
    (void)arg;
    weft_rwlock l = WEFT_RWLOCK_INIT;
    rw_reset();

    /* 1. A reader behind a writer times out exactly; the next reader,
     * without a deadline, enters when the writer leaves. */
    ASSERT_EQ(weft_rwlock_wrlock(&l), 0);
    struct rw a = {.l = &l, .arrive = 1, .hold = 1, .deadline = 5 * TICK};
    struct rw b = {.l = &l, .arrive = 2, .hold = 1};
    weft_scope *s = scope_open();
    spawn(rw_task, &a);
    spawn(rw_task, &b);
    ASSERT_EQ(weft_sleep_for(10 * TICK), 0);
    ASSERT_EQ(a.rc, -ETIMEDOUT);
    ASSERT_EQ(a.at, 5 * TICK);
    ASSERT_EQ(weft_rwlock_wrunlock(&l), 0);
    scope_end(s);
    ASSERT_EQ(b.rc, 0);
    ASSERT_EQ(b.at, 10 * TICK);
    assert_free(&l);

    /* 2. A writer at the head times out while readers hold the lock: the
     * readers queued behind it enter at that very moment. */
    weft_time t0 = weft_now(); /* 11 ticks */
    ASSERT_EQ(weft_rwlock_rdlock(&l), 0);
    struct rw w = {
        .l = &l, .write = 1, .arrive = 1, .hold = 1, .deadline = t0 + 5 * TICK};
    struct rw r1 = {.l = &l, .arrive = 2, .hold = 10};
    struct rw r2 = {.l = &l, .arrive = 3, .hold = 10, .deadline = WEFT_NEVER};
    s = scope_open();
    spawn(rw_task, &w);
    spawn(rw_task, &r1);
    spawn(rw_task, &r2);
    ASSERT_EQ(weft_sleep_for(4 * TICK), 0);
    ASSERT_EQ(weft_rwlock_try_rdlock(&l), -EBUSY); /* a writer waits */
    scope_end(s);
    ASSERT_EQ(w.rc, -ETIMEDOUT);
    ASSERT_EQ(w.at, t0 + 5 * TICK);
    ASSERT_EQ(r1.rc, 0);
    ASSERT_EQ(r1.at, t0 + 5 * TICK);
    ASSERT_EQ(r2.rc, 0);
    ASSERT_EQ(r2.at, t0 + 5 * TICK);
    ASSERT_EQ(weft_rwlock_try_wrlock(&l), -EBUSY); /* our read hold */
    ASSERT_EQ(weft_rwlock_rdunlock(&l), 0);
    assert_free(&l);

    /* 3. A writer behind a writer times out; a later writer gets it. */
    t0 = weft_now();
    ASSERT_EQ(weft_rwlock_wrlock(&l), 0);
    struct rw w1 = {
        .l = &l, .write = 1, .arrive = 1, .hold = 1, .deadline = t0 + 3 * TICK};
    struct rw w2 = {.l = &l,
                    .write = 1,
                    .arrive = 2,
                    .hold = 1,
                    .deadline = t0 + 100 * TICK};
    s = scope_open();
    spawn(rw_task, &w1);
    spawn(rw_task, &w2);
    ASSERT_EQ(weft_sleep_for(6 * TICK), 0);
    ASSERT_EQ(weft_rwlock_wrunlock(&l), 0);
    scope_end(s);
    ASSERT_EQ(w1.rc, -ETIMEDOUT);
    ASSERT_EQ(w1.at, t0 + 3 * TICK);
    ASSERT_EQ(w2.rc, 0);
    ASSERT_EQ(w2.at, t0 + 6 * TICK);
    ASSERT_EQ(weft_now(), t0 + 7 * TICK);

    /* 4. A deadline already past: at once, for both kinds, even first in
     * line; and a free lock is taken even with a past deadline. */
    t0 = weft_now();
    ASSERT_EQ(weft_rwlock_rdlock_until(&l, t0 - 1), 0);
    ASSERT_EQ(weft_rwlock_wrlock_until(&l, t0 - 1), -ETIMEDOUT);
    ASSERT_EQ(weft_rwlock_rdunlock(&l), 0);
    ASSERT_EQ(weft_rwlock_wrlock_until(&l, t0 - 1), 0);
    struct rw late = {.l = &l, .arrive = 0, .hold = 1, .deadline = t0};
    s = scope_open();
    spawn(rw_task, &late);
    scope_end(s);
    ASSERT_EQ(late.rc, -ETIMEDOUT);
    ASSERT_EQ(late.at, t0);
    ASSERT_EQ(weft_rwlock_wrunlock(&l), 0);
    assert_free(&l);
    ASSERT_EQ(weft_rwlock_destroy(&l), 0);
    return 0;
}

TEST(rwlock_timeouts_leave_nothing_behind)
{
    run_seeds(timeout_root);
}

/* ---- cancellation at every blocking point ------------------------------ */

static int cancel_root(void *arg)
{
    (void)arg;
    weft_rwlock l = WEFT_RWLOCK_INIT;
    rw_reset();

    /* 1. A writer at the head, waiting on readers, is cancelled: the
     * readers queued behind it enter at once. */
    ASSERT_EQ(weft_rwlock_rdlock(&l), 0);
    struct rw w = {.l = &l, .write = 1, .arrive = 1, .hold = 1};
    struct rw r1 = {.l = &l, .arrive = 2, .hold = 5};
    struct rw r2 = {.l = &l, .arrive = 3, .hold = 5};
    weft_scope *outer = scope_open();
    spawn(rw_task, &r1);
    spawn(rw_task, &r2);
    weft_scope *inner = scope_open();
    spawn(rw_task, &w);
    ASSERT_EQ(weft_sleep_for(4 * TICK), 0);
    ASSERT_EQ(atomic_load(&rw_readers_in), 0); /* held back by w */
    scope_cancel_end(inner);
    ASSERT_EQ(w.rc, -ECANCELED);
    ASSERT_EQ(w.at, 4 * TICK);
    ASSERT_EQ(weft_rwlock_rdunlock(&l), 0);
    scope_end(outer);
    ASSERT_EQ(r1.rc, 0);
    ASSERT_EQ(r1.at, 4 * TICK);
    ASSERT_EQ(r2.rc, 0);
    ASSERT_EQ(r2.at, 4 * TICK);
    assert_free(&l);

    /* 2. A reader waiting behind a writer, and a writer waiting behind a
     * writer, are cancelled; the ones behind them follow in order. */
    weft_time t0 = weft_now(); /* 9 ticks */
    rw_reset();
    ASSERT_EQ(weft_rwlock_wrlock(&l), 0);
    struct rw cr = {.l = &l, .arrive = 1, .hold = 1};
    struct rw cw = {.l = &l, .write = 1, .arrive = 2, .hold = 1};
    struct rw nw = {.l = &l, .write = 1, .arrive = 3, .hold = 1};
    struct rw nr = {.l = &l, .arrive = 4, .hold = 1};
    outer = scope_open();
    spawn(rw_task, &nw);
    spawn(rw_task, &nr);
    inner = scope_open();
    spawn(rw_task, &cr);
    spawn(rw_task, &cw);
    ASSERT_EQ(weft_sleep_for(5 * TICK), 0);
    scope_cancel_end(inner);
    ASSERT_EQ(cr.rc, -ECANCELED);
    ASSERT_EQ(cw.rc, -ECANCELED);
    ASSERT_EQ(cr.at, t0 + 5 * TICK);
    ASSERT_EQ(cw.at, t0 + 5 * TICK);
    /* Still write-held by us: nobody was let in. */
    ASSERT_EQ(atomic_load(&rw_next), 0);
    ASSERT_EQ(weft_sleep_for(TICK), 0);
    ASSERT_EQ(weft_rwlock_wrunlock(&l), 0);
    scope_end(outer);
    ASSERT_EQ(nw.rc, 0);
    ASSERT_EQ(nw.at, t0 + 6 * TICK);
    ASSERT_EQ(nr.rc, 0);
    ASSERT_EQ(nr.at, t0 + 7 * TICK);
    assert_free(&l);

    /* 3. In a cancelled scope every lock call fails at once, even on a free
     * lock, and takes nothing; the try calls still work. */
    weft_scope *sc = scope_open();
    ASSERT_EQ(weft_scope_cancel(sc), 0);
    t0 = weft_now();
    ASSERT_EQ(weft_rwlock_rdlock(&l), -ECANCELED);
    ASSERT_EQ(weft_rwlock_rdlock_until(&l, WEFT_NEVER), -ECANCELED);
    ASSERT_EQ(weft_rwlock_wrlock(&l), -ECANCELED);
    ASSERT_EQ(weft_rwlock_wrlock_until(&l, t0 + TICK), -ECANCELED);
    ASSERT_EQ(weft_now(), t0);
    ASSERT_EQ(weft_rwlock_rdunlock(&l), -EPERM);
    ASSERT_EQ(weft_rwlock_wrunlock(&l), -EPERM);
    ASSERT_EQ(weft_rwlock_try_rdlock(&l), 0);
    ASSERT_EQ(weft_rwlock_rdunlock(&l), 0);
    ASSERT_EQ(weft_rwlock_try_wrlock(&l), 0);
    ASSERT_EQ(weft_rwlock_wrunlock(&l), 0);
    ASSERT_EQ(weft_scope_join(sc), -ECANCELED);
    ASSERT_EQ(weft_scope_free(sc), 0);
    assert_free(&l);
    ASSERT_EQ(weft_rwlock_destroy(&l), 0);
    return 0;
}

TEST(rwlock_cancel_while_waiting)
{
    run_seeds(cancel_root);
}

/* ---- misuse, destroy, outside a task ----------------------------------- */

static int foreign_task(void *arg)
{
    weft_rwlock *l = arg;
    ASSERT_EQ(weft_rwlock_wrunlock(l), -EPERM); /* the root's, not ours */
    ASSERT_EQ(weft_rwlock_try_wrlock(l), -EBUSY);
    ASSERT_EQ(weft_rwlock_try_rdlock(l), -EBUSY);
    return 0;
}

static int misuse_root(void *arg)
{
    (void)arg;
    weft_rwlock l;
    memset(&l, 0, sizeof l); /* zeroed: ready */
    ASSERT_EQ(weft_rwlock_rdunlock(&l), -EPERM);
    ASSERT_EQ(weft_rwlock_wrunlock(&l), -EPERM);
    ASSERT_EQ(weft_rwlock_destroy(&l), 0);

    ASSERT_EQ(weft_rwlock_wrlock(&l), 0);
    weft_time t0 = weft_now();
    ASSERT_EQ(weft_rwlock_wrlock(&l), -EDEADLK);
    ASSERT_EQ(weft_rwlock_wrlock_until(&l, t0 + TICK), -EDEADLK);
    ASSERT_EQ(weft_rwlock_rdlock(&l), -EDEADLK);
    ASSERT_EQ(weft_rwlock_rdlock_until(&l, t0 + TICK), -EDEADLK);
    ASSERT_EQ(weft_now(), t0);
    ASSERT_EQ(weft_rwlock_try_wrlock(&l), -EBUSY);
    ASSERT_EQ(weft_rwlock_try_rdlock(&l), -EBUSY);
    ASSERT_EQ(weft_rwlock_rdunlock(&l), -EPERM); /* write-held: no reader */
    ASSERT_EQ(weft_rwlock_destroy(&l), -EBUSY);
    weft_scope *s = scope_open();
    spawn(foreign_task, &l);
    scope_end(s);
    ASSERT_EQ(weft_rwlock_wrunlock(&l), 0);
    ASSERT_EQ(weft_rwlock_wrunlock(&l), -EPERM);

    ASSERT_EQ(weft_rwlock_rdlock(&l), 0);
    ASSERT_EQ(weft_rwlock_wrunlock(&l), -EPERM); /* read-held */
    ASSERT_EQ(weft_rwlock_destroy(&l), -EBUSY);
    ASSERT_EQ(weft_rwlock_rdunlock(&l), 0);
    ASSERT_EQ(weft_rwlock_rdunlock(&l), -EPERM); /* count is 0 */

    /* Waited on: a writer waits behind our read hold. */
    ASSERT_EQ(weft_rwlock_rdlock(&l), 0);
    struct rw w = {.l = &l, .write = 1, .arrive = 1, .hold = 1};
    rw_reset();
    s = scope_open();
    spawn(rw_task, &w);
    ASSERT_EQ(weft_sleep_for(2 * TICK), 0);
    ASSERT_EQ(weft_rwlock_destroy(&l), -EBUSY);
    ASSERT_EQ(weft_rwlock_rdunlock(&l), 0);
    ASSERT_EQ(weft_rwlock_destroy(&l), -EBUSY); /* the writer has it */
    scope_end(s);
    ASSERT_EQ(w.rc, 0);
    ASSERT_EQ(weft_rwlock_destroy(&l), 0);
    assert_free(&l); /* destroyed: as new */

    ASSERT_EQ(weft_rwlock_rdlock(NULL), -EINVAL);
    ASSERT_EQ(weft_rwlock_rdlock_until(NULL, WEFT_NEVER), -EINVAL);
    ASSERT_EQ(weft_rwlock_try_rdlock(NULL), -EINVAL);
    ASSERT_EQ(weft_rwlock_rdunlock(NULL), -EINVAL);
    ASSERT_EQ(weft_rwlock_wrlock(NULL), -EINVAL);
    ASSERT_EQ(weft_rwlock_wrlock_until(NULL, WEFT_NEVER), -EINVAL);
    ASSERT_EQ(weft_rwlock_try_wrlock(NULL), -EINVAL);
    ASSERT_EQ(weft_rwlock_wrunlock(NULL), -EINVAL);
    ASSERT_EQ(weft_rwlock_destroy(NULL), -EINVAL);
    return 0;
}

TEST(rwlock_misuse_and_destroy)
{
    ASSERT_EQ(t_run_virtual(1, misuse_root, NULL), 0);
}

TEST(rwlock_outside_a_task_eperm)
{
    weft_rwlock l = WEFT_RWLOCK_INIT;
    ASSERT_EQ(weft_rwlock_rdlock(&l), -EPERM);
    ASSERT_EQ(weft_rwlock_rdlock_until(&l, WEFT_NEVER), -EPERM);
    ASSERT_EQ(weft_rwlock_try_rdlock(&l), -EPERM);
    ASSERT_EQ(weft_rwlock_rdunlock(&l), -EPERM);
    ASSERT_EQ(weft_rwlock_wrlock(&l), -EPERM);
    ASSERT_EQ(weft_rwlock_wrlock_until(&l, WEFT_NEVER), -EPERM);
    ASSERT_EQ(weft_rwlock_try_wrlock(&l), -EPERM);
    ASSERT_EQ(weft_rwlock_wrunlock(&l), -EPERM);
    ASSERT_EQ(weft_rwlock_destroy(&l), 0); /* any thread */
}

/* ---- exclusion and accounting under cross-worker stress ---------------- */

/* Tasks take the lock every way there is, with random short deadlines,
 * while a random one cancels the round. Invariants: a writer is alone (no
 * reader, no other writer), readers see a consistent pair, and at the end
 * nothing is held or queued. */
#define XS_TASKS 24

struct xs {
    weft_rwlock l;
    weft_scope *round;
    long threshold;
    atomic_long ops;
    atomic_int readers, writers;
    long a, b; /* written by writers under the lock; equal when read */
    atomic_long writes, reads, failed;
    atomic_long peak_readers;
    int64_t max_wait;
    uint64_t rng[XS_TASKS];
};

static struct xs *xs_cur;

static void xs_write(struct xs *x, uint64_t r)
{
    ASSERT_EQ(atomic_fetch_add(&x->writers, 1), 0);
    ASSERT_EQ(atomic_load(&x->readers), 0);
    long v = x->a + 1;
    x->a = v;
    if (r & 0x10000)
        ASSERT_EQ(weft_yield(), 0); /* hold it across a switch */
    x->b = v;
    atomic_fetch_add(&x->writes, 1);
    atomic_fetch_sub(&x->writers, 1);
    ASSERT_EQ(weft_rwlock_wrunlock(&x->l), 0);
}

static void xs_read(struct xs *x, uint64_t r)
{
    long n = atomic_fetch_add(&x->readers, 1) + 1;
    long peak = atomic_load(&x->peak_readers);
    while (n > peak &&
           !atomic_compare_exchange_weak(&x->peak_readers, &peak, n))
        ;
    ASSERT_EQ(atomic_load(&x->writers), 0);
    long a = x->a;
    if (r & 0x10000)
        ASSERT_EQ(weft_yield(), 0);
    ASSERT_EQ(x->b, a);
    atomic_fetch_add(&x->reads, 1);
    atomic_fetch_sub(&x->readers, 1);
    ASSERT_EQ(weft_rwlock_rdunlock(&x->l), 0);
}

static int xs_lock(struct xs *x, uint64_t r, int write)
{
    int64_t dl = weft_now() + (int64_t)((r >> 8) % (uint64_t)x->max_wait);
    switch ((r >> 4) % 3) {
    case 0:
        return write ? weft_rwlock_wrlock(&x->l) : weft_rwlock_rdlock(&x->l);
    case 1:
        return write ? weft_rwlock_try_wrlock(&x->l)
                     : weft_rwlock_try_rdlock(&x->l);
    default:
        return write ? weft_rwlock_wrlock_until(&x->l, dl)
                     : weft_rwlock_rdlock_until(&x->l, dl);
    }
}

static int xs_task(void *arg)
{
    uint64_t *rng = arg;
    struct xs *x = xs_cur;
    for (;;) {
        uint64_t r = rnd(rng);
        int write = r % 4 == 0;
        int rc = xs_lock(x, r, write);
        if (rc == 0) {
            if (write)
                xs_write(x, r);
            else
                xs_read(x, r);
        } else if (rc == -EBUSY) {
            ASSERT_EQ(weft_yield(), 0);
        } else if (rc == -ECANCELED || rc == -ETIMEDOUT) {
            atomic_fetch_add(&x->failed, 1);
        } else {
            T_FAIL("lock returned %d", rc);
        }
        if (atomic_fetch_add(&x->ops, 1) + 1 == x->threshold)
            ASSERT_EQ(weft_scope_cancel(x->round), 0);
        if (rc == -ECANCELED || weft_cancelled())
            return 0;
    }
}

static int xs_root(void *arg)
{
    struct xs *x = arg;
    int64_t budget = weft_workers() > 1 ? 20 * WEFT_MSEC : WEFT_SEC;
    uint64_t rng = 11;
    for (int round = 0; round < (int)T_SCALE(60); round++) {
        x->threshold = 1 + (long)(rnd(&rng) % 10000);
        atomic_store(&x->ops, 0);
        weft_scope_opts o = {.policy = WEFT_COLLECT,
                             .deadline = weft_now() + budget};
        ASSERT_EQ(weft_scope_open(&x->round, &o), 0);
        for (int i = 0; i < XS_TASKS; i++) {
            x->rng[i] = rnd(&rng);
            int rc = weft_spawn(x->round, xs_task, &x->rng[i]);
            ASSERT(rc >= 0 || rc == -ECANCELED);
        }
        int rc = weft_scope_join(x->round);
        ASSERT(rc == -ECANCELED || rc == -ETIMEDOUT);
        ASSERT_EQ(weft_scope_free(x->round), 0);
        /* Every round ends with the lock free and nobody queued. */
        ASSERT_EQ(weft_rwlock_destroy(&x->l), 0);
    }
    ASSERT_EQ(x->a, atomic_load(&x->writes));
    ASSERT_EQ(x->b, x->a);
    ASSERT_EQ(atomic_load(&x->readers), 0);
    ASSERT_EQ(atomic_load(&x->writers), 0);
    return 0;
}

static void run_xs(int workers, weft_clock_kind clock, uint64_t seed)
{
    static struct xs x;
    memset(&x, 0, sizeof x);
    x.max_wait = 30 * WEFT_USEC;
    xs_cur = &x;
    ASSERT_EQ(t_run(workers, clock, seed, xs_root, &x), 0);
    ASSERT(atomic_load(&x.writes) > 0);
    ASSERT(atomic_load(&x.reads) > 0);
    ASSERT(atomic_load(&x.failed) > 0);
    ASSERT(atomic_load(&x.peak_readers) >= 2); /* readers did share */
}

TEST(rwlock_exclusion_and_accounting_under_stress)
{
    run_xs(1, WEFT_CLOCK_VIRTUAL, T_SEED(9));
    run_xs(2, WEFT_CLOCK_MONOTONIC, 0);
    run_xs(4, WEFT_CLOCK_MONOTONIC, 0);
}
