/* SPDX-License-Identifier: MIT */
/*
 * pipeline: stages connected by channels, each stage with its own number
 * of workers (Go's pipeline pattern, chained asyncio.Queues, a
 * Tokio stream with .buffered(n)).
 *
 *   ids --in--> fetch (3 workers, 30 ms each, ordered)
 *       -----> parse (1 worker, 10 ms each; drops empty pages)
 *       --out--> the caller
 *
 * weft_pipeline does the plumbing: the fan-out to the fetch workers, the
 * fan-in behind them (in input order, as the stage is ordered), the close
 * that travels down when `in` is closed, and the cancel of every stage if
 * one fails. Fetching 9 pages one at a time would take 9 * 40 = 360 ms;
 * the pipeline overlaps them: the fetches end at 30, 60 and 90 ms, and
 * the parses trail them by 10 ms, so page 9 is out at 110 ms. Exits 1
 * unless the 7 non-empty pages come out in order, at 110 ms.
 */
#include <errno.h>
#include <stdio.h>

#include "weft.h"

#define PAGES 9
#define NOW_MS ((long long)(weft_now() / WEFT_MSEC))

typedef struct page {
    int id;
    int words; /* 0: an empty page */
} page;

static int fetch(void *ctx, const void *in, void *out)
{
    int id = *(const int *)in;
    int rc = weft_sleep_for(30 * WEFT_MSEC); /* the remote call */
    if (rc != 0)
        return rc; /* a negative status fails the whole pipeline */
    *(page *)out = (page){.id = id, .words = id % 4 == 0 ? 0 : 100 * id};
    return 0;
}

static int parse(void *ctx, const void *in, void *out)
{
    const page *p = in;
    if (p->words == 0)
        return WEFT_SKIP; /* filtered out */
    int rc = weft_sleep_for(10 * WEFT_MSEC);
    *(int *)out = p->id;
    return rc;
}

static int produce(void *arg)
{
    weft_chan *in = arg;
    for (int id = 1; id <= PAGES; id++)
        if (weft_chan_send(in, &id) != 0) /* -EPIPE if the pipeline failed */
            break;
    return weft_chan_close(in); /* the end flows down the stages */
}

static int consume(void *arg)
{
    weft_chan *out = arg;
    int id, prev = 0, n = 0;
    while (weft_chan_recv(out, &id) == 0) { /* -EPIPE: closed and drained */
        printf("t=%3lld ms  page %d parsed\n", NOW_MS, id);
        if (id <= prev || id % 4 == 0)
            return -EPROTO; /* out of order, or a page to be dropped */
        prev = id;
        n++;
    }
    return n == PAGES - PAGES / 4 ? 0 : -EPROTO;
}

static int run(void *arg)
{
    weft_chan *in, *out;
    weft_scope *s;
    weft_chan_new(&in, sizeof(int), 0); /* rendezvous: no backlog */
    weft_chan_new(&out, sizeof(int), 0);
    weft_stage stages[] = {
        {.fn = fetch, .out_size = sizeof(page), .workers = 3, .ordered = 1},
        {.fn = parse, .out_size = sizeof(int), .workers = 1},
    };
    weft_scope_open(&s, NULL);
    weft_spawn(s, produce, in);
    weft_spawn(s, consume, out);
    int rc = weft_pipeline(in, out, stages, 2, WEFT_NEVER);
    int rc2 = weft_scope_join(s); /* the consumer's verdict */
    weft_scope_free(s);
    weft_chan_unref(in);
    weft_chan_unref(out);
    printf("pipeline: %s, consumer: %s, %lld ms (one at a time: %d ms)\n",
           weft_strerror(rc), weft_strerror(rc2), NOW_MS, PAGES * 40);
    return rc == 0 && rc2 == 0 && weft_now() == 110 * WEFT_MSEC ? 0 : -1;
}

int main(void)
{
    weft_config cfg = {.workers = 1, .clock = WEFT_CLOCK_VIRTUAL};
    return weft_run(&cfg, run, NULL) == 0 ? 0 : 1;
}
