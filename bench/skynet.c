/* SPDX-License-Identifier: MIT */
/*
 * skynet: a 10-ary tree of tasks with 1,000,000 leaves (depth 6). Each leaf
 * returns its ordinal, each inner node the sum of its children; check the
 * root == 499999500000. All cores. Value: elapsed, in ms. See
 * bench/README.md; the peers (bench/peers/) are Go (a buffered channel per
 * node) and Tokio (each node awaits its children's JoinHandles).
 *
 * A weft task returns an int status, so the sums travel through memory: a
 * node owns an array of 10 slots on its own stack, spawns its 10 children
 * into a scope of its own, each with a pointer to its slot, joins the scope
 * and adds the slots up. The join orders the children's writes before the
 * parent's reads.
 *
 * The clock runs inside the root task, from before the top node is spawned
 * to after it is joined, as the Tokio peer times inside block_on and Go
 * from its main goroutine. The first argument overrides the number of
 * leaves, rounded down to a power of 10 as the peers do.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "bench.h"
#include "weft.h"

struct node {
    int64_t num;  /* ordinal of the first leaf below this node */
    int64_t size; /* number of leaves below this node (1: a leaf) */
    int64_t *out; /* the parent's slot that receives this node's sum */
};

struct bench {
    int64_t leaves;     /* leaves of the tree, a power of 10 */
    int64_t sum;        /* the top node's sum */
    int64_t elapsed_ns; /* from before the top spawn to after its join */
};

static int skynet(void *arg)
{
    const struct node *me = arg;
    struct node kids[10];
    int64_t sums[10], sum = 0, sub = me->size / 10;
    weft_scope *s;
    int err, join;

    if (me->size == 1) {
        *me->out = me->num;
        return 0;
    }
    err = weft_scope_open(&s, NULL);
    if (err < 0)
        return err;
    for (int i = 0; i < 10 && err >= 0; i++) {
        kids[i] = (struct node){me->num + i * sub, sub, &sums[i]};
        err = weft_spawn(s, skynet, &kids[i]);
    }
    join = weft_scope_join(s);
    weft_scope_free(s);
    if (err < 0 || join < 0)
        return err < 0 ? err : join;
    for (int i = 0; i < 10; i++)
        sum += sums[i];
    *me->out = sum;
    return 0;
}

static int root(void *arg)
{
    struct bench *b = arg;
    struct node top = {0, b->leaves, &b->sum};
    weft_scope *s;
    int err, join;
    int64_t start;

    err = weft_scope_open(&s, NULL);
    if (err < 0)
        return err;
    start = bench_clock_ns();
    err = weft_spawn(s, skynet, &top);
    join = weft_scope_join(s);
    b->elapsed_ns = bench_clock_ns() - start;
    weft_scope_free(s);
    return err < 0 ? err : join;
}

int main(int argc, char **argv)
{
    long n = bench_n(argc, argv, 1000000);
    struct bench b = {.leaves = 1, .sum = -1};
    weft_config cfg = {.workers = 0}; /* one per online CPU */
    int64_t want;
    int err;

    while (b.leaves * 10 <= n)
        b.leaves *= 10;
    if (b.leaves != n)
        fprintf(stderr,
                "skynet: N rounded down to a power of 10: %lld leaves\n",
                (long long)b.leaves);
    err = weft_run(&cfg, root, &b);
    if (err < 0) {
        fprintf(stderr, "skynet: %s\n", weft_strerror(err));
        return 1;
    }
    want = b.leaves * (b.leaves - 1) / 2;
    if (b.sum != want) {
        fprintf(stderr, "checksum failed: root %" PRId64 " != %" PRId64 "\n",
                b.sum, want);
        return 1;
    }
    printf("BENCH skynet weft %.1f ms\n", (double)b.elapsed_ns / 1e6);
    return 0;
}
