/* SPDX-License-Identifier: MIT */
/*
 * switch: two tasks each call weft_yield() N times on one worker.
 * Value: elapsed / (2N), in ns/switch. See bench/README.md; the peers
 * are Go's runtime.Gosched() with GOMAXPROCS(1) and Tokio's yield_now() on a
 * current_thread runtime.
 *
 * The clock runs inside the root task, from before the first spawn to after
 * the scope join, as the Go and Tokio peers time theirs (Go from its main
 * goroutine, Tokio inside block_on). The first argument overrides N, the
 * number of yields per task.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "bench.h"
#include "weft.h"

struct yielder {
    long n;      /* yields to make */
    long yields; /* yields made, for the checksum */
};

struct bench {
    long n;              /* yields per task */
    struct yielder t[2]; /* the two tasks' arguments */
    int64_t elapsed_ns;  /* from before the first spawn to after the join */
};

static int yielder(void *arg)
{
    struct yielder *y = arg;

    for (long i = 0; i < y->n; i++) {
        int err = weft_yield();
        if (err < 0)
            return err;
        y->yields++;
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
    for (int i = 0; i < 2 && err >= 0; i++) {
        b->t[i].n = b->n;
        err = weft_spawn(s, yielder, &b->t[i]);
    }
    join = weft_scope_join(s);
    b->elapsed_ns = bench_clock_ns() - start;
    weft_scope_free(s);
    return err < 0 ? err : join;
}

int main(int argc, char **argv)
{
    struct bench b = {.n = bench_n(argc, argv, 10000000)};
    weft_config cfg = {.workers = 1, .faults = bench_faults()};
    int err = weft_run(&cfg, root, &b);

    if (err < 0) {
        fprintf(stderr, "switch: %s\n", weft_strerror(err));
        return 1;
    }
    if (b.t[0].yields + b.t[1].yields != 2 * b.n) {
        fprintf(stderr, "checksum failed: yields %ld != %ld\n",
                b.t[0].yields + b.t[1].yields, 2 * b.n);
        return 1;
    }
    printf("BENCH switch weft %.1f ns/switch\n",
           (double)b.elapsed_ns / (double)(2 * b.n));
    return 0;
}
