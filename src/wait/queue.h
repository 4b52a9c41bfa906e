/* SPDX-License-Identifier: MIT */
/*
 * The wait layer's waiters and their queues, for the objects that keep
 * waiters (a queue or a waiter in their structs) and their wakers
 * (wait/wake.h). The protocol is wait/wait.h's.
 */
#ifndef WEFT_WAIT_QUEUE_H
#define WEFT_WAIT_QUEUE_H

#include "util/util.h"

typedef struct weft__waitset weft__waitset;

/* A task waiting on a primitive, on the waiting task's own stack, guarded
 * by the primitive's lock. */
typedef struct weft__waiter {
    struct weft__waiter *next, *prev;
    weft_task *task;
    uint64_t token;     /* the task's park token (plain waiters) */
    weft__waitset *set; /* notify waiters: the set it fires into */
    void *elem;         /* channels: the value to send, or where to receive */
    long n;             /* semaphores, rwlocks, bulkheads: units wanted */
    int index;          /* select: this waiter's case; sets: its source */
    int *fired;         /* select: where the claim writes the case */
    int64_t since;      /* mutex: when it first queued (starvation) */
    bool queued;
    bool claimed; /* asserts only: a claim won it since it was armed */
} weft__waiter;

typedef struct weft__waitq {
    weft__waiter *head, *tail;
} weft__waitq;

static inline bool weft__waitq_empty(const weft__waitq *q)
{
    return q->head == NULL;
}

static inline void weft__waitq_push(weft__waitq *q, weft__waiter *w)
{
    w->next = NULL;
    w->prev = q->tail;
    if (q->tail)
        q->tail->next = w;
    else
        q->head = w;
    q->tail = w;
    w->queued = true;
}

/* Queues w first in line (a woken mutex waiter that lost keeps its turn). */
static inline void weft__waitq_push_front(weft__waitq *q, weft__waiter *w)
{
    w->prev = NULL;
    w->next = q->head;
    if (q->head)
        q->head->prev = w;
    else
        q->tail = w;
    q->head = w;
    w->queued = true;
}

/* Unlinks w if it is queued (a no-op otherwise): the "unlink" of both
 * kinds of waiter. */
static inline void weft__waitq_remove(weft__waitq *q, weft__waiter *w)
{
    if (!w->queued)
        return;
    /* w is on q, not on another queue, and q is whole around it. */
    WEFT_ASSERT_MSG(w->prev ? w->prev->next == w : q->head == w,
                    "a waiter unlinked from a queue it is not on");
    WEFT_ASSERT_MSG(w->next ? w->next->prev == w : q->tail == w,
                    "a waiter unlinked from a queue it is not on");
    if (w->prev)
        w->prev->next = w->next;
    else
        q->head = w->next;
    if (w->next)
        w->next->prev = w->prev;
    else
        q->tail = w->prev;
    w->queued = false;
}

#endif
