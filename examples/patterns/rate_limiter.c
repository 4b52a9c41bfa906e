/* SPDX-License-Identifier: MIT */
/*
 * rate_limiter: at most 5 requests a second, bursts of 2 (aiolimiter,
 * golang.org/x/time/rate, bottleneck, governor).
 *
 * weft_limiter is a token bucket: 5 tokens per second, holding at most 2,
 * full at the start. weft_limiter_acquire takes a token, sleeping exactly
 * until it is due (no polling); with a deadline it refuses at once,
 * taking nothing, if the token would come too late. The grant instants
 * are exact: 0, 0 (the burst), then one every 200 ms; after a pause the
 * bucket holds 2 again, not more. Exits 1 unless every grant came at the
 * instant the arithmetic says and the refusals were immediate.
 */
#include <errno.h>
#include <stdio.h>

#include "weft.h"

#define MS WEFT_MSEC
#define NOW_MS ((long long)(weft_now() / MS))

static weft_limiter *limiter;
static weft_time granted[10]; /* when each request got its token */
static int n;

static int request(void)
{
    int rc = weft_limiter_acquire(limiter, 1, WEFT_NEVER); /* waits its turn */
    if (rc == 0) {
        granted[n++] = weft_now();
        printf("t=%4lld ms  request %d sent\n", NOW_MS, n);
    }
    return rc;
}

static int run(void *arg)
{
    if (weft_limiter_new(&limiter, 5, WEFT_SEC, 2) != 0) /* 5/s, burst 2 */
        return -1;
    for (int i = 0; i < 6; i++) /* a busy spell: 6 requests back to back */
        request();
    weft_sleep_until(2000 * MS); /* quiet: the bucket refills, to 2 only */
    for (int i = 0; i < 3; i++)
        request();

    /* The next token is due at 2400 ms. Callers that cannot wait that long
     * are told at once, and take nothing: */
    int try_rc = weft_limiter_try_acquire(limiter, 1);
    int late_rc = weft_limiter_acquire(limiter, 1, weft_now() + 100 * MS);
    weft_time refused_at = weft_now();
    printf("t=%4lld ms  try: %s; with a 100 ms deadline: %s\n", NOW_MS,
           weft_strerror(try_rc), weft_strerror(late_rc));
    request(); /* still due at 2400: the refused calls took nothing */
    weft_limiter_free(limiter);

    const weft_time want[] = {0, 0, 200, 400, 600, 800, 2000, 2000, 2200, 2400};
    int ok = n == 10 && try_rc == -EAGAIN && late_rc == -ETIMEDOUT &&
             refused_at == 2200 * MS;
    for (int i = 0; i < n; i++)
        ok &= granted[i] == want[i] * MS;
    return ok ? 0 : -1;
}

int main(void)
{
    weft_config cfg = {.workers = 1, .clock = WEFT_CLOCK_VIRTUAL};
    return weft_run(&cfg, run, NULL) == 0 ? 0 : 1;
}
