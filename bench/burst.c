/* SPDX-License-Identifier: MIT */
/*
 * burst: 1,000 long-lived CPU tasks that all start on one worker of two,
 * each computing in N slices of ~2 us with weft_yield between them. A
 * task pinned on the other worker spins until all have started, so none
 * is taken before it starts: only tasks that may move (the second
 * argument "movable": spawned in a scope with weft_scope_opts.movable)
 * can then be spread, shared with the idle worker at its request. Value:
 * elapsed ms, from the first spawn to the join; stderr says how many
 * slices each worker ran once all the tasks had started (before, worker
 * 0 runs them all) and how many tasks each handed over. The first
 * argument overrides N (100). Not in bench/compare: no peer can start
 * all its tasks on one thread and keep them there until they have started.
 */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "weft.h"

#define TASKS 1000

struct bench {
    long slices; /* per task */
    int movable;
    atomic_int started;
    atomic_long ran[2]; /* slices run per worker once all have started */
    atomic_long before; /* slices run before (on worker 0) */
    uint64_t moved[2];
    int64_t elapsed_ns;
    unsigned sink[TASKS];
};

/* Worker 1, until every task has started on worker 0. */
static int blocker(void *arg)
{
    struct bench *b = arg;
    while (atomic_load(&b->started) < TASKS)
        ;
    return 0;
}

static int task(void *arg)
{
    struct bench *b = arg;
    int me = atomic_fetch_add(&b->started, 1);
    for (long i = 0; i < b->slices; i++) {
        unsigned x = 0;
        for (unsigned k = 0; k < 5000; k++) {
            x += k * (unsigned)i;
            __asm__ volatile("" : "+r"(x)); /* kept: the slice's work */
        }
        b->sink[me] += x;
        int rc = weft_yield();
        if (rc < 0)
            return rc;
        if (atomic_load_explicit(&b->started, memory_order_relaxed) == TASKS)
            atomic_fetch_add(&b->ran[weft_worker_id() & 1], 1);
        else
            atomic_fetch_add(&b->before, 1);
    }
    return 0;
}

/* Worker 0: spawns the tasks, in a movable scope if asked. */
static int spawner(void *arg)
{
    struct bench *b = arg;
    weft_scope *s;
    int err = weft_scope_open(&s, &(weft_scope_opts){.movable = b->movable});
    if (err < 0)
        return err;
    int64_t start = bench_clock_ns();
    for (int i = 0; err >= 0 && i < TASKS; i++)
        err = weft_spawn(s, task, b);
    int join = weft_scope_join(s);
    b->elapsed_ns = bench_clock_ns() - start;
    weft_scope_free(s);
    return err < 0 ? err : join;
}

static int root(void *arg)
{
    struct bench *b = arg;
    weft_scope *s;
    int err = weft_scope_open(&s, NULL);
    if (err < 0)
        return err;
    err = weft_spawn_ex(s, blocker, b, &(weft_spawn_opts){.worker = 2});
    if (err >= 0)
        err = weft_spawn_ex(s, spawner, b, &(weft_spawn_opts){.worker = 1});
    int join = weft_scope_join(s);
    weft_scope_free(s);
    weft_worker_stats ws[2];
    weft_stats st;
    if (weft_stats_get(&st, ws, 2) == 2) {
        b->moved[0] = ws[0].moved;
        b->moved[1] = ws[1].moved;
    }
    return err < 0 ? err : join;
}

int main(int argc, char **argv)
{
    struct bench *b = calloc(1, sizeof(*b));
    if (!b)
        return 1;
    b->slices = bench_n(argc, argv, 100);
    if (argc > 2) {
        if (strcmp(argv[2], "movable") != 0) {
            fprintf(stderr, "burst: unknown variant '%s'\n", argv[2]);
            return 2;
        }
        b->movable = 1;
    }
    weft_config cfg = {.workers = 2};
    int err = weft_run(&cfg, root, b);
    if (err < 0) {
        fprintf(stderr, "burst: %s\n", weft_strerror(err));
        return 1;
    }
    long a = atomic_load(&b->ran[0]), c = atomic_load(&b->ran[1]);
    long before = atomic_load(&b->before);
    if (a + c + before != TASKS * b->slices) {
        fprintf(stderr, "checksum failed: %ld slices, %ld made\n",
                a + c + before, TASKS * b->slices);
        return 1;
    }
    fprintf(stderr,
            "burst: %ld slices while they started, then by the workers: "
            "%ld, %ld (%.1f%%, %.1f%%); tasks handed over: %llu, %llu\n",
            before, a, c, 100.0 * (double)a / (double)(a + c),
            100.0 * (double)c / (double)(a + c),
            (unsigned long long)b->moved[0], (unsigned long long)b->moved[1]);
    printf("BENCH burst%s weft %.1f ms\n", b->movable ? "-movable" : "",
           (double)b->elapsed_ns / 1e6);
    free(b);
    return 0;
}
