/*
 * parked: N tasks each block; once all are parked, peak RSS (VmHWM) is
 * read; then all are released and joined. One worker. Value: (peak RSS -
 * RSS before spawning) / N, in bytes/task. See ../shared/bench/SPEC.md; the
 * peers are Go goroutines and Tokio tasks each receiving from their own
 * channel.
 *
 * Stand-in until weft has channels: the spec has each task block receiving
 * from its own channel and be released by a send. weft has no channels yet
 * (a later issue), so each task blocks in weft_sleep_until(WEFT_NEVER) and
 * all are released by one weft_scope_cancel() of their scope; each then
 * adds its ordinal (its spawn argument, the value the peers send it) to a
 * sum, which is checked as the peers check theirs. The channel version
 * replaces this when channels land; until then the figure leaves out the
 * memory of a channel per task, which the peers' figures include.
 *
 * Peak RSS is read inside the root task, before the first spawn and once
 * every task is parked, as the peers read it. The first argument overrides
 * N, the number of tasks.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "weft.h"

static atomic_long parked;    /* tasks that have started (and so block) */
static atomic_llong sum;      /* sum of the released tasks' ordinals */
static atomic_long bad_wakes; /* tasks whose sleep ended otherwise */

struct bench {
    long n;         /* tasks to park */
    int64_t before; /* VmHWM before the first spawn, bytes */
    int64_t after;  /* VmHWM with every task parked, bytes */
};

/* VmHWM from /proc/self/status in bytes, or -1. */
static int64_t peak_rss(void)
{
    char line[256];
    long long kb = -1;
    FILE *f = fopen("/proc/self/status", "r");

    if (!f)
        return -1;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "VmHWM:", 6) == 0 &&
            sscanf(line + 6, "%lld", &kb) == 1)
            break;
    fclose(f);
    return kb < 0 ? -1 : (int64_t)kb * 1024;
}

static int sleeper(void *arg)
{
    int err;

    atomic_fetch_add_explicit(&parked, 1, memory_order_relaxed);
    err = weft_sleep_until(WEFT_NEVER);
    if (err == -ECANCELED)
        atomic_fetch_add_explicit(&sum, (intptr_t)arg, memory_order_relaxed);
    else
        atomic_fetch_add_explicit(&bad_wakes, 1, memory_order_relaxed);
    return 0;
}

static int root(void *arg)
{
    struct bench *b = arg;
    weft_scope *s;
    int err, join;

    b->before = peak_rss();
    err = weft_scope_open(&s, NULL);
    if (err < 0)
        return err;
    for (long i = 0; i < b->n && err >= 0; i++)
        err = weft_spawn(s, sleeper, (void *)(intptr_t)i);
    while (err >= 0 && atomic_load(&parked) < b->n)
        weft_yield();
    weft_yield(); /* let a task caught between its add and its sleep block */
    b->after = peak_rss();
    weft_scope_cancel(s);
    join = weft_scope_join(s);
    weft_scope_free(s);
    if (err < 0)
        return err;
    return join == -ECANCELED ? 0 : join;
}

int main(int argc, char **argv)
{
    struct bench b = {.n = bench_n(argc, argv, 100000)};
    weft_config cfg = {.workers = 1};
    long long want = (long long)b.n * (b.n - 1) / 2;
    int err = weft_run(&cfg, root, &b);

    if (err < 0) {
        fprintf(stderr, "parked: %s\n", weft_strerror(err));
        return 1;
    }
    if (b.before < 0 || b.after < 0) {
        fprintf(stderr, "parked: cannot read VmHWM from /proc/self/status\n");
        return 1;
    }
    if (atomic_load(&bad_wakes) != 0 || atomic_load(&sum) != want) {
        fprintf(stderr,
                "checksum failed: sum %lld != %lld (%ld woken other than "
                "by cancellation)\n",
                (long long)atomic_load(&sum), want, atomic_load(&bad_wakes));
        return 1;
    }
    printf("BENCH parked weft %.0f bytes/task\n",
           (double)(b.after - b.before) / (double)b.n);
    return 0;
}
