/* SPDX-License-Identifier: MIT */
/*
 * Resource pools (weft_pool_*), on the virtual clock, under several
 * scheduling seeds and on two workers: what users of other pools reported
 * (bb8, deadpool, sqlx, HikariCP), each made impossible and checked here.
 * A cancelled acquire, at every point of its wait and of the hand-over,
 * holds nothing and loses no place; many resources returned broken at
 * once are replaced; a failing creation is the acquire's error at once,
 * and a timed-out one says what the last creation error was; creations
 * back off; idle timeout, max lifetime and leaks on the virtual clock;
 * FIFO across workers and no barging; the dump shows a pool wait; and a
 * stress run with random cancels and broken returns in which no resource
 * is ever held by two tasks.
 */
#include "t.h"
#include "weft.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MS WEFT_MSEC

/* ---- a fake server's connections ---- */

typedef struct res {
    atomic_long owner; /* the task that holds it (a test's own number), 0 */
    int id;
    int64_t born;
} res;

typedef struct server {
    atomic_int creates; /* create calls */
    atomic_int live;    /* resources not yet destroyed */
    atomic_int next_id;
    atomic_int fail;      /* create returns this (< 0), or 0 */
    int64_t create_ns;    /* a create sleeps this long (a connect) */
    atomic_int validates; /* validate calls */
    atomic_int invalid;   /* validate fails while set */
    atomic_int resets;
} server;

static server srv;

static int fake_create(void *ctx, void **out)
{
    server *s = ctx;
    atomic_fetch_add(&s->creates, 1);
    if (s->create_ns) {
        int rc = weft_sleep_for(s->create_ns);
        if (rc)
            return rc;
    }
    int f = atomic_load(&s->fail);
    if (f)
        return f;
    res *r = calloc(1, sizeof(*r));
    ASSERT(r);
    r->id = atomic_fetch_add(&s->next_id, 1) + 1;
    r->born = weft_now();
    atomic_fetch_add(&s->live, 1);
    *out = r;
    return 0;
}

static void fake_destroy(void *ctx, void *p)
{
    server *s = ctx;
    res *r = p;
    ASSERT_EQ(atomic_load(&r->owner), 0); /* nobody holds what is destroyed */
    atomic_fetch_sub(&s->live, 1);
    free(r);
}

static int fake_validate(void *ctx, void *p)
{
    (void)p;
    server *s = ctx;
    atomic_fetch_add(&s->validates, 1);
    return atomic_load(&s->invalid) ? -EIO : 0;
}

static int fake_reset(void *ctx, void *p)
{
    (void)p;
    atomic_fetch_add(&((server *)ctx)->resets, 1);
    return 0;
}

static weft_pool_opts base_opts(int max)
{
    memset(&srv, 0, sizeof srv);
    return (weft_pool_opts){.create = fake_create,
                            .destroy = fake_destroy,
                            .ctx = &srv,
                            .max_size = max,
                            .name = "db"};
}

static weft_pool *mk(const weft_pool_opts *o)
{
    weft_pool *p = NULL;
    ASSERT_EQ(weft_pool_new(&p, o), 0);
    ASSERT(p);
    return p;
}

static weft_pool_stats stats(weft_pool *p)
{
    weft_pool_stats st;
    ASSERT_EQ(weft_pool_stats_get(p, &st), 0);
    return st;
}

/* Nothing borrowed, made or waited for; what was made and destroyed
 * accounts for what exists; then closes and frees the pool. */
static void check_rest_and_free(weft_pool *p)
{
    weft_pool_stats st = stats(p);
    ASSERT_EQ(st.in_use, 0);
    ASSERT_EQ(st.waiting, 0);
    ASSERT_EQ(st.creating, 0);
    ASSERT_EQ(st.idle, st.size);
    ASSERT_EQ(st.created - st.destroyed, st.size);
    ASSERT_EQ(atomic_load(&srv.live), st.size);
    ASSERT_EQ(weft_pool_close(p, WEFT_NEVER), 0);
    st = stats(p);
    ASSERT_EQ(st.size, 0);
    ASSERT_EQ(atomic_load(&srv.live), 0);
    ASSERT_EQ(weft_pool_free(p), 0);
}

/* Borrows one with a deadline already past: 0 if one was free at once. */
static int try_now(weft_pool *p, void **r)
{
    return weft_pool_acquire(p, r, weft_now());
}

static void run_seeds(weft_fn fn)
{
    for (uint64_t seed = 1; seed <= 6; seed++)
        ASSERT_EQ(
            t_run(seed % 2 ? 1 : 2, WEFT_CLOCK_VIRTUAL, T_SEED(seed), fn, NULL),
            0);
}

/* ---- misuse and the plain path ---- */

static int basic_root(void *arg)
{
    (void)arg;
    weft_pool_opts o = base_opts(2);
    o.reset = fake_reset;
    weft_pool *p = mk(&o);
    void *a = NULL, *b = NULL, *c = NULL;
    ASSERT_EQ(weft_pool_acquire(p, &a, WEFT_NEVER), 0);
    ASSERT_EQ(weft_pool_acquire(p, &b, WEFT_NEVER), 0);
    ASSERT(a && b && a != b);
    ASSERT_EQ(try_now(p, &c), -ETIMEDOUT); /* full */
    weft_pool_stats st = stats(p);
    ASSERT_EQ(st.size, 2);
    ASSERT_EQ(st.in_use, 2);
    ASSERT_EQ(st.timeouts, 1);
    ASSERT_EQ(st.last_create_error, 0);
    ASSERT_EQ(weft_pool_free(p), -EBUSY);
    ASSERT_EQ(weft_pool_release(p, a), 0);
    ASSERT_EQ(weft_pool_release(p, a), -EINVAL);    /* not twice */
    ASSERT_EQ(weft_pool_release(p, &srv), -EINVAL); /* not one of ours */
    ASSERT_EQ(atomic_load(&srv.resets), 1);
    ASSERT_EQ(try_now(p, &c), 0);
    ASSERT(c == a); /* reused, not made again */
    ASSERT_EQ(atomic_load(&srv.creates), 2);
    ASSERT_EQ(weft_pool_release(p, c), 0);
    ASSERT_EQ(weft_pool_release(p, b), 0);
    st = stats(p);
    ASSERT_EQ(st.acquired, 3);
    ASSERT_EQ(st.idle, 2);
    check_rest_and_free(p);
    return 0;
}

TEST(pool_misuse_and_reuse)
{
    weft_pool *p = NULL;
    weft_pool_opts o = base_opts(2);
    ASSERT_EQ(weft_pool_new(NULL, &o), -EINVAL);
    ASSERT_EQ(weft_pool_new(&p, NULL), -EINVAL);
    o.create = NULL;
    ASSERT_EQ(weft_pool_new(&p, &o), -EINVAL);
    o = base_opts(2);
    o.min_size = 3;
    ASSERT_EQ(weft_pool_new(&p, &o), -EINVAL);
    o = base_opts(-1);
    ASSERT_EQ(weft_pool_new(&p, &o), -EINVAL);
    ASSERT(p == NULL);
    o = base_opts(0); /* the default size */
    p = mk(&o);
    void *r = NULL;
    ASSERT_EQ(weft_pool_acquire(p, &r, WEFT_NEVER), -EPERM); /* not a task */
    ASSERT_EQ(weft_pool_release(p, &srv), -EPERM);
    ASSERT_EQ(weft_pool_close(p, WEFT_NEVER), -EPERM);
    ASSERT_EQ(weft_pool_acquire(NULL, &r, WEFT_NEVER), -EINVAL);
    ASSERT_EQ(weft_pool_stats_get(NULL, NULL), -EINVAL);
    ASSERT_EQ(weft_pool_free(NULL), -EINVAL);
    ASSERT_EQ(weft_pool_free(p), 0); /* empty: no close needed */
    ASSERT_EQ(t_run_virtual(1, basic_root, NULL), 0);
}

/* ---- a cancel at every point leaks nothing ---- */

typedef struct waiter {
    weft_pool *p;
    int rc;
    void *got;
    bool hold_release; /* release what it got itself */
} waiter;

static int wait_one(void *arg)
{
    waiter *w = arg;
    w->rc = weft_pool_acquire(w->p, &w->got, WEFT_NEVER);
    if (w->rc == 0) {
        ASSERT(w->got);
        ASSERT_EQ(weft_pool_release(w->p, w->got), 0);
    }
    return 0;
}

/* Cancels at every point of a waiter's life: before it queues, while it
 * waits, in the same instant as the release that hands it the resource
 * (before and after the hand-over, on one worker and across two), while
 * it makes a new one (a create that connects for 10 ms), and after it
 * made one. After each, the pool has its one resource back, idle, and a
 * deadline already past gets it at once: a lost one would time out. */
static int cancel_root(void *arg)
{
    (void)arg;
    for (int mode = 0; mode < 2; mode++) {
        weft_pool_opts o = base_opts(1);
        weft_pool *p = mk(&o);
        srv.create_ns = mode ? 10 * MS : 0;
        for (int k = 0; k < 24; k++) {
            void *held = NULL;
            bool holding = !mode || k % 2;
            if (holding)
                ASSERT_EQ(weft_pool_acquire(p, &held, WEFT_NEVER), 0);
            else if (stats(p).size) { /* make it create: drop the one */
                ASSERT_EQ(weft_pool_acquire(p, &held, WEFT_NEVER), 0);
                ASSERT_EQ(weft_pool_release_broken(p, held), 0);
                held = NULL;
            }
            waiter w = {.p = p, .rc = 1};
            weft_task_handle h;
            weft_scope *s = scope_open();
            weft_spawn_opts so = {.handle = &h,
                                  .worker = 1 + (k / 2) % weft_workers()};
            ASSERT(weft_spawn_ex(NULL, wait_one, &w, &so) >= 0);
            /* k / 4 turns, or (create mode) k ms, before the cancel. */
            if (mode) {
                ASSERT_EQ(weft_sleep_for((k / 2) * MS), 0);
            } else {
                for (int y = 0; y < k / 4; y++)
                    weft_yield();
            }
            if (holding && k % 4 < 2) /* hand it over, then cancel */
                ASSERT_EQ(weft_pool_release(p, held), 0);
            ASSERT_EQ(weft_task_cancel(h), 0);
            if (holding && k % 4 >= 2) /* cancel, then hand it over */
                ASSERT_EQ(weft_pool_release(p, held), 0);
            ASSERT_EQ(weft_task_join(h, NULL), 0);
            scope_end(s);
            ASSERT(w.rc == 0 || w.rc == -ECANCELED);
            weft_pool_stats st = stats(p);
            ASSERT_EQ(st.in_use, 0);
            ASSERT_EQ(st.waiting, 0);
            ASSERT_EQ(st.creating, 0);
            ASSERT_EQ(st.created - st.destroyed, st.size);
            void *r = NULL;
            if (st.size) { /* the one resource is there, free */
                ASSERT_EQ(st.idle, 1);
                ASSERT_EQ(try_now(p, &r), 0);
                ASSERT_EQ(weft_pool_release(p, r), 0);
            } else { /* its place is free: made at once */
                ASSERT_EQ(weft_pool_acquire(p, &r, weft_now() + 20 * MS), 0);
                ASSERT_EQ(weft_pool_release(p, r), 0);
            }
        }
        check_rest_and_free(p);
    }
    return 0;
}

TEST(pool_cancel_at_every_point_leaks_nothing)
{
    run_seeds(cancel_root);
}

/* A waiter handed the resource and cancelled before it runs gives it to
 * the next waiter, in order: nothing stays borrowed by a task that has
 * gone. */
static int handed_root(void *arg)
{
    (void)arg;
    weft_pool_opts o = base_opts(1);
    weft_pool *p = mk(&o);
    void *held = NULL;
    ASSERT_EQ(weft_pool_acquire(p, &held, WEFT_NEVER), 0);
    waiter a = {.p = p, .rc = 1}, b = {.p = p, .rc = 1};
    weft_task_handle ha;
    weft_scope *s = scope_open();
    ASSERT(weft_spawn_ex(NULL, wait_one, &a,
                         &(weft_spawn_opts){.handle = &ha}) >= 0);
    while (stats(p).waiting < 1)
        weft_yield();
    spawn(wait_one, &b);
    while (stats(p).waiting < 2)
        weft_yield();
    /* One step, without a yield between: a is claimed and handed the
     * resource, then cancelled before it runs. */
    ASSERT_EQ(weft_pool_release(p, held), 0);
    ASSERT_EQ(weft_task_cancel(ha), 0);
    ASSERT_EQ(weft_task_join(ha, NULL), 0);
    scope_end(s);
    ASSERT_EQ(a.rc, -ECANCELED);
    ASSERT_EQ(b.rc, 0); /* passed on */
    ASSERT(b.got == held);
    check_rest_and_free(p);
    return 0;
}

TEST(pool_handed_over_then_cancelled_passes_it_on)
{
    ASSERT_EQ(t_run_virtual(1, handed_root, NULL), 0);
}

/* ---- many broken at once ---- */

#define BR_N 6

static int use_and_break(void *arg)
{
    waiter *w = arg;
    w->rc = weft_pool_acquire(w->p, &w->got, weft_now() + 50 * MS);
    if (w->rc == 0) {
        ASSERT_EQ(weft_sleep_for(MS), 0);
        ASSERT_EQ(weft_pool_release_broken(w->p, w->got), 0);
    }
    return 0;
}

static int broken_root(void *arg)
{
    (void)arg;
    weft_pool_opts o = base_opts(BR_N);
    weft_pool *p = mk(&o);
    void *r[BR_N];
    for (int i = 0; i < BR_N; i++)
        ASSERT_EQ(weft_pool_acquire(p, &r[i], WEFT_NEVER), 0);
    /* 3 * BR_N tasks queue for them; then every one is returned broken at
     * once, and each replacement breaks too. */
    waiter w[3 * BR_N];
    weft_scope *s = scope_open();
    for (int i = 0; i < 3 * BR_N; i++) {
        w[i] = (waiter){.p = p, .rc = 1};
        spawn_on(i, use_and_break, &w[i]);
    }
    while (stats(p).waiting < 3 * BR_N)
        weft_yield();
    for (int i = 0; i < BR_N; i++)
        ASSERT_EQ(weft_pool_release_broken(p, r[i]), 0);
    scope_end(s);
    for (int i = 0; i < 3 * BR_N; i++)
        ASSERT_EQ(w[i].rc, 0); /* replaced, never only timing out */
    weft_pool_stats st = stats(p);
    ASSERT_EQ(st.created, 4 * BR_N);
    ASSERT_EQ(st.destroyed, 4 * BR_N);
    ASSERT_EQ(st.size, 0);
    ASSERT_EQ(st.timeouts, 0);
    /* And it is usable. */
    void *x;
    ASSERT_EQ(weft_pool_acquire(p, &x, weft_now() + MS), 0);
    ASSERT_EQ(weft_pool_release(p, x), 0);
    check_rest_and_free(p);
    return 0;
}

TEST(pool_many_broken_at_once_are_replaced)
{
    run_seeds(broken_root);
}

/* A validate that fails destroys the idle one and makes another. */
static int validate_root(void *arg)
{
    (void)arg;
    weft_pool_opts o = base_opts(2);
    o.validate = fake_validate;
    weft_pool *p = mk(&o);
    void *a, *b;
    ASSERT_EQ(weft_pool_acquire(p, &a, WEFT_NEVER), 0);
    ASSERT_EQ(atomic_load(&srv.validates), 0); /* new: not validated */
    ASSERT_EQ(weft_pool_release(p, a), 0);
    ASSERT_EQ(weft_pool_acquire(p, &b, WEFT_NEVER), 0);
    ASSERT(a == b);
    ASSERT_EQ(atomic_load(&srv.validates), 1);
    ASSERT_EQ(weft_pool_release(p, b), 0);
    atomic_store(&srv.invalid, 1);
    ASSERT_EQ(weft_pool_acquire(p, &b, WEFT_NEVER), 0);
    ASSERT_EQ(((res *)b)->id, 2);
    weft_pool_stats st = stats(p);
    ASSERT_EQ(st.destroyed, 1);
    ASSERT_EQ(st.created, 2);
    ASSERT_EQ(weft_pool_release(p, b), 0);
    check_rest_and_free(p);
    return 0;
}

TEST(pool_validate_replaces_a_bad_one)
{
    ASSERT_EQ(t_run_virtual(1, validate_root, NULL), 0);
}

/* ---- creation errors ---- */

static int fail_now_root(void *arg)
{
    (void)arg;
    weft_pool_opts o = base_opts(1);
    weft_retry bo = {.base_ns = 100 * MS, .cap_ns = 1000 * MS};
    o.backoff = &bo;
    weft_pool *p = mk(&o);
    atomic_store(&srv.fail, -ECONNREFUSED);
    void *r = NULL;
    weft_time t0 = weft_now();
    /* The create's error, at once, not at the deadline. */
    ASSERT_EQ(weft_pool_acquire(p, &r, t0 + 10 * WEFT_SEC), -ECONNREFUSED);
    ASSERT_EQ(weft_now(), t0);
    weft_pool_stats st = stats(p);
    ASSERT_EQ(st.create_failures, 1);
    ASSERT_EQ(st.last_create_error, -ECONNREFUSED);
    ASSERT_EQ(st.size, 0);
    /* Within the backoff, a deadline that comes first: the wait ends at
     * the deadline and says why (the last creation's error). */
    ASSERT_EQ(weft_pool_acquire(p, &r, t0 + 50 * MS), -ECONNREFUSED);
    ASSERT_EQ(weft_now(), t0 + 50 * MS);
    ASSERT_EQ(atomic_load(&srv.creates), 1); /* not tried in the backoff */
    ASSERT_EQ(stats(p).timeouts, 1);
    /* A longer deadline: the next try at the backoff's end, failing at
     * once again. */
    ASSERT_EQ(weft_pool_acquire(p, &r, t0 + 10 * WEFT_SEC), -ECONNREFUSED);
    ASSERT_EQ(weft_now(), t0 + 100 * MS);
    ASSERT_EQ(atomic_load(&srv.creates), 2);
    /* The server is back: the next try (after 200 ms more) succeeds. */
    atomic_store(&srv.fail, 0);
    ASSERT_EQ(weft_pool_acquire(p, &r, t0 + 10 * WEFT_SEC), 0);
    ASSERT_EQ(weft_now(), t0 + 300 * MS);
    st = stats(p);
    ASSERT_EQ(st.last_create_error, 0);
    ASSERT_EQ(weft_pool_release(p, r), 0);
    /* A waiter whose place frees up and whose create fails gets the
     * error at once too. */
    void *held;
    ASSERT_EQ(weft_pool_acquire(p, &held, WEFT_NEVER), 0);
    waiter w = {.p = p, .rc = 1};
    weft_scope *s = scope_open();
    spawn(wait_one, &w);
    while (stats(p).waiting < 1)
        weft_yield();
    atomic_store(&srv.fail, -EHOSTUNREACH);
    weft_time t1 = weft_now();
    ASSERT_EQ(weft_pool_release_broken(p, held), 0);
    scope_end(s);
    ASSERT_EQ(w.rc, -EHOSTUNREACH);
    ASSERT_EQ(weft_now(), t1);
    atomic_store(&srv.fail, 0);
    check_rest_and_free(p);
    return 0;
}

TEST(pool_create_error_is_the_acquires_at_once)
{
    ASSERT_EQ(t_run_virtual(1, fail_now_root, NULL), 0);
    ASSERT_EQ(t_run_virtual(2, fail_now_root, NULL), 0);
}

/* 8 tasks asking in a loop for 10 virtual seconds from a dead server:
 * creates are spaced by the backoff (100, 200, 400, 800 ms, then the
 * 1 s cap), one at a time, not once per ask. */
typedef struct hammer {
    weft_pool *p;
    weft_time until;
    int errors, others;
} hammer;

static int hammer_task(void *arg)
{
    hammer *h = arg;
    while (weft_now() < h->until) {
        void *r;
        int rc = weft_pool_acquire(h->p, &r, h->until);
        if (rc == -ECONNREFUSED)
            h->errors++;
        else
            h->others++;
    }
    return 0;
}

static int backoff_root(void *arg)
{
    int workers = *(int *)arg;
    weft_pool_opts o = base_opts(4);
    weft_retry bo = {.base_ns = 100 * MS, .cap_ns = 1000 * MS};
    o.backoff = &bo;
    weft_pool *p = mk(&o);
    atomic_store(&srv.fail, -ECONNREFUSED);
    weft_time t0 = weft_now();
    hammer h[8];
    weft_scope *s = scope_open();
    for (int i = 0; i < 8; i++) {
        h[i] = (hammer){.p = p, .until = t0 + 10 * WEFT_SEC};
        spawn_on(i, hammer_task, &h[i]);
    }
    scope_end(s);
    /* At 0, 0.1, 0.3, 0.7, 1.5, then every second: 2.5 ... 9.5. On two
     * workers, the first creations at 0 may run side by side (nothing has
     * failed yet), one per worker. */
    int creates = atomic_load(&srv.creates);
    if (workers == 1)
        ASSERT_EQ(creates, 13);
    else
        ASSERT(creates >= 11 && creates <= 14);
    int errors = 0;
    for (int i = 0; i < 8; i++) {
        errors += h[i].errors;
        ASSERT_EQ(h[i].others, 0);
    }
    /* Every ask ended with the server's error: each creation's at once,
     * and the 8 waiting at the end at their deadline, told why. */
    ASSERT_EQ(errors, creates + 8);
    weft_pool_stats st = stats(p);
    ASSERT_EQ(st.create_failures, creates);
    ASSERT_EQ(st.size, 0);
    atomic_store(&srv.fail, 0);
    check_rest_and_free(p);
    return 0;
}

TEST(pool_creation_failures_back_off)
{
    int one = 1, two = 2;
    ASSERT_EQ(t_run_virtual(1, backoff_root, &one), 0);
    ASSERT_EQ(t_run_virtual(2, backoff_root, &two), 0);
}

/* ---- idle timeout, max lifetime ---- */

static int idle_root(void *arg)
{
    (void)arg;
    weft_pool_opts o = base_opts(4);
    o.idle_timeout_ns = WEFT_SEC;
    o.min_size = 1;
    weft_pool *p = mk(&o);
    void *r[3];
    for (int i = 0; i < 3; i++)
        ASSERT_EQ(weft_pool_acquire(p, &r[i], WEFT_NEVER), 0);
    for (int i = 0; i < 3; i++)
        ASSERT_EQ(weft_pool_release(p, r[i]), 0);
    ASSERT_EQ(weft_sleep_for(999 * MS), 0);
    void *x;
    ASSERT_EQ(try_now(p, &x), 0); /* not yet idle long enough */
    ASSERT_EQ(weft_pool_release(p, x), 0);
    ASSERT_EQ(stats(p).destroyed, 0);
    ASSERT_EQ(weft_sleep_for(MS), 0); /* 1 s for the two others */
    ASSERT_EQ(try_now(p, &x), 0);
    weft_pool_stats st = stats(p);
    ASSERT_EQ(st.destroyed, 2);
    ASSERT_EQ(st.size, 1);
    ASSERT_EQ(weft_pool_release(p, x), 0);
    ASSERT_EQ(weft_sleep_for(10 * WEFT_SEC), 0);
    ASSERT_EQ(try_now(p, &x), 0); /* min_size 1: kept */
    ASSERT_EQ(stats(p).destroyed, 2);
    ASSERT_EQ(weft_pool_release(p, x), 0);
    check_rest_and_free(p);
    return 0;
}

TEST(pool_idle_timeout)
{
    ASSERT_EQ(t_run_virtual(1, idle_root, NULL), 0);
}

static int lifetime_root(void *arg)
{
    (void)arg;
    weft_pool_opts o = base_opts(2);
    o.max_lifetime_ns = 5 * WEFT_SEC;
    weft_pool *p = mk(&o);
    weft_time t0 = weft_now();
    for (int s = 0; s < 12; s++) {
        void *x;
        ASSERT_EQ(weft_pool_acquire(p, &x, WEFT_NEVER), 0);
        res *r = x;
        ASSERT(weft_now() - r->born < 5 * WEFT_SEC);
        ASSERT_EQ(r->id, 1 + s / 5); /* a new one every 5 s */
        ASSERT_EQ(weft_sleep_until(t0 + (s + 1) * WEFT_SEC), 0);
        ASSERT_EQ(weft_pool_release(p, x), 0); /* at 5 s: destroyed */
    }
    ASSERT_EQ(stats(p).destroyed, 2);
    check_rest_and_free(p);
    return 0;
}

TEST(pool_max_lifetime)
{
    ASSERT_EQ(t_run_virtual(1, lifetime_root, NULL), 0);
}

/* ---- leaks ---- */

static weft_pool_leak_info leak_seen;
static char leak_name[32], leak_file[128];
static atomic_int leak_count;
static int leak_line;

static void on_leak(const weft_pool_leak_info *i, void *ctx)
{
    (void)ctx;
    leak_seen = *i;
    snprintf(leak_name, sizeof leak_name, "%s", i->task_name);
    snprintf(leak_file, sizeof leak_file, "%s", i->file);
    atomic_fetch_add(&leak_count, 1);
}

static int leaker(void *arg)
{
    weft_pool *p = arg;
    void *r;
    leak_line = __LINE__ + 1;
    ASSERT_EQ(weft_pool_acquire(p, &r, WEFT_NEVER), 0);
    ASSERT_EQ(weft_sleep_for(5 * WEFT_SEC), 0);
    ASSERT_EQ(weft_pool_release(p, r), 0);
    return 0;
}

static int leak_root(void *arg)
{
    (void)arg;
    weft_pool_opts o = base_opts(2);
    o.leak_threshold_ns = 2 * WEFT_SEC;
    o.on_leak = on_leak;
    weft_pool *p = mk(&o);
    atomic_store(&leak_count, 0);
    weft_time t0 = weft_now();
    weft_scope *s = scope_open();
    ASSERT(weft_spawn_ex(NULL, leaker, p,
                         &(weft_spawn_opts){.name = "holder"}) >= 0);
    ASSERT_EQ(weft_sleep_until(t0 + 1999 * MS), 0);
    stats(p);
    ASSERT_EQ(atomic_load(&leak_count), 0);
    ASSERT_EQ(weft_sleep_until(t0 + 2 * WEFT_SEC), 0);
    stats(p);
    ASSERT_EQ(atomic_load(&leak_count), 1);
    ASSERT_EQ(strcmp(leak_seen.pool, "db"), 0);
    ASSERT_EQ(strcmp(leak_name, "holder"), 0);
    ASSERT(leak_seen.task_id != 0);
    ASSERT(strstr(leak_file, "test_pool.c") != NULL);
    ASSERT_EQ(leak_seen.line, leak_line);
    ASSERT_EQ(leak_seen.since, t0);
    ASSERT_EQ(leak_seen.held_ns, 2 * WEFT_SEC);
    /* Once: later looks (stats, an acquire) say nothing more. */
    ASSERT_EQ(weft_sleep_until(t0 + 3 * WEFT_SEC), 0);
    stats(p);
    void *x;
    ASSERT_EQ(weft_pool_acquire(p, &x, WEFT_NEVER), 0);
    ASSERT_EQ(weft_pool_release(p, x), 0);
    ASSERT_EQ(atomic_load(&leak_count), 1);
    scope_end(s);
    ASSERT_EQ(stats(p).leaks, 1);
    check_rest_and_free(p);
    return 0;
}

TEST(pool_leak_reported_once_with_holder_and_site)
{
    ASSERT_EQ(t_run_virtual(1, leak_root, NULL), 0);
}

/* Without on_leak: one line on stderr, naming the pool, the task, and the
 * file and line of the acquire. */
static int leak_line_root(void *arg)
{
    (void)arg;
    weft_pool_opts o = base_opts(1);
    o.leak_threshold_ns = WEFT_SEC;
    weft_pool *p = mk(&o);
    weft_scope *s = scope_open();
    ASSERT(weft_spawn_ex(NULL, leaker, p,
                         &(weft_spawn_opts){.name = "holder"}) >= 0);
    ASSERT_EQ(weft_sleep_for(2 * WEFT_SEC), 0);
    stats(p);
    stats(p);
    scope_end(s);
    check_rest_and_free(p);
    return 0;
}

TEST(pool_leak_default_report_on_stderr)
{
    FILE *f = tmpfile();
    ASSERT(f);
    fflush(stderr);
    int saved = dup(2);
    ASSERT(saved >= 0 && dup2(fileno(f), 2) == 2);
    int rc = t_run_virtual(1, leak_line_root, NULL);
    fflush(stderr);
    ASSERT(dup2(saved, 2) == 2);
    close(saved);
    ASSERT_EQ(rc, 0);
    static char err[4096];
    ASSERT_EQ(fseek(f, 0, SEEK_SET), 0);
    size_t n = fread(err, 1, sizeof err - 1, f);
    err[n] = 0;
    fclose(f);
    char site[64];
    snprintf(site, sizeof site, "test_pool.c:%d", leak_line);
    const char *hit = strstr(err, "pool \"db\"");
    if (!hit || !strstr(hit, " holder,") || !strstr(hit, site) ||
        strstr(hit + 1, "pool \"db\""))
        T_FAIL("not one leak line naming the pool, task and site:\n%s", err);
}

/* ---- fairness ---- */

#define FQ_N 24

static atomic_int served;

typedef struct fair {
    weft_pool *p;
    int order;
} fair;

static int fair_task(void *arg)
{
    fair *f = arg;
    void *r;
    ASSERT_EQ(weft_pool_acquire(f->p, &r, WEFT_NEVER), 0);
    f->order = atomic_fetch_add(&served, 1);
    weft_yield();
    ASSERT_EQ(weft_pool_release(f->p, r), 0);
    return 0;
}

/* Waiters spread over two workers, queued one after another, are served
 * in the order they queued: with one resource, each gets it from the
 * release of the one before, so the order they note is the grant order. */
static int fifo_root(void *arg)
{
    (void)arg;
    weft_pool_opts o = base_opts(1);
    weft_pool *p = mk(&o);
    atomic_store(&served, 0);
    void *a;
    ASSERT_EQ(weft_pool_acquire(p, &a, WEFT_NEVER), 0);
    fair f[FQ_N];
    weft_scope *s = scope_open();
    for (int i = 0; i < FQ_N; i++) {
        f[i] = (fair){.p = p, .order = -1};
        spawn_on(i * 7 / 3, fair_task, &f[i]);
        while (stats(p).waiting < i + 1)
            weft_yield();
    }
    ASSERT_EQ(weft_pool_release(p, a), 0);
    scope_end(s);
    for (int i = 0; i < FQ_N; i++)
        ASSERT_EQ(f[i].order, i);
    check_rest_and_free(p);
    return 0;
}

TEST(pool_fifo_across_two_workers)
{
    for (uint64_t seed = 1; seed <= 4; seed++)
        ASSERT_EQ(t_run(2, WEFT_CLOCK_VIRTUAL, T_SEED(seed), fifo_root, NULL),
                  0);
}

/* A task that holds the resource 1 ms at a time and asks again the moment
 * it gives it back cannot keep it from one that waits: the release hands
 * it to the waiter (a pool that let the running task take it back would
 * starve the waiter for good here). */
typedef struct greedy {
    weft_pool *p;
    atomic_int rounds;
    atomic_int stop;
} greedy;

static int greedy_task(void *arg)
{
    greedy *g = arg;
    while (!atomic_load(&g->stop)) {
        void *r;
        ASSERT_EQ(weft_pool_acquire(g->p, &r, WEFT_NEVER), 0);
        atomic_fetch_add(&g->rounds, 1);
        ASSERT_EQ(weft_sleep_for(MS), 0);
        ASSERT_EQ(weft_pool_release(g->p, r), 0);
    }
    return 0;
}

typedef struct patient {
    weft_pool *p;
    greedy *g;
    int64_t longest;
} patient;

static int patient_task(void *arg)
{
    patient *pt = arg;
    while (atomic_load(&pt->g->rounds) == 0) /* the greedy one holds it */
        weft_yield();
    for (int i = 0; i < 50; i++) {
        weft_time t = weft_now();
        void *r;
        ASSERT_EQ(weft_pool_acquire(pt->p, &r, WEFT_NEVER), 0);
        if (weft_now() - t > pt->longest)
            pt->longest = weft_now() - t;
        ASSERT_EQ(weft_pool_release(pt->p, r), 0);
        ASSERT_EQ(weft_sleep_for(MS / 3), 0);
    }
    atomic_store(&pt->g->stop, 1);
    return 0;
}

static int starve_root(void *arg)
{
    (void)arg;
    weft_pool_opts o = base_opts(1);
    weft_pool *p = mk(&o);
    greedy g = {.p = p};
    patient pt = {.p = p, .g = &g};
    weft_scope *s = scope_open();
    spawn_on(0, greedy_task, &g);
    spawn_on(1, patient_task, &pt);
    scope_end(s);
    /* Never longer than the greedy task's one hold in progress. */
    ASSERT(pt.longest <= MS);
    ASSERT(atomic_load(&g.rounds) >= 50);
    check_rest_and_free(p);
    return 0;
}

TEST(pool_no_starvation)
{
    run_seeds(starve_root);
}

/* ---- close ---- */

static int close_root(void *arg)
{
    (void)arg;
    weft_pool_opts o = base_opts(1);
    weft_pool *p = mk(&o);
    void *held;
    ASSERT_EQ(weft_pool_acquire(p, &held, WEFT_NEVER), 0);
    waiter w = {.p = p, .rc = 1};
    weft_scope *s = scope_open();
    spawn(wait_one, &w);
    while (stats(p).waiting < 1)
        weft_yield();
    weft_time t0 = weft_now();
    ASSERT_EQ(weft_pool_close(p, t0 + WEFT_SEC), -ETIMEDOUT); /* borrowed */
    scope_end(s);
    ASSERT_EQ(w.rc, -ESHUTDOWN);
    void *x;
    ASSERT_EQ(weft_pool_acquire(p, &x, WEFT_NEVER), -ESHUTDOWN);
    ASSERT_EQ(weft_pool_free(p), -EBUSY);
    ASSERT_EQ(weft_pool_release(p, held), 0); /* destroyed */
    ASSERT_EQ(atomic_load(&srv.live), 0);
    ASSERT_EQ(weft_pool_close(p, WEFT_NEVER), 0);
    ASSERT_EQ(weft_pool_free(p), 0);
    return 0;
}

TEST(pool_close_waits_for_the_borrowed)
{
    ASSERT_EQ(t_run_virtual(1, close_root, NULL), 0);
}

/* ---- the dump ---- */

static int dump_root(void *arg)
{
    (void)arg;
    weft_pool_opts o = base_opts(1);
    weft_pool *p = mk(&o);
    void *held;
    ASSERT_EQ(weft_pool_acquire(p, &held, WEFT_NEVER), 0);
    waiter w = {.p = p, .rc = 1};
    weft_scope *s = scope_open();
    ASSERT(weft_spawn_ex(NULL, wait_one, &w,
                         &(weft_spawn_opts){.name = "asker"}) >= 0);
    while (stats(p).waiting < 1)
        weft_yield();
    FILE *f = tmpfile();
    ASSERT(f);
    ASSERT_EQ(weft_dump(fileno(f), 0), 0);
    ASSERT_EQ(fseek(f, 0, SEEK_SET), 0);
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    const char *line = strstr(buf, "asker");
    ASSERT(line != NULL);
    const char *end = strchr(line, '\n');
    ASSERT(end != NULL);
    const char *on = strstr(line, "on pool ");
    ASSERT(on != NULL && on < end);
    const char *name = strstr(line, "\"db\"");
    ASSERT(name != NULL && name < end);
    /* The JSON dump names the pool too. */
    f = tmpfile();
    ASSERT(f);
    ASSERT_EQ(weft_dump(fileno(f), WEFT_DUMP_JSON), 0);
    ASSERT_EQ(fseek(f, 0, SEEK_SET), 0);
    n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    ASSERT(strstr(buf, "\"kind\":\"pool\"") != NULL);
    ASSERT(strstr(buf, "\"pool\":\"db\"") != NULL);
    ASSERT_EQ(weft_pool_release(p, held), 0);
    scope_end(s);
    ASSERT_EQ(w.rc, 0);
    check_rest_and_free(p);
    return 0;
}

TEST(pool_wait_in_the_dump)
{
    ASSERT_EQ(t_run_virtual(1, dump_root, NULL), 0);
}

/* ---- stress ---- */

#define ST_TASKS 64
#define ST_SIZE 8

typedef struct stress {
    weft_pool *p;
    atomic_long ops, got, timed_out, cancelled, broken;
    atomic_long bad;
} stress;

typedef struct op {
    stress *st;
    long me;
    uint64_t rng;
} op;

static int op_task(void *arg)
{
    op *o = arg;
    stress *st = o->st;
    void *x = NULL;
    int rc = weft_pool_acquire(st->p, &x, weft_now() + (rnd(&o->rng) % 4) * MS);
    if (rc == 0) {
        res *r = x;
        long zero = 0;
        if (!atomic_compare_exchange_strong(&r->owner, &zero, o->me))
            atomic_fetch_add(&st->bad, 1); /* held by two */
        atomic_fetch_add(&st->got, 1);
        if (rnd(&o->rng) % 2)
            weft_yield();
        else
            weft_sleep_for((int64_t)(rnd(&o->rng) % 3) * MS / 2);
        zero = o->me;
        if (!atomic_compare_exchange_strong(&r->owner, &zero, 0))
            atomic_fetch_add(&st->bad, 1);
        if (rnd(&o->rng) % 8 == 0) {
            atomic_fetch_add(&st->broken, 1);
            ASSERT_EQ(weft_pool_release_broken(st->p, x), 0);
        } else {
            ASSERT_EQ(weft_pool_release(st->p, x), 0);
        }
    } else if (rc == -ETIMEDOUT) {
        atomic_fetch_add(&st->timed_out, 1);
    } else if (rc == -ECANCELED) {
        atomic_fetch_add(&st->cancelled, 1);
    } else {
        atomic_fetch_add(&st->bad, 1); /* no other code is possible here */
    }
    return 0;
}

typedef struct driver {
    stress *st;
    long id;
    long n;
    uint64_t seed;
} driver;

static int driver_task(void *arg)
{
    driver *d = arg;
    uint64_t rng = d->seed;
    for (long i = 0; i < d->n; i++) {
        op o = {.st = d->st, .me = d->id * 1000000 + i + 1, .rng = rnd(&rng)};
        weft_task_handle h;
        ASSERT(weft_spawn_ex(NULL, op_task, &o,
                             &(weft_spawn_opts){.handle = &h}) >= 0);
        /* A few turns, or half milliseconds: the holders give back on the
         * same half-millisecond marks, so some cancels land between a
         * hand-over and the moment its waiter runs. */
        int y = (int)(rnd(&rng) % 6);
        if (y < 4)
            for (int k = 0; k < y; k++)
                weft_yield();
        else
            weft_sleep_for((y - 3) * MS / 2);
        if (rnd(&rng) % 4 == 0)
            ASSERT_EQ(weft_task_cancel(h), 0);
        ASSERT_EQ(weft_task_join(h, NULL), 0);
        atomic_fetch_add(&d->st->ops, 1);
    }
    return 0;
}

static int stress_root(void *arg)
{
    (void)arg;
    weft_pool_opts o = base_opts(ST_SIZE);
    srv.create_ns = MS / 4;
    weft_pool *p = mk(&o);
    static stress st;
    memset(&st, 0, sizeof st);
    st.p = p;
    long total = T_SCALE(10000);
    driver d[ST_TASKS];
    weft_scope *s = scope_open();
    for (int i = 0; i < ST_TASKS; i++) {
        d[i] = (driver){.st = &st,
                        .id = i + 1,
                        .n = total / ST_TASKS + (i < total % ST_TASKS),
                        .seed = weft_seed() * 31 + (uint64_t)i};
        spawn_on(i, driver_task, &d[i]);
    }
    scope_end(s);
    ASSERT_EQ(atomic_load(&st.ops), total);
    ASSERT_EQ(atomic_load(&st.bad), 0);
    ASSERT_EQ(atomic_load(&st.got) + atomic_load(&st.timed_out) +
                  atomic_load(&st.cancelled),
              total);
    ASSERT(atomic_load(&st.got) > total / 4);
    ASSERT(atomic_load(&st.cancelled) > 0);
    weft_pool_stats ps = stats(p);
    ASSERT(ps.size <= ST_SIZE);
    ASSERT_EQ(ps.acquired, atomic_load(&st.got));
    ASSERT_EQ(ps.created - ps.destroyed, ps.size);
    ASSERT(ps.destroyed >= atomic_load(&st.broken));
    check_rest_and_free(p);
    return 0;
}

TEST(pool_stress_cancels_and_broken)
{
    ASSERT_EQ(t_run(2, WEFT_CLOCK_VIRTUAL, T_SEED(7), stress_root, NULL), 0);
}

/* ---- the deadlock detector ---- */

/* A task holds the pool's one resource and asks for one more, with no
 * deadline: nobody can ever give one back. Every task is asleep, and the
 * detector says so, naming the pool wait; the root's cancel then ends the
 * acquire, and the task gives back what it holds. */
static int greedy_twice(void *arg)
{
    weft_pool *p = arg;
    void *a, *b;
    ASSERT_EQ(weft_pool_acquire(p, &a, WEFT_NEVER), 0);
    int rc = weft_pool_acquire(p, &b, WEFT_NEVER);
    ASSERT_EQ(weft_pool_release(p, a), 0);
    return rc;
}

static int deadlock_root(void *arg)
{
    weft_pool **pp = arg;
    weft_scope *s = scope_open();
    ASSERT(weft_spawn_ex(s, greedy_twice, *pp,
                         &(weft_spawn_opts){.name = "asks twice"}) >= 0);
    int rc = weft_scope_join(s);
    weft_scope_free(s);
    ASSERT_EQ(weft_pool_close(*pp, WEFT_NEVER), 0);
    return rc;
}

TEST(pool_wait_counts_for_the_deadlock_detector)
{
    for (int workers = 1; workers <= 2; workers++) {
        weft_pool_opts o = base_opts(1);
        weft_pool *p = mk(&o);
        weft_config cfg = {.workers = workers,
                           .clock = WEFT_CLOCK_VIRTUAL,
                           .deadlock_grace_ns = 20 * WEFT_MSEC};
        FILE *f = tmpfile();
        ASSERT(f);
        fflush(stderr);
        int saved = dup(2);
        ASSERT(saved >= 0);
        if (!getenv("T_SHOW_REPORT"))
            ASSERT(dup2(fileno(f), 2) == 2);
        int rc = weft_run(&cfg, deadlock_root, &p);
        fflush(stderr);
        ASSERT(dup2(saved, 2) == 2);
        close(saved);
        ASSERT_EQ(rc, -EDEADLK);
        static char err[1 << 16];
        ASSERT_EQ(fseek(f, 0, SEEK_SET), 0);
        size_t n = fread(err, 1, sizeof err - 1, f);
        err[n] = 0;
        fclose(f);
        if (!strstr(err, "\"asks twice\"") || !strstr(err, "waits for pool"))
            T_FAIL("report without the pool wait:\n%s", err);
        ASSERT_EQ(atomic_load(&srv.live), 0);
        ASSERT_EQ(weft_pool_free(p), 0);
    }
}

/* ---- filling to min_size ---- */

static int fill_main(void *arg)
{
    (void)arg;
    weft_pool_opts o = base_opts(5);
    o.min_size = 3;
    o.idle_timeout_ns = 100 * MS;
    weft_pool *p = mk(&o);
    ASSERT_EQ(weft_pool_fill(p, WEFT_NEVER), 0);
    weft_pool_stats st = stats(p);
    ASSERT_EQ(st.size, 3);
    ASSERT_EQ(st.idle, 3);
    ASSERT_EQ(st.created, 3);
    ASSERT_EQ(weft_pool_fill(p, WEFT_NEVER), 0); /* full already */
    ASSERT_EQ(stats(p).created, 3);
    /* Borrowed ones count: one out, the pool is still full. */
    void *r = NULL;
    ASSERT_EQ(weft_pool_acquire(p, &r, WEFT_NEVER), 0);
    ASSERT_EQ(weft_pool_fill(p, WEFT_NEVER), 0);
    ASSERT_EQ(stats(p).created, 3);
    ASSERT_EQ(weft_pool_release(p, r), 0);
    /* The idle timeout keeps min_size. */
    ASSERT_EQ(weft_sleep_for(200 * MS), 0);
    ASSERT_EQ(stats(p).size, 3);
    /* One broken: the next fill makes it again. */
    ASSERT_EQ(weft_pool_acquire(p, &r, WEFT_NEVER), 0);
    ASSERT_EQ(weft_pool_release_broken(p, r), 0);
    ASSERT_EQ(stats(p).size, 2);
    ASSERT_EQ(weft_pool_fill(p, WEFT_NEVER), 0);
    ASSERT_EQ(stats(p).size, 3);
    check_rest_and_free(p);

    /* A creation that fails: its error, and what was made stays. */
    o = base_opts(5);
    o.min_size = 3;
    p = mk(&o);
    ASSERT_EQ(weft_pool_acquire(p, &r, WEFT_NEVER), 0);
    ASSERT_EQ(weft_pool_release(p, r), 0);
    atomic_store(&srv.fail, -ECONNREFUSED);
    ASSERT_EQ(weft_pool_fill(p, WEFT_NEVER), -ECONNREFUSED);
    st = stats(p);
    ASSERT_EQ(st.size, 1);
    ASSERT_EQ(st.idle, 1);
    ASSERT_EQ(st.in_use, 0);
    atomic_store(&srv.fail, 0);
    check_rest_and_free(p);
    return 0;
}

TEST(pool_fill_to_min_size)
{
    ASSERT_EQ(t_run_virtual(1, fill_main, NULL), 0);
}
