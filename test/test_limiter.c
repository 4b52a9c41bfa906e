/* SPDX-License-Identifier: MIT */
/*
 * The token-bucket rate limiter. On the virtual clock every grant instant
 * is asserted exactly against the formula of src/future/limiter.c: after a full
 * bucket of B is emptied at t0, token k is due at t0 + ceil(k * P / T).
 * Across workers, the tokens granted by any instant t never exceed
 * B + floor(t * T / P) (checked exactly, in 128-bit arithmetic), and a
 * stress on the real clock (also run under TSan) checks the same with
 * cancels, timeouts and a plain thread calling weft_limiter_try_acquire.
 */
#include "future/future.h" /* its wait kinds */
#include "t.h"
#include "wait/seen.h" /* a parked task's wait record */
#include "weft.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

typedef __int128 i128;

/* ceil(k * P / T) for k >= 0, independently of the library. */
static int64_t due_after(int64_t k, int64_t per, int64_t tokens)
{
    i128 num = (i128)k * per;
    return (int64_t)((num + tokens - 1) / tokens);
}

/* ---- exact instants on one task ------------------------------------- */

static int exact_root(void *arg)
{
    (void)arg;
    weft_limiter *l;
    /* 3 tokens a second, burst 2. */
    ASSERT_EQ(weft_limiter_new(&l, 3, WEFT_SEC, 2), 0);
    ASSERT_EQ(weft_limiter_acquire(l, 1, WEFT_NEVER), 0);
    ASSERT_EQ(weft_limiter_acquire(l, 1, WEFT_NEVER), 0);
    ASSERT_EQ(weft_now(), 0); /* the burst, at once */
    ASSERT_EQ(weft_limiter_try_acquire(l, 1), -EAGAIN);
    weft_time want[] = {333333334,  666666667,  1000000000,
                        1333333334, 1666666667, 2000000000};
    for (int k = 1; k <= 6; k++) {
        ASSERT_EQ(weft_limiter_acquire(l, 1, WEFT_NEVER), 0);
        ASSERT_EQ(weft_now(), want[k - 1]);
        ASSERT_EQ(weft_now(), due_after(k, WEFT_SEC, 3));
        ASSERT_EQ(weft_limiter_try_acquire(l, 1), -EAGAIN);
    }
    /* Many more, one at a time and two at a time: still exact. */
    int64_t k = 6;
    for (int i = 0; i < 3000; i++) {
        int64_t n = 1 + i % 2;
        k += n;
        ASSERT_EQ(weft_limiter_acquire(l, n, WEFT_NEVER), 0);
        ASSERT_EQ(weft_now(), due_after(k, WEFT_SEC, 3));
    }
    /* Idle long enough to refill: a full burst at once, no more. */
    weft_time t0 = weft_now() + 10 * WEFT_SEC;
    ASSERT_EQ(weft_sleep_until(t0), 0);
    ASSERT_EQ(weft_limiter_try_acquire(l, 2), 0);
    ASSERT_EQ(weft_limiter_try_acquire(l, 1), -EAGAIN);
    ASSERT_EQ(weft_limiter_acquire(l, 2, WEFT_NEVER), 0);
    ASSERT_EQ(weft_now(), t0 + due_after(2, WEFT_SEC, 3));
    ASSERT_EQ(weft_limiter_free(l), 0);

    /* A partial refill is kept exactly: 1 token per 3 ns, burst 1. After
     * 4 ns idle one token (and a third) is there; the next is due 2 ns
     * later, not 3. */
    ASSERT_EQ(weft_limiter_new(&l, 1, 3, 1), 0);
    t0 = weft_now();
    ASSERT_EQ(weft_limiter_acquire(l, 1, WEFT_NEVER), 0);
    ASSERT_EQ(weft_limiter_acquire(l, 1, WEFT_NEVER), 0);
    ASSERT_EQ(weft_now(), t0 + 3);
    ASSERT_EQ(weft_sleep_for(4), 0); /* 4/3 tokens, capped at 1 */
    ASSERT_EQ(weft_limiter_try_acquire(l, 1), 0);
    ASSERT_EQ(weft_limiter_acquire(l, 1, WEFT_NEVER), 0);
    ASSERT_EQ(weft_now(), t0 + 7 + 3); /* the cap dropped the third */
    ASSERT_EQ(weft_limiter_free(l), 0);

    /* Big numbers: 999999937 tokens per 1000000009 ns, burst 10^6,
     * n = 10^5 a time: no overflow, no drift. */
    const int64_t T = 999999937, P = 1000000009, B = 1000000, N = 100000;
    ASSERT_EQ(weft_limiter_new(&l, T, P, B), 0);
    t0 = weft_now();
    int64_t taken = 0;
    for (int i = 0; i < 2000; i++) {
        ASSERT_EQ(weft_limiter_acquire(l, N, WEFT_NEVER), 0);
        taken += N;
        int64_t over = taken > B ? taken - B : 0;
        ASSERT_EQ(weft_now() - t0, due_after(over, P, T));
    }
    ASSERT_EQ(weft_limiter_free(l), 0);

    /* Huge rates: INT64_MAX tokens per ns, and 1 token per INT64_MAX ns. */
    ASSERT_EQ(weft_limiter_new(&l, INT64_MAX, 1, INT64_MAX), 0);
    t0 = weft_now();
    ASSERT_EQ(weft_limiter_acquire(l, INT64_MAX, WEFT_NEVER), 0);
    ASSERT_EQ(weft_limiter_acquire(l, INT64_MAX, WEFT_NEVER), 0);
    ASSERT_EQ(weft_now(), t0 + 1);
    ASSERT_EQ(weft_limiter_free(l), 0);
    ASSERT_EQ(weft_limiter_new(&l, 1, INT64_MAX, 1), 0);
    ASSERT_EQ(weft_limiter_acquire(l, 1, WEFT_NEVER), 0);
    /* Due at t0 + INT64_MAX: past WEFT_NEVER, so no deadline admits it. */
    ASSERT_EQ(weft_limiter_acquire(l, 1, WEFT_NEVER), -ETIMEDOUT);
    ASSERT_EQ(weft_limiter_try_acquire(l, 1), -EAGAIN);
    ASSERT_EQ(weft_limiter_free(l), 0);
    return 0;
}

TEST(limiter_burst_then_exact_instants)
{
    ASSERT_EQ(t_run_virtual(1, exact_root, NULL), 0);
}

/* ---- deadline, try, errors ------------------------------------------ */

static int deadline_root(void *arg)
{
    (void)arg;
    weft_limiter *l;
    ASSERT_EQ(weft_limiter_new(&l, 3, WEFT_SEC, 1), 0);
    ASSERT_EQ(weft_limiter_acquire(l, 1, 0), 0); /* there now: any deadline */
    /* The next is due at 333333334: a deadline 1 ns earlier fails at once,
     * the clock does not move, and nothing is taken. */
    for (int i = 0; i < 5; i++) {
        ASSERT_EQ(weft_limiter_acquire(l, 1, 333333333), -ETIMEDOUT);
        ASSERT_EQ(weft_now(), 0);
    }
    ASSERT_EQ(weft_limiter_acquire(l, 1, 333333334), 0);
    ASSERT_EQ(weft_now(), 333333334);
    ASSERT_EQ(weft_limiter_acquire(l, 1, 0), -ETIMEDOUT); /* past deadline */
    ASSERT_EQ(weft_now(), 333333334);
    ASSERT_EQ(weft_limiter_acquire(l, 1, WEFT_NEVER), 0);
    ASSERT_EQ(weft_now(), 666666667);
    ASSERT_EQ(weft_limiter_free(l), 0);
    return 0;
}

TEST(limiter_deadline_too_early_takes_nothing)
{
    ASSERT_EQ(t_run_virtual(1, deadline_root, NULL), 0);
}

static int try_root(void *arg)
{
    (void)arg;
    weft_limiter *l;
    /* 10 a second, burst 4. */
    ASSERT_EQ(weft_limiter_new(&l, 10, WEFT_SEC, 4), 0);
    ASSERT_EQ(weft_limiter_try_acquire(l, 3), 0);
    ASSERT_EQ(weft_limiter_try_acquire(l, 2),
              -EAGAIN); /* 1 left: nothing taken */
    ASSERT_EQ(weft_limiter_try_acquire(l, 1), 0);
    ASSERT_EQ(weft_limiter_try_acquire(l, 1), -EAGAIN);
    ASSERT_EQ(weft_sleep_for(99999999), 0);
    ASSERT_EQ(weft_limiter_try_acquire(l, 1), -EAGAIN);
    ASSERT_EQ(weft_sleep_for(1), 0);
    ASSERT_EQ(weft_limiter_try_acquire(l, 1), 0); /* at exactly 100 ms */
    ASSERT_EQ(weft_limiter_try_acquire(l, 1), -EAGAIN);
    /* try does not jump ahead of a sleeping reservation. */
    ASSERT_EQ(weft_sleep_for(250 * WEFT_MSEC), 0);        /* 2.5 tokens */
    ASSERT_EQ(weft_limiter_acquire(l, 4, WEFT_NEVER), 0); /* 1.5 more */
    ASSERT_EQ(weft_now(), 500 * WEFT_MSEC);
    ASSERT_EQ(weft_limiter_try_acquire(l, 1), -EAGAIN);
    ASSERT_EQ(weft_limiter_free(l), 0);

    /* Errors. */
    ASSERT_EQ(weft_limiter_new(&l, 1, 1, 3), 0);
    ASSERT_EQ(weft_limiter_try_acquire(l, 4), -EINVAL);
    ASSERT_EQ(weft_limiter_try_acquire(l, 0), -EINVAL);
    ASSERT_EQ(weft_limiter_try_acquire(l, -1), -EINVAL);
    ASSERT_EQ(weft_limiter_acquire(l, 4, WEFT_NEVER), -EINVAL);
    ASSERT_EQ(weft_limiter_acquire(l, 0, WEFT_NEVER), -EINVAL);
    ASSERT_EQ(weft_limiter_acquire(NULL, 1, WEFT_NEVER), -EINVAL);
    ASSERT_EQ(weft_limiter_try_acquire(NULL, 1), -EINVAL);
    ASSERT_EQ(weft_limiter_try_acquire(l, 3), 0); /* n == burst is fine */
    ASSERT_EQ(weft_limiter_free(l), 0);
    ASSERT_EQ(weft_limiter_free(NULL), -EINVAL);
    weft_limiter *bad = (weft_limiter *)&bad;
    ASSERT_EQ(weft_limiter_new(NULL, 1, 1, 1), -EINVAL);
    ASSERT_EQ(weft_limiter_new(&bad, 0, 1, 1), -EINVAL);
    ASSERT_EQ(weft_limiter_new(&bad, 1, 0, 1), -EINVAL);
    ASSERT_EQ(weft_limiter_new(&bad, 1, 1, 0), -EINVAL);
    ASSERT_EQ(weft_limiter_new(&bad, -1, 1, 1), -EINVAL);
    ASSERT(bad == (weft_limiter *)&bad); /* untouched */

    /* A cancelled scope: acquire is a checkpoint, even with tokens. */
    ASSERT_EQ(weft_limiter_new(&l, 1, WEFT_SEC, 5), 0);
    weft_scope *s = scope_open();
    ASSERT_EQ(weft_scope_cancel(s), 0);
    ASSERT_EQ(weft_limiter_acquire(l, 1, WEFT_NEVER), -ECANCELED);
    ASSERT_EQ(weft_limiter_try_acquire(l, 5),
              0); /* try is not; nothing was taken */
    ASSERT_EQ(weft_scope_join(s), -ECANCELED);
    ASSERT_EQ(weft_scope_free(s), 0);
    ASSERT_EQ(weft_limiter_free(l), 0);
    return 0;
}

TEST(limiter_try_and_errors)
{
    ASSERT_EQ(t_run_virtual(1, try_root, NULL), 0);
    /* Outside a runtime: try works (real clock), acquire is -EPERM. */
    weft_limiter *l;
    ASSERT_EQ(weft_limiter_new(&l, 1, WEFT_SEC, 2), 0);
    ASSERT_EQ(weft_limiter_acquire(l, 1, WEFT_NEVER), -EPERM);
    ASSERT_EQ(weft_limiter_try_acquire(l, 2), 0);
    ASSERT_EQ(weft_limiter_try_acquire(l, 1), -EAGAIN);
    ASSERT_EQ(weft_limiter_free(l), 0);
}

/* ---- cancel gives tokens back ---------------------------------------- */

/* A task that acquires inside a scope of its own, which others may cancel
 * (s is set before it reserves, and stays valid until `done`). */
struct taker {
    weft_limiter *l;
    int64_t n;
    weft_time deadline;
    weft_scope *s;
    int rc;
    weft_time at;
};

static int take(void *arg)
{
    struct taker *t = arg;
    t->s = scope_open();
    t->rc = weft_limiter_acquire(t->l, t->n, t->deadline);
    t->at = weft_now();
    weft_scope_join(t->s);
    ASSERT_EQ(weft_scope_free(t->s), 0);
    t->s = NULL;
    return 0;
}

/* Starts a taker of n tokens and lets it make its reservation. */
static void start(struct taker *t, weft_limiter *l, int64_t n)
{
    *t = (struct taker){.l = l, .n = n, .deadline = WEFT_NEVER, .rc = 99};
    spawn(take, t);
    ASSERT_EQ(weft_yield(), 0); /* one worker: it runs up to its sleep */
    ASSERT(t->s != NULL);
    ASSERT_EQ(t->rc, 99);
}

static void cancel(struct taker *t)
{
    ASSERT(t->s != NULL);
    ASSERT_EQ(weft_scope_cancel(t->s), 0);
    ASSERT_EQ(weft_yield(), 0); /* it wakes, gives back, leaves */
    ASSERT_EQ(t->rc, -ECANCELED);
    ASSERT_EQ(t->at, weft_now());
}

/* Runs one scenario: a limiter of 1 token a second and the given burst,
 * emptied at t0; returns t0. */
static weft_time fresh(weft_limiter **l, int64_t burst)
{
    ASSERT_EQ(weft_limiter_new(l, 1, WEFT_SEC, burst), 0);
    ASSERT_EQ(weft_limiter_try_acquire(*l, burst), 0);
    return weft_now();
}

static int cancel_root(void *arg)
{
    (void)arg;
    weft_limiter *l;
    struct taker a, c, d, e;
    const int64_t S = WEFT_SEC, H = 500 * WEFT_MSEC;

    /* 1. The last reservation is cancelled: all its tokens come back. A
     * waits for the token due at 1 s and is cancelled at 0.5 s: the next
     * taker gets that token at 1 s, not 2 s. free is -EBUSY while A
     * sleeps in the limiter. */
    weft_scope *s = scope_open();
    weft_time t0 = fresh(&l, 1);
    start(&a, l, 1);
    ASSERT_EQ(weft_sleep_for(H), 0);
    ASSERT_EQ(weft_limiter_free(l), -EBUSY);
    cancel(&a);
    ASSERT_EQ(a.at, t0 + H);
    ASSERT_EQ(weft_limiter_acquire(l, 1, WEFT_NEVER), 0);
    ASSERT_EQ(weft_now(), t0 + S);
    ASSERT_EQ(weft_limiter_free(l), 0);

    /* 2. A later reservation counted on the cancelled one's token: nothing
     * comes back (Go's CancelAt). A due at 1 s, C at 2 s; A cancelled at
     * 0.5 s; D is due at 3 s, and C still at 2 s. */
    t0 = fresh(&l, 1);
    start(&a, l, 1);
    start(&c, l, 1);
    ASSERT_EQ(weft_sleep_for(H), 0);
    cancel(&a);
    start(&d, l, 1);
    ASSERT_EQ(weft_sleep_until(t0 + 3 * S), 0);
    ASSERT_EQ(weft_yield(), 0);
    ASSERT_EQ(c.rc, 0);
    ASSERT_EQ(c.at, t0 + 2 * S);
    ASSERT_EQ(d.rc, 0);
    ASSERT_EQ(d.at, t0 + 3 * S);
    ASSERT_EQ(weft_limiter_free(l), 0);

    /* 3. Partly: burst 3; A takes 3 (due 3 s), C 1 (due 4 s). A cancelled
     * at 0.5 s gives back 3 - 1 = 2: D (1 token) is due at 3 s. */
    t0 = fresh(&l, 3);
    start(&a, l, 3);
    start(&c, l, 1);
    ASSERT_EQ(weft_sleep_for(H), 0);
    cancel(&a);
    start(&d, l, 1);
    ASSERT_EQ(weft_sleep_until(t0 + 4 * S), 0);
    ASSERT_EQ(weft_yield(), 0);
    ASSERT_EQ(d.rc, 0);
    ASSERT_EQ(d.at, t0 + 3 * S);
    ASSERT_EQ(c.rc, 0);
    ASSERT_EQ(c.at, t0 + 4 * S);
    ASSERT_EQ(weft_limiter_free(l), 0);

    /* 4. Last first: C (the last) cancelled gives back all of its 1, then
     * A (now the last) all of its 3: the limiter is as before them, and D
     * is due at 1 s. */
    t0 = fresh(&l, 3);
    start(&a, l, 3);
    start(&c, l, 1);
    ASSERT_EQ(weft_sleep_for(H), 0);
    cancel(&c);
    cancel(&a);
    ASSERT_EQ(weft_limiter_acquire(l, 1, WEFT_NEVER), 0);
    ASSERT_EQ(weft_now(), t0 + S);
    ASSERT_EQ(weft_limiter_free(l), 0);

    /* 5. First first: burst 5; A takes 5 (due 5 s), C 1 (6 s). A cancelled
     * gives back 5 - 1 = 4 (what is reserved now ends at 2 s); C cancelled
     * then gives back its 1 (nothing was reserved after it; the clamp:
     * A's give-back pulled the end below C's): the end is at 1 s, and D
     * is due at 2 s. */
    t0 = fresh(&l, 5);
    start(&a, l, 5);
    start(&c, l, 1);
    ASSERT_EQ(weft_sleep_for(H), 0);
    cancel(&a);
    cancel(&c);
    ASSERT_EQ(weft_limiter_acquire(l, 1, WEFT_NEVER), 0);
    ASSERT_EQ(weft_now(), t0 + 2 * S);
    ASSERT_EQ(weft_limiter_free(l), 0);

    /* 6. The bucket refills past what was given back only up to burst:
     * burst 2, A takes 2 (due 2 s), cancelled at 0.5 s (all back); at
     * 10 s two tokens are there, not more. */
    t0 = fresh(&l, 2);
    start(&a, l, 2);
    ASSERT_EQ(weft_sleep_for(H), 0);
    cancel(&a);
    ASSERT_EQ(weft_sleep_until(t0 + 10 * S), 0);
    ASSERT_EQ(weft_limiter_try_acquire(l, 2), 0);
    ASSERT_EQ(weft_limiter_try_acquire(l, 1), -EAGAIN);
    ASSERT_EQ(weft_limiter_free(l), 0);

    /* 7. Tokens due after the taker's own scope deadline: refused at
     * once (-ETIMEDOUT, nothing taken), as for its own deadline; due
     * exactly at it too (the scope is cancelled at that instant). */
    t0 = fresh(&l, 1);
    e = (struct taker){.l = l, .n = 1, .deadline = WEFT_NEVER, .rc = 99};
    weft_scope *ds;
    weft_scope_opts o = {.deadline = t0 + H};
    ASSERT_EQ(weft_scope_open(&ds, &o), 0);
    spawn(take, &e);
    ASSERT_EQ(weft_scope_join(ds), 0);
    ASSERT_EQ(weft_scope_free(ds), 0);
    ASSERT_EQ(e.rc, -ETIMEDOUT);
    ASSERT_EQ(e.at, t0);
    o.deadline = t0 + S;
    ASSERT_EQ(weft_scope_open(&ds, &o), 0);
    ASSERT_EQ(weft_limiter_acquire(l, 1, WEFT_NEVER), -ETIMEDOUT);
    ASSERT_EQ(weft_now(), t0);
    ASSERT_EQ(weft_scope_join(ds), 0);
    ASSERT_EQ(weft_scope_free(ds), 0);
    ASSERT_EQ(weft_limiter_acquire(l, 1, WEFT_NEVER), 0);
    ASSERT_EQ(weft_now(), t0 + S);
    ASSERT_EQ(weft_limiter_free(l), 0);

    scope_end(s);
    return 0;
}

TEST(limiter_cancel_gives_tokens_back)
{
    ASSERT_EQ(t_run_virtual(1, cancel_root, NULL), 0);
}

/* ---- FIFO and the rate bound across tasks ---------------------------- */

#define MAXT 256

struct grant {
    int64_t n;
    weft_time at;
};

struct fifo {
    weft_limiter *l;
    int64_t T, P, B;
    int ntasks, rounds;
    uint64_t seed;
    atomic_int arrivals, wakes;
    int arrival[MAXT], wake[MAXT];
    int64_t n[MAXT];
    weft_time at[MAXT]; /* single round: when task i got its tokens */
    /* every grant, for the bound */
    struct grant *grants;
    atomic_long ngrants;
    atomic_llong total;
};

struct fifo_arg {
    struct fifo *f;
    int i;
};

static int cmp_grant(const void *a, const void *b)
{
    const struct grant *x = a, *y = b;
    return x->at < y->at ? -1 : x->at > y->at;
}

/* At every instant t: tokens granted by t <= B + floor((t - t0) * T / P). */
static void check_bound(struct grant *g, long n, int64_t T, int64_t P,
                        int64_t B, weft_time t0)
{
    qsort(g, (size_t)n, sizeof(*g), cmp_grant);
    i128 sum = 0;
    for (long i = 0; i < n; i++) {
        sum += g[i].n;
        if (i + 1 < n && g[i + 1].at == g[i].at)
            continue;
        ASSERT(g[i].at >= t0);
        i128 allowed = B + ((i128)(g[i].at - t0) * T) / P;
        if (sum > allowed)
            T_FAIL("%lld tokens by %lld ns, at most %lld allowed",
                   (long long)sum, (long long)(g[i].at - t0),
                   (long long)allowed);
    }
}

static void record(struct fifo *f, int64_t n, weft_time at)
{
    long k = atomic_fetch_add(&f->ngrants, 1);
    f->grants[k] = (struct grant){n, at};
    atomic_fetch_add(&f->total, n);
}

/* One acquire (single round): the arrival ticket and the reservation are
 * taken in one run of the task, so on one worker arrival order is
 * reservation order. */
static int fifo_task(void *arg)
{
    struct fifo_arg *a = arg;
    struct fifo *f = a->f;
    for (int r = 0; r < f->rounds; r++) {
        int64_t n = f->n[a->i];
        int ticket = atomic_fetch_add(&f->arrivals, 1);
        if (f->rounds == 1)
            f->arrival[ticket] = a->i;
        ASSERT_EQ(weft_limiter_acquire(f->l, n, WEFT_NEVER), 0);
        weft_time now = weft_now();
        int w = atomic_fetch_add(&f->wakes, 1);
        if (f->rounds == 1) {
            f->wake[w] = a->i;
            f->at[a->i] = now;
        }
        record(f, n, now);
    }
    return 0;
}

static int fifo_root(void *arg)
{
    struct fifo *f = arg;
    static struct fifo_arg args[MAXT];
    ASSERT_EQ(weft_limiter_new(&f->l, f->T, f->P, f->B), 0);
    weft_scope *s = scope_open();
    for (int i = 0; i < f->ntasks; i++) {
        args[i] = (struct fifo_arg){f, i};
        spawn(fifo_task, &args[i]);
    }
    scope_end(s);
    ASSERT_EQ(weft_limiter_free(f->l), 0);
    return 0;
}

static void fifo_init(struct fifo *f, int64_t T, int64_t P, int64_t B,
                      int ntasks, int rounds, uint64_t seed, int64_t maxn)
{
    memset(f, 0, sizeof(*f));
    f->T = T;
    f->P = P;
    f->B = B;
    f->ntasks = ntasks;
    f->rounds = rounds;
    uint64_t x = seed;
    for (int i = 0; i < ntasks; i++)
        f->n[i] = 1 + (int64_t)(rnd(&x) % (uint64_t)maxn);
    f->grants = calloc((size_t)ntasks * (size_t)rounds, sizeof(*f->grants));
    ASSERT(f->grants != NULL);
}

/* One worker: tokens come in arrival order, each at exactly the instant
 * the formula gives for the tokens reserved up to it. Under a scheduling
 * seed, takers due at the same instant may run in any order; without one
 * they also run in arrival order. */
static void fifo_one_worker(int64_t T, int64_t P, int64_t B, int64_t maxn,
                            uint64_t seed)
{
    static struct fifo f;
    fifo_init(&f, T, P, B, 100, 1, seed + 1, maxn);
    ASSERT_EQ(
        t_run(1, WEFT_CLOCK_VIRTUAL, seed ? T_SEED(seed) : 0, fifo_root, &f),
        0);
    ASSERT_EQ(atomic_load(&f.arrivals), 100);
    int64_t reserved = 0;
    weft_time prev = 0;
    for (int j = 0; j < 100; j++) {
        int i = f.arrival[j];
        reserved += f.n[i];
        int64_t over = reserved > B ? reserved - B : 0;
        ASSERT_EQ(f.at[i], due_after(over, P, T));
        ASSERT(f.at[i] >= prev);
        prev = f.at[i];
        if (!seed && !getenv("WEFT_SEED"))
            ASSERT_EQ(f.wake[j], i);
    }
    check_bound(f.grants, 100, T, P, B, 0);
    free(f.grants);
}

TEST(limiter_fifo_exact_on_one_worker)
{
    for (uint64_t seed = 0; seed < 4; seed++) {
        /* 5 tokens per 3 us, burst 2, one token each. */
        fifo_one_worker(5, 3000, 2, 1, seed);
        /* 3 tokens per ns: three takers due at each instant. */
        fifo_one_worker(3, 1, 1, 1, seed);
        /* 7 tokens per second, burst 4, 1 to 4 tokens each. */
        fifo_one_worker(7, WEFT_SEC, 4, 4, seed);
    }
}

/* Several workers: all reserve at virtual time 0, so the instants, as a
 * set, are exact whatever the order; over many rounds the grants never
 * exceed the bound, and with B * P >= T (no refill is ever lost while
 * takers wait) the last grant is exactly when the total is due. */
static void across_workers(int workers, int rounds, int64_t maxn)
{
    static struct fifo f;
    const int64_t T = 7, P = 1000000, B = 3;
    int n = (int)T_LIVE(64);
    fifo_init(&f, T, P, B, n, rounds, 11 + (uint64_t)workers, maxn);
    ASSERT_EQ(t_run_virtual(workers, fifo_root, &f), 0);
    long ng = atomic_load(&f.ngrants);
    ASSERT_EQ(ng, (long)n * rounds);
    int64_t total = atomic_load(&f.total);
    if (maxn == 1 && rounds == 1) {
        qsort(f.grants, (size_t)ng, sizeof(*f.grants), cmp_grant);
        for (long k = 0; k < ng; k++)
            ASSERT_EQ(f.grants[k].at,
                      due_after(k + 1 > B ? k + 1 - B : 0, P, T));
    }
    weft_time last = 0;
    for (long k = 0; k < ng; k++)
        if (f.grants[k].at > last)
            last = f.grants[k].at;
    ASSERT_EQ(last, due_after(total - B, P, T));
    check_bound(f.grants, ng, T, P, B, 0);
    free(f.grants);
}

TEST(limiter_across_workers_virtual)
{
    across_workers(2, 1, 1);
    across_workers(4, 1, 1);
    across_workers(2, 20, 3);
    across_workers(4, 20, 3);
}

/* ---- stress on the real clock (TSan) --------------------------------- */

#define ST_TASKS 16

struct stress {
    weft_limiter *l;
    int64_t T, P, B;
    weft_time t0;
    int rounds;
    struct grant *grants;
    atomic_long ngrants;
    atomic_int timedout, cancelled, tries_ok;
    atomic_int stop;
};

static void st_record(struct stress *st, int64_t n, weft_time at)
{
    long k = atomic_fetch_add(&st->ngrants, 1);
    st->grants[k] = (struct grant){n, at};
}

static int st_task(void *arg)
{
    struct stress *st = arg;
    uint64_t x = (uint64_t)weft_now() ^ (uint64_t)(uintptr_t)&x;
    for (int r = 0; r < st->rounds; r++) {
        int64_t n = 1 + (int64_t)(rnd(&x) % (uint64_t)st->B);
        int kind = (int)(rnd(&x) % 4);
        int rc;
        if (kind == 0) {
            rc = weft_limiter_try_acquire(st->l, n);
            if (rc == -EAGAIN)
                continue;
        } else if (kind == 1) {
            /* A deadline that is sometimes too early. */
            weft_time dl = weft_now() + (int64_t)(rnd(&x) % (4 * st->P));
            rc = weft_limiter_acquire(st->l, n, dl);
            if (rc == -ETIMEDOUT) {
                atomic_fetch_add(&st->timedout, 1);
                continue;
            }
        } else if (kind == 2) {
            /* A timeout that sometimes cancels the wait. */
            weft_scope *s;
            weft_scope_opts o = {.deadline = weft_now() + 1 +
                                             (int64_t)(rnd(&x) % (3 * st->P))};
            ASSERT_EQ(weft_scope_open(&s, &o), 0);
            rc = weft_limiter_acquire(st->l, n, WEFT_NEVER);
            weft_time at = weft_now();
            weft_scope_join(s);
            ASSERT_EQ(weft_scope_free(s), 0);
            if (rc == -ECANCELED) {
                atomic_fetch_add(&st->cancelled, 1);
                continue;
            }
            if (rc == -ETIMEDOUT) { /* due after the scope's deadline */
                atomic_fetch_add(&st->timedout, 1);
                continue;
            }
            ASSERT_EQ(rc, 0);
            st_record(st, n, at);
            continue;
        } else {
            rc = weft_limiter_acquire(st->l, n, WEFT_NEVER);
        }
        ASSERT_EQ(rc, 0);
        st_record(st, n, weft_now());
    }
    return 0;
}

/* A plain thread taking tokens with try (any thread). */
static void *st_thread(void *arg)
{
    struct stress *st = arg;
    while (!atomic_load(&st->stop)) {
        if (weft_limiter_try_acquire(st->l, 1) == 0) {
            st_record(st, 1, weft_now());
            atomic_fetch_add(&st->tries_ok, 1);
        }
        struct timespec ts = {0, 20000};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

static int st_root(void *arg)
{
    struct stress *st = arg;
    st->t0 = weft_now();
    ASSERT_EQ(weft_limiter_new(&st->l, st->T, st->P, st->B), 0);
    pthread_t th;
    ASSERT_EQ(pthread_create(&th, NULL, st_thread, st), 0);
    weft_scope *s = scope_open();
    for (int i = 0; i < ST_TASKS; i++)
        spawn(st_task, st);
    scope_end(s);
    atomic_store(&st->stop, 1);
    ASSERT_EQ(pthread_join(th, NULL), 0);
    ASSERT_EQ(weft_limiter_free(st->l), 0);
    return 0;
}

TEST(limiter_stress_real_clock)
{
    static struct stress st;
    int workers[] = {2, 4};
    for (int w = 0; w < 2; w++) {
        memset(&st, 0, sizeof(st));
        /* 3 tokens per 100 us, burst 4. */
        st.T = 3;
        st.P = 100 * WEFT_USEC;
        st.B = 4;
        st.rounds = (int)T_SCALE(150);
        /* try's thread records at most one grant per 20 us */
        size_t cap = (size_t)ST_TASKS * (size_t)st.rounds + 1000000;
        st.grants = calloc(cap, sizeof(*st.grants));
        ASSERT(st.grants != NULL);
        ASSERT_EQ(t_run_mono(workers[w], st_root, &st), 0);
        long ng = atomic_load(&st.ngrants);
        ASSERT((size_t)ng <= cap);
        ASSERT(ng > 0);
        /* Each grant is recorded at or after its due instant, so the
         * recorded times satisfy the bound too. */
        check_bound(st.grants, ng, st.T, st.P, st.B, st.t0);
        free(st.grants);
    }
}

/* ---- what a waiter records -------------------------------------------- */

/* A task sleeping until its tokens are due records the limiter (kind and
 * address) as what it waits on, not a plain sleep. */
struct rec {
    weft_limiter *l;
    weft_task *task;
    weft_time at;
};

static int rec_taker(void *arg)
{
    struct rec *r = arg;
    r->task = weft__current();
    ASSERT_EQ(weft_limiter_acquire(r->l, 1, WEFT_NEVER), 0);
    r->at = weft_now();
    return 0;
}

static int record_root(void *arg)
{
    (void)arg;
    struct rec r = {.at = -1};
    /* 1 token a second, burst 1: the root takes it, the taker waits 1 s. */
    ASSERT_EQ(weft_limiter_new(&r.l, 1, WEFT_SEC, 1), 0);
    ASSERT_EQ(weft_limiter_acquire(r.l, 1, WEFT_NEVER), 0);
    weft_scope *s = scope_open();
    spawn(rec_taker, &r);
    ASSERT_EQ(weft_sleep_for(WEFT_SEC / 2), 0); /* one worker: it sleeps now */
    ASSERT(r.task != NULL);
    ASSERT(weft__task_wait_kind(r.task) == &weft__wk_limiter);
    ASSERT(weft__task_wait_obj(r.task) == r.l);
    ASSERT_EQ(r.at, -1);
    ASSERT_EQ(weft_limiter_free(r.l), -EBUSY); /* it sleeps in it */
    scope_end(s);
    ASSERT_EQ(r.at, WEFT_SEC);
    ASSERT_EQ(weft_limiter_free(r.l), 0);
    return 0;
}

TEST(limiter_waiter_records_the_limiter)
{
    ASSERT_EQ(t_run_virtual(1, record_root, NULL), 0);
}
