/* SPDX-License-Identifier: MIT */
/*
 * The wait layer's wait sets (wait.c): a task waits on several sources
 * and takes them in as they fire. For the future combinators.
 */
#ifndef WEFT_WAIT_WAITSET_H
#define WEFT_WAIT_WAITSET_H

#include "wait/record.h"
#include "wait/wake.h"

/* ---- wait sets: several sources, taken in as they fire ---- */

/* The future combinators' wait: the task registers a notify waiter (set =
 * this set, index = its source) on each source's queue; a source that
 * fires records the index in fired[] (room for every source) and wakes
 * the task if it is parked in weft__waitset_wait. */
struct weft__waitset {
    weft__lock lock;
    weft_task *task;
    uint64_t token; /* nonzero while the task is parked in the set */
    int *fired;     /* the sources' indexes, in firing order */
    int nfired;     /* written by fire */
    int seen;       /* taken in by the task */
};

/* A set for the running task, with room for fired[]'s sources. */
void weft__waitset_init(weft__waitset *s, int *fired,
                        const weft__wait_kind *kind, const void *obj);

/* Notify waiter number index of set s. */
static inline void weft__waitset_waiter(weft__waitset *s, weft__waiter *w,
                                        int index)
{
    *w = (weft__waiter){.task = s->task, .set = s, .index = index};
}

/* Waits until a source fires that the task has not taken in; returns the
 * range [*from, *to) of fired[] to take in now (0), or -ETIMEDOUT /
 * -ECANCELED when the deadline or a cancel came with nothing new. A
 * result that fired at the same time as a deadline or cancel wins: the
 * call returns it, and the next call the code. */
int weft__waitset_wait(weft__waitset *s, int64_t deadline, int *code, int *from,
                       int *to);

/* The end of a set's wait, however it ended (decided, deadline, cancel),
 * for each notify waiter w it queued: takes w off its source's queue q
 * under the source's lock l, so a source still firing w has finished
 * with the set (on the waiting task's stack) when this returns. A waiter
 * that fired is off its queue already: then only the lock is taken. */
static inline void weft__waitset_leave(weft__lock *l, weft__waitq *q,
                                       weft__waiter *w)
{
    weft__lock_acquire(l);
    weft__waitq_remove(q, w);
    weft__lock_release(l);
}

#endif
