/* SPDX-License-Identifier: MIT */
/*
 * pipeline: Go's pipeline pattern, with weft_pipeline doing the plumbing.
 *
 *   generate --in--> square (4 workers, ordered) --> keep multiples of 3
 *            --out--> aggregate
 *
 * A generator task sends 1..N into `in` and closes it. weft_pipeline fans
 * the numbers out to four workers that square them; the stage is ordered,
 * so the squares leave in the order the numbers came, however the workers
 * finish. A filter stage drops the squares that are not multiples of 3 by
 * returning WEFT_SKIP (one worker keeps the order by itself). When `in` is
 * closed and everything has gone through, the pipeline closes `out`; an
 * aggregator task sums what comes out until then. Exits 1 if the sum, the
 * count or the order is not what arithmetic says.
 */
#include <stdio.h>

#include "weft.h"

#define N 100000

static int generate(void *arg)
{
    weft_chan *in = arg;
    for (int64_t i = 1; i <= N; i++) {
        /* A send fails if the pipeline failed: it closes `in`. */
        if (weft_chan_send(in, &i) != 0)
            break;
    }
    /* No more values: the close flows down to `out`. */
    weft_chan_close(in);
    weft_chan_unref(in);
    return 0;
}

/* Stage functions read one value and write one; they run in tasks, so
 * they may also block (sleep, I/O, channels). */
static int square(void *ctx, const void *in, void *out)
{
    int64_t x = *(const int64_t *)in;
    *(int64_t *)out = x * x;
    return 0;
}

static int multiple_of_3(void *ctx, const void *in, void *out)
{
    int64_t x = *(const int64_t *)in;
    if (x % 3 != 0)
        return WEFT_SKIP; /* dropped */
    *(int64_t *)out = x;
    return 0;
}

typedef struct total {
    weft_chan *out;
    int64_t sum, count;
    int in_order; /* every value larger than the one before */
} total;

static int aggregate(void *arg)
{
    total *t = arg;
    int64_t v, prev = 0;
    while (weft_chan_recv(t->out, &v) == 0) { /* -EPIPE: closed, drained */
        t->in_order &= v > prev;
        prev = v;
        t->sum += v;
        t->count++;
    }
    weft_chan_unref(t->out);
    return 0;
}

static int run(void *arg)
{
    weft_chan *in, *out;
    weft_scope *s;
    if (weft_chan_new(&in, sizeof(int64_t), 64) != 0 ||
        weft_chan_new(&out, sizeof(int64_t), 64) != 0 ||
        weft_scope_open(&s, NULL) != 0)
        return -1;
    total t = {.out = weft_chan_ref(out), .in_order = 1};
    weft_time t0 = weft_now();
    weft_spawn(s, generate, weft_chan_ref(in));
    weft_spawn(s, aggregate, &t);

    weft_stage stages[] = {
        {.fn = square,
         .out_size = sizeof(int64_t),
         .workers = 4,
         .ordered = 1,
         .capacity = 64},
        {.fn = multiple_of_3, .out_size = sizeof(int64_t), .workers = 1},
    };
    int rc = weft_pipeline(in, out, stages, 2, WEFT_NEVER);
    weft_scope_join(s); /* the generator and the aggregator are done */
    weft_scope_free(s);
    weft_chan_unref(in);
    weft_chan_unref(out);

    /* The squares of 3k for k = 1..m: 9 * m(m+1)(2m+1)/6. */
    int64_t m = N / 3, want = 9 * (m * (m + 1) * (2 * m + 1) / 6);
    printf("pipeline returned %d (%s) after %.1f ms\n", rc, weft_strerror(rc),
           (double)(weft_now() - t0) / WEFT_MSEC);
    printf("sum of the squares of the multiples of 3 up to %d: %lld "
           "(expected %lld), %lld values, %s\n",
           N, (long long)t.sum, (long long)want, (long long)t.count,
           t.in_order ? "in order" : "OUT OF ORDER");
    return rc == 0 && t.sum == want && t.count == m && t.in_order ? 0 : -1;
}

int main(void)
{
    return weft_main(run, NULL) == 0 ? 0 : 1;
}
