/* SPDX-License-Identifier: MIT */
/*
 * wake: a token passed N times around a ring of T tasks (1,000), each
 * receiving from its own rendezvous channel and sending to the next one's;
 * every hop wakes a task that has been parked for T hops. One worker.
 * Value: elapsed / N, in ns/hop. The first argument overrides N
 * (1,000,000; wake-compact: 100,000).
 *
 * Built a second time as wake_compact (bench/wake_compact.c defines
 * WAKE_COMPACT): the tasks are compact (weft_scope_opts.compact), parked
 * long enough for their worker to have given their stacks back, so every
 * hop copies one stack in again (a page fault) and gives another back
 * (a copy and a madvise): the cost of waking an idle compact task, beside
 * wake's for a plain one. No peers: not in bench/compare.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench.h"
#include "weft.h"

#if !defined(WAKE_COMPACT)
#define WAKE_COMPACT 0
#endif
#define TASKS 1000

struct bench {
    long n;            /* hops */
    weft_chan **chans; /* one per task */
    weft_chan *done;   /* the token's end */
    atomic_long parked;
    int64_t elapsed_ns;
};

struct hop {
    struct bench *b;
    long i;
};

static int hopper(void *arg)
{
    struct hop *h = arg;
    struct bench *b = h->b;
    weft_chan *next = b->chans[(h->i + 1) % TASKS];
    int64_t tok;
    int err;

    atomic_fetch_add_explicit(&b->parked, 1, memory_order_relaxed);
    while ((err = weft_chan_recv(b->chans[h->i], &tok)) == 0) {
        if (tok == 0) {
            err = weft_chan_send(b->done, &tok);
        } else {
            tok--;
            err = weft_chan_send(next, &tok);
        }
        if (err < 0)
            return err;
    }
    return err == -EPIPE ? 0 : err;
}

static int root(void *arg)
{
    struct bench *b = arg;
    struct hop hops[TASKS];
    weft_scope *s;
    int err, join;
    int64_t tok = b->n, start;

    err = weft_scope_open(&s, &(weft_scope_opts){.compact = WAKE_COMPACT});
    if (err < 0)
        return err;
    for (long i = 0; i < TASKS && err >= 0; i++) {
        hops[i] = (struct hop){b, i};
        err = weft_spawn(s, hopper, &hops[i]);
    }
    while (err >= 0 && atomic_load(&b->parked) < TASKS)
        weft_yield();
    /* Idle for a moment: a compact task's stack is given back then. */
    if (err >= 0)
        err = weft_sleep_for(WEFT_MSEC);
    start = bench_clock_ns();
    if (err >= 0)
        err = weft_chan_send(b->chans[0], &tok);
    if (err >= 0)
        err = weft_chan_recv(b->done, &tok);
    b->elapsed_ns = bench_clock_ns() - start;
    if (err >= 0 && tok != 0) {
        fprintf(stderr, "checksum failed: token %lld at the end\n",
                (long long)tok);
        err = -EPROTO;
    }
    for (long i = 0; i < TASKS; i++)
        weft_chan_close(b->chans[i]);
    join = weft_scope_join(s);
    weft_scope_free(s);
    return err < 0 ? err : join;
}

int main(int argc, char **argv)
{
    struct bench b = {.n =
                          bench_n(argc, argv, WAKE_COMPACT ? 100000 : 1000000)};
    weft_config cfg = {.workers = 1};
    int err = 0;

    b.chans = calloc(TASKS, sizeof(*b.chans));
    if (!b.chans)
        return 1;
    for (long i = 0; i < TASKS && err >= 0; i++)
        err = weft_chan_new(&b.chans[i], sizeof(int64_t), 0);
    if (err >= 0)
        err = weft_chan_new(&b.done, sizeof(int64_t), 0);
    if (err >= 0)
        err = weft_run(&cfg, root, &b);
    for (long i = 0; i < TASKS; i++)
        if (b.chans[i])
            weft_chan_unref(b.chans[i]);
    if (b.done)
        weft_chan_unref(b.done);
    free(b.chans);
    if (err < 0) {
        fprintf(stderr, "wake: %s\n", weft_strerror(err));
        return 1;
    }
    printf("BENCH %s weft %.1f ns/hop\n",
           WAKE_COMPACT ? "wake-compact" : "wake",
           (double)b.elapsed_ns / (double)b.n);
    return 0;
}
