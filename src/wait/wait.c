/* SPDX-License-Identifier: MIT */
/*
 * The wait layer: the one way a task waits for something. The entry and
 * its protocol (waiters, claims, deadlines, cancels) are told at the top
 * of wait.h; several waits at once in many.h; wait sets in waitset.h.
 */
#include "wait/wait.h"
#include "sched/clock.h"
#include "wait/many.h"
#include "wait/seen.h"
#include "wait/waitset.h"

#include <string.h>

const weft__wait_kind weft__wk_sleep = {WEFT_WAIT_SLEEP, "sleep"};
const weft__wait_kind weft__wk_select = {WEFT_WAIT_SELECT, "select"};

/* Asked by the scheduler for the task parking on this worker, before it
 * switches away: a waker on another worker may have claimed the park
 * already (so t need not look parked), but t runs again only here, so
 * its record holds still. */
int weft__wait_of(const weft_task *t, const void **obj)
{
    WEFT_ASSERT_MSG(weft__task_is_current(t),
                    "the wait record asked of a task not parking here");
    *obj = weft__task_wait_obj(t);
    return weft__wait_kind_id(weft__task_wait_kind(t));
}

void weft__wait_leave(weft__lock *l, weft__waitq *q, weft__waiter *w)
{
    weft__lock_acquire(l);
    weft__waitq_remove(q, w);
    weft__lock_release(l);
}

void weft__wait_leave_slot(weft__lock *l, weft__waiter **slot, weft__waiter *w)
{
    weft__lock_acquire(l);
    if (*slot == w) /* else a claim emptied it, and failed */
        *slot = NULL;
    weft__lock_release(l);
}

void weft__wait_leave_by(weft__lock *l,
                         void (*withdraw)(weft__waiter *, void *), void *ctx,
                         weft__waiter *w)
{
    weft__lock_acquire(l);
    withdraw(w, ctx);
    weft__lock_release(l);
}

int weft__wait_pmutex(weft__waiter *w, const weft__wait_spec *s,
                      pthread_mutex_t *m)
{
    WEFT_ASSERT(s->lock == NULL && s->slot == NULL && s->publish == NULL);
    weft__wait_arm(w, s, ld_rlx(&weft__wpub(weft__tl_worker)->cur));
    if (s->q && !(s->flags & WEFT__WAIT_QUEUED))
        weft__waitq_push(s->q, w);
    pthread_mutex_unlock(m);
    weft__wait_spec unlocked = *s;
    unlocked.q = NULL; /* taken back here, keeping m */
    int rc = weft__wait_block(w, &unlocked);
    if (weft__wait_unclaimed(rc)) {
        pthread_mutex_lock(m);
        if (s->q)
            weft__waitq_remove(s->q, w);
    }
    return rc;
}

int weft__wait_sleep(const weft__wait_spec *s)
{
    WEFT_ASSERT(s->lock == NULL && s->q == NULL && s->slot == NULL);
    weft_worker *wk = weft__tl_worker;
    weft_task *t = ld_rlx(&weft__wpub(wk)->cur);
    weft__wait_note(t, s->kind, s->obj);
    st_rlx(&weft__wait_rec(t)->wait_until, s->deadline);
    weft__park_prepare(t, !(s->flags & WEFT__WAIT_FIRM));
    /* Nothing waits on the stack here: a compact task may give it back
     * (wait/compact.c). */
    unsigned may = t->flags & TASK_COMPACT ? TASK_MAY_RELEASE : 0;
    t->flags |= may;
    int rc = weft__park_commit(wk, t, s->deadline);
    t->flags &= ~may;
    return rc;
}

/* ---- several at once ---- */

int weft__locks_order(const weft__arm *arms, int n, weft__lock **order)
{
    int k = 0;
    for (int i = 0; i < n; i++) {
        weft__lock *l = arms[i].lock;
        if (!l)
            continue;
        int j = k;
        while (j > 0 && order[j - 1] > l)
            j--;
        if (j > 0 && order[j - 1] == l)
            continue; /* already there */
        memmove(order + j + 1, order + j, (size_t)(k - j) * sizeof(*order));
        order[j] = l;
        k++;
    }
    return k;
}

void weft__locks_acquire(weft__lock **order, int k)
{
    for (int i = 0; i < k; i++)
        weft__lock_acquire(order[i]);
}

void weft__locks_release(weft__lock **order, int k)
{
    for (int i = k - 1; i >= 0; i--)
        weft__lock_release(order[i]);
}

int weft__wait_many(weft__lock **order, int k, weft__arm *arms, int n,
                    const weft__wait_kind *kind, const void *obj,
                    int64_t deadline, int *code)
{
    if (deadline != WEFT_NEVER && weft__wait_past(deadline)) {
        weft__locks_release(order, k);
        return -ETIMEDOUT;
    }
    /* n == 0: nothing to wait for but the deadline or a cancel (an empty
     * select, which blocks as Go's select {} does). */
    WEFT_ASSERT(n >= 0 && k >= 0 && k <= n);
    weft_worker *wk = weft__tl_worker;
    weft_task *t = ld_rlx(&weft__wpub(wk)->cur);
    int fired = -1;
    weft__wait_note(t, kind, obj);
    st_rlx(&weft__wait_rec(t)->wait_n, n);
    uint64_t token = weft__park_prepare(t, true);
    for (int i = 0; i < n; i++) {
        weft__waiter *w = &arms[i].w;
        w->task = t;
        w->token = token;
        w->set = NULL;
        w->index = i;
        w->fired = &fired;
        w->queued = false;
#if defined(WEFT__ASSERTS)
        w->claimed = false;
#endif
        if (arms[i].q)
            weft__waitq_push(arms[i].q, w);
    }
    weft__locks_release(order, k);
    int rc = weft__park_commit(wk, t, deadline);
    weft__locks_acquire(order, k);
    for (int i = 0; i < n; i++)
        if (arms[i].q)
            weft__waitq_remove(arms[i].q, &arms[i].w);
    weft__locks_release(order, k);
    /* A claim records its case before it finishes the wake: a park that
     * was claimed (not timed out nor cancelled) names one. */
    WEFT_ASSERT(fired < n);
    if (fired >= 0 && !weft__wait_unclaimed(rc)) {
        *code = rc;
        return fired;
    }
    return rc;
}

/* ---- wait sets ---- */

void weft__waitset_init(weft__waitset *s, int *fired,
                        const weft__wait_kind *kind, const void *obj)
{
    weft_task *t = ld_rlx(&weft__wpub(weft__tl_worker)->cur);
    *s = (weft__waitset){.task = t, .fired = fired};
    weft__wait_note(t, kind, obj);
}

bool weft__waitset_fire(weft__waiter *w)
{
    weft__waitset *s = w->set;
    bool won = false;
    weft__lock_acquire(&s->lock);
    WEFT_ASSERT(s->fired != NULL && s->nfired >= s->seen);
    s->fired[s->nfired++] = w->index;
    if (s->token && weft__wake_claim(s->task, s->token)) {
        s->token = 0;
        won = true;
    }
    weft__lock_release(&s->lock);
    return won;
}

int weft__waitset_wait(weft__waitset *s, int64_t deadline, int *code, int *from,
                       int *to)
{
    WEFT_ASSERT_MSG(weft__task_is_current(s->task),
                    "a wait set waited on by another task");
    weft__lock_acquire(&s->lock);
    WEFT_ASSERT(s->seen <= s->nfired);
    while (s->seen == s->nfired) {
        if (*code) { /* gave up, and nothing came meanwhile */
            weft__lock_release(&s->lock);
            return *code;
        }
        if (weft__wait_past(deadline)) {
            weft__lock_release(&s->lock);
            return *code = -ETIMEDOUT;
        }
        weft_worker *wk = weft__tl_worker;
        s->token = weft__park_prepare(s->task, true);
        weft__lock_release(&s->lock);
        int rc = weft__park_commit(wk, s->task, deadline);
        *code = weft__wait_unclaimed(rc) ? rc : 0;
        weft__lock_acquire(&s->lock);
        s->token = 0; /* a claim clears it; a timeout or cancel does not */
    }
    *from = s->seen;
    *to = s->nfired;
    s->seen = s->nfired;
    weft__lock_release(&s->lock);
    return 0;
}

void weft__wake_new(weft_task *t)
{
    weft__wake(t, weft__park_prepare(t, false), 0);
}

/* ---- public: sleeping ---- */

int weft_sleep_until(weft_time t)
{
    weft_worker *w = weft__tl_worker;
    if (!w || !weft__wpub(w)->cur)
        return -EPERM;
    if (weft__wait_past(t))
        return weft_cancelled() ? -ECANCELED : 0;
    int rc = weft__wait_sleep(
        &(weft__wait_spec){.kind = &weft__wk_sleep, .deadline = t});
    return rc == -ETIMEDOUT ? 0 : rc;
}

int weft_sleep_for(int64_t ns)
{
    weft_worker *w = weft__tl_worker;
    if (!w || !weft__wpub(w)->cur)
        return -EPERM;
    if (ns <= 0)
        return weft_cancelled() ? -ECANCELED : 0;
    return weft_sleep_until(weft__add_sat(weft__now(weft__wpub(w)->rt), ns));
}
