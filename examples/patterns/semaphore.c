/* SPDX-License-Identifier: MIT */
/*
 * semaphore: a limit on concurrency shared by unrelated code paths
 * (asyncio.Semaphore, golang.org/x/sync/semaphore, async-mutex's
 * Semaphore, tokio::sync::Semaphore).
 *
 * The database takes 3 connections at once. Page handlers need one for a
 * query, the report builder two; they share one weft_sem of 3 permits.
 * Requests arrive 1 ms apart: pages A and B get theirs at once; the report
 * (at 2 ms) finds one free and waits; page C (3 ms) finds one free too,
 * but queues behind the report, which is not overtaken by later, smaller
 * requests. A page that cannot wait more than 50 ms (D, at 4 ms) gives
 * up at 54 ms holding nothing. A's end (100 ms) frees enough for the
 * report, B's (101 ms) for C. Exits 1 unless every query started and
 * ended at those instants, no more than 3 connections were ever in use,
 * and all 3 are free at the end.
 */
#include <errno.h>
#include <stdio.h>

#include "weft.h"

#define MS WEFT_MSEC
#define NOW_MS ((long long)(weft_now() / MS))

static weft_sem db; /* connections to the database */
static long in_use, max_in_use;

typedef struct request {
    const char *name;
    int arrive_ms;
    long conns;    /* connections the query needs */
    int impatient; /* waits at most 50 ms for them */
    int rc;        /* the query's status */
    weft_time start, end;
} request;

static void count(long conns)
{
    if ((in_use += conns) > max_in_use)
        max_in_use = in_use;
}

/* Takes the connections r needs: waits in line as long as it takes, or,
 * for an impatient caller, 50 ms at most. */
static int take(request *r)
{
    if (r->impatient)
        return weft_sem_acquire_until(&db, r->conns, weft_now() + 50 * MS);
    return weft_sem_acquire(&db, r->conns);
}

/* Runs a query that needs r->conns connections and takes 100 ms. */
static int db_query(request *r)
{
    int rc = take(r); /* waits its turn, in line */
    if (rc != 0)
        return rc; /* -ETIMEDOUT, -ECANCELED: holds nothing, left the line */
    r->start = weft_now();
    count(r->conns);
    rc = weft_sleep_for(100 * MS); /* the query */
    count(-r->conns);
    weft_sem_release(&db, r->conns); /* whatever the query's status */
    return rc;
}

static int handle(void *arg)
{
    request *r = arg;
    weft_sleep_for(r->arrive_ms * MS); /* they arrive 1 ms apart */
    r->rc = db_query(r);
    r->end = weft_now();
    printf("t=%3lld ms  %s (%ld connection%s): %s\n", NOW_MS, r->name, r->conns,
           r->conns > 1 ? "s" : "", weft_strerror(r->rc));
    return 0;
}

static int run(void *arg)
{
    request req[] = {
        {.name = "page A", .arrive_ms = 0, .conns = 1},
        {.name = "page B", .arrive_ms = 1, .conns = 1},
        {.name = "report", .arrive_ms = 2, .conns = 2},
        {.name = "page C", .arrive_ms = 3, .conns = 1},
        {.name = "page D", .arrive_ms = 4, .conns = 1, .impatient = 1},
    };
    weft_sem_init(&db, 3); /* 3 connections */
    weft_scope *s;
    weft_scope_open(&s, NULL);
    for (int i = 0; i < 5; i++)
        weft_spawn(s, handle, &req[i]);
    weft_scope_join(s);
    weft_scope_free(s);

    const int64_t want_start[] = {0, 1, 100, 101, -1};
    const int64_t want_end[] = {100, 101, 200, 201, 54};
    int ok = max_in_use == 3 && weft_sem_available(&db) == 3 &&
             weft_sem_destroy(&db) == 0;
    for (int i = 0; i < 5; i++) {
        ok &= req[i].end == want_end[i] * MS;
        if (want_start[i] < 0)
            ok &= req[i].rc == -ETIMEDOUT;
        else
            ok &= req[i].rc == 0 && req[i].start == want_start[i] * MS;
    }
    return ok ? 0 : -1;
}

int main(void)
{
    weft_config cfg = {.workers = 1, .clock = WEFT_CLOCK_VIRTUAL};
    return weft_run(&cfg, run, NULL) == 0 ? 0 : 1;
}
