/* SPDX-License-Identifier: MIT */
/*
 * Futures and combinators: settle once, await (deadline, cancel, many
 * awaiters, a plain pthread settling), cancellers, all / all_settled / any
 * / race, weft_future_spawn, weft_gather_tasks under every policy, refcounts,
 * argument errors and a cross-worker stress. Every test that measures time
 * runs on the virtual clock, where instants are exact.
 */
#include "future/future.h" /* weft__future_nwaiters */
#include "t.h"
#include "wait/many.h"
#include "wait/seen.h"
#include "wait/wake.h"
#include "weft.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

/* future.c's test hook: the waiter nodes on f's list now. */

static weft_future *mkfut(size_t size)
{
    weft_future *f = NULL;
    ASSERT_EQ(weft_future_new(&f, size), 0);
    ASSERT(f != NULL);
    return f;
}

static weft_scope *open_policy(weft_policy policy, weft_time deadline)
{
    weft_scope *s = NULL;
    weft_scope_opts o = {.policy = policy, .deadline = deadline};
    ASSERT_EQ(weft_scope_open(&s, &o), 0);
    return s;
}

struct big {
    int64_t a;
    char s[20];
    double d;
};

/* A canceller that counts its calls and, if asked to, rejects. */
struct cc {
    atomic_int calls;
    weft_future *f;
    int reject;
};

static void cc_fn(void *arg)
{
    struct cc *c = arg;
    atomic_fetch_add(&c->calls, 1);
    if (c->reject)
        ASSERT_EQ(weft_future_reject(c->f, -ECANCELED), 0);
}

/* ======================= settling, outside a runtime ==================== */

TEST(settle_once_second_is_ealready)
{
    struct big v = {42, "hello", 2.5}, v2 = {7, "other", 1.0}, out;
    weft_future *f = mkfut(sizeof v);
    memset(&out, 0x5a, sizeof out);
    ASSERT_EQ(weft_future_try_await(f, &out), -EINPROGRESS);
    ASSERT_EQ(weft_future_try_await(f, NULL), -EINPROGRESS);
    ASSERT_EQ(weft_future_resolve(f, &v), 0);
    ASSERT_EQ(weft_future_resolve(f, &v2), -EALREADY);
    ASSERT_EQ(weft_future_reject(f, -EIO), -EALREADY);
    ASSERT_EQ(weft_future_cancel(f), -EALREADY);
    struct cc c = {0};
    ASSERT_EQ(weft_future_set_canceller(f, cc_fn, &c), -EALREADY);
    ASSERT_EQ(weft_future_try_await(f, &out), 0);
    ASSERT(memcmp(&out, &v, sizeof v) == 0);
    ASSERT_EQ(weft_future_try_await(f, NULL), 0);
    ASSERT_EQ(weft_future_unref(f), 0);
    ASSERT_EQ(atomic_load(&c.calls), 0);

    /* Rejected first: the error stands, out is not touched. */
    f = mkfut(sizeof(int));
    int x = 17, o = -1;
    ASSERT_EQ(weft_future_reject(f, -EPIPE), 0);
    ASSERT_EQ(weft_future_resolve(f, &x), -EALREADY);
    ASSERT_EQ(weft_future_reject(f, -EIO), -EALREADY);
    ASSERT_EQ(weft_future_cancel(f), -EALREADY);
    ASSERT_EQ(weft_future_try_await(f, &o), -EPIPE);
    ASSERT_EQ(o, -1);
    ASSERT_EQ(weft_future_unref(f), 0);

    /* value_size 0: success or an error only. */
    f = mkfut(0);
    ASSERT_EQ(weft_future_resolve(f, NULL), 0);
    ASSERT_EQ(weft_future_resolve(f, NULL), -EALREADY);
    ASSERT_EQ(weft_future_try_await(f, NULL), 0);
    ASSERT_EQ(weft_future_try_await(f, &o), 0);
    ASSERT_EQ(o, -1);
    ASSERT_EQ(weft_future_unref(f), 0);

    /* The largest value, copied exactly. */
    unsigned char *in = malloc(65536), *got = calloc(1, 65536);
    ASSERT(in && got);
    for (int i = 0; i < 65536; i++)
        in[i] = (unsigned char)(i * 31 + 7);
    f = mkfut(65536);
    ASSERT_EQ(weft_future_resolve(f, in), 0);
    in[5] ^= 0xff; /* copied in, not referenced */
    ASSERT_EQ(weft_future_try_await(f, got), 0);
    in[5] ^= 0xff;
    ASSERT(memcmp(in, got, 65536) == 0);
    ASSERT_EQ(weft_future_unref(f), 0);
    free(in);
    free(got);
}

TEST(refcount_last_unref_frees)
{
    weft_future *f = mkfut(sizeof(int));
    ASSERT(weft_future_ref(f) == f);
    ASSERT(weft_future_ref(f) == f);
    ASSERT_EQ(weft_future_unref(f), 0);
    ASSERT_EQ(weft_future_unref(f), 0);
    /* One reference left: still alive (ASan would see a use after free). */
    int v = 3, o = 0;
    ASSERT_EQ(weft_future_resolve(f, &v), 0);
    ASSERT_EQ(weft_future_try_await(f, &o), 0);
    ASSERT_EQ(o, 3);
    ASSERT_EQ(weft_future_unref(f), 0);
#if !defined(NDEBUG) && !defined(WEFT_ASAN)
    /* Debug builds keep the husk: a freed future is -EINVAL. */
    ASSERT_EQ(weft_future_unref(f), -EINVAL);
    ASSERT_EQ(weft_future_try_await(f, &o), -EINVAL);
    ASSERT_EQ(weft_future_resolve(f, &v), -EINVAL);
#endif
    /* Freed unsettled, with a canceller, and large: LSan sees any leak. */
    struct cc c = {0};
    f = mkfut(65536);
    ASSERT_EQ(weft_future_set_canceller(f, cc_fn, &c), 0);
    ASSERT_EQ(weft_future_unref(f), 0);
    ASSERT_EQ(atomic_load(&c.calls), 0);
    f = mkfut(0);
    ASSERT_EQ(weft_future_unref(f), 0);
    ASSERT(weft_future_ref(NULL) == NULL);
    ASSERT_EQ(weft_future_unref(NULL), -EINVAL);
}

/* ============================ argument errors =========================== */

static int ret_arg(void *arg)
{
    return (int)(intptr_t)arg;
}

static void check_arg_errors(int in_task)
{
    weft_future *f = NULL;
    int v = 1;
    ASSERT_EQ(weft_future_new(NULL, 4), -EINVAL);
    ASSERT_EQ(weft_future_new(&f, 65537), -EINVAL);
    ASSERT(f == NULL);
    ASSERT_EQ(weft_future_new(&f, (size_t)-1), -EINVAL);
    f = mkfut(sizeof(int));
    ASSERT_EQ(weft_future_resolve(NULL, &v), -EINVAL);
    ASSERT_EQ(weft_future_resolve(f, NULL), -EINVAL); /* value_size 4 */
    ASSERT_EQ(weft_future_reject(NULL, -EIO), -EINVAL);
    ASSERT_EQ(weft_future_reject(f, 0), -EINVAL);
    ASSERT_EQ(weft_future_reject(f, 5), -EINVAL);
    ASSERT_EQ(weft_future_set_canceller(NULL, cc_fn, NULL), -EINVAL);
    ASSERT_EQ(weft_future_set_canceller(f, NULL, NULL), -EINVAL);
    ASSERT_EQ(weft_future_cancel(NULL), -EINVAL);
    ASSERT_EQ(weft_future_try_await(NULL, &v), -EINVAL);
    ASSERT_EQ(weft_future_await(NULL, &v, WEFT_NEVER), -EINVAL);
    ASSERT_EQ(weft_future_try_await(f, &v), -EINPROGRESS); /* nothing changed */

    weft_future *fs[1025];
    for (int i = 0; i < 1025; i++)
        fs[i] = f;
    weft_future *withnull[2] = {f, NULL};
    int st[2];
    ASSERT_EQ(weft_future_all(NULL, 1, WEFT_NEVER), -EINVAL);
    ASSERT_EQ(weft_future_all(fs, 0, WEFT_NEVER), -EINVAL);
    ASSERT_EQ(weft_future_all(fs, -1, WEFT_NEVER), -EINVAL);
    ASSERT_EQ(weft_future_all(fs, 1025, WEFT_NEVER), -EINVAL);
    ASSERT_EQ(weft_future_all(withnull, 2, WEFT_NEVER), -EINVAL);
    ASSERT_EQ(weft_future_all_settled(NULL, 1, st, WEFT_NEVER), -EINVAL);
    ASSERT_EQ(weft_future_all_settled(fs, 0, st, WEFT_NEVER), -EINVAL);
    ASSERT_EQ(weft_future_all_settled(fs, 1025, NULL, WEFT_NEVER), -EINVAL);
    ASSERT_EQ(weft_future_all_settled(withnull, 2, st, WEFT_NEVER), -EINVAL);
    ASSERT_EQ(weft_future_any(NULL, 1, WEFT_NEVER), -EINVAL);
    ASSERT_EQ(weft_future_any(fs, 0, WEFT_NEVER), -EINVAL);
    ASSERT_EQ(weft_future_any(fs, 1025, WEFT_NEVER), -EINVAL);
    ASSERT_EQ(weft_future_any(withnull, 2, WEFT_NEVER), -EINVAL);
    ASSERT_EQ(weft_future_race(NULL, 1, WEFT_NEVER), -EINVAL);
    ASSERT_EQ(weft_future_race(fs, 0, WEFT_NEVER), -EINVAL);
    ASSERT_EQ(weft_future_race(fs, 1025, WEFT_NEVER), -EINVAL);
    ASSERT_EQ(weft_future_race(withnull, 2, WEFT_NEVER), -EINVAL);

    weft_future *out = (weft_future *)&v;
    ASSERT_EQ(weft_future_spawn(NULL, NULL, NULL, &out), -EINVAL);
    ASSERT_EQ(weft_future_spawn(NULL, ret_arg, NULL, NULL), -EINVAL);

    weft_fn fns[2] = {ret_arg, NULL};
    ASSERT_EQ(
        weft_gather_tasks(WEFT_COLLECT, 0, fns, NULL, NULL, NULL, WEFT_NEVER),
        -EINVAL);
    ASSERT_EQ(weft_gather_tasks(WEFT_COLLECT, 65537, fns, NULL, NULL, NULL,
                                WEFT_NEVER),
              -EINVAL);
    ASSERT_EQ(
        weft_gather_tasks(WEFT_COLLECT, 1, NULL, NULL, NULL, NULL, WEFT_NEVER),
        -EINVAL);
    ASSERT_EQ(
        weft_gather_tasks(WEFT_COLLECT, 2, fns, NULL, NULL, NULL, WEFT_NEVER),
        -EINVAL);
    ASSERT_EQ(
        weft_gather_tasks((weft_policy)9, 1, fns, NULL, NULL, NULL, WEFT_NEVER),
        -EINVAL);
    ASSERT_EQ(weft_gather_tasks(WEFT_COLLECT, 1, fns, NULL, NULL, NULL, -5),
              -EINVAL);

    if (!in_task) {
        /* Blocking calls and spawns need a task. */
        ASSERT_EQ(weft_future_await(f, &v, WEFT_NEVER), -EPERM);
        ASSERT_EQ(weft_future_all(fs, 1, WEFT_NEVER), -EPERM);
        ASSERT_EQ(weft_future_all_settled(fs, 1, st, WEFT_NEVER), -EPERM);
        ASSERT_EQ(weft_future_any(fs, 1, WEFT_NEVER), -EPERM);
        ASSERT_EQ(weft_future_race(fs, 1, WEFT_NEVER), -EPERM);
        ASSERT_EQ(weft_future_spawn(NULL, ret_arg, NULL, &out), -EPERM);
        ASSERT_EQ(weft_gather_tasks(WEFT_COLLECT, 1, fns, NULL, NULL, NULL,
                                    WEFT_NEVER),
                  -EPERM);
    } else {
        /* A deadline argument of 0 is an instant (here long past, or the
         * virtual clock's start): nothing runs, as for weft_map_tasks. */
        int gst[1] = {99};
        ASSERT_EQ(weft_gather_tasks(WEFT_COLLECT, 1, fns, NULL, gst, NULL, 0),
                  -ETIMEDOUT);
        ASSERT_EQ(gst[0], -ECANCELED);
    }
    ASSERT_EQ(weft__future_nwaiters(f), 0);
    ASSERT_EQ(weft_future_unref(f), 0);
}

static int arg_errors_root(void *arg)
{
    (void)arg;
    check_arg_errors(1);
    /* n = 1024 is fine (every one settled: no wait). */
    static weft_future *fs[1024];
    weft_future *f = mkfut(sizeof(int));
    int v = 5;
    ASSERT_EQ(weft_future_resolve(f, &v), 0);
    for (int i = 0; i < 1024; i++)
        fs[i] = f;
    ASSERT_EQ(weft_future_all(fs, 1024, WEFT_NEVER), 0);
    ASSERT_EQ(weft_future_race(fs, 1024, WEFT_NEVER), 0);
    ASSERT_EQ(weft_future_any(fs, 1024, WEFT_NEVER), 0);
    static int st[1024];
    ASSERT_EQ(weft_future_all_settled(fs, 1024, st, WEFT_NEVER), 0);
    for (int i = 0; i < 1024; i++)
        ASSERT_EQ(st[i], 0);
    ASSERT_EQ(weft_future_unref(f), 0);
    return 0;
}

TEST(argument_errors)
{
    check_arg_errors(0);
    ASSERT_EQ(t_run_virtual(1, arg_errors_root, NULL), 0);
}

/* ============================== await ==================================== */

#define MA_N 64
struct ma {
    weft_future *f;
    struct big got;
    int rc;
    weft_time at;
};

static int ma_awaiter(void *arg)
{
    struct ma *m = arg;
    m->rc = weft_future_await(m->f, &m->got, WEFT_NEVER);
    m->at = weft_now();
    return 0;
}

static int many_awaiters_root(void *arg)
{
    (void)arg;
    static struct ma m[MA_N];
    struct big v = {-99, "many", 0.25}, zero, out;
    memset(&zero, 0, sizeof zero);
    weft_future *f = mkfut(sizeof v);
    weft_scope *s = scope_open();
    for (int i = 0; i < MA_N; i++) {
        m[i] = (struct ma){.f = f, .rc = 99};
        spawn(ma_awaiter, &m[i]);
    }
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0);
    /* The clock moved: every awaiter is parked. */
    ASSERT_EQ(weft__future_nwaiters(f), MA_N);
    ASSERT_EQ(weft_future_resolve(f, &v), 0);
    ASSERT_EQ(weft__future_nwaiters(f), 0);
    scope_end(s);
    for (int i = 0; i < MA_N; i++) {
        ASSERT_EQ(m[i].rc, 0);
        ASSERT(memcmp(&m[i].got, &v, sizeof v) == 0);
        ASSERT_EQ(m[i].at, WEFT_SEC);
    }
    /* Late awaiters get it at once, even with a deadline passed. */
    ASSERT_EQ(weft_future_await(f, &out, 0), 0);
    ASSERT(memcmp(&out, &v, sizeof v) == 0);
    ASSERT_EQ(weft_future_await(f, NULL, WEFT_NEVER), 0);
    ASSERT_EQ(weft_now(), WEFT_SEC);
    ASSERT_EQ(weft_future_unref(f), 0);

    /* Rejected: every awaiter gets the error, its buffer untouched. */
    f = mkfut(sizeof v);
    s = scope_open();
    for (int i = 0; i < MA_N; i++) {
        m[i] = (struct ma){.f = f, .rc = 99};
        spawn(ma_awaiter, &m[i]);
    }
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0);
    ASSERT_EQ(weft__future_nwaiters(f), MA_N);
    ASSERT_EQ(weft_future_reject(f, -EPIPE), 0);
    scope_end(s);
    for (int i = 0; i < MA_N; i++) {
        ASSERT_EQ(m[i].rc, -EPIPE);
        ASSERT(memcmp(&m[i].got, &zero, sizeof zero) == 0);
        ASSERT_EQ(m[i].at, 2 * WEFT_SEC);
    }
    ASSERT_EQ(weft_future_unref(f), 0);
    return 0;
}

TEST(many_awaiters_get_the_value)
{
    ASSERT_EQ(t_run_virtual(1, many_awaiters_root, NULL), 0);
    ASSERT_EQ(t_run_virtual(2, many_awaiters_root, NULL), 0);
    ASSERT_EQ(t_run_virtual(4, many_awaiters_root, NULL), 0);
}

/* Settled from a plain pthread while tasks wait: real clock on 2 workers,
 * then the virtual clock on 4 while the root holds its worker in
 * pthread_join (so the clock stands still and the wake time is exact). */
#define PT_N 16
struct pt {
    weft_future *f;
    atomic_int ok;
    weft_time expect_at; /* virtual clock: the wake time */
    int reject;
};

static int pt_task(void *arg)
{
    struct pt *p = arg;
    int64_t v = -1;
    int rc =
        weft_future_await(p->f, &v, p->expect_at ? 100 * WEFT_SEC : WEFT_NEVER);
    int good = p->reject ? rc == -EIO && v == -1 : rc == 0 && v == 1234567;
    if (good && (!p->expect_at || weft_now() == p->expect_at))
        atomic_fetch_add(&p->ok, 1);
    return 0;
}

static void *pt_thread(void *arg)
{
    struct pt *p = arg;
    /* Every awaiter is on the list: settle under their feet. */
    while (weft__future_nwaiters(p->f) < PT_N)
        sched_yield();
    ASSERT(weft_scope_current() == NULL);
    int64_t v = 1234567;
    if (p->reject)
        ASSERT_EQ(weft_future_reject(p->f, -EIO), 0);
    else
        ASSERT_EQ(weft_future_resolve(p->f, &v), 0);
    ASSERT_EQ(weft_future_resolve(p->f, &v), -EALREADY);
    return NULL;
}

static int pt_root(void *arg)
{
    struct pt *p = arg;
    p->f = mkfut(sizeof(int64_t));
    weft_scope *s = scope_open();
    for (int i = 0; i < PT_N; i++)
        spawn(pt_task, p);
    if (p->expect_at)
        ASSERT_EQ(weft_sleep_until(p->expect_at), 0);
    pthread_t th;
    ASSERT_EQ(pthread_create(&th, NULL, pt_thread, p), 0);
    if (p->expect_at) {
        ASSERT_EQ(pthread_join(th, NULL), 0);
        scope_end(s);
    } else {
        scope_end(s);
        ASSERT_EQ(pthread_join(th, NULL), 0);
    }
    ASSERT_EQ(atomic_load(&p->ok), PT_N);
    ASSERT_EQ(weft__future_nwaiters(p->f), 0);
    ASSERT_EQ(weft_future_unref(p->f), 0);
    return 0;
}

TEST(settle_from_plain_pthread)
{
    static struct pt p;
    for (int reject = 0; reject < 2; reject++) {
        memset(&p, 0, sizeof p);
        p.reject = reject;
        ASSERT_EQ(t_run_mono(2, pt_root, &p), 0);
        memset(&p, 0, sizeof p);
        p.reject = reject;
        p.expect_at = WEFT_SEC;
        ASSERT_EQ(t_run_virtual(4, pt_root, &p), 0);
    }
}

/* A future resolved by a task, after 2 s. */
struct later {
    weft_future *f;
    int64_t delay;
    int value;
    int err;
};

static int later_fn(void *arg)
{
    struct later *l = arg;
    ASSERT_EQ(weft_sleep_for(l->delay), 0);
    if (l->err)
        ASSERT_EQ(weft_future_reject(l->f, l->err), 0);
    else
        ASSERT_EQ(weft_future_resolve(l->f, &l->value), 0);
    return 0;
}

static int deadline_root(void *arg)
{
    (void)arg;
    weft_future *f = mkfut(sizeof(int));
    int v = -1;
    ASSERT_EQ(weft_future_await(f, &v, 3 * WEFT_SEC), -ETIMEDOUT);
    ASSERT_EQ(weft_now(), 3 * WEFT_SEC);
    ASSERT_EQ(v, -1);
    ASSERT_EQ(weft__future_nwaiters(f), 0);
    ASSERT_EQ(weft_future_try_await(f, &v), -EINPROGRESS); /* not cancelled */
    /* A deadline now or passed: -ETIMEDOUT without the clock moving. */
    ASSERT_EQ(weft_future_await(f, &v, weft_now()), -ETIMEDOUT);
    ASSERT_EQ(weft_future_await(f, &v, 0), -ETIMEDOUT);
    ASSERT_EQ(weft_future_await(f, &v, WEFT_SEC), -ETIMEDOUT);
    ASSERT_EQ(weft_now(), 3 * WEFT_SEC);
    ASSERT_EQ(weft__future_nwaiters(f), 0);

    /* Resolved 2 s in, before a 5 s deadline: the value at exactly 2 s. */
    struct later l = {f, 2 * WEFT_SEC, 77, 0};
    weft_scope *s = scope_open();
    spawn(later_fn, &l);
    ASSERT_EQ(weft_future_await(f, &v, 8 * WEFT_SEC), 0);
    ASSERT_EQ(v, 77);
    ASSERT_EQ(weft_now(), 5 * WEFT_SEC);
    scope_end(s);
    v = -1;
    ASSERT_EQ(weft_future_await(f, &v, 0), 0); /* settled beats a deadline */
    ASSERT_EQ(v, 77);
    ASSERT_EQ(weft_future_unref(f), 0);

    /* One timeout among several waiters changes nothing for the others. */
    f = mkfut(sizeof(int));
    l = (struct later){f, 4 * WEFT_SEC, 0, -ENOENT};
    s = scope_open();
    spawn(later_fn, &l);
    ASSERT_EQ(weft_future_await(f, &v, 6 * WEFT_SEC), -ETIMEDOUT);
    ASSERT_EQ(weft_now(), 6 * WEFT_SEC);
    ASSERT_EQ(weft_future_await(f, &v, WEFT_NEVER), -ENOENT);
    ASSERT_EQ(weft_now(), 9 * WEFT_SEC);
    scope_end(s);
    ASSERT_EQ(weft_future_unref(f), 0);
    return 0;
}

/* A rejection with -EAGAIN is a result like any other; -EINPROGRESS,
 * which means "not settled yet", cannot be one. */
static int eagain_root(void *arg)
{
    (void)arg;
    weft_future *f = mkfut(sizeof(int)), *g = mkfut(sizeof(int));
    ASSERT_EQ(weft_future_reject(f, -EINPROGRESS), -EINVAL);
    ASSERT_EQ(weft_future_try_await(f, NULL), -EINPROGRESS);
    ASSERT_EQ(weft_future_reject(f, -EAGAIN), 0);
    ASSERT_EQ(weft_future_try_await(f, NULL), -EAGAIN);
    ASSERT_EQ(weft_future_reject(f, -EIO), -EALREADY);
    ASSERT_EQ(weft_future_cancel(f), -EALREADY);
    ASSERT_EQ(weft_future_await(f, NULL, WEFT_NEVER), -EAGAIN);
    weft_future *fs[2] = {f, g};
    int st[2];
    ASSERT_EQ(weft_future_race(fs, 2, WEFT_NEVER), 0);
    ASSERT_EQ(weft_future_try_await(g, NULL), -EINPROGRESS); /* a bare loser */
    ASSERT_EQ(weft_future_all(fs, 1, WEFT_NEVER), -EAGAIN);
    ASSERT_EQ(weft_future_all_settled(fs, 1, st, WEFT_NEVER), 0);
    ASSERT_EQ(st[0], -EAGAIN);
    ASSERT_EQ(weft_future_any(fs, 1, WEFT_NEVER), -EAGAIN);
    ASSERT_EQ(weft_now(), 0);
    ASSERT_EQ(weft_future_unref(f), 0);
    ASSERT_EQ(weft_future_unref(g), 0);

    /* Rejected so while a task waits. */
    f = mkfut(sizeof(int));
    struct later l = {f, 2 * WEFT_SEC, 0, -EAGAIN};
    weft_scope *s = scope_open();
    spawn(later_fn, &l);
    ASSERT_EQ(weft_future_await(f, NULL, WEFT_NEVER), -EAGAIN);
    ASSERT_EQ(weft_now(), 2 * WEFT_SEC);
    scope_end(s);
    ASSERT_EQ(weft_future_unref(f), 0);
    return 0;
}

TEST(rejection_with_eagain_is_a_result)
{
    ASSERT_EQ(t_run_virtual(1, eagain_root, NULL), 0);
}

TEST(await_deadline_exact_in_virtual_time)
{
    ASSERT_EQ(t_run_virtual(1, deadline_root, NULL), 0);
    ASSERT_EQ(t_run_virtual(2, deadline_root, NULL), 0);
}

struct aw {
    weft_future *f;
    weft_time deadline;
    int rc;
    int v;
    weft_time at;
};

static int aw_fn(void *arg)
{
    struct aw *a = arg;
    a->v = -1;
    a->rc = weft_future_await(a->f, &a->v, a->deadline);
    a->at = weft_now();
    return 0;
}

static int await_cancel_root(void *arg)
{
    (void)arg;
    weft_future *f = mkfut(sizeof(int));
    struct aw a = {f, WEFT_NEVER, 99, 0, 0}, b = {f, 10 * WEFT_SEC, 99, 0, 0};
    weft_scope *sb = scope_open();
    spawn(aw_fn, &b);
    weft_scope *sa = scope_open();
    spawn(aw_fn, &a);
    ASSERT_EQ(weft_sleep_for(2 * WEFT_SEC), 0);
    ASSERT_EQ(weft__future_nwaiters(f), 2);
    scope_cancel_end(sa);
    ASSERT_EQ(a.rc, -ECANCELED);
    ASSERT_EQ(a.at, 2 * WEFT_SEC);
    ASSERT_EQ(a.v, -1);
    /* The future is not cancelled, the other waiter still waits. */
    ASSERT_EQ(weft__future_nwaiters(f), 1);
    int v = -1;
    ASSERT_EQ(weft_future_try_await(f, &v), -EINPROGRESS);
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0);
    v = 5;
    ASSERT_EQ(weft_future_resolve(f, &v), 0);
    scope_end(sb);
    ASSERT_EQ(b.rc, 0);
    ASSERT_EQ(b.v, 5);
    ASSERT_EQ(b.at, 3 * WEFT_SEC);
    ASSERT_EQ(weft__future_nwaiters(f), 0);

    /* A cancelled scope: -ECANCELED at once, even for a settled future
     * (a checkpoint), which stays as it was. */
    weft_scope *sc = scope_open();
    ASSERT_EQ(weft_scope_cancel(sc), 0);
    v = -1;
    ASSERT_EQ(weft_future_await(f, &v, WEFT_NEVER), -ECANCELED);
    ASSERT_EQ(v, -1);
    ASSERT_EQ(weft_scope_join(sc), -ECANCELED);
    ASSERT_EQ(weft_scope_free(sc), 0);
    ASSERT_EQ(weft_future_await(f, &v, WEFT_NEVER), 0);
    ASSERT_EQ(v, 5);
    ASSERT_EQ(weft_now(), 3 * WEFT_SEC);
    ASSERT_EQ(weft_future_unref(f), 0);

    /* Cancelled by its scope's deadline: -ECANCELED at exactly that time;
     * the future stays pending and usable. */
    f = mkfut(sizeof(int));
    a = (struct aw){f, WEFT_NEVER, 99, 0, 0};
    weft_scope *sd = open_policy(WEFT_FAIL_FAST, 4 * WEFT_SEC + 500);
    spawn(aw_fn, &a);
    ASSERT_EQ(weft_scope_join(sd), -ETIMEDOUT);
    ASSERT_EQ(weft_scope_free(sd), 0);
    ASSERT_EQ(a.rc, -ECANCELED);
    ASSERT_EQ(a.at, 4 * WEFT_SEC + 500);
    ASSERT_EQ(weft__future_nwaiters(f), 0);
    ASSERT_EQ(weft_future_try_await(f, NULL), -EINPROGRESS);
    ASSERT_EQ(weft_future_reject(f, -EIO), 0);
    ASSERT_EQ(weft_future_await(f, NULL, WEFT_NEVER), -EIO);
    ASSERT_EQ(weft_future_unref(f), 0);
    return 0;
}

TEST(await_cancelled_leaves_future_usable)
{
    ASSERT_EQ(t_run_virtual(1, await_cancel_root, NULL), 0);
    ASSERT_EQ(t_run_virtual(2, await_cancel_root, NULL), 0);
}

/* ============================== cancellers ============================== */

static int cancel_n(void *arg)
{
    weft_future *f = arg;
    for (int i = 0; i < 8; i++) {
        int rc = weft_future_cancel(f);
        ASSERT(rc == 0 || rc == -EALREADY);
        weft_yield();
    }
    return 0;
}

static void *cancel_thread(void *arg)
{
    weft_future *f = arg;
    for (int i = 0; i < 8; i++) {
        int rc = weft_future_cancel(f);
        ASSERT(rc == 0 || rc == -EALREADY);
        sched_yield();
    }
    return NULL;
}

static void *reject_cancel_thread(void *arg)
{
    weft_future *f = arg;
    while (weft__future_nwaiters(f) < 1)
        sched_yield();
    ASSERT_EQ(weft_future_cancel(f), 0); /* no canceller: rejected */
    return NULL;
}

static int canceller_root(void *arg)
{
    /* A canceller that rejects: the awaiter gets -ECANCELED at 1 s. */
    struct cc c = {.reject = 1};
    c.f = mkfut(sizeof(int));
    ASSERT_EQ(weft_future_set_canceller(c.f, cc_fn, &c), 0);
    struct aw a = {c.f, WEFT_NEVER, 99, 0, 0};
    weft_scope *s = scope_open();
    spawn(aw_fn, &a);
    while (weft__future_nwaiters(c.f) < 1)
        weft_yield();
    weft_time t0 = weft_now();
    ASSERT_EQ(weft_future_cancel(c.f), 0);
    ASSERT_EQ(atomic_load(&c.calls), 1);
    scope_end(s);
    ASSERT_EQ(a.rc, -ECANCELED);
    if (arg) /* the virtual clock: at that very instant */
        ASSERT_EQ(a.at, t0);
    ASSERT_EQ(weft_future_cancel(c.f), -EALREADY);
    ASSERT_EQ(atomic_load(&c.calls), 1);
    ASSERT_EQ(weft_future_unref(c.f), 0);

    /* Many cancels at once from tasks on every worker and a plain thread:
     * a canceller that does not settle is still called exactly once. */
    struct cc d = {0};
    d.f = mkfut(0);
    ASSERT_EQ(weft_future_set_canceller(d.f, cc_fn, &d), 0);
    pthread_t th;
    ASSERT_EQ(pthread_create(&th, NULL, cancel_thread, d.f), 0);
    s = scope_open();
    for (int i = 0; i < 16; i++)
        spawn(cancel_n, d.f);
    scope_end(s);
    ASSERT_EQ(pthread_join(th, NULL), 0);
    ASSERT_EQ(atomic_load(&d.calls), 1);
    ASSERT_EQ(weft_future_try_await(d.f, NULL), -EINPROGRESS);
    ASSERT_EQ(weft_future_resolve(d.f, NULL), 0);
    ASSERT_EQ(weft_future_unref(d.f), 0);

    /* No canceller, cancelled from a plain thread while a task awaits. */
    weft_future *f = mkfut(sizeof(int));
    a = (struct aw){f, WEFT_NEVER, 99, 0, 0};
    s = scope_open();
    spawn(aw_fn, &a);
    ASSERT_EQ(pthread_create(&th, NULL, reject_cancel_thread, f), 0);
    scope_end(s);
    ASSERT_EQ(pthread_join(th, NULL), 0);
    ASSERT_EQ(a.rc, -ECANCELED);
    ASSERT_EQ(weft_future_try_await(f, NULL), -ECANCELED);
    ASSERT_EQ(weft_future_unref(f), 0);
    return 0;
}

TEST(canceller_called_exactly_once)
{
    /* Outside a runtime: any thread may cancel. */
    struct cc c = {0};
    c.f = mkfut(sizeof(int));
    ASSERT_EQ(weft_future_set_canceller(c.f, cc_fn, &c), 0);
    ASSERT_EQ(weft_future_set_canceller(c.f, cc_fn, &c), -EBUSY);
    ASSERT_EQ(weft_future_cancel(c.f), 0);
    ASSERT_EQ(atomic_load(&c.calls), 1);
    ASSERT_EQ(weft_future_try_await(c.f, NULL),
              -EINPROGRESS); /* its producer's call */
    ASSERT_EQ(weft_future_cancel(c.f), 0);
    ASSERT_EQ(atomic_load(&c.calls), 1);
    ASSERT_EQ(weft_future_set_canceller(c.f, cc_fn, &c), -EBUSY);
    int v = 8, o = 0;
    ASSERT_EQ(weft_future_resolve(c.f, &v), 0);
    ASSERT_EQ(weft_future_cancel(c.f), -EALREADY);
    ASSERT_EQ(atomic_load(&c.calls), 1);
    ASSERT_EQ(weft_future_try_await(c.f, &o), 0);
    ASSERT_EQ(o, 8);
    ASSERT_EQ(weft_future_unref(c.f), 0);

    /* Without a canceller: rejected -ECANCELED at once. */
    weft_future *f = mkfut(sizeof(int));
    ASSERT_EQ(weft_future_cancel(f), 0);
    ASSERT_EQ(weft_future_try_await(f, &o), -ECANCELED);
    ASSERT_EQ(weft_future_cancel(f), -EALREADY);
    ASSERT_EQ(weft_future_set_canceller(f, cc_fn, &c), -EALREADY);
    ASSERT_EQ(weft_future_unref(f), 0);

    ASSERT_EQ(t_run_virtual(1, canceller_root, (void *)1), 0);
    ASSERT_EQ(t_run_virtual(4, canceller_root, (void *)1), 0);
    ASSERT_EQ(t_run_mono(4, canceller_root, NULL), 0);
}

/* ============================ combinators =============================== */

/* A producer settles its future at a known instant (at == 0: never), and
 * its canceller counts calls and rejects with -ECANCELED. */
struct prod {
    weft_future *f;
    int64_t at;
    int value; /* resolved with this, or */
    int err;   /* rejected with this */
    atomic_int cancels;
};

static void prod_cancel(void *arg)
{
    struct prod *p = arg;
    atomic_fetch_add(&p->cancels, 1);
    ASSERT_EQ(weft_future_reject(p->f, -ECANCELED), 0);
}

static int prod_task(void *arg)
{
    struct prod *p = arg;
    if (!p->at || weft_sleep_until(p->at) != 0)
        return 0;
    if (p->err)
        ASSERT_EQ(weft_future_reject(p->f, p->err), 0);
    else
        ASSERT_EQ(weft_future_resolve(p->f, &p->value), 0);
    return 0;
}

#define MAXP 8
struct prods {
    struct prod p[MAXP];
    weft_future *fs[MAXP];
    int n;
    weft_scope *s;
    weft_time t0;
};

/* Times are offsets from now. A producer with pre != 0 settles now, in
 * the order of pre (1 first), before the combinator runs. */
struct pspec {
    int64_t at;
    int value, err;
    int pre;
};

static void prods_start(struct prods *P, const struct pspec *sp, int n)
{
    P->n = n;
    P->t0 = weft_now();
    for (int i = 0; i < n; i++) {
        struct prod *p = &P->p[i];
        p->f = mkfut(sizeof(int));
        p->at = sp[i].at && !sp[i].pre ? P->t0 + sp[i].at : 0;
        p->value = sp[i].value;
        p->err = sp[i].err;
        atomic_store(&p->cancels, 0);
        ASSERT_EQ(weft_future_set_canceller(p->f, prod_cancel, p), 0);
        P->fs[i] = p->f;
    }
    for (int order = 1; order <= n; order++)
        for (int i = 0; i < n; i++) {
            if (sp[i].pre != order)
                continue;
            if (sp[i].err)
                ASSERT_EQ(weft_future_reject(P->fs[i], sp[i].err), 0);
            else
                ASSERT_EQ(weft_future_resolve(P->fs[i], &sp[i].value), 0);
        }
    P->s = scope_open();
    for (int i = 0; i < n; i++)
        spawn(prod_task, &P->p[i]);
}

/* Stops the producers still sleeping; every future without a waiter. */
static void prods_end(struct prods *P)
{
    scope_cancel_end(P->s);
    for (int i = 0; i < P->n; i++) {
        ASSERT_EQ(weft__future_nwaiters(P->fs[i]), 0);
        ASSERT_EQ(weft_future_unref(P->fs[i]), 0);
    }
}

static void check_cancels(struct prods *P, const int *want)
{
    for (int i = 0; i < P->n; i++)
        if (atomic_load(&P->p[i].cancels) != want[i])
            T_FAIL("future %d: cancelled %d times, want %d", i,
                   atomic_load(&P->p[i].cancels), want[i]);
}

static int64_t since(struct prods *P)
{
    return weft_now() - P->t0;
}

#define S (WEFT_SEC)

static int all_root(void *arg)
{
    (void)arg;
    struct prods P;
    int v;

    /* Every one resolves: 0 when the last does. */
    ASSERT_EQ(weft_sleep_for(S), 0);
    prods_start(&P,
                (struct pspec[]){
                    {1 * S, 10, 0, 0}, {3 * S, 30, 0, 0}, {2 * S, 20, 0, 0}},
                3);
    ASSERT_EQ(weft_future_all(P.fs, 3, WEFT_NEVER), 0);
    ASSERT_EQ(since(&P), 3 * S);
    check_cancels(&P, (int[]){0, 0, 0});
    for (int i = 0; i < 3; i++) {
        ASSERT_EQ(weft_future_try_await(P.fs[i], &v), 0);
        ASSERT_EQ(v, P.p[i].value);
    }
    prods_end(&P);

    /* The first rejection, at 2 s: its error; the pending one cancelled. */
    prods_start(&P,
                (struct pspec[]){
                    {1 * S, 1, 0, 0}, {5 * S, 2, 0, 0}, {2 * S, 0, -EIO, 0}},
                3);
    ASSERT_EQ(weft_future_all(P.fs, 3, WEFT_NEVER), -EIO);
    ASSERT_EQ(since(&P), 2 * S);
    check_cancels(&P, (int[]){0, 1, 0});
    ASSERT_EQ(weft_future_try_await(P.fs[1], NULL), -ECANCELED);
    ASSERT_EQ(weft_future_try_await(P.fs[0], &v), 0);
    prods_end(&P);

    /* Deadline at 2.5 s: -ETIMEDOUT, the unsettled ones cancelled. */
    prods_start(
        &P,
        (struct pspec[]){{1 * S, 1, 0, 0}, {5 * S, 2, 0, 0}, {4 * S, 3, 0, 0}},
        3);
    ASSERT_EQ(weft_future_all(P.fs, 3, P.t0 + 2 * S + S / 2), -ETIMEDOUT);
    ASSERT_EQ(since(&P), 2 * S + S / 2);
    check_cancels(&P, (int[]){0, 1, 1});
    prods_end(&P);

    /* Settled at entry: f2 rejected first, then f1; the lowest index
     * decides, with no wait; the pending f3 is cancelled. */
    prods_start(
        &P,
        (struct pspec[]){
            {1, 1, 0, 1}, {1, 0, -EPIPE, 3}, {1, 0, -EIO, 2}, {5 * S, 4, 0, 0}},
        4);
    ASSERT_EQ(weft_future_all(P.fs, 4, WEFT_NEVER), -EPIPE);
    ASSERT_EQ(since(&P), 0);
    check_cancels(&P, (int[]){0, 0, 0, 1});
    prods_end(&P);

    /* The same future twice counts twice. */
    prods_start(&P, (struct pspec[]){{1 * S, 1, 0, 0}, {2 * S, 2, 0, 0}}, 2);
    weft_future *dup[3] = {P.fs[1], P.fs[0], P.fs[1]};
    ASSERT_EQ(weft_future_all(dup, 3, WEFT_NEVER), 0);
    ASSERT_EQ(since(&P), 2 * S);
    prods_end(&P);
    return 0;
}

TEST(all_in_virtual_time)
{
    ASSERT_EQ(t_run_virtual(1, all_root, NULL), 0);
    ASSERT_EQ(t_run_virtual(2, all_root, NULL), 0);
}

static int all_settled_root(void *arg)
{
    (void)arg;
    struct prods P;
    int st[MAXP];

    prods_start(&P,
                (struct pspec[]){
                    {1 * S, 10, 0, 0}, {3 * S, 0, -EIO, 0}, {2 * S, 20, 0, 0}},
                3);
    ASSERT_EQ(weft_future_all_settled(P.fs, 3, st, WEFT_NEVER), 0);
    ASSERT_EQ(since(&P), 3 * S);
    ASSERT_EQ(st[0], 0);
    ASSERT_EQ(st[1], -EIO);
    ASSERT_EQ(st[2], 0);
    check_cancels(&P, (int[]){0, 0, 0});
    prods_end(&P);

    /* statuses may be NULL. */
    prods_start(&P, (struct pspec[]){{1 * S, 0, -EIO, 0}, {2 * S, 20, 0, 0}},
                2);
    ASSERT_EQ(weft_future_all_settled(P.fs, 2, NULL, WEFT_NEVER), 0);
    ASSERT_EQ(since(&P), 2 * S);
    prods_end(&P);

    /* Deadline at 2.5 s: the unsettled ones say -EINPROGRESS and are
     * cancelled; the settled ones keep their results. */
    prods_start(&P,
                (struct pspec[]){{1 * S, 10, 0, 0},
                                 {3 * S, 0, -EIO, 0},
                                 {2 * S, 0, -EPIPE, 0},
                                 {0, 0, 0, 0}},
                4);
    ASSERT_EQ(weft_future_all_settled(P.fs, 4, st, P.t0 + 2 * S + S / 2),
              -ETIMEDOUT);
    ASSERT_EQ(since(&P), 2 * S + S / 2);
    ASSERT_EQ(st[0], 0);
    ASSERT_EQ(st[1], -EINPROGRESS);
    ASSERT_EQ(st[2], -EPIPE);
    ASSERT_EQ(st[3], -EINPROGRESS);
    check_cancels(&P, (int[]){0, 1, 0, 1});
    ASSERT_EQ(weft_future_try_await(P.fs[1], NULL), -ECANCELED);
    prods_end(&P);

    /* All settled at entry: no wait. */
    prods_start(&P, (struct pspec[]){{1, 0, -EIO, 2}, {1, 4, 0, 1}}, 2);
    ASSERT_EQ(weft_future_all_settled(P.fs, 2, st, 0), 0);
    ASSERT_EQ(since(&P), 0);
    ASSERT_EQ(st[0], -EIO);
    ASSERT_EQ(st[1], 0);
    prods_end(&P);
    return 0;
}

TEST(all_settled_in_virtual_time)
{
    ASSERT_EQ(t_run_virtual(1, all_settled_root, NULL), 0);
    ASSERT_EQ(t_run_virtual(2, all_settled_root, NULL), 0);
}

static int any_root(void *arg)
{
    (void)arg;
    struct prods P;
    int v;

    /* A rejection at 1 s, the first resolution at 2 s wins. */
    prods_start(&P,
                (struct pspec[]){
                    {1 * S, 0, -EIO, 0}, {2 * S, 20, 0, 0}, {3 * S, 30, 0, 0}},
                3);
    ASSERT_EQ(weft_future_any(P.fs, 3, WEFT_NEVER), 1);
    ASSERT_EQ(since(&P), 2 * S);
    check_cancels(&P, (int[]){0, 0, 1});
    ASSERT_EQ(weft_future_try_await(P.fs[1], &v), 0);
    ASSERT_EQ(v, 20);
    prods_end(&P);

    /* Every one rejected: the first rejection (in time) is returned. */
    prods_start(
        &P, (struct pspec[]){{2 * S, 0, -EPIPE, 0}, {1 * S, 0, -EIO, 0}}, 2);
    ASSERT_EQ(weft_future_any(P.fs, 2, WEFT_NEVER), -EIO);
    ASSERT_EQ(since(&P), 2 * S);
    check_cancels(&P, (int[]){0, 0});
    prods_end(&P);

    /* Settled at entry: the lowest resolved index, f2 resolved first. */
    prods_start(
        &P,
        (struct pspec[]){
            {1, 0, -EIO, 1}, {1, 11, 0, 3}, {1, 12, 0, 2}, {5 * S, 4, 0, 0}},
        4);
    ASSERT_EQ(weft_future_any(P.fs, 4, WEFT_NEVER), 1);
    ASSERT_EQ(since(&P), 0);
    check_cancels(&P, (int[]){0, 0, 0, 1});
    prods_end(&P);

    /* Deadline: -ETIMEDOUT at 1 s, the pending cancelled. */
    prods_start(&P, (struct pspec[]){{5 * S, 1, 0, 0}, {S / 2, 0, -EIO, 0}}, 2);
    ASSERT_EQ(weft_future_any(P.fs, 2, P.t0 + S), -ETIMEDOUT);
    ASSERT_EQ(since(&P), S);
    check_cancels(&P, (int[]){1, 0});
    prods_end(&P);
    return 0;
}

TEST(any_in_virtual_time)
{
    ASSERT_EQ(t_run_virtual(1, any_root, NULL), 0);
    ASSERT_EQ(t_run_virtual(2, any_root, NULL), 0);
}

static int race_root(void *arg)
{
    (void)arg;
    struct prods P;
    int v;

    /* The first to settle, a rejection at 1 s, wins. */
    prods_start(&P,
                (struct pspec[]){
                    {3 * S, 30, 0, 0}, {1 * S, 0, -EIO, 0}, {2 * S, 20, 0, 0}},
                3);
    ASSERT_EQ(weft_future_race(P.fs, 3, WEFT_NEVER), 1);
    ASSERT_EQ(since(&P), S);
    ASSERT_EQ(weft_future_try_await(P.fs[1], NULL), -EIO);
    check_cancels(&P, (int[]){1, 0, 1});
    prods_end(&P);

    /* A resolution at 2 s wins. */
    prods_start(&P, (struct pspec[]){{3 * S, 30, 0, 0}, {2 * S, 20, 0, 0}}, 2);
    ASSERT_EQ(weft_future_race(P.fs, 2, WEFT_NEVER), 1);
    ASSERT_EQ(since(&P), 2 * S);
    ASSERT_EQ(weft_future_try_await(P.fs[1], &v), 0);
    ASSERT_EQ(v, 20);
    check_cancels(&P, (int[]){1, 0});
    prods_end(&P);

    /* Settled at entry (f2 first): the lowest index, no wait. */
    prods_start(
        &P, (struct pspec[]){{5 * S, 1, 0, 0}, {1, 0, -EIO, 2}, {1, 7, 0, 1}},
        3);
    ASSERT_EQ(weft_future_race(P.fs, 3, WEFT_NEVER), 1);
    ASSERT_EQ(since(&P), 0);
    check_cancels(&P, (int[]){1, 0, 0});
    prods_end(&P);

    /* Deadline. */
    prods_start(&P, (struct pspec[]){{5 * S, 1, 0, 0}, {6 * S, 2, 0, 0}}, 2);
    ASSERT_EQ(weft_future_race(P.fs, 2, P.t0 + 3 * S), -ETIMEDOUT);
    ASSERT_EQ(since(&P), 3 * S);
    check_cancels(&P, (int[]){1, 1});
    prods_end(&P);

    /* The same future twice: the lower index. */
    prods_start(&P, (struct pspec[]){{5 * S, 1, 0, 0}, {1 * S, 2, 0, 0}}, 2);
    weft_future *dup[3] = {P.fs[0], P.fs[1], P.fs[1]};
    ASSERT_EQ(weft_future_race(dup, 3, WEFT_NEVER), 1);
    ASSERT_EQ(since(&P), S);
    check_cancels(&P, (int[]){1, 0});
    prods_end(&P);
    return 0;
}

TEST(race_in_virtual_time)
{
    ASSERT_EQ(t_run_virtual(1, race_root, NULL), 0);
    ASSERT_EQ(t_run_virtual(2, race_root, NULL), 0);
}

/* The caller's cancel: each combinator returns -ECANCELED at that instant
 * and cancels the unsettled futures; at entry, in a cancelled scope, at
 * once. */
enum { C_ALL, C_SETTLED, C_ANY, C_RACE };

struct comb_call {
    int kind;
    struct prods *P;
    int st[MAXP];
    int rc;
    weft_time at;
};

static int call_comb(struct comb_call *c, weft_time deadline)
{
    switch (c->kind) {
    case C_ALL:
        return weft_future_all(c->P->fs, c->P->n, deadline);
    case C_SETTLED:
        return weft_future_all_settled(c->P->fs, c->P->n, c->st, deadline);
    case C_ANY:
        return weft_future_any(c->P->fs, c->P->n, deadline);
    default:
        return weft_future_race(c->P->fs, c->P->n, deadline);
    }
}

static int comb_task(void *arg)
{
    struct comb_call *c = arg;
    c->rc = call_comb(c, WEFT_NEVER);
    c->at = weft_now();
    return 0;
}

static int caller_cancel_root(void *arg)
{
    (void)arg;
    for (int kind = C_ALL; kind <= C_RACE; kind++) {
        struct prods P;
        /* f0 settles at 1 s (a rejection for any, which does not decide
         * it); the others later; the caller is cancelled at 2 s. */
        int err0 = kind == C_ANY ? -EIO : 0;
        int64_t at0 = kind == C_RACE ? 0 : 1 * S; /* race would end then */
        prods_start(
            &P,
            (struct pspec[]){{at0, 1, err0, 0}, {5 * S, 2, 0, 0}, {0, 0, 0, 0}},
            3);
        struct comb_call c = {.kind = kind, .P = &P, .rc = 99};
        weft_scope *cs = scope_open();
        spawn(comb_task, &c);
        ASSERT_EQ(weft_sleep_for(2 * S), 0);
        scope_cancel_end(cs);
        ASSERT_EQ(c.rc, -ECANCELED);
        ASSERT_EQ(c.at, P.t0 + 2 * S);
        if (kind == C_RACE) {
            check_cancels(&P, (int[]){1, 1, 1});
        } else {
            check_cancels(&P, (int[]){0, 1, 1});
        }
        if (kind == C_SETTLED) {
            ASSERT_EQ(c.st[0], 0);
            ASSERT_EQ(c.st[1], -EINPROGRESS);
            ASSERT_EQ(c.st[2], -EINPROGRESS);
        }
        prods_end(&P);

        /* At entry, in a cancelled scope: at once, even with an answer
         * there (a checkpoint). */
        prods_start(&P, (struct pspec[]){{1, 3, 0, 1}, {5 * S, 2, 0, 0}}, 2);
        c = (struct comb_call){.kind = kind, .P = &P, .rc = 99};
        cs = scope_open();
        ASSERT_EQ(weft_scope_cancel(cs), 0);
        ASSERT_EQ(call_comb(&c, WEFT_NEVER), -ECANCELED);
        ASSERT_EQ(weft_scope_join(cs), -ECANCELED);
        ASSERT_EQ(weft_scope_free(cs), 0);
        ASSERT_EQ(since(&P), 0);
        check_cancels(&P, (int[]){0, 1});
        if (kind == C_SETTLED) {
            ASSERT_EQ(c.st[0], 0);
            ASSERT_EQ(c.st[1], -EINPROGRESS);
        }
        prods_end(&P);
    }
    return 0;
}

TEST(combinator_caller_cancel_cancels_unsettled)
{
    ASSERT_EQ(t_run_virtual(1, caller_cancel_root, NULL), 0);
    ASSERT_EQ(t_run_virtual(2, caller_cancel_root, NULL), 0);
}

/* More futures than fit on the stack, settled at distinct instants. */
#define MF_N 100
struct mf {
    weft_future *f;
    int64_t at;
    int value;
};

static int mf_task(void *arg)
{
    struct mf *m = arg;
    if (weft_sleep_until(m->at) == 0)
        ASSERT_EQ(weft_future_resolve(m->f, &m->value), 0);
    return 0;
}

static int many_futures_root(void *arg)
{
    (void)arg;
    static struct mf m[MF_N];
    static weft_future *fs[MF_N];
    static int st[MF_N];
    for (int kind = C_ALL; kind <= C_RACE; kind++) {
        weft_time t0 = weft_now();
        int first = -1;
        for (int i = 0; i < MF_N; i++) {
            /* a permutation of 1 .. MF_N ms */
            int64_t k = (int64_t)((i * 37 + 11) % MF_N) + 1;
            m[i] = (struct mf){mkfut(sizeof(int)), t0 + k * WEFT_MSEC, i};
            fs[i] = m[i].f;
            if (k == 1)
                first = i;
        }
        weft_scope *s = scope_open();
        for (int i = 0; i < MF_N; i++)
            spawn(mf_task, &m[i]);
        int rc;
        switch (kind) {
        case C_ALL:
            ASSERT_EQ(weft_future_all(fs, MF_N, WEFT_NEVER), 0);
            ASSERT_EQ(weft_now() - t0, MF_N * WEFT_MSEC);
            break;
        case C_SETTLED:
            ASSERT_EQ(weft_future_all_settled(fs, MF_N, st, WEFT_NEVER), 0);
            ASSERT_EQ(weft_now() - t0, MF_N * WEFT_MSEC);
            for (int i = 0; i < MF_N; i++)
                ASSERT_EQ(st[i], 0);
            break;
        case C_ANY:
            rc = weft_future_any(fs, MF_N, WEFT_NEVER);
            ASSERT_EQ(rc, first);
            ASSERT_EQ(weft_now() - t0, WEFT_MSEC);
            break;
        default:
            rc = weft_future_race(fs, MF_N, WEFT_NEVER);
            ASSERT_EQ(rc, first);
            ASSERT_EQ(weft_now() - t0, WEFT_MSEC);
            break;
        }
        if (kind >= C_ANY)
            scope_cancel_end(s);
        else
            scope_end(s);
        for (int i = 0; i < MF_N; i++) {
            int v = -1;
            /* Bare promises: the losers are left alone (and their
             * producers, cancelled with s, never settle them). */
            int want = kind >= C_ANY && i != first ? -EINPROGRESS : 0;
            ASSERT_EQ(weft_future_try_await(fs[i], &v), want);
            if (!want)
                ASSERT_EQ(v, i);
            ASSERT_EQ(weft__future_nwaiters(fs[i]), 0);
            ASSERT_EQ(weft_future_unref(fs[i]), 0);
        }
    }
    return 0;
}

TEST(combinators_over_many_futures)
{
    ASSERT_EQ(t_run_virtual(1, many_futures_root, NULL), 0);
    ASSERT_EQ(t_run_virtual(4, many_futures_root, NULL), 0);
}

/* ========================== weft_future_spawn =========================== */

struct sleeper {
    int64_t sleep;
    int ret;
    atomic_int calls;
    int got;
    weft_time at;
};

static int sleeper_fn(void *arg)
{
    struct sleeper *k = arg;
    atomic_fetch_add(&k->calls, 1);
    k->got = weft_sleep_for(k->sleep);
    k->at = weft_now();
    return k->got ? k->got : k->ret;
}

/* fn that leaves work behind: a child in its task's scope, or a scope of
 * its own left open with a child in it. */
static int with_child_fn(void *arg)
{
    struct sleeper *k = arg;
    ASSERT(weft_spawn(NULL, sleeper_fn, k) >= 0);
    return 1;
}

static int open_scope_fn(void *arg)
{
    struct sleeper *k = arg;
    weft_scope *s;
    ASSERT_EQ(weft_scope_open(&s, NULL), 0);
    ASSERT(weft_spawn(s, sleeper_fn, k) >= 0);
    return 3; /* s left open: joined before the future settles */
}

static int spawn_root(void *arg)
{
    int workers = (int)(intptr_t)arg;
    weft_future *f1, *f2, *f3;
    int v = -1, st;
    weft_time t0 = weft_now();

    /* Status >= 0 resolves with it, < 0 rejects; the index is in s. */
    weft_scope *s = open_policy(WEFT_COLLECT, 0);
    ASSERT_EQ(weft_future_spawn(s, ret_arg, (void *)(intptr_t)7, &f1), 0);
    ASSERT_EQ(weft_future_spawn(s, ret_arg, (void *)(intptr_t)-EIO, &f2), 1);
    ASSERT_EQ(weft_future_spawn(NULL, ret_arg, (void *)(intptr_t)0, &f3), 2);
    ASSERT_EQ(weft_future_await(f1, &v, WEFT_NEVER), 0);
    ASSERT_EQ(v, 7);
    ASSERT_EQ(weft_future_await(f2, &v, WEFT_NEVER), -EIO);
    ASSERT_EQ(weft_future_await(f3, &v, WEFT_NEVER), 0);
    ASSERT_EQ(v, 0);
    ASSERT_EQ(weft_scope_join(s), 0);
    /* The statuses are the futures'; to the scope the tasks report 0. */
    ASSERT_EQ(weft_scope_status(s, 0, &st), 0);
    ASSERT_EQ(st, 0);
    ASSERT_EQ(weft_scope_status(s, 1, &st), 0);
    ASSERT_EQ(st, 0);
    ASSERT_EQ(weft_future_cancel(f1), -EALREADY);
    /* Joined scope: weft_spawn's error, no future. */
    weft_future *none = f1;
    ASSERT_EQ(weft_future_spawn(s, ret_arg, NULL, &none), -ESHUTDOWN);
    ASSERT(none == NULL);
    ASSERT_EQ(weft_scope_free(s), 0);
    ASSERT_EQ(weft_future_unref(f1), 0);
    ASSERT_EQ(weft_future_unref(f2), 0);
    ASSERT_EQ(weft_future_unref(f3), 0);
    ASSERT_EQ(weft_now(), t0);

    /* Cancelling the future cancels the task: its sleep ends at 3 s with
     * -ECANCELED, the future is rejected with it then. */
    struct sleeper k = {.sleep = 10 * S, .ret = 5};
    s = open_policy(WEFT_COLLECT, 0);
    ASSERT_EQ(weft_future_spawn(s, sleeper_fn, &k, &f1), 0);
    ASSERT_EQ(weft_future_await(f1, &v, t0 + 3 * S), -ETIMEDOUT);
    ASSERT_EQ(weft_future_cancel(f1), 0);
    int rc2 = weft_future_cancel(f1); /* the canceller is not called again */
    ASSERT(rc2 == 0 || rc2 == -EALREADY);
    ASSERT_EQ(weft_future_await(f1, &v, WEFT_NEVER), -ECANCELED);
    ASSERT_EQ(weft_now(), t0 + 3 * S);
    ASSERT_EQ(k.got, -ECANCELED);
    ASSERT_EQ(k.at, t0 + 3 * S);
    ASSERT_EQ(atomic_load(&k.calls), 1);
    ASSERT_EQ(weft_scope_join(s), 0);
    ASSERT_EQ(weft_scope_status(s, 0, &st), 0);
    ASSERT_EQ(st, 0); /* the -ECANCELED is the future's */
    ASSERT_EQ(weft_scope_free(s), 0);
    ASSERT_EQ(weft_future_unref(f1), 0);

    /* Cancelled before it ran (one worker: it cannot have started): fn is
     * never called, the future is rejected -ECANCELED. */
    if (workers == 1) {
        k = (struct sleeper){.sleep = S, .ret = 5};
        t0 = weft_now();
        s = open_policy(WEFT_COLLECT, 0);
        ASSERT_EQ(weft_future_spawn(NULL, sleeper_fn, &k, &f1), 0);
        ASSERT_EQ(weft_future_cancel(f1), 0);
        ASSERT_EQ(weft_future_await(f1, &v, WEFT_NEVER), -ECANCELED);
        ASSERT_EQ(atomic_load(&k.calls), 0);
        ASSERT_EQ(weft_now(), t0);
        ASSERT_EQ(weft_scope_join(s), 0);
        ASSERT_EQ(weft_scope_status(s, 0, &st), 0);
        ASSERT_EQ(st, 0);
        ASSERT_EQ(weft_scope_free(s), 0);
        ASSERT_EQ(weft_future_unref(f1), 0);
    }

    /* The caller drops its reference at once: the task holds its own. */
    k = (struct sleeper){.sleep = S, .ret = 6};
    t0 = weft_now();
    s = scope_open();
    ASSERT_EQ(weft_future_spawn(s, sleeper_fn, &k, &f1), 0);
    ASSERT_EQ(weft_future_unref(f1), 0);
    scope_end(s);
    ASSERT_EQ(k.got, 0);
    ASSERT_EQ(k.at, t0 + S);

    /* fn's children: the future settles when they have finished, with
     * fn's status; cancelling the future reaches them. */
    k = (struct sleeper){.sleep = 5 * S, .ret = 0};
    t0 = weft_now();
    ASSERT(weft_future_spawn(NULL, with_child_fn, &k, &f1) >= 0);
    ASSERT_EQ(weft_future_await(f1, &v, WEFT_NEVER), 0);
    ASSERT_EQ(v, 1);
    ASSERT_EQ(weft_now(), t0 + 5 * S);
    ASSERT_EQ(weft_future_unref(f1), 0);
    k = (struct sleeper){.sleep = 5 * S, .ret = 0};
    t0 = weft_now();
    ASSERT(weft_future_spawn(NULL, with_child_fn, &k, &f1) >= 0);
    ASSERT_EQ(weft_sleep_for(2 * S), 0);
    ASSERT_EQ(weft_future_cancel(f1), 0);
    ASSERT_EQ(weft_future_await(f1, &v, WEFT_NEVER), 0);
    ASSERT_EQ(v, 1);
    ASSERT_EQ(k.got, -ECANCELED);
    ASSERT_EQ(k.at, t0 + 2 * S);
    ASSERT_EQ(weft_now(), t0 + 2 * S);
    ASSERT_EQ(weft_future_unref(f1), 0);

    /* fn leaves a scope of its own open: joined before the future settles. */
    k = (struct sleeper){.sleep = 4 * S, .ret = 0};
    t0 = weft_now();
    ASSERT(weft_future_spawn(NULL, open_scope_fn, &k, &f1) >= 0);
    ASSERT_EQ(weft_future_await(f1, &v, WEFT_NEVER), 0);
    ASSERT_EQ(v, 3);
    ASSERT_EQ(weft_now(), t0 + 4 * S);
    ASSERT_EQ(k.got, 0);
    ASSERT_EQ(weft_future_unref(f1), 0);

    /* A race over spawned tasks: the winner at 1 s, the losers' tasks
     * cancelled at that instant. */
    static struct sleeper ks[3];
    weft_future *fs[3];
    t0 = weft_now();
    s = open_policy(WEFT_COLLECT, 0);
    for (int i = 0; i < 3; i++) {
        ks[i] = (struct sleeper){.sleep = (int64_t)(3 - i) * S, .ret = 10 + i};
        ASSERT_EQ(weft_future_spawn(s, sleeper_fn, &ks[i], &fs[i]), i);
    }
    ASSERT_EQ(weft_future_race(fs, 3, WEFT_NEVER), 2);
    ASSERT_EQ(weft_now(), t0 + S);
    ASSERT_EQ(weft_scope_join(s), 0);
    ASSERT_EQ(weft_now(), t0 + S);
    for (int i = 0; i < 3; i++) {
        ASSERT_EQ(ks[i].at, t0 + S);
        ASSERT_EQ(ks[i].got, i == 2 ? 0 : -ECANCELED);
        ASSERT_EQ(weft_future_try_await(fs[i], &v), i == 2 ? 0 : -ECANCELED);
        ASSERT_EQ(weft_scope_status(s, i, &st), 0);
        ASSERT_EQ(st, 0); /* the statuses are the futures' */
        ASSERT_EQ(weft_future_unref(fs[i]), 0);
    }
    ASSERT_EQ(weft_scope_free(s), 0);

    /* Into a cancelled scope: -ECANCELED, no future. */
    s = scope_open();
    ASSERT_EQ(weft_scope_cancel(s), 0);
    none = (weft_future *)&v;
    ASSERT_EQ(weft_future_spawn(s, ret_arg, NULL, &none), -ECANCELED);
    ASSERT(none == NULL);
    ASSERT_EQ(weft_scope_join(s), -ECANCELED);
    ASSERT_EQ(weft_scope_free(s), 0);
    return 0;
}

TEST(future_spawn_settles_and_cancels)
{
    ASSERT_EQ(t_run_virtual(1, spawn_root, (void *)(intptr_t)1), 0);
    ASSERT_EQ(t_run_virtual(2, spawn_root, (void *)(intptr_t)2), 0);
    ASSERT_EQ(t_run_virtual(4, spawn_root, (void *)(intptr_t)4), 0);
}

/* A race over spawned futures in a default (fail-fast) scope: the losers
 * are cancelled, and neither their -ECANCELED nor a failed future trips
 * the scope's policy: a bystander task and the owner sleep on. */
static int bystander(void *arg)
{
    struct sleeper *k = arg;
    k->got = weft_sleep_for(k->sleep);
    k->at = weft_now();
    return k->got;
}

static int spawned_race_root(void *arg)
{
    (void)arg;
    struct sleeper fast = {.sleep = WEFT_MSEC, .ret = 5};
    struct sleeper slow = {.sleep = 200 * WEFT_MSEC, .ret = 6};
    struct sleeper by = {.sleep = 300 * WEFT_MSEC};
    weft_scope *s = scope_open(); /* WEFT_FAIL_FAST */
    weft_future *fs[3];
    ASSERT_EQ(weft_future_spawn(s, sleeper_fn, &fast, &fs[0]), 0);
    ASSERT_EQ(weft_future_spawn(s, sleeper_fn, &slow, &fs[1]), 1);
    ASSERT_EQ(weft_future_spawn(s, ret_arg, (void *)(intptr_t)-EIO, &fs[2]), 2);
    ASSERT(weft_spawn(s, bystander, &by) >= 0);
    ASSERT_EQ(weft_future_race(fs, 2, WEFT_NEVER), 0);
    ASSERT_EQ(weft_now(), WEFT_MSEC);
    ASSERT_EQ(weft_future_await(fs[1], NULL, WEFT_NEVER), -ECANCELED);
    ASSERT_EQ(weft_future_await(fs[2], NULL, WEFT_NEVER), -EIO);
    ASSERT_EQ(weft_sleep_for(WEFT_MSEC), 0); /* the owner is not cancelled */
    ASSERT_EQ(weft_scope_join(s), 0);
    ASSERT_EQ(by.got, 0);
    ASSERT_EQ(by.at, 300 * WEFT_MSEC);
    ASSERT_EQ(slow.at, WEFT_MSEC);
    ASSERT_EQ(weft_scope_free(s), 0);
    for (int i = 0; i < 3; i++)
        ASSERT_EQ(weft_future_unref(fs[i]), 0);
    return 0;
}

TEST(spawned_futures_do_not_trip_their_scope)
{
    ASSERT_EQ(t_run_virtual(1, spawned_race_root, NULL), 0);
    ASSERT_EQ(t_run_virtual(2, spawned_race_root, NULL), 0);
}

/* fn returns -EINPROGRESS (a non-blocking connect's errno, say): a status
 * no future can be rejected with, as it means "not settled yet". The future
 * must settle all the same (rejected with -EIO), not stay pending with its
 * awaiters parked forever. */
static int einprogress_root(void *arg)
{
    (void)arg;
    weft_future *f;
    int v = -1;
    weft_scope *s = open_policy(WEFT_COLLECT, 0);
    ASSERT_EQ(weft_future_spawn(s, ret_arg, (void *)(intptr_t)-EINPROGRESS, &f),
              0);
    ASSERT_EQ(weft_future_await(f, &v, 5 * WEFT_SEC), -EIO);
    ASSERT_EQ(weft_now(), 0);
    ASSERT_EQ(v, -1);
    ASSERT_EQ(weft_future_try_await(f, NULL), -EIO);
    ASSERT_EQ(weft_scope_join(s), 0);
    ASSERT_EQ(weft_scope_free(s), 0);
    ASSERT_EQ(weft_future_unref(f), 0);
    return 0;
}

TEST(future_spawn_einprogress_status_settles)
{
    ASSERT_EQ(t_run_virtual(1, einprogress_root, NULL), 0);
    ASSERT_EQ(t_run_virtual(2, einprogress_root, NULL), 0);
}

/* The future outlives a cancel racing with the task's exit, on several
 * workers and from a plain thread (ASan, TSan: no freed scope touched). */
static int quick_fn(void *arg)
{
    (void)arg;
    weft_yield();
    return 1;
}

struct sc_race {
    weft_future **fs;
    int n;
    atomic_int made; /* fs[0 .. made-1] are there */
};

static void *sc_thread(void *arg)
{
    struct sc_race *r = arg;
    for (int i = 1; i < r->n; i += 2) {
        while (atomic_load(&r->made) <= i)
            sched_yield();
        int rc = weft_future_cancel(r->fs[i]);
        ASSERT(rc == 0 || rc == -EALREADY);
    }
    return NULL;
}

static int spawn_cancel_race_root(void *arg)
{
    (void)arg;
    int n = (int)T_LIVE(2000);
    weft_future **fs = calloc((size_t)n, sizeof(*fs));
    ASSERT(fs != NULL);
    struct sc_race r = {fs, n, 0};
    pthread_t th;
    ASSERT_EQ(pthread_create(&th, NULL, sc_thread, &r), 0);
    weft_scope *s = open_policy(WEFT_COLLECT, 0);
    for (int i = 0; i < n; i++) {
        ASSERT(weft_future_spawn(s, quick_fn, NULL, &fs[i]) >= 0);
        atomic_store(&r.made, i + 1);
    }
    for (int i = 0; i < n; i += 2) {
        int rc = weft_future_cancel(fs[i]);
        ASSERT(rc == 0 || rc == -EALREADY);
    }
    ASSERT_EQ(weft_scope_join(s), 0);
    ASSERT_EQ(pthread_join(th, NULL), 0);
    for (int i = 0; i < n; i++) {
        int v = -1;
        int rc = weft_future_try_await(fs[i], &v);
        ASSERT(rc == -ECANCELED || (rc == 0 && v == 1));
        ASSERT_EQ(weft_future_unref(fs[i]), 0);
    }
    ASSERT_EQ(weft_scope_free(s), 0);
    free(fs);
    return 0;
}

TEST(future_spawn_cancel_races_task_exit)
{
    ASSERT_EQ(t_run_mono(4, spawn_cancel_race_root, NULL), 0);
}

/* ============================== weft_gather_tasks
 * ============================= */

struct gk {
    int64_t sleep;
    int ret;
    atomic_int calls;
    int got;
    weft_time at;
};

static int gk_fn(void *arg)
{
    struct gk *k = arg;
    atomic_fetch_add(&k->calls, 1);
    k->got = weft_sleep_for(k->sleep);
    k->at = weft_now();
    return k->got ? k->got : k->ret;
}

static int null_arg_fn(void *arg)
{
    return arg == NULL ? 4 : -EINVAL;
}

#define GN 3
struct gcase {
    weft_policy policy;
    int64_t deadline; /* offset; 0: none */
    struct {
        int64_t sleep;
        int ret;
    } k[GN];
    int n;
    int rc, winner;
    int64_t at; /* when gather returns */
    int st[GN];
};

static void run_gcase(const struct gcase *c)
{
    static struct gk k[GN];
    weft_fn fns[GN];
    void *args[GN];
    int st[GN], winner = 99;
    weft_time t0 = weft_now();
    for (int i = 0; i < c->n; i++) {
        k[i] = (struct gk){.sleep = c->k[i].sleep, .ret = c->k[i].ret};
        fns[i] = gk_fn;
        args[i] = &k[i];
    }
    int rc = weft_gather_tasks(c->policy, c->n, fns, args, st, &winner,
                               c->deadline ? t0 + c->deadline : WEFT_NEVER);
    ASSERT_EQ(rc, c->rc);
    ASSERT_EQ(winner, c->winner);
    ASSERT_EQ(weft_now() - t0, c->at);
    for (int i = 0; i < c->n; i++) {
        ASSERT_EQ(st[i], c->st[i]);
        /* A task stopped by the policy stopped at that instant. */
        if (st[i] == -ECANCELED && atomic_load(&k[i].calls))
            ASSERT_EQ(k[i].at - t0, c->at);
    }
}

static int gather_root(void *arg)
{
    (void)arg;
    const struct gcase cases[] = {
        /* all: the first error at 2 s cancels the rest */
        {WEFT_FAIL_FAST,
         0,
         {{1 * S, 1}, {2 * S, -EIO}, {3 * S, 0}},
         3,
         -EIO,
         -1,
         2 * S,
         {1, -EIO, -ECANCELED}},
        {WEFT_FAIL_FAST,
         0,
         {{1 * S, 1}, {2 * S, 2}, {3 * S, 3}},
         3,
         0,
         -1,
         3 * S,
         {1, 2, 3}},
        {WEFT_FAIL_FAST,
         S / 2,
         {{1 * S, 1}, {2 * S, 2}},
         2,
         -ETIMEDOUT,
         -1,
         S / 2,
         {-ECANCELED, -ECANCELED}},
        /* all-settled: every status */
        {WEFT_COLLECT,
         0,
         {{1 * S, 1}, {2 * S, -EIO}, {3 * S, 3}},
         3,
         0,
         -1,
         3 * S,
         {1, -EIO, 3}},
        {WEFT_COLLECT,
         2 * S + S / 2,
         {{1 * S, 1}, {2 * S, -EIO}, {3 * S, 3}},
         3,
         -ETIMEDOUT,
         -1,
         2 * S + S / 2,
         {1, -EIO, -ECANCELED}},
        /* any: the first success at 2 s wins */
        {WEFT_FIRST,
         0,
         {{1 * S, -EIO}, {2 * S, 5}, {3 * S, 6}},
         3,
         0,
         1,
         2 * S,
         {-EIO, 5, -ECANCELED}},
        {WEFT_FIRST,
         0,
         {{2 * S, -EPIPE}, {1 * S, -EIO}},
         2,
         -EIO,
         -1,
         2 * S,
         {-EPIPE, -EIO}},
        {WEFT_FIRST,
         2 * S,
         {{3 * S, 1}, {1 * S, -EIO}},
         2,
         -ETIMEDOUT,
         -1,
         2 * S,
         {-ECANCELED, -EIO}},
        /* race: the first to finish wins, failure or not */
        {WEFT_RACE,
         0,
         {{3 * S, 3}, {1 * S, -EIO}, {2 * S, 2}},
         3,
         -EIO,
         1,
         1 * S,
         {-ECANCELED, -EIO, -ECANCELED}},
        {WEFT_RACE,
         0,
         {{3 * S, 3}, {2 * S, 42}, {4 * S, 4}},
         3,
         42,
         1,
         2 * S,
         {-ECANCELED, 42, -ECANCELED}},
        {WEFT_RACE,
         1 * S,
         {{3 * S, 3}, {2 * S, 2}},
         2,
         -ETIMEDOUT,
         -1,
         S,
         {-ECANCELED, -ECANCELED}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        run_gcase(&cases[i]);

    /* args NULL: every arg NULL; statuses and winner NULL. */
    weft_fn nf[2] = {null_arg_fn, null_arg_fn};
    int st[2], winner = 99;
    ASSERT_EQ(
        weft_gather_tasks(WEFT_COLLECT, 2, nf, NULL, st, &winner, WEFT_NEVER),
        0);
    ASSERT_EQ(st[0], 4);
    ASSERT_EQ(st[1], 4);
    ASSERT_EQ(winner, -1);
    ASSERT_EQ(weft_gather_tasks(WEFT_RACE, 2, nf, NULL, NULL, NULL, WEFT_NEVER),
              4);

    /* A deadline already passed: no task runs its fn. */
    static struct gk k[2];
    weft_fn fns[2] = {gk_fn, gk_fn};
    void *args[2] = {&k[0], &k[1]};
    weft_time t0 = weft_now();
    ASSERT(t0 > 0);
    ASSERT_EQ(weft_gather_tasks(WEFT_COLLECT, 2, fns, args, st, &winner, t0),
              -ETIMEDOUT);
    ASSERT_EQ(st[0], -ECANCELED);
    ASSERT_EQ(st[1], -ECANCELED);
    ASSERT_EQ(atomic_load(&k[0].calls) + atomic_load(&k[1].calls), 0);
    ASSERT_EQ(weft_now(), t0);

    /* In a cancelled scope: likewise, -ECANCELED. */
    weft_scope *s = scope_open();
    ASSERT_EQ(weft_scope_cancel(s), 0);
    ASSERT_EQ(
        weft_gather_tasks(WEFT_FIRST, 2, fns, args, st, &winner, WEFT_NEVER),
        -ECANCELED);
    ASSERT_EQ(st[0], -ECANCELED);
    ASSERT_EQ(st[1], -ECANCELED);
    ASSERT_EQ(winner, -1);
    ASSERT_EQ(atomic_load(&k[0].calls) + atomic_load(&k[1].calls), 0);
    ASSERT_EQ(weft_scope_join(s), -ECANCELED);
    ASSERT_EQ(weft_scope_free(s), 0);
    return 0;
}

TEST(gather_every_policy_in_virtual_time)
{
    ASSERT_EQ(t_run_virtual(1, gather_root, NULL), 0);
    ASSERT_EQ(t_run_virtual(2, gather_root, NULL), 0);
}

/* The caller cancelled while gather waits: the cancel reaches every task
 * at that instant, and gather still waits for them all. */
struct gcall {
    struct gk k[3];
    int st[3];
    int rc;
    weft_time at;
};

static int gcall_task(void *arg)
{
    struct gcall *g = arg;
    weft_fn fns[3] = {gk_fn, gk_fn, gk_fn};
    void *args[3] = {&g->k[0], &g->k[1], &g->k[2]};
    g->rc =
        weft_gather_tasks(WEFT_COLLECT, 3, fns, args, g->st, NULL, WEFT_NEVER);
    g->at = weft_now();
    return 0;
}

static int gather_cancel_root(void *arg)
{
    (void)arg;
    static struct gcall g;
    memset(&g, 0, sizeof g);
    g.k[0].sleep = 1 * S;
    g.k[0].ret = 7;
    g.k[1].sleep = 5 * S;
    g.k[2].sleep = 6 * S;
    weft_scope *s = scope_open();
    spawn(gcall_task, &g);
    ASSERT_EQ(weft_sleep_for(2 * S), 0);
    scope_cancel_end(s);
    ASSERT_EQ(g.rc, -ECANCELED);
    ASSERT_EQ(g.at, 2 * S);
    ASSERT_EQ(g.st[0], 7);
    ASSERT_EQ(g.st[1], -ECANCELED);
    ASSERT_EQ(g.st[2], -ECANCELED);
    ASSERT_EQ(g.k[1].at, 2 * S);
    ASSERT_EQ(g.k[2].at, 2 * S);
    return 0;
}

TEST(gather_caller_cancel_reaches_every_task)
{
    ASSERT_EQ(t_run_virtual(1, gather_cancel_root, NULL), 0);
    ASSERT_EQ(t_run_virtual(2, gather_cancel_root, NULL), 0);
}

static int idx_fn(void *arg)
{
    return (int)(intptr_t)arg;
}

static int gather_many_root(void *arg)
{
    (void)arg;
    int n = (int)T_LIVE(3000);
    weft_fn *fns = malloc((size_t)n * sizeof(*fns));
    void **args = malloc((size_t)n * sizeof(*args));
    int *st = malloc((size_t)n * sizeof(*st));
    ASSERT(fns && args && st);
    for (int i = 0; i < n; i++) {
        fns[i] = idx_fn;
        args[i] = (void *)(intptr_t)i;
    }
    int winner;
    ASSERT_EQ(
        weft_gather_tasks(WEFT_COLLECT, n, fns, args, st, &winner, WEFT_NEVER),
        0);
    ASSERT_EQ(winner, -1);
    for (int i = 0; i < n; i++)
        ASSERT_EQ(st[i], i);
    ASSERT_EQ(
        weft_gather_tasks(WEFT_FAIL_FAST, n, fns, args, st, NULL, WEFT_NEVER),
        0);
    for (int i = 0; i < n; i++)
        ASSERT_EQ(st[i], i);
    /* race: whichever finished first; every other either finished or
     * was cancelled. */
    int rc =
        weft_gather_tasks(WEFT_RACE, n, fns, args, st, &winner, WEFT_NEVER);
    ASSERT(winner >= 0 && winner < n);
    ASSERT_EQ(rc, winner);
    ASSERT_EQ(st[winner], winner);
    for (int i = 0; i < n; i++)
        ASSERT(st[i] == i || st[i] == -ECANCELED);
    free(fns);
    free(args);
    free(st);
    return 0;
}

TEST(gather_many_tasks)
{
    ASSERT_EQ(t_run_mono(1, gather_many_root, NULL), 0);
    ASSERT_EQ(t_run_mono(4, gather_many_root, NULL), 0);
}

/* ================================ stress ================================ */

/* Many futures settled by tasks on every worker and by a plain thread,
 * awaited (and raced, and all-settled) by many tasks with random
 * deadlines: every wait ends with the future's own result or -ETIMEDOUT,
 * nothing else, and a later wait without a deadline gets the result. The
 * futures' cancellers ignore the combinators' cancels (a producer may), so
 * every future keeps the result its producer gives it. */
struct stress {
    int nf;
    weft_future **fs;
    atomic_int go;
    atomic_long got, timeouts, cancels;
    atomic_int settled; /* futures settled so far */
    int waiters, rounds;
};

static struct stress *ST;

static int want_of(int i, int64_t *v)
{
    *v = (int64_t)i * 7919 + 3;
    return i % 5 == 0 ? -(1000 + i % 60) : 0; /* not -EAGAIN, -ETIMEDOUT */
}

static void st_cancel(void *arg)
{
    (void)arg;
    atomic_fetch_add(&ST->cancels, 1);
}

static void settle_one(int i)
{
    atomic_fetch_add(&ST->settled, 1);
    int64_t v;
    int err = want_of(i, &v);
    if (err)
        ASSERT_EQ(weft_future_reject(ST->fs[i], err), 0);
    else
        ASSERT_EQ(weft_future_resolve(ST->fs[i], &v), 0);
}

static void check_result(int i, int rc, int64_t v)
{
    int64_t wv;
    int want = want_of(i, &wv);
    if (rc != want || (want == 0 && v != wv))
        T_FAIL("future %d: rc %d v %lld, want %d %lld", i, rc, (long long)v,
               want, (long long)wv);
}

/* Settler tasks take futures i with i % 4 in {1, 2, 3}, in chunks. */
static int st_settler(void *arg)
{
    int chunk = (int)(intptr_t)arg;
    uint64_t r = (uint64_t)chunk * 977 + 1;
    for (int i = chunk; i < ST->nf; i += 16) {
        if (i % 4 == 0)
            continue;
        uint64_t x = rnd(&r);
        if (x % 8)
            ASSERT_EQ(weft_sleep_for((int64_t)(x >> 8) % (40 * WEFT_USEC)), 0);
        else
            weft_yield();
        settle_one(i);
    }
    return 0;
}

/* The plain thread takes i % 4 == 0. */
static void *st_thread(void *arg)
{
    (void)arg;
    while (!atomic_load(&ST->go))
        sched_yield();
    for (int i = 0; i < ST->nf; i += 4) {
        /* Keep up with the settler tasks, not ahead of them (they settle
         * 3/4 of the futures: this cannot wait for ever). */
        while (atomic_load(&ST->settled) < i - 64)
            sched_yield();
        settle_one(i);
    }
    return NULL;
}

/* A future near the settling front (settlers go through them in index
 * order, roughly): likely to be settled soon, or just now. */
static int pick(uint64_t *r)
{
    int i = atomic_load(&ST->settled) + (int)(rnd(r) % 96) - 16;
    return i < 0 ? 0 : i >= ST->nf ? ST->nf - 1 : i;
}

static int st_waiter(void *arg)
{
    uint64_t r = (uint64_t)(intptr_t)arg * 0x9e3779b9u + 17;
    for (int round = 0; round < ST->rounds; round++) {
        uint64_t x = rnd(&r);
        int64_t dl =
            weft_now() + (int64_t)(x % 60) * WEFT_USEC - 10 * WEFT_USEC;
        int i = pick(&r);
        int64_t v = -1;
        int rc;
        switch ((x >> 32) % 4) {
        case 0:
        case 1:
            rc = weft_future_await(ST->fs[i], &v, dl);
            if (rc == -ETIMEDOUT) {
                atomic_fetch_add(&ST->timeouts, 1);
                rc = weft_future_await(ST->fs[i], &v, WEFT_NEVER);
            } else {
                atomic_fetch_add(&ST->got, 1);
            }
            check_result(i, rc, v);
            break;
        case 2: { /* race over 3 */
            int ix[3];
            weft_future *fs[3];
            for (int k = 0; k < 3; k++) {
                ix[k] = pick(&r);
                fs[k] = ST->fs[ix[k]];
            }
            rc = weft_future_race(fs, 3, dl);
            if (rc == -ETIMEDOUT) {
                atomic_fetch_add(&ST->timeouts, 1);
                break;
            }
            ASSERT(rc >= 0 && rc < 3);
            atomic_fetch_add(&ST->got, 1);
            int rr = weft_future_try_await(fs[rc], &v);
            check_result(ix[rc], rr, v);
            break;
        }
        default: { /* all_settled over 4 */
            int ix[4], st[4];
            weft_future *fs[4];
            for (int k = 0; k < 4; k++) {
                ix[k] = pick(&r);
                fs[k] = ST->fs[ix[k]];
            }
            rc = weft_future_all_settled(fs, 4, st, dl);
            ASSERT(rc == 0 || rc == -ETIMEDOUT);
            atomic_fetch_add(rc ? &ST->timeouts : &ST->got, 1);
            for (int k = 0; k < 4; k++) {
                if (rc == 0)
                    ASSERT(st[k] != -EINPROGRESS);
                if (st[k] == -EINPROGRESS)
                    continue;
                int64_t wv;
                ASSERT_EQ(st[k], want_of(ix[k], &wv));
            }
            break;
        }
        }
    }
    return 0;
}

static int stress_root(void *arg)
{
    (void)arg;
    struct stress *s = ST;
    s->fs = calloc((size_t)s->nf, sizeof(*s->fs));
    ASSERT(s->fs != NULL);
    for (int i = 0; i < s->nf; i++) {
        s->fs[i] = mkfut(sizeof(int64_t));
        ASSERT_EQ(weft_future_set_canceller(s->fs[i], st_cancel, NULL), 0);
    }
    pthread_t th;
    ASSERT_EQ(pthread_create(&th, NULL, st_thread, NULL), 0);
    weft_scope *sc = scope_open();
    for (int w = 0; w < s->waiters; w++)
        spawn(st_waiter, (void *)(intptr_t)w);
    atomic_store(&s->go, 1);
    for (int c = 0; c < 16; c++)
        spawn(st_settler, (void *)(intptr_t)c);
    scope_end(sc);
    ASSERT_EQ(pthread_join(th, NULL), 0);
    for (int i = 0; i < s->nf; i++) {
        int64_t v = -1;
        int rc = weft_future_try_await(s->fs[i], &v);
        check_result(i, rc, v);
        ASSERT_EQ(weft__future_nwaiters(s->fs[i]), 0);
        ASSERT_EQ(weft_future_unref(s->fs[i]), 0);
    }
    free(s->fs);
    return 0;
}

TEST(stress_cross_worker_settle_and_await)
{
    static struct stress s;
    ST = &s;
    s.nf = (int)T_SCALE(8000);
    s.waiters = (int)T_LIVE(200);
    s.rounds = (int)T_SCALE(200);
    ASSERT_EQ(t_run_mono(4, stress_root, NULL), 0);
    ASSERT(atomic_load(&s.got) + atomic_load(&s.timeouts) > 0);
}

/* ============== select's future case, driven as select drives it ======== */

/* One case through the select protocol of wait.h: lock, try, and if it is
 * not ready, wait_many on its queue; then won. Returns the case's index
 * (0) or wait_many's error. */
static int case_select(weft_case *c, int64_t deadline)
{
    weft__arm a;
    memset(&a, 0, sizeof a);
    a.lock = weft__future_case_lock(c);
    weft__lock *order[1];
    int k = weft__locks_order(&a, 1, order);
    weft__locks_acquire(order, k);
    weft__chain woken;
    weft__chain_init(&woken);
    int rc = weft__future_case_try(c, &a, &woken);
    if (rc == 0) {
        weft__locks_release(order, k);
        weft__wake_chain(woken.head, 0);
        return 0;
    }
    ASSERT_EQ(rc, -EAGAIN);
    ASSERT(a.q != NULL);
    int code = 0;
    rc = weft__wait_many(order, k, &a, 1, WEFT__W_SELECT, c, deadline, &code);
    if (rc >= 0)
        weft__future_case_won(c, code);
    return rc;
}

struct fcase {
    weft_future *f;
    weft_time deadline;
    int rc, v, idx;
    weft_time at;
};

static int fcase_fn(void *arg)
{
    struct fcase *p = arg;
    weft_case c;
    memset(&c, 0, sizeof c);
    c.op = WEFT_OP_FUTURE;
    c.future = p->f;
    c.elem = &p->v;
    c.rc = 99;
    p->idx = case_select(&c, p->deadline);
    p->rc = c.rc;
    p->at = weft_now();
    return 0;
}

static int future_case_root(void *arg)
{
    (void)arg;
    /* check: NULL switches the case off; a non-future is -EINVAL. */
    weft_case c;
    memset(&c, 0, sizeof c);
    c.op = WEFT_OP_FUTURE;
    ASSERT_EQ(weft__future_case_check(&c), 1);
    static uint64_t junk[16];
    c.future = (weft_future *)junk;
    ASSERT_EQ(weft__future_case_check(&c), -EINVAL);

    /* Settled before: try takes it under the lock, value and all. */
    weft_future *f = mkfut(sizeof(int));
    c.future = f;
    ASSERT_EQ(weft__future_case_check(&c), 0);
    int v = 7, out = -1;
    ASSERT_EQ(weft_future_resolve(f, &v), 0);
    c.elem = &out;
    c.rc = 99;
    ASSERT_EQ(case_select(&c, WEFT_NEVER), 0);
    ASSERT_EQ(c.rc, 0);
    ASSERT_EQ(out, 7);
    c.elem = NULL; /* no copy wanted */
    c.rc = 99;
    ASSERT_EQ(case_select(&c, WEFT_NEVER), 0);
    ASSERT_EQ(c.rc, 0);
    ASSERT_EQ(weft_future_unref(f), 0);

    /* A rejected one: its error, elem untouched; a future without a
     * value copies nothing to elem. */
    f = mkfut(sizeof(int));
    ASSERT_EQ(weft_future_reject(f, -EIO), 0);
    c.future = f;
    c.elem = &out;
    out = -1;
    ASSERT_EQ(case_select(&c, WEFT_NEVER), 0);
    ASSERT_EQ(c.rc, -EIO);
    ASSERT_EQ(out, -1);
    ASSERT_EQ(weft_future_unref(f), 0);
    f = mkfut(0);
    ASSERT_EQ(weft_future_resolve(f, NULL), 0);
    c.future = f;
    ASSERT_EQ(case_select(&c, WEFT_NEVER), 0);
    ASSERT_EQ(c.rc, 0);
    ASSERT_EQ(out, -1);
    ASSERT_EQ(weft_future_unref(f), 0);

    /* Waiting: a select waiter (plain) and an await (notify, through a
     * wait set) on one future are both claimed by the settle. */
    f = mkfut(sizeof(int));
    struct fcase p = {f, WEFT_NEVER, 99, -1, 99, 0};
    struct aw a = {f, WEFT_NEVER, 99, 0, 0};
    weft_scope *s = scope_open();
    spawn(fcase_fn, &p);
    spawn(aw_fn, &a);
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0);
    ASSERT_EQ(weft__future_nwaiters(f), 2);
    v = 42;
    ASSERT_EQ(weft_future_resolve(f, &v), 0);
    scope_end(s);
    ASSERT_EQ(p.idx, 0);
    ASSERT_EQ(p.rc, 0);
    ASSERT_EQ(p.v, 42);
    ASSERT_EQ(p.at, WEFT_SEC);
    ASSERT_EQ(a.rc, 0);
    ASSERT_EQ(a.v, 42);
    ASSERT_EQ(weft__future_nwaiters(f), 0);
    ASSERT_EQ(weft_future_unref(f), 0);

    /* A select that times out leaves no waiter; a rejection wakes the
     * next one with the error. */
    f = mkfut(sizeof(int));
    p = (struct fcase){f, weft_now() + WEFT_SEC, 99, -1, 99, 0};
    s = scope_open();
    spawn(fcase_fn, &p);
    ASSERT_EQ(weft_sleep_for(2 * WEFT_SEC), 0);
    ASSERT_EQ(p.idx, -ETIMEDOUT);
    ASSERT_EQ(p.at, 2 * WEFT_SEC);
    ASSERT_EQ(weft__future_nwaiters(f), 0);
    p = (struct fcase){f, WEFT_NEVER, 99, -1, 99, 0};
    spawn(fcase_fn, &p);
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0);
    ASSERT_EQ(weft__future_nwaiters(f), 1);
    ASSERT_EQ(weft_future_reject(f, -EPIPE), 0);
    scope_end(s);
    ASSERT_EQ(p.idx, 0);
    ASSERT_EQ(p.rc, -EPIPE);
    ASSERT_EQ(p.v, -1);
    ASSERT_EQ(weft__future_nwaiters(f), 0);
    ASSERT_EQ(weft_future_unref(f), 0);

    /* Cancelled while it waits: -ECANCELED, no waiter left, the future
     * untouched. */
    f = mkfut(sizeof(int));
    p = (struct fcase){f, WEFT_NEVER, 99, -1, 99, 0};
    s = scope_open();
    spawn(fcase_fn, &p);
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0);
    ASSERT_EQ(weft__future_nwaiters(f), 1);
    scope_cancel_end(s);
    ASSERT_EQ(p.idx, -ECANCELED);
    ASSERT_EQ(weft__future_nwaiters(f), 0);
    ASSERT_EQ(weft_future_try_await(f, NULL), -EINPROGRESS);
    ASSERT_EQ(weft_future_unref(f), 0);
    return 0;
}

TEST(select_future_case_functions)
{
    ASSERT_EQ(t_run_virtual(1, future_case_root, NULL), 0);
    ASSERT_EQ(t_run_virtual(2, future_case_root, NULL), 0);
}

/* The dump's record: a task parked in await or a combinator waits on a
 * future (the future itself, or the combinator's array). */
struct kindp {
    weft_task *t;
    weft_future *const *fs;
};

static int any_fn(void *arg)
{
    struct kindp *k = arg;
    k->t = weft__current();
    return weft_future_any(k->fs, 2, WEFT_NEVER) == 1 ? 0 : -EIO;
}

static int wait_kind_root(void *arg)
{
    (void)arg;
    weft_future *fs[2] = {mkfut(0), mkfut(0)};
    struct kindp k = {NULL, fs};
    weft_scope *s = scope_open();
    spawn(any_fn, &k);
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0);
    ASSERT(weft__task_wait_kind(k.t) == &weft__wk_future);
    ASSERT(weft__task_wait_obj(k.t) == (const void *)fs);
    ASSERT_EQ(weft__future_nwaiters(fs[0]), 1);
    ASSERT_EQ(weft__future_nwaiters(fs[1]), 1);
    ASSERT_EQ(weft_future_resolve(fs[1], NULL), 0);
    scope_end(s);
    ASSERT_EQ(weft__future_nwaiters(fs[0]), 0);
    ASSERT_EQ(weft_future_unref(fs[0]), 0);
    ASSERT_EQ(weft_future_unref(fs[1]), 0);
    return 0;
}

TEST(combinator_records_what_it_waits_on)
{
    ASSERT_EQ(t_run_virtual(1, wait_kind_root, NULL), 0);
}
