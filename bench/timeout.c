/*
 * timeout: pingpong with deadlines. Two tasks, two rendezvous (capacity 0)
 * channels of int64, N round trips, and every receive is made under a 1 s
 * deadline. One worker. Value: elapsed / N, in ns/roundtrip. See
 * ../shared/bench/SPEC.md; the peers are Go (one reused time.Timer per
 * goroutine, Reset before a select on the channel and the timer, Stop
 * after it) and Tokio (each mpsc recv wrapped in tokio::time::timeout).
 *
 * Every receive is weft_chan_recv_until(c, &v, weft_now() + WEFT_SEC); the
 * deadline never passes, so -ETIMEDOUT fails the run. With one worker each
 * receive finds its channel empty (the other task has not run yet), so it
 * arms its timer, blocks, and disarms the timer when the value arrives.
 * As in the peers, the echo task makes exactly N receives (there is no
 * close), and the pinger's sum of answers is checked against N(N-1)/2 + N.
 *
 * main() makes the channels before weft_run and drops their references after
 * it; the two tasks borrow them, as the root joins them first. The clock runs
 * inside the root task, from before the first spawn to after the join. The
 * first argument overrides N, the number of round trips.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench.h"
#include "weft.h"

#define DEADLINE WEFT_SEC /* on every receive, from its start */

struct bench {
    long n;             /* round trips */
    weft_chan *ping;    /* pinger -> echo */
    weft_chan *pong;    /* echo -> pinger */
    int64_t sum;        /* sum of the pinger's answers */
    int64_t elapsed_ns; /* from before the first spawn to after the join */
};

/* Receives from c under the deadline. -ETIMEDOUT fails the run. */
static int recv_deadline(weft_chan *c, int64_t *v)
{
    int err = weft_chan_recv_until(c, v, weft_now() + DEADLINE);

    if (err == -ETIMEDOUT)
        fprintf(stderr, "timeout: receive timed out\n");
    return err;
}

/* Answers N pings with value + 1. */
static int echo(void *arg)
{
    struct bench *b = arg;
    int64_t v;
    int err;

    for (long i = 0; i < b->n; i++) {
        err = recv_deadline(b->ping, &v);
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
    int err;

    for (int64_t i = 0; i < b->n; i++) {
        err = weft_chan_send(b->ping, &i);
        if (err < 0)
            return err;
        err = recv_deadline(b->pong, &v);
        if (err < 0)
            return err;
        sum += v;
    }
    b->sum = sum;
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
    struct bench b = {.n = bench_n(argc, argv, 1000000)};
    weft_config cfg = {.workers = 1};
    int64_t want = (int64_t)b.n * (b.n - 1) / 2 + b.n;
    int err;

    if ((err = weft_chan_new(&b.ping, sizeof(int64_t), 0)) < 0 ||
        (err = weft_chan_new(&b.pong, sizeof(int64_t), 0)) < 0) {
        fprintf(stderr, "timeout: %s\n", weft_strerror(err));
        return 1;
    }
    err = weft_run(&cfg, root, &b);
    weft_chan_unref(b.ping);
    weft_chan_unref(b.pong);
    if (err < 0) {
        fprintf(stderr, "timeout: %s\n", weft_strerror(err));
        return 1;
    }
    if (b.sum != want) {
        fprintf(stderr, "checksum failed: sum %" PRId64 " != %" PRId64 "\n",
                b.sum, want);
        return 1;
    }
    printf("BENCH timeout weft %.1f ns/roundtrip\n",
           (double)b.elapsed_ns / (double)b.n);
    return 0;
}
