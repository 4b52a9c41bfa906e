/* SPDX-License-Identifier: MIT */
/*
 * The clock seam: what time it is, and what an idle worker does while
 * time passes.
 *
 * Two implementations (clock.c), picked once per runtime by
 * weft__clock_init from weft_config.clock:
 * - monotonic: CLOCK_MONOTONIC; an idle worker looks for work a while
 *   (the scheduler's weft__idle_look), then sleeps until its next timer or
 *   a wake.
 * - virtual: time starts at 0 and moves only when every worker is idle,
 *   straight to the earliest timer of any worker, after real work the
 *   clock cannot see (descriptors, the blocking pool) was given a grace
 *   of real time (the autojump).
 * The scheduler never asks which one it has.
 */
#ifndef WEFT_CLOCK_H
#define WEFT_CLOCK_H

#include "sched/task.h"

typedef struct weft__clock_ops {
    const char *name;
    /* The runtime's time, ns. Any thread. */
    int64_t (*now)(weft_runtime *rt);
    /* Worker w has nothing to run: waits, on w's thread, until work may
     * have come for it or its next timer is due (the worker loop then
     * looks again). */
    void (*idle_until)(weft_worker *w);
    /* Moves the time forward to t if t is later. NULL: only real time
     * moves it. */
    void (*advance)(weft_runtime *rt, int64_t t);
    /* Another thread made work for w and is about to wake it
     * (weft__worker_notify): w leaves the clock's idle books. NULL: the
     * clock keeps none. Any thread. */
    void (*unidle)(weft_worker *w);
} weft__clock_ops;

extern const weft__clock_ops weft__clock_monotonic;
extern const weft__clock_ops weft__clock_virtual;

/* Picks rt's clock, once, before its workers are made (runtime_new). */
void weft__clock_init(weft_runtime *rt, weft_clock_kind kind,
                      int64_t autojump_ns);

/* CLOCK_MONOTONIC in ns: the time outside a runtime. */
int64_t weft__mono_now(void);

/* What the runtime's own books (lag, idle time, the deadlock grace) read
 * as real time: CLOCK_MONOTONIC, or in simulation, where nothing real may
 * be read, the virtual time. */
static inline int64_t weft__real_now(weft_runtime *rt)
{
    return weft__rtpub(rt)->sim ? weft__rtpub(rt)->clock_ops->now(rt)
                                : weft__mono_now();
}

/* The time of rt's clock, or the monotonic time for rt == NULL. */
static inline int64_t weft__now(weft_runtime *rt)
{
    return rt ? weft__rtpub(rt)->clock_ops->now(rt) : weft__mono_now();
}

#endif
