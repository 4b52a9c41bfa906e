/* SPDX-License-Identifier: MIT */
/*
 * chanflow: 4 producers and 4 consumers share one channel of int64 with
 * capacity 1024; N messages in all (each producer sends N/4 values); when
 * every producer has finished, the channel is closed, and the consumers
 * receive until it is drained. All cores. Value: messages / elapsed, in
 * Mmsg/s. See bench/README.md; the peers (bench/peers/) are Go (chan int64
 * of capacity 1024, closed after a WaitGroup of the producers) and Tokio
 * (async_channel::bounded(1024), closed once the producers are joined).
 *
 * Producer p sends p*per .. p*per + per-1, so every value 0 .. total-1 is
 * sent once; each consumer adds up what it receives and counts it, and the
 * totals are checked against total(total-1)/2 and total, as the peers do.
 *
 * The scopes do what the peers' wait groups do: the consumers are spawned
 * into an outer scope, the producers into a scope nested in it; joining
 * the producers' scope, then weft_chan_close(), is Go's pwg.Wait() and
 * close(ch); joining the consumers' scope is cwg.Wait(). If a task fails,
 * the fail-fast policy cancels the others, and the channel is closed
 * anyway so that no consumer waits for ever.
 *
 * main() makes the channel before weft_run and drops its reference after it;
 * the tasks borrow it, as the root joins them first. The clock runs inside the
 * root task, from before the first spawn to after the consumers' join. The
 * first argument overrides N, the number of messages in all (rounded down to a
 * multiple of 4, as the peers do).
 *
 * A second argument makes a variant, to see what a stolen consumer costs
 * (as if an idle worker had taken it before it started): "split" starts
 * the last consumer on the other worker (spawned there by a task pinned
 * to it; BENCH line chanflow-split); "split-movable" does the same in a
 * scope with weft_scope_opts.movable = 1, so that the consumer may follow
 * the producers that wake it (chanflow-split-movable). stderr then says
 * where each consumer started and ended and how many moves the runtime
 * made. Two workers for the variants, every core otherwise.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench.h"
#include "weft.h"

#define PRODUCERS 4
#define CONSUMERS 4

struct consumer {
    weft_chan *ch;   /* the shared channel, borrowed */
    int64_t sum;     /* sum of the values received, written at the end */
    int64_t count;   /* values received, written at the end */
    int first, last; /* its worker at its start and at its end */
};

struct producer {
    weft_chan *ch; /* the shared channel, borrowed */
    int64_t base;  /* first value to send */
    int64_t per;   /* values to send */
};

struct bench {
    int64_t per;                  /* messages per producer */
    weft_chan *ch;                /* the channel, capacity 1024 */
    struct producer p[PRODUCERS]; /* the producers' arguments */
    struct consumer c[CONSUMERS]; /* the consumers' arguments and results */
    int64_t elapsed_ns;           /* from the first spawn to the last join */
    int split;                    /* the last consumer starts on worker 1 */
    int movable;                  /* the consumers' scope's movable */
    weft_scope *consumers;        /* their scope, for the split's spawner */
    uint64_t moved;               /* tasks moved between workers */
};

static int consume(void *arg)
{
    struct consumer *c = arg;
    int64_t sum = 0, count = 0, v;
    int err;

    c->first = weft_worker_id();
    while ((err = weft_chan_recv(c->ch, &v)) == 0) {
        sum += v;
        count++;
    }
    c->sum = sum;
    c->count = count;
    c->last = weft_worker_id();
    return err == -EPIPE ? 0 : err;
}

static int produce(void *arg)
{
    struct producer *p = arg;

    for (int64_t i = 0; i < p->per; i++) {
        int64_t v = p->base + i;
        int err = weft_chan_send(p->ch, &v);
        if (err < 0)
            return err;
    }
    return 0;
}

/* Spawns the producers into a scope of their own, waits for them, and
 * closes the channel whatever happened. */
static int run_producers(struct bench *b)
{
    weft_scope *s;
    int err, join;

    err = weft_scope_open(&s, NULL);
    if (err < 0) {
        weft_chan_close(b->ch);
        return err;
    }
    for (int i = 0; i < PRODUCERS && err >= 0; i++) {
        b->p[i] = (struct producer){b->ch, i * b->per, b->per};
        err = weft_spawn(s, produce, &b->p[i]);
    }
    join = weft_scope_join(s);
    weft_scope_free(s);
    weft_chan_close(b->ch);
    return err < 0 ? err : join;
}

/* The split's spawner, pinned to worker 1: the last consumer starts
 * there. */
static int far_spawner(void *arg)
{
    struct bench *b = arg;
    int err = weft_spawn(b->consumers, consume, &b->c[CONSUMERS - 1]);
    return err < 0 ? err : 0;
}

static int root(void *arg)
{
    struct bench *b = arg;
    weft_scope *s;
    int err, join;
    int64_t start;

    err = weft_scope_open(&s, &(weft_scope_opts){.movable = b->movable});
    if (err < 0)
        return err;
    b->consumers = s;
    start = bench_clock_ns();
    for (int i = 0; i < CONSUMERS && err >= 0; i++) {
        b->c[i].ch = b->ch;
        if (b->split && i == CONSUMERS - 1)
            err = weft_spawn_ex(s, far_spawner, b,
                                &(weft_spawn_opts){.worker = 2});
        else
            err = weft_spawn(s, consume, &b->c[i]);
    }
    if (err >= 0)
        err = run_producers(b);
    else
        weft_chan_close(b->ch);
    join = weft_scope_join(s);
    b->elapsed_ns = bench_clock_ns() - start;
    weft_stats st;
    if (weft_stats_get(&st, NULL, 0) > 0)
        b->moved = st.all.moved;
    weft_scope_free(s);
    return err < 0 ? err : join;
}

int main(int argc, char **argv)
{
    static struct bench b;
    weft_config cfg = {.workers = 0}; /* one per online CPU */
    const char *variant;
    int64_t total, want, sum = 0, count = 0;
    int err;

    variant = bench_split("chanflow", argc, argv, &b.split, &b.movable);
    if (b.split)
        cfg.workers = 2;
    b.per = bench_n(argc, argv, 10000000) / PRODUCERS;
    total = b.per * PRODUCERS;
    want = total * (total - 1) / 2;
    err = weft_chan_new(&b.ch, sizeof(int64_t), 1024);
    if (err < 0) {
        fprintf(stderr, "chanflow: %s\n", weft_strerror(err));
        return 1;
    }
    err = weft_run(&cfg, root, &b);
    weft_chan_unref(b.ch);
    if (err < 0) {
        fprintf(stderr, "chanflow: %s\n", weft_strerror(err));
        return 1;
    }
    for (int i = 0; i < CONSUMERS; i++) {
        sum += b.c[i].sum;
        count += b.c[i].count;
    }
    if (sum != want || count != total) {
        fprintf(stderr,
                "checksum failed: sum %" PRId64 " (want %" PRId64
                "), count %" PRId64 " (want %" PRId64 ")\n",
                sum, want, count, total);
        return 1;
    }
    if (b.split) {
        fprintf(stderr, "chanflow%s: consumers' workers (start>end):", variant);
        for (int i = 0; i < CONSUMERS; i++)
            fprintf(stderr, " %d>%d", b.c[i].first, b.c[i].last);
        fprintf(stderr, "; %" PRIu64 " moves\n", b.moved);
    }
    printf("BENCH chanflow%s weft %.2f Mmsg/s\n", variant,
           (double)total / ((double)b.elapsed_ns / 1e9) / 1e6);
    return 0;
}
