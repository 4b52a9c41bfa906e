/* SPDX-License-Identifier: MIT */
/*
 * Task-aware synchronisation: mutex, semaphore, event, wait group.
 *
 * Each is a small value (zero means ready: unlocked, no permits, unset,
 * zero count) holding a spinlock and a FIFO wait queue of weft__waiters.
 * Waiting goes through the wait layer's one entry (wait.h: weft__wait; the
 * mutex queues a loser first in line with WEFT__WAIT_FRONT), so every wait
 * takes a deadline and is a cancellation point (but the relock of a condition
 * variable); a waker claims a waiter before handing it what it waited for (the
 * lock, permits), so a waiter that leaves with -ETIMEDOUT or -ECANCELED was
 * handed nothing. The semaphore also gives select its SEM case.
 *
 * The mutex is described at its section below.
 */
#include "sync/sync.h"
#include "sched/clock.h"
#include "sync/cases.h"
#include "wait/many.h"
#include "wait/wait.h"

#include <limits.h>
#include <string.h>

const weft__wait_kind weft__wk_mutex = {WEFT_WAIT_MUTEX, "mutex"};
const weft__wait_kind weft__wk_sem = {WEFT_WAIT_SEM, "semaphore"};
const weft__wait_kind weft__wk_event = {WEFT_WAIT_EVENT, "event"};
const weft__wait_kind weft__wk_waitgroup = {WEFT_WAIT_WAITGROUP, "wait group"};

/* ---- mutex ----
 *
 * Go's sync.Mutex design, in weft's terms. Uncontended, lock and unlock
 * are one compare-and-swap each. Under contention the lock is not handed
 * over: unlock frees it and wakes the first waiter, which competes for it
 * with tasks that are running (a running task that locks again at once
 * keeps its cache lines warm; a strict hand-off would move the lock to
 * another worker on every unlock, ~250 ns a transfer here). Waiters stay
 * in arrival order: one that loses keeps its place at the front. No
 * starvation: once the first waiter has waited STARVE_NS, unlock hands the
 * lock to it directly, and nobody can take it in between. A waiter woken
 * from another worker that loses does not queue again (the next unlock
 * would wake it across workers only for it to lose again): it keeps the
 * wake-up and looks again every SNOOZE_NS until it wins or starves (4
 * tasks on 2 workers: 47 -> 32 ns a lock). Unlike Go, a
 * locker does not spin before queueing: measured here, watching the lock
 * from another core slows its holder so much (every read pulls the line
 * away) that 4 tasks on 2 workers took 300 ns a lock instead of 40.
 *
 * State word: M_LOCKED (held), M_WAITERS (the queue is not empty; changed
 * only under the spinlock), M_WOKEN (a woken waiter is on its way to
 * compete, so unlock need not wake another), M_DEAD (destroyed). */

enum { M_LOCKED = 1, M_WAITERS = 2, M_WOKEN = 4, M_DEAD = 8 };
/* Park results from unlock: you own it; compete for it (woken by a task
 * on your worker, or on another one). */
enum { WAKE_OWNER = 1, WAKE_RETRY = 2, WAKE_RETRY_FAR = 3 };

#define STARVE_NS (1 * WEFT_MSEC)
#define SNOOZE_NS (10 * WEFT_USEC)

typedef struct mutex_impl {
    atomic_int state;
    weft__lock lock; /* guards q and changes of M_WAITERS */
    /* read by others for -EDEADLK, and by the task dump (which names the
     * holder): stored with release, so a reader that loads it with
     * acquire may read the holder's id and name */
    _Atomic(weft_task *) owner;
    weft__waitq q;
} mutex_impl;
_Static_assert(sizeof(mutex_impl) <= sizeof(weft_mutex), "weft_mutex size");
_Static_assert(_Alignof(mutex_impl) <= _Alignof(weft_mutex), "weft_mutex");

/* Takes the lock if it is free: from s, setting M_LOCKED and clearing
 * `clear`. Returns true if taken; false once s shows it held. */
static bool mutex_take(mutex_impl *m, int *s, int clear)
{
    while (!(*s & M_LOCKED)) {
        if (cas_acq_rel(&m->state, s, (*s | M_LOCKED) & ~clear))
            return true;
    }
    return false;
}

/* The waiter left the queue (a deadline, a cancel): with nobody queued
 * behind it, M_WAITERS goes. Under m->lock, which makes the test and the
 * clear one step for lockers that queue. */
static void mutex_left(mutex_impl *m)
{
    WEFT_ASSERT(weft__lock_is_held(&m->lock));
    if (!m->q.head)
        atomic_fetch_and_explicit(&m->state, ~M_WAITERS, memory_order_acq_rel);
}

/* ---- mutex cycles ----
 *
 * A ring of mutex waits: task 0 waits for a mutex task 1 holds, task 1
 * for one task 2 holds, ..., back to task 0. Nobody in it can run to
 * unlock what it holds. The task whose wait would close the ring is told
 * (its lock returns -EDEADLK), exactly once per ring, whichever workers
 * its members run on.
 *
 * The graph's edges: "waits for" is each task's mutex_wait, written by
 * the task only under cycle_lock: set when a contended lock first
 * queues (before it parks), cleared when that lock returns. "Held by" is
 * a mutex's owner, written without cycle_lock (the fast paths never take
 * it). The check: under cycle_lock, set our mutex_wait, then follow the
 * owner of the mutex we want, the mutex that owner waits for, its owner,
 * ... If that comes back to us, it is a ring: clear our mutex_wait in
 * the same section and return -EDEADLK.
 *
 * Why what the walk reads is true, although owners change outside the
 * lock: a task whose mutex_wait is set (read under the lock, so exact)
 * is inside its lock call and cannot unlock anything until it has
 * cleared it, which needs the lock. So an owner h read for a mutex, with
 * h's mutex_wait set, is not stale: had h let go of that mutex, it did
 * so before its section that set mutex_wait, which happened before ours
 * (lock order), so we would read the release or something later; and h
 * cannot have let go of it since. A task whose mutex_wait is NULL is
 * running (or about to queue): no ring through it now; if one forms when
 * it waits, it is the one that closes it, and its own check finds it.
 *
 * Why none is missed: take the last step that completed a ring's edges.
 * An owner store (a lock taken, or an unlock's hand-over to a queued
 * waiter) is followed by that owner's next wait, which sets its
 * mutex_wait: so the last step is a section that set a mutex_wait, and
 * its walk sees every other edge (each written before a section that
 * preceded it). Why none is told twice: the told task clears its
 * mutex_wait in the section that found the ring, so the ring is never
 * whole again; a second walker that reaches it from outside sees a ring
 * without itself, which is not its to break.
 *
 * The cost: two short sections of one process-wide spinlock per lock
 * that waits (when it first queues, when it returns), none on the fast
 * paths, none when deadlock detection is off. The relock inside a
 * condition variable's wait records its edge but is never told (it must
 * return holding the mutex): a ring it closes is left to the every-task-
 * asleep check. */

#define CYCLE_MAX 16 /* longest ring of mutex waits looked for */

static weft__lock cycle_lock; /* guards every task's mutex_wait */

/* Under cycle_lock, t's mutex_wait just set to m: whether that closes a
 * ring of tasks each waiting for a mutex the next one holds. Fills
 * chain/mutexes (see on_mutex_cycle) and returns the ring's length, or
 * 0. */
static int mutex_ring(const mutex_impl *m, weft_task *t, weft_task **chain,
                      const void **mutexes)
{
    chain[0] = t;
    mutexes[0] = m;
    const mutex_impl *cur = m;
    for (int n = 1; n < CYCLE_MAX; n++) {
        weft_task *h = ld_acq(&cur->owner);
        if (h == t)
            return n;
        if (!h || !weft__sync_of_task(h)->mutex_wait)
            return 0; /* free, or its holder runs and may let go of it */
        for (int i = 1; i < n; i++)
            if (chain[i] == h)
                return 0; /* a ring without us: not ours to break */
        chain[n] = h;
        mutexes[n] = weft__sync_of_task(h)->mutex_wait;
        cur = weft__sync_of_task(h)->mutex_wait;
    }
    return 0;
}

/* t starts waiting for m (under m's lock, before it first queues): notes
 * the edge and, if told is true, looks for the ring it would close.
 * Returns the ring's length (t's edge then removed again: it will not
 * wait), or 0 (t waits, its edge noted). */
static int cycle_enter(const mutex_impl *m, weft_task *t, bool told,
                       weft_task **chain, const void **mutexes)
{
    WEFT_ASSERT_MSG(weft__task_is_current(t),
                    "a mutex edge noted for another task");
    weft__lock_acquire(&cycle_lock);
    weft__sync_of_task(t)->mutex_wait = m;
    int ring = told ? mutex_ring(m, t, chain, mutexes) : 0;
    if (ring)
        weft__sync_of_task(t)->mutex_wait = NULL;
    weft__lock_release(&cycle_lock);
    return ring;
}

/* t's lock returns: its edge goes. */
static void cycle_leave(weft_task *t)
{
    weft__lock_acquire(&cycle_lock);
    weft__sync_of_task(t)->mutex_wait = NULL;
    weft__lock_release(&cycle_lock);
}

/* Under m->lock: takes m if it is free (clearing `woken`: M_WOKEN if
 * ours), or else marks it waited on (M_WAITERS, clearing `woken` too).
 * True if taken. */
static bool mutex_take_or_mark(mutex_impl *m, int woken)
{
    int s = ld_rlx(&m->state);
    if (mutex_take(m, &s, woken))
        return true;
    while (!cas_acq_rel(&m->state, &s, (s | M_WAITERS) & ~woken)) {
        if (mutex_take(m, &s, woken))
            return true;
    }
    return false;
}

/* Under m->lock, the first time t would queue on m: notes when (for
 * starvation) and does the cycle check ("mutex cycles" above). Returns
 * false to queue; true if t's wait would close a ring, with m->lock
 * released and *rc the handler's verdict: the lock's result, or 0 to look
 * again (t waits anyway, its edge back, the ring left). */
static bool mutex_first_wait(mutex_impl *m, weft_task *t, bool told,
                             weft__waiter *self, int *rc)
{
    weft_runtime *rt = weft__wpub(weft__tl_worker)->rt;
    self->since = weft__now(rt);
    weft_task *chain[CYCLE_MAX];
    const void *mutexes[CYCLE_MAX];
    int ring;
    if (!weft__sync_rt(rt)->on_mutex_cycle ||
        !(ring = cycle_enter(m, t, told, chain, mutexes)))
        return false;
    /* Our wait would close a ring: we wait for nothing. */
    mutex_left(m);
    weft__lock_release(&m->lock);
    *rc = weft__sync_rt(rt)->on_mutex_cycle(rt, chain, mutexes, ring);
    if (*rc == 0)
        cycle_enter(m, t, false, NULL, NULL);
    return true;
}

/* Under m->lock: queues self (first in line if it was woken to compete
 * and lost) and parks, through the wait layer's entry. Returns the park's
 * result: WAKE_* from an unlock, or the deadline or a cancel, after which
 * self is off the queue and M_WAITERS tidied. */
static int mutex_park(mutex_impl *m, weft__waiter *self, int woken,
                      int64_t deadline, bool cancellable)
{
    int flags = (cancellable ? 0 : WEFT__WAIT_FIRM) |
                (woken ? WEFT__WAIT_FRONT : 0) | WEFT__WAIT_COMPACT;
    int rc = weft__wait(self, &(weft__wait_spec){.kind = &weft__wk_mutex,
                                                 .obj = m,
                                                 .lock = &m->lock,
                                                 .q = &m->q,
                                                 .deadline = deadline,
                                                 .flags = flags});
    if (weft__wait_unclaimed(rc)) { /* off the queue, handed nothing */
        weft__lock_acquire(&m->lock);
        mutex_left(m);
        weft__lock_release(&m->lock);
    }
    return rc;
}

enum { M_TAKEN = 1, M_QUEUE = 2 }; /* mutex_compete's results */

/* Woken to compete for m (far: by an unlock on another worker), with
 * M_WOKEN ours until we lock or queue: tries until it takes m (M_TAKEN,
 * M_WOKEN cleared), must queue again, first in line (M_QUEUE, M_WOKEN
 * still ours), or its deadline or a cancel ends the lock (< 0, M_WOKEN
 * given back). */
static int mutex_compete(mutex_impl *m, weft_task *t, const weft__waiter *self,
                         bool far, int64_t deadline, bool cancellable)
{
    weft_runtime *rt = weft__wpub(weft__tl_worker)->rt;
    for (;;) {
        int s = ld_rlx(&m->state);
        if (mutex_take(m, &s, M_WOKEN))
            return M_TAKEN;
        int64_t now = weft__now(rt);
        int rc = 0;
        if (cancellable && weft__task_cancelled(t))
            rc = -ECANCELED;
        else if (now >= deadline)
            rc = -ETIMEDOUT;
        if (rc) {
            /* Give M_WOKEN back while the lock is held, so its holder's
             * unlock wakes the next waiter; or take the lock if it was
             * freed meanwhile (not too late after all). */
            while (!cas_acq_rel(&m->state, &s, s & ~M_WOKEN)) {
                if (mutex_take(m, &s, M_WOKEN))
                    return M_TAKEN;
            }
            return rc;
        }
        if (!far || now - self->since >= STARVE_NS)
            return M_QUEUE; /* first in line (starving: handed over) */
        /* Lost to a task running on another worker. Queued again, we
         * would be woken by its next unlock, across workers, only to lose
         * again (a wake there costs microseconds of cache misses on both
         * sides): keep M_WOKEN instead, so its unlocks stay one
         * compare-and-swap, and look again in SNOOZE_NS (a sleep that a
         * cancel ends unless this is a relock). */
        weft__wait_sleep(&(weft__wait_spec){
            .kind = &weft__wk_mutex,
            .obj = m,
            .deadline = now + SNOOZE_NS < deadline ? now + SNOOZE_NS : deadline,
            .flags = cancellable ? 0 : WEFT__WAIT_FIRM});
    }
}

/* Whether t may wait for m: 0, -EINVAL (destroyed) or -EDEADLK (t holds
 * it). The lock's wait and select's case both ask. */
static int mutex_usable(const mutex_impl *m, const weft_task *t)
{
    if (ld_rlx(&m->state) & M_DEAD)
        return -EINVAL;
    return ld_rlx(&m->owner) == t ? -EDEADLK : 0;
}

/* The contended lock's wait: queue, park, compete when woken, until t
 * holds m (0) or the lock fails. */
static int mutex_wait(mutex_impl *m, weft_task *t, int64_t deadline,
                      bool cancellable)
{
    int err = mutex_usable(m, t);
    if (err)
        return err;
    weft__waiter self;
    weft__waiter_init(&self, NULL, 0);
    self.since = INT64_MIN; /* when it first queued: not yet */
    int woken = 0;          /* M_WOKEN while we hold it, so we clear it */
    for (;;) {
        weft__lock_acquire(&m->lock);
        if (mutex_take_or_mark(m, woken)) {
            weft__lock_release(&m->lock);
            break;
        }
        if (WEFT_UNLIKELY(deadline != WEFT_NEVER) &&
            weft__wait_past(deadline)) {
            mutex_left(m); /* not queued; any M_WOKEN of ours went above */
            weft__lock_release(&m->lock);
            return -ETIMEDOUT;
        }
        int rc;
        if (self.since == INT64_MIN &&
            mutex_first_wait(m, t, cancellable, &self, &rc)) {
            if (rc)
                return rc;
            continue; /* told to wait anyway */
        }
        rc = mutex_park(m, &self, woken, deadline, cancellable);
        if (rc == WAKE_OWNER) { /* handed over: the unlocker set the owner */
            WEFT_ASSERT_MSG(ld_rlx(&m->owner) == t &&
                                (ld_rlx(&m->state) & M_LOCKED),
                            "a mutex handed over, but not to its waiter");
            return 0;
        }
        if (rc != WAKE_RETRY && rc != WAKE_RETRY_FAR)
            return rc; /* deadline or cancel: handed nothing */
        woken = M_WOKEN;
        rc = mutex_compete(m, t, &self, rc == WAKE_RETRY_FAR, deadline,
                           cancellable);
        if (rc == M_TAKEN)
            break;
        if (rc < 0)
            return rc;
    }
    WEFT_ASSERT(ld_rlx(&m->state) & M_LOCKED);
    st_rel(&m->owner, t);
    return 0;
}

/* The contended lock: mutex_wait, then t's edge in the cycle graph goes
 * if it queued (t alone writes it, so reads it here without the lock). */
static int mutex_lock_slow(mutex_impl *m, weft_task *t, int64_t deadline,
                           bool cancellable)
{
    int rc = mutex_wait(m, t, deadline, cancellable);
    if (weft__sync_of_task(t)->mutex_wait)
        cycle_leave(t);
    return rc;
}

static int mutex_lock(weft_mutex *mm, int64_t deadline, bool wait,
                      bool cancellable)
{
    if (!mm)
        return -EINVAL;
    mutex_impl *m = (mutex_impl *)mm;
    weft_task *t = weft__current();
    if (!t)
        return -EPERM;
    if (wait && cancellable && weft__task_cancelled(t))
        return -ECANCELED;
    int s = 0;
    if (WEFT_LIKELY(cas_acq_rel(&m->state, &s, M_LOCKED))) {
        st_rel(&m->owner, t);
        return 0;
    }
    if (!wait) {
        if (s & M_DEAD)
            return -EINVAL;
        /* Free but waited on: take it as a running locker would (Go's
         * TryLock); a starving waiter's hand-off never leaves it free. */
        if (!mutex_take(m, &s, 0))
            return -EBUSY;
        st_rel(&m->owner, t);
        return 0;
    }
    return mutex_lock_slow(m, t, deadline, cancellable);
}

int weft_mutex_lock(weft_mutex *m)
{
    return mutex_lock(m, WEFT_NEVER, true, true);
}

int weft_mutex_lock_until(weft_mutex *m, weft_time deadline)
{
    return mutex_lock(m, deadline, true, true);
}

int weft_mutex_try_lock(weft_mutex *m)
{
    return mutex_lock(m, WEFT_NEVER, false, true);
}

int weft__mutex_relock(weft_mutex *m)
{
    return mutex_lock(m, WEFT_NEVER, true, false);
}

int weft__mutex_held_by_me(weft_mutex *mm)
{
    mutex_impl *m = (mutex_impl *)mm;
    weft_task *t = weft__current();
    return m && t && ld_rlx(&m->owner) == t;
}

weft_task *weft__mutex_owner(const weft_mutex *mm)
{
    const mutex_impl *m = (const mutex_impl *)mm;
    return m ? ld_acq((_Atomic(weft_task *) *)&m->owner) : NULL;
}

/* Unlock with someone queued and nobody woken: wake the first waiter to
 * compete, or hand it the lock if it has waited long enough. */
static void mutex_unlock_slow(mutex_impl *m)
{
    weft_runtime *rt = weft__wpub(weft__tl_worker)->rt;
    weft__lock_acquire(&m->lock);
    /* Only the holder unlocks (weft_mutex_unlock checked the owner). */
    WEFT_ASSERT(ld_rlx(&m->state) & M_LOCKED);
    weft__waiter *w = weft__waitq_claim(&m->q);
    int clear = m->q.head ? 0 : M_WAITERS;
    int code = WAKE_RETRY;
    if (w && w->task->worker != weft__tl_worker)
        code = WAKE_RETRY_FAR;
    int s = ld_rlx(&m->state);
    if (!w) {
        while (!cas_acq_rel(&m->state, &s, s & ~(M_LOCKED | clear)))
            ;
    } else if (w->fired || weft__now(rt) - w->since >= STARVE_NS) {
        /* Starving, or a select's (which must be chosen holding it). */
        code = WAKE_OWNER; /* stays locked: nobody can barge in */
        st_rel(&m->owner, w->task);
        if (clear)
            atomic_fetch_and_explicit(&m->state, ~clear, memory_order_acq_rel);
    } else {
        while (
            !cas_acq_rel(&m->state, &s, ((s & ~(M_LOCKED | clear)) | M_WOKEN)))
            ;
    }
    weft__lock_release(&m->lock);
    if (w)
        weft__wake_finish(w->task, code);
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
    int s = M_LOCKED;
    if (WEFT_LIKELY(cas_acq_rel(&m->state, &s, 0)))
        return 0;
    for (;;) {
        /* Its holder alone clears M_LOCKED: it stays set meanwhile. */
        WEFT_ASSERT_MSG(s & M_LOCKED, "a held mutex found unlocked");
        if ((s & (M_WAITERS | M_WOKEN)) == M_WAITERS) {
            mutex_unlock_slow(m);
            return 0;
        }
        if (cas_acq_rel(&m->state, &s, s & ~M_LOCKED))
            return 0;
    }
}

int weft_mutex_destroy(weft_mutex *mm)
{
    if (!mm)
        return -EINVAL;
    mutex_impl *m = (mutex_impl *)mm;
    int s = 0;
    if (cas_acq_rel(&m->state, &s, M_DEAD))
        return 0;
    return (s & M_DEAD) ? -EINVAL : -EBUSY;
}

/* ---- semaphore ---- */

typedef struct sem_impl {
    weft__lock lock; /* guards all */
    long count;      /* permits available */
    weft__waitq q;   /* waiters, FIFO; each wants w->n permits */
} sem_impl;
_Static_assert(sizeof(sem_impl) <= sizeof(weft_sem), "weft_sem size");

static bool sem_fits(const weft__waiter *w, void *ctx)
{
    return w->n <= ((sem_impl *)ctx)->count;
}

static void sem_take(weft__waiter *w, void *ctx)
{
    ((sem_impl *)ctx)->count -= w->n;
}

/* Under the lock: hands permits to waiters in order while the first one's
 * request fits (claimed first: a waiter leaving on its deadline or a
 * cancel, or a select whose other case won, takes nothing); returns the
 * granted ones chained through `next`, to finish after unlocking. */
static weft__waiter *sem_grant(sem_impl *s)
{
    weft__waiter *granted = NULL;
    weft__waitq_grant(&s->q, sem_fits, sem_take, s, &granted);
    return granted;
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
    weft__waiter self;
    weft__waiter_init(&self, NULL, n);
    rc = weft__wait(&self, &(weft__wait_spec){.kind = &weft__wk_sem,
                                              .obj = s,
                                              .lock = &s->lock,
                                              .q = &s->q,
                                              .deadline = deadline,
                                              .flags = WEFT__WAIT_COMPACT});
    if (rc != 0) {
        /* A large request leaving may let smaller ones behind it through. */
        weft__lock_acquire(&s->lock);
        weft__waiter *granted = sem_grant(s);
        weft__lock_release(&s->lock);
        weft__wake_chain(granted, 0);
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
    if (s->count > LONG_MAX - n) { /* would wrap negative: bad input */
        weft__lock_release(&s->lock);
        return -EINVAL;
    }
    s->count += n;
    weft__waiter *granted = sem_grant(s);
    weft__lock_release(&s->lock);
    weft__wake_chain(granted, 0);
    return 0;
}

/* -EBUSY if anyone waits on q (guarded by l), else clears the whole value (n
 * bytes at v) and returns 0. */
static int destroy_idle(weft__lock *l, weft__waitq *q, void *v, size_t n)
{
    weft__lock_acquire(l);
    bool busy = q->head != NULL;
    weft__lock_release(l);
    if (busy)
        return -EBUSY;
    memset(v, 0, n);
    return 0;
}

int weft_sem_destroy(weft_sem *ss)
{
    if (!ss)
        return -EINVAL;
    sem_impl *s = (sem_impl *)ss;
    return destroy_idle(&s->lock, &s->q, ss, sizeof(*ss));
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

/* ---- select's semaphore case (wait/many.h, "select's cases") ----
 * A select waits for one permit as a plain waiter wanting n = 1, queued
 * in line with weft_sem_acquire's callers. sem_grant claims it before it
 * takes the permit, so a select that another case won (or that timed
 * out) takes nothing; it unlinks itself when it runs again. A waiter
 * wanting one permit never holds up those behind it (they want one or
 * more), so it leaves without granting anything. */

int weft__sem_case_check(const weft_case *c)
{
    /* NULL: switched off. A weft_sem has no dead state to look for: a
     * destroyed one is zeroed, which is a valid semaphore without permits
     * (weft_sem_acquire waits on it too). */
    return c->sem ? 0 : 1;
}

weft__lock *weft__sem_case_lock(weft_case *c)
{
    return &((sem_impl *)c->sem)->lock;
}

int weft__sem_case_try(weft_case *c, weft__arm *a, weft__chain *woken)
{
    WEFT_UNUSED(woken); /* taking a permit wakes nobody */
    sem_impl *s = (sem_impl *)c->sem;
    if (!s->q.head && s->count >= 1) { /* FIFO, as sem_acquire */
        s->count--;
        c->rc = 0;
        return 0;
    }
    a->q = &s->q;
    a->w.elem = NULL;
    a->w.n = 1;
    return -EAGAIN;
}

void weft__sem_case_won(weft_case *c, int code)
{
    c->rc = code; /* 0: sem_grant took our permit before it claimed us */
}

/* ---- event and wait group: wait until a condition, wake everyone ---- */

typedef struct cond_impl {
    weft__lock lock; /* guards all */
    long value;      /* event: 1 if set; wait group: the count */
    weft__waitq q;
} cond_impl;
_Static_assert(sizeof(cond_impl) <= sizeof(weft_event), "weft_event size");
_Static_assert(sizeof(cond_impl) <= sizeof(weft_wg), "weft_wg size");

/* Waits until value == want (event: 1, wait group: 0). */
static int cond_wait(cond_impl *c, long want, const weft__wait_kind *kind,
                     int64_t deadline)
{
    int rc = weft__checkpoint();
    if (rc)
        return rc;
    weft__lock_acquire(&c->lock);
    if (c->value == want) {
        weft__lock_release(&c->lock);
        return 0;
    }
    weft__waiter self;
    weft__waiter_init(&self, NULL, 0);
    return weft__wait(&self, &(weft__wait_spec){.kind = kind,
                                                .obj = c,
                                                .lock = &c->lock,
                                                .q = &c->q,
                                                .deadline = deadline,
                                                .flags = WEFT__WAIT_COMPACT});
}

int weft_event_wait(weft_event *e)
{
    return e ? cond_wait((cond_impl *)e, 1, &weft__wk_event, WEFT_NEVER)
             : -EINVAL;
}

int weft_event_wait_until(weft_event *e, weft_time deadline)
{
    return e ? cond_wait((cond_impl *)e, 1, &weft__wk_event, deadline)
             : -EINVAL;
}

int weft_event_set(weft_event *ee)
{
    if (!ee)
        return -EINVAL;
    cond_impl *e = (cond_impl *)ee;
    weft__lock_acquire(&e->lock);
    e->value = 1;
    weft__waiter *all = NULL;
    weft__waitq_claim_all(&e->q, &all);
    weft__lock_release(&e->lock);
    weft__wake_chain(all, 0);
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

int weft_event_destroy(weft_event *e)
{
    if (!e)
        return -EINVAL;
    cond_impl *c = (cond_impl *)e;
    return destroy_idle(&c->lock, &c->q, e, sizeof(*e));
}

int weft_wg_destroy(weft_wg *wg)
{
    if (!wg)
        return -EINVAL;
    cond_impl *c = (cond_impl *)wg;
    return destroy_idle(&c->lock, &c->q, wg, sizeof(*wg));
}

int weft_wg_add(weft_wg *wg, long delta)
{
    if (!wg)
        return -EINVAL;
    cond_impl *c = (cond_impl *)wg;
    weft__waiter *all = NULL;
    weft__lock_acquire(&c->lock);
    long value;
    /* Below zero, or past LONG_MAX (checked without overflowing). */
    if (__builtin_add_overflow(c->value, delta, &value) || value < 0) {
        weft__lock_release(&c->lock);
        return -EINVAL;
    }
    c->value = value;
    if (c->value == 0)
        weft__waitq_claim_all(&c->q, &all);
    weft__lock_release(&c->lock);
    weft__wake_chain(all, 0);
    return 0;
}

int weft_wg_done(weft_wg *wg)
{
    return weft_wg_add(wg, -1);
}

int weft_wg_wait(weft_wg *wg)
{
    return wg ? cond_wait((cond_impl *)wg, 0, &weft__wk_waitgroup, WEFT_NEVER)
              : -EINVAL;
}

int weft_wg_wait_until(weft_wg *wg, weft_time deadline)
{
    return wg ? cond_wait((cond_impl *)wg, 0, &weft__wk_waitgroup, deadline)
              : -EINVAL;
}

/* ---- select's cases ----
 * EVENT and WAITGROUP (wait/many.h, "select's cases"): a select waits as
 * cond_wait does, a plain waiter on the object's queue, which set and
 * the count's last step claim all at once; nothing is consumed, so a
 * select that another case won only leaves the queue. */

static int cond_case_try(cond_impl *o, long want, weft_case *c, weft__arm *a)
{
    if (o->value == want) {
        c->rc = 0;
        return 0;
    }
    a->q = &o->q;
    a->w.elem = NULL;
    a->w.n = 0;
    return -EAGAIN;
}

int weft__event_case_check(const weft_case *c)
{
    return c->event ? 0 : 1;
}

weft__lock *weft__event_case_lock(weft_case *c)
{
    return &((cond_impl *)c->event)->lock;
}

int weft__event_case_try(weft_case *c, weft__arm *a, weft__chain *woken)
{
    WEFT_UNUSED(woken);
    return cond_case_try((cond_impl *)c->event, 1, c, a);
}

void weft__event_case_won(weft_case *c, int code)
{
    c->rc = code; /* 0: set (or the count reached zero) when claimed */
}

int weft__wg_case_check(const weft_case *c)
{
    return c->wg ? 0 : 1;
}

weft__lock *weft__wg_case_lock(weft_case *c)
{
    return &((cond_impl *)c->wg)->lock;
}

int weft__wg_case_try(weft_case *c, weft__arm *a, weft__chain *woken)
{
    WEFT_UNUSED(woken);
    return cond_case_try((cond_impl *)c->wg, 0, c, a);
}

/* MUTEX (wait/many.h, "select's cases"): a select queues as mutex_wait does
 * (M_WAITERS set, its first-queued instant in since), and unlock hands
 * the mutex straight to a select's waiter (WAKE_OWNER, as to a starving
 * one) rather than wake it to compete: a select is chosen holding it.
 * The claim comes first, so a select that another case won holds
 * nothing; lost clears M_WAITERS if its waiter was the last one, as
 * mutex_left does for a lock that leaves. A select's wait is no edge of
 * the mutex cycle check (the every-task-asleep check still sees it). */

int weft__mutex_case_check(const weft_case *c)
{
    if (!c->mutex)
        return 1;
    mutex_impl *m = (mutex_impl *)c->mutex;
    weft_task *t = weft__current();
    return t ? mutex_usable(m, t) : -EPERM;
}

weft__lock *weft__mutex_case_lock(weft_case *c)
{
    return &((mutex_impl *)c->mutex)->lock;
}

int weft__mutex_case_try(weft_case *c, weft__arm *a, weft__chain *woken)
{
    WEFT_UNUSED(woken);
    mutex_impl *m = (mutex_impl *)c->mutex;
    if (mutex_take_or_mark(m, 0)) {
        st_rel(&m->owner, weft__current());
        c->rc = 0;
        return 0;
    }
    /* Queued as a lock's waiter; unlock hands a select's the mutex (its
     * `fired` is set), so its `since` is never read. */
    a->q = &m->q;
    a->w.elem = NULL;
    a->w.n = 0;
    return -EAGAIN;
}

void weft__mutex_case_won(weft_case *c, int code)
{
    /* Only unlock claims a mutex's waiters, and it hands a select's the
     * mutex (the owner it set is us). */
    WEFT_ASSERT(code == WAKE_OWNER);
    WEFT_UNUSED(code);
    c->rc = 0;
}

void weft__mutex_case_lost(weft_case *c)
{
    mutex_impl *m = (mutex_impl *)c->mutex;
    weft__lock_acquire(&m->lock);
    mutex_left(m);
    weft__lock_release(&m->lock);
}
