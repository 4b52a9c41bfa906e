/* SPDX-License-Identifier: MIT */
/*
 * Churn: many short tasks one after another, and a supervisor restarting
 * a failing child over and over. Sized to run more than 65,536 tasks on
 * one stack slot even at WEFT_TEST_SCALE=10: under TSan a slot's fiber
 * serves all of them, and its shadow stack holds 65,536 frames, so a
 * frame left behind by each finished task overruns it. The last test
 * looks at that directly: every task on a slot starts on a shadow stack
 * as deep as the first one's.
 */
#include "t.h"
#include "weft.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

static atomic_long ran;

static int count_one(void *arg)
{
    (void)arg;
    atomic_fetch_add_explicit(&ran, 1, memory_order_relaxed);
    return 0;
}

/* ---- spawn and join, one child at a time ---- */

struct churn {
    long n;
    weft_fn child;
};

static int churn_root(void *arg)
{
    struct churn *c = arg;
    for (long i = 0; i < c->n; i++) {
        weft_scope *s = scope_open();
        ASSERT(weft_spawn(s, c->child, NULL) >= 0);
        scope_end(s);
    }
    return 0;
}

static void churn(int workers)
{
    struct churn c = {.n = T_SCALE(1000000), .child = count_one};
    atomic_store(&ran, 0);
    ASSERT_EQ(t_run_mono(workers, churn_root, &c), 0);
    ASSERT_EQ(atomic_load(&ran), c.n);
}

TEST(a_million_tasks_one_worker)
{
    churn(1);
}

/* The second worker steals a child now and then; the slot the root's
 * worker reuses still serves nearly all of them. */
TEST(a_million_tasks_two_workers)
{
    churn(2);
}

/* ---- a supervisor restarting a child that fails at once ---- */

static long storm_target;

static int fail_at_once(void *arg)
{
    weft_sup **s = arg;
    if (atomic_fetch_add(&ran, 1) + 1 == storm_target)
        ASSERT_EQ(weft_sup_stop(*s), 0);
    return -EIO;
}

static int storm_root(void *arg)
{
    (void)arg;
    static weft_sup *s;
    weft_child_spec c = {.name = "crasher", .start = fail_at_once, .arg = &s};
    /* Limits high enough never to be reached: a billion restarts a
     * second. */
    weft_sup_opts o = {.intensity = 1000000000, .period_ns = WEFT_SEC};
    ASSERT_EQ(weft_sup_spawn(NULL, &o, &c, 1, &s), 0);
    int status = -1;
    ASSERT_EQ(weft_sup_join_until(s, &status, WEFT_NEVER), 0);
    ASSERT_EQ(status, 0); /* stopped, not given up */
    weft_sup_stats ss = {0};
    ASSERT_EQ(weft_sup_stats_get(s, &ss), 0);
    ASSERT(ss.restarts >= storm_target - 1);
    ASSERT_EQ(weft_sup_free(s), 0);
    return 0;
}

static void storm(int workers)
{
    storm_target = T_SCALE(1000000);
    atomic_store(&ran, 0);
    ASSERT_EQ(t_run_mono(workers, storm_root, NULL), 0);
    ASSERT(atomic_load(&ran) >= storm_target);
}

TEST(restart_storm_one_worker)
{
    storm(1);
}

TEST(restart_storm_two_workers)
{
    storm(2);
}

/* ---- what TSan sees: a finished task leaves its fiber clean ---- */

#if defined(WEFT_TSAN)
/* TSan's debugging interface (exported by its runtime, in no header): the
 * stack a heap block was allocated at, as TSan recorded it from the
 * fiber's shadow stack. */
int __tsan_get_alloc_stack(uintptr_t addr, uintptr_t *trace, uintptr_t size,
                           int *thread_id, uint64_t *os_id);

static long shadow_depth(void)
{
    void *p = malloc(16);
    ASSERT(p != NULL);
    uintptr_t trace[512];
    int tid = 0;
    uint64_t os_id = 0;
    long n = __tsan_get_alloc_stack((uintptr_t)p, trace, 512, &tid, &os_id);
    free(p);
    return n;
}
#else
static long shadow_depth(void)
{
    return 0;
}
#endif

static long first_depth;

static int same_depth(void *arg)
{
    (void)arg;
    long d = shadow_depth();
    long n = atomic_fetch_add(&ran, 1);
    if (n == 0)
        first_depth = d;
    else if (d != first_depth)
        T_FAIL("task %ld starts %ld frames deep, the first one %ld", n, d,
               first_depth);
    return 0;
}

/* Unscaled and small: a frame left per task shows from the second task
 * on (TSan records 255 frames at most; 1000 tasks go past that). */
TEST(each_task_starts_on_a_clean_tsan_fiber)
{
    struct churn c = {.n = 1000, .child = same_depth};
    atomic_store(&ran, 0);
    ASSERT_EQ(t_run_mono(1, churn_root, &c), 0);
    ASSERT_EQ(atomic_load(&ran), c.n);
#if defined(WEFT_TSAN)
    ASSERT(first_depth > 0); /* the depths compared were real */
#endif
}
