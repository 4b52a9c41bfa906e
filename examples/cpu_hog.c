/* SPDX-License-Identifier: MIT */
/*
 * cpu_hog: a task that computes for a while without ever parking holds its
 * worker, and every other task on that worker waits for it. The watchdog
 * (weft_config.watchdog_ns, 100 ms by default; 10 ms here) notices and
 * names it. Then the two fixes: yield in the loop, or hand the work to the
 * blocking pool. The same work is done three times; only the first is
 * reported.
 *
 *   $ ./cpu_hog
 *   1. the hog: watchdog: task "hog" (spawned at .../examples/cpu_hog.c:103)
 *      held worker 0 for 13 ms without parking or yielding
 *      the hold ended after 59 ms
 *      reports: 1
 *   2. yielding in the loop: reports: 0
 *   3. on the blocking pool: reports: 0
 *
 * Exits 0 if the reports are as above, 1 if not.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>

#include "weft.h"

#define WORK_NS (60 * WEFT_MSEC) /* CPU time each version computes */

static atomic_int reports;

/* Called on the watchdog's thread instead of its line on stderr: when the
 * hold reaches the threshold, and again when it ends. */
static void on_report(const weft_watchdog_report *r, void *arg)
{
    (void)arg;
    if (r->ended) {
        printf("the hold ended after %lld ms\n   ",
               (long long)(r->held_ns / WEFT_MSEC));
        fflush(stdout);
        return;
    }
    printf("watchdog: task \"%s\" (spawned at %s:%d) held worker %d for %lld "
           "ms without parking or yielding\n   ",
           r->name, r->file, r->line, r->worker,
           (long long)(r->held_ns / WEFT_MSEC));
    fflush(stdout);
    atomic_fetch_add(&reports, 1);
}

static int64_t cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (int64_t)ts.tv_sec * WEFT_SEC + ts.tv_nsec;
}

/* The work: WORK_NS of CPU time in small steps; yield: weft_yield after
 * each step, so that the worker runs whatever else is ready. */
static volatile unsigned long sink;

static void compute(int yield)
{
    int64_t end = cpu_now() + WORK_NS;
    unsigned long x = 1;
    while (cpu_now() < end) {
        for (int i = 0; i < 10000; i++)
            x = x * 6364136223846793005ul + 1442695040888963407ul;
        sink = x;
        if (yield)
            weft_yield();
    }
}

static int hog(void *arg)
{
    compute(0); /* never parks: holds the worker for all of WORK_NS */
    return 0;
}

static int polite(void *arg)
{
    compute(1); /* the fix when the work must stay on a worker */
    return 0;
}

static int on_pool(void *arg)
{
    compute(0); /* runs on a pool thread: the workers are free meanwhile */
    return 0;
}

static int offloaded(void *arg)
{
    return weft_blocking(on_pool, NULL); /* the other fix */
}

static int run_one(void *arg)
{
    weft_fn fn = *(weft_fn *)arg;
    weft_scope *s;
    if (weft_scope_open(&s, NULL) != 0)
        return 1;
    weft_spawn_opts o = {.name = "hog"};
    if (weft_spawn_ex(s, fn, NULL, &o) < 0)
        return 1;
    int rc = weft_scope_join(s);
    weft_scope_free(s);
    return rc;
}

static int version(const char *title, weft_fn fn)
{
    printf("%s: ", title);
    fflush(stdout);
    atomic_store(&reports, 0);
    weft_config cfg = {
        .workers = 1, .watchdog_ns = 10 * WEFT_MSEC, .watchdog_fn = on_report};
    int rc = weft_run(&cfg, run_one, &fn);
    int n = atomic_load(&reports);
    printf("reports: %d\n", n);
    return rc != 0 ? -1 : n;
}

int main(void)
{
    int hogged = version("1. the hog", hog);
    int yielded = version("2. yielding in the loop", polite);
    int pooled = version("3. on the blocking pool", offloaded);
    return hogged == 1 && yielded == 0 && pooled == 0 ? 0 : 1;
}
