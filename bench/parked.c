/* SPDX-License-Identifier: MIT */
/*
 * parked: N tasks each block receiving from their own channel; once all
 * are parked, peak RSS (VmHWM) is read; then the root sends each its
 * ordinal and joins them all. One worker. Value: (peak RSS - RSS before
 * spawning) / N, in bytes/task, so the channels count, as in the peers
 * (Go goroutines and Tokio tasks each receiving from their own channel).
 * See bench/README.md; the peers are in bench/peers/.
 *
 * Each task adds what it received to a sum, checked as the peers check
 * theirs. Peak RSS is read inside the root task, before the first channel
 * and spawn and once every task is parked, as the peers read it. The
 * first argument overrides N, the number of tasks.
 *
 * Built a second time as parked_compact (bench/parked_compact.c defines
 * PARKED_COMPACT): the same, with the tasks compact (weft_scope_opts.compact:
 * a parked task's stack is copied out and its pages given back), its line
 * named parked-compact.
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

#if !defined(PARKED_COMPACT)
#define PARKED_COMPACT 0
#endif

static atomic_long parked; /* tasks that have started (and so block) */
static atomic_llong sum;   /* sum of the values the tasks received */

struct bench {
    long n;            /* tasks to park */
    weft_chan **chans; /* one per task, rendezvous */
    int64_t before;    /* VmHWM before the first spawn, bytes */
    int64_t after;     /* VmHWM with every task parked, bytes */
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

static int receiver(void *arg)
{
    weft_chan *ch = arg;
    int64_t v;
    int err;

    atomic_fetch_add_explicit(&parked, 1, memory_order_relaxed);
    err = weft_chan_recv(ch, &v);
    if (err < 0)
        return err;
    atomic_fetch_add_explicit(&sum, v, memory_order_relaxed);
    return 0;
}

static int root(void *arg)
{
    struct bench *b = arg;
    weft_scope *s;
    int err, join;
    long made = 0;

    b->before = peak_rss();
    b->chans = calloc((size_t)b->n, sizeof(*b->chans));
    if (!b->chans)
        return -ENOMEM;
    err = weft_scope_open(&s, &(weft_scope_opts){.compact = PARKED_COMPACT});
    if (err < 0) {
        free(b->chans);
        return err;
    }
    for (; made < b->n && err >= 0; made++) {
        err = weft_chan_new(&b->chans[made], sizeof(int64_t), 0);
        if (err >= 0)
            err = weft_spawn(s, receiver, b->chans[made]);
        else
            break;
    }
    while (err >= 0 && atomic_load(&parked) < b->n)
        weft_yield();
    weft_yield(); /* let a task caught between its add and its recv block */
    b->after = peak_rss();
    for (long i = 0; i < made; i++) {
        int64_t v = i;
        if (err >= 0)
            err = weft_chan_send(b->chans[i], &v);
        else
            weft_chan_close(b->chans[i]); /* failed: release the rest */
    }
    join = weft_scope_join(s);
    weft_scope_free(s);
    for (long i = 0; i < made; i++)
        weft_chan_unref(b->chans[i]);
    free(b->chans);
    return err < 0 ? err : join;
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
    if (atomic_load(&sum) != want) {
        fprintf(stderr, "checksum failed: sum %lld != %lld\n",
                (long long)atomic_load(&sum), want);
        return 1;
    }
    printf("BENCH %s weft %.0f bytes/task\n",
           PARKED_COMPACT ? "parked-compact" : "parked",
           (double)(b.after - b.before) / (double)b.n);
    return 0;
}
