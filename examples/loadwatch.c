/* SPDX-License-Identifier: MIT */
/*
 * loadwatch: a task that computes 30 ms at a time (a busy loop, never
 * parking) between 5 ms sleeps, beside a ticker that wants to run every
 * 10 ms on the same worker. The ticker is late by up to 30 ms at every
 * tick. What shows it:
 *
 * - the slow slices in weft_stats_get: runs of one task without a park or
 *   yield that reached weft_config.slow_slice_ns (10 ms by default), and
 *   the tasks with the longest slices, by name;
 * - the lag: every timer wake that ran 1 ms or more late is counted, so
 *   p99, p99.9 and the maximum show the ticker's lateness;
 * - the watchdog (its threshold set to 20 ms here, 100 ms by default),
 *   when a hold reaches it and when it ends.
 *
 *   $ ./loadwatch
 *   (the ticker's own measure, then the figures: docs/debugging.md,
 *   "Slow slices", shows a run)
 *
 * Exits 0 if the compute task is named among the longest slices and the
 * lag maximum is above 10 ms, 1 if not.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "weft.h"

#define ROUNDS 10
#define COMPUTE_NS (30 * WEFT_MSEC)
#define TICK_NS (10 * WEFT_MSEC)

static atomic_int done;
static int64_t worst_tick; /* the ticker's own measure: its worst lateness */

static void on_watchdog(const weft_watchdog_report *r, void *arg)
{
    (void)arg;
    if (r->ended)
        printf("watchdog: task \"%s\" held worker %d for %lld ms in all\n",
               r->name, r->worker, (long long)(r->held_ns / WEFT_MSEC));
    else
        printf("watchdog: task \"%s\" (%s:%d) has held worker %d for %lld "
               "ms\n",
               r->name, r->file, r->line, r->worker,
               (long long)(r->held_ns / WEFT_MSEC));
}

/* Computes 30 ms (reading weft time, never parking), sleeps 5 ms. */
static int compute(void *arg)
{
    (void)arg;
    for (int i = 0; i < ROUNDS; i++) {
        int64_t until = weft_now() + COMPUTE_NS;
        while (weft_now() < until) {
        }
        weft_sleep_for(5 * WEFT_MSEC);
    }
    atomic_store(&done, 1);
    return 0;
}

static int ticker(void *arg)
{
    (void)arg;
    int64_t next = weft_now() + TICK_NS;
    while (!atomic_load(&done)) {
        weft_sleep_until(next);
        int64_t late = weft_now() - next;
        if (late > worst_tick)
            worst_tick = late;
        next += TICK_NS;
        if (next < weft_now())
            next = weft_now() + TICK_NS; /* skip the ticks missed */
    }
    return 0;
}

static void print_ms(const char *label, int64_t ns)
{
    if (ns < 0)
        printf(" %s -", label); /* -ENODATA: nothing counted */
    else
        printf(" %s < %.1f ms", label, (double)ns / WEFT_MSEC);
}

static int show(void)
{
    weft_stats st;
    if (weft_stats_get(&st, NULL, 0) < 0)
        return 1;
    const weft_worker_stats *a = &st.all;
    printf("ticker: worst tick %.1f ms late\n", (double)worst_tick / WEFT_MSEC);
    printf("switches %llu, parks %llu, yields %llu\n",
           (unsigned long long)a->switches, (unsigned long long)a->parks,
           (unsigned long long)a->yields);
    printf("lag:");
    print_ms("p50", weft_lag_quantile(a, 0.5));
    print_ms("p99", weft_lag_quantile(a, 0.99));
    print_ms("p99.9", weft_lag_quantile(a, 0.999));
    printf(", max %.1f ms\n", (double)a->lag_max_ns / WEFT_MSEC);
    printf("slow slices (10 ms or more): %llu; longest:\n",
           (unsigned long long)a->slow_slices);
    int named = 0;
    for (int i = 0; i < WEFT_SLICE_TOP && a->top[i].id; i++) {
        const weft_slice_info *e = &a->top[i];
        printf("  \"%s\" (task %llu.%llu, %s:%d) on worker %d: %.1f ms, "
               "%llu slow\n",
               e->name, (unsigned long long)(e->id >> 40),
               (unsigned long long)(e->id & ((1ull << 40) - 1)),
               strrchr(e->file, '/') ? strrchr(e->file, '/') + 1 : e->file,
               e->line, e->worker, (double)e->ns / WEFT_MSEC,
               (unsigned long long)e->slow);
        named |= strcmp(e->name, "compute") == 0;
    }
    return named && a->lag_max_ns > 10 * WEFT_MSEC ? 0 : 1;
}

static int root(void *arg)
{
    (void)arg;
    weft_scope *s;
    if (weft_scope_open(&s, NULL) != 0)
        return 1;
    weft_spawn_opts t = {.name = "ticker"}, c = {.name = "compute"};
    if (weft_spawn_ex(s, ticker, NULL, &t) < 0 ||
        weft_spawn_ex(s, compute, NULL, &c) < 0)
        return 1;
    int rc = weft_scope_join(s);
    weft_scope_free(s);
    return rc ? rc : show();
}

int main(void)
{
    weft_config cfg = {.workers = 1,
                       .watchdog_ns = 20 * WEFT_MSEC,
                       .watchdog_fn = on_watchdog};
    return weft_run(&cfg, root, NULL) == 0 ? 0 : 1;
}
