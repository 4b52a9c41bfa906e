/* SPDX-License-Identifier: MIT */
/*
 * ring: M=1,000 actors in a ring, each with a bounded mailbox of capacity
 * 16 and int64 messages, each forwarding the token it receives to the next
 * with weft_actor_tell after decrementing it. The token starts at
 * N=1,000,000 in the first actor's mailbox; the actor that receives 0 ends
 * the run by sending it to the root on a channel, and the root checks that
 * it is 0. One worker. Value: elapsed / N, in ns/hop. See bench/README.md;
 * the peers (bench/peers/) are goroutines with chan mailboxes
 * (GOMAXPROCS(1)), Tokio tasks with mpsc mailboxes (current_thread), and
 * Erlang processes (erl +S 1:1).
 *
 * Spawning the ring and stopping it are not timed: the root spawns the
 * actors, links them, and asks each once (answered at once) so that every
 * actor is running and waiting on its mailbox; the clock then runs from
 * before the first tell to after the root has received the final token. The
 * first argument overrides N, the number of hops.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench.h"
#include "weft.h"

#define M 1000

struct hop {
    weft_actor *next; /* borrowed: the root holds every reference */
    weft_chan *done;  /* where the actor that receives 0 sends it */
};

struct bench {
    long n;             /* hops */
    weft_chan *done;    /* int64, capacity 1 */
    struct hop hops[M]; /* each actor's state */
    weft_actor *ring[M];
    int64_t token;      /* what the root received on done */
    int64_t elapsed_ns; /* from before the first tell to the final token */
};

/* An actor's behaviour: forwards the token, decremented, to the next; the
 * one that receives 0 hands it to the root. An ask (the root's, before the
 * clock starts) is answered at once: the actor is running. */
static int hop(void *state, weft_actor_msg *m)
{
    const struct hop *h = state;
    int64_t t;

    if (m->kind == WEFT_MSG_ASK)
        return weft_actor_reply(m, NULL);
    if (m->kind != WEFT_MSG_TELL)
        return -EINVAL;
    t = *(const int64_t *)m->data;
    if (t == 0)
        return weft_chan_send(h->done, &t);
    t--;
    return weft_actor_tell(h->next, &t, WEFT_NEVER);
}

static int root(void *arg)
{
    struct bench *b = arg;
    weft_actor_opts o = {
        .fn = hop,
        .msg_size = sizeof(int64_t),
        .capacity = 16,
        .name = "hop",
    };
    int64_t token = b->n;
    weft_scope *s;
    int err = 0, join, k;
    int64_t start;

    err = weft_scope_open(&s, NULL);
    if (err < 0)
        return err;
    /* The ring: spawned, linked, and every actor asked once, so that all
     * are running and waiting on their mailboxes before the clock starts. */
    for (k = 0; k < M; k++) {
        b->hops[k].done = b->done;
        o.state = &b->hops[k];
        err = weft_actor_spawn(s, &o, &b->ring[k]);
        if (err < 0)
            break;
    }
    for (int i = 0; err >= 0 && i < M; i++)
        b->hops[i].next = b->ring[(i + 1) % M];
    for (int i = 0; err >= 0 && i < M; i++)
        err = weft_actor_ask(b->ring[i], &token, NULL, WEFT_NEVER);
    if (err >= 0) {
        start = bench_clock_ns();
        err = weft_actor_tell(b->ring[0], &token, WEFT_NEVER);
        if (err >= 0)
            err = weft_chan_recv(b->done, &b->token);
        b->elapsed_ns = bench_clock_ns() - start;
    }
    for (int i = 0; i < k; i++)
        weft_actor_stop(b->ring[i], WEFT_STOP_DRAIN);
    join = weft_scope_join(s);
    for (int i = 0; i < k; i++)
        weft_actor_unref(b->ring[i]);
    weft_scope_free(s);
    return err < 0 ? err : join;
}

int main(int argc, char **argv)
{
    static struct bench b; /* 24 KiB */
    weft_config cfg = {.workers = 1};
    int err;

    b.n = bench_n(argc, argv, 1000000);
    b.token = -1;
    if ((err = weft_chan_new(&b.done, sizeof(int64_t), 1)) < 0) {
        fprintf(stderr, "ring: %s\n", weft_strerror(err));
        return 1;
    }
    err = weft_run(&cfg, root, &b);
    weft_chan_unref(b.done);
    if (err < 0) {
        fprintf(stderr, "ring: %s\n", weft_strerror(err));
        return 1;
    }
    if (b.token != 0) {
        fprintf(stderr, "checksum failed: final token %" PRId64 " != 0\n",
                b.token);
        return 1;
    }
    printf("BENCH ring weft %.1f ns/hop\n", (double)b.elapsed_ns / (double)b.n);
    return 0;
}
