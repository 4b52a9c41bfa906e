/* SPDX-License-Identifier: MIT */
/*
 * spawn: N tasks each add 1 to a shared atomic counter; wait for all; check
 * counter == N. All cores. Value: elapsed / N, in ns/task. See
 * bench/README.md; the peers (bench/peers/) are Go goroutines with a
 * sync.WaitGroup and tokio::spawn with an atomic count plus Notify on a
 * multi-thread runtime.
 *
 * The spawning loop runs in the root task, as Go's main goroutine and the
 * Tokio peer's spawning task do, and the clock runs there too: from before
 * the first spawn to after the scope join. The scope join is weft's way to
 * wait for all (Go's WaitGroup.Wait). The first argument overrides N.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "bench.h"
#include "weft.h"

static atomic_long counter; /* the shared counter every task adds 1 to */

struct bench {
    long n;             /* tasks to spawn */
    int64_t elapsed_ns; /* from before the first spawn to after the join */
};

static int add_one(void *arg)
{
    (void)arg;
    atomic_fetch_add_explicit(&counter, 1, memory_order_relaxed);
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
    for (long i = 0; i < b->n && err >= 0; i++)
        err = weft_spawn(s, add_one, NULL);
    join = weft_scope_join(s);
    b->elapsed_ns = bench_clock_ns() - start;
    weft_scope_free(s);
    return err < 0 ? err : join;
}

int main(int argc, char **argv)
{
    struct bench b = {.n = bench_n(argc, argv, 1000000)};
    weft_config cfg = {.workers = 0}; /* one per online CPU */
    int err = weft_run(&cfg, root, &b);
    long got = atomic_load(&counter);

    if (err < 0) {
        fprintf(stderr, "spawn: %s\n", weft_strerror(err));
        return 1;
    }
    if (got != b.n) {
        fprintf(stderr, "checksum failed: counter %ld != %ld\n", got, b.n);
        return 1;
    }
    printf("BENCH spawn weft %.1f ns/task\n",
           (double)b.elapsed_ns / (double)b.n);
    return 0;
}
