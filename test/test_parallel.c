/* SPDX-License-Identifier: MIT */
/*
 * weft_map_tasks and weft_pipeline, through the public API only: results in
 * input order, the exact bound on calls in flight and on tasks, start
 * order, fail-fast and collect, deadlines and outside cancels at their
 * exact virtual instant; pipelines with exact multisets (unordered) and
 * exact order (ordered, workers sleeping random virtual durations),
 * filters, the end of input travelling to the end of output, failures
 * that close both ends, argument checks that touch nothing, and
 * cross-worker stress for TSan.
 */
#include "t.h"
#include "weft.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define SEC WEFT_SEC
#define MS WEFT_MSEC

static weft_chan *mkchan(size_t elem_size, size_t cap)
{
    weft_chan *c = NULL;
    ASSERT_EQ(weft_chan_new(&c, elem_size, cap), 0);
    return c;
}

/* Raises *max to v if v is larger. */
static void note_max(atomic_int *max, int v)
{
    int m = atomic_load(max);
    while (v > m && !atomic_compare_exchange_weak(max, &m, v))
        ;
}

/* ======================================================================
 * weft_map_tasks
 * ==================================================================== */

/* A map call: optionally sleeps (virtual time), counts calls in flight,
 * notes its start, stores a result and returns a status. Its item says
 * which index it is and where the shared state is. */
struct mctx;
struct mitem {
    struct mctx *m;
    size_t i;
};

struct mctx {
    size_t n;
    struct mitem *items; /* n of them: weft_map_tasks's array */
    int64_t *results;
    int64_t *sleep; /* per index, ns to sleep (NULL: none) */
    int *ret;       /* per index, the status to return (NULL: i % 5) */
    atomic_int inflight, max;
    atomic_long calls;
    size_t *starts; /* indices in the order their calls began */
    atomic_long nstarts;
    const void *stacks[64]; /* distinct task stacks seen (1 worker only) */
    int nstacks;
    bool count_stacks;
    int got[64]; /* per index < 64: what the sleep returned */
};

static int map_fn(void *arg)
{
    struct mitem *it = arg;
    struct mctx *m = it->m;
    size_t i = it->i;
    ASSERT(i < m->n);
    ASSERT(it == &m->items[i]);
    int here = 0;
    if (m->count_stacks) { /* one worker: no race on the array */
        const void *sp = &here;
        int k = 0;
        while (k < m->nstacks && m->stacks[k] != sp)
            k++;
        if (k == m->nstacks) {
            ASSERT(m->nstacks < 64);
            m->stacks[m->nstacks++] = sp;
        }
    }
    m->starts[atomic_fetch_add(&m->nstarts, 1)] = i;
    atomic_fetch_add(&m->calls, 1);
    note_max(&m->max, atomic_fetch_add(&m->inflight, 1) + 1);
    int rc = m->sleep ? weft_sleep_for(m->sleep[i]) : weft_yield();
    if (i < 64)
        m->got[i] = rc;
    atomic_fetch_sub(&m->inflight, 1);
    if (rc)
        return rc;
    m->results[i] = (int64_t)i * (int64_t)i + 7;
    return m->ret ? m->ret[i] : (int)(i % 5);
}

static void mctx_init(struct mctx *m, size_t n)
{
    memset(m, 0, sizeof *m);
    m->n = n;
    m->results = calloc(n ? n : 1, sizeof(int64_t));
    m->starts = calloc(n ? n : 1, sizeof(size_t));
    m->items = calloc(n ? n : 1, sizeof(struct mitem));
    ASSERT(m->results && m->starts && m->items);
    for (size_t i = 0; i < n; i++)
        m->items[i] = (struct mitem){m, i};
}

static void mctx_free(struct mctx *m)
{
    free(m->results);
    free(m->starts);
    free(m->items);
    free(m->sleep);
    free(m->ret);
}

/* ---- results in input order, for every kind of limit ---- */

static int map_order_root(void *arg)
{
    (void)arg;
    const size_t n = 200;
    const int limits[] = {1, 3, (int)n, (int)n + 50, 0, -1};
    for (int l = 0; l < (int)(sizeof limits / sizeof *limits); l++) {
        struct mctx m;
        mctx_init(&m, n);
        m.sleep = calloc(n, sizeof(int64_t));
        for (size_t i = 0; i < n; i++) /* finish out of order */
            m.sleep[i] = (int64_t)((i * 7919) % 13) * MS;
        int *st = malloc(n * sizeof(int));
        weft_time t0 = weft_now();
        ASSERT_EQ(weft_map_tasks(n, limits[l], map_fn, m.items, sizeof *m.items,
                                 WEFT_FAIL_FAST, st, WEFT_NEVER),
                  0);
        for (size_t i = 0; i < n; i++) {
            ASSERT_EQ(m.results[i], (int64_t)i * (int64_t)i + 7);
            ASSERT_EQ(st[i], (int)(i % 5)); /* non-negative: kept as is */
        }
        ASSERT_EQ(atomic_load(&m.calls), (long)n);
        ASSERT_EQ(atomic_load(&m.inflight), 0);
        int bound = limits[l] > 0 && limits[l] < (int)n ? limits[l] : (int)n;
        ASSERT(atomic_load(&m.max) <= bound);
        if (limits[l] == 1) { /* one at a time: the durations add up */
            int64_t sum = 0;
            for (size_t i = 0; i < n; i++)
                sum += m.sleep[i];
            ASSERT_EQ(weft_now() - t0, sum);
        }
        /* The same with statuses NULL, and with COLLECT. */
        memset(m.results, 0, n * sizeof(int64_t));
        atomic_store(&m.nstarts, 0);
        ASSERT_EQ(weft_map_tasks(n, limits[l], map_fn, m.items, sizeof *m.items,
                                 WEFT_COLLECT, NULL, WEFT_NEVER),
                  0);
        for (size_t i = 0; i < n; i++)
            ASSERT_EQ(m.results[i], (int64_t)i * (int64_t)i + 7);
        free(st);
        mctx_free(&m);
    }
    return 0;
}

TEST(map_results_in_input_order_every_limit)
{
    ASSERT_EQ(t_run_virtual(1, map_order_root, NULL), 0);
    ASSERT_EQ(t_run_virtual(4, map_order_root, NULL), 0);
}

/* ---- at most limit in flight, measured exactly; at most limit tasks ---- */

struct inflight_case {
    int workers;
};

static int map_inflight_root(void *arg)
{
    struct inflight_case *c = arg;
    const size_t n = 20;
    const int limits[] = {1, 3, 7, 20, 25, 0, -5};
    for (int l = 0; l < (int)(sizeof limits / sizeof *limits); l++) {
        struct mctx m;
        mctx_init(&m, n);
        m.sleep = calloc(n, sizeof(int64_t));
        for (size_t i = 0; i < n; i++)
            m.sleep[i] = SEC;
        m.count_stacks = c->workers == 1;
        int want = limits[l] > 0 && limits[l] < (int)n ? limits[l] : (int)n;
        weft_time t0 = weft_now();
        ASSERT_EQ(weft_map_tasks(n, limits[l], map_fn, m.items, sizeof *m.items,
                                 WEFT_FAIL_FAST, NULL, WEFT_NEVER),
                  0);
        /* Every call blocks for 1 s of virtual time: the pool is full
         * all the time, and it takes ceil(n / limit) seconds. */
        ASSERT_EQ(atomic_load(&m.max), want);
        ASSERT_EQ(weft_now() - t0, (int64_t)((n + want - 1) / want) * SEC);
        if (m.count_stacks) /* distinct task stacks: the tasks used */
            ASSERT_EQ(m.nstacks, want);
        mctx_free(&m);
    }
    return 0;
}

TEST(map_at_most_limit_in_flight_exactly)
{
    struct inflight_case one = {1}, four = {4};
    ASSERT_EQ(t_run_virtual(1, map_inflight_root, &one), 0);
    ASSERT_EQ(t_run_virtual(4, map_inflight_root, &four), 0);
}

/* ---- calls start in index order ---- */

static int map_start_order_root(void *arg)
{
    (void)arg;
    const size_t n = 300;
    uint64_t seed = weft_seed();
    struct mctx m;
    mctx_init(&m, n);
    m.sleep = calloc(n, sizeof(int64_t));
    for (size_t i = 0; i < n; i++)
        m.sleep[i] = (int64_t)(rnd(&seed) % 1000) * WEFT_USEC;
    ASSERT_EQ(weft_map_tasks(n, 5, map_fn, m.items, sizeof *m.items,
                             WEFT_FAIL_FAST, NULL, WEFT_NEVER),
              0);
    ASSERT_EQ(atomic_load(&m.nstarts), (long)n);
    for (size_t k = 0; k < n; k++)
        ASSERT_EQ(m.starts[k], k);
    mctx_free(&m);
    return 0;
}

TEST(map_starts_calls_in_index_order)
{
    /* One worker: the order calls begin in is observable exactly. The
     * seeds shuffle which ready task runs next. */
    for (uint64_t seed = 1; seed <= 20; seed++) {
        T_SEED(seed);
        ASSERT_EQ(
            t_run(1, WEFT_CLOCK_VIRTUAL, seed, map_start_order_root, NULL), 0);
    }
}

/* ---- FAIL_FAST and COLLECT ---- */

/* Ten calls of 1 s, three at a time; call 4 fails after 0.5 s. */
static void ten_calls(struct mctx *m)
{
    mctx_init(m, 10);
    m->sleep = calloc(10, sizeof(int64_t));
    m->ret = calloc(10, sizeof(int));
    for (int i = 0; i < 10; i++)
        m->sleep[i] = SEC;
    m->sleep[4] = SEC / 2;
    m->ret[4] = -EIO;
}

static int map_fail_fast_root(void *arg)
{
    (void)arg;
    struct mctx m;
    ten_calls(&m);
    int st[10];
    memset(st, 0x55, sizeof st);
    ASSERT_EQ(weft_map_tasks(10, 3, map_fn, m.items, sizeof *m.items,
                             WEFT_FAIL_FAST, st, WEFT_NEVER),
              -EIO);
    /* 0-2 ran from 0 to 1 s, 3-5 started at 1 s; 4 failed at 1.5 s,
     * which cancelled 3 and 5; 6-9 never started. */
    ASSERT_EQ(weft_now(), SEC + SEC / 2);
    ASSERT_EQ(st[0], 0);
    ASSERT_EQ(st[1], 0);
    ASSERT_EQ(st[2], 0);
    ASSERT_EQ(st[3], -ECANCELED);
    ASSERT_EQ(st[4], -EIO);
    ASSERT_EQ(st[5], -ECANCELED);
    for (int i = 6; i < 10; i++)
        ASSERT_EQ(st[i], -ECANCELED);
    ASSERT_EQ(m.got[3], -ECANCELED); /* running calls were cancelled */
    ASSERT_EQ(m.got[5], -ECANCELED);
    ASSERT_EQ(atomic_load(&m.calls), 6);
    /* 0-2 began at 0 and 3-5 at 1 s: in index order on one worker; on
     * several, calls that begin at one instant note it in any order. */
    for (int k = 0; k < 6; k++) {
        if (weft_workers() == 1)
            ASSERT_EQ(m.starts[k], (size_t)k);
        else
            ASSERT(m.starts[k] / 3 == (size_t)k / 3);
    }
    for (size_t i = 0; i < 6; i++) {
        int seen = 0;
        for (int k = 0; k < 6; k++)
            seen += m.starts[k] == i;
        ASSERT_EQ(seen, 1);
    }
    ASSERT_EQ(atomic_load(&m.inflight), 0);
    /* The caller's own scope is not cancelled. */
    ASSERT_EQ(weft_cancelled(), 0);
    ASSERT_EQ(weft_sleep_for(SEC), 0);
    ASSERT_EQ(atomic_load(&m.calls), 6); /* nothing runs on after */
    mctx_free(&m);
    return 0;
}

TEST(map_fail_fast_cancels_running_and_starts_no_more)
{
    ASSERT_EQ(t_run_virtual(1, map_fail_fast_root, NULL), 0);
    ASSERT_EQ(t_run_virtual(4, map_fail_fast_root, NULL), 0);
}

static int map_collect_root(void *arg)
{
    (void)arg;
    struct mctx m;
    ten_calls(&m);
    int st[10];
    ASSERT_EQ(weft_map_tasks(10, 3, map_fn, m.items, sizeof *m.items,
                             WEFT_COLLECT, st, WEFT_NEVER),
              0);
    for (int i = 0; i < 10; i++) {
        ASSERT_EQ(st[i], i == 4 ? -EIO : 0);
        ASSERT_EQ(m.got[i], 0);
    }
    ASSERT_EQ(atomic_load(&m.calls), 10);
    /* 0-2: 0..1; 3,5: 1..2; 4: 1..1.5; 6: 1.5..2.5; 7,8: 2..3; 9: 2.5..3.5 */
    ASSERT_EQ(weft_now(), 3 * SEC + SEC / 2);
    ASSERT_EQ(atomic_load(&m.max), 3);
    mctx_free(&m);
    return 0;
}

TEST(map_collect_runs_every_call)
{
    ASSERT_EQ(t_run_virtual(1, map_collect_root, NULL), 0);
    ASSERT_EQ(t_run_virtual(4, map_collect_root, NULL), 0);
}

/* Fail-fast with many items and workers: the first error is returned, and
 * no call starts once the failure has been seen. "Seen" is only bounded in
 * a deterministic run: on one worker (calls yield) and under the virtual
 * clock (calls sleep 1 ms), each of the other 7 tasks has at most one call
 * in flight when the failing one returns, and starts at most one more
 * before the stop flag or the scope's cancel reaches it. On a real clock across
 * workers, a worker's thread can be descheduled between taking index n/2 and
 * calling fn while the others run through the rest (seen under qemu), so there
 * the bound is only that every status is accounted for. */
enum { FF_ONE_WORKER, FF_VIRTUAL, FF_ANY };

static int map_fail_fast_many_root(void *arg)
{
    int mode = (int)(intptr_t)arg;
    const size_t n = (size_t)T_SCALE(20000);
    struct mctx m;
    mctx_init(&m, n);
    m.ret = calloc(n, sizeof(int));
    m.ret[n / 2] = -ENOSPC;
    if (mode == FF_VIRTUAL) {
        m.sleep = calloc(n, sizeof(int64_t));
        for (size_t i = 0; i < n; i++)
            m.sleep[i] = MS;
    }
    int *st = malloc(n * sizeof(int));
    ASSERT_EQ(weft_map_tasks(n, 8, map_fn, m.items, sizeof *m.items,
                             WEFT_FAIL_FAST, st, WEFT_NEVER),
              -ENOSPC);
    ASSERT_EQ(st[n / 2], -ENOSPC);
    long finished = 0;
    for (size_t i = 0; i < n; i++) {
        ASSERT(st[i] == 0 || st[i] == -ECANCELED || i == n / 2);
        finished += st[i] != -ECANCELED;
    }
    long calls = atomic_load(&m.calls);
    ASSERT_EQ(atomic_load(&m.inflight), 0);
    if (mode == FF_ANY) {
        ASSERT_EQ(finished, calls); /* calls that yield are not cancelled */
    } else {
        ASSERT(finished <= calls); /* a cancelled sleep says -ECANCELED */
        ASSERT(calls >= (long)(n / 2) + 1);
        ASSERT(calls <= (long)(n / 2) + 1 + 2 * 7);
    }
    free(st);
    mctx_free(&m);
    return 0;
}

TEST(map_fail_fast_many_items)
{
    ASSERT_EQ(
        t_run_mono(1, map_fail_fast_many_root, (void *)(intptr_t)FF_ONE_WORKER),
        0);
    ASSERT_EQ(
        t_run_virtual(4, map_fail_fast_many_root, (void *)(intptr_t)FF_VIRTUAL),
        0);
    ASSERT_EQ(t_run_mono(4, map_fail_fast_many_root, (void *)(intptr_t)FF_ANY),
              0);
}

/* ---- deadline and outside cancel ---- */

static int map_deadline_root(void *arg)
{
    weft_policy policy = *(weft_policy *)arg;
    struct mctx m;
    ten_calls(&m);
    m.ret[4] = 0;
    m.sleep[4] = SEC;
    int st[10];
    ASSERT_EQ(weft_map_tasks(10, 3, map_fn, m.items, sizeof *m.items, policy,
                             st, 2 * SEC + SEC / 2),
              -ETIMEDOUT);
    ASSERT_EQ(weft_now(), 2 * SEC + SEC / 2);
    for (int i = 0; i < 10; i++)
        ASSERT_EQ(st[i], i < 6 ? 0 : -ECANCELED); /* 6-8 cut, 9 not run */
    ASSERT_EQ(m.got[6], -ECANCELED);
    ASSERT_EQ(atomic_load(&m.calls), 9);
    ASSERT_EQ(weft_cancelled(), 0);
    /* A deadline already past: nothing runs. */
    ASSERT_EQ(weft_map_tasks(10, 3, map_fn, m.items, sizeof *m.items, policy,
                             st, weft_now()),
              -ETIMEDOUT);
    ASSERT_EQ(atomic_load(&m.calls), 9);
    for (int i = 0; i < 10; i++)
        ASSERT_EQ(st[i], -ECANCELED);
    mctx_free(&m);
    return 0;
}

TEST(map_deadline_at_exact_instant)
{
    weft_policy ff = WEFT_FAIL_FAST, co = WEFT_COLLECT;
    ASSERT_EQ(t_run_virtual(1, map_deadline_root, &ff), 0);
    ASSERT_EQ(t_run_virtual(1, map_deadline_root, &co), 0);
    ASSERT_EQ(t_run_virtual(3, map_deadline_root, &ff), 0);
}

/* weft_map_tasks in a task whose scope another task cancels at 1.25 s. */
static struct mctx cancel_m;
static int cancel_st[10];
static int map_in_scope(void *arg)
{
    (void)arg;
    int rc =
        weft_map_tasks(10, 3, map_fn, cancel_m.items, sizeof *cancel_m.items,
                       WEFT_COLLECT, cancel_st, WEFT_NEVER);
    ASSERT_EQ(rc, -ECANCELED);
    ASSERT_EQ(weft_now(), SEC + SEC / 4);
    return 0;
}

static int map_cancel_root(void *arg)
{
    (void)arg;
    ten_calls(&cancel_m);
    cancel_m.ret[4] = 0;
    weft_scope *s = scope_open();
    ASSERT(weft_spawn(s, map_in_scope, NULL) >= 0);
    ASSERT_EQ(weft_sleep_until(SEC + SEC / 4), 0);
    ASSERT_EQ(weft_scope_cancel(s), 0);
    ASSERT_EQ(weft_scope_join(s), -ECANCELED);
    ASSERT_EQ(weft_scope_free(s), 0);
    /* 0-2 done at 1 s; 3-5 cut at 1.25 s; 6-9 never started. */
    for (int i = 0; i < 10; i++)
        ASSERT_EQ(cancel_st[i], i < 3 ? 0 : -ECANCELED);
    ASSERT_EQ(cancel_m.got[3], -ECANCELED);
    ASSERT_EQ(atomic_load(&cancel_m.calls), 6);
    mctx_free(&cancel_m);
    return 0;
}

TEST(map_outside_cancel_reaches_every_call)
{
    ASSERT_EQ(t_run_virtual(1, map_cancel_root, NULL), 0);
    ASSERT_EQ(t_run_virtual(4, map_cancel_root, NULL), 0);
}

/* ---- arguments ---- */

static int never_fn(void *arg)
{
    (void)arg;
    T_FAIL("called");
}

static int map_args_root(void *arg)
{
    (void)arg;
    int st[2] = {123, 456};
    ASSERT_EQ(weft_map_tasks(2, 1, NULL, NULL, 0, WEFT_FAIL_FAST, st, 0),
              -EINVAL);
    ASSERT_EQ(weft_map_tasks(2, 1, never_fn, NULL, 0, WEFT_FIRST, st, 0),
              -EINVAL);
    ASSERT_EQ(weft_map_tasks(2, 1, never_fn, NULL, 0, WEFT_RACE, st, 0),
              -EINVAL);
    ASSERT_EQ(weft_map_tasks(2, 1, never_fn, NULL, 0, (weft_policy)42, st, 0),
              -EINVAL);
    ASSERT_EQ(weft_map_tasks(0, 1, never_fn, NULL, 0, WEFT_FIRST, st, 0),
              -EINVAL);
    ASSERT_EQ(weft_map_tasks(2, 1, never_fn, NULL, 0, WEFT_COLLECT, st, -1),
              -EINVAL);
    /* An array that is not there, or does not fit in memory. */
    ASSERT_EQ(
        weft_map_tasks(2, 1, never_fn, NULL, 4, WEFT_COLLECT, st, WEFT_NEVER),
        -EINVAL);
    ASSERT_EQ(weft_map_tasks(3, 1, never_fn, st, SIZE_MAX / 2, WEFT_COLLECT, st,
                             WEFT_NEVER),
              -EINVAL);
    ASSERT_EQ(weft_map_tasks(SIZE_MAX, 1, never_fn, st, 2, WEFT_COLLECT, NULL,
                             WEFT_NEVER),
              -EINVAL);
    ASSERT_EQ(st[0], 123);
    ASSERT_EQ(st[1], 456);
    /* n == 0: nothing to do, at once, even in a cancelled scope. */
    ASSERT_EQ(
        weft_map_tasks(0, 4, never_fn, NULL, 0, WEFT_COLLECT, st, WEFT_NEVER),
        0);
    ASSERT_EQ(weft_map_tasks(0, 0, never_fn, NULL, 0, WEFT_FAIL_FAST, NULL, 1),
              0);
    ASSERT_EQ(weft_map_tasks(0, 0, never_fn, NULL, 8, WEFT_FAIL_FAST, NULL, 1),
              0);
    ASSERT_EQ(st[0], 123);
    ASSERT_EQ(weft_now(), 0);
    /* 0 is an instant, not "no deadline" (WEFT_NEVER is): at time 0 it
     * has come, and nothing starts. */
    ASSERT_EQ(weft_map_tasks(2, 1, never_fn, NULL, 0, WEFT_COLLECT, st, 0),
              -ETIMEDOUT);
    ASSERT_EQ(st[0], -ECANCELED);
    ASSERT_EQ(st[1], -ECANCELED);
    ASSERT_EQ(weft_now(), 0);
    return 0;
}

TEST(map_invalid_arguments)
{
    ASSERT_EQ(t_run_virtual(1, map_args_root, NULL), 0);
    int st[1] = {9};
    ASSERT_EQ(weft_map_tasks(1, 1, never_fn, NULL, 0, WEFT_FAIL_FAST, st, 0),
              -EPERM);
    ASSERT_EQ(weft_map_tasks(1, 1, NULL, NULL, 0, WEFT_FAIL_FAST, st, 0),
              -EINVAL);
    ASSERT_EQ(st[0], 9);
}

/* ---- fn is a weft_fn over the items ---- */

/* 3-byte items: fn gets items + i * 3, each exactly once. */
struct odd {
    unsigned char tag, hits, pad;
};

static int odd_fn(void *arg)
{
    struct odd *o = arg;
    o->hits++;
    return o->tag;
}

static atomic_int shared_calls;

static int shared_fn(void *arg)
{
    ASSERT(arg == (void *)&shared_calls);
    atomic_fetch_add(&shared_calls, 1);
    return weft_yield();
}

/* One fetch function, the shape of every weft_fn, serves weft_map_tasks,
 * weft_call_for and weft_retry_call as it is; a bounded map with a
 * timeout per call is one wrapper. */
struct page {
    int id;
    int64_t latency; /* the remote call's */
    int bytes;       /* the result */
    weft_time done;
};

static int fetch(void *arg)
{
    struct page *p = arg;
    int rc = weft_sleep_for(p->latency);
    if (rc)
        return rc;
    p->bytes = 1000 + p->id;
    p->done = weft_now();
    return 0;
}

static int fetch_200ms(void *arg)
{
    return weft_call_for(fetch, arg, 200 * MS);
}

static int map_items_root(void *arg)
{
    (void)arg;
    struct odd odd[50];
    ASSERT_EQ(sizeof odd[0], 3);
    for (int i = 0; i < 50; i++)
        odd[i] = (struct odd){.tag = (unsigned char)i};
    int st[50];
    ASSERT_EQ(weft_map_tasks(50, 4, odd_fn, odd, sizeof odd[0], WEFT_COLLECT,
                             st, WEFT_NEVER),
              0);
    for (int i = 0; i < 50; i++) {
        ASSERT_EQ(odd[i].hits, 1);
        ASSERT_EQ(st[i], i);
    }
    /* item_size 0: n calls, each given items itself (NULL too). */
    ASSERT_EQ(weft_map_tasks(7, 3, shared_fn, &shared_calls, 0, WEFT_FAIL_FAST,
                             NULL, WEFT_NEVER),
              0);
    ASSERT_EQ(atomic_load(&shared_calls), 7);

    /* Six pages of 100 ms, one of which hangs: two at a time, each call
     * limited to 200 ms. */
    struct page pages[6];
    for (int i = 0; i < 6; i++)
        pages[i] = (struct page){.id = i, .latency = 100 * MS};
    pages[2].latency = 10 * SEC;
    weft_time t0 = weft_now();
    int ps[6];
    ASSERT_EQ(weft_map_tasks(6, 2, fetch_200ms, pages, sizeof pages[0],
                             WEFT_COLLECT, ps, WEFT_NEVER),
              0);
    /* 0,1: 0..100; 2: 100..300 (cut); 3: 100..200; 4: 200..300;
     * 5: 300..400. */
    weft_time done[6] = {100, 100, 0, 200, 300, 400};
    for (int i = 0; i < 6; i++) {
        ASSERT_EQ(ps[i], i == 2 ? -ETIMEDOUT : 0);
        ASSERT_EQ(pages[i].bytes, i == 2 ? 0 : 1000 + i);
        if (i != 2)
            ASSERT_EQ(pages[i].done - t0, done[i] * MS);
    }
    ASSERT_EQ(weft_now() - t0, 400 * MS);
    /* The same function, as it is, elsewhere. */
    struct page one = {.id = 9, .latency = 100 * MS};
    ASSERT_EQ(weft_call_for(fetch, &one, 50 * MS), -ETIMEDOUT);
    ASSERT_EQ(weft_retry_call(NULL, fetch, &one), 0);
    ASSERT_EQ(one.bytes, 1009);
    return 0;
}

TEST(map_calls_a_weft_fn_on_each_item)
{
    ASSERT_EQ(t_run_virtual(1, map_items_root, NULL), 0);
    atomic_store(&shared_calls, 0);
    ASSERT_EQ(t_run_virtual(3, map_items_root, NULL), 0);
}

/* ---- cross-worker stress ---- */

struct stress_map {
    size_t n;
    atomic_int *hits;
    atomic_int inflight, max;
};

static struct stress_map *stress; /* the one stress_map_root runs on */

/* Its item is hits[i]. */
static int stress_map_fn(void *arg)
{
    struct stress_map *s = stress;
    size_t i = (size_t)((atomic_int *)arg - s->hits);
    note_max(&s->max, atomic_fetch_add(&s->inflight, 1) + 1);
    atomic_fetch_add(&s->hits[i], 1);
    if (i % 64 == 0)
        weft_yield();
    atomic_fetch_sub(&s->inflight, 1);
    return (int)(i & 1);
}

static int stress_map_root(void *arg)
{
    struct stress_map *s = arg;
    stress = s;
    int *st = malloc(s->n * sizeof(int));
    for (int round = 0; round < 3; round++) {
        int limit = round == 0 ? 8 : round == 1 ? 64 : 2;
        memset(s->hits, 0, s->n * sizeof(atomic_int));
        atomic_store(&s->max, 0);
        ASSERT_EQ(weft_map_tasks(s->n, limit, stress_map_fn, s->hits,
                                 sizeof *s->hits,
                                 round == 1 ? WEFT_COLLECT : WEFT_FAIL_FAST, st,
                                 WEFT_NEVER),
                  0);
        for (size_t i = 0; i < s->n; i++) {
            if (atomic_load(&s->hits[i]) != 1)
                T_FAIL("index %zu called %d times", i,
                       atomic_load(&s->hits[i]));
            ASSERT_EQ(st[i], (int)(i & 1));
        }
        ASSERT(atomic_load(&s->max) <= limit);
    }
    free(st);
    return 0;
}

TEST(map_cross_worker_stress)
{
    struct stress_map s = {.n = (size_t)T_SCALE(200000)};
    s.hits = calloc(s.n, sizeof(atomic_int));
    ASSERT_EQ(t_run_mono(4, stress_map_root, &s), 0);
    free(s.hits);
}

/* ======================================================================
 * weft_pipeline
 * ==================================================================== */

/* A producer: sends 0, 1, 2, ... (n of them, or until a send fails if n
 * is negative), sleeping `gap` before each; closes the channel after the
 * last one and drops its reference. */
struct producer {
    weft_chan *c;
    long n;
    int64_t gap;
    long sent;
    int rc; /* the send that failed, or 0 */
    weft_time at;
};

static int produce(void *arg)
{
    struct producer *p = arg;
    p->rc = 0;
    for (int64_t v = 0; p->n < 0 || v < p->n; v++) {
        if (p->gap && (p->rc = weft_sleep_for(p->gap)) != 0)
            break;
        if ((p->rc = weft_chan_send(p->c, &v)) != 0)
            break;
        p->sent++;
    }
    if (p->rc == 0)
        ASSERT_EQ(weft_chan_close(p->c), 0);
    p->at = weft_now();
    ASSERT_EQ(weft_chan_unref(p->c), 0);
    return 0;
}

/* A consumer: receives int64 values until a receive fails; stops and
 * closes the channel after `stop_after` values if that is positive. */
struct consumer {
    weft_chan *c;
    int64_t *vals;
    long cap, n;
    long stop_after;
    int rc;
    weft_time at;
    weft_time *times; /* when each value came (may be NULL) */
};

static int consume(void *arg)
{
    struct consumer *k = arg;
    for (;;) {
        if (k->stop_after > 0 && k->n == k->stop_after) {
            ASSERT_EQ(weft_chan_close(k->c), 0);
            k->rc = 0;
            break;
        }
        int64_t v;
        if ((k->rc = weft_chan_recv(k->c, &v)) != 0)
            break;
        ASSERT(k->n < k->cap);
        if (k->times)
            k->times[k->n] = weft_now();
        k->vals[k->n++] = v;
    }
    k->at = weft_now();
    ASSERT_EQ(weft_chan_unref(k->c), 0);
    return 0;
}

/* The stage used by most tests, on int64 values: y = x * mul + add, after
 * sleeping (a fixed time, or a random one drawn from the value and seed);
 * WEFT_SKIP for x % skip_mod == skip_rem; -EIO for x == fail_at. */
struct sctx {
    int64_t mul, add;
    int64_t skip_mod, skip_rem;
    int64_t fail_at;
    int64_t sleep;      /* fixed sleep, ns */
    int64_t sleep_rand; /* random sleep below this, ns */
    uint64_t seed;
    atomic_int inflight, max;
    atomic_long calls;
};

static struct sctx sctx_of(int64_t mul, int64_t add)
{
    struct sctx s = {.mul = mul, .add = add, .fail_at = -1};
    return s;
}

static int stage_fn(void *ctx, const void *in, void *out)
{
    struct sctx *c = ctx;
    int64_t x;
    memcpy(&x, in, sizeof x);
    atomic_fetch_add(&c->calls, 1);
    note_max(&c->max, atomic_fetch_add(&c->inflight, 1) + 1);
    int rc = 0;
    if (c->sleep)
        rc = weft_sleep_for(c->sleep);
    else if (c->sleep_rand) {
        uint64_t s = c->seed ^ ((uint64_t)x * 0x9e3779b97f4a7c15ULL);
        rc = weft_sleep_for((int64_t)(rnd(&s) % (uint64_t)c->sleep_rand));
    }
    atomic_fetch_sub(&c->inflight, 1);
    if (rc)
        return rc;
    if (x == c->fail_at)
        return -EIO;
    if (c->skip_mod && x % c->skip_mod == c->skip_rem)
        return WEFT_SKIP;
    int64_t y = x * c->mul + c->add;
    memcpy(out, &y, sizeof y);
    return 0;
}

/* What the stages make of x: false if a stage drops it. */
static bool apply(const struct sctx *const *cs, int n, int64_t *x)
{
    for (int k = 0; k < n; k++) {
        const struct sctx *c = cs[k];
        if (c->skip_mod && *x % c->skip_mod == c->skip_rem)
            return false;
        *x = *x * c->mul + c->add;
    }
    return true;
}

static weft_stage stage_of(struct sctx *c, int workers, int ordered, size_t cap)
{
    weft_stage s = {.fn = stage_fn,
                    .ctx = c,
                    .out_size = sizeof(int64_t),
                    .workers = workers,
                    .ordered = ordered,
                    .capacity = cap};
    return s;
}

/* Runs the producer and the consumer in one scope, and the pipeline's
 * task `fn` in a scope inside it that is cancelled at r->cancel_at if that
 * is set; returns when all three have finished. */
struct run;
static int ends_and_pipeline(struct run *r, weft_fn fn, void *arg);

/* One pipeline run: a producer, the pipeline (in its own task, inside a
 * scope the test may cancel), a consumer. */
struct run {
    weft_stage st[8];
    int n;
    size_t in_cap, out_cap;
    long items;  /* values to produce; negative: until it fails */
    int64_t gap; /* producer's sleep before each value */
    weft_time deadline;
    int64_t cancel_at; /* > 0: the pipeline's scope is cancelled then */
    long stop_after;   /* the consumer closes out after this many */
    struct producer prod;
    struct consumer cons;
    int rc;
    weft_time at;
    weft_chan *in, *out;
};

static int pipeline_task(void *arg)
{
    struct run *r = arg;
    r->rc = weft_pipeline(r->in, r->out, r->st, r->n, r->deadline);
    r->at = weft_now();
    ASSERT_EQ(weft_chan_unref(r->in), 0);
    ASSERT_EQ(weft_chan_unref(r->out), 0);
    return 0;
}

static int ends_and_pipeline(struct run *r, weft_fn fn, void *arg)
{
    weft_scope *ends = scope_open();
    ASSERT(weft_spawn(ends, produce, &r->prod) >= 0);
    ASSERT(weft_spawn(ends, consume, &r->cons) >= 0);
    weft_scope *s = scope_open();
    ASSERT(weft_spawn(s, fn, arg) >= 0);
    if (r->cancel_at > 0) {
        ASSERT_EQ(weft_sleep_until(r->cancel_at), 0);
        ASSERT_EQ(weft_scope_cancel(s), 0);
        ASSERT_EQ(weft_scope_join(s), -ECANCELED);
        ASSERT_EQ(weft_scope_free(s), 0);
    } else {
        scope_end(s);
    }
    scope_end(ends);
    return 0;
}

static int run_root(void *arg)
{
    struct run *r = arg;
    r->in = mkchan(sizeof(int64_t), r->in_cap);
    r->out = mkchan(sizeof(int64_t), r->out_cap);
    r->prod = (struct producer){
        .c = weft_chan_ref(r->in), .n = r->items, .gap = r->gap};
    long cap = r->items >= 0 ? r->items + 1 : 1000000;
    r->cons = (struct consumer){
        .c = weft_chan_ref(r->out), .cap = cap, .stop_after = r->stop_after};
    r->cons.vals = malloc((size_t)cap * sizeof(int64_t));
    r->cons.times = malloc((size_t)cap * sizeof(weft_time));
    return ends_and_pipeline(r, pipeline_task, r);
}

static void run_free(struct run *r)
{
    free(r->cons.vals);
    free(r->cons.times);
}

/* ---- unordered stages: the exact multiset, for 1, 2, 4 workers ---- */

static void check_multiset(struct run *r, const struct sctx *const *cs, int n)
{
    /* Expected outputs: stage maps are increasing, so sort both. */
    long items = r->items;
    int64_t *want = malloc((size_t)items * sizeof(int64_t));
    long nw = 0;
    for (int64_t x = 0; x < items; x++) {
        int64_t y = x;
        if (apply(cs, n, &y))
            want[nw++] = y;
    }
    ASSERT_EQ(r->cons.n, nw);
    /* Counting by value: every output is want[k] for one k; the maps are
     * injective, so mark each by inverting through a table lookup. */
    char *seen = calloc((size_t)nw + 1, 1);
    for (long i = 0; i < r->cons.n; i++) {
        int64_t v = r->cons.vals[i];
        long lo = 0, hi = nw - 1, at = -1;
        while (lo <= hi) { /* want[] is increasing */
            long mid = (lo + hi) / 2;
            if (want[mid] == v) {
                at = mid;
                break;
            }
            if (want[mid] < v)
                lo = mid + 1;
            else
                hi = mid - 1;
        }
        if (at < 0 || seen[at]++)
            T_FAIL("output %lld unexpected or repeated", (long long)v);
    }
    free(seen);
    free(want);
}

static int workers_of(int i)
{
    return i == 0 ? 1 : i == 1 ? 2 : 4;
}

TEST(pipeline_unordered_exact_multiset)
{
    for (int wi = 0; wi < 3; wi++) {
        for (int capi = 0; capi < 2; capi++) {
            struct sctx a = sctx_of(3, 1), b = sctx_of(2, -5);
            b.skip_mod = 7;
            b.skip_rem = 3;
            const struct sctx *cs[2] = {&a, &b};
            struct run r = {.n = 2,
                            .items = T_SCALE(100000),
                            .in_cap = capi ? 64 : 0,
                            .out_cap = capi ? 16 : 0,
                            .deadline = WEFT_NEVER};
            r.st[0] = stage_of(&a, workers_of(wi), 0, capi ? 32 : 0);
            r.st[1] = stage_of(&b, workers_of(2 - wi), 0, capi ? 32 : 0);
            ASSERT_EQ(t_run_mono(4, run_root, &r), 0);
            ASSERT_EQ(r.rc, 0);
            ASSERT_EQ(r.prod.rc, 0);
            ASSERT_EQ(r.prod.sent, r.items);
            ASSERT_EQ(r.cons.rc, -EPIPE);
            check_multiset(&r, cs, 2);
            ASSERT_EQ(atomic_load(&a.calls), r.items);
            ASSERT(atomic_load(&a.max) <= workers_of(wi));
            ASSERT(atomic_load(&b.max) <= workers_of(2 - wi));
            run_free(&r);
        }
    }
}

/* Every worker of an unordered stage works at once (virtual time). */
static int fanout_root(void *arg)
{
    (void)arg;
    struct sctx a = sctx_of(1, 0);
    a.sleep = SEC;
    struct run r = {.n = 1,
                    .items = 12,
                    .in_cap = 0,
                    .out_cap = 100,
                    .deadline = WEFT_NEVER};
    r.st[0] = stage_of(&a, 4, 0, 0);
    ASSERT_EQ(run_root(&r), 0);
    ASSERT_EQ(r.rc, 0);
    ASSERT_EQ(atomic_load(&a.max), 4);
    ASSERT_EQ(r.at, 3 * SEC); /* 12 values, 4 at a time, 1 s each */
    ASSERT_EQ(r.cons.n, 12);
    run_free(&r);
    return 0;
}

TEST(pipeline_fan_out_runs_workers_together)
{
    ASSERT_EQ(t_run_virtual(1, fanout_root, NULL), 0);
    ASSERT_EQ(t_run_virtual(4, fanout_root, NULL), 0);
}

/* ---- ordered stages: the exact order, workers sleeping at random ---- */

static int ordered_root(void *arg)
{
    int workers = *(int *)arg;
    uint64_t seed = weft_seed() ? weft_seed() : 12345;
    struct sctx a = sctx_of(1, 1000), b = sctx_of(2, 0), c = sctx_of(1, -3);
    a.sleep_rand = 10 * MS;
    a.seed = seed;
    b.sleep_rand = 3 * MS;
    b.seed = seed * 3 + 1;
    b.skip_mod = 5; /* drops 1/5, some of which are slow */
    b.skip_rem = 1;
    c.sleep_rand = 1 * MS;
    c.seed = seed * 7 + 2;
    const struct sctx *cs[3] = {&a, &b, &c};
    struct run r = {.n = 3,
                    .items = T_SCALE(3000),
                    .in_cap = 8,
                    .out_cap = 0,
                    .deadline = WEFT_NEVER};
    r.st[0] = stage_of(&a, workers, 1, 4);
    r.st[1] = stage_of(&b, workers + 1, 1, 0);
    r.st[2] = stage_of(&c, 3, 1, 2);
    ASSERT_EQ(run_root(&r), 0);
    ASSERT_EQ(r.rc, 0);
    ASSERT_EQ(r.cons.rc, -EPIPE);
    long k = 0;
    for (int64_t x = 0; x < r.items; x++) {
        int64_t y = x;
        if (!apply(cs, 3, &y))
            continue;
        ASSERT(k < r.cons.n);
        if (r.cons.vals[k] != y)
            T_FAIL("output %ld is %lld, want %lld", k,
                   (long long)r.cons.vals[k], (long long)y);
        k++;
    }
    ASSERT_EQ(k, r.cons.n);
    /* The workers did overlap: order came from the stage, not from a
     * lack of parallelism. */
    ASSERT(atomic_load(&a.max) > 1);
    ASSERT(atomic_load(&b.max) > 1);
    run_free(&r);
    return 0;
}

TEST(pipeline_ordered_exact_order_random_sleeps)
{
    int w2 = 2, w4 = 4, w7 = 7;
    for (uint64_t seed = 1; seed <= 5; seed++) {
        T_SEED(seed);
        ASSERT_EQ(t_run(1, WEFT_CLOCK_VIRTUAL, seed, ordered_root, &w4), 0);
    }
    T_SEED(0);
    ASSERT_EQ(t_run_virtual(4, ordered_root, &w2), 0);
    ASSERT_EQ(t_run_virtual(4, ordered_root, &w7), 0);
}

/* Unordered workers with random sleeps really reorder (so the ordered
 * test above shows something). */
static int reorder_root(void *arg)
{
    (void)arg;
    struct sctx a = sctx_of(1, 0);
    a.sleep_rand = 10 * MS;
    a.seed = 99;
    struct run r = {.n = 1,
                    .items = 200,
                    .in_cap = 0,
                    .out_cap = 0,
                    .deadline = WEFT_NEVER};
    r.st[0] = stage_of(&a, 4, 0, 0);
    ASSERT_EQ(run_root(&r), 0);
    ASSERT_EQ(r.rc, 0);
    ASSERT_EQ(r.cons.n, 200);
    int inversions = 0;
    for (long i = 1; i < r.cons.n; i++)
        inversions += r.cons.vals[i] < r.cons.vals[i - 1];
    ASSERT(inversions > 0);
    run_free(&r);
    return 0;
}

TEST(pipeline_unordered_workers_do_reorder)
{
    ASSERT_EQ(t_run_virtual(1, reorder_root, NULL), 0);
}

/* ---- WEFT_SKIP filters; sizes change from stage to stage ---- */

struct wide {
    int64_t x, sq;
    char tag[16];
};

static int widen(void *ctx, const void *in, void *out)
{
    (void)ctx;
    int32_t x;
    memcpy(&x, in, sizeof x);
    if (x % 2)
        return WEFT_SKIP; /* odd values are filtered out */
    struct wide *w = out;
    w->x = x;
    w->sq = (int64_t)x * x;
    snprintf(w->tag, sizeof w->tag, "v%d", (int)x);
    if (x % 8 == 0)
        weft_yield();
    return 0;
}

static int narrow(void *ctx, const void *in, void *out)
{
    (void)ctx;
    const struct wide *w = in;
    char tag[16];
    snprintf(tag, sizeof tag, "v%d", (int)w->x);
    ASSERT(strcmp(tag, w->tag) == 0);
    ASSERT_EQ(w->sq, w->x * w->x);
    if (w->x % 3 == 0)
        return WEFT_SKIP;
    int32_t r = (int32_t)w->x;
    memcpy(out, &r, sizeof r);
    return 0;
}

/* The input is buffered and closed before the call, the output has room
 * for everything: the caller runs the pipeline itself. */
static int sizes_root(void *arg)
{
    int ordered = *(int *)arg;
    const int n = 600;
    weft_chan *in = mkchan(sizeof(int32_t), (size_t)n);
    weft_chan *out = mkchan(sizeof(int32_t), (size_t)n);
    for (int32_t x = 0; x < n; x++)
        ASSERT_EQ(weft_chan_try_send(in, &x), 0);
    ASSERT_EQ(weft_chan_close(in), 0);
    weft_stage st[2] = {
        {.fn = widen,
         .out_size = sizeof(struct wide),
         .workers = 3,
         .ordered = ordered,
         .capacity = 2},
        {.fn = narrow,
         .out_size = sizeof(int32_t),
         .workers = 2,
         .ordered = ordered,
         .capacity = 0},
    };
    ASSERT_EQ(weft_pipeline(in, out, st, 2, WEFT_NEVER), 0);
    /* Odd values and multiples of 3 are gone; the rest is all there. */
    char *seen = calloc((size_t)n, 1);
    int32_t v, prev = -1;
    long k = 0;
    while (weft_chan_try_recv(out, &v) == 0) {
        ASSERT(v >= 0 && v < n && v % 2 == 0 && v % 3 != 0);
        ASSERT(!seen[v]++);
        if (ordered)
            ASSERT(v > prev);
        prev = v;
        k++;
    }
    ASSERT_EQ(k, n / 6 * 2);
    ASSERT_EQ(weft_chan_try_recv(out, &v), -EPIPE); /* closed after them */
    free(seen);
    ASSERT_EQ(weft_chan_unref(in), 0);
    ASSERT_EQ(weft_chan_unref(out), 0);
    return 0;
}

TEST(pipeline_skip_filters_and_sizes_change)
{
    int no = 0, yes = 1;
    ASSERT_EQ(t_run_virtual(1, sizes_root, &no), 0);
    ASSERT_EQ(t_run_virtual(1, sizes_root, &yes), 0);
    ASSERT_EQ(t_run_mono(4, sizes_root, &no), 0);
    ASSERT_EQ(t_run_mono(4, sizes_root, &yes), 0);
}

/* Values of the largest size through an ordered stage and an unordered
 * one (each worker's buffers are on the heap, not on its stack). */
#define BIG 65536

static int big_fn(void *ctx, const void *in, void *out)
{
    (void)ctx;
    const unsigned char *a = in;
    unsigned char *b = out;
    for (size_t i = 0; i < BIG; i++)
        if (a[i] != (unsigned char)(a[0] + i))
            T_FAIL("value %d corrupt at %zu", a[0], i);
    weft_yield();
    if (a[0] % 4 == 1)
        return WEFT_SKIP;
    memcpy(b, a, BIG);
    return 0;
}

static int big_root(void *arg)
{
    (void)arg;
    const int n = 40;
    weft_chan *in = mkchan(BIG, (size_t)n), *out = mkchan(BIG, (size_t)n);
    unsigned char *buf = malloc(BIG);
    for (int v = 0; v < n; v++) {
        for (size_t i = 0; i < BIG; i++)
            buf[i] = (unsigned char)(v + i);
        ASSERT_EQ(weft_chan_try_send(in, buf), 0);
    }
    ASSERT_EQ(weft_chan_close(in), 0);
    weft_stage st[2] = {
        {.fn = big_fn, .out_size = BIG, .workers = 3, .ordered = 1},
        {.fn = big_fn, .out_size = BIG, .workers = 2, .capacity = 1},
    };
    ASSERT_EQ(weft_pipeline(in, out, st, 2, WEFT_NEVER), 0);
    int k = 0;
    while (weft_chan_try_recv(out, buf) == 0) {
        ASSERT(buf[0] % 4 != 1);
        k++;
    }
    ASSERT_EQ(k, n - n / 4);
    free(buf);
    ASSERT_EQ(weft_chan_unref(in), 0);
    ASSERT_EQ(weft_chan_unref(out), 0);
    return 0;
}

TEST(pipeline_largest_values)
{
    ASSERT_EQ(t_run_virtual(1, big_root, NULL), 0);
    ASSERT_EQ(t_run_mono(3, big_root, NULL), 0);
}

/* ---- the end of input travels to the end of output ---- */

static int drain_root(void *arg)
{
    (void)arg;
    struct sctx a = sctx_of(1, 0), b = sctx_of(10, 0);
    a.sleep = SEC / 2;
    b.sleep = SEC / 4;
    struct run r = {.n = 2,
                    .items = 10,
                    .gap = SEC,
                    .in_cap = 0,
                    .out_cap = 0,
                    .deadline = WEFT_NEVER};
    r.st[0] = stage_of(&a, 1, 0, 0);
    r.st[1] = stage_of(&b, 2, 1, 0);
    ASSERT_EQ(run_root(&r), 0);
    /* Value v is sent at v+1 s and leaves at v+1.75 s; `in` is closed at
     * 10 s; out is closed right behind the last value. */
    ASSERT_EQ(r.prod.rc, 0);
    ASSERT_EQ(r.prod.at, 10 * SEC);
    ASSERT_EQ(r.cons.n, 10);
    for (int v = 0; v < 10; v++) {
        ASSERT_EQ(r.cons.vals[v], 10 * v);
        ASSERT_EQ(r.cons.times[v], (v + 1) * SEC + 3 * SEC / 4);
    }
    ASSERT_EQ(r.cons.rc, -EPIPE);
    ASSERT_EQ(r.cons.at, 10 * SEC + 3 * SEC / 4);
    ASSERT_EQ(r.rc, 0);
    ASSERT_EQ(r.at, 10 * SEC + 3 * SEC / 4);
    run_free(&r);

    /* No value at all: the close alone goes through. */
    struct run e = {.n = 2, .items = 0, .deadline = WEFT_NEVER};
    e.st[0] = stage_of(&a, 3, 1, 0);
    e.st[1] = stage_of(&b, 2, 0, 5);
    weft_time t0 = weft_now();
    ASSERT_EQ(run_root(&e), 0);
    ASSERT_EQ(e.rc, 0);
    ASSERT_EQ(e.cons.n, 0);
    ASSERT_EQ(e.cons.rc, -EPIPE);
    ASSERT_EQ(e.at, t0);
    run_free(&e);
    return 0;
}

TEST(pipeline_close_of_in_closes_out_after_drain)
{
    ASSERT_EQ(t_run_virtual(1, drain_root, NULL), 0);
    ASSERT_EQ(t_run_virtual(4, drain_root, NULL), 0);
}

/* ---- failures ---- */

/* After weft_pipeline has returned, no stage call is running, and none
 * starts later. */
struct settle {
    struct run r;
    struct sctx *cs[8];
    int ncs;
};

static int settle_task(void *arg)
{
    struct settle *s = arg;
    struct run *r = &s->r;
    r->rc = weft_pipeline(r->in, r->out, r->st, r->n, r->deadline);
    r->at = weft_now();
    long calls = 0;
    for (int i = 0; i < s->ncs; i++) {
        ASSERT_EQ(atomic_load(&s->cs[i]->inflight), 0);
        calls += atomic_load(&s->cs[i]->calls);
    }
    /* Outside the (maybe cancelled) scope's reach: a shield. */
    weft_scope *sh = NULL;
    weft_scope_opts o = {.shield = 1};
    ASSERT_EQ(weft_scope_open(&sh, &o), 0);
    ASSERT_EQ(weft_sleep_for(10 * SEC), 0);
    ASSERT_EQ(weft_scope_join(sh), 0);
    ASSERT_EQ(weft_scope_free(sh), 0);
    for (int i = 0; i < s->ncs; i++)
        calls -= atomic_load(&s->cs[i]->calls);
    ASSERT_EQ(calls, 0);
    ASSERT_EQ(weft_chan_unref(r->in), 0);
    ASSERT_EQ(weft_chan_unref(r->out), 0);
    return 0;
}

/* run_root, with settle_task as the pipeline's task. */
static int settle_root(struct settle *s)
{
    struct run *r = &s->r;
    r->in = mkchan(sizeof(int64_t), r->in_cap);
    r->out = mkchan(sizeof(int64_t), r->out_cap);
    r->prod = (struct producer){
        .c = weft_chan_ref(r->in), .n = r->items, .gap = r->gap};
    long cap = 100000;
    r->cons = (struct consumer){
        .c = weft_chan_ref(r->out), .cap = cap, .stop_after = r->stop_after};
    r->cons.vals = malloc((size_t)cap * sizeof(int64_t));
    r->cons.times = malloc((size_t)cap * sizeof(weft_time));
    return ends_and_pipeline(r, settle_task, s);
}

/* The consumer's values are the stages' images of 0, 1, 2, ...: all of
 * them in order if `prefix`, else some of them, each once. */
static void check_outputs(struct run *r, struct sctx **cs, int n, bool prefix,
                          long at_least)
{
    const struct sctx *ccs[8];
    for (int i = 0; i < n; i++)
        ccs[i] = cs[i];
    long k = 0;
    ASSERT(r->cons.n >= at_least);
    if (prefix) {
        for (int64_t x = 0; k < r->cons.n; x++) {
            int64_t y = x;
            if (apply(ccs, n, &y)) {
                ASSERT_EQ(r->cons.vals[k], y);
                k++;
            }
        }
        return;
    }
    for (long i = 0; i < r->cons.n; i++) {
        bool found = false;
        for (int64_t x = 0; x < 100000 && !found; x++) {
            int64_t y = x;
            found = apply(ccs, n, &y) && y == r->cons.vals[i];
        }
        ASSERT(found);
        for (long j = 0; j < i; j++)
            ASSERT(r->cons.vals[j] != r->cons.vals[i]);
    }
}

struct fail_case {
    int stage;   /* which stage fails */
    int workers; /* workers of every stage */
    int ordered;
    int64_t when;  /* the failure's instant */
    long at_least; /* values the consumer surely got */
};

static int fail_root(void *arg)
{
    struct fail_case *f = arg;
    static struct settle s;
    memset(&s, 0, sizeof s);
    static struct sctx a, b;
    a = sctx_of(1, 1);
    b = sctx_of(3, 0);
    a.sleep = SEC;
    (f->stage == 0 ? &a : &b)->fail_at = f->stage == 0 ? 5 : 6;
    s.cs[0] = &a;
    s.cs[1] = &b;
    s.ncs = 2;
    s.r = (struct run){.n = 2, .items = -1, .deadline = WEFT_NEVER};
    s.r.st[0] = stage_of(&a, f->workers, f->ordered, 0);
    s.r.st[1] = stage_of(&b, f->workers, f->ordered, 0);
    ASSERT_EQ(settle_root(&s), 0);
    ASSERT_EQ(s.r.rc, -EIO);
    ASSERT_EQ(s.r.at, f->when);
    /* Both ends were closed at the same instant. */
    ASSERT_EQ(s.r.prod.rc, -EPIPE);
    ASSERT_EQ(s.r.prod.at, f->when);
    ASSERT_EQ(s.r.cons.rc, -EPIPE);
    ASSERT_EQ(s.r.cons.at, f->when);
    check_outputs(&s.r, s.cs, 2, f->ordered || f->workers == 1, f->at_least);
    run_free(&s.r);
    return 0;
}

TEST(pipeline_failing_stage_cancels_everything)
{
    /* Stage 0 fails on 5 (after its 1 s): one worker at 6 s; four workers
     * (0-3 in the first second, 4-7 in the next) at 2 s. Stage 1 fails on
     * stage 0's image of 5, i.e. 6, as soon as it arrives. */
    struct fail_case cases[] = {
        {0, 1, 0, 6 * SEC, 5}, {0, 4, 0, 2 * SEC, 4}, {0, 4, 1, 2 * SEC, 4},
        {1, 1, 0, 6 * SEC, 5}, {1, 4, 0, 2 * SEC, 4}, {1, 4, 1, 2 * SEC, 4},
    };
    for (int i = 0; i < (int)(sizeof cases / sizeof *cases); i++) {
        ASSERT_EQ(t_run_virtual(1, fail_root, &cases[i]), 0);
        ASSERT_EQ(t_run_virtual(4, fail_root, &cases[i]), 0);
    }
}

/* ---- deadline and outside cancel ---- */

struct stop_case {
    int workers;
    int ordered;
    int cancel; /* 0: the deadline, 1: a cancel of the caller's scope */
};

static int stop_root(void *arg)
{
    struct stop_case *c = arg;
    static struct settle s;
    static struct sctx a, b;
    memset(&s, 0, sizeof s);
    a = sctx_of(1, 0);
    b = sctx_of(2, 0);
    a.sleep = SEC;
    s.cs[0] = &a;
    s.cs[1] = &b;
    s.ncs = 2;
    const int64_t when = 5 * SEC + SEC / 2;
    s.r = (struct run){.n = 2,
                       .items = -1,
                       .in_cap = 3,
                       .out_cap = 0,
                       .deadline = c->cancel ? WEFT_NEVER : when,
                       .cancel_at = c->cancel ? when : 0};
    s.r.st[0] = stage_of(&a, c->workers, c->ordered, 2);
    s.r.st[1] = stage_of(&b, 2, c->ordered, 0);
    ASSERT_EQ(settle_root(&s), 0);
    ASSERT_EQ(s.r.rc, c->cancel ? -ECANCELED : -ETIMEDOUT);
    ASSERT_EQ(s.r.at, when);
    ASSERT_EQ(s.r.prod.rc, -EPIPE);
    ASSERT_EQ(s.r.prod.at, when);
    ASSERT_EQ(s.r.cons.rc, -EPIPE);
    ASSERT_EQ(s.r.cons.at, when);
    /* Values done by 5 s went out: 5 per worker. */
    ASSERT_EQ(s.r.cons.n, 5 * c->workers);
    check_outputs(&s.r, s.cs, 2, c->ordered || c->workers == 1, 5 * c->workers);
    run_free(&s.r);
    return 0;
}

TEST(pipeline_deadline_at_exact_instant)
{
    struct stop_case cases[] = {{1, 0, 0}, {3, 0, 0}, {3, 1, 0}};
    for (int i = 0; i < 3; i++) {
        ASSERT_EQ(t_run_virtual(1, stop_root, &cases[i]), 0);
        ASSERT_EQ(t_run_virtual(4, stop_root, &cases[i]), 0);
    }
}

TEST(pipeline_caller_cancel_is_ecanceled)
{
    struct stop_case cases[] = {{1, 0, 1}, {3, 0, 1}, {3, 1, 1}};
    for (int i = 0; i < 3; i++) {
        ASSERT_EQ(t_run_virtual(1, stop_root, &cases[i]), 0);
        ASSERT_EQ(t_run_virtual(4, stop_root, &cases[i]), 0);
    }
}

/* A pipeline called in a scope already cancelled, or with a deadline
 * already past, starts nothing and closes both ends. */
static int stopped_root(void *arg)
{
    (void)arg;
    struct sctx a = sctx_of(1, 0);
    weft_stage st = stage_of(&a, 2, 1, 0);
    for (int k = 0; k < 2; k++) {
        weft_chan *in = mkchan(sizeof(int64_t), 1);
        weft_chan *out = mkchan(sizeof(int64_t), 1);
        int64_t v = 1;
        ASSERT_EQ(weft_chan_try_send(in, &v), 0);
        if (k == 0) {
            ASSERT_EQ(weft_pipeline(in, out, &st, 1, weft_now()), -ETIMEDOUT);
        } else {
            weft_scope *s = scope_open();
            ASSERT_EQ(weft_scope_cancel(s), 0);
            ASSERT_EQ(weft_pipeline(in, out, &st, 1, WEFT_NEVER), -ECANCELED);
            ASSERT_EQ(weft_scope_join(s), -ECANCELED);
            ASSERT_EQ(weft_scope_free(s), 0);
        }
        ASSERT_EQ(weft_chan_try_send(in, &v), -EPIPE);
        ASSERT_EQ(weft_chan_try_send(out, &v), -EPIPE);
        ASSERT_EQ(atomic_load(&a.calls), 0);
        ASSERT_EQ(weft_chan_unref(in), 0);
        ASSERT_EQ(weft_chan_unref(out), 0);
    }
    return 0;
}

TEST(pipeline_cancelled_before_it_starts)
{
    ASSERT_EQ(t_run_virtual(1, stopped_root, NULL), 0);
}

/* ---- the consumer goes away ---- */

static int consumer_closes_root(void *arg)
{
    int ordered = *(int *)arg;
    struct sctx a = sctx_of(1, 0);
    struct run r = {.n = 1,
                    .items = -1,
                    .in_cap = 4,
                    .out_cap = 2,
                    .stop_after = 10,
                    .deadline = WEFT_NEVER};
    r.st[0] = stage_of(&a, 3, ordered, 0);
    ASSERT_EQ(run_root(&r), 0);
    /* The last stage's send found out closed: -EPIPE, and the producer
     * is told with its own -EPIPE. */
    ASSERT_EQ(r.rc, -EPIPE);
    ASSERT_EQ(r.prod.rc, -EPIPE);
    ASSERT_EQ(r.cons.n, 10);
    if (ordered)
        for (int i = 0; i < 10; i++)
            ASSERT_EQ(r.cons.vals[i], i);
    run_free(&r);
    return 0;
}

TEST(pipeline_consumer_closing_out_stops_it)
{
    int no = 0, yes = 1;
    ASSERT_EQ(t_run_virtual(1, consumer_closes_root, &no), 0);
    ASSERT_EQ(t_run_virtual(1, consumer_closes_root, &yes), 0);
    ASSERT_EQ(t_run_mono(4, consumer_closes_root, &yes), 0);
}

/* ---- references: the pipeline holds its own ---- */

static int refs_root(void *arg)
{
    (void)arg;
    struct sctx a = sctx_of(2, 0);
    struct run r = {.n = 1, .items = 50, .gap = MS, .deadline = WEFT_NEVER};
    r.st[0] = stage_of(&a, 2, 1, 0);
    r.in = mkchan(sizeof(int64_t), 0);
    r.out = mkchan(sizeof(int64_t), 0);
    /* The producer and the consumer take the only references: each drops
     * it when done, while the pipeline may still use the channel. */
    r.prod = (struct producer){.c = r.in, .n = r.items, .gap = r.gap};
    r.cons = (struct consumer){.c = r.out, .cap = 100};
    r.cons.vals = malloc(100 * sizeof(int64_t));
    weft_chan *in = r.in, *out = r.out;
    weft_scope *s = scope_open();
    ASSERT(weft_spawn(s, produce, &r.prod) >= 0);
    ASSERT(weft_spawn(s, consume, &r.cons) >= 0);
    weft_stage st = r.st[0];
    ASSERT_EQ(weft_pipeline(in, out, &st, 1, WEFT_NEVER), 0);
    scope_end(s);
    ASSERT_EQ(r.cons.n, 50);
    for (int i = 0; i < 50; i++)
        ASSERT_EQ(r.cons.vals[i], 2 * i);
    free(r.cons.vals);
    return 0;
}

TEST(pipeline_holds_its_own_references)
{
    ASSERT_EQ(t_run_virtual(1, refs_root, NULL), 0);
}

/* ---- arguments: -EINVAL before anything is touched ---- */

static int bad_stage(void *ctx, const void *in, void *out)
{
    (void)ctx;
    (void)in;
    (void)out;
    T_FAIL("called");
}

static void untouched(weft_chan *in, weft_chan *out)
{
    int64_t v = 42, w = 0;
    ASSERT_EQ(weft_chan_try_send(in, &v), 0); /* not closed */
    ASSERT_EQ(weft_chan_try_recv(in, &w), 0);
    ASSERT_EQ(w, 42);
    ASSERT_EQ(weft_chan_try_send(out, &v), 0);
    ASSERT_EQ(weft_chan_try_recv(out, &w), 0);
}

static int args_root(void *arg)
{
    (void)arg;
    weft_chan *in = mkchan(sizeof(int64_t), 1);
    weft_chan *out = mkchan(sizeof(int64_t), 1);
    weft_chan *out4 = mkchan(4, 1);
    weft_stage ok = {.fn = bad_stage, .out_size = sizeof(int64_t)};
    weft_stage st[65];
    for (int i = 0; i < 65; i++)
        st[i] = ok;
    ASSERT_EQ(weft_pipeline(NULL, out, st, 1, WEFT_NEVER), -EINVAL);
    ASSERT_EQ(weft_pipeline(in, NULL, st, 1, WEFT_NEVER), -EINVAL);
    ASSERT_EQ(weft_pipeline(in, out, NULL, 1, WEFT_NEVER), -EINVAL);
    ASSERT_EQ(weft_pipeline(in, out, st, 0, WEFT_NEVER), -EINVAL);
    ASSERT_EQ(weft_pipeline(in, out, st, -1, WEFT_NEVER), -EINVAL);
    ASSERT_EQ(weft_pipeline(in, out, st, 65, WEFT_NEVER), -EINVAL);
    ASSERT_EQ(weft_pipeline(in, out, st, 2, -1), -EINVAL);
    /* The last stage's size against out's. */
    ASSERT_EQ(weft_pipeline(in, out4, st, 2, WEFT_NEVER), -EINVAL);
    st[1].out_size = 4;
    ASSERT_EQ(weft_pipeline(in, out, st, 2, WEFT_NEVER), -EINVAL);
    st[1] = ok;
    /* A bad stage anywhere. */
    for (int k = 0; k < 3; k++) {
        weft_stage bad[3][3] = {{ok, ok, ok}, {ok, ok, ok}, {ok, ok, ok}};
        bad[0][k].fn = NULL;
        bad[1][k].out_size = k == 2 ? 0 : 65537;
        bad[2][k].workers = -1;
        for (int b = 0; b < 3; b++)
            ASSERT_EQ(weft_pipeline(in, out, bad[b], 3, WEFT_NEVER), -EINVAL);
    }
    /* An internal channel of impossible capacity: refused by the
     * channel, still before anything started. */
    st[0].capacity = SIZE_MAX / 2;
    ASSERT_EQ(weft_pipeline(in, out, st, 2, WEFT_NEVER), -EINVAL);
    st[0].capacity = 0;
    /* 64 stages is the most. */
    ASSERT_EQ(weft_now(), 0);
    untouched(in, out);
    int64_t v = 9;
    ASSERT_EQ(weft_chan_try_send(out4, &v), 0);
    ASSERT_EQ(weft_chan_unref(in), 0);
    ASSERT_EQ(weft_chan_unref(out), 0);
    ASSERT_EQ(weft_chan_unref(out4), 0);
    return 0;
}

TEST(pipeline_invalid_arguments_touch_nothing)
{
    ASSERT_EQ(t_run_virtual(1, args_root, NULL), 0);
    weft_chan *in = mkchan(sizeof(int64_t), 1), *out = mkchan(8, 1);
    weft_stage ok = {.fn = bad_stage, .out_size = sizeof(int64_t)};
    ASSERT_EQ(weft_pipeline(in, out, &ok, 1, WEFT_NEVER), -EPERM);
    untouched(in, out);
    ASSERT_EQ(weft_chan_unref(in), 0);
    ASSERT_EQ(weft_chan_unref(out), 0);
}

/* 64 stages, each adding one, ordered and not in turns. */
static int add_one(void *ctx, const void *in, void *out)
{
    (void)ctx;
    int64_t x;
    memcpy(&x, in, sizeof x);
    x++;
    memcpy(out, &x, sizeof x);
    return 0;
}

static int deep_root(void *arg)
{
    (void)arg;
    const int n = 500;
    weft_chan *in = mkchan(sizeof(int64_t), (size_t)n);
    weft_chan *out = mkchan(sizeof(int64_t), (size_t)n);
    for (int64_t x = 0; x < n; x++)
        ASSERT_EQ(weft_chan_try_send(in, &x), 0);
    ASSERT_EQ(weft_chan_close(in), 0);
    weft_stage st[64];
    for (int k = 0; k < 64; k++)
        st[k] = (weft_stage){.fn = add_one,
                             .out_size = sizeof(int64_t),
                             .workers = k % 3 + 1,
                             .ordered = k % 2 == 0,
                             .capacity = (size_t)(k % 4)};
    ASSERT_EQ(weft_pipeline(in, out, st, 64, WEFT_NEVER), 0);
    char seen[500] = {0};
    int64_t v;
    int k = 0;
    while (weft_chan_try_recv(out, &v) == 0) {
        ASSERT(v >= 64 && v < n + 64 && !seen[v - 64]++);
        k++;
    }
    ASSERT_EQ(k, n);
    ASSERT_EQ(weft_chan_unref(in), 0);
    ASSERT_EQ(weft_chan_unref(out), 0);
    return 0;
}

TEST(pipeline_64_stages)
{
    ASSERT_EQ(t_run_virtual(1, deep_root, NULL), 0);
    ASSERT_EQ(t_run_mono(4, deep_root, NULL), 0);
}

/* ---- cross-worker stress (TSan) ---- */

static int stress_root(void *arg)
{
    int fail = *(int *)arg;
    static struct sctx a, b, c;
    a = sctx_of(1, 3);
    b = sctx_of(5, 0);
    c = sctx_of(1, -1);
    b.skip_mod = 4;
    b.skip_rem = 2;
    long items = T_SCALE(100000);
    if (fail)
        b.fail_at = items / 2 + 3; /* stage 0's image of items / 2 */
    struct sctx *cs[3] = {&a, &b, &c};
    struct run r = {.n = 3,
                    .items = fail ? -1 : items,
                    .in_cap = 16,
                    .out_cap = 1,
                    .deadline = WEFT_NEVER};
    r.st[0] = stage_of(&a, 4, 1, 8);
    r.st[1] = stage_of(&b, 3, 1, 0);
    r.st[2] = stage_of(&c, 2, 1, 1);
    ASSERT_EQ(run_root(&r), 0);
    if (fail) {
        ASSERT_EQ(r.rc, -EIO);
        ASSERT_EQ(r.prod.rc, -EPIPE);
        ASSERT_EQ(r.cons.rc, -EPIPE);
        ASSERT(r.cons.n < items);
    } else {
        ASSERT_EQ(r.rc, 0);
        ASSERT_EQ(r.prod.rc, 0);
        ASSERT_EQ(r.cons.rc, -EPIPE);
        ASSERT_EQ(r.cons.n, items - items / 4);
    }
    check_outputs(&r, cs, 3, true, 0); /* every stage ordered */
    run_free(&r);
    return 0;
}

TEST(pipeline_cross_worker_stress)
{
    int no = 0, yes = 1;
    ASSERT_EQ(t_run_mono(4, stress_root, &no), 0);
    ASSERT_EQ(t_run_mono(4, stress_root, &yes), 0);
}
