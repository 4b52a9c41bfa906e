/* SPDX-License-Identifier: MIT */
/*
 * timeout: give up on a call that takes too long (asyncio.timeout,
 * context.WithTimeout, AbortSignal.timeout, tokio::time::timeout).
 *
 * weft_call_for runs a function under a deadline: when it passes, the
 * function's blocking calls return -ECANCELED, and weft_call_for
 * returns -ETIMEDOUT, at that very instant. A scope with a deadline puts
 * a block of code under one budget (asyncio's `async with timeout()`).
 * Deadlines nest as Go's contexts do: a step inside the budget can only
 * shorten it (weft_deadline() is the earliest), never extend it. When the
 * budget is what cuts a step, the step's own timeout did not pass:
 * weft_call_for returns -ECANCELED, and the budget's join -ETIMEDOUT.
 * Exits 1 unless each call ended when and how this says.
 */
#include <errno.h>
#include <stdio.h>

#include "weft.h"

#define MS WEFT_MSEC
#define NOW_MS ((long long)(weft_now() / MS))

/* The remote call: answers after *arg ms. */
static int call_service(void *arg)
{
    int64_t ms = *(int64_t *)arg;
    printf("t=%3lld ms  a %lld ms call, effective deadline %lld ms\n", NOW_MS,
           (long long)ms, (long long)(weft_deadline() / MS));
    return weft_sleep_for(ms * MS); /* 0, or -ECANCELED at the deadline */
}

static int run(void *arg)
{
    int64_t fast = 50, slow = 500;
    int rc1 = weft_call_for(call_service, &fast, 200 * MS);
    weft_time t1 = weft_now();
    int rc2 = weft_call_for(call_service, &slow, 200 * MS);
    weft_time t2 = weft_now();
    printf("t=%3lld ms  fast: %s, slow: %s\n", NOW_MS, weft_strerror(rc1),
           weft_strerror(rc2));

    /* Three steps of 120 ms, each with a 200 ms timeout, in 300 ms. */
    weft_scope *budget;
    weft_scope_open(&budget, &(weft_scope_opts){.deadline = t2 + 300 * MS});
    int64_t step = 120;
    int rc = 0;
    for (int i = 1; i <= 3 && rc == 0; i++)
        rc = weft_call_for(call_service, &step, 200 * MS);
    int rc3 = weft_scope_join(budget); /* -ETIMEDOUT: the budget ran out */
    weft_scope_free(budget);
    printf("t=%3lld ms  last step: %s; the 300 ms budget: %s\n", NOW_MS,
           weft_strerror(rc), weft_strerror(rc3));

    return rc1 == 0 && t1 == 50 * MS && rc2 == -ETIMEDOUT && t2 == 250 * MS &&
                   rc == -ECANCELED && rc3 == -ETIMEDOUT &&
                   weft_now() == t2 + 300 * MS
               ? 0
               : -1;
}

int main(void)
{
    weft_config cfg = {.workers = 1, .clock = WEFT_CLOCK_VIRTUAL};
    return weft_run(&cfg, run, NULL) == 0 ? 0 : 1;
}
