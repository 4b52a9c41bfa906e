/*
 * pingpong: two tasks, two rendezvous (capacity 0) channels of int64, N
 * round trips. One worker. Value: elapsed / N, in ns/roundtrip. See
 * ../shared/bench/SPEC.md; the peers are two goroutines on unbuffered
 * chan int64 with GOMAXPROCS(1), and two Tokio tasks on mpsc channels of
 * capacity 1 (Tokio has no rendezvous channel) on a current_thread runtime.
 *
 * As in the peers: the echo task answers every ping with value + 1 until
 * the ping channel is closed; the pinger sends 0 .. N-1, adds up the
 * answers, then closes ping. The sum is checked against N(N-1)/2 + N.
 *
 * main() makes the channels before weft_run and drops their one reference each
 * after it; the tasks borrow them, which is safe because the root joins their
 * scope before weft_run returns. The clock runs inside the root task, from
 * before the first spawn to after the scope join, as Go times from its main
 * goroutine and Tokio inside block_on. The first argument overrides N, the
 * number of round trips.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench.h"
#include "weft.h"

struct bench {
    long n;             /* round trips */
    weft_chan *ping;    /* pinger -> echo; the pinger closes it at the end */
    weft_chan *pong;    /* echo -> pinger */
    int64_t sum;        /* sum of the pinger's answers */
    int64_t elapsed_ns; /* from before the first spawn to after the join */
};

/* Answers every ping with value + 1 until ping is closed. */
static int echo(void *arg)
{
    struct bench *b = arg;
    int64_t v;
    int err;

    while ((err = weft_chan_recv(b->ping, &v)) == 0) {
        v++;
        err = weft_chan_send(b->pong, &v);
        if (err < 0)
            return err;
    }
    return err == -EPIPE ? 0 : err;
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
        err = weft_chan_recv(b->pong, &v);
        if (err < 0)
            break;
        sum += v;
    }
    weft_chan_close(b->ping); /* the echo task's signal to finish */
    b->sum = sum;
    return err;
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
        fprintf(stderr, "pingpong: %s\n", weft_strerror(err));
        return 1;
    }
    err = weft_run(&cfg, root, &b);
    weft_chan_unref(b.ping);
    weft_chan_unref(b.pong);
    if (err < 0) {
        fprintf(stderr, "pingpong: %s\n", weft_strerror(err));
        return 1;
    }
    if (b.sum != want) {
        fprintf(stderr, "checksum failed: sum %" PRId64 " != %" PRId64 "\n",
                b.sum, want);
        return 1;
    }
    printf("BENCH pingpong weft %.1f ns/roundtrip\n",
           (double)b.elapsed_ns / (double)b.n);
    return 0;
}
