/* SPDX-License-Identifier: MIT */
/*
 * restart: a supervisor (one_for_one, its one child permanent, intensity
 * < 0: no limit, no backoff) whose child fails as soon as it starts;
 * N=100,000 failures, each followed by the restart. One worker. Value:
 * elapsed / N, in ns/restart. See bench/README.md; the peer
 * (bench/peers/erlang) is Erlang's spawn_link of a process that exits at
 * once, its parent trapping the exit (erl +S 1:1), the primitive under an
 * OTP supervisor's restart.
 *
 * The child counts its starts. The first N fail at once (-EIO); the one
 * after the N-th failure asks the supervisor to stop and waits to be
 * stopped (a cancel: the child has no stop hook). Checked: the child
 * started N + 1 times and the supervisor counted N restarts. The clock
 * runs inside the root task, from before weft_sup_spawn to after
 * weft_sup_join_until. The first argument overrides N, the number of failures.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench.h"
#include "weft.h"

struct bench {
    long n;             /* failures */
    long starts;        /* the child's starts */
    long restarts;      /* as the supervisor counted them */
    weft_sup *sup;      /* set before the child first runs (one worker) */
    int64_t elapsed_ns; /* from before weft_sup_spawn to its wait */
};

/* The child: fails at once, N times; then stops its supervisor and waits
 * for the cancel that stops it. */
static int child(void *arg)
{
    struct bench *b = arg;
    weft_sup_stats ss;

    if (++b->starts <= b->n)
        return -EIO;
    weft_sup_stats_get(b->sup, &ss);
    b->restarts = ss.restarts;
    weft_sup_stop(b->sup);
    return weft_sleep_until(WEFT_NEVER); /* -ECANCELED */
}

static int root(void *arg)
{
    struct bench *b = arg;
    const weft_sup_opts o = {
        .strategy = WEFT_ONE_FOR_ONE,
        .intensity = -1, /* no limit */
        .name = "restart",
    };
    const weft_child_spec spec = {
        .name = "child",
        .start = child,
        .arg = b,
        .restart = WEFT_PERMANENT,
        .shutdown_ns = WEFT_SHUTDOWN_BRUTAL,
    };
    int err, status = 0;
    int64_t start;

    start = bench_clock_ns();
    err = weft_sup_spawn(NULL, &o, &spec, 1, &b->sup);
    if (err < 0)
        return err;
    err = weft_sup_join_until(b->sup, &status, WEFT_NEVER);
    b->elapsed_ns = bench_clock_ns() - start;
    if (err >= 0)
        weft_sup_free(b->sup);
    return err < 0 ? err : status;
}

int main(int argc, char **argv)
{
    struct bench b = {.n = bench_n(argc, argv, 100000), .restarts = -1};
    weft_config cfg = {.workers = 1};
    int err;

    err = weft_run(&cfg, root, &b);
    if (err < 0) {
        fprintf(stderr, "restart: %s\n", weft_strerror(err));
        return 1;
    }
    if (b.starts != b.n + 1 || b.restarts != b.n) {
        fprintf(stderr,
                "checksum failed: %ld starts, %ld restarts; want %ld and "
                "%ld\n",
                b.starts, b.restarts, b.n + 1, b.n);
        return 1;
    }
    printf("BENCH restart weft %.1f ns/restart\n",
           (double)b.elapsed_ns / (double)b.n);
    return 0;
}
