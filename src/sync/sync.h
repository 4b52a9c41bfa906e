/* SPDX-License-Identifier: MIT */
/*
 * The sync layer: channels (chan.c), the mutex, semaphore, event and wait
 * group (sync.c), the rwlock (rwlock.c), the condition variable, once and
 * barrier (cond.c). The layer's select cases are in sync/cases.h.
 */
#ifndef WEFT_SYNC_H
#define WEFT_SYNC_H

#include "sched/task.h"

/* ---- the sync layer's part of a runtime (weft_runtime.ext) ---- */

struct weft__sync_rt {
    /* Called by a task that found its mutex wait would close a cycle:
     * chain[0] is the caller, mutexes[i] what chain[i] waits for, held by
     * chain[(i + 1) % n]. Returns the code the lock returns (-EDEADLK), or
     * 0 to wait anyway. NULL: cycles are not looked for. Set by the
     * observe layer (deadlock.c) before any task runs. */
    int (*on_mutex_cycle)(weft_runtime *rt, weft_task *const *chain,
                          const void *const *mutexes, int n);
};

_Static_assert(sizeof(struct weft__sync_rt) <= WEFT__RT_IO - WEFT__RT_SYNC,
               "the sync layer's part fits in weft_runtime.ext");

static inline struct weft__sync_rt *weft__sync_rt(weft_runtime *rt)
{
    return (struct weft__sync_rt *)(void *)(weft__rtpub(rt)->ext +
                                            WEFT__RT_SYNC);
}

/* ---- the sync layer's part of a task (weft_task.ext) ---- */

typedef struct weft__task_sync {
    /* The mutex the task waits for inside a contended lock, from the
     * lock's first queueing to its return (NULL otherwise, and always
     * when deadlock detection is off): an edge of the graph the mutex
     * cycle check walks. Written by the task and read by other threads
     * only under sync.c's cycle lock. Set and cleared by the same lock
     * call, so it is NULL between lives: a new task needs no reset. */
    const void *mutex_wait;
} weft__task_sync;

_Static_assert(sizeof(weft__task_sync) <= WEFT__EXT_ACTOR - WEFT__EXT_SYNC,
               "the sync layer's part fits in weft_task.ext");

static inline weft__task_sync *weft__sync_of_task(const weft_task *t)
{
    WEFT_ASSERT(t != NULL);
    return (weft__task_sync *)(uintptr_t)(t->ext + WEFT__EXT_SYNC);
}

/* ---- channels and the sync objects ---- */

/* The wait kinds of this layer (wait/record.h): a channel's send and receive
 * (chan.c), the mutex, semaphore, event and wait group (sync.c), the
 * rwlock (rwlock.c), the condition variable, once and barrier (cond.c). */
extern const struct weft__wait_kind weft__wk_send, weft__wk_recv,
    weft__wk_mutex, weft__wk_sem, weft__wk_event, weft__wk_waitgroup,
    weft__wk_rwlock, weft__wk_cond, weft__wk_once, weft__wk_barrier;

/* The element size of a live channel, or 0 if c is NULL or not one. Any
 * thread; never blocks. */
size_t weft__chan_elem(const weft_chan *c);

/* Locks m ignoring cancellation (condition variables re-lock with it
 * before returning, whatever ended the wait). Returns 0. Blocks. */
int weft__mutex_relock(weft_mutex *m);
/* 1 if the calling task holds m, else 0. */
int weft__mutex_held_by_me(weft_mutex *m);
/* The task that holds m, or NULL (free, or between two holders): a
 * snapshot for the task dump and the deadlock detector, which may read
 * the holder's id and name. Any thread; never blocks. */
weft_task *weft__mutex_owner(const weft_mutex *m);

#endif
