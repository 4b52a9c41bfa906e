/* SPDX-License-Identifier: MIT */
/*
 * Time: the virtual clock, sleeps and timers. Every time asserted here is
 * exact: with WEFT_CLOCK_VIRTUAL a sleep of d wakes at start + d, no later.
 */
#include "sync/sync.h" /* its wait kinds */
#include "t.h"
#include "wait/seen.h" /* a parked task's wait record */
#include "weft.h"

#include <errno.h>
#include <stdatomic.h>
#include <time.h>

static uint64_t xorshift(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

/* ---- the clock stands still while tasks run -------------------------- */

static atomic_int still_done;

static int busy_yielder(void *arg)
{
    (void)arg;
    for (int i = 0; i < 1000; i++) {
        ASSERT_EQ(weft_now(), 0);
        ASSERT_EQ(weft_yield(), 0);
    }
    /* Burn some real CPU time: the virtual clock must not see it. */
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do
        clock_gettime(CLOCK_MONOTONIC, &t1);
    while ((t1.tv_sec - t0.tv_sec) * WEFT_SEC + (t1.tv_nsec - t0.tv_nsec) <
           5 * WEFT_MSEC);
    ASSERT_EQ(weft_now(), 0);
    atomic_fetch_add(&still_done, 1);
    return 0;
}

static int sleeper_1s(void *arg)
{
    (void)arg;
    ASSERT_EQ(weft_now(), 0);
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0);
    /* Every yielder finished before the clock moved. */
    ASSERT_EQ(atomic_load(&still_done), 10);
    ASSERT_EQ(weft_now(), WEFT_SEC);
    return 0;
}

static int still_root(void *arg)
{
    (void)arg;
    ASSERT_EQ(weft_now(), 0);
    ASSERT(weft_spawn(NULL, sleeper_1s, NULL) >= 0);
    for (int i = 0; i < 10; i++)
        ASSERT(weft_spawn(NULL, busy_yielder, NULL) >= 0);
    ASSERT_EQ(weft_now(), 0);
    return 0;
}

TEST(virtual_now_starts_at_zero_and_stands_still)
{
    ASSERT_EQ(t_run_virtual(1, still_root, NULL), 0);
    ASSERT_EQ(atomic_load(&still_done), 10);
    /* A second runtime starts at 0 again. */
    atomic_store(&still_done, 0);
    ASSERT_EQ(t_run_virtual(1, still_root, NULL), 0);
    ASSERT_EQ(atomic_load(&still_done), 10);
}

static int sleep_seq_root(void *arg)
{
    (void)arg;
    ASSERT_EQ(weft_now(), 0);
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0);
    ASSERT_EQ(weft_now(), WEFT_SEC);
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0);
    ASSERT_EQ(weft_now(), 2 * WEFT_SEC);
    ASSERT_EQ(weft_sleep_for(1), 0);
    ASSERT_EQ(weft_now(), 2 * WEFT_SEC + 1);
    ASSERT_EQ(weft_sleep_until(5 * WEFT_SEC), 0);
    ASSERT_EQ(weft_now(), 5 * WEFT_SEC);
    ASSERT_EQ(weft_sleep_for(123456789), 0);
    ASSERT_EQ(weft_now(), 5 * WEFT_SEC + 123456789);
    return 0;
}

TEST(sleep_advances_virtual_now_exactly)
{
    ASSERT_EQ(t_run_virtual(1, sleep_seq_root, NULL), 0);
}

/* The clock jumps to the NEXT deadline, not past it: a timer armed by a
 * task woken at 1 s for 500 ms fires at 1.5 s, before the one at 2 s. */
static atomic_int jump_step;

static int jump_c(void *arg)
{
    (void)arg;
    ASSERT_EQ(weft_now(), WEFT_SEC);
    ASSERT_EQ(weft_sleep_for(500 * WEFT_MSEC), 0);
    ASSERT_EQ(weft_now(), 1500 * WEFT_MSEC);
    ASSERT_EQ(atomic_fetch_add(&jump_step, 1), 1);
    return 0;
}

static int jump_a(void *arg)
{
    (void)arg;
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0);
    ASSERT_EQ(weft_now(), WEFT_SEC);
    ASSERT_EQ(atomic_fetch_add(&jump_step, 1), 0);
    ASSERT(weft_spawn(NULL, jump_c, NULL) >= 0);
    return 0;
}

static int jump_b(void *arg)
{
    (void)arg;
    ASSERT_EQ(weft_sleep_for(2 * WEFT_SEC), 0);
    ASSERT_EQ(weft_now(), 2 * WEFT_SEC);
    ASSERT_EQ(atomic_fetch_add(&jump_step, 1), 2);
    return 0;
}

static int jump_root(void *arg)
{
    (void)arg;
    ASSERT(weft_spawn(NULL, jump_b, NULL) >= 0);
    ASSERT(weft_spawn(NULL, jump_a, NULL) >= 0);
    return 0;
}

TEST(virtual_clock_jumps_to_next_deadline_only)
{
    ASSERT_EQ(t_run_virtual(1, jump_root, NULL), 0);
    ASSERT_EQ(atomic_load(&jump_step), 3);
}

/* ---- many sleepers wake in deadline order at their deadlines ---------- */

#define ORDER_N 64

struct order_task {
    int64_t d;    /* sleep duration */
    int64_t woke; /* weft_now() at wake */
    int rank;     /* position in the global wake order */
};
static struct order_task order_tasks[ORDER_N];
static atomic_int order_next;

static int order_sleeper(void *arg)
{
    struct order_task *t = arg;
    ASSERT_EQ(weft_now(), 0);
    ASSERT_EQ(weft_sleep_for(t->d), 0);
    t->woke = weft_now();
    t->rank = atomic_fetch_add(&order_next, 1);
    return 0;
}

static int order_root(void *arg)
{
    (void)arg;
    /* Distinct durations, spawned in a shuffled order. */
    uint64_t x = 88172645463325252ull;
    int perm[ORDER_N];
    for (int i = 0; i < ORDER_N; i++)
        perm[i] = i;
    for (int i = ORDER_N - 1; i > 0; i--) {
        int j = (int)(xorshift(&x) % (uint64_t)(i + 1));
        int tmp = perm[i];
        perm[i] = perm[j];
        perm[j] = tmp;
    }
    for (int i = 0; i < ORDER_N; i++) {
        order_tasks[i].d = (int64_t)(perm[i] + 1) * 7 * WEFT_MSEC + perm[i];
        ASSERT(weft_spawn(NULL, order_sleeper, &order_tasks[i]) >= 0);
    }
    return 0;
}

TEST(sleepers_wake_in_deadline_order_at_deadlines)
{
    ASSERT_EQ(t_run_virtual(1, order_root, NULL), 0);
    ASSERT_EQ(atomic_load(&order_next), ORDER_N);
    for (int i = 0; i < ORDER_N; i++) {
        ASSERT_EQ(order_tasks[i].woke, order_tasks[i].d);
        for (int j = 0; j < ORDER_N; j++)
            if (order_tasks[i].d < order_tasks[j].d)
                ASSERT(order_tasks[i].rank < order_tasks[j].rank);
    }
}

/* Timers armed at different times for the same instant fire together. */
static int same_instant(void *arg)
{
    int64_t start = (int64_t)(intptr_t)arg;
    ASSERT_EQ(weft_sleep_until(start), 0);
    ASSERT_EQ(weft_now(), start);
    ASSERT_EQ(weft_sleep_for(10 * WEFT_SEC - start), 0);
    ASSERT_EQ(weft_now(), 10 * WEFT_SEC);
    return 0;
}

static int same_instant_root(void *arg)
{
    (void)arg;
    for (int i = 0; i < 10; i++)
        ASSERT(weft_spawn(NULL, same_instant,
                          (void *)(intptr_t)(i * 777 * WEFT_MSEC)) >= 0);
    ASSERT_EQ(weft_sleep_for(10 * WEFT_SEC), 0);
    ASSERT_EQ(weft_now(), 10 * WEFT_SEC);
    return 0;
}

TEST(timers_armed_at_different_times_same_deadline)
{
    ASSERT_EQ(t_run_virtual(1, same_instant_root, NULL), 0);
}

/* ---- past deadlines, zero and negative sleeps ------------------------- */

static int past_root(void *arg)
{
    (void)arg;
    ASSERT_EQ(weft_sleep_for(10 * WEFT_SEC), 0);
    ASSERT_EQ(weft_now(), 10 * WEFT_SEC);
    ASSERT_EQ(weft_sleep_until(5 * WEFT_SEC), 0);
    ASSERT_EQ(weft_now(), 10 * WEFT_SEC);
    ASSERT_EQ(weft_sleep_until(10 * WEFT_SEC), 0);
    ASSERT_EQ(weft_now(), 10 * WEFT_SEC);
    ASSERT_EQ(weft_sleep_until(0), 0);
    ASSERT_EQ(weft_sleep_until(-5), 0);
    ASSERT_EQ(weft_sleep_until(INT64_MIN), 0);
    ASSERT_EQ(weft_now(), 10 * WEFT_SEC);
    ASSERT_EQ(weft_sleep_for(0), 0);
    ASSERT_EQ(weft_sleep_for(-1), 0);
    ASSERT_EQ(weft_sleep_for(-WEFT_SEC), 0);
    ASSERT_EQ(weft_sleep_for(INT64_MIN), 0);
    ASSERT_EQ(weft_now(), 10 * WEFT_SEC);
    ASSERT_EQ(weft_sleep_until(10 * WEFT_SEC + 1), 0);
    ASSERT_EQ(weft_now(), 10 * WEFT_SEC + 1);
    return 0;
}

TEST(sleep_until_past_and_zero_negative_sleeps_return_at_once)
{
    ASSERT_EQ(t_run_virtual(1, past_root, NULL), 0);
}

/* While another task holds a timer for 1 s, a past/zero sleep must not let
 * the clock run to that timer. */
static int holder(void *arg)
{
    (void)arg;
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0);
    return 0;
}

static int zero_with_pending_root(void *arg)
{
    (void)arg;
    ASSERT(weft_spawn(NULL, holder, NULL) >= 0);
    ASSERT_EQ(weft_yield(), 0);
    for (int i = 0; i < 100; i++) {
        ASSERT_EQ(weft_sleep_for(0), 0);
        ASSERT_EQ(weft_sleep_for(-7), 0);
        ASSERT_EQ(weft_sleep_until(0), 0);
        ASSERT_EQ(weft_now(), 0);
    }
    return 0;
}

TEST(zero_sleep_does_not_advance_clock_past_pending_timer)
{
    ASSERT_EQ(t_run_virtual(1, zero_with_pending_root, NULL), 0);
}

/* sleep(<= 0) still checks for cancellation. */
static int zero_cancelled_root(void *arg)
{
    (void)arg;
    weft_scope *s;
    ASSERT_EQ(weft_scope_open(&s, NULL), 0);
    ASSERT_EQ(weft_scope_cancel(s), 0);
    ASSERT_EQ(weft_sleep_for(0), -ECANCELED);
    ASSERT_EQ(weft_sleep_for(-1), -ECANCELED);
    ASSERT_EQ(weft_sleep_until(0), -ECANCELED);
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), -ECANCELED);
    ASSERT_EQ(weft_now(), 0);
    ASSERT_EQ(weft_scope_join(s), -ECANCELED);
    ASSERT_EQ(weft_scope_free(s), 0);
    ASSERT_EQ(weft_sleep_for(0), 0);
    return 0;
}

TEST(zero_sleep_is_a_cancellation_point)
{
    ASSERT_EQ(t_run_virtual(1, zero_cancelled_root, NULL), 0);
}

/* ---- 100,000 sleepers with random durations --------------------------- */

static atomic_long exact_woken, exact_wrong;
static atomic_llong exact_max;

static int exact_sleeper(void *arg)
{
    int64_t d = (int64_t)(intptr_t)arg;
    weft_time start = weft_now();
    int r = weft_sleep_for(d);
    weft_time now = weft_now();
    if (r != 0 || now != start + d)
        atomic_fetch_add(&exact_wrong, 1);
    atomic_fetch_add(&exact_woken, 1);
    return 0;
}

static int exact_root(void *arg)
{
    long n = (long)(intptr_t)arg;
    uint64_t x = 0x2545F4914F6CDD1Dull;
    int64_t max = 0;
    weft_scope *s;
    ASSERT_EQ(weft_scope_open(&s, NULL), 0);
    for (long i = 0; i < n; i++) {
        uint64_t r = xorshift(&x);
        /* Mix scales: ns, us, ms and s, so every level of a wheel is hit. */
        int64_t d;
        switch (r & 3) {
        case 0:
            d = (int64_t)(r >> 8) % 1000 + 1;
            break;
        case 1:
            d = (int64_t)(r >> 8) % (1000 * WEFT_USEC) + 1;
            break;
        case 2:
            d = (int64_t)(r >> 8) % (1000 * WEFT_MSEC) + 1;
            break;
        default:
            d = (int64_t)(r >> 8) % (100 * WEFT_SEC) + 1;
            break;
        }
        if (d > max)
            max = d;
        ASSERT(weft_spawn(s, exact_sleeper, (void *)(intptr_t)d) >= 0);
    }
    ASSERT_EQ(weft_scope_join(s), 0);
    ASSERT_EQ(weft_scope_free(s), 0);
    atomic_store(&exact_max, max);
    /* The last wake-up was the longest sleep; it started at time 0 only if
     * the spawning loop never let the clock move, which it must not. */
    ASSERT_EQ(weft_now(), max);
    return 0;
}

TEST(many_sleepers_random_durations_exact)
{
    long n = T_LIVE(100000);
    ASSERT_EQ(t_run_virtual(1, exact_root, (void *)(intptr_t)n), 0);
    ASSERT_EQ(atomic_load(&exact_woken), n);
    ASSERT_EQ(atomic_load(&exact_wrong), 0);
}

TEST(virtual_clock_two_workers_exact)
{
    long n = T_LIVE(20000);
    ASSERT_EQ(t_run_virtual(2, exact_root, (void *)(intptr_t)n), 0);
    ASSERT_EQ(atomic_load(&exact_woken), n);
    ASSERT_EQ(atomic_load(&exact_wrong), 0);
}

/* Chains of sleeps on 2 workers: each task sleeps 50 times; every wake is
 * exact, so the clock never overshoots a deadline held by the other worker.
 */
static atomic_int chain_wrong, chain_done;
static int64_t chain_bad[3]; /* the first wrong wake: start, d, now */

static int chain_sleeper(void *arg)
{
    uint64_t x = (uint64_t)(uintptr_t)arg * 0x9E3779B97F4A7C15ull + 7;
    for (int i = 0; i < 50; i++) {
        int64_t d = (int64_t)(xorshift(&x) % (10 * WEFT_MSEC)) + 1;
        weft_time start = weft_now();
        int r = weft_sleep_for(d);
        weft_time now = weft_now();
        if (r != 0 || now != start + d) {
            if (atomic_fetch_add(&chain_wrong, 1) == 0) {
                chain_bad[0] = start;
                chain_bad[1] = d;
                chain_bad[2] = now;
            }
        }
    }
    atomic_fetch_add(&chain_done, 1);
    return 0;
}

static int chain_root(void *arg)
{
    (void)arg;
    for (int i = 0; i < 200; i++)
        ASSERT(weft_spawn(NULL, chain_sleeper, (void *)(intptr_t)i) >= 0);
    return 0;
}

static void check_chains(int workers)
{
    atomic_store(&chain_done, 0);
    atomic_store(&chain_wrong, 0);
    ASSERT_EQ(t_run_virtual(workers, chain_root, NULL), 0);
    ASSERT_EQ(atomic_load(&chain_done), 200);
    if (atomic_load(&chain_wrong) != 0)
        T_FAIL("%d wrong wake-ups; first: start %" PRId64 " + %" PRId64
               " woke at %" PRId64,
               atomic_load(&chain_wrong), chain_bad[0], chain_bad[1],
               chain_bad[2]);
}

TEST(virtual_clock_one_worker_sleep_chains_exact)
{
    check_chains(1);
}

TEST(virtual_clock_two_workers_sleep_chains_exact)
{
    check_chains(2);
}

/* ---- far-future timers ------------------------------------------------ */

static const int64_t far[] = {
    1,
    WEFT_MSEC,
    3 * 3600 * WEFT_SEC,            /* 3 hours */
    3 * 3600 * WEFT_SEC + 1,        /* and one nanosecond later */
    2 * 86400 * WEFT_SEC,           /* 2 days */
    365 * 86400 * WEFT_SEC,         /* a year */
    100LL * 365 * 86400 * WEFT_SEC, /* a century */
};
#define NFAR ((int)(sizeof far / sizeof far[0]))
static atomic_int far_done;

static int far_sleeper(void *arg)
{
    int64_t d = far[(intptr_t)arg];
    ASSERT_EQ(weft_sleep_for(d), 0);
    ASSERT_EQ(weft_now(), d);
    atomic_fetch_add(&far_done, 1);
    return 0;
}

static int far_root(void *arg)
{
    (void)arg;
    for (int i = NFAR - 1; i >= 0; i--)
        ASSERT(weft_spawn(NULL, far_sleeper, (void *)(intptr_t)i) >= 0);
    return 0;
}

TEST(far_future_timers_fire_exactly)
{
    ASSERT_EQ(t_run_virtual(1, far_root, NULL), 0);
    ASSERT_EQ(atomic_load(&far_done), NFAR);
}

static int far_seq_root(void *arg)
{
    (void)arg;
    int64_t t = 0;
    int64_t steps[] = {2 * 86400 * WEFT_SEC, 1, 3 * 3600 * WEFT_SEC,
                       17 * WEFT_MSEC, 40 * 86400 * WEFT_SEC};
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        ASSERT_EQ(weft_sleep_for(steps[i]), 0);
        t += steps[i];
        ASSERT_EQ(weft_now(), t);
    }
    return 0;
}

TEST(far_future_sequential_sleeps_exact)
{
    ASSERT_EQ(t_run_virtual(1, far_seq_root, NULL), 0);
}

/* ---- cancellation of a sleep ------------------------------------------ */

struct cancelled_sleep {
    int r;
    weft_time at;
};

static int long_sleeper(void *arg)
{
    struct cancelled_sleep *c = arg;
    c->r = weft_sleep_for(10 * WEFT_SEC);
    c->at = weft_now();
    return 0;
}

static int cancel_sleep_root(void *arg)
{
    struct cancelled_sleep *c = arg;
    weft_scope *s;
    ASSERT_EQ(weft_scope_open(&s, NULL), 0);
    ASSERT(weft_spawn(s, long_sleeper, c) >= 0);
    /* The root sleeps in s too; it is the one that cancels. */
    ASSERT_EQ(weft_sleep_for(2 * WEFT_SEC), 0);
    ASSERT_EQ(weft_scope_cancel(s), 0);
    ASSERT_EQ(weft_scope_join(s), -ECANCELED);
    ASSERT_EQ(weft_now(), 2 * WEFT_SEC);
    ASSERT_EQ(weft_scope_free(s), 0);
    return 0;
}

TEST(sleep_cancelled_returns_ecanceled_at_cancel_time)
{
    struct cancelled_sleep c = {1, -1};
    ASSERT_EQ(t_run_virtual(1, cancel_sleep_root, &c), 0);
    ASSERT_EQ(c.r, -ECANCELED);
    ASSERT_EQ(c.at, 2 * WEFT_SEC);
}

static int deadline_sleep_root(void *arg)
{
    struct cancelled_sleep *c = arg;
    weft_scope *s;
    weft_scope_opts o = {.deadline = 3 * WEFT_SEC};
    ASSERT_EQ(weft_scope_open(&s, &o), 0);
    ASSERT(weft_spawn(s, long_sleeper, c) >= 0);
    ASSERT_EQ(weft_scope_join(s), -ETIMEDOUT);
    ASSERT_EQ(weft_now(), 3 * WEFT_SEC);
    ASSERT_EQ(weft_scope_free(s), 0);
    return 0;
}

TEST(sleep_cancelled_by_scope_deadline_at_deadline)
{
    struct cancelled_sleep c = {1, -1};
    ASSERT_EQ(t_run_virtual(1, deadline_sleep_root, &c), 0);
    ASSERT_EQ(c.r, -ECANCELED);
    ASSERT_EQ(c.at, 3 * WEFT_SEC);
}

/* A cancelled sleeper's timer must not come back to move the clock: after
 * the cancel at 2 s, the next event is at 4 s, not at the old 10 s. */
static int disarm_root(void *arg)
{
    struct cancelled_sleep *c = arg;
    ASSERT_EQ(cancel_sleep_root(c), 0);
    ASSERT_EQ(weft_sleep_for(2 * WEFT_SEC), 0);
    ASSERT_EQ(weft_now(), 4 * WEFT_SEC);
    return 0;
}

TEST(cancelled_sleep_timer_is_disarmed)
{
    struct cancelled_sleep c = {1, -1};
    ASSERT_EQ(t_run_virtual(1, disarm_root, &c), 0);
    ASSERT_EQ(c.r, -ECANCELED);
}

/* ---- what a sleeper records -------------------------------------------- */

/* A sleeping task records a sleep (no object) as what it waits on, even
 * right after another kind of wait (here an event's). */
struct rec {
    weft_event go;
    weft_task *task;
    weft_time woke;
};

static int rec_sleeper(void *arg)
{
    struct rec *r = arg;
    r->task = weft__current();
    ASSERT_EQ(weft_event_wait(&r->go), 0);
    ASSERT_EQ(weft_sleep_for(2 * WEFT_SEC), 0);
    r->woke = weft_now();
    return 0;
}

static int record_root(void *arg)
{
    (void)arg;
    struct rec r = {.go = WEFT_EVENT_INIT, .woke = -1};
    weft_scope *s = scope_open();
    spawn(rec_sleeper, &r);
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0); /* one worker: it waits on go */
    ASSERT(r.task != NULL);
    ASSERT(weft__task_wait_kind(r.task) == &weft__wk_event);
    weft_event_set(&r.go);
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0); /* it sleeps from 1 s to 3 s */
    ASSERT(weft__task_wait_kind(r.task) == &weft__wk_sleep);
    ASSERT(weft__task_wait_obj(r.task) == NULL);
    ASSERT_EQ(r.woke, -1);
    scope_end(s);
    ASSERT_EQ(r.woke, 3 * WEFT_SEC);
    return 0;
}

TEST(sleep_records_a_sleep)
{
    ASSERT_EQ(t_run_virtual(1, record_root, NULL), 0);
}
