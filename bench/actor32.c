/* SPDX-License-Identifier: MIT */
/*
 * actor32: one counter actor and 32 client tasks on 2 workers, every task
 * placed by the runtime's default (no worker given, nothing opted in to
 * moving, the actor spawned with worker = 0): the shape a newcomer writes
 * after reading weft.h's actor section. Each client makes N / 32 asks in
 * sequence ("add 1 and reply with the new value"), waiting for each reply;
 * the replies are checked (the largest one must be N). The clock runs in
 * the root task, from before the actor is spawned to after the clients
 * and the actor have been joined. The first argument overrides N (100,000).
 * Value: elapsed / N, in ns/ask.
 *
 * A second argument makes a variant, to see what a split costs: "split"
 * spawns the clients from two tasks, one pinned on each worker, so that
 * half of them start on each (BENCH line actor32-split); "split-movable"
 * does the same in a scope whose tasks may move (weft_scope_opts.movable:
 * the clients then join the actor's worker; actor32-split-movable).
 *
 * Where the clients run is the runtime's choice: an idle worker may take
 * some before they start, and a client never moves; the actor, which
 * moves between two messages, goes where its traffic comes from. stderr
 * says how many clients ran on each worker and where the actor ended.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench.h"
#include "weft.h"

#define CLIENTS 32
#define WORKERS 2

struct bench {
    long n;                  /* asks in all */
    int64_t count;           /* the actor's state: touched only by the actor */
    int actor_worker;        /* where it handled its last message */
    _Atomic int64_t max;     /* the largest reply seen */
    atomic_int on[WORKERS];  /* clients per worker, at their start */
    atomic_int end[WORKERS]; /* and at their end */
    weft_actor *a;
    int64_t elapsed_ns;
    int split;      /* clients spawned half on each worker */
    int movable;    /* their scope's weft_scope_opts.movable */
    uint64_t moved; /* tasks moved between workers (weft_stats) */
};

static int counter(void *state, weft_actor_msg *m)
{
    struct bench *b = state;

    if (m->kind != WEFT_MSG_ASK)
        return -EINVAL;
    b->count += *(const int64_t *)m->data;
    b->actor_worker = weft_worker_id();
    return weft_actor_reply(m, &b->count);
}

static int client(void *arg)
{
    struct bench *b = arg;
    const int64_t one = 1;
    int64_t v = 0, max = 0;
    long asks = b->n / CLIENTS;
    int err = 0;

    atomic_fetch_add(&b->on[weft_worker_id() % WORKERS], 1);
    for (long i = 0; err >= 0 && i < asks; i++) {
        err = weft_actor_ask(b->a, &one, &v, WEFT_NEVER);
        if (v > max)
            max = v;
    }
    atomic_fetch_add(&b->end[weft_worker_id() % WORKERS], 1);
    int64_t seen = atomic_load(&b->max);
    while (max > seen && !atomic_compare_exchange_weak(&b->max, &seen, max))
        ;
    return err < 0 ? err : 0;
}

/* Spawns half of the clients into the scope of the root task (split). */
static weft_scope *clients_scope;

static int half_spawner(void *arg)
{
    struct bench *b = arg;
    int err = 0;
    for (int i = 0; err >= 0 && i < CLIENTS / 2; i++)
        err = weft_spawn(clients_scope, client, b);
    return err < 0 ? err : 0;
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
    };
    weft_scope *as, *cs;
    int err, join;
    int64_t start;

    err = weft_scope_open(&as, NULL);
    if (err < 0)
        return err;
    start = bench_clock_ns();
    err = weft_actor_spawn(as, &o, &b->a);
    if (err >= 0 &&
        (err = weft_scope_open(
             &cs, &(weft_scope_opts){.movable = b->movable})) >= 0) {
        clients_scope = cs;
        for (int i = 0; err >= 0 && i < (b->split ? WORKERS : CLIENTS); i++)
            err = b->split ? weft_spawn_ex(cs, half_spawner, b,
                                           &(weft_spawn_opts){.worker = i + 1})
                           : weft_spawn(cs, client, b);
        join = weft_scope_join(cs);
        if (err >= 0)
            err = join;
        weft_scope_free(cs);
    }
    if (b->a)
        weft_actor_stop(b->a, WEFT_STOP_DRAIN);
    join = weft_scope_join(as);
    b->elapsed_ns = bench_clock_ns() - start;
    weft_stats st;
    if (weft_stats_get(&st, NULL, 0) > 0)
        b->moved = st.all.moved;
    if (b->a)
        weft_actor_unref(b->a);
    weft_scope_free(as);
    return err < 0 ? err : join;
}

int main(int argc, char **argv)
{
    struct bench b = {.n = bench_n(argc, argv, 100000)};
    const char *variant =
        bench_split("actor32", argc, argv, &b.split, &b.movable);
    weft_config cfg = {.workers = WORKERS};
    int err;

    b.n -= b.n % CLIENTS;
    if (b.n == 0)
        b.n = CLIENTS;
    err = weft_run(&cfg, root, &b);
    if (err < 0) {
        fprintf(stderr, "actor32: %s\n", weft_strerror(err));
        return 1;
    }
    if (atomic_load(&b.max) != b.n || b.count != b.n) {
        fprintf(stderr, "checksum failed: %" PRId64 " asks counted, %ld made\n",
                b.count, b.n);
        return 1;
    }
    fprintf(stderr,
            "actor32: clients on the workers: %d, %d at the start, %d, %d at "
            "the end; the actor ended on worker %d; %" PRIu64 " moves\n",
            atomic_load(&b.on[0]), atomic_load(&b.on[1]),
            atomic_load(&b.end[0]), atomic_load(&b.end[1]), b.actor_worker,
            b.moved);
    printf("BENCH actor32%s weft %.1f ns/ask\n", variant,
           (double)b.elapsed_ns / (double)b.n);
    return 0;
}
