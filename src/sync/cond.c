/* SPDX-License-Identifier: MIT */
/*
 * Condition variable, once, barrier: three ways for tasks to wait for each
 * other, each a small value holding a spinlock and a FIFO wait queue of
 * weft__waiters (see sync.c for the common rules: a waker claims a waiter
 * before it hands anything over, so a waiter that leaves with -ETIMEDOUT
 * or -ECANCELED was handed nothing).
 *
 * Condition variable. A wait queues itself (token and all) under the
 * condition's lock *before* it unlocks the mutex, and only then parks; a
 * signal claims exactly one queued waiter (weft__waitq_claim skips those
 * already leaving) and wakes it with 0. So no signal falls between the
 * unlock and the park, and none is lost: a waiter that leaves on its
 * deadline or a cancel was not claimed, and the signal went to the next
 * waiter instead. Every wait, however it ends, locks the mutex again with
 * weft__mutex_relock, which waits in line but ignores cancellation and
 * deadlines, so the caller always gets the mutex back (as pthread_cond_wait).
 *
 * Once. A state word: IDLE, RUNNING (one caller runs fn; later callers
 * queue) or DONE (final; read lock-free). When fn succeeds, every waiter is
 * woken with 0 and returns the remembered status. When it fails, the once
 * stays not done and the baton passes to the first waiter, woken with
 * ONCE_YOUR_TURN to run its own fn (Tokio's OnceCell::get_or_try_init); if
 * none waits, the state goes back to IDLE for the next caller. A waiter
 * handed the baton in a cancelled scope passes it on without running fn.
 *
 * Barrier. `arrived` counts the arrivals of the current generation,
 * `gen` numbers the generations. The arrival that makes arrived == parties
 * is the leader: it starts the next generation (gen++, arrived = 0) and
 * wakes everyone queued. A waiter that wakes with an error takes the lock
 * and looks at `gen`: still its generation, it withdraws its arrival
 * (arrived--) and returns the error; a newer one means the generation
 * completed with its arrival counted (the deadline or the cancel lost the
 * race by a hair) and it returns 0 like the others released with it.
 */
#include "sync/sync.h"
#include "wait/wait.h"

#include <string.h>

const weft__wait_kind weft__wk_cond = {WEFT_WAIT_COND, "condition variable"};
const weft__wait_kind weft__wk_once = {WEFT_WAIT_ONCE, "once"};
const weft__wait_kind weft__wk_barrier = {WEFT_WAIT_BARRIER, "barrier"};

/* ---- condition variable ---- */

typedef struct condvar_impl {
    weft__lock lock; /* guards q */
    weft__waitq q;   /* waiting tasks, in arrival order */
} condvar_impl;
_Static_assert(sizeof(condvar_impl) <= sizeof(weft_cond), "weft_cond size");
_Static_assert(_Alignof(condvar_impl) <= _Alignof(weft_cond), "weft_cond");

/* The wait's publish step: the waiter is queued on the condition, whose
 * lock is held; now m goes. Queued first, unlocked second: a signaller
 * that gets m after this finds us in the queue. Under c's lock: m's
 * spinlock is taken inside c's, never the other way. (Cannot fail:
 * cond_wait checked we hold m.) */
static weft__waiter *cond_unlock(weft__waiter *w, void *m)
{
    WEFT_UNUSED(w);
    weft_mutex_unlock(m);
    return NULL;
}

/* Queues the running task on c, unlocks m, parks until signalled or until
 * the deadline or a cancel (leaving the queue then). */
static int cond_park(condvar_impl *c, weft_mutex *m, int64_t deadline)
{
    weft__waiter self = {0};
    weft__lock_acquire(&c->lock);
    return weft__wait(&self, &(weft__wait_spec){.kind = &weft__wk_cond,
                                                .obj = c,
                                                .lock = &c->lock,
                                                .q = &c->q,
                                                .deadline = deadline,
                                                .publish = cond_unlock,
                                                .ctx = m});
}

static int cond_wait(weft_cond *cc, weft_mutex *m, int64_t deadline)
{
    if (!cc || !m)
        return -EINVAL;
    if (!weft__current() || !weft__mutex_held_by_me(m))
        return -EPERM;
    int rc = weft__checkpoint();
    if (rc)
        return rc; /* still holding m: it was never unlocked */
    if (WEFT_UNLIKELY(deadline != WEFT_NEVER) && weft__wait_past(deadline))
        return -ETIMEDOUT; /* likewise */
    rc = cond_park((condvar_impl *)cc, m, deadline);
    int relocked = weft__mutex_relock(m);
    /* It returns holding m, whatever ended the wait. */
    WEFT_ASSERT(relocked != 0 || weft__mutex_held_by_me(m));
    return rc;
}

int weft_cond_wait(weft_cond *c, weft_mutex *m)
{
    return cond_wait(c, m, WEFT_NEVER);
}

int weft_cond_wait_until(weft_cond *c, weft_mutex *m, weft_time deadline)
{
    return cond_wait(c, m, deadline);
}

int weft_cond_signal(weft_cond *cc)
{
    if (!cc)
        return -EINVAL;
    condvar_impl *c = (condvar_impl *)cc;
    weft__lock_acquire(&c->lock);
    weft__waiter *w = weft__waitq_claim(&c->q);
    weft__lock_release(&c->lock);
    if (w)
        weft__wake_finish(w->task, 0);
    return 0;
}

int weft_cond_broadcast(weft_cond *cc)
{
    if (!cc)
        return -EINVAL;
    condvar_impl *c = (condvar_impl *)cc;
    weft__lock_acquire(&c->lock);
    weft__waiter *all = NULL;
    weft__waitq_claim_all(&c->q, &all);
    weft__lock_release(&c->lock);
    weft__wake_chain(all, 0);
    return 0;
}

int weft_cond_destroy(weft_cond *cc)
{
    if (!cc)
        return -EINVAL;
    condvar_impl *c = (condvar_impl *)cc;
    weft__lock_acquire(&c->lock);
    bool busy = c->q.head != NULL;
    weft__lock_release(&c->lock);
    if (busy)
        return -EBUSY;
    memset(cc, 0, sizeof(*cc));
    return 0;
}

/* ---- once ---- */

enum { ONCE_IDLE = 0, ONCE_RUNNING = 1, ONCE_DONE = 2 };
enum { ONCE_YOUR_TURN = 1 }; /* wake code: the previous fn failed, run yours */

typedef struct once_impl {
    weft__lock lock;   /* guards q, runner and the moves of state */
    atomic_int state;  /* ONCE_*; DONE is final, read without the lock */
    int status;        /* fn's status, written before state becomes DONE */
    weft_task *runner; /* the task running fn while RUNNING, for -EDEADLK */
    weft__waitq q;     /* callers waiting while RUNNING, in arrival order */
} once_impl;
_Static_assert(sizeof(once_impl) <= sizeof(weft_once), "weft_once size");
_Static_assert(_Alignof(once_impl) <= _Alignof(weft_once), "weft_once");

/* fn finished with rc (or the baton holder gave up with rc < 0): remember
 * success and wake everyone, or pass the baton to the first waiter. */
static void once_finish(once_impl *o, int rc)
{
    weft__lock_acquire(&o->lock);
    o->runner = NULL;
    if (rc >= 0) {
        o->status = rc;
        st_rel(&o->state, ONCE_DONE);
        weft__waiter *all = NULL;
        weft__waitq_claim_all(&o->q, &all);
        weft__lock_release(&o->lock);
        weft__wake_chain(all, 0);
        return;
    }
    weft__waiter *w = weft__waitq_claim(&o->q);
    if (w)
        o->runner = w->task; /* still RUNNING: the baton moves to w */
    else
        st_rlx(&o->state, ONCE_IDLE);
    weft__lock_release(&o->lock);
    if (w)
        weft__wake_finish(w->task, ONCE_YOUR_TURN);
}

/* The caller holds the baton (state RUNNING, runner == it). */
static int once_run(once_impl *o, weft_fn fn, void *arg)
{
    int rc = fn(arg);
    once_finish(o, rc);
    return rc;
}

static int once_do(weft_once *oo, weft_fn fn, void *arg, int64_t deadline)
{
    if (!oo || !fn)
        return -EINVAL;
    once_impl *o = (once_impl *)oo;
    if (ld_acq(&o->state) == ONCE_DONE)
        return o->status;
    int rc = weft__checkpoint();
    if (rc)
        return rc;
    weft_task *t = weft__current();
    weft__lock_acquire(&o->lock);
    switch (ld_rlx(&o->state)) {
    case ONCE_DONE:
        weft__lock_release(&o->lock);
        return o->status;
    case ONCE_IDLE:
        st_rlx(&o->state, ONCE_RUNNING);
        o->runner = t;
        weft__lock_release(&o->lock);
        return once_run(o, fn, arg);
    default:
        break;
    }
    if (o->runner == t) { /* fn calls once_do on its own once */
        weft__lock_release(&o->lock);
        return -EDEADLK;
    }
    weft__waiter self = {0};
    rc = weft__wait(&self, &(weft__wait_spec){.kind = &weft__wk_once,
                                              .obj = o,
                                              .lock = &o->lock,
                                              .q = &o->q,
                                              .deadline = deadline});
    if (rc == 0)
        return o->status; /* DONE: written before we were claimed */
    if (rc != ONCE_YOUR_TURN)
        return rc; /* -ETIMEDOUT, -ECANCELED: left the queue, ran nothing */
    rc = weft__checkpoint();
    if (rc) {
        once_finish(o, rc); /* cancelled: pass the baton on */
        return rc;
    }
    return once_run(o, fn, arg);
}

int weft_once_do(weft_once *o, weft_fn fn, void *arg)
{
    return once_do(o, fn, arg, WEFT_NEVER);
}

int weft_once_do_until(weft_once *o, weft_fn fn, void *arg, weft_time deadline)
{
    return once_do(o, fn, arg, deadline);
}

int weft_once_is_done(weft_once *oo)
{
    if (!oo)
        return 0;
    return ld_acq(&((once_impl *)oo)->state) == ONCE_DONE;
}

int weft_once_destroy(weft_once *oo)
{
    if (!oo)
        return -EINVAL;
    once_impl *o = (once_impl *)oo;
    weft__lock_acquire(&o->lock);
    bool busy = ld_rlx(&o->state) == ONCE_RUNNING || o->q.head;
    weft__lock_release(&o->lock);
    if (busy)
        return -EBUSY;
    memset(oo, 0, sizeof(*oo));
    return 0;
}

/* ---- barrier ---- */

typedef struct barrier_impl {
    weft__lock lock; /* guards every field below */
    int parties;     /* tasks per generation; 0: not initialised */
    int arrived;     /* arrivals counted in the current generation */
    unsigned gen;    /* number of the current generation */
    weft__waitq q;   /* the current generation's waiting arrivals */
} barrier_impl;
_Static_assert(sizeof(barrier_impl) <= sizeof(weft_barrier),
               "weft_barrier size");
_Static_assert(_Alignof(barrier_impl) <= _Alignof(weft_barrier),
               "weft_barrier");

int weft_barrier_init(weft_barrier *bb, int n)
{
    if (!bb || n < 1)
        return -EINVAL;
    memset(bb, 0, sizeof(*bb));
    ((barrier_impl *)bb)->parties = n;
    return 0;
}

/* Under b's lock, after a wait ended with rc != 0: withdraws the arrival if
 * its generation is still open, and says what the wait returns. */
static int barrier_leave(barrier_impl *b, unsigned gen, int rc)
{
    if (b->gen != gen)
        return 0; /* completed with us counted: released */
    b->arrived--;
    return rc;
}

static int barrier_wait(weft_barrier *bb, int64_t deadline)
{
    if (!bb)
        return -EINVAL;
    int rc = weft__checkpoint();
    if (rc)
        return rc;
    barrier_impl *b = (barrier_impl *)bb;
    weft__lock_acquire(&b->lock);
    if (b->parties < 1) {
        weft__lock_release(&b->lock);
        return -EINVAL;
    }
    if (++b->arrived == b->parties) { /* the leader: release them all */
        b->arrived = 0;
        b->gen++;
        weft__waiter *all = NULL;
        weft__waitq_claim_all(&b->q, &all);
        weft__lock_release(&b->lock);
        weft__wake_chain(all, 0);
        return 1;
    }
    unsigned gen = b->gen;
    weft__waiter self = {0};
    rc = weft__wait(&self, &(weft__wait_spec){.kind = &weft__wk_barrier,
                                              .obj = b,
                                              .lock = &b->lock,
                                              .q = &b->q,
                                              .deadline = deadline});
    if (rc == 0)
        return 0;
    weft__lock_acquire(&b->lock);
    rc = barrier_leave(b, gen, rc);
    weft__lock_release(&b->lock);
    return rc;
}

int weft_barrier_wait(weft_barrier *b)
{
    return barrier_wait(b, WEFT_NEVER);
}

int weft_barrier_wait_until(weft_barrier *b, weft_time deadline)
{
    return barrier_wait(b, deadline);
}

int weft_barrier_destroy(weft_barrier *bb)
{
    if (!bb)
        return -EINVAL;
    barrier_impl *b = (barrier_impl *)bb;
    weft__lock_acquire(&b->lock);
    bool busy = b->arrived > 0 || b->q.head;
    weft__lock_release(&b->lock);
    if (busy)
        return -EBUSY;
    memset(bb, 0, sizeof(*bb));
    return 0;
}
