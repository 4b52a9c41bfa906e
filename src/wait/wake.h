/* SPDX-License-Identifier: MIT */
/*
 * The wait layer's waking side, for the primitives that wake their
 * waiters (wait/wait.h tells the protocol): claims of waiters taken off
 * their queues under the object's lock, the grant helper of FIFO queues,
 * the wakes finished after unlocking, and an object's one waiter.
 */
#ifndef WEFT_WAIT_WAKE_H
#define WEFT_WAIT_WAKE_H

#include "sched/park.h"
#include "wait/queue.h"

/* A notify waiter's claim (wait.c): records w->index in its set; true if
 * that claimed the set's parked task. */
bool weft__waitset_fire(weft__waiter *w);

/* The claim of either kind of waiter (it is off its queue): true if the
 * caller won w's task, which it then hands over to and finishes (a plain
 * waiter also records its case for select). */
static inline bool weft__waiter_claim(weft__waiter *w)
{
    WEFT_ASSERT(w->task != NULL);
    WEFT_ASSERT_MSG(!w->queued, "a waiter claimed while still queued");
    if (WEFT_UNLIKELY(w->set != NULL))
        return weft__waitset_fire(w);
    if (!weft__wake_claim(w->task, w->token))
        return false;
#if defined(WEFT__ASSERTS)
    /* One claim per wait: its token is spent, so a second cannot win. */
    WEFT_ASSERT_MSG(!w->claimed, "a waiter claimed twice");
    w->claimed = true;
#endif
    if (w->fired)
        *w->fired = w->index;
    return true;
}

/* The claim of a waiter that is its task's only one (armed by weft__wait
 * or a variant: never a select's nor a set's), as weft__waiter_claim
 * without looking for either: an object's one waiter (weft__slot_claim),
 * an actor's tells and asks. */
static inline bool weft__waiter_claim_one(weft__waiter *w)
{
    WEFT_ASSERT(w->task != NULL && w->set == NULL);
    WEFT_ASSERT_MSG(!w->queued, "a waiter claimed while still queued");
    if (!weft__wake_claim(w->task, w->token))
        return false;
#if defined(WEFT__ASSERTS)
    WEFT_ASSERT_MSG(!w->claimed, "a waiter claimed twice");
    w->claimed = true;
#endif
    return true;
}

/* Pops waiters until one is claimed; returns it, or NULL. */
static inline weft__waiter *weft__waitq_claim(weft__waitq *q)
{
    weft__waiter *w;
    while ((w = q->head) != NULL) {
        weft__waitq_remove(q, w);
        if (weft__waiter_claim(w))
            return w;
    }
    return NULL;
}

/* Claims every waiter of q (under its primitive's lock) and appends them,
 * in arrival order, to a chain through `next` whose end is *tail; returns
 * the chain's new end (tail itself if none was claimed). */
static inline weft__waiter **weft__waitq_claim_all(weft__waitq *q,
                                                   weft__waiter **tail)
{
    weft__waiter *w;
    while ((w = weft__waitq_claim(q)) != NULL) {
        w->next = NULL;
        *tail = w;
        tail = &w->next;
    }
    return tail;
}

/* The grant helper of FIFO queues whose head must fit (semaphores,
 * rwlocks, bulkheads): while q's head fits (fits(w, ctx)), pops it and,
 * if it is claimed, takes what it wants (take(w, ctx)) and appends it to
 * the chain ending at *tail. A head whose claim fails is dropped and the
 * next one looked at. Under the primitive's lock; returns the chain's new
 * end. static inline, so the two callbacks inline at each use. */
static inline weft__waiter **
weft__waitq_grant(weft__waitq *q, bool (*fits)(const weft__waiter *, void *),
                  void (*take)(weft__waiter *, void *), void *ctx,
                  weft__waiter **tail)
{
    weft__waiter *w;
    while ((w = q->head) != NULL && fits(w, ctx)) {
        weft__waitq_remove(q, w);
        if (!weft__waiter_claim(w))
            continue;
        take(w, ctx);
        w->next = NULL;
        *tail = w;
        tail = &w->next;
    }
    return tail;
}

/* Finishes the wakes of a chain of claimed waiters (after unlocking), each
 * with `code`. A waiter's memory is gone once its task runs. */
static inline void weft__wake_chain(weft__waiter *w, int code)
{
    while (w) {
        weft__waiter *next = w->next;
        weft__wake_finish(w->task, code);
        w = next;
    }
}

/* A chain of claimed waiters through `next`, to finish after unlocking. */
typedef struct weft__chain weft__chain;
struct weft__chain {
    weft__waiter *head, **tail;
};

static inline void weft__chain_init(weft__chain *c)
{
    c->head = NULL;
    c->tail = &c->head;
}

static inline void weft__chain_add(weft__chain *c, weft__waiter *w)
{
    w->next = NULL;
    *c->tail = w;
    c->tail = &w->next;
}

/* ---- an object's one waiter ---- */

/* Under the object's lock: claims the waiter in *slot (put there by
 * weft__wait with s->slot) and empties the slot. Returns the waiter,
 * claimed (hand it what it waits for, then weft__wake_finish its task
 * after unlocking), or NULL if there was none or its park ended
 * otherwise (a cancel: it takes itself out when it runs). */
static inline weft__waiter *weft__slot_claim(weft__waiter **slot)
{
    weft__waiter *w = *slot;
    if (!w)
        return NULL;
    *slot = NULL;
    return weft__waiter_claim_one(w) ? w : NULL;
}

/* Starts t, made parked without ever having run (the shutdown keeper):
 * the one wake, with code 0, that queues it on t->worker. Any thread. */
void weft__wake_new(weft_task *t);

#endif
