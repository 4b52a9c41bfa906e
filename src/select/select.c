/* SPDX-License-Identifier: MIT */
/*
 * Select over everything: channel sends and receives, descriptors,
 * futures, scopes, semaphores and deadlines.
 *
 * Each kind of case is driven through its layer's four functions (the
 * "select's cases" interface in wait/many.h): check, lock, try, won. select
 * locks every case's object in address order (so two selects over the
 * same objects cannot deadlock), tries the cases in a random order and
 * performs the first one ready; if none is, it waits through
 * weft__wait_many: one waiter per case, all with the select's park token,
 * so the first waker to claim that token wins, records its case, and
 * hands over what the case waited for (a value, a permit); the waiters
 * of the other cases are unlinked when the task runs again. A deadline
 * case has no object: it bounds the wait, and wins if the wait ends at
 * its instant.
 *
 * This file sits above every layer it waits on; none of them knows it.
 */
#include "future/future.h"
#include "io/io.h"
#include "sched/clock.h"
#include "scope/scope.h"
#include "sync/sync.h"
#include "wait/many.h"

#include <stdlib.h>

#define SELECT_STACK_CASES 8

typedef struct case_ops {
    int (*check)(const weft_case *c);
    weft__lock *(*lock)(weft_case *c);
    int (*try)(weft_case *c, weft__arm *a, weft__chain *woken);
    void (*won)(weft_case *c, int code);
    /* After a case ready at once was performed and the locks released
     * (NULL: nothing to do). */
    void (*ready)(weft_case *c);
} case_ops;

static int deadline_check(const weft_case *c)
{
    return c->deadline == WEFT_NEVER ? 1 : c->deadline < 0 ? -EINVAL : 0;
}

/* A scope case found ready (no child runs) is joined after the locks are
 * released: the join takes the scope's lock itself. */
static void scope_ready(weft_case *c)
{
    weft__scope_case_won(c, 0);
}

static const case_ops ops_of[] = {
    [WEFT_OP_SEND] = {weft__chan_case_check, weft__chan_case_lock,
                      weft__chan_case_try, weft__chan_case_won, NULL},
    [WEFT_OP_RECV] = {weft__chan_case_check, weft__chan_case_lock,
                      weft__chan_case_try, weft__chan_case_won, NULL},
    [WEFT_OP_READ] = {weft__fd_case_check, weft__fd_case_lock,
                      weft__fd_case_try, weft__fd_case_won, NULL},
    [WEFT_OP_WRITE] = {weft__fd_case_check, weft__fd_case_lock,
                       weft__fd_case_try, weft__fd_case_won, NULL},
    [WEFT_OP_FUTURE] = {weft__future_case_check, weft__future_case_lock,
                        weft__future_case_try, weft__future_case_won, NULL},
    [WEFT_OP_SCOPE] = {weft__scope_case_check, weft__scope_case_lock,
                       weft__scope_case_try, weft__scope_case_won, scope_ready},
    [WEFT_OP_SEM] = {weft__sem_case_check, weft__sem_case_lock,
                     weft__sem_case_try, weft__sem_case_won, NULL},
    [WEFT_OP_DEADLINE] = {deadline_check, NULL, NULL, NULL, NULL},
};
#define NOPS ((int)(sizeof(ops_of) / sizeof(ops_of[0])))

static const case_ops *ops(const weft_case *c)
{
    int op = (int)c->op;
    return op > 0 && op < NOPS && ops_of[op].check ? &ops_of[op] : NULL;
}

typedef struct sel {
    weft__arm *arms;
    weft__lock **order;
    int *perm;
    bool *on;
} sel;

/* Validates the cases; marks the ones switched on. */
static int check_cases(weft_case *cases, int n, bool *on)
{
    for (int i = 0; i < n; i++) {
        const case_ops *o = ops(&cases[i]);
        if (!o)
            return -EINVAL;
        int st = o->check(&cases[i]);
        if (st < 0)
            return st;
        on[i] = st == 0;
    }
    return 0;
}

static int sel_alloc(sel *s, int n, void *small_arms, void *small_order,
                     int *small_perm, bool *small_on)
{
    if (n <= SELECT_STACK_CASES) {
        s->arms = small_arms;
        s->order = small_order;
        s->perm = small_perm;
        s->on = small_on;
        return 0;
    }
    s->arms = malloc((size_t)n * sizeof(*s->arms));
    s->order = malloc((size_t)n * sizeof(*s->order));
    s->perm = malloc((size_t)n * sizeof(*s->perm));
    s->on = malloc((size_t)n * sizeof(*s->on));
    if (s->arms && s->order && s->perm && s->on)
        return 0;
    free(s->arms);
    free(s->order);
    free(s->perm);
    free(s->on);
    return -ENOMEM;
}

static void sel_free(sel *s, void *small_arms)
{
    if (s->arms == small_arms)
        return;
    free(s->arms);
    free(s->order);
    free(s->perm);
    free(s->on);
}

static int select_impl(weft_case *cases, int n, int64_t deadline, bool wait)
{
    if (n < 0 || (n > 0 && !cases))
        return -EINVAL;
    weft__arm arms_small[SELECT_STACK_CASES];
    weft__lock *order_small[SELECT_STACK_CASES];
    int perm_small[SELECT_STACK_CASES];
    bool on_small[SELECT_STACK_CASES];
    sel s;
    int rc = sel_alloc(&s, n, arms_small, order_small, perm_small, on_small);
    if (rc)
        return rc;
    if ((rc = check_cases(cases, n, s.on)) != 0 ||
        (wait && (rc = weft__checkpoint()) != 0))
        goto out;

    for (int i = 0; i < n; i++) {
        const case_ops *o = ops(&cases[i]);
        s.arms[i].lock = s.on[i] && o->lock ? o->lock(&cases[i]) : NULL;
        s.arms[i].q = NULL;
    }
    int k = weft__locks_order(s.arms, n, s.order);
    for (int i = 0; i < n; i++) { /* Fisher-Yates */
        int j = (int)(weft__rand() % (uint64_t)(i + 1));
        s.perm[i] = s.perm[j];
        s.perm[j] = i;
    }

    weft__chain woken;
    weft__chain_init(&woken);
    int64_t now = -1, until = deadline;
    int chosen = -1, timer_case = -1, nfd = 0;
    weft__locks_acquire(s.order, k);
    for (int p = 0; p < n && chosen < 0; p++) {
        int i = s.perm[p];
        weft_case *c = &cases[i];
        if (!s.on[i])
            continue;
        if (c->op == WEFT_OP_DEADLINE) {
            if (now < 0)
                now = weft__now(
                    weft__tl_worker ? weft__wpub(weft__tl_worker)->rt : NULL);
            if (c->deadline <= now) {
                c->rc = 0;
                chosen = i;
            } else if (c->deadline <= until) {
                until = c->deadline; /* it wins a tie with the select's */
                timer_case = i;
            }
            continue;
        }
        if (ops(c)->try(c, &s.arms[i], &woken) == 0)
            chosen = i;
        else if (c->op == WEFT_OP_READ || c->op == WEFT_OP_WRITE)
            nfd++;
    }
    if (chosen >= 0 || !wait) {
        weft__locks_release(s.order, k);
        weft__wake_chain(woken.head, 0);
        if (chosen >= 0 && ops(&cases[chosen])->ready)
            ops(&cases[chosen])->ready(&cases[chosen]);
        rc = chosen >= 0 ? chosen : -EAGAIN;
        goto out;
    }
    /* Waiters claimed while looking (a descriptor's stale waiters) are
     * woken before we park: they must not wait for our wake. */
    weft__wake_chain(woken.head, 0);
    int code = 0;
    weft_worker *w = weft__tl_worker;
    if (nfd)
        weft__pending_add(w, WEFT__PENDING_IO, 1);
    rc = weft__wait_many(s.order, k, s.arms, n, WEFT__W_SELECT, cases, until,
                         &code);
    if (nfd)
        weft__pending_add(w, WEFT__PENDING_IO, -1);
    if (rc >= 0) {
        ops(&cases[rc])->won(&cases[rc], code);
    } else if (rc == -ETIMEDOUT && timer_case >= 0) {
        cases[timer_case].rc = 0;
        rc = timer_case;
    }
out:
    sel_free(&s, arms_small);
    return rc;
}

int weft_select(weft_case *cases, int n, weft_time deadline)
{
    return select_impl(cases, n, deadline, true);
}

int weft_try_select(weft_case *cases, int n)
{
    return select_impl(cases, n, WEFT_NEVER, false);
}
