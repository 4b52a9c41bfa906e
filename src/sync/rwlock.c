/* SPDX-License-Identifier: MIT */
/*
 * A task-aware readers-writer lock.
 *
 * The lock is a small value (zero means unlocked) holding a spinlock, the
 * number of readers inside, the writer inside (a task, or NULL) and one
 * FIFO wait queue in which readers and writers wait together, each waiter
 * marked with what it wants (w->n: RW_READ or RW_WRITE).
 *
 * Fairness, as Go's RWMutex: a task that arrives while anyone waits queues
 * behind them, so once a writer waits, newly arriving readers wait behind
 * it and a stream of overlapping readers cannot starve it. Whenever the
 * state changes (an unlock, a waiter leaving) admit() lets waiters in from
 * the head for as long as the head can enter: a writer when the lock is
 * free, otherwise readers up to the next writer. So a writer's unlock lets
 * in together every reader that queued before the next writer, and the
 * invariant between calls is: if anyone waits, the head of the queue could
 * not enter now. That is why an arriving task only has to look at "is the
 * queue empty" and the holders.
 *
 * Waiting goes through weft__wait, so it takes a deadline and is a
 * cancellation point; admit() claims a waiter before counting it as a
 * holder, so a waiter that leaves with -ETIMEDOUT or -ECANCELED holds
 * nothing. A leaving waiter runs admit() again: a writer at the head that
 * gives up while readers hold the lock lets the readers behind it in.
 *
 * Readers are counted, not named, so any task may drop a read hold; the
 * writer is named, so only it may drop the write hold.
 */
#include "sync/cases.h"
#include "sync/sync.h"
#include "wait/many.h"
#include "wait/wait.h"

#include <string.h>

const weft__wait_kind weft__wk_rwlock = {WEFT_WAIT_RWLOCK, "rwlock"};

enum { RW_READ = 1, RW_WRITE = 2 }; /* weft__waiter.n: what it waits for */

typedef struct rwlock_impl {
    weft__lock lock;   /* guards every field below */
    int readers;       /* tasks holding it for reading */
    weft_task *writer; /* the task holding it for writing, or NULL */
    weft__waitq q;     /* waiters in arrival order (see the invariant above) */
} rwlock_impl;
_Static_assert(sizeof(rwlock_impl) <= sizeof(weft_rwlock), "weft_rwlock size");
_Static_assert(_Alignof(rwlock_impl) <= _Alignof(weft_rwlock), "weft_rwlock");

/* Under the lock: could a task that wants `kind` enter now? */
static bool can_enter(const rwlock_impl *l, long kind)
{
    if (l->writer)
        return false;
    return kind == RW_READ || l->readers == 0;
}

static void enter(rwlock_impl *l, long kind, weft_task *t)
{
    if (kind == RW_WRITE)
        l->writer = t;
    else
        l->readers++;
}

static bool admit_fits(const weft__waiter *w, void *ctx)
{
    return can_enter(ctx, w->n);
}

static void admit_take(weft__waiter *w, void *ctx)
{
    enter(ctx, w->n, w->task);
}

/* Under the lock: lets waiters in from the head while the head can enter
 * (claimed first: one leaving on its deadline or a cancel holds nothing);
 * returns the admitted ones chained through `next`, in arrival order. */
static weft__waiter *admit(rwlock_impl *l)
{
    weft__waiter *granted = NULL;
    weft__waitq_grant(&l->q, admit_fits, admit_take, l, &granted);
    return granted;
}

/* Runs admit() and wakes whoever it let in. */
static void admit_and_wake(rwlock_impl *l)
{
    weft__lock_acquire(&l->lock);
    weft__waiter *granted = admit(l);
    weft__lock_release(&l->lock);
    weft__wake_chain(granted, 0);
}

static int rw_lock(weft_rwlock *ll, long kind, int64_t deadline, bool wait)
{
    if (!ll)
        return -EINVAL;
    weft_task *t = weft__current();
    if (!t)
        return -EPERM;
    int rc = wait ? weft__checkpoint() : 0;
    if (rc)
        return rc;
    rwlock_impl *l = (rwlock_impl *)ll;
    weft__lock_acquire(&l->lock);
    if (l->writer == t) {
        weft__lock_release(&l->lock);
        return wait ? -EDEADLK : -EBUSY;
    }
    if (!l->q.head && can_enter(l, kind)) {
        enter(l, kind, t);
        weft__lock_release(&l->lock);
        return 0;
    }
    if (!wait) {
        weft__lock_release(&l->lock);
        return -EBUSY;
    }
    weft__waiter self;
    weft__waiter_init(&self, NULL, kind);
    rc = weft__wait(&self, &(weft__wait_spec){.kind = &weft__wk_rwlock,
                                              .obj = l,
                                              .lock = &l->lock,
                                              .q = &l->q,
                                              .deadline = deadline,
                                              .flags = WEFT__WAIT_COMPACT});
    if (rc != 0)
        admit_and_wake(l); /* we may have been what kept the head out */
    return rc;
}

int weft_rwlock_rdlock(weft_rwlock *l)
{
    return rw_lock(l, RW_READ, WEFT_NEVER, true);
}

int weft_rwlock_rdlock_until(weft_rwlock *l, weft_time deadline)
{
    return rw_lock(l, RW_READ, deadline, true);
}

int weft_rwlock_try_rdlock(weft_rwlock *l)
{
    return rw_lock(l, RW_READ, WEFT_NEVER, false);
}

int weft_rwlock_wrlock(weft_rwlock *l)
{
    return rw_lock(l, RW_WRITE, WEFT_NEVER, true);
}

int weft_rwlock_wrlock_until(weft_rwlock *l, weft_time deadline)
{
    return rw_lock(l, RW_WRITE, deadline, true);
}

int weft_rwlock_try_wrlock(weft_rwlock *l)
{
    return rw_lock(l, RW_WRITE, WEFT_NEVER, false);
}

/* Drops a hold of `kind`; the last reader out, or the writer, admits. */
static int rw_unlock(weft_rwlock *ll, long kind)
{
    if (!ll)
        return -EINVAL;
    weft_task *t = weft__current();
    if (!t)
        return -EPERM;
    rwlock_impl *l = (rwlock_impl *)ll;
    weft__lock_acquire(&l->lock);
    if (kind == RW_WRITE ? l->writer != t : l->readers == 0) {
        weft__lock_release(&l->lock);
        return -EPERM;
    }
    if (kind == RW_WRITE)
        l->writer = NULL;
    else
        l->readers--;
    weft__waiter *granted = admit(l);
    weft__lock_release(&l->lock);
    weft__wake_chain(granted, 0);
    return 0;
}

int weft_rwlock_rdunlock(weft_rwlock *l)
{
    return rw_unlock(l, RW_READ);
}

int weft_rwlock_wrunlock(weft_rwlock *l)
{
    return rw_unlock(l, RW_WRITE);
}

int weft_rwlock_destroy(weft_rwlock *ll)
{
    if (!ll)
        return -EINVAL;
    rwlock_impl *l = (rwlock_impl *)ll;
    weft__lock_acquire(&l->lock);
    bool busy = l->readers || l->writer || l->q.head;
    weft__lock_release(&l->lock);
    if (busy)
        return -EBUSY;
    memset(ll, 0, sizeof(*ll));
    return 0;
}

/* ---- select's cases ----
 * RDLOCK and WRLOCK (wait/many.h, "select's cases"): a select waits as
 * rw_lock does, in line with the other waiters and wanting what the case
 * names; admit() claims it before it counts it as a holder, so a select
 * that another case won holds nothing. Its waiter leaving may have been
 * what kept the head out (a writer ahead of readers), so lost admits
 * again, as rw_lock does after a deadline or a cancel. */

static long case_kind(const weft_case *c)
{
    return c->op == WEFT_OP_WRLOCK ? RW_WRITE : RW_READ;
}

int weft__rwlock_case_check(const weft_case *c)
{
    if (!c->rwlock)
        return 1;
    weft_task *t = weft__current();
    if (!t)
        return -EPERM;
    rwlock_impl *l = (rwlock_impl *)c->rwlock;
    /* Only t makes itself the writer or stops being it: what this reads
     * holds until the select returns. */
    weft__lock_acquire(&l->lock);
    bool mine = l->writer == t;
    weft__lock_release(&l->lock);
    return mine ? -EDEADLK : 0;
}

weft__lock *weft__rwlock_case_lock(weft_case *c)
{
    return &((rwlock_impl *)c->rwlock)->lock;
}

int weft__rwlock_case_try(weft_case *c, weft__arm *a, weft__chain *woken)
{
    WEFT_UNUSED(woken);
    rwlock_impl *l = (rwlock_impl *)c->rwlock;
    long kind = case_kind(c);
    if (!l->q.head && can_enter(l, kind)) {
        enter(l, kind, weft__current());
        c->rc = 0;
        return 0;
    }
    a->q = &l->q;
    a->w.elem = NULL;
    a->w.n = kind;
    return -EAGAIN;
}

void weft__rwlock_case_won(weft_case *c, int code)
{
    c->rc = code; /* 0: admit() counted us in before it claimed us */
}

void weft__rwlock_case_lost(weft_case *c)
{
    admit_and_wake((rwlock_impl *)c->rwlock);
}
