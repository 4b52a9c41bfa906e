/* SPDX-License-Identifier: MIT */
/*
 * retry: call a flaky service again after growing, jittered delays
 * (tenacity, a Go backoff loop, p-retry, backon).
 *
 * The service refuses the first three calls with -EAGAIN, then answers.
 * weft_retry_call calls it up to 5 times, sleeping between attempts the
 * delays of the policy: exponential from 100 ms, capped at 1 s, with full
 * jitter (each delay uniform in [0, min(cap, 100 ms * 2^k)]). A fixed
 * seed makes the jitter reproducible, so weft_backoff, given the same
 * policy, predicts every delay. A status the policy says is not worth
 * retrying (-EACCES here) is returned at once. Exits 1 unless the
 * attempts started exactly at the instants the backoff sequence gives.
 */
#include <errno.h>
#include <stdio.h>

#include "weft.h"

#define MS WEFT_MSEC

typedef struct service {
    int failures_left; /* calls to refuse before answering */
    int error;         /* how it refuses */
    int calls;
    weft_time called_at[8];
} service;

static int call_service(void *arg)
{
    service *s = arg;
    s->called_at[s->calls++] = weft_now();
    int rc = weft_sleep(10 * MS); /* the round trip */
    if (rc == 0 && s->failures_left > 0) {
        s->failures_left--;
        rc = s->error;
    }
    printf("t=%4lld ms  attempt %d: %s\n", (long long)(weft_now() / MS),
           s->calls, weft_strerror(rc));
    return rc;
}

/* Transient errors only: a refused permission will not get better. */
static int transient(int status, void *ctx)
{
    return status == -EAGAIN || status == -ETIMEDOUT || status == -ECONNRESET;
}

static void on_retry(int attempt, int status, int64_t delay, void *ctx)
{
    printf("           retrying in %lld.%03lld ms\n", (long long)(delay / MS),
           (long long)(delay % MS / 1000));
}

static const weft_retry policy = {
    .max_attempts = 5,
    .base_ns = 100 * MS,
    .cap_ns = 1000 * MS,
    .jitter = WEFT_JITTER_FULL,
    .retryable = transient,
    .on_retry = on_retry,
    .seed = 42, /* 0 (the default) draws one: replicas must not agree */
};

static int run(void *arg)
{
    service flaky = {.failures_left = 3, .error = -EAGAIN};
    int rc = weft_retry_call(&policy, call_service, &flaky);

    /* What the delays should have been: the same policy, the same seed. */
    weft_backoff b;
    weft_backoff_init(&b, &policy);
    int ok = rc == 0 && flaky.calls == 4 && flaky.called_at[0] == 0;
    for (int i = 1; i < flaky.calls; i++) {
        weft_time want =
            flaky.called_at[i - 1] + 10 * MS + weft_backoff_next(&b);
        ok &= flaky.called_at[i] == want;
    }
    printf("flaky service: %s after %d attempts\n", weft_strerror(rc),
           flaky.calls);

    service denied = {.failures_left = 1, .error = -EACCES};
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
