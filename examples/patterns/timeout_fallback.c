/* SPDX-License-Identifier: MIT */
/*
 * timeout_fallback: fetch with a timeout, and return a safe default when
 * the fetch is too slow or fails (try/except around asyncio.timeout, a Go
 * context.WithTimeout and an `if err != nil`, .catch(() => default)).
 *
 * A price service answers in 30 ms when healthy, hangs when overloaded,
 * and refuses connections when down. weft_call_fallback_for(fetch, ...,
 * cached, ..., 100 ms) returns the live price, or the cached one: when the
 * fetch is slow, at exactly 100 ms (the fetch is cancelled then, not left
 * running); when it fails, as soon as it fails. Exits 1 unless each case
 * returned the right price at the right instant.
 */
#include <errno.h>
#include <stdio.h>

#include "weft.h"

#define MS WEFT_MSEC

typedef enum health { HEALTHY, OVERLOADED, DOWN } health;
static const char *health_name[] = {"healthy", "overloaded", "down"};

/* Returns the price in cents (>= 0), or an error. */
static int fetch_price(void *arg)
{
    health h = *(health *)arg;
    if (h == DOWN)
        return -ECONNREFUSED;
    int rc = weft_sleep_for(h == HEALTHY ? 30 * MS : 10 * WEFT_SEC);
    return rc == 0 ? 1299 : rc; /* -ECANCELED when the timeout passes */
}

static int cached_price(void *arg)
{
    return *(int *)arg; /* last known price: stale but safe */
}

static int run(void *arg)
{
    const int want_price[] = {1299, 999, 999};
    const int64_t want_ms[] = {30, 100, 0};
    int cache = 999, ok = 1;
    for (health h = HEALTHY; h <= DOWN; h++) {
        weft_time start = weft_now();
        int price = weft_call_fallback_for(fetch_price, &h, cached_price,
                                           &cache, 100 * MS);
        int64_t took = weft_now() - start;
        printf("%-10s -> price %d after %lld ms\n", health_name[h], price,
               (long long)(took / MS));
        ok &= price == want_price[h] && took == want_ms[h] * MS;
    }
    return ok ? 0 : -1;
}

int main(void)
{
    weft_config cfg = {.workers = 1, .clock = WEFT_CLOCK_VIRTUAL};
    return weft_run(&cfg, run, NULL) == 0 ? 0 : 1;
}
