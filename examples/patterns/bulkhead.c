/* SPDX-License-Identifier: MIT */
/*
 * bulkhead: give a dependency a fixed number of concurrent calls and a
 * short waiting line, and turn the rest away at once, so a slow
 * dependency cannot take every task with it (resilience4j's and Polly's
 * bulkhead, cockatiel's bulkhead(2, 2), tower's concurrency limit with
 * load shedding).
 *
 * Six requests for a slow report service arrive 1 ms apart. The bulkhead
 * lets 2 run, lets 2 wait (served in arrival order), and rejects the last
 * 2 at once with -EBUSY: they can fail fast, or fall back, instead of
 * piling up. Each call takes 100 ms. Exits 1 unless requests 1-2 ended at
 * 100 and 101 ms, 3-4 (having waited) at 200 and 201 ms, 5-6 were rejected
 * the moment they arrived (4 and 5 ms), and never more than 2 ran at once.
 */
#include <errno.h>
#include <stdio.h>

#include "weft.h"

#define MS WEFT_MSEC
#define NOW_MS ((long long)(weft_now() / MS))

static weft_bulkhead *reports; /* 2 calls at once, 2 waiting */
static int running, max_running;

typedef struct request {
    int id, rc;
    weft_time end;
} request;

static int build_report(void *arg)
{
    if (++running > max_running)
        max_running = running;
    int rc = weft_sleep_for(100 * MS); /* the slow dependency */
    running--;
    return rc;
}

static int handle(void *arg)
{
    request *r = arg;
    weft_sleep_for((r->id - 1) * MS); /* they arrive 1 ms apart, in id order */
    r->rc = weft_bulkhead_call(reports, build_report, r, WEFT_NEVER);
    r->end = weft_now();
    printf("t=%3lld ms  request %d: %s\n", NOW_MS, r->id,
           r->rc == -EBUSY ? "rejected, the bulkhead is full"
                           : weft_strerror(r->rc));
    return 0;
}

static int run(void *arg)
{
    request req[6];
    weft_scope *s;
    if (weft_bulkhead_new(&reports, 2, 2) != 0)
        return -1;
    weft_scope_open(&s, NULL);
    for (int i = 0; i < 6; i++) {
        req[i] = (request){.id = i + 1};
        weft_spawn(s, handle, &req[i]);
    }
    weft_scope_join(s);
    weft_scope_free(s);
    weft_bulkhead_free(reports);

    const int want_rc[] = {0, 0, 0, 0, -EBUSY, -EBUSY};
    const int64_t want_end[] = {100, 101, 200, 201, 4, 5};
    int ok = max_running == 2;
    for (int i = 0; i < 6; i++)
        ok &= req[i].rc == want_rc[i] && req[i].end == want_end[i] * MS;
    return ok ? 0 : -1;
}

int main(void)
{
    weft_config cfg = {.workers = 1, .clock = WEFT_CLOCK_VIRTUAL};
    return weft_run(&cfg, run, NULL) == 0 ? 0 : 1;
}
