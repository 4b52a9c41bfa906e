/* SPDX-License-Identifier: MIT */
/*
 * bounded_fetch: fetch N URLs with at most K requests in flight
 * (asyncio.Semaphore + gather, errgroup.SetLimit, p-limit,
 * buffer_unordered).
 *
 * weft_map_tasks calls fetch(&pages[i]) for every i < N, each in a task, never
 * more than K at once, and waits for all of them; each page holds its
 * request and its result, so results come back in input order. fetch is
 * an ordinary weft_fn: the same function goes to weft_call_for or
 * weft_retry_call, and here a one-line wrapper gives every request a
 * retry policy with a timeout per attempt. The "server" answers each
 * request in 100 ms of virtual time: 10 requests, 3 at a time, take
 * exactly 4 rounds = 400 ms. Exits 1 unless at most K (and at some point
 * exactly K) were in flight, every result is there, and it took 400 ms.
 */
#include <stdio.h>

#include "weft.h"

#define N 10 /* URLs */
#define K 3  /* requests in flight at most */
#define LATENCY (100 * WEFT_MSEC)

typedef struct crawl {
    int in_flight;     /* requests running now (one worker: a plain int) */
    int max_in_flight; /* the most seen at once */
} crawl;

typedef struct page {
    crawl *c; /* shared by every page */
    int id;   /* which URL */
    int bytes;
} page;

/* Pretends to fetch one page: the remote call is a 100 ms sleep. */
static int fetch(void *arg)
{
    page *p = arg;
    crawl *c = p->c;
    if (++c->in_flight > c->max_in_flight)
        c->max_in_flight = c->in_flight;
    printf("t=%3lld ms  GET /page/%d  (%d in flight)\n",
           (long long)(weft_now() / WEFT_MSEC), p->id, c->in_flight);
    int rc = weft_sleep_for(LATENCY); /* -ECANCELED if the map gives up */
    c->in_flight--;
    if (rc != 0)
        return rc;
    p->bytes = 1000 + p->id;
    return 0;
}

static const weft_retry policy = {
    .max_attempts = 3,
    .attempt_timeout_ns = 2 * LATENCY,
};

static int fetch_with_retry(void *arg)
{
    return weft_retry_call(&policy, fetch, arg);
}

static int crawl_all(void *arg)
{
    crawl c = {0};
    page pages[N];
    for (int i = 0; i < N; i++)
        pages[i] = (page){.c = &c, .id = i};
    int rc = weft_map_tasks(N, K, fetch_with_retry, pages, sizeof(page),
                            WEFT_FAIL_FAST, NULL, WEFT_NEVER);
    weft_time took = weft_now();
    printf("weft_map_tasks: %s after %lld ms, at most %d in flight\n",
           weft_strerror(rc), (long long)(took / WEFT_MSEC), c.max_in_flight);

    int ok = rc == 0 && c.max_in_flight == K && took == 4 * LATENCY;
    for (int i = 0; i < N; i++)
        ok &= pages[i].bytes == 1000 + i;
    return ok ? 0 : -1;
}

int main(void)
{
    /* Virtual time: the 400 ms take no real time, and one worker makes
     * the trace the same on every run. */
    weft_config cfg = {.workers = 1, .clock = WEFT_CLOCK_VIRTUAL};
    return weft_run(&cfg, crawl_all, NULL) == 0 ? 0 : 1;
}
