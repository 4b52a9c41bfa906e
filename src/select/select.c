/* SPDX-License-Identifier: MIT */
/*
 * Select over every wait a task can make a case of: channel sends and
 * receives, descriptors, futures, scopes, task joins, semaphores, events,
 * wait groups, mutexes, rwlocks, bulkheads, rate limiters, actors' exits
 * and tells, and deadlines (weft.h says, next to weft_op, why the others are
 * not cases).
 *
 * Each kind of case is driven through its layer's functions, one row of
 * a table per weft_op (select/select.h; the protocol is wait/many.h's
 * "select's cases"): check, lock, try, won, and the optional ready,
 * recheck and lost. select locks every case's object in address order
 * (so two selects over the same objects cannot deadlock), tries the cases
 * in a random order and performs the first one ready; if none is, it
 * waits through weft__wait_many: one waiter per case, all with the
 * select's park token, so the first waker to claim that token wins,
 * records its case, and hands over what the case waited for (a value, a
 * permit, a lock); the waiters of the other cases are unlinked when the
 * task runs again. A deadline case has no object: it bounds the wait,
 * and wins if the wait ends at its instant. A case that nobody wakes but
 * that may be ready later (a limiter's tokens coming due) bounds the wait
 * too: if the wait ends there, select tries every case again.
 *
 * This file sits below the actors: their rows are installed by their
 * layer (weft__select_install); none of the layers knows select.
 */
#include "select/select.h"
#include "future/future.h"
#include "io/cases.h"
#include "io/io.h"
#include "sched/clock.h"
#include "scope/cases.h"
#include "scope/scope.h"
#include "sync/cases.h"
#include "sync/sync.h"
#include "util/fault.h"
#include "wait/many.h"
#include "wait/record.h"
#include "wait/wake.h"

#include <stdlib.h>

#define SELECT_STACK_CASES 8
#define NOPS (WEFT_OP_MUTEX + 1)

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

/* ACTOR_JOIN and TELL before any actor was made (their layer installs
 * their rows then): only a NULL actor, switched off, can be named. */
static int no_actor_check(const weft_case *c)
{
    return c->actor ? -EINVAL : 1;
}

#define ROW(k, ready, recheck, lost)                                           \
    {                                                                          \
        weft__##k##_case_check, weft__##k##_case_lock, weft__##k##_case_try,   \
            weft__##k##_case_won, ready, recheck, lost                         \
    }

static const weft__case_ops rows[NOPS] = {
    [WEFT_OP_SEND] = ROW(chan, NULL, NULL, NULL),
    [WEFT_OP_RECV] = ROW(chan, NULL, NULL, NULL),
    [WEFT_OP_READ] = ROW(fd, NULL, NULL, weft__fd_case_lost),
    [WEFT_OP_WRITE] = ROW(fd, NULL, NULL, weft__fd_case_lost),
    [WEFT_OP_FUTURE] = ROW(future, NULL, NULL, NULL),
    [WEFT_OP_SCOPE] = ROW(scope, scope_ready, NULL, NULL),
    [WEFT_OP_SEM] = ROW(sem, NULL, NULL, NULL),
    [WEFT_OP_DEADLINE] = {deadline_check, NULL, NULL, NULL, NULL, NULL, NULL},
    [WEFT_OP_JOIN] = ROW(join, weft__join_case_ready, NULL, NULL),
    [WEFT_OP_EVENT] = ROW(event, NULL, NULL, NULL),
    [WEFT_OP_WG] = {weft__wg_case_check, weft__wg_case_lock, weft__wg_case_try,
                    weft__event_case_won, NULL, NULL, NULL},
    [WEFT_OP_ACTOR_JOIN] = {no_actor_check, NULL, NULL, NULL, NULL, NULL, NULL},
    [WEFT_OP_TELL] = {no_actor_check, NULL, NULL, NULL, NULL, NULL, NULL},
    [WEFT_OP_LIMITER] = ROW(limiter, NULL, weft__limiter_case_recheck, NULL),
    [WEFT_OP_RDLOCK] = ROW(rwlock, NULL, NULL, weft__rwlock_case_lost),
    [WEFT_OP_WRLOCK] = ROW(rwlock, NULL, NULL, weft__rwlock_case_lost),
    [WEFT_OP_BULKHEAD] = ROW(bulkhead, NULL, NULL, weft__bulkhead_case_lost),
    [WEFT_OP_MUTEX] = ROW(mutex, NULL, NULL, weft__mutex_case_lost),
};

/* Rows installed by the layers above (NULL: the static row). */
static _Atomic(const weft__case_ops *) installed[NOPS];

void weft__select_install(weft_op op, const weft__case_ops *o)
{
    WEFT_ASSERT(op > 0 && (int)op < NOPS && o && o->check);
    if (ld_rlx(&installed[op]) != o)
        st_rel(&installed[op], o);
}

static const weft__case_ops *ops(const weft_case *c)
{
    int op = (int)c->op;
    if (op <= 0 || op >= NOPS)
        return NULL;
    const weft__case_ops *o = ld_acq(&installed[op]);
    return o ? o : rows[op].check ? &rows[op] : NULL;
}

/* A case's state in one select. */
enum { C_OFF, C_ON, C_ARMED /* its try said -EAGAIN this round */ };

typedef struct sel {
    weft_case *cases;
    int n, k;
    weft__arm *arms;
    weft__lock **order;
    int *perm;
    unsigned char *st; /* C_* */
} sel;

/* One round: try every case, then perhaps wait. */
typedef struct round {
    weft__chain woken;
    int chosen, timer_case, nfd;
    int64_t until;   /* the wait's end: the select's deadline or earlier */
    int64_t recheck; /* the first instant a case asked to be tried again */
    bool rechecking; /* the wait ends at recheck: then try again */
} round;

/* Validates the cases; marks the ones switched on. */
static int check_cases(sel *s)
{
    for (int i = 0; i < s->n; i++) {
        const weft__case_ops *o = ops(&s->cases[i]);
        if (!o)
            return -EINVAL;
        int st = o->check(&s->cases[i]);
        if (st < 0)
            return st;
        s->st[i] = st == 0 ? C_ON : C_OFF;
    }
    return 0;
}

static int sel_alloc(sel *s, void *small_arms, void *small_order,
                     int *small_perm, unsigned char *small_st)
{
    int n = s->n;
    if (n <= SELECT_STACK_CASES) {
        s->arms = small_arms;
        s->order = small_order;
        s->perm = small_perm;
        s->st = small_st;
        return 0;
    }
    s->arms = weft__malloc((size_t)n * sizeof(*s->arms));
    s->order = weft__malloc((size_t)n * sizeof(*s->order));
    s->perm = weft__malloc((size_t)n * sizeof(*s->perm));
    s->st = weft__malloc((size_t)n * sizeof(*s->st));
    if (s->arms && s->order && s->perm && s->st)
        return 0;
    free(s->arms);
    free(s->order);
    free(s->perm);
    free(s->st);
    return -ENOMEM;
}

static void sel_free(sel *s, void *small_arms)
{
    if (s->arms == small_arms)
        return;
    free(s->arms);
    free(s->order);
    free(s->perm);
    free(s->st);
}

/* The locks in the order they are taken, and a random order of tries. */
static void sel_prepare(sel *s)
{
    for (int i = 0; i < s->n; i++) {
        const weft__case_ops *o = ops(&s->cases[i]);
        s->arms[i].lock =
            s->st[i] != C_OFF && o->lock ? o->lock(&s->cases[i]) : NULL;
        s->arms[i].q = NULL;
    }
    s->k = weft__locks_order(s->arms, s->n, s->order);
    for (int i = 0; i < s->n; i++) { /* Fisher-Yates */
        int j = (int)(weft__rand() % (uint64_t)(i + 1));
        s->perm[i] = s->perm[j];
        s->perm[j] = i;
    }
}

/* A DEADLINE case: chosen if its instant has come, else it may bound the
 * wait (it wins a tie with the select's own deadline). */
static void try_deadline(round *r, int i, weft_case *c, int64_t *now)
{
    if (*now < 0)
        *now =
            weft__now(weft__tl_worker ? weft__wpub(weft__tl_worker)->rt : NULL);
    if (c->deadline <= *now) {
        c->rc = 0;
        r->chosen = i;
    } else if (c->deadline <= r->until) {
        r->until = c->deadline;
        r->timer_case = i;
    }
}

/* Under every case's lock: tries the cases in perm's order until one is
 * performed (r->chosen), marking the others tried C_ARMED. */
static void try_cases(sel *s, round *r)
{
    int64_t now = -1;
    for (int p = 0; p < s->n && r->chosen < 0; p++) {
        int i = s->perm[p];
        weft_case *c = &s->cases[i];
        if (s->st[i] == C_OFF)
            continue;
        if (c->op == WEFT_OP_DEADLINE) {
            try_deadline(r, i, c, &now);
            continue;
        }
        const weft__case_ops *o = ops(c);
        s->arms[i].q = NULL;
        if (o->try(c, &s->arms[i], &r->woken) == 0) {
            r->chosen = i;
            continue;
        }
        s->st[i] = C_ARMED;
        if (c->op == WEFT_OP_READ || c->op == WEFT_OP_WRITE)
            r->nfd++;
        int64_t at = o->recheck ? o->recheck(c) : WEFT_NEVER;
        if (at < r->recheck)
            r->recheck = at;
    }
    if (r->recheck != WEFT_NEVER && r->recheck <= r->until) {
        /* A DEADLINE case at that instant or later waits for the next
         * round; tokens due at the deadline are still looked at. */
        r->until = r->recheck;
        r->timer_case = -1;
        r->rechecking = true;
    }
}

/* The end of a round, no lock held: every case tried and not chosen is
 * told so (lost), and is on again for a next round. */
static void lose_cases(sel *s, int chosen)
{
    for (int i = 0; i < s->n; i++) {
        if (s->st[i] != C_ARMED)
            continue;
        s->st[i] = C_ON;
        const weft__case_ops *o = ops(&s->cases[i]);
        if (i != chosen && o->lost)
            o->lost(&s->cases[i]);
    }
}

/* No case was ready: waits for one (the locks held, released on
 * return). Returns the chosen case, -ETIMEDOUT, -ECANCELED, or -EAGAIN
 * when the wait ended at a recheck instant: try again. */
static int wait_round(sel *s, round *r)
{
    /* Waiters claimed while looking (a descriptor's stale waiters) are
     * woken before we park: they must not wait for our wake. */
    weft__wake_chain(r->woken.head, 0);
    int code = 0;
    weft_worker *w = weft__tl_worker;
    if (r->nfd)
        weft__pending_park(w, WEFT__PENDING_IO, 1);
    int rc = weft__wait_many(s->order, s->k, s->arms, s->n, WEFT__W_SELECT,
                             s->cases, r->until, &code);
    if (r->nfd)
        weft__pending_park(w, WEFT__PENDING_IO, -1);
    if (rc >= 0) {
        ops(&s->cases[rc])->won(&s->cases[rc], code);
    } else if (rc == -ETIMEDOUT && r->timer_case >= 0) {
        s->cases[r->timer_case].rc = 0;
        rc = r->timer_case;
    } else if (rc == -ETIMEDOUT && r->rechecking) {
        rc = -EAGAIN; /* a recheck instant */
    }
    return rc;
}

/* One round: lock, try, and either perform a ready case or wait. */
static int select_round(sel *s, int64_t deadline, bool wait)
{
    round r = {.chosen = -1,
               .timer_case = -1,
               .until = deadline,
               .recheck = WEFT_NEVER};
    weft__chain_init(&r.woken);
    weft__locks_acquire(s->order, s->k);
    try_cases(s, &r);
    int rc;
    if (r.chosen >= 0 || !wait) {
        weft__locks_release(s->order, s->k);
        weft__wake_chain(r.woken.head, 0);
        weft_case *c = r.chosen >= 0 ? &s->cases[r.chosen] : NULL;
        if (c && ops(c)->ready)
            ops(c)->ready(c);
        rc = c ? r.chosen : -EAGAIN;
    } else {
        rc = wait_round(s, &r);
    }
    lose_cases(s, rc);
    return rc;
}

/* Inlined into both public functions: a call in tail position would
 * leave a parked select's stack without weft_select's frame, and a task
 * dump would name this one as the weft call. */
static inline __attribute__((always_inline)) int
select_impl(weft_case *cases, int n, int64_t deadline, bool wait)
{
    if (n < 0 || (n > 0 && !cases))
        return -EINVAL;
    weft__arm arms_small[SELECT_STACK_CASES];
    weft__lock *order_small[SELECT_STACK_CASES];
    int perm_small[SELECT_STACK_CASES];
    unsigned char st_small[SELECT_STACK_CASES];
    sel s = {.cases = cases, .n = n};
    int rc = sel_alloc(&s, arms_small, order_small, perm_small, st_small);
    if (rc)
        return rc;
    if ((rc = check_cases(&s)) != 0 || (wait && (rc = weft__checkpoint()) != 0))
        goto out;
    sel_prepare(&s);
    do {
        rc = select_round(&s, deadline, wait);
    } while (wait && rc == -EAGAIN);
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
