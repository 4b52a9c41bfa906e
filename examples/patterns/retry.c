/* SPDX-License-Identifier: MIT */
/*
 * retry: call a flaky service again after growing, jittered delays
 * (tenacity, a Go backoff loop, p-retry, backon).
 *
 * The service refuses the first call with -EAGAIN, hangs on the second,
 * refuses the third, then answers. weft_retry_call calls it up to 5
 * times, each attempt limited to 50 ms (the hung one is cut there and
 * counts as -ETIMEDOUT), sleeping between attempts the delays of the
 * policy: exponential from 100 ms, capped at 1 s, with full jitter (each
 * delay uniform in [0, min(cap, 100 ms * 2^k)]). A fixed seed makes the
 * jitter reproducible, so weft_backoff, given the same policy, predicts
 * every delay. The default predicate retries transient failures only: a
 * refused permission (-EACCES) is returned at once. Exits 1 unless the
 * attempts started exactly at the instants the backoff sequence gives.
 */
#include <errno.h>
#include <stdio.h>

#include "weft.h"

#define MS WEFT_MSEC

typedef struct service {
    int calls;
    int answers[8]; /* what call i answers (after 10 ms), 1: hang */
    weft_time called_at[8], ended_at[8];
} service;

static int call_service(void *arg)
{
    service *s = arg;
    int i = s->calls++;
    s->called_at[i] = weft_now();
    printf("t=%4lld ms  attempt %d\n", (long long)(weft_now() / MS), i + 1);
    int hang = s->answers[i] == 1;
    int rc =
        weft_sleep_for(hang ? 10 * WEFT_SEC : 10 * MS); /* the round trip */
    s->ended_at[i] = weft_now();
    return rc ? rc : s->answers[i];
}

static void on_retry(int attempt, int status, int64_t delay, void *ctx)
{
    printf("t=%4lld ms  attempt %d: %s; retrying in %lld.%03lld ms\n",
           (long long)(weft_now() / MS), attempt, weft_strerror(status),
           (long long)(delay / MS), (long long)(delay % MS / 1000));
}

static const weft_retry policy = {
    .max_attempts = 5,
    .base_ns = 100 * MS,
    .cap_ns = 1000 * MS,
    .jitter = WEFT_JITTER_FULL,
    .attempt_timeout_ns = 50 * MS, /* each attempt, as weft_call_for */
    .on_retry = on_retry,
    .seed = 42, /* 0 (the default) draws one: replicas must not agree */
};

static int run(void *arg)
{
    service flaky = {.answers = {-EAGAIN, 1, -ECONNRESET, 0}};
    int rc = weft_retry_call(&policy, call_service, &flaky);

    /* What the delays should have been: the same policy, the same seed. */
    weft_backoff b;
    weft_backoff_init(&b, &policy);
    int ok = rc == 0 && flaky.calls == 4 && flaky.called_at[0] == 0;
    for (int i = 1; i < flaky.calls; i++) {
        weft_time want = flaky.ended_at[i - 1] + weft_backoff_next(&b);
        ok &= flaky.called_at[i] == want;
    }
    ok &= flaky.ended_at[1] - flaky.called_at[1] == 50 * MS; /* cut */
    printf("flaky service: %s after %d attempts\n", weft_strerror(rc),
           flaky.calls);

    service denied = {.answers = {-EACCES}};
    int rc2 = weft_retry_call(&policy, call_service, &denied);
    printf("denied: %s after %d attempt(s)\n", weft_strerror(rc2),
           denied.calls);
    ok &= rc2 == -EACCES && denied.calls == 1;
    return ok ? 0 : -1;
}

int main(void)
{
    weft_config cfg = {.workers = 1, .clock = WEFT_CLOCK_VIRTUAL};
    return weft_run(&cfg, run, NULL) == 0 ? 0 : 1;
}
