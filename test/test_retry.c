/* SPDX-License-Identifier: MIT */
/*
 * Retry, backoff and fallback. The delay sequences are checked against the
 * formulas of src/future/retry.c's top comment: exactly for WEFT_JITTER_NONE,
 * within their bounds over many draws for the random modes, and the same
 * for the same seed. weft_retry_call and weft_call_fallback_for run on the
 * virtual clock, so every sleep and every give-up instant is asserted
 * exactly.
 */
#include "t.h"
#include "weft.h"

#include <errno.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdint.h>

#define MS WEFT_MSEC

/* min(cap, base * 2^k) with cap 0 meaning none, computed independently of
 * the library (by doubling with a saturation check). */
static int64_t ref_exp(int64_t base, int64_t cap, int k)
{
    if (cap == 0)
        cap = INT64_MAX;
    int64_t e = base;
    for (int i = 0; i < k; i++) {
        if (e > cap / 2) {
            e = cap;
            break;
        }
        e *= 2;
    }
    return e < cap ? e : cap;
}

static void draws(const weft_retry *p, int64_t *out, int n)
{
    weft_backoff b;
    ASSERT_EQ(weft_backoff_init(&b, p), 0);
    for (int i = 0; i < n; i++) {
        out[i] = weft_backoff_next(&b);
        ASSERT(out[i] >= 0);
    }
    ASSERT_EQ(b.attempt, n);
}

/* ---- backoff sequences ----------------------------------------------- */

TEST(backoff_none_exact)
{
    /* The defaults: 100 ms doubling, no cap. */
    weft_retry p = {0};
    int64_t d[80];
    draws(&p, d, 80);
    for (int k = 0; k < 80; k++)
        ASSERT_EQ(d[k], ref_exp(100 * MS, 0, k));
    ASSERT_EQ(d[0], 100 * MS);
    ASSERT_EQ(d[1], 200 * MS);
    ASSERT_EQ(d[2], 400 * MS);
    ASSERT_EQ(d[10], 102400 * MS);
    /* 100 ms * 2^36 < 2^63 <= 100 ms * 2^37: saturated at INT64_MAX. */
    ASSERT_EQ(d[36], (int64_t)100 * MS << 36);
    ASSERT_EQ(d[37], INT64_MAX);
    ASSERT_EQ(d[79], INT64_MAX);

    /* Base 1 ns: every power of two, then INT64_MAX from k = 63 on. */
    p.base_ns = 1;
    draws(&p, d, 80);
    for (int k = 0; k < 63; k++)
        ASSERT_EQ(d[k], (int64_t)1 << k);
    for (int k = 63; k < 80; k++)
        ASSERT_EQ(d[k], INT64_MAX);

    /* A cap that is not a power-of-two multiple of base. */
    p.base_ns = 3;
    p.cap_ns = 1000;
    draws(&p, d, 80);
    int64_t want[] = {3, 6, 12, 24, 48, 96, 192, 384, 768, 1000, 1000};
    for (int k = 0; k < 11; k++)
        ASSERT_EQ(d[k], want[k]);
    for (int k = 11; k < 80; k++)
        ASSERT_EQ(d[k], 1000);

    /* A cap below base: every delay is the cap. */
    p.base_ns = 500;
    p.cap_ns = 7;
    draws(&p, d, 10);
    for (int k = 0; k < 10; k++)
        ASSERT_EQ(d[k], 7);

    /* A huge base saturates at once without overflow. */
    p.base_ns = INT64_MAX;
    p.cap_ns = 0;
    draws(&p, d, 70);
    for (int k = 0; k < 70; k++)
        ASSERT_EQ(d[k], INT64_MAX);
    p.base_ns = INT64_MAX / 2 + 1; /* 2^62 */
    draws(&p, d, 70);
    ASSERT_EQ(d[0], (int64_t)1 << 62);
    for (int k = 1; k < 70; k++)
        ASSERT_EQ(d[k], INT64_MAX);
}

TEST(backoff_errors)
{
    weft_backoff b;
    weft_retry p = {0};
    ASSERT_EQ(weft_backoff_init(NULL, &p), -EINVAL);
    ASSERT_EQ(weft_backoff_next(NULL), -EINVAL);
    weft_retry bad[] = {
        {.max_attempts = -1},
        {.base_ns = -1},
        {.cap_ns = -5},
        {.budget_ns = -1},
        {.jitter = (weft_jitter)4},
        {.jitter = (weft_jitter)-1},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        ASSERT_EQ(weft_backoff_init(&b, &bad[i]), -EINVAL);
    /* NULL policy: the defaults. */
    ASSERT_EQ(weft_backoff_init(&b, NULL), 0);
    ASSERT_EQ(weft_backoff_next(&b), 100 * MS);
    ASSERT_EQ(weft_backoff_next(&b), 200 * MS);
    /* A policy made invalid after init. */
    ASSERT_EQ(weft_backoff_init(&b, &p), 0);
    p.jitter = (weft_jitter)9;
    ASSERT_EQ(weft_backoff_next(&b), -EINVAL);
    b.policy = NULL;
    ASSERT_EQ(weft_backoff_next(&b), -EINVAL);
}

#define SEQ 64
#define SEEDS 2000

/* For a random mode: every draw within its bounds (checked by `within`
 * with the k-th exponential and the previous delay), the same sequence for
 * the same seed, a different one for a different seed; both ends of the
 * range are reached at small k. */
typedef void (*bounds_fn)(int64_t d, int64_t e, int64_t prev,
                          const weft_retry *p);

static void check_mode(weft_jitter j, int64_t base, int64_t cap,
                       bounds_fn within, int64_t lo0, int64_t hi0)
{
    weft_retry p = {.base_ns = base, .cap_ns = cap, .jitter = j};
    int64_t d[SEQ], again[SEQ], first[SEQ];
    int lo_hit = 0, hi_hit = 0;
    for (uint64_t seed = 1; seed <= SEEDS; seed++) {
        p.seed = seed;
        draws(&p, d, SEQ);
        int64_t prev = base;
        for (int k = 0; k < SEQ; k++) {
            within(d[k], ref_exp(base, cap, k), prev, &p);
            prev = d[k];
        }
        lo_hit += d[0] == lo0;
        hi_hit += d[0] == hi0;
        draws(&p, again, SEQ);
        ASSERT(memcmp(d, again, sizeof(d)) == 0);
        if (seed == 1)
            memcpy(first, d, sizeof(d));
        else
            ASSERT(memcmp(d, first, sizeof(d)) != 0);
    }
    ASSERT(lo_hit > 0);
    ASSERT(hi_hit > 0);
}

static void full_bounds(int64_t d, int64_t e, int64_t prev, const weft_retry *p)
{
    ASSERT(d >= 0);
    ASSERT(d <= e);
}

static void equal_bounds(int64_t d, int64_t e, int64_t prev,
                         const weft_retry *p)
{
    ASSERT(d >= e - e / 2); /* ceil(e / 2) */
    ASSERT(d <= e);
}

static void decorrelated_bounds(int64_t d, int64_t e, int64_t prev,
                                const weft_retry *p)
{
    int64_t cap = p->cap_ns ? p->cap_ns : INT64_MAX;
    int64_t hi = prev > INT64_MAX / 3 ? INT64_MAX : prev * 3;
    if (hi < p->base_ns)
        hi = p->base_ns;
    if (hi > cap)
        hi = cap;
    int64_t lo = p->base_ns < cap ? p->base_ns : cap;
    ASSERT(d >= lo);
    ASSERT(d <= hi);
}

TEST(backoff_full_jitter_bounds_and_seeds)
{
    /* Small base: U[0, 4] at k = 0, so both ends come up. */
    check_mode(WEFT_JITTER_FULL, 4, 0, full_bounds, 0, 4);
    check_mode(WEFT_JITTER_FULL, 4, 1000, full_bounds, 0, 4);
}

TEST(backoff_equal_jitter_bounds_and_seeds)
{
    /* k = 0: e = 5, [3, 5]. */
    check_mode(WEFT_JITTER_EQUAL, 5, 0, equal_bounds, 3, 5);
    check_mode(WEFT_JITTER_EQUAL, 5, 777, equal_bounds, 3, 5);
}

TEST(backoff_decorrelated_jitter_bounds_and_seeds)
{
    /* k = 0: U[2, 6]. */
    check_mode(WEFT_JITTER_DECORRELATED, 2, 0, decorrelated_bounds, 2, 6);
    check_mode(WEFT_JITTER_DECORRELATED, 2, 100, decorrelated_bounds, 2, 6);
    /* A cap below base: always the cap. */
    weft_retry p = {.base_ns = 50,
                    .cap_ns = 20,
                    .jitter = WEFT_JITTER_DECORRELATED,
                    .seed = 3};
    int64_t d[SEQ];
    draws(&p, d, SEQ);
    for (int k = 0; k < SEQ; k++)
        ASSERT_EQ(d[k], 20);
}

/* Every mode at large k and huge bases: no overflow, no negative delay,
 * and nothing above the cap (INT64_MAX when there is none). */
TEST(backoff_large_k_no_overflow)
{
    int64_t bases[] = {1, 100 * MS, INT64_MAX / 3, INT64_MAX / 2 + 1,
                       INT64_MAX};
    int64_t caps[] = {0, WEFT_SEC, INT64_MAX - 1};
    for (int j = WEFT_JITTER_NONE; j <= WEFT_JITTER_DECORRELATED; j++)
        for (size_t bi = 0; bi < 5; bi++)
            for (size_t ci = 0; ci < 3; ci++) {
                weft_retry p = {.base_ns = bases[bi],
                                .cap_ns = caps[ci],
                                .jitter = (weft_jitter)j,
                                .seed = 77 + bi};
                int64_t cap = caps[ci] ? caps[ci] : INT64_MAX;
                weft_backoff b;
                ASSERT_EQ(weft_backoff_init(&b, &p), 0);
                int saw_cap = 0;
                for (int k = 0; k < 300; k++) {
                    int64_t d = weft_backoff_next(&b);
                    ASSERT(d >= 0);
                    ASSERT(d <= cap);
                    if (j == WEFT_JITTER_NONE || j == WEFT_JITTER_EQUAL)
                        ASSERT(d >= (k >= 63 ? cap - cap / 2 : 0));
                    saw_cap |= d == cap;
                }
                if (j == WEFT_JITTER_NONE)
                    ASSERT(saw_cap);
            }
    /* The attempt counter stops at INT_MAX rather than overflow. */
    weft_retry p = {.base_ns = 1};
    weft_backoff b;
    ASSERT_EQ(weft_backoff_init(&b, &p), 0);
    b.attempt = INT_MAX - 1;
    ASSERT_EQ(weft_backoff_next(&b), INT64_MAX);
    ASSERT_EQ(b.attempt, INT_MAX);
    ASSERT_EQ(weft_backoff_next(&b), INT64_MAX);
    ASSERT_EQ(b.attempt, INT_MAX);
}

/* U[a, b] is unbiased: with a range of 3 (which does not divide 2^64) each
 * value comes up a third of the time, within 4 standard deviations. */
TEST(backoff_uniform_draws_unbiased)
{
    enum { N = 300000 };
    weft_retry p = {
        .base_ns = 2, .cap_ns = 2, .jitter = WEFT_JITTER_FULL, .seed = 12345};
    weft_backoff b;
    ASSERT_EQ(weft_backoff_init(&b, &p), 0);
    long count[3] = {0, 0, 0};
    for (int i = 0; i < N; i++) {
        int64_t d = weft_backoff_next(&b);
        ASSERT(d >= 0 && d <= 2);
        count[d]++;
    }
    /* sd = sqrt(N * 1/3 * 2/3) ~ 258 */
    for (int v = 0; v < 3; v++)
        ASSERT(count[v] > N / 3 - 1033 && count[v] < N / 3 + 1033);

    /* Decorrelated with prev reset to base before each draw: U[2, 6]. */
    long c5[5] = {0};
    weft_retry q = {.base_ns = 2,
                    .cap_ns = 6,
                    .jitter = WEFT_JITTER_DECORRELATED,
                    .seed = 999};
    ASSERT_EQ(weft_backoff_init(&b, &q), 0);
    for (int i = 0; i < N; i++) {
        b.prev = 2; /* always U[2, 6] */
        int64_t d = weft_backoff_next(&b);
        ASSERT(d >= 2 && d <= 6);
        c5[d - 2]++;
    }
    /* sd = sqrt(N * 1/5 * 4/5) ~ 219 */
    for (int v = 0; v < 5; v++)
        ASSERT(c5[v] > N / 5 - 876 && c5[v] < N / 5 + 876);
}

/* Seed 0 draws a seed: two backoffs differ (outside a runtime too). */
TEST(backoff_seed_zero_draws)
{
    weft_retry p = {.base_ns = WEFT_SEC, .jitter = WEFT_JITTER_FULL};
    int64_t a[8], b[8];
    draws(&p, a, 8);
    draws(&p, b, 8);
    ASSERT(memcmp(a, b, sizeof(a)) != 0);
}

static int seeded_draw_root(void *arg)
{
    int64_t *out = arg;
    weft_retry p = {.base_ns = WEFT_SEC, .jitter = WEFT_JITTER_FULL};
    draws(&p, out, 8);
    return 0;
}

/* In a runtime run with a seed, seed 0 draws from the runtime: the same
 * runtime seed gives the same delays. */
TEST(backoff_seed_zero_reproducible_under_runtime_seed)
{
    int64_t a[8], b[8], c[8];
    ASSERT_EQ(t_run(1, WEFT_CLOCK_VIRTUAL, 42, seeded_draw_root, a), 0);
    ASSERT_EQ(t_run(1, WEFT_CLOCK_VIRTUAL, 42, seeded_draw_root, b), 0);
    ASSERT_EQ(t_run(1, WEFT_CLOCK_VIRTUAL, 43, seeded_draw_root, c), 0);
    if (!getenv("WEFT_SEED")) {
        ASSERT(memcmp(a, b, sizeof(a)) == 0);
        ASSERT(memcmp(a, c, sizeof(a)) != 0);
    }
}

/* ---- weft_retry_call ------------------------------------------------- */

#define MAXREC 128

struct rec {
    /* fn */
    int calls;
    weft_time at[MAXREC];  /* when each attempt started */
    int status[MAXREC];    /* what attempt i (0-based) returns, 0: -EAGAIN */
    int64_t work_ns;       /* each attempt sleeps this long first */
    int64_t work[MAXREC];  /* attempt i sleeps this long, 0: work_ns */
    int work_rc[MAXREC];   /* what attempt i's sleep returned */
    weft_time end[MAXREC]; /* when attempt i returned */
    weft_time deadline[MAXREC]; /* weft_deadline() in attempt i */
    /* on_retry */
    int retries;
    int r_attempt[MAXREC], r_status[MAXREC];
    int64_t r_delay[MAXREC];
    weft_time r_at[MAXREC];
};

static int rec_fn(void *arg)
{
    struct rec *r = arg;
    ASSERT(r->calls < MAXREC);
    r->at[r->calls] = weft_now();
    r->deadline[r->calls] = weft_deadline();
    int i = r->calls++;
    int64_t work = r->work[i] ? r->work[i] : r->work_ns;
    int rc = work ? weft_sleep_for(work) : 0;
    r->work_rc[i] = rc;
    r->end[i] = weft_now();
    if (rc)
        return rc;
    return r->status[i] ? r->status[i] : -EAGAIN;
}

/* Every failure is worth another attempt: for tests of the schedule that
 * fail with made-up codes. */
static int any_failure(int status, void *ctx)
{
    (void)ctx;
    return status < 0;
}

static void rec_on_retry(int attempt, int status, int64_t delay, void *ctx)
{
    struct rec *r = ctx;
    ASSERT(r->retries < MAXREC);
    r->r_attempt[r->retries] = attempt;
    r->r_status[r->retries] = status;
    r->r_delay[r->retries] = delay;
    r->r_at[r->retries] = weft_now();
    r->retries++;
}

static struct rec rec;

/* fn fails every time: it is called max_attempts times, and between calls
 * the task sleeps exactly the sequence a second backoff with the same
 * policy draws; on_retry sees each failure. */
static int sequence_root(void *arg)
{
    (void)arg;
    for (int j = WEFT_JITTER_NONE; j <= WEFT_JITTER_DECORRELATED; j++) {
        for (int max = 1; max <= 9; max += 4) {
            memset(&rec, 0, sizeof(rec));
            for (int i = 0; i < MAXREC; i++)
                rec.status[i] = -1000 - i;
            weft_retry p = {.max_attempts = max,
                            .base_ns = 10 * MS,
                            .cap_ns = 700 * MS,
                            .jitter = (weft_jitter)j,
                            .retryable = any_failure,
                            .on_retry = rec_on_retry,
                            .ctx = &rec,
                            .seed = 1234 + (uint64_t)j};
            weft_time t0 = weft_now();
            ASSERT_EQ(weft_retry_call(&p, rec_fn, &rec), -1000 - (max - 1));
            ASSERT_EQ(rec.calls, max);
            ASSERT_EQ(rec.retries, max - 1);
            weft_backoff b;
            ASSERT_EQ(weft_backoff_init(&b, &p), 0);
            weft_time t = t0;
            for (int i = 0; i < max; i++) {
                ASSERT_EQ(rec.at[i], t);
                if (i == max - 1)
                    break;
                int64_t d = weft_backoff_next(&b);
                ASSERT_EQ(rec.r_attempt[i], i + 1);
                ASSERT_EQ(rec.r_status[i], -1000 - i);
                ASSERT_EQ(rec.r_delay[i], d);
                ASSERT_EQ(rec.r_at[i], t);
                t += d;
            }
            ASSERT_EQ(weft_now(), t); /* no sleep after the last attempt */
        }
    }
    return 0;
}

TEST(retry_sleeps_exact_backoff_sequence)
{
    ASSERT_EQ(t_run_virtual(1, sequence_root, NULL), 0);
}

static int defaults_root(void *arg)
{
    (void)arg;
    /* NULL policy: 3 attempts, 100 ms then 200 ms, no jitter. */
    memset(&rec, 0, sizeof(rec));
    ASSERT_EQ(weft_retry_call(NULL, rec_fn, &rec), -EAGAIN);
    ASSERT_EQ(rec.calls, 3);
    ASSERT_EQ(rec.at[0], 0);
    ASSERT_EQ(rec.at[1], 100 * MS);
    ASSERT_EQ(rec.at[2], 300 * MS);
    ASSERT_EQ(weft_now(), 300 * MS);

    /* Success on attempt k stops there, returning fn's value. */
    for (int k = 1; k <= 4; k++) {
        memset(&rec, 0, sizeof(rec));
        rec.status[k - 1] = 40 + k;
        weft_retry p = {.max_attempts = 10, .base_ns = MS};
        weft_time t0 = weft_now();
        ASSERT_EQ(weft_retry_call(&p, rec_fn, &rec), 40 + k);
        ASSERT_EQ(rec.calls, k);
        ASSERT_EQ(weft_now() - t0, ((int64_t)1 << (k - 1)) * MS - MS);
    }
    return 0;
}

TEST(retry_defaults_and_success_stops)
{
    ASSERT_EQ(t_run_virtual(1, defaults_root, NULL), 0);
}

static int zero_then(void *arg)
{
    int *calls = arg;
    return (*calls)++ == 0 ? -EAGAIN : 0;
}

static int only_eagain(int status, void *ctx)
{
    int *asked = ctx;
    (*asked)++;
    ASSERT(status < 0);
    return status == -EAGAIN;
}

static int fail_with(void *arg)
{
    int *st = arg; /* st[0]: calls, st[1..]: statuses */
    return st[1 + st[0]++];
}

static int nonretryable_root(void *arg)
{
    (void)arg;
    /* Status 0 is success. */
    int calls = 0;
    weft_retry p = {.max_attempts = 5, .base_ns = MS};
    ASSERT_EQ(weft_retry_call(&p, zero_then, &calls), 0);
    ASSERT_EQ(calls, 2);
    ASSERT_EQ(weft_now(), MS);

    /* Default: -ECANCELED is not retryable. */
    int st[8] = {0, -ECANCELED};
    weft_time t0 = weft_now();
    ASSERT_EQ(weft_retry_call(&p, fail_with, st), -ECANCELED);
    ASSERT_EQ(st[0], 1);
    ASSERT_EQ(weft_now(), t0);

    /* A custom predicate: -EAGAIN retried, -EINVAL stops at once. */
    int asked = 0;
    weft_retry q = {.max_attempts = 5,
                    .base_ns = MS,
                    .retryable = only_eagain,
                    .ctx = &asked};
    int st2[8] = {0, -EAGAIN, -EAGAIN, -EINVAL, -EAGAIN};
    ASSERT_EQ(weft_retry_call(&q, fail_with, st2), -EINVAL);
    ASSERT_EQ(st2[0], 3);
    ASSERT_EQ(asked, 3);
    ASSERT_EQ(weft_now(), t0 + 3 * MS);
    /* The predicate is not asked about successes. */
    asked = 0;
    int st3[8] = {0, -EAGAIN, 5};
    ASSERT_EQ(weft_retry_call(&q, fail_with, st3), 5);
    ASSERT_EQ(st3[0], 2);
    ASSERT_EQ(asked, 1);
    return 0;
}

TEST(retry_non_retryable_stops_at_once)
{
    ASSERT_EQ(t_run_virtual(1, nonretryable_root, NULL), 0);
}

/* The budget counts from the first attempt's start: an attempt may start
 * at exactly start + budget, not later, and retry_call gives up without
 * sleeping when the next one could not. */
static int budget_root(void *arg)
{
    (void)arg;
    struct {
        int64_t budget, work;
        int calls;
        weft_time end;
    } cases[] = {
        /* attempts at 0, 100, 300, 700: 700 > 350 */
        {350 * MS, 0, 3, 300 * MS},
        {300 * MS, 0, 3, 300 * MS}, /* 300 <= 300: allowed */
        {299 * MS, 0, 2, 100 * MS}, /* 300 > 299 */
        {700 * MS, 0, 4, 700 * MS}, /* the last one at exactly 700 */
        {1, 0, 1, 0},               /* 100 > 1: one attempt only */
        /* 50 ms of work each: starts at 0, 150, 400, 850 */
        {400 * MS, 50 * MS, 3, 450 * MS},
        {849 * MS, 50 * MS, 3, 450 * MS},
        {850 * MS, 50 * MS, 4, 900 * MS},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        memset(&rec, 0, sizeof(rec));
        rec.work_ns = cases[i].work;
        weft_retry p = {.max_attempts = 10,
                        .base_ns = 100 * MS,
                        .budget_ns = cases[i].budget,
                        .on_retry = rec_on_retry,
                        .ctx = &rec};
        weft_time t0 = weft_now();
        ASSERT_EQ(weft_retry_call(&p, rec_fn, &rec), -EAGAIN);
        ASSERT_EQ(rec.calls, cases[i].calls);
        ASSERT_EQ(rec.retries, cases[i].calls - 1);
        ASSERT_EQ(weft_now() - t0, cases[i].end);
    }
    return 0;
}

TEST(retry_budget_stops_early_without_sleeping)
{
    ASSERT_EQ(t_run_virtual(1, budget_root, NULL), 0);
}

/* The enclosing scope's deadline: retry_call returns the last status at
 * the instant it sees the next attempt could not start before the
 * deadline, and never sleeps into it. */
static int deadline_root(void *arg)
{
    (void)arg;
    struct {
        int64_t deadline; /* relative to t0 */
        int calls;
        weft_time end;
    } cases[] = {
        {1000 * MS, 4, 700 * MS}, /* 0, 100, 300, 700; 1500 >= 1000 */
        {701 * MS, 4, 700 * MS},
        {700 * MS, 3, 300 * MS}, /* an attempt at the deadline: no */
        {100 * MS, 1, 0},
        {101 * MS, 2, 100 * MS},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        memset(&rec, 0, sizeof(rec));
        for (int k = 0; k < MAXREC; k++)
            rec.status[k] = -200 - k;
        weft_time t0 = weft_now();
        weft_scope *s;
        weft_scope_opts o = {.deadline = t0 + cases[i].deadline};
        ASSERT_EQ(weft_scope_open(&s, &o), 0);
        /* A nested scope without a deadline: the enclosing one counts. */
        weft_scope *inner = scope_open();
        ASSERT_EQ(weft_deadline(), t0 + cases[i].deadline);
        weft_retry p = {
            .max_attempts = 10, .base_ns = 100 * MS, .retryable = any_failure};
        ASSERT_EQ(weft_retry_call(&p, rec_fn, &rec),
                  -200 - (cases[i].calls - 1));
        ASSERT_EQ(rec.calls, cases[i].calls);
        ASSERT_EQ(weft_now() - t0, cases[i].end);
        ASSERT(!weft_cancelled());
        scope_end(inner);
        scope_end(s); /* left before its deadline */
    }
    /* A budget and a deadline: the earlier one wins. */
    memset(&rec, 0, sizeof(rec));
    weft_time t0 = weft_now();
    weft_scope *s;
    weft_scope_opts o = {.deadline = t0 + 1000 * MS};
    ASSERT_EQ(weft_scope_open(&s, &o), 0);
    weft_retry p = {
        .max_attempts = 10, .base_ns = 100 * MS, .budget_ns = 200 * MS};
    ASSERT_EQ(weft_retry_call(&p, rec_fn, &rec), -EAGAIN);
    ASSERT_EQ(rec.calls, 2);
    ASSERT_EQ(weft_now() - t0, 100 * MS);
    scope_end(s);
    return 0;
}

TEST(retry_scope_deadline_stops_early)
{
    ASSERT_EQ(t_run_virtual(1, deadline_root, NULL), 0);
}

/* A shield hides enclosing deadlines (weft_deadline stops at it). */
static int shield_root(void *arg)
{
    (void)arg;
    memset(&rec, 0, sizeof(rec));
    weft_scope *s, *sh;
    weft_scope_opts o = {.deadline = 250 * MS};
    ASSERT_EQ(weft_scope_open(&s, &o), 0);
    weft_scope_opts so = {.shield = 1};
    ASSERT_EQ(weft_scope_open(&sh, &so), 0);
    weft_retry p = {.max_attempts = 4, .base_ns = 100 * MS};
    ASSERT_EQ(weft_retry_call(&p, rec_fn, &rec), -EAGAIN);
    ASSERT_EQ(rec.calls, 4);
    ASSERT_EQ(weft_now(), 700 * MS);
    ASSERT_EQ(weft_scope_join(sh), 0);
    ASSERT_EQ(weft_scope_free(sh), 0);
    ASSERT_EQ(weft_scope_join(s), -ETIMEDOUT);
    ASSERT_EQ(weft_scope_free(s), 0);
    return 0;
}

TEST(retry_shield_hides_outer_deadline)
{
    ASSERT_EQ(t_run_virtual(1, shield_root, NULL), 0);
}

/* on_retry that blocks (a log write that waits, say): the time it takes
 * is part of the delay, so the next attempt still starts at the instant
 * that was checked against the deadline and the budget, and the retry
 * never sleeps into the deadline. */
static void slow_on_retry(int attempt, int status, int64_t delay, void *ctx)
{
    rec_on_retry(attempt, status, delay, ctx);
    ASSERT_EQ(weft_sleep_for(50 * MS), 0);
}

static int slow_on_retry_root(void *arg)
{
    (void)arg;
    /* Deadline at 120 ms: attempts at 0 and 100 ms; 300 >= 120: stop. */
    memset(&rec, 0, sizeof(rec));
    weft_time t0 = weft_now();
    weft_scope *s;
    weft_scope_opts o = {.deadline = t0 + 120 * MS};
    ASSERT_EQ(weft_scope_open(&s, &o), 0);
    weft_retry p = {.max_attempts = 10,
                    .base_ns = 100 * MS,
                    .on_retry = slow_on_retry,
                    .ctx = &rec};
    ASSERT_EQ(weft_retry_call(&p, rec_fn, &rec), -EAGAIN);
    ASSERT_EQ(rec.calls, 2);
    ASSERT_EQ(rec.at[1] - t0, 100 * MS);
    ASSERT_EQ(weft_now() - t0, 100 * MS);
    ASSERT(!weft_cancelled());
    scope_end(s);

    /* A budget of 100 ms: no attempt starts after t0 + 100 ms. */
    memset(&rec, 0, sizeof(rec));
    t0 = weft_now();
    p.budget_ns = 100 * MS;
    ASSERT_EQ(weft_retry_call(&p, rec_fn, &rec), -EAGAIN);
    ASSERT_EQ(rec.calls, 2);
    ASSERT_EQ(rec.at[1] - t0, 100 * MS);
    return 0;
}

TEST(retry_slow_on_retry_keeps_schedule)
{
    ASSERT_EQ(t_run_virtual(1, slow_on_retry_root, NULL), 0);
}

struct canceller {
    weft_scope *s;
    int64_t after;
};

static int cancel_after(void *arg)
{
    struct canceller *c = arg;
    ASSERT_EQ(weft_sleep_for(c->after), 0);
    ASSERT_EQ(weft_scope_cancel(c->s), 0);
    return 0;
}

static int cancel_root(void *arg)
{
    (void)arg;
    memset(&rec, 0, sizeof(rec));
    struct canceller c = {.after = 150 * MS};
    weft_scope *outer = scope_open();
    weft_scope *s = scope_open();
    c.s = s;
    ASSERT(weft_spawn(outer, cancel_after, &c) >= 0);
    weft_retry p = {.max_attempts = 10,
                    .base_ns = 100 * MS,
                    .on_retry = rec_on_retry,
                    .ctx = &rec};
    /* Attempts at 0 and 100 ms; the sleep of 200 ms is cancelled at 150. */
    ASSERT_EQ(weft_retry_call(&p, rec_fn, &rec), -ECANCELED);
    ASSERT_EQ(weft_now(), 150 * MS);
    ASSERT_EQ(rec.calls, 2);
    ASSERT_EQ(rec.retries, 2);
    ASSERT_EQ(weft_scope_join(s), -ECANCELED);
    ASSERT_EQ(weft_scope_free(s), 0);
    scope_end(outer);
    ASSERT_EQ(rec.calls, 2);

    /* Cancelled already: fn's failure is followed by no attempt. */
    memset(&rec, 0, sizeof(rec));
    s = scope_open();
    ASSERT_EQ(weft_scope_cancel(s), 0);
    weft_time t0 = weft_now();
    ASSERT_EQ(weft_retry_call(&p, rec_fn, &rec), -ECANCELED);
    ASSERT_EQ(rec.calls, 1);
    ASSERT_EQ(weft_now(), t0);
    ASSERT_EQ(weft_scope_join(s), -ECANCELED);
    ASSERT_EQ(weft_scope_free(s), 0);
    return 0;
}

TEST(retry_cancel_during_sleep)
{
    ASSERT_EQ(t_run_virtual(1, cancel_root, NULL), 0);
}

/* Huge delays: base 1 ns, no cap, 100 attempts. The task sleeps 1, 2, 4,
 * ..., 2^61 ns (reaching 2^62 - 1); the next delay, 2^62, would end at
 * INT64_MAX = WEFT_NEVER, so it stops there: 63 calls, no overflow. */
static int huge_root(void *arg)
{
    (void)arg;
    memset(&rec, 0, sizeof(rec));
    weft_retry p = {.max_attempts = 100, .base_ns = 1};
    ASSERT_EQ(weft_retry_call(&p, rec_fn, &rec), -EAGAIN);
    ASSERT_EQ(rec.calls, 63);
    ASSERT_EQ(weft_now(), ((int64_t)1 << 62) - 1);
    return 0;
}

TEST(retry_huge_delays_no_overflow)
{
    ASSERT_EQ(t_run_virtual(1, huge_root, NULL), 0);
}

static int errors_root(void *arg)
{
    (void)arg;
    ASSERT_EQ(weft_retry_call(NULL, NULL, NULL), -EINVAL);
    weft_retry bad = {.base_ns = -1};
    int calls = 0;
    ASSERT_EQ(weft_retry_call(&bad, zero_then, &calls), -EINVAL);
    ASSERT_EQ(calls, 0);
    return 0;
}

TEST(retry_errors)
{
    int calls = 0;
    ASSERT_EQ(weft_retry_call(NULL, zero_then, &calls), -EPERM);
    ASSERT_EQ(calls, 0);
    ASSERT_EQ(t_run_virtual(1, errors_root, NULL), 0);
}

/* ---- the default predicate: transient codes only --------------------- */

static const int transient_codes[] = {
    -ETIMEDOUT, -EAGAIN,       -EWOULDBLOCK,  -EINTR,
    -ENOBUFS,   -ECONNRESET,   -ECONNREFUSED, -ECONNABORTED,
    -ENETRESET, -EHOSTUNREACH, -ENETUNREACH,  -ENETDOWN,
};
static const int permanent_codes[] = {
    -ENOENT, -EINVAL,    -EACCES, -EPERM,     -EPROTO, -EIO,  -ENOMEM,
    -EPIPE,  -EHOSTDOWN, -EBUSY,  -ECANCELED, -EEXIST, -1000, INT_MIN,
};
#define NCODES(a) ((int)(sizeof(a) / sizeof((a)[0])))

static int transient_root(void *arg)
{
    (void)arg;
    weft_retry p = {.max_attempts = 3, .base_ns = MS};
    /* A transient failure is retried: two of them, then success. */
    for (int i = 0; i < NCODES(transient_codes); i++) {
        int st[8] = {0, transient_codes[i], transient_codes[i], 7};
        weft_time t0 = weft_now();
        ASSERT_EQ(weft_retry_call(&p, fail_with, st), 7);
        ASSERT_EQ(st[0], 3);
        ASSERT_EQ(weft_now(), t0 + 3 * MS); /* slept 1 + 2 ms */
    }
    /* Any other failure is returned at once: one call, no sleep. */
    for (int i = 0; i < NCODES(permanent_codes); i++) {
        int st[8] = {0, permanent_codes[i], 7};
        weft_time t0 = weft_now();
        ASSERT_EQ(weft_retry_call(&p, fail_with, st), permanent_codes[i]);
        ASSERT_EQ(st[0], 1);
        ASSERT_EQ(weft_now(), t0);
        st[0] = 0;
        ASSERT_EQ(weft_retry_call(NULL, fail_with, st), permanent_codes[i]);
        ASSERT_EQ(st[0], 1);
    }
    return 0;
}

/* -ENOENT (a 404 mapped to a code) and the other permanent failures fail at
 * once under the default policy; the transient ones are retried. The
 * predicate itself answers outside a runtime too. */
TEST(retry_default_retries_transient_codes_only)
{
    for (int i = 0; i < NCODES(transient_codes); i++)
        ASSERT_EQ(weft_retry_transient(transient_codes[i], NULL), 1);
    for (int i = 0; i < NCODES(permanent_codes); i++)
        ASSERT_EQ(weft_retry_transient(permanent_codes[i], &rec), 0);
    ASSERT_EQ(weft_retry_transient(0, NULL), 0);
    ASSERT_EQ(weft_retry_transient(ETIMEDOUT, NULL), 0); /* positive */
    ASSERT_EQ(t_run_virtual(1, transient_root, NULL), 0);
}

/* ---- attempt_timeout_ns ---------------------------------------------- */

/* Refuses -ETIMEDOUT: to see that a timed-out attempt reads -ETIMEDOUT. */
static int all_but_timeout(int status, void *ctx)
{
    int *asked = ctx;
    (*asked)++;
    return status != -ETIMEDOUT;
}

static int attempt_timeout_root(void *arg)
{
    (void)arg;
    /* Every attempt hangs: each is cut at exactly its start + 1 s and
     * counts as -ETIMEDOUT, which is retried (delays 100 and 200 ms). */
    memset(&rec, 0, sizeof(rec));
    rec.work_ns = 10 * WEFT_SEC;
    weft_retry p = {.max_attempts = 3,
                    .base_ns = 100 * MS,
                    .attempt_timeout_ns = WEFT_SEC,
                    .on_retry = rec_on_retry,
                    .ctx = &rec};
    weft_time t0 = weft_now();
    weft_scope *caller = weft_scope_current();
    ASSERT_EQ(weft_retry_call(&p, rec_fn, &rec), -ETIMEDOUT);
    ASSERT_EQ(rec.calls, 3);
    weft_time starts[3] = {0, 1100 * MS, 2300 * MS};
    for (int i = 0; i < 3; i++) {
        ASSERT_EQ(rec.at[i] - t0, starts[i]);
        ASSERT_EQ(rec.deadline[i] - t0, starts[i] + WEFT_SEC);
        ASSERT_EQ(rec.end[i] - t0, starts[i] + WEFT_SEC);
        ASSERT_EQ(rec.work_rc[i], -ECANCELED); /* fn saw a cancel */
    }
    ASSERT_EQ(rec.retries, 2);
    ASSERT_EQ(rec.r_status[0], -ETIMEDOUT);
    ASSERT_EQ(rec.r_status[1], -ETIMEDOUT);
    ASSERT_EQ(rec.r_at[0] - t0, WEFT_SEC);
    ASSERT_EQ(rec.r_at[1] - t0, 2100 * MS);
    ASSERT_EQ(weft_now() - t0, 3300 * MS);
    ASSERT(weft_scope_current() == caller);
    ASSERT(!weft_cancelled());
    ASSERT_EQ(weft_deadline(), WEFT_NEVER);

    /* An attempt that finishes in time keeps its status: the first hangs
     * (-ETIMEDOUT at 1 s), the second answers 500 ms after it starts. */
    memset(&rec, 0, sizeof(rec));
    rec.work[0] = 10 * WEFT_SEC;
    rec.work_ns = 500 * MS;
    rec.status[1] = 3;
    t0 = weft_now();
    ASSERT_EQ(weft_retry_call(&p, rec_fn, &rec), 3);
    ASSERT_EQ(rec.calls, 2);
    ASSERT_EQ(rec.at[1] - t0, 1100 * MS);
    ASSERT_EQ(rec.work_rc[1], 0);
    ASSERT_EQ(weft_now() - t0, 1600 * MS);
    memset(&rec, 0, sizeof(rec));
    rec.work_ns = 500 * MS; /* fails fast (-EAGAIN) in time: retried */
    rec.status[2] = 9;
    t0 = weft_now();
    ASSERT_EQ(weft_retry_call(&p, rec_fn, &rec), 9);
    ASSERT_EQ(rec.calls, 3);
    ASSERT_EQ(rec.at[1] - t0, 600 * MS);
    ASSERT_EQ(rec.at[2] - t0, 1300 * MS);
    ASSERT_EQ(weft_now() - t0, 1800 * MS);

    /* The predicate is asked about -ETIMEDOUT, not fn's -ECANCELED. */
    int asked = 0;
    memset(&rec, 0, sizeof(rec));
    rec.work_ns = 10 * WEFT_SEC;
    weft_retry q = p;
    q.retryable = all_but_timeout;
    q.on_retry = NULL;
    q.ctx = &asked;
    t0 = weft_now();
    ASSERT_EQ(weft_retry_call(&q, rec_fn, &rec), -ETIMEDOUT);
    ASSERT_EQ(rec.calls, 1);
    ASSERT_EQ(asked, 1);
    ASSERT_EQ(weft_now() - t0, WEFT_SEC);
    return 0;
}

TEST(retry_attempt_timeout_exact_instants)
{
    ASSERT_EQ(t_run_virtual(1, attempt_timeout_root, NULL), 0);
}

/* The task's own deadline bounds the attempts: an attempt whose limit
 * would end at or after it runs without one and is cut by the task's
 * deadline (fn's own status, -ECANCELED, ends the retries); one whose limit
 * ends before it is timed out as usual. */
static int attempt_vs_deadline_root(void *arg)
{
    (void)arg;
    /* deadline (from t0) -> what the third attempt, at 2.3 s, meets */
    int64_t deadlines[] = {2500 * MS, 3300 * MS, 3301 * MS};
    for (int k = 0; k < 3; k++) {
        memset(&rec, 0, sizeof(rec));
        rec.work_ns = 10 * WEFT_SEC;
        weft_retry p = {.max_attempts = 3,
                        .base_ns = 100 * MS,
                        .attempt_timeout_ns = WEFT_SEC};
        weft_time t0 = weft_now();
        weft_scope *s;
        weft_scope_opts o = {.deadline = t0 + deadlines[k]};
        ASSERT_EQ(weft_scope_open(&s, &o), 0);
        int rc = weft_retry_call(&p, rec_fn, &rec);
        ASSERT_EQ(rec.calls, 3);
        ASSERT_EQ(rec.at[2] - t0, 2300 * MS);
        ASSERT_EQ(rec.deadline[0] - t0, WEFT_SEC);
        ASSERT_EQ(rec.deadline[1] - t0, 2100 * MS);
        if (k < 2) {
            /* 2.3 + 1 >= the deadline: the task's deadline governs. */
            ASSERT_EQ(rc, -ECANCELED);
            ASSERT_EQ(rec.deadline[2] - t0, deadlines[k]);
            ASSERT_EQ(weft_now() - t0, deadlines[k]);
            ASSERT_EQ(weft_scope_join(s), -ETIMEDOUT);
        } else {
            ASSERT_EQ(rc, -ETIMEDOUT);
            ASSERT_EQ(rec.deadline[2] - t0, 3300 * MS);
            ASSERT_EQ(weft_now() - t0, 3300 * MS);
            ASSERT_EQ(weft_scope_join(s), 0);
        }
        ASSERT_EQ(rec.end[2], weft_now());
        ASSERT_EQ(weft_scope_free(s), 0);
    }
    /* A deadline before the second attempt could start: one attempt,
     * timed out at 1 s, then the last status at once (1.1 >= 1.05). */
    memset(&rec, 0, sizeof(rec));
    rec.work_ns = 10 * WEFT_SEC;
    weft_retry p = {
        .max_attempts = 3, .base_ns = 100 * MS, .attempt_timeout_ns = WEFT_SEC};
    weft_time t0 = weft_now();
    weft_scope *s;
    weft_scope_opts o = {.deadline = t0 + 1050 * MS};
    ASSERT_EQ(weft_scope_open(&s, &o), 0);
    ASSERT_EQ(weft_retry_call(&p, rec_fn, &rec), -ETIMEDOUT);
    ASSERT_EQ(rec.calls, 1);
    ASSERT_EQ(weft_now() - t0, WEFT_SEC);
    scope_end(s);
    /* A negative timeout is refused. */
    p.attempt_timeout_ns = -1;
    ASSERT_EQ(weft_retry_call(&p, rec_fn, &rec), -EINVAL);
    ASSERT_EQ(rec.calls, 1);
    weft_backoff b;
    ASSERT_EQ(weft_backoff_init(&b, &p), -EINVAL);
    return 0;
}

TEST(retry_attempt_timeout_bounded_by_deadline)
{
    ASSERT_EQ(t_run_virtual(1, attempt_vs_deadline_root, NULL), 0);
}

/* Retried calls across workers on the real clock: each task's attempts
 * are spaced at least its backoff's delays apart. */
struct mono_job {
    int calls;
    weft_time at[8];
};

static int mono_fn(void *arg)
{
    struct mono_job *j = arg;
    j->at[j->calls++] = weft_now();
    return j->calls < 5 ? -EAGAIN : j->calls;
}

static int mono_task(void *arg)
{
    struct mono_job *j = arg;
    weft_retry p = {.max_attempts = 8,
                    .base_ns = 200 * WEFT_USEC,
                    .jitter = WEFT_JITTER_FULL,
                    .seed = (uint64_t)(uintptr_t)arg};
    ASSERT_EQ(weft_retry_call(&p, mono_fn, j), 5);
    weft_backoff b;
    ASSERT_EQ(weft_backoff_init(&b, &p), 0);
    for (int i = 1; i < 5; i++)
        ASSERT(j->at[i] - j->at[i - 1] >= weft_backoff_next(&b));
    return 0;
}

static int mono_root(void *arg)
{
    (void)arg;
    enum { N = 64 };
    static struct mono_job jobs[N];
    memset(jobs, 0, sizeof(jobs));
    weft_scope *s = scope_open();
    for (int i = 0; i < N; i++)
        spawn(mono_task, &jobs[i]);
    scope_end(s);
    for (int i = 0; i < N; i++)
        ASSERT_EQ(jobs[i].calls, 5);
    return 0;
}

TEST(retry_across_workers_real_clock)
{
    ASSERT_EQ(t_run_mono(4, mono_root, NULL), 0);
}

/* ---- weft_call_fallback_for ---------------------------------------------- */

struct fb {
    int64_t sleep_ns; /* fn sleeps this long, then returns `value` */
    int value;
    int fn_calls, fb_calls;
    weft_time fn_end, fb_at;
    int fn_rc;
};

static int fb_fn(void *arg)
{
    struct fb *f = arg;
    f->fn_calls++;
    if (f->sleep_ns) {
        int rc = weft_sleep_for(f->sleep_ns);
        f->fn_end = weft_now();
        if (rc) {
            f->fn_rc = rc;
            return rc;
        }
    }
    return f->value;
}

static int fb_fallback(void *arg)
{
    struct fb *f = arg;
    f->fb_calls++;
    f->fb_at = weft_now();
    return 99;
}

static int fallback_root(void *arg)
{
    (void)arg;
    /* Fast: fn's value, no fallback. */
    struct fb f = {.value = 5};
    ASSERT_EQ(weft_call_fallback_for(fb_fn, &f, fb_fallback, &f, WEFT_SEC), 5);
    ASSERT_EQ(f.fb_calls, 0);
    f = (struct fb){.sleep_ns = 500 * MS, .value = 0};
    ASSERT_EQ(weft_call_fallback_for(fb_fn, &f, fb_fallback, &f, WEFT_SEC), 0);
    ASSERT_EQ(weft_now(), 500 * MS);
    ASSERT_EQ(f.fb_calls, 0);

    /* Slow: cancelled at exactly the timeout, then the fallback's value. */
    weft_time t0 = weft_now();
    f = (struct fb){.sleep_ns = 10 * WEFT_SEC, .value = 1};
    ASSERT_EQ(weft_call_fallback_for(fb_fn, &f, fb_fallback, &f, WEFT_SEC), 99);
    ASSERT_EQ(f.fn_calls, 1);
    ASSERT_EQ(f.fn_rc, -ECANCELED);
    ASSERT_EQ(f.fn_end, t0 + WEFT_SEC);
    ASSERT_EQ(f.fb_calls, 1);
    ASSERT_EQ(f.fb_at, t0 + WEFT_SEC);
    ASSERT_EQ(weft_now(), t0 + WEFT_SEC);
    ASSERT(!weft_cancelled());

    /* Failing at once: the fallback, with no time passing. */
    t0 = weft_now();
    f = (struct fb){.value = -EIO};
    ASSERT_EQ(weft_call_fallback_for(fb_fn, &f, fb_fallback, &f, WEFT_SEC), 99);
    ASSERT_EQ(f.fb_calls, 1);
    ASSERT_EQ(f.fb_at, t0);

    /* A timeout of 0: fn runs in an expired scope. */
    f = (struct fb){.sleep_ns = MS, .value = 1};
    ASSERT_EQ(weft_call_fallback_for(fb_fn, &f, fb_fallback, &f, 0), 99);
    ASSERT_EQ(f.fn_rc, -ECANCELED);
    ASSERT_EQ(weft_now(), t0);

    ASSERT_EQ(weft_call_fallback_for(NULL, &f, fb_fallback, &f, WEFT_SEC),
              -EINVAL);
    ASSERT_EQ(weft_call_fallback_for(fb_fn, &f, NULL, &f, WEFT_SEC), -EINVAL);
    return 0;
}

TEST(fallback_fast_slow_failing)
{
    ASSERT_EQ(t_run_virtual(1, fallback_root, NULL), 0);
    struct fb f = {0};
    ASSERT_EQ(weft_call_fallback_for(fb_fn, &f, fb_fallback, &f, WEFT_SEC),
              -EPERM);
    ASSERT_EQ(f.fn_calls, 0);
}

static int fallback_cancel_root(void *arg)
{
    (void)arg;
    /* The caller's scope is cancelled while fn runs: -ECANCELED, no
     * fallback. */
    struct fb f = {.sleep_ns = 10 * WEFT_SEC, .value = 1};
    struct canceller c = {.after = 300 * MS};
    weft_scope *outer = scope_open();
    weft_scope *s = scope_open();
    c.s = s;
    ASSERT(weft_spawn(outer, cancel_after, &c) >= 0);
    ASSERT_EQ(weft_call_fallback_for(fb_fn, &f, fb_fallback, &f, WEFT_SEC),
              -ECANCELED);
    ASSERT_EQ(weft_now(), 300 * MS);
    ASSERT_EQ(f.fn_rc, -ECANCELED);
    ASSERT_EQ(f.fb_calls, 0);
    ASSERT_EQ(weft_scope_join(s), -ECANCELED);
    ASSERT_EQ(weft_scope_free(s), 0);
    scope_end(outer);

    /* The caller's own deadline passing first is the caller's cancel. */
    f = (struct fb){.sleep_ns = 10 * WEFT_SEC, .value = 1};
    weft_time t0 = weft_now();
    weft_scope_opts o = {.deadline = t0 + 200 * MS};
    ASSERT_EQ(weft_scope_open(&s, &o), 0);
    ASSERT_EQ(weft_call_fallback_for(fb_fn, &f, fb_fallback, &f, WEFT_SEC),
              -ECANCELED);
    ASSERT_EQ(weft_now(), t0 + 200 * MS);
    ASSERT_EQ(f.fb_calls, 0);
    ASSERT_EQ(weft_scope_join(s), -ETIMEDOUT);
    ASSERT_EQ(weft_scope_free(s), 0);

    /* Cancelled before the call: fn fails, no fallback. */
    f = (struct fb){.value = -EIO};
    s = scope_open();
    ASSERT_EQ(weft_scope_cancel(s), 0);
    ASSERT_EQ(weft_call_fallback_for(fb_fn, &f, fb_fallback, &f, WEFT_SEC),
              -ECANCELED);
    ASSERT_EQ(f.fb_calls, 0);
    ASSERT_EQ(weft_scope_join(s), -ECANCELED);
    ASSERT_EQ(weft_scope_free(s), 0);
    return 0;
}

TEST(fallback_caller_cancelled_no_fallback)
{
    ASSERT_EQ(t_run_virtual(1, fallback_cancel_root, NULL), 0);
}
