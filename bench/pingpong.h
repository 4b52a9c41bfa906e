/* SPDX-License-Identifier: MIT */
/*
 * The body of pingpong and timeout, which differ only in the receive and
 * in how the echo task ends. The including file defines:
 *   PP_NAME      "pingpong" or "timeout"
 *   PP_DEADLINE  0: plain receives, the echo task answers until the ping
 *                channel is closed (as the pingpong peers); > 0: every
 *                receive is made under weft_now() + PP_DEADLINE and the echo
 *                task makes exactly N receives (as the timeout peers).
 * and may define:
 *   PP_COMPACT   1: both tasks are compact (weft_scope_opts.compact), so
 *                every park gives the stack back and every resume copies
 *                it in (pingpong-compact); default 0
 *   PP_N         the default N; default 1,000,000
 *
 * Two tasks, two rendezvous (capacity 0) channels of int64, N round trips,
 * one worker; the echo task answers v with v + 1 and the pinger's sum is
 * checked against N(N-1)/2 + N. main() makes the channels before weft_run
 * and drops their references after it; the tasks borrow them, which is safe
 * because the root joins their scope first. The clock runs inside the root
 * task, from before the first spawn to after the join. The first argument
 * overrides N, the number of round trips.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench.h"
#include "weft.h"

#if !defined(PP_COMPACT)
#define PP_COMPACT 0
#endif
#if !defined(PP_N)
#define PP_N 1000000
#endif

struct bench {
    long n;             /* round trips */
    weft_chan *ping;    /* pinger -> echo */
    weft_chan *pong;    /* echo -> pinger */
    int64_t sum;        /* sum of the pinger's answers */
    int64_t elapsed_ns; /* from before the first spawn to after the join */
};

/* A receive as this benchmark makes it; a deadline that passes fails the
 * run. */
static int pp_recv(weft_chan *c, int64_t *v)
{
    if (PP_DEADLINE <= 0)
        return weft_chan_recv(c, v);
    int err = weft_chan_recv_until(c, v, weft_now() + PP_DEADLINE);
    if (err == -ETIMEDOUT)
        fprintf(stderr, PP_NAME ": receive timed out\n");
    return err;
}

static int echo(void *arg)
{
    struct bench *b = arg;
    int64_t v;
    int err;

    for (long i = 0; PP_DEADLINE <= 0 || i < b->n; i++) {
        err = pp_recv(b->ping, &v);
        if (err == -EPIPE && PP_DEADLINE <= 0)
            return 0; /* the pinger closed: done */
        if (err < 0)
            return err;
        v++;
        err = weft_chan_send(b->pong, &v);
        if (err < 0)
            return err;
    }
    return 0;
}

static int pinger(void *arg)
{
    struct bench *b = arg;
    int64_t sum = 0, v;
    int err = 0;

    for (int64_t i = 0; i < b->n; i++) {
        err = weft_chan_send(b->ping, &i);
        if (err < 0)
            break;
        err = pp_recv(b->pong, &v);
        if (err < 0)
            break;
        sum += v;
    }
    if (PP_DEADLINE <= 0)
        weft_chan_close(b->ping); /* the echo task's signal to finish */
    b->sum = sum;
    return err < 0 ? err : 0;
}

static int root(void *arg)
{
    struct bench *b = arg;
    weft_scope *s;
    int err, join;
    int64_t start;

    err = weft_scope_open(&s, &(weft_scope_opts){.compact = PP_COMPACT});
    if (err < 0)
        return err;
    start = bench_clock_ns();
    err = weft_spawn(s, echo, b);
    if (err >= 0)
        err = weft_spawn(s, pinger, b);
    join = weft_scope_join(s);
    b->elapsed_ns = bench_clock_ns() - start;
    weft_scope_free(s);
    return err < 0 ? err : join;
}

int main(int argc, char **argv)
{
    struct bench b = {.n = bench_n(argc, argv, PP_N)};
    weft_config cfg = {.workers = 1, .faults = bench_faults()};
    int64_t want = (int64_t)b.n * (b.n - 1) / 2 + b.n;
    int err;

    if ((err = weft_chan_new(&b.ping, sizeof(int64_t), 0)) < 0 ||
        (err = weft_chan_new(&b.pong, sizeof(int64_t), 0)) < 0) {
        fprintf(stderr, PP_NAME ": %s\n", weft_strerror(err));
        return 1;
    }
    err = weft_run(&cfg, root, &b);
    weft_chan_unref(b.ping);
    weft_chan_unref(b.pong);
    if (err < 0) {
        fprintf(stderr, PP_NAME ": %s\n", weft_strerror(err));
        return 1;
    }
    if (b.sum != want) {
        fprintf(stderr, "checksum failed: sum %" PRId64 " != %" PRId64 "\n",
                b.sum, want);
        return 1;
    }
    printf("BENCH " PP_NAME " weft %.1f ns/roundtrip\n",
           (double)b.elapsed_ns / (double)b.n);
    return 0;
}
