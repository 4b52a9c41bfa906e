/* SPDX-License-Identifier: MIT */
/*
 * The body of ask and ask2, which differ only in the number of workers. The
 * including file defines:
 *   ASK_NAME     "ask" or "ask2"
 *   ASK_WORKERS  weft_config.workers: 1 (one worker) or 0 (one per online
 *                CPU, every task placed by the runtime's default)
 *
 * One actor owns a counter and has a bounded mailbox of capacity 64;
 * messages and replies are int64. The root task is the one client: it makes
 * N asks in sequence, each "add 1 and reply with the new value", waiting for
 * each reply, and the last reply is checked against N. The clock runs
 * inside the root task, from before the actor is spawned to after it has
 * been stopped and its scope joined (as the other benchmarks time from the
 * first spawn to the join). The first argument overrides N, the number of
 * asks. When the actor and the client ran on different workers (ask2: the
 * runtime placed them apart; every ask then crosses threads), a note on
 * stderr says so.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench.h"
#include "weft.h"

struct bench {
    long n;             /* asks */
    int64_t count;      /* the actor's state: touched only by the actor */
    int64_t last;       /* the client's last reply */
    int64_t elapsed_ns; /* from before the spawn to after the join */
    int actor_worker;   /* where each ran (a task never moves): for */
    int client_worker;  /* the note on stderr */
};

/* The actor's start hook: notes where the actor runs. */
static int on_start(void *state)
{
    struct bench *b = state;

    b->actor_worker = weft_worker_id();
    return 0;
}

/* The actor's behaviour: adds the message to the counter and replies with
 * the new value. */
static int counter(void *state, weft_actor_msg *m)
{
    struct bench *b = state;

    if (m->kind != WEFT_MSG_ASK)
        return -EINVAL;
    b->count += *(const int64_t *)m->data;
    return weft_actor_reply(m, &b->count);
}

static int root(void *arg)
{
    struct bench *b = arg;
    weft_actor_opts o = {
        .fn = counter,
        .state = b,
        .msg_size = sizeof(int64_t),
        .reply_size = sizeof(int64_t),
        .capacity = 64,
        .name = "counter",
        .on_start = on_start,
    };
    const int64_t one = 1;
    int64_t v = 0;
    weft_actor *a = NULL;
    weft_scope *s;
    int err, join;
    int64_t start;

    err = weft_scope_open(&s, NULL);
    if (err < 0)
        return err;
    start = bench_clock_ns();
    err = weft_actor_spawn(s, &o, &a);
    for (long i = 0; err >= 0 && i < b->n; i++)
        err = weft_actor_ask(a, &one, &v, WEFT_NEVER);
    b->last = v;
    b->client_worker = weft_worker_id();
    if (a)
        weft_actor_stop(a, WEFT_STOP_DRAIN); /* it exits, its scope joins */
    join = weft_scope_join(s);
    b->elapsed_ns = bench_clock_ns() - start;
    if (a)
        weft_actor_unref(a);
    weft_scope_free(s);
    return err < 0 ? err : join;
}

int main(int argc, char **argv)
{
    struct bench b = {.n = bench_n(argc, argv, 1000000), .last = -1};
    weft_config cfg = {.workers = ASK_WORKERS};
    int err;

    err = weft_run(&cfg, root, &b);
    if (err < 0) {
        fprintf(stderr, ASK_NAME ": %s\n", weft_strerror(err));
        return 1;
    }
    if (b.last != b.n) {
        fprintf(stderr, "checksum failed: last reply %" PRId64 " != %ld\n",
                b.last, b.n);
        return 1;
    }
    if (b.actor_worker != b.client_worker)
        fprintf(stderr,
                ASK_NAME ": the actor ran on worker %d, the client on %d\n",
                b.actor_worker, b.client_worker);
    printf("BENCH " ASK_NAME " weft %.1f ns/ask\n",
           (double)b.elapsed_ns / (double)b.n);
    return 0;
}
