/* SPDX-License-Identifier: MIT */
/*
 * The wait layer's waits on several queues at once, of which exactly one
 * wins (wait.c's weft__wait_many), and the protocol of select's cases
 * built on them: for select and the layers that give it cases.
 */
#ifndef WEFT_WAIT_MANY_H
#define WEFT_WAIT_MANY_H

#include "wait/queue.h"
#include "wait/record.h"

/* Several waits at once, and select's cases over them (below), which
 * append the waiters they claim to a chain (wait/wake.h). */
typedef struct weft__arm weft__arm;
typedef struct weft__chain weft__chain;

/* ---- several waits at once, exactly one wins ---- */

/* One case of a wait_many: a waiter to queue on q, under lock (NULL lock
 * and queue: a case that only bounds the wait, such as a deadline). */
struct weft__arm {
    weft__lock *lock;
    weft__waitq *q;
    weft__waiter w; /* elem, n set by the caller; the rest by wait_many */
};

/* Sorts the distinct non-NULL locks of the n arms into order[] by
 * address (the order every multi-lock wait takes them in, so two waits
 * over the same objects cannot deadlock); returns how many. */
int weft__locks_order(const weft__arm *arms, int n, weft__lock **order);
void weft__locks_acquire(weft__lock **order, int k);
void weft__locks_release(weft__lock **order, int k);

/* The caller holds the k locks of order[] (weft__locks_acquire) and found
 * no arm ready. A past deadline returns -ETIMEDOUT at once. Otherwise
 * queues every arm's waiter with one park token, releases the locks,
 * parks, then relocks, unlinks what is still queued, and releases them.
 * Returns the index of the arm whose waiter was claimed, with the waker's
 * code in *code (0, or e.g. -EPIPE from a close), or -ETIMEDOUT /
 * -ECANCELED if none was. */
int weft__wait_many(weft__lock **order, int k, weft__arm *arms, int n,
                    const weft__wait_kind *kind, const void *obj,
                    int64_t deadline, int *code);

/* ---- select's cases ----
 * weft_select (select.c) drives each kind of case through four functions
 * its object's layer gives, named weft__K_case_* (one row per weft_op of
 * select.c's table; select/select.h adds three optional ones: ready,
 * recheck, lost):
 *
 *   int check(const weft_case *c)
 *       Any lock-free validation: 0 if the case is valid and on, 1 if it
 *       is switched off (NULL object, negative fd), -EINVAL, -EPERM.
 *   weft__lock *lock(weft_case *c)
 *       The lock that guards the case's object.
 *   int try(weft_case *c, weft__arm *a, weft__chain *woken)
 *       Under that lock (every case's lock is held): if the case can take
 *       effect now, does it, sets c->rc and returns 0, with any waiter it
 *       claimed (a sender it took from, say) appended to woken, finished
 *       with 0 after unlocking. Otherwise returns -EAGAIN and sets a->q
 *       (and a->w.elem, a->w.n) for the wait. Called at most once per
 *       round of tries with the locks held; a second round comes only
 *       after a wait that no waiter's claim ended (a recheck instant).
 *   void won(weft_case *c, int code)
 *       The case's waiter was claimed (code: the waker's) and its object
 *       handed it whatever it waited for; sets c->rc. No lock held.
 *
 * The scope case is the one whose effect cannot happen under its lock
 * (the join takes the scope's lock itself): its try returns 0 without
 * setting rc when no child runs, and select, once it has chosen that
 * case, calls won(c, 0) after unlocking in both paths (try returned 0,
 * or its waiter was claimed by the last child's exit); won joins the
 * scope and sets rc.
 *
 * The claim protocol makes exactly one case take effect: a waker hands
 * over (a value, a permit) only after claiming the select's token, which
 * succeeds once.
 */

#endif
