/* SPDX-License-Identifier: MIT */
/*
 * virtual_clock: test code that waits (timeouts, heartbeats, retries)
 * without waiting, and assert the exact instant of everything it does
 * (Trio's MockClock with autojump, Go's testing/synctest, Jest's fake
 * timers, Tokio's paused clock).
 *
 * The code under test is a watchdog: it declares a peer dead when no
 * heartbeat has come for 30 s, and returns 0 when the peer says goodbye
 * (closes the channel). The test plays three peers against it and checks
 * what it decided and when, to the nanosecond: silent after three beats
 * (dead at 60 s), beating until a goodbye at 100 s, and a beat 1 ns too
 * late. Each runs under 20 scheduling seeds, with the same results; a
 * failed check prints the seed to reproduce it with (WEFT_SEED=...).
 * 220 seconds of virtual time a run, 20 runs: milliseconds of real time.
 * Exits 1, after a FAIL line, if any check fails.
 */
#include <errno.h>
#include <stdio.h>
#include <time.h>

#include "weft.h"

#define SEC WEFT_SEC

/* ---- the code under test ------------------------------------------------ */

/* Watches heartbeats on ch. Returns 0 when the peer closes ch (a goodbye),
 * -ETIMEDOUT when no heartbeat came for `timeout` ns, -ECANCELED. */
static int watchdog(weft_chan *ch, int64_t timeout)
{
    weft_time last = weft_now();
    int beat;
    for (;;) {
        int rc = weft_chan_recv_until(ch, &beat, last + timeout);
        if (rc == -EPIPE)
            return 0; /* closed: the peer said goodbye */
        if (rc != 0)
            return rc; /* -ETIMEDOUT: presumed dead */
        last = weft_now();
    }
}

/* ---- the test ----------------------------------------------------------- */

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(                                                           \
                stderr, "FAIL %s:%d: %s (reproduce with WEFT_SEED=%llu)\n",    \
                __FILE__, __LINE__, #cond, (unsigned long long)weft_seed());   \
            return -1;                                                         \
        }                                                                      \
    } while (0)

typedef struct peer {
    int beats;       /* heartbeats to send */
    int64_t at[10];  /* when: ns after the watch began */
    int goodbye;     /* then close the channel (else fall silent) */
    weft_chan *ch;   /* set by watch() */
    weft_time start; /* set by watch() */
} peer;

static int play(void *arg)
{
    peer *p = arg;
    for (int i = 0; i < p->beats; i++) {
        int rc = weft_sleep_until(p->start + p->at[i]);
        if (rc == 0)
            rc = weft_chan_send(p->ch, &i);
        if (rc == -EPIPE)
            return 0; /* the test is over: it closed the channel */
        if (rc != 0)
            return rc;
    }
    if (p->goodbye)
        weft_chan_close(p->ch);
    return 0;
}

/* Runs the watchdog against peer p: returns what it said, and sets *after
 * to how long after the start it said it. */
static int watch(peer *p, int64_t *after)
{
    weft_scope *s;
    if (weft_chan_new(&p->ch, sizeof(int), 1) != 0 ||
        weft_scope_open(&s, NULL) != 0)
        return -ENOMEM;
    p->start = weft_now();
    weft_spawn(s, play, p);
    int rc = watchdog(p->ch, 30 * SEC);
    *after = weft_now() - p->start;
    weft_chan_close(p->ch); /* ends a peer still beating */
    weft_scope_join(s);
    weft_scope_free(s);
    weft_chan_unref(p->ch);
    return rc;
}

static int test_watchdog(void *arg)
{
    int64_t after;

    /* Three beats, 10 s apart, then silence: dead 30 s after the last. */
    peer silent = {.beats = 3, .at = {10 * SEC, 20 * SEC, 30 * SEC}};
    CHECK(watch(&silent, &after) == -ETIMEDOUT);
    CHECK(after == 60 * SEC);

    /* A beat every 10 s, then a goodbye at 100 s: alive to the end. */
    peer polite = {.beats = 10, .goodbye = 1};
    for (int i = 0; i < 10; i++)
        polite.at[i] = (i + 1) * 10 * SEC;
    CHECK(watch(&polite, &after) == 0);
    CHECK(after == 100 * SEC);

    /* One beat just in time, the next 1 ns too late. */
    int64_t just = 30 * SEC - 1;
    peer late = {.beats = 2, .at = {just, just + 30 * SEC + 1}};
    CHECK(watch(&late, &after) == -ETIMEDOUT);
    CHECK(after == just + 30 * SEC);
    return 0;
}

int main(void)
{
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (uint64_t seed = 1; seed <= 20; seed++) {
        weft_config cfg = {.workers = 1, .clock = WEFT_CLOCK_VIRTUAL};
        cfg.seed = seed; /* the environment's WEFT_SEED, if set, wins */
        if (weft_run(&cfg, test_watchdog, NULL) != 0)
            return 1; /* the failed CHECK said which seed */
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    long long ms =
        (b.tv_sec - a.tv_sec) * 1000LL + (b.tv_nsec - a.tv_nsec) / 1000000;
    printf("20 seeds, 220 s of virtual time each: passed in %lld ms\n", ms);
    return 0;
}
