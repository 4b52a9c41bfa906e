/* SPDX-License-Identifier: MIT */
/*
 * mutex: 4 tasks each lock a weft_mutex, increment a shared counter and
 * unlock, N times; check counter == 4N. All cores. Value: elapsed / 4N, in
 * ns/op. See bench/README.md; the peers (bench/peers/) are Go's sync.Mutex
 * (which spins and lets a running goroutine barge in, as weft_mutex lets a
 * running task, without the spinning) and tokio::sync::Mutex (fair, FIFO
 * hand-off) on a multi-thread runtime.
 *
 * The counter is a plain int64 guarded by the mutex alone, as in the peers,
 * so a mutex that fails to exclude shows up as a wrong count. The clock
 * runs inside the root task, from before the first spawn to after the
 * scope join. The first argument overrides N, the lock/unlock pairs per
 * task.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench.h"
#include "weft.h"

#define TASKS 4

struct bench {
    long n;             /* lock/unlock pairs per task */
    weft_mutex mu;      /* guards counter */
    int64_t counter;    /* incremented under mu by every task */
    int64_t elapsed_ns; /* from before the first spawn to after the join */
};

static int locker(void *arg)
{
    struct bench *b = arg;
    int err;

    for (long i = 0; i < b->n; i++) {
        err = weft_mutex_lock(&b->mu);
        if (err < 0)
            return err;
        b->counter++;
        err = weft_mutex_unlock(&b->mu);
        if (err < 0)
            return err;
    }
    return 0;
}

static int root(void *arg)
{
    struct bench *b = arg;
    weft_scope *s;
    int err, join;
    int64_t start;

    err = weft_scope_open(&s, NULL);
    if (err < 0)
        return err;
    start = bench_clock_ns();
    for (int i = 0; i < TASKS && err >= 0; i++)
        err = weft_spawn(s, locker, b);
    join = weft_scope_join(s);
    b->elapsed_ns = bench_clock_ns() - start;
    weft_scope_free(s);
    return err < 0 ? err : join;
}

int main(int argc, char **argv)
{
    static struct bench b = {.mu = WEFT_MUTEX_INIT};
    weft_config cfg = {.workers = 0}; /* one per online CPU */
    int err;

    b.n = bench_n(argc, argv, 1000000);
    err = weft_run(&cfg, root, &b);
    if (err < 0) {
        fprintf(stderr, "mutex: %s\n", weft_strerror(err));
        return 1;
    }
    if (b.counter != (int64_t)TASKS * b.n) {
        fprintf(stderr, "checksum failed: counter %" PRId64 " != %" PRId64 "\n",
                b.counter, (int64_t)TASKS * b.n);
        return 1;
    }
    printf("BENCH mutex weft %.1f ns/op\n",
           (double)b.elapsed_ns / (double)(TASKS * b.n));
    return 0;
}
