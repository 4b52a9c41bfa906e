/* SPDX-License-Identifier: MIT */
/*
 * circuit_breaker: stop calling a service that is down, and try it again
 * after a cool-down (pybreaker/aiobreaker, sony/gobreaker, opossum,
 * failsafe).
 *
 * The service is down until 1500 ms. A client calls it every 100 ms
 * through a breaker that opens after 3 failures in a row and half-opens
 * after 1 s, letting one trial call through. So: three failures open it
 * at 200 ms; calls are rejected at once (-EHOSTDOWN, the service is not
 * touched) until 1200 ms; the trial then fails and it opens again; at
 * 2200 ms the trial succeeds (its answer comes at 2220 ms) and it closes.
 * No timer runs any of this: the breaker looks at the clock when asked.
 * Exits 1 unless the states changed in that order at those instants.
 */
#include <errno.h>
#include <stdio.h>

#include "weft.h"

#define MS WEFT_MSEC

static const char *state_name[] = {"closed", "open", "half-open"};

typedef struct change {
    weft_breaker_state from, to;
    weft_time at;
} change;
static change seen[8];
static int nseen;

static void on_change(weft_breaker *b, weft_breaker_state from,
                      weft_breaker_state to, void *ctx)
{
    printf("t=%4lld ms  breaker %s -> %s\n", (long long)(weft_now() / MS),
           state_name[from], state_name[to]);
    if (nseen < 8)
        seen[nseen++] = (change){from, to, weft_now()};
}

static int call_service(void *arg)
{
    if (weft_now() < 1500 * MS)
        return -ECONNREFUSED;       /* down: refused at once */
    return weft_sleep_for(20 * MS); /* up: answers in 20 ms */
}

static int run(void *arg)
{
    weft_breaker *b;
    weft_breaker_opts opts = {.failure_threshold = 3,
                              .cooldown_ns = 1000 * MS,
                              .half_open_calls = 1,
                              .on_change = on_change};
    if (weft_breaker_new(&b, &opts) != 0)
        return -1;
    char trace[32] = ""; /* x: failed, -: rejected, o: answered */
    for (int i = 0; i <= 24; i++) {
        weft_sleep_until(i * 100 * MS);
        int rc = weft_breaker_call(b, call_service, NULL);
        trace[i] = rc == -EHOSTDOWN ? '-' : rc < 0 ? 'x' : 'o';
    }
    weft_breaker_stats st;
    weft_breaker_stats_get(b, &st);
    weft_breaker_free(b);
    printf("calls every 100 ms: %s\n", trace);
    printf("let through %lld, failed %lld, rejected %lld, opened %lld times\n",
           (long long)st.calls, (long long)st.failures, (long long)st.rejected,
           (long long)st.opened);

    const change want[] = {
        {WEFT_BREAKER_CLOSED, WEFT_BREAKER_OPEN, 200 * MS},
        {WEFT_BREAKER_OPEN, WEFT_BREAKER_HALF_OPEN, 1200 * MS},
        {WEFT_BREAKER_HALF_OPEN, WEFT_BREAKER_OPEN, 1200 * MS},
        {WEFT_BREAKER_OPEN, WEFT_BREAKER_HALF_OPEN, 2200 * MS},
        {WEFT_BREAKER_HALF_OPEN, WEFT_BREAKER_CLOSED, 2220 * MS},
    };
    int ok = nseen == 5 && st.rejected == 18 && st.opened == 2;
    for (int i = 0; i < 5 && ok; i++)
        ok = seen[i].from == want[i].from && seen[i].to == want[i].to &&
             seen[i].at == want[i].at;
    return ok ? 0 : -1;
}

int main(void)
{
    weft_config cfg = {.workers = 1, .clock = WEFT_CLOCK_VIRTUAL};
    return weft_run(&cfg, run, NULL) == 0 ? 0 : 1;
}
