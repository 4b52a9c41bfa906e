/* SPDX-License-Identifier: MIT */
/*
 * Circuit breaker. Every transition is checked at its exact instant on the
 * virtual clock (under several scheduling seeds, and on two workers): the
 * consecutive-failure and rate triggers, the window sliding (outcomes age
 * out at the documented instant), the cool-down (half-open at opened +
 * cooldown, not a nanosecond before), the trials (bounded, deciding), the
 * on_change sequence, and records that arrive from an older generation.
 * Across workers and a plain thread the counters add up exactly.
 */
#include "t.h"
#include "weft.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#define SEC WEFT_SEC
#define C WEFT_BREAKER_CLOSED
#define O WEFT_BREAKER_OPEN
#define H WEFT_BREAKER_HALF_OPEN

static void run_seeds(weft_fn fn)
{
    for (uint64_t seed = 1; seed <= 6; seed++)
        ASSERT_EQ(t_run(1, WEFT_CLOCK_VIRTUAL, T_SEED(seed), fn, NULL), 0);
    ASSERT_EQ(t_run_virtual(2, fn, NULL), 0);
}

/* ---- helpers ------------------------------------------------------------- */

/* on_change log: each change, when, and the state stats_get showed from
 * inside the callback (which must be called with no lock held). */
struct change {
    weft_breaker_state from, to;
    weft_time at;
    weft_breaker_state seen;
};
#define LOG_MAX 64
struct log {
    struct change c[LOG_MAX];
    int n;
};

static void log_change(weft_breaker *b, weft_breaker_state from,
                       weft_breaker_state to, void *ctx)
{
    struct log *l = ctx;
    ASSERT(l->n < LOG_MAX);
    weft_breaker_stats st;
    ASSERT_EQ(weft_breaker_stats_get(b, &st), 0);
    l->c[l->n++] = (struct change){from, to, weft_now(), st.state};
}

static void expect_change(struct log *l, int i, weft_breaker_state from,
                          weft_breaker_state to, weft_time at)
{
    ASSERT(i < l->n);
    ASSERT_EQ(l->c[i].from, from);
    ASSERT_EQ(l->c[i].to, to);
    ASSERT_EQ(l->c[i].at, at);
    ASSERT_EQ(l->c[i].seen, to);
}

static weft_breaker_stats stats(weft_breaker *b)
{
    weft_breaker_stats st;
    ASSERT_EQ(weft_breaker_stats_get(b, &st), 0);
    return st;
}

static weft_breaker_state state(weft_breaker *b)
{
    return stats(b).state;
}

/* One bare call with this status. */
static void one(weft_breaker *b, int status)
{
    ASSERT_EQ(weft_breaker_acquire(b), 0);
    ASSERT_EQ(weft_breaker_record(b, status), 0);
}

static weft_breaker *mk(const weft_breaker_opts *o)
{
    weft_breaker *b = NULL;
    ASSERT_EQ(weft_breaker_new(&b, o), 0);
    ASSERT(b != NULL);
    return b;
}

static void until(weft_time t)
{
    ASSERT_EQ(weft_sleep_until(t), 0);
    ASSERT_EQ(weft_now(), t);
}

struct fnarg {
    int64_t sleep_ns;
    int status;
    atomic_int ran;
    int rc;
    weft_time at;
};

static int fn_status(void *arg)
{
    struct fnarg *f = arg;
    atomic_fetch_add(&f->ran, 1);
    if (f->sleep_ns)
        ASSERT_EQ(weft_sleep_for(f->sleep_ns), 0);
    return f->status;
}

/* A task: breaker_call(fn_status) after `start`, recording rc and time. */
struct caller {
    weft_breaker *b;
    weft_time start;
    struct fnarg f;
};

static int caller_task(void *arg)
{
    struct caller *c = arg;
    ASSERT_EQ(weft_sleep_until(c->start), 0);
    c->f.rc = weft_breaker_call(c->b, fn_status, &c->f);
    c->f.at = weft_now();
    return 0;
}

/* ---- options, defaults, misuse ------------------------------------------- */

static int defaults_root(void *arg)
{
    (void)arg;
    /* NULL opts: 5 consecutive failures, 5 s cool-down, 1 trial. */
    weft_breaker *b = mk(NULL);
    until(SEC);
    for (int i = 0; i < 4; i++)
        one(b, -EIO);
    ASSERT_EQ(state(b), C);
    one(b, -EIO);
    weft_breaker_stats st = stats(b);
    ASSERT_EQ(st.state, O);
    ASSERT_EQ(st.open_until, 6 * SEC);
    ASSERT_EQ(st.opened, 1);
    until(6 * SEC - 1);
    ASSERT_EQ(weft_breaker_acquire(b), -EHOSTDOWN);
    until(6 * SEC);
    ASSERT_EQ(weft_breaker_acquire(b), 0);
    ASSERT_EQ(weft_breaker_acquire(b), -EHOSTDOWN); /* one trial */
    ASSERT_EQ(weft_breaker_record(b, 0), 0);
    ASSERT_EQ(state(b), C);
    ASSERT_EQ(weft_breaker_free(b), 0);

    /* Every field 0: the defaults, as for NULL (5 failures open it). */
    weft_breaker_opts zero = {0};
    b = mk(&zero);
    for (int i = 0; i < 4; i++)
        one(b, -EIO);
    ASSERT_EQ(state(b), C);
    one(b, -EIO);
    st = stats(b);
    ASSERT_EQ(st.state, O);
    ASSERT_EQ(st.calls, 5);
    ASSERT_EQ(st.failures, 5);
    ASSERT_EQ(st.opened, 1);
    ASSERT_EQ(weft_breaker_free(b), 0);

    /* window_ns 0: 10 s; cooldown_ns 0: 5 s; half_open_calls 0: 1. */
    weft_breaker_opts r = {.failure_rate = 100, .min_calls = 2};
    weft_time t0 = 20 * SEC;
    until(t0);
    weft_breaker *x = mk(&r), *y = mk(&r);
    one(x, -EIO);
    one(y, -EIO);
    until(t0 + 10 * SEC - 1);
    one(x, -EIO); /* the first still counts: 2 of 2 */
    ASSERT_EQ(state(x), O);
    ASSERT_EQ(stats(x).open_until, t0 + 15 * SEC - 1);
    until(t0 + 10 * SEC);
    one(y, -EIO); /* the first aged out: 1 call, below min_calls */
    ASSERT_EQ(state(y), C);
    ASSERT_EQ(weft_breaker_free(x), 0);
    ASSERT_EQ(weft_breaker_free(y), 0);
    return 0;
}

TEST(breaker_defaults)
{
    run_seeds(defaults_root);
}

static int never(void *arg)
{
    (void)arg;
    T_FAIL("fn called");
    return 0;
}

TEST(breaker_options_and_misuse)
{
    weft_breaker *b = NULL;
    ASSERT_EQ(weft_breaker_new(NULL, NULL), -EINVAL);
    weft_breaker_opts bad[] = {
        {.failure_threshold = -1}, {.failure_rate = -1}, {.failure_rate = 101},
        {.min_calls = -1},         {.window_ns = -1},    {.cooldown_ns = -1},
        {.half_open_calls = -1},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ASSERT_EQ(weft_breaker_new(&b, &bad[i]), -EINVAL);
        ASSERT(b == NULL);
    }
    weft_breaker_opts ok = {.failure_rate = 100, .window_ns = 1};
    ASSERT_EQ(weft_breaker_new(&b, &ok), 0);
    ASSERT_EQ(weft_breaker_free(b), 0);

    /* Outside a runtime (any thread): the monotonic clock. */
    b = mk(NULL);
    ASSERT_EQ(weft_breaker_acquire(NULL), -EINVAL);
    ASSERT_EQ(weft_breaker_record(NULL, 0), -EINVAL);
    ASSERT_EQ(weft_breaker_call(NULL, never, NULL), -EINVAL);
    ASSERT_EQ(weft_breaker_call(b, NULL, NULL), -EINVAL);
    ASSERT_EQ(weft_breaker_stats_get(NULL, &(weft_breaker_stats){0}), -EINVAL);
    ASSERT_EQ(weft_breaker_stats_get(b, NULL), -EINVAL);
    ASSERT_EQ(weft_breaker_free(NULL), -EINVAL);

    /* record needs a call in flight. */
    ASSERT_EQ(weft_breaker_record(b, 0), -EINVAL);
    ASSERT_EQ(weft_breaker_acquire(b), 0);
    ASSERT_EQ(weft_breaker_acquire(b), 0);
    ASSERT_EQ(weft_breaker_free(b), -EBUSY); /* two in flight */
    ASSERT_EQ(weft_breaker_record(b, 0), 0);
    ASSERT_EQ(weft_breaker_free(b), -EBUSY);
    ASSERT_EQ(weft_breaker_record(b, -EIO), 0);
    ASSERT_EQ(weft_breaker_record(b, 0), -EINVAL);
    weft_breaker_stats st = stats(b);
    ASSERT_EQ(st.state, C);
    ASSERT_EQ(st.calls, 2);
    ASSERT_EQ(st.failures, 1);
    ASSERT_EQ(st.rejected, 0);
    ASSERT_EQ(st.opened, 0);
    ASSERT_EQ(st.open_until, 0);
    struct fnarg f = {.status = 42};
    ASSERT_EQ(weft_breaker_call(b, fn_status, &f), 42);
    ASSERT_EQ(atomic_load(&f.ran), 1);
    ASSERT_EQ(weft_breaker_free(b), 0);
}

/* ---- consecutive failures ------------------------------------------------ */

static int consecutive_root(void *arg)
{
    (void)arg;
    struct log lg = {0};
    weft_breaker_opts o = {.failure_threshold = 3,
                           .cooldown_ns = 10 * SEC,
                           .on_change = log_change,
                           .ctx = &lg};
    weft_breaker *b = mk(&o);
    one(b, -EIO);
    one(b, -EIO);
    one(b, 0); /* resets the count */
    one(b, -EIO);
    one(b, -ETIMEDOUT);
    ASSERT_EQ(state(b), C);
    ASSERT_EQ(lg.n, 0);
    until(SEC);
    one(b, -ECONNREFUSED); /* the third in a row */
    expect_change(&lg, 0, C, O, SEC);
    ASSERT_EQ(lg.n, 1);
    weft_breaker_stats st = stats(b);
    ASSERT_EQ(st.state, O);
    ASSERT_EQ(st.calls, 6);
    ASSERT_EQ(st.failures, 5);
    ASSERT_EQ(st.rejected, 0);
    ASSERT_EQ(st.opened, 1);
    ASSERT_EQ(st.open_until, 11 * SEC);

    /* Rejected calls: fn is not run, and they are counted. */
    struct fnarg f = {.status = 0};
    ASSERT_EQ(weft_breaker_call(b, fn_status, &f), -EHOSTDOWN);
    ASSERT_EQ(weft_breaker_acquire(b), -EHOSTDOWN);
    until(11 * SEC - 1);
    ASSERT_EQ(weft_breaker_call(b, fn_status, &f), -EHOSTDOWN);
    ASSERT_EQ(atomic_load(&f.ran), 0);
    ASSERT_EQ(weft_breaker_record(b, 0), -EINVAL); /* nothing in flight */
    st = stats(b);
    ASSERT_EQ(st.calls, 6);
    ASSERT_EQ(st.rejected, 3);
    ASSERT_EQ(st.state, O);
    ASSERT_EQ(weft_breaker_free(b), 0);
    return 0;
}

TEST(breaker_opens_after_consecutive_failures)
{
    run_seeds(consecutive_root);
}

/* ---- the failure rate over a sliding window ------------------------------ */

static int rate_root(void *arg)
{
    (void)arg;
    /* window 10 s: ten buckets of 1 s. */
    weft_breaker_opts o = {.failure_rate = 50,
                           .min_calls = 4,
                           .window_ns = 10 * SEC,
                           .cooldown_ns = 100 * SEC};
    weft_breaker *b[4];
    for (int i = 0; i < 4; i++)
        b[i] = mk(&o);

    /* Below min_calls, 100% failures do not open it. */
    for (int i = 0; i < 4; i++) {
        one(b[i], -EIO);
        one(b[i], -EIO);
        one(b[i], -EIO);
        ASSERT_EQ(state(b[i]), C);
    }
    /* 3 failures at 0 count until 10 s: a success at 10 s - 1 makes 4
     * calls, 75% failures (a success can open it too); one at 10 s finds
     * them aged out. */
    until(10 * SEC - 1);
    one(b[0], 0);
    ASSERT_EQ(state(b[0]), O);
    ASSERT_EQ(stats(b[0]).open_until, 110 * SEC - 1);
    until(10 * SEC);
    one(b[1], 0);
    ASSERT_EQ(state(b[1]), C);
    /* b[1] now holds 1 success at 10 s: 1 F + 1 S + 1 F = 2 of 3 (below
     * min_calls); the fourth makes 2 of 4: exactly 50% opens. */
    one(b[1], -EIO);
    one(b[1], 0);
    ASSERT_EQ(state(b[1]), C); /* 1 of 3 */
    one(b[1], -EIO);           /* 2 of 4 */
    ASSERT_EQ(state(b[1]), O);

    /* Not at a bucket boundary: outcomes at 10.5 s are in bucket 10, which
     * leaves the window at 20 s (after 9.5 s). */
    for (int i = 2; i < 4; i++) {
        until(10 * SEC + SEC / 2);
        one(b[i], -EIO); /* b[i]'s failures at 0 are gone */
        one(b[i], -EIO);
        one(b[i], -EIO);
        ASSERT_EQ(state(b[i]), C);
    }
    until(20 * SEC - 1);
    one(b[2], 0);
    ASSERT_EQ(state(b[2]), O);
    until(20 * SEC);
    one(b[3], 0);
    ASSERT_EQ(state(b[3]), C);

    /* Sliding: b[3] holds 1 S at 20 s. Add 1 F a second for 9 s
     * (21..29 s): the window at 29 s is 20..29 s: 10 calls, 9 F: opens at
     * the first record that makes >= 4 calls and >= 50%. */
    until(21 * SEC);
    one(b[3], -EIO); /* 1 of 2 */
    until(22 * SEC);
    one(b[3], -EIO); /* 2 of 3 */
    ASSERT_EQ(state(b[3]), C);
    until(23 * SEC);
    one(b[3], 0); /* 2 of 4: 50% */
    ASSERT_EQ(state(b[3]), O);
    ASSERT_EQ(stats(b[3]).open_until, 123 * SEC);

    /* A rate of 100 needs every call in the window to fail. */
    weft_breaker_opts all = {.failure_rate = 100, .min_calls = 3};
    weft_breaker *a = mk(&all);
    one(a, -EIO);
    one(a, 0);
    one(a, -EIO);
    one(a, -EIO);
    ASSERT_EQ(state(a), C); /* 3 of 4 */
    until(34 * SEC);        /* in another slot of the ring: aged out */
    one(a, -EIO);
    one(a, -EIO);
    ASSERT_EQ(state(a), C);
    one(a, -EIO);
    ASSERT_EQ(state(a), O);
    ASSERT_EQ(weft_breaker_free(a), 0);
    for (int i = 0; i < 4; i++)
        ASSERT_EQ(weft_breaker_free(b[i]), 0);
    return 0;
}

TEST(breaker_rate_window_slides)
{
    run_seeds(rate_root);
}

/* A window that ten does not divide: width ceil(25 / 10) = 3 ns, so an
 * outcome at 0 counts until 30 ns. */
static int odd_window_root(void *arg)
{
    (void)arg;
    weft_breaker_opts o = {
        .failure_rate = 100, .min_calls = 2, .window_ns = 25};
    weft_breaker *x = mk(&o), *y = mk(&o);
    one(x, -EIO);
    one(y, -EIO);
    until(29);
    one(x, -EIO);
    ASSERT_EQ(state(x), O);
    until(30);
    one(y, -EIO);
    ASSERT_EQ(state(y), C);
    ASSERT_EQ(weft_breaker_free(x), 0);
    ASSERT_EQ(weft_breaker_free(y), 0);
    return 0;
}

TEST(breaker_window_granularity)
{
    ASSERT_EQ(t_run_virtual(1, odd_window_root, NULL), 0);
}

/* ---- half-open at the exact instant; the on_change sequence -------------- */

static int sequence_root(void *arg)
{
    (void)arg;
    struct log lg = {0};
    weft_breaker_opts o = {.failure_threshold = 1,
                           .cooldown_ns = 5 * SEC,
                           .on_change = log_change,
                           .ctx = &lg};
    weft_breaker *b = mk(&o);
    until(SEC);
    one(b, -EIO);
    expect_change(&lg, 0, C, O, SEC);
    until(6 * SEC - 1);
    ASSERT_EQ(state(b), O);
    ASSERT_EQ(weft_breaker_acquire(b), -EHOSTDOWN);
    until(6 * SEC);
    /* Over: shown as half-open, but nothing happened yet (lazy). */
    ASSERT_EQ(state(b), H);
    ASSERT_EQ(lg.n, 1);
    ASSERT_EQ(weft_breaker_acquire(b), 0);
    expect_change(&lg, 1, O, H, 6 * SEC);
    ASSERT_EQ(weft_breaker_acquire(b), -EHOSTDOWN);
    until(7 * SEC);
    ASSERT_EQ(weft_breaker_record(b, 0), 0);
    expect_change(&lg, 2, H, C, 7 * SEC);
    ASSERT_EQ(state(b), C);
    one(b, -EIO);
    expect_change(&lg, 3, C, O, 7 * SEC);
    until(12 * SEC);
    ASSERT_EQ(weft_breaker_acquire(b), 0);
    expect_change(&lg, 4, O, H, 12 * SEC);
    until(13 * SEC);
    ASSERT_EQ(weft_breaker_record(b, -EIO), 0);
    expect_change(&lg, 5, H, O, 13 * SEC);
    weft_breaker_stats st = stats(b);
    ASSERT_EQ(st.state, O);
    ASSERT_EQ(st.open_until, 18 * SEC); /* a fresh cool-down */
    ASSERT_EQ(st.opened, 3);
    until(18 * SEC - 1);
    ASSERT_EQ(weft_breaker_acquire(b), -EHOSTDOWN);
    until(18 * SEC);
    ASSERT_EQ(weft_breaker_acquire(b), 0);
    expect_change(&lg, 6, O, H, 18 * SEC);
    ASSERT_EQ(weft_breaker_record(b, 0), 0);
    expect_change(&lg, 7, H, C, 18 * SEC);
    ASSERT_EQ(lg.n, 8);
    st = stats(b);
    ASSERT_EQ(st.calls, 5);
    ASSERT_EQ(st.failures, 3);
    ASSERT_EQ(st.rejected, 3);
    ASSERT_EQ(weft_breaker_free(b), 0);
    return 0;
}

TEST(breaker_half_open_at_exact_instant_and_change_sequence)
{
    run_seeds(sequence_root);
}

/* ---- trials: bounded, all succeed -> closed, one fails -> open ----------- */

#define TR_N 6

static int trials_root(void *arg)
{
    (void)arg;
    struct log lg = {0};
    weft_breaker_opts o = {.failure_threshold = 2,
                           .cooldown_ns = 10 * SEC,
                           .half_open_calls = 3,
                           .on_change = log_change,
                           .ctx = &lg};
    weft_breaker *b = mk(&o);
    one(b, -EIO);
    one(b, -EIO);
    expect_change(&lg, 0, C, O, 0);

    /* At 10 s, six tasks call at once, each fn taking 1 s: three trials
     * go through, three are rejected at once without running fn. */
    struct caller c[TR_N];
    weft_scope *s = scope_open();
    for (int i = 0; i < TR_N; i++) {
        c[i] = (struct caller){
            .b = b, .start = 10 * SEC, .f = {.sleep_ns = SEC, .status = i}};
        spawn(caller_task, &c[i]);
    }
    scope_end(s);
    int through = 0, rejected = 0;
    for (int i = 0; i < TR_N; i++) {
        if (c[i].f.rc == -EHOSTDOWN) {
            rejected++;
            ASSERT_EQ(atomic_load(&c[i].f.ran), 0);
            ASSERT_EQ(c[i].f.at, 10 * SEC);
        } else {
            through++;
            ASSERT_EQ(c[i].f.rc, i);
            ASSERT_EQ(atomic_load(&c[i].f.ran), 1);
            ASSERT_EQ(c[i].f.at, 11 * SEC);
        }
    }
    ASSERT_EQ(through, 3);
    ASSERT_EQ(rejected, 3);
    expect_change(&lg, 1, O, H, 10 * SEC);
    expect_change(&lg, 2, H, C, 11 * SEC); /* the third success */
    ASSERT_EQ(lg.n, 3);

    /* Trials one after another still count as the period's three: two
     * successes keep it half-open (the third trial may still come). */
    one(b, -EIO);
    one(b, -EIO); /* open at 11 s */
    until(21 * SEC);
    one(b, 0);
    one(b, 0);
    ASSERT_EQ(state(b), H);
    ASSERT_EQ(weft_breaker_acquire(b), 0);
    ASSERT_EQ(weft_breaker_acquire(b), -EHOSTDOWN); /* all 3 taken */
    ASSERT_EQ(weft_breaker_record(b, 0), 0);
    ASSERT_EQ(state(b), C);

    /* One trial fails: open again at that instant, fresh cool-down; the
     * other trials' later outcomes change nothing. */
    one(b, -EIO);
    one(b, -EIO); /* open at 21 s */
    int n0 = lg.n;
    s = scope_open();
    int64_t took[3] = {SEC, 2 * SEC, 3 * SEC};
    int st[3] = {0, -EIO, 0};
    for (int i = 0; i < 3; i++) {
        c[i] = (struct caller){.b = b,
                               .start = 31 * SEC,
                               .f = {.sleep_ns = took[i], .status = st[i]}};
        spawn(caller_task, &c[i]);
    }
    until(31 * SEC + 1);
    ASSERT_EQ(weft_breaker_acquire(b), -EHOSTDOWN);
    scope_end(s);
    for (int i = 0; i < 3; i++) {
        ASSERT_EQ(c[i].f.rc, st[i]);
        ASSERT_EQ(c[i].f.at, 31 * SEC + took[i]);
    }
    expect_change(&lg, n0, O, H, 31 * SEC);
    expect_change(&lg, n0 + 1, H, O, 33 * SEC);
    ASSERT_EQ(lg.n, n0 + 2);
    weft_breaker_stats sts = stats(b);
    ASSERT_EQ(sts.state, O);
    ASSERT_EQ(sts.open_until, 43 * SEC);
    ASSERT_EQ(sts.opened, 4);
    ASSERT_EQ(weft_breaker_free(b), 0);
    return 0;
}

TEST(breaker_trials_bounded_and_decide)
{
    run_seeds(trials_root);
}

/* ---- late records: calls from before the open, reporting afterwards ------ */

static int late_bare_root(void *arg)
{
    (void)arg;
    struct log lg = {0};
    weft_breaker_opts o = {.failure_threshold = 2,
                           .cooldown_ns = 10 * SEC,
                           .on_change = log_change,
                           .ctx = &lg};
    weft_breaker *b = mk(&o);

    /* Three calls go out while closed; two others fail: open at 0. */
    for (int i = 0; i < 3; i++)
        ASSERT_EQ(weft_breaker_acquire(b), 0);
    one(b, -EIO);
    one(b, -EIO);
    expect_change(&lg, 0, C, O, 0);
    /* One of the three fails while open: nothing happens. */
    ASSERT_EQ(weft_breaker_record(b, -ETIMEDOUT), 0);
    until(10 * SEC);
    ASSERT_EQ(weft_breaker_acquire(b), 0); /* the trial */
    ASSERT_EQ(weft_breaker_acquire(b), -EHOSTDOWN);
    /* The other two fail now, while the trial is out: neither is taken
     * for the trial's outcome, nor frees its slot. */
    until(10 * SEC + 1);
    ASSERT_EQ(weft_breaker_record(b, -ETIMEDOUT), 0);
    ASSERT_EQ(state(b), H);
    ASSERT_EQ(weft_breaker_acquire(b), -EHOSTDOWN);
    ASSERT_EQ(weft_breaker_record(b, -ETIMEDOUT), 0);
    ASSERT_EQ(state(b), H);
    ASSERT_EQ(weft_breaker_acquire(b), -EHOSTDOWN); /* trial still out */
    ASSERT_EQ(lg.n, 2);
    until(11 * SEC);
    ASSERT_EQ(weft_breaker_record(b, 0), 0); /* the trial: closed */
    expect_change(&lg, 2, H, C, 11 * SEC);
    ASSERT_EQ(weft_breaker_record(b, 0), -EINVAL); /* none out */
    weft_breaker_stats st = stats(b);
    ASSERT_EQ(st.calls, 6);
    ASSERT_EQ(st.failures, 5);
    ASSERT_EQ(st.rejected, 3);

    /* The usual order: the trial succeeds before the calls that hung
     * through the outage time out. They fail after it closed: they count
     * neither against the closed breaker (threshold 2) nor as trials. */
    ASSERT_EQ(weft_breaker_acquire(b), 0); /* hung 1 */
    ASSERT_EQ(weft_breaker_acquire(b), 0); /* hung 2 */
    one(b, -EIO);
    one(b, -EIO);
    expect_change(&lg, 3, C, O, 11 * SEC);
    until(21 * SEC);
    one(b, 0); /* the trial succeeds */
    expect_change(&lg, 4, O, H, 21 * SEC);
    expect_change(&lg, 5, H, C, 21 * SEC);
    until(25 * SEC);
    ASSERT_EQ(weft_breaker_record(b, -ETIMEDOUT), 0); /* hung 1 */
    ASSERT_EQ(weft_breaker_record(b, -ETIMEDOUT), 0); /* hung 2 */
    ASSERT_EQ(state(b), C);
    ASSERT_EQ(lg.n, 6);
    one(b, -EIO); /* this generation's failures count as ever */
    ASSERT_EQ(state(b), C);
    one(b, -EIO);
    expect_change(&lg, 6, C, O, 25 * SEC);

    /* The trial fails before an older call reports: its failure takes the
     * older permit and does not count; the period is decided by the next
     * outcome that counts (late, never early), here the older call's
     * failure at 37 s. Meanwhile the breaker keeps rejecting. */
    until(30 * SEC);
    ASSERT_EQ(weft_breaker_acquire(b), -EHOSTDOWN);
    until(35 * SEC);
    ASSERT_EQ(weft_breaker_acquire(b), 0); /* the trial; closed at 35 s */
    ASSERT_EQ(weft_breaker_record(b, 0), 0);
    ASSERT_EQ(state(b), C);
    ASSERT_EQ(weft_breaker_acquire(b), 0); /* the older call */
    one(b, -EIO);
    one(b, -EIO); /* open at 35 s */
    int n0 = lg.n;
    until(45 * SEC);
    ASSERT_EQ(weft_breaker_acquire(b), 0); /* the trial */
    until(46 * SEC);
    ASSERT_EQ(weft_breaker_record(b, -EIO), 0); /* the trial fails */
    ASSERT_EQ(state(b), H);
    ASSERT_EQ(weft_breaker_acquire(b), -EHOSTDOWN);
    until(47 * SEC);
    ASSERT_EQ(weft_breaker_record(b, -EIO), 0); /* the older call */
    expect_change(&lg, n0, O, H, 45 * SEC);
    expect_change(&lg, n0 + 1, H, O, 47 * SEC);
    ASSERT_EQ(stats(b).open_until, 57 * SEC);

    /* An older call's success during the half-open period counts as the
     * trial's (a success seen after the cool-down); the trial's own
     * record then retires the older permit. */
    until(57 * SEC);
    ASSERT_EQ(weft_breaker_acquire(b), 0); /* trial */
    ASSERT_EQ(weft_breaker_record(b, 0), 0);
    ASSERT_EQ(weft_breaker_acquire(b), 0); /* older */
    one(b, -EIO);
    one(b, -EIO); /* open at 57 s */
    until(67 * SEC);
    ASSERT_EQ(weft_breaker_acquire(b), 0);   /* the trial */
    ASSERT_EQ(weft_breaker_record(b, 0), 0); /* the older call: closed */
    ASSERT_EQ(state(b), C);
    ASSERT_EQ(weft_breaker_record(b, -EIO), 0); /* the trial: stale */
    ASSERT_EQ(state(b), C);
    one(b, -EIO);
    ASSERT_EQ(state(b), C); /* the stale failure did not count */
    ASSERT_EQ(weft_breaker_record(b, 0), -EINVAL);
    ASSERT_EQ(weft_breaker_free(b), 0);
    return 0;
}

TEST(breaker_late_bare_records_not_taken_for_trials)
{
    run_seeds(late_bare_root);
}

/* weft_breaker_call knows its generation: exact whatever the order. */
static int late_call_root(void *arg)
{
    (void)arg;
    struct log lg = {0};
    weft_breaker_opts o = {.failure_threshold = 1,
                           .cooldown_ns = 10 * SEC,
                           .on_change = log_change,
                           .ctx = &lg};
    weft_breaker *b = mk(&o);
    /* Two long calls go out while closed; they end at 30 s and 40 s,
     * failing. A short failing call opens the breaker at 1 s; the trial
     * at 11 s succeeds at 12 s, before the long ones end. */
    struct caller longc[2] = {
        {.b = b, .start = 0, .f = {.sleep_ns = 30 * SEC, .status = -EIO}},
        {.b = b, .start = 0, .f = {.sleep_ns = 40 * SEC, .status = -EIO}},
    };
    struct caller shortc = {
        .b = b, .start = SEC, .f = {.sleep_ns = 0, .status = -EIO}};
    struct caller trial = {
        .b = b, .start = 11 * SEC, .f = {.sleep_ns = SEC, .status = 0}};
    weft_scope *s = scope_open();
    spawn(caller_task, &longc[0]);
    spawn(caller_task, &longc[1]);
    spawn(caller_task, &shortc);
    spawn(caller_task, &trial);
    until(11 * SEC + 1);
    ASSERT_EQ(state(b), H); /* the trial is out */
    ASSERT_EQ(weft_breaker_acquire(b), -EHOSTDOWN);
    scope_end(s);
    ASSERT_EQ(longc[0].f.rc, -EIO);
    ASSERT_EQ(longc[1].f.rc, -EIO);
    ASSERT_EQ(trial.f.rc, 0);
    ASSERT_EQ(trial.f.at, 12 * SEC);
    /* The long calls' failures (threshold 1) did not open it again. */
    expect_change(&lg, 0, C, O, SEC);
    expect_change(&lg, 1, O, H, 11 * SEC);
    expect_change(&lg, 2, H, C, 12 * SEC);
    ASSERT_EQ(lg.n, 3);
    weft_breaker_stats st = stats(b);
    ASSERT_EQ(st.state, C);
    ASSERT_EQ(st.calls, 4);
    ASSERT_EQ(st.failures, 3); /* counted, though stale */
    ASSERT_EQ(st.opened, 1);

    /* The same with the trial failing after the long calls' generation
     * ended: a long call succeeding during the half-open period is not a
     * trial's success (the trial's failure reopens it). */
    struct caller l2 = {
        .b = b, .start = 50 * SEC, .f = {.sleep_ns = 12 * SEC, .status = 0}};
    struct caller sh2 = {.b = b, .start = 51 * SEC, .f = {.status = -EIO}};
    struct caller tr2 = {
        .b = b, .start = 61 * SEC, .f = {.sleep_ns = 2 * SEC, .status = -EIO}};
    s = scope_open();
    spawn(caller_task, &l2);
    spawn(caller_task, &sh2);
    spawn(caller_task, &tr2);
    scope_end(s);
    ASSERT_EQ(l2.f.at, 62 * SEC);
    ASSERT_EQ(tr2.f.at, 63 * SEC);
    expect_change(&lg, 3, C, O, 51 * SEC);
    expect_change(&lg, 4, O, H, 61 * SEC);
    expect_change(&lg, 5, H, O, 63 * SEC);
    ASSERT_EQ(lg.n, 6);
    ASSERT_EQ(stats(b).open_until, 73 * SEC);
    ASSERT_EQ(weft_breaker_free(b), 0);
    return 0;
}

TEST(breaker_late_call_records_are_stale)
{
    run_seeds(late_call_root);
}

/* ---- is_failure ---------------------------------------------------------- */

static int pred_calls;

static int not_found_is_fine(int status, void *ctx)
{
    ASSERT_EQ(*(int *)ctx, 7);
    pred_calls++;
    return status != -ENOENT && status != 0 && status != 1;
}

static int predicate_root(void *arg)
{
    (void)arg;
    int magic = 7;
    pred_calls = 0;
    weft_breaker_opts o = {
        .failure_threshold = 2, .is_failure = not_found_is_fine, .ctx = &magic};
    weft_breaker *b = mk(&o);
    one(b, -ENOENT);
    one(b, -ENOENT);
    one(b, -ENOENT);
    ASSERT_EQ(state(b), C);
    one(b, 5); /* positive, and a failure by this predicate */
    one(b, 1); /* a success: resets */
    one(b, 5);
    ASSERT_EQ(state(b), C);
    struct fnarg f = {.status = -EPIPE};
    ASSERT_EQ(weft_breaker_call(b, fn_status, &f), -EPIPE);
    ASSERT_EQ(state(b), O);
    ASSERT_EQ(pred_calls, 7);
    weft_breaker_stats st = stats(b);
    ASSERT_EQ(st.calls, 7);
    ASSERT_EQ(st.failures, 3);
    ASSERT_EQ(weft_breaker_free(b), 0);
    return 0;
}

TEST(breaker_is_failure_predicate)
{
    ASSERT_EQ(t_run_virtual(1, predicate_root, NULL), 0);
}

/* ---- on_change may call the breaker; reports stay in order --------------- */

struct reent {
    struct log lg;
    int depth, max_depth;
};

/* When the breaker closes, trips it again from inside the callback: the
 * change that causes is reported after this call returns, in order. */
static void reent_change(weft_breaker *b, weft_breaker_state from,
                         weft_breaker_state to, void *ctx)
{
    struct reent *r = ctx;
    ASSERT(r->lg.n < LOG_MAX);
    r->depth++;
    if (r->depth > r->max_depth)
        r->max_depth = r->depth;
    r->lg.c[r->lg.n++] = (struct change){from, to, weft_now(), to};
    if (to == C) {
        ASSERT_EQ(weft_breaker_acquire(b), 0);
        ASSERT_EQ(weft_breaker_record(b, -EIO), 0);
        ASSERT_EQ(r->lg.n, 3);                   /* not reported yet */
        ASSERT_EQ(weft_breaker_free(b), -EBUSY); /* a report is on */
    }
    r->depth--;
}

static int reent_root(void *arg)
{
    (void)arg;
    static struct reent r;
    memset(&r, 0, sizeof r);
    weft_breaker_opts o = {.failure_threshold = 1,
                           .cooldown_ns = SEC,
                           .on_change = reent_change,
                           .ctx = &r};
    weft_breaker *b = mk(&o);
    one(b, -EIO); /* C->O */
    until(SEC);
    one(b, 0); /* O->H, H->C, and from the callback C->O */
    ASSERT_EQ(r.lg.n, 4);
    ASSERT_EQ(r.max_depth, 1);
    weft_breaker_state want[4][2] = {{C, O}, {O, H}, {H, C}, {C, O}};
    for (int i = 0; i < 4; i++) {
        ASSERT_EQ(r.lg.c[i].from, want[i][0]);
        ASSERT_EQ(r.lg.c[i].to, want[i][1]);
    }
    ASSERT_EQ(state(b), O);
    ASSERT_EQ(weft_breaker_free(b), 0);
    return 0;
}

TEST(breaker_on_change_reentrant_in_order)
{
    ASSERT_EQ(t_run_virtual(1, reent_root, NULL), 0);
}

/* ---- counters add up across workers and a plain thread ------------------- */

#define CC_TASKS 16

struct cc {
    weft_breaker *b;
    long per_task, per_thread;
    atomic_long attempts, ran, failed, rejected;
    /* on_change: reports are made one at a time, so plain fields */
    long reports, opens;
    weft_breaker_state last;
    uint64_t rng[CC_TASKS];
    atomic_int thread_done;
};

static struct cc *cc_cur;

static void cc_change(weft_breaker *b, weft_breaker_state from,
                      weft_breaker_state to, void *ctx)
{
    struct cc *x = ctx;
    (void)b;
    if (from != x->last)
        T_FAIL("report %ld: %d -> %d after a change to %d", x->reports, from,
               to, x->last);
    int valid = (from == C && to == O) || (from == O && to == H) ||
                (from == H && (to == C || to == O));
    if (!valid)
        T_FAIL("bad change %d -> %d", from, to);
    x->last = to;
    x->reports++;
    x->opens += to == O;
}

static int cc_fn(void *arg)
{
    uint64_t *rng = arg;
    struct cc *x = cc_cur;
    atomic_fetch_add(&x->ran, 1);
    uint64_t r = rnd(rng);
    if (r & 1)
        ASSERT_EQ(weft_yield(), 0);
    if (r % 4 == 0) {
        atomic_fetch_add(&x->failed, 1);
        return -EIO;
    }
    return (int)(r >> 60);
}

static int cc_task(void *arg)
{
    uint64_t *rng = arg;
    struct cc *x = cc_cur;
    for (long i = 0; i < x->per_task; i++) {
        atomic_fetch_add(&x->attempts, 1);
        int rc;
        if (i % 4 == 3) {
            /* bare, from a task */
            rc = weft_breaker_acquire(x->b);
            if (rc == 0)
                ASSERT_EQ(weft_breaker_record(x->b, cc_fn(rng)), 0);
        } else {
            rc = weft_breaker_call(x->b, cc_fn, rng);
        }
        if (rc == -EHOSTDOWN) {
            atomic_fetch_add(&x->rejected, 1);
            ASSERT_EQ(weft_sleep_for(5 * WEFT_USEC), 0); /* back off a bit */
        } else {
            ASSERT(rc >= -EIO);
        }
        if (i % 16 == 0)
            ASSERT_EQ(weft_sleep_for(WEFT_USEC), 0);
    }
    return 0;
}

static void *cc_thread(void *arg)
{
    struct cc *x = arg;
    uint64_t rng = 99;
    for (long i = 0; i < x->per_thread; i++) {
        atomic_fetch_add(&x->attempts, 1);
        int rc = weft_breaker_acquire(x->b);
        if (rc == -EHOSTDOWN) {
            atomic_fetch_add(&x->rejected, 1);
            nanosleep(&(struct timespec){0, 5000}, NULL);
            continue;
        }
        ASSERT_EQ(rc, 0);
        atomic_fetch_add(&x->ran, 1);
        int status = 0;
        if (rnd(&rng) % 4 == 0) {
            atomic_fetch_add(&x->failed, 1);
            status = -ECONNRESET;
        }
        if (i % 8 == 0)
            sched_yield();
        ASSERT_EQ(weft_breaker_record(x->b, status), 0);
    }
    atomic_store(&x->thread_done, 1);
    return NULL;
}

static int cc_root(void *arg)
{
    struct cc *x = arg;
    pthread_t th;
    ASSERT_EQ(pthread_create(&th, NULL, cc_thread, x), 0);
    weft_scope *s = scope_open();
    for (int i = 0; i < CC_TASKS; i++) {
        x->rng[i] = (uint64_t)i * 7919 + 1;
        spawn(cc_task, &x->rng[i]);
    }
    scope_end(s);
    ASSERT_EQ(pthread_join(th, NULL), 0);
    return 0;
}

static void run_cc(int workers)
{
    static struct cc x;
    memset(&x, 0, sizeof x);
    cc_cur = &x;
    x.per_task = T_SCALE(4000);
    x.per_thread = T_SCALE(40000);
    x.last = C;
    weft_breaker_opts o = {.failure_threshold = 3,
                           .failure_rate = 50,
                           .min_calls = 20,
                           .window_ns = WEFT_MSEC,
                           .cooldown_ns = 20 * WEFT_USEC,
                           .half_open_calls = 2,
                           .on_change = cc_change,
                           .ctx = &x};
    x.b = mk(&o);
    ASSERT_EQ(t_run_mono(workers, cc_root, &x), 0);
    weft_breaker_stats st = stats(x.b);
    long attempts = atomic_load(&x.attempts);
    ASSERT_EQ(attempts, CC_TASKS * x.per_task + x.per_thread);
    ASSERT_EQ(st.calls, atomic_load(&x.ran));
    ASSERT_EQ(st.rejected, atomic_load(&x.rejected));
    ASSERT_EQ(st.calls + st.rejected, attempts);
    ASSERT_EQ(st.failures, atomic_load(&x.failed));
    ASSERT_EQ(st.opened, x.opens);
    ASSERT(st.opened > 0);
    ASSERT(st.rejected > 0);
    /* Every report made, the last one to the state it is in (an open
     * breaker past its cool-down shows as half-open). */
    weft_breaker_state now = st.state;
    if (x.last == O)
        ASSERT(now == O || now == H);
    else
        ASSERT_EQ(now, x.last);
    ASSERT_EQ(weft_breaker_free(x.b), 0);
}

TEST(breaker_counters_exact_across_workers_and_a_thread)
{
    run_cc(2);
    run_cc(4);
}
