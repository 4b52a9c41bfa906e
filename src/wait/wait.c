/* SPDX-License-Identifier: MIT */
/*
 * The wait layer (see wait.h for the protocol): one wait, several waits
 * of which exactly one wins, and wait sets.
 */
#include "wait/wait.h"

#include <string.h>

static const char *const kind_names[WEFT__W_KINDS] = {
    [WEFT__W_NONE] = "nothing",
    [WEFT__W_SLEEP] = "sleep",
    [WEFT__W_SEND] = "channel send",
    [WEFT__W_RECV] = "channel receive",
    [WEFT__W_SELECT] = "select",
    [WEFT__W_MUTEX] = "mutex",
    [WEFT__W_RWLOCK] = "rwlock",
    [WEFT__W_COND] = "condition variable",
    [WEFT__W_SEM] = "semaphore",
    [WEFT__W_EVENT] = "event",
    [WEFT__W_WAITGROUP] = "wait group",
    [WEFT__W_ONCE] = "once",
    [WEFT__W_BARRIER] = "barrier",
    [WEFT__W_FUTURE] = "future",
    [WEFT__W_FD] = "descriptor",
    [WEFT__W_BLOCKING] = "blocking call",
    [WEFT__W_BULKHEAD] = "bulkhead",
    [WEFT__W_LIMITER] = "rate limiter",
    [WEFT__W_SCOPE] = "scope join",
    [WEFT__W_TASK] = "task join",
    [WEFT__W_MAILBOX] = "mailbox receive",
    [WEFT__W_TELL] = "actor tell",
    [WEFT__W_ASK] = "actor ask",
    [WEFT__W_ACTOR] = "actor exit",
    [WEFT__W_SUPERVISOR] = "supervisor",
};

const char *weft__wait_kind_name(int kind)
{
    return kind >= 0 && kind < WEFT__W_KINDS ? kind_names[kind] : "?";
}

void weft__wait_leave(weft__lock *l, weft__waitq *q, weft__waiter *w)
{
    weft__lock_acquire(l);
    weft__waitq_remove(q, w);
    weft__lock_release(l);
}

int weft__wait_park_mutex(pthread_mutex_t *m, weft__waitq *q, weft__waiter *w,
                          int64_t deadline)
{
    pthread_mutex_unlock(m);
    int rc = weft__park_commit(weft__tl_worker, w->task, deadline);
    if (weft__wait_unclaimed(rc)) { /* leave, and keep m for the caller */
        pthread_mutex_lock(m);
        weft__waitq_remove(q, w);
    }
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

int weft__wait_many(weft__lock **order, int k, weft__arm *arms, int n, int kind,
                    const void *obj, int64_t deadline, int *code)
{
    if (deadline != WEFT_NEVER && weft__wait_past(deadline)) {
        weft__locks_release(order, k);
        return -ETIMEDOUT;
    }
    WEFT_ASSERT(n > 0 && k >= 0 && k <= n);
    weft_worker *wk = weft__tl_worker;
    weft_task *t = ld_rlx(&wk->cur);
    int fired = -1;
    weft__wait_note(t, kind, obj);
    st_rlx(&t->wait_n, n);
    uint64_t token = weft__park_prepare(t, true);
    for (int i = 0; i < n; i++) {
        weft__waiter *w = &arms[i].w;
        w->task = t;
        w->token = token;
        w->set = NULL;
        w->index = i;
        w->fired = &fired;
        w->queued = false;
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

void weft__waitset_init(weft__waitset *s, int *fired, int kind, const void *obj)
{
    weft_task *t = ld_rlx(&weft__tl_worker->cur);
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

int weft__wait_sleep(int64_t deadline)
{
    return weft__wait_sleep_on(deadline, WEFT__W_SLEEP, NULL, 0);
}

int weft__wait_sleep_on(int64_t deadline, int kind, const void *obj, int flags)
{
    weft_worker *wk = weft__tl_worker;
    weft_task *t = ld_rlx(&wk->cur);
    weft__wait_note(t, kind, obj);
    st_rlx(&t->wait_until, deadline);
    weft__park_prepare(t, !(flags & WEFT__WAIT_FIRM));
    return weft__park_commit(wk, t, deadline);
}

void weft__wake_new(weft_task *t)
{
    weft__wake(t, weft__park_prepare(t, false), 0);
}

/* ---- public: sleeping ---- */

int weft_sleep_until(weft_time t)
{
    weft_worker *w = weft__tl_worker;
    if (!w || !w->cur)
        return -EPERM;
    if (weft__wait_past(t))
        return weft_cancelled() ? -ECANCELED : 0;
    int rc = weft__wait_sleep(t);
    return rc == -ETIMEDOUT ? 0 : rc;
}

int weft_sleep_for(int64_t ns)
{
    weft_worker *w = weft__tl_worker;
    if (!w || !w->cur)
        return -EPERM;
    if (ns <= 0)
        return weft_cancelled() ? -ECANCELED : 0;
    return weft_sleep_until(weft__add_sat(weft__now(w->rt), ns));
}
