/*
 * Task-aware synchronisation: mutex, semaphore, event, wait group.
 *
 * Each is a small value (zero means ready: unlocked, no permits, unset,
 * zero count) holding a spinlock and a FIFO wait queue of weft__waiters.
 * Waiting goes through weft__waitq_wait, so every wait takes a deadline and
 * is a cancellation point; a waker claims a waiter before handing it what
 * it waited for (the lock, permits), so a waiter that leaves with
 * -ETIMEDOUT or -ECANCELED was handed nothing.
 *
 * The mutex hands the lock to the first waiter on unlock (no barging while
 * anyone waits, so no starvation); uncontended, lock and unlock are one
 * compare-and-swap each. Its state word says whether anyone waits, so the
 * uncontended unlock does not take the spinlock.
 */
#include "internal.h"

#include <string.h>

int weft__waitq_wait(weft__lock *l, weft__waitq *q, weft__waiter *w,
                     int64_t deadline)
{
    weft_worker *wk = weft__tl_worker;
    weft_task *t = wk->cur;
    w->task = t;
    w->token = weft__park_prepare(t, true);
    weft__waitq_push(q, w);
    weft__lock_release(l);
    int rc = weft__park_commit(wk, t, deadline);
    if (rc == -ETIMEDOUT || rc == -ECANCELED) {
        /* Nobody claimed us (a claim would have set the code): leave. */
        weft__lock_acquire(l);
        weft__waitq_remove(q, w);
        weft__lock_release(l);
    }
    return rc;
}

/* ---- mutex ---- */

enum { M_FREE = 0, M_LOCKED = 1, M_WAITERS = 2 };

typedef struct mutex_impl {
    atomic_int state;           /* M_FREE, M_LOCKED or M_WAITERS */
    weft__lock lock;            /* guards q, and state's M_WAITERS moves */
    _Atomic(weft_task *) owner; /* read by others only for -EDEADLK */
    weft__waitq q;
} mutex_impl;
_Static_assert(sizeof(mutex_impl) <= sizeof(weft_mutex), "weft_mutex size");
_Static_assert(_Alignof(mutex_impl) <= _Alignof(weft_mutex), "weft_mutex");

static int mutex_lock(weft_mutex *mm, int64_t deadline, bool wait)
{
    if (!mm)
        return -EINVAL;
    mutex_impl *m = (mutex_impl *)mm;
    weft_task *t = weft__current();
    if (!t)
        return -EPERM;
    if (wait && weft__scope_is_cancelled(ld_rlx(&t->cur)))
        return -ECANCELED;
    int expected = M_FREE;
    if (WEFT_LIKELY(cas_acq_rel(&m->state, &expected, M_LOCKED))) {
        st_rlx(&m->owner, t);
        return 0;
    }
    if (!wait)
        return -EBUSY;
    if (ld_rlx(&m->owner) == t)
        return -EDEADLK;
    weft__lock_acquire(&m->lock);
    for (;;) { /* take it if it was just freed, else mark "waiters" */
        int s = ld_acq(&m->state);
        if (s == M_FREE) {
            if (cas_acq_rel(&m->state, &s, M_LOCKED)) {
                weft__lock_release(&m->lock);
                st_rlx(&m->owner, t);
                return 0;
            }
        } else if (s == M_WAITERS || cas_acq_rel(&m->state, &s, M_WAITERS)) {
            break;
        }
    }
    weft__waiter self = {0};
    int rc = weft__waitq_wait(&m->lock, &m->q, &self, deadline);
    if (rc == 0)
        return 0; /* handed over: owner already set by the unlocker */
    /* Left the queue: if it is now empty, unlock must not look for us. */
    weft__lock_acquire(&m->lock);
    if (!m->q.head) {
        int s = M_WAITERS;
        cas_acq_rel(&m->state, &s, M_LOCKED);
    }
    weft__lock_release(&m->lock);
    return rc;
}

int weft_mutex_lock(weft_mutex *m)
{
    return mutex_lock(m, WEFT_NEVER, true);
}

int weft_mutex_lock_until(weft_mutex *m, weft_time deadline)
{
    return mutex_lock(m, deadline, true);
}

int weft_mutex_trylock(weft_mutex *m)
{
    return mutex_lock(m, WEFT_NEVER, false);
}

int weft_mutex_unlock(weft_mutex *mm)
{
    if (!mm)
        return -EINVAL;
    mutex_impl *m = (mutex_impl *)mm;
    weft_task *t = weft__current();
    if (!t || ld_rlx(&m->owner) != t)
        return -EPERM;
    st_rlx(&m->owner, NULL);
    int expected = M_LOCKED;
    if (WEFT_LIKELY(cas_acq_rel(&m->state, &expected, M_FREE)))
        return 0;
    /* Someone waits: hand the lock to the first one still waiting. */
    weft__lock_acquire(&m->lock);
    weft__waiter *w = weft__waitq_claim(&m->q);
    if (w) {
        st_rlx(&m->owner, w->task);
        if (!m->q.head)
            st_rel(&m->state, M_LOCKED);
    } else {
        st_rel(&m->state, M_FREE);
    }
    weft__lock_release(&m->lock);
    if (w)
        weft__wake_finish(w->task, 0);
    return 0;
}

/* ---- semaphore ---- */

typedef struct sem_impl {
    weft__lock lock; /* guards all */
    long count;      /* permits available */
    weft__waitq q;   /* waiters, FIFO; each wants w->n permits */
} sem_impl;
_Static_assert(sizeof(sem_impl) <= sizeof(weft_sem), "weft_sem size");

/* Under the lock: hands permits to waiters in order while the first one's
 * request fits; returns the claimed ones chained through `next`. */
static weft__waiter *sem_grant(sem_impl *s)
{
    weft__waiter *granted = NULL, **tail = &granted, *w;
    while ((w = s->q.head) != NULL && w->n <= s->count) {
        weft__waitq_remove(&s->q, w);
        if (!weft__wake_claim(w->task, w->token))
            continue; /* it is leaving (deadline, cancel): next one */
        s->count -= w->n;
        w->next = NULL;
        *tail = w;
        tail = &w->next;
    }
    return granted;
}

static void wake_chain(weft__waiter *w)
{
    while (w) {
        weft__waiter *next = w->next;
        weft__wake_finish(w->task, 0);
        w = next;
    }
}

int weft_sem_init(weft_sem *ss, long permits)
{
    if (!ss || permits < 0)
        return -EINVAL;
    memset(ss, 0, sizeof(*ss));
    ((sem_impl *)ss)->count = permits;
    return 0;
}

static int sem_acquire(weft_sem *ss, long n, int64_t deadline, bool wait)
{
    if (!ss || n < 1)
        return -EINVAL;
    int rc = wait ? weft__checkpoint() : 0;
    if (rc)
        return rc;
    sem_impl *s = (sem_impl *)ss;
    weft__lock_acquire(&s->lock);
    if (!s->q.head && s->count >= n) {
        s->count -= n;
        weft__lock_release(&s->lock);
        return 0;
    }
    if (!wait) {
        weft__lock_release(&s->lock);
        return -EAGAIN;
    }
    weft__waiter self = {.n = n};
    rc = weft__waitq_wait(&s->lock, &s->q, &self, deadline);
    if (rc != 0) {
        /* A large request leaving may let smaller ones behind it through. */
        weft__lock_acquire(&s->lock);
        weft__waiter *granted = sem_grant(s);
        weft__lock_release(&s->lock);
        wake_chain(granted);
    }
    return rc;
}

int weft_sem_acquire(weft_sem *s, long n)
{
    return sem_acquire(s, n, WEFT_NEVER, true);
}

int weft_sem_acquire_until(weft_sem *s, long n, weft_time deadline)
{
    return sem_acquire(s, n, deadline, true);
}

int weft_sem_try_acquire(weft_sem *s, long n)
{
    return sem_acquire(s, n, WEFT_NEVER, false);
}

int weft_sem_release(weft_sem *ss, long n)
{
    if (!ss || n < 1)
        return -EINVAL;
    sem_impl *s = (sem_impl *)ss;
    weft__lock_acquire(&s->lock);
    s->count += n;
    weft__waiter *granted = sem_grant(s);
    weft__lock_release(&s->lock);
    wake_chain(granted);
    return 0;
}

long weft_sem_available(weft_sem *ss)
{
    if (!ss)
        return -EINVAL;
    sem_impl *s = (sem_impl *)ss;
    weft__lock_acquire(&s->lock);
    long n = s->count;
    weft__lock_release(&s->lock);
    return n;
}

/* ---- event and wait group: wait until a condition, wake everyone ---- */

typedef struct cond_impl {
    weft__lock lock; /* guards all */
    long value;      /* event: 1 if set; wait group: the count */
    weft__waitq q;
} cond_impl;
_Static_assert(sizeof(cond_impl) <= sizeof(weft_event), "weft_event size");
_Static_assert(sizeof(cond_impl) <= sizeof(weft_wg), "weft_wg size");

/* Under the lock: claims every waiter; returns them chained. */
static weft__waiter *claim_all(weft__waitq *q)
{
    weft__waiter *all = NULL, *w;
    while ((w = weft__waitq_claim(q)) != NULL) {
        w->next = all;
        all = w;
    }
    return all;
}

/* Waits until value == want (event: 1, wait group: 0). */
static int cond_wait(cond_impl *c, long want, int64_t deadline)
{
    int rc = weft__checkpoint();
    if (rc)
        return rc;
    weft__lock_acquire(&c->lock);
    if (c->value == want) {
        weft__lock_release(&c->lock);
        return 0;
    }
    weft__waiter self = {0};
    return weft__waitq_wait(&c->lock, &c->q, &self, deadline);
}

int weft_event_wait(weft_event *e)
{
    return e ? cond_wait((cond_impl *)e, 1, WEFT_NEVER) : -EINVAL;
}

int weft_event_wait_until(weft_event *e, weft_time deadline)
{
    return e ? cond_wait((cond_impl *)e, 1, deadline) : -EINVAL;
}

int weft_event_set(weft_event *ee)
{
    if (!ee)
        return -EINVAL;
    cond_impl *e = (cond_impl *)ee;
    weft__lock_acquire(&e->lock);
    e->value = 1;
    weft__waiter *all = claim_all(&e->q);
    weft__lock_release(&e->lock);
    wake_chain(all);
    return 0;
}

int weft_event_reset(weft_event *ee)
{
    if (!ee)
        return -EINVAL;
    cond_impl *e = (cond_impl *)ee;
    weft__lock_acquire(&e->lock);
    e->value = 0;
    weft__lock_release(&e->lock);
    return 0;
}

int weft_event_is_set(weft_event *ee)
{
    if (!ee)
        return 0;
    cond_impl *e = (cond_impl *)ee;
    weft__lock_acquire(&e->lock);
    int set = e->value != 0;
    weft__lock_release(&e->lock);
    return set;
}

int weft_wg_add(weft_wg *wg, long delta)
{
    if (!wg)
        return -EINVAL;
    cond_impl *c = (cond_impl *)wg;
    weft__waiter *all = NULL;
    weft__lock_acquire(&c->lock);
    if (c->value + delta < 0) {
        weft__lock_release(&c->lock);
        return -EINVAL;
    }
    c->value += delta;
    if (c->value == 0)
        all = claim_all(&c->q);
    weft__lock_release(&c->lock);
    wake_chain(all);
    return 0;
}

int weft_wg_done(weft_wg *wg)
{
    return weft_wg_add(wg, -1);
}

int weft_wg_wait(weft_wg *wg)
{
    return wg ? cond_wait((cond_impl *)wg, 0, WEFT_NEVER) : -EINVAL;
}

int weft_wg_wait_until(weft_wg *wg, weft_time deadline)
{
    return wg ? cond_wait((cond_impl *)wg, 0, deadline) : -EINVAL;
}
