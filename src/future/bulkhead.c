/* SPDX-License-Identifier: MIT */
/*
 * Bulkhead: at most max_calls turns held at once, and at most max_queue
 * tasks waiting for one.
 *
 * A counting semaphore of turns with a bounded FIFO wait queue, under one
 * spinlock, built as weft_sem is (sync.c), waiting through the wait layer
 * (wait.h): a waiter queues a weft__waiter on its own stack
 * (weft__wait) and parks; whoever hands it a turn first claims it
 * (weft__waitq_claim), so a waiter that wakes with -ETIMEDOUT or
 * -ECANCELED was handed nothing, and the wait layer takes it off the
 * queue.
 *
 * Counts, both under the lock:
 * - held: turns held, including a turn handed to a waiter that has not
 *   run yet. leave without a turn held is -EINVAL.
 * - waiting: enter calls that will still touch the bulkhead: the queued
 *   ones and those woken by their deadline or a cancel that have not yet
 *   taken themselves off. A waiter handed a turn stops counting here the
 *   moment it is claimed (its turn is in `held` instead). It is also what
 *   max_queue bounds: a waiter woken by its deadline or a cancel keeps its
 *   place in the count until it has run and left.
 * free is -EBUSY while held or waiting is not zero, so no enter or leave
 * in progress can touch a freed bulkhead.
 *
 * No barging: leave hands its turn straight to the first waiter it can
 * claim (held stays the same) and frees the turn only when nobody waits.
 * So "someone waits" implies "every turn is held", and enter takes a free
 * turn at once only when nobody waits: waiters are served in arrival
 * order, and an arriving task never overtakes them.
 *
 * Cancellation. A waiter whose deadline passes or whose scope is
 * cancelled before it was handed a turn leaves the queue and returns
 * -ETIMEDOUT / -ECANCELED: leave skips a waiter whose claim fails and
 * hands the turn to the next. A waiter that was handed a turn but finds
 * its scope cancelled when it runs (the hand-off and the cancel raced,
 * and the hand-off won) does not keep it: it passes the turn on to the
 * next waiter (or frees it) and returns -ECANCELED. Either way a cancelled
 * enter holds no turn and no turn is lost.
 *
 * enter is a checkpoint (-ECANCELED at once in a cancelled scope, even
 * with a turn free); a full queue is -EBUSY at once; a deadline already
 * past when it would have to wait is -ETIMEDOUT at once, queueing
 * nothing.
 */
#include "future/future.h"
#include "util/fault.h"
#include "wait/many.h"
#include "wait/wait.h"

#include <stdlib.h>

const weft__wait_kind weft__wk_bulkhead = {WEFT_WAIT_BULKHEAD, "bulkhead"};

struct weft_bulkhead {
    weft__lock lock; /* guards every field below */
    int max_calls, max_queue;
    int held;    /* turns held (see the top comment) */
    int waiting; /* enter calls still to touch the bulkhead */
    weft__waitq q;
};

int weft_bulkhead_new(weft_bulkhead **out, int max_calls, int max_queue)
{
    if (!out || max_calls < 1 || max_queue < 0)
        return -EINVAL;
    weft_bulkhead *b = weft__calloc(1, sizeof(*b));
    if (!b)
        return -ENOMEM;
    b->max_calls = max_calls;
    b->max_queue = max_queue;
    *out = b;
    return 0;
}

int weft_bulkhead_free(weft_bulkhead *b)
{
    if (!b)
        return -EINVAL;
    weft__lock_acquire(&b->lock);
    bool busy = b->held > 0 || b->waiting > 0;
    weft__lock_release(&b->lock);
    if (busy)
        return -EBUSY;
    free(b);
    return 0;
}

/* Under the lock, a turn held by the caller: hands it to the first waiter
 * that can be claimed and returns that waiter (the caller finishes its
 * wake after unlocking), or frees the turn and returns NULL. Each waiter
 * wants one turn and there is one to give, so the wait layer's claim (pop
 * until one is claimed; a waiter woken otherwise is skipped) is the whole
 * grant. */
static weft__waiter *hand_on(weft_bulkhead *b)
{
    weft__waiter *w = weft__waitq_claim(&b->q);
    if (w)
        b->waiting--;
    else
        b->held--;
    return w;
}

static void give_back(weft_bulkhead *b)
{
    weft__lock_acquire(&b->lock);
    weft__waiter *w = hand_on(b);
    weft__lock_release(&b->lock);
    if (w)
        weft__wake_finish(w->task, 0);
}

/* Under b->lock: a turn now (0), a full queue (-EBUSY), or -EAGAIN,
 * counted as waiting. enter and select's case both admit so. */
static int admit_locked(weft_bulkhead *b)
{
    if (b->held < b->max_calls && weft__waitq_empty(&b->q)) {
        b->held++;
        return 0;
    }
    if (b->waiting >= b->max_queue)
        return -EBUSY;
    b->waiting++;
    return -EAGAIN;
}

int weft_bulkhead_enter(weft_bulkhead *b, weft_time deadline)
{
    if (!b)
        return -EINVAL;
    int rc = weft__checkpoint();
    if (rc)
        return rc;
    weft__lock_acquire(&b->lock);
    rc = admit_locked(b);
    if (rc != -EAGAIN) {
        weft__lock_release(&b->lock);
        return rc;
    }
    weft__waiter self = {0};
    rc = weft__wait(&self, &(weft__wait_spec){.kind = &weft__wk_bulkhead,
                                              .obj = b,
                                              .lock = &b->lock,
                                              .q = &b->q,
                                              .deadline = deadline});
    if (rc == 0) {
        /* Handed a turn (held counts it; we are off the queue). */
        if (!weft__checkpoint())
            return 0;
        give_back(b); /* cancelled as the turn came: pass it on */
        return -ECANCELED;
    }
    /* Deadline (perhaps already past: nothing was queued) or cancel:
     * nobody claimed us, so we hold nothing, and we are off the queue. */
    weft__lock_acquire(&b->lock);
    b->waiting--;
    weft__lock_release(&b->lock);
    return rc;
}

int weft_bulkhead_leave(weft_bulkhead *b)
{
    if (!b)
        return -EINVAL;
    weft__lock_acquire(&b->lock);
    if (b->held == 0) {
        weft__lock_release(&b->lock);
        return -EINVAL;
    }
    weft__waiter *w = hand_on(b);
    weft__lock_release(&b->lock);
    if (w)
        weft__wake_finish(w->task, 0);
    return 0;
}

int weft_bulkhead_call(weft_bulkhead *b, weft_fn fn, void *arg,
                       weft_time deadline)
{
    if (!b || !fn)
        return -EINVAL;
    int rc = weft_bulkhead_enter(b, deadline);
    if (rc)
        return rc;
    int status = fn(arg);
    weft_bulkhead_leave(b);
    return status;
}

/* ---- select's cases ----
 * BULKHEAD (wait/many.h, "select's cases"): a select waits for a turn as
 * weft_bulkhead_enter does, counted in `waiting` (so max_queue bounds it
 * and free says -EBUSY) and queued in line; hand_on claims it before it
 * hands it the turn, so a select that another case won holds no turn,
 * and lost takes it out of `waiting` again. */

int weft__bulkhead_case_check(const weft_case *c)
{
    return c->bulkhead ? 0 : 1;
}

weft__lock *weft__bulkhead_case_lock(weft_case *c)
{
    return &c->bulkhead->lock;
}

int weft__bulkhead_case_try(weft_case *c, weft__arm *a, weft__chain *woken)
{
    WEFT_UNUSED(woken);
    weft_bulkhead *b = c->bulkhead;
    int rc = admit_locked(b);
    if (rc != -EAGAIN) {
        c->rc = rc; /* -EBUSY as enter: at once, nothing held */
        return 0;
    }
    a->q = &b->q;
    a->w.elem = NULL;
    a->w.n = 1;
    return -EAGAIN;
}

void weft__bulkhead_case_won(weft_case *c, int code)
{
    c->rc = code; /* 0: hand_on gave us a turn (and uncounted us) */
}

void weft__bulkhead_case_lost(weft_case *c)
{
    weft_bulkhead *b = c->bulkhead;
    weft__lock_acquire(&b->lock);
    b->waiting--;
    weft__lock_release(&b->lock);
}
