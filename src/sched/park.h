/* SPDX-License-Identifier: MIT */
/*
 * The scheduler's park and wake (sched.c), for the wait layer, which every
 * blocking primitive waits through, and the few callers that wake or
 * count outside work themselves.
 */
#ifndef WEFT_SCHED_PARK_H
#define WEFT_SCHED_PARK_H

#include "sched/task.h"

/* ---- park and wake (sched.c) ---- */

/* Parks the running task. Before calling, the caller has taken a token with
 * weft__park_prepare() and published it where wakers find it (under the
 * primitive's lock, released before this call). Returns the wake code: 0 or
 * the waker's code for an event, -ETIMEDOUT for the deadline, -ECANCELED for
 * cancellation (only if the token is cancellable). */
uint64_t weft__park_prepare(weft_task *t, bool cancellable);
/* The canceller's side of the park/cancel Dekker pair. */
void weft__cancel_fence(void);
int weft__park_commit(weft_worker *w, weft_task *t, int64_t deadline);
/* Wakes the task parked with `token`, with `code` as park's result. Returns
 * true if this call woke it, false if the park was already over (someone
 * else won). Any thread. */
bool weft__wake(weft_task *t, uint64_t token, int code);
/* weft__wake in two steps, for wakers that must hand data over between
 * winning the race and letting the task run: claim (true: this caller won;
 * the task stays parked until finish), then finish (sets the wake code and
 * queues it). Any thread. */
bool weft__wake_claim(weft_task *t, uint64_t token);
void weft__wake_finish(weft_task *t, int code);
/* A random number from the calling worker's generator (seeded runs stay
 * reproducible), or a thread-local one outside a runtime. */
uint64_t weft__rand(void);
/* Wakes t if it is parked cancellably in a cancelled scope. Any thread. */
void weft__wake_if_cancelled(weft_task *t);
/* Work was made for w by another thread: w leaves the clock's idle books
 * and is woken if it sleeps. Any thread. */
void weft__worker_notify(weft_worker *w);
/* Queues t on worker w, from w's own thread (or before w runs). */
void weft__make_ready(weft_worker *w, weft_task *t);
/* Pending work outside the runtime (WEFT__PENDING_*): a task of w's about
 * to park on it counts itself (+1) before the park and uncounts itself
 * (-1) after, on w's thread. An idle worker with descriptor waits polls
 * and sleeps in its poller; the virtual clock gives both kinds a grace
 * of real time before it jumps. Plain loads and stores of w's own
 * counter: no shared atomic on the path. */
static inline void weft__pending_add(weft_worker *w, int kind, int delta)
{
    WEFT_ASSERT_MSG(w == weft__tl_worker &&
                        ld_rlx(&weft__wpub(w)->pending[kind]) + delta >= 0,
                    "a pending count changed off its worker, or below 0");
    st_rlx(&weft__wpub(w)->pending[kind],
           ld_rlx(&weft__wpub(w)->pending[kind]) + delta);
}
/* weft__pending_add by the running task of w for its own park on that
 * work: the task stays on w meanwhile (weft__task_anchor), where the
 * count and the work are. */
static inline void weft__pending_park(weft_worker *w, int kind, int delta)
{
    weft__pending_add(w, kind, delta);
    weft__task_anchor(ld_rlx(&weft__wpub(w)->cur), delta);
}
/* w's own count (w's thread). */
static inline int weft__pending(weft_worker *w, int kind)
{
    return ld_rlx(&weft__wpub(w)->pending[kind]);
}

#endif
