/* SPDX-License-Identifier: MIT */
/*
 * The wait layer: the one way a task waits for something.
 *
 * Every blocking primitive (channels, select, the sync objects, futures,
 * descriptors, the blocking pool, the bulkhead, the limiter, scope joins,
 * task joins, actors, supervisors, sleep) keeps its own state under its
 * own lock and waits through one entry: it fills a weft__wait_spec (what
 * it waits on, the lock it holds, where its waiter is found, the
 * deadline, flags) and calls weft__wait. The entry notes the wait in the
 * task, arms the waiter, queues or publishes it, releases the lock,
 * parks, and takes an unclaimed waiter back. A few waits need one thing
 * more, and get it as a variant of the same entry, on the same spec:
 * weft__wait_pmutex (a queue under a pthread mutex), weft__wait_sleep (no
 * waiter: a deadline, or a snooze), and the several-at-once waits below
 * (weft__wait_many for select, wait sets for the future combinators).
 * Only this layer and the scheduler call weft__park_prepare,
 * weft__park_commit and weft__wake_claim, or arm a waiter.
 *
 * The protocol, written once here:
 * - A waiter is a node on a wait queue (weft__waitq), on the waiting
 *   task's stack, guarded by the queue owner's lock. It carries the task
 *   and the token of its park. (A compact task's, in a wait flagged
 *   WEFT__WAIT_COMPACT, is off its stack, so that the stack may be given
 *   back while it waits: wait/compact.c.)
 * - A waker, holding that lock, pops waiters and claims each
 *   (weft__waiter_claim). A claim that fails means the waiter was woken
 *   otherwise (its deadline, a cancel, another case of its select): skip
 *   it; it takes itself off the queue when it runs. A claim that succeeds
 *   gives the waker the task: it hands over what the task waited for,
 *   still under the lock, and finishes the wake (weft__wake_finish, or
 *   weft__wake_chain) after unlocking. A waiter is claimed at most once
 *   per wait, and only once it is off its queue.
 * - A waiter that wakes with -ETIMEDOUT or -ECANCELED was claimed by
 *   nobody, so nothing was handed over: the entry takes it off its queue
 *   (or out of its slot, or calls the spec's withdraw) under the lock.
 * - A deadline already past when the wait would park returns -ETIMEDOUT
 *   at once, without queueing (weft__wait_past).
 * - wait_many queues one waiter per case, all with one token, so the
 *   first claim wins them all and records its case; the others are
 *   unlinked when the task runs again.
 *
 * Two kinds of waiter:
 * - plain: claimed by its park token (one task, one wake);
 * - notify: belongs to a weft__waitset; a claim records the waiter's index
 *   in the set and claims the set's task only if it is parked in it (the
 *   future combinators: several sources fire, the task takes them in).
 *
 * What each parked task waits on is recorded in the task: wait/record.h.
 */
#ifndef WEFT_WAIT_H
#define WEFT_WAIT_H

#include "wait/record.h"
#include "wait/wake.h"

#include <stddef.h>

/* Prepares a plain waiter for weft__wait: only the fields a claim or a
 * move reads before the entry sets the rest (elem, n, fired). Cheaper
 * than zeroing the struct, which costs a rep stos on every wait. */
static inline void weft__waiter_init(weft__waiter *w, void *elem, long n)
{
    w->elem = elem;
    w->n = n;
    w->fired = NULL;
}

/* Makes w task t's own waiter for good, for an object that only t ever
 * waits in (an actor's idle slot): its waits pass WEFT__WAIT_OWN and
 * write only what changes. Before w's first wait. */
static inline void weft__waiter_own(weft__waiter *w, weft_task *t)
{
    /* Atomic (relaxed): weft__waiter_task_hint may read it meanwhile. */
    __atomic_store_n(&w->task, t, __ATOMIC_RELAXED);
    w->set = NULL;
}

/* The task of w, an own waiter (weft__waiter_own), read outside the lock
 * of its object and before w's first wait perhaps (NULL then): a hint, to
 * prefetch with, not to wake. */
static inline weft_task *weft__waiter_task_hint(weft__waiter *w)
{
    return __atomic_load_n(&w->task, __ATOMIC_RELAXED);
}

/* ---- the record: what a parked task waits on ---- */

/* Records in the running task t what it is about to wait on (the entries
 * do; a primitive does not). */
static inline void weft__wait_note(weft_task *t, const weft__wait_kind *kind,
                                   const void *obj)
{
    /* Read by other threads (the mutex cycle check, the dump): relaxed
     * atomic stores, plain ones on the machines weft runs on. Noted before
     * the park word is set, whose store releases them. */
    WEFT_ASSERT_MSG(weft__task_is_current(t), "a wait noted for another task");
    struct weft__wait_rec *r = weft__wait_rec(t);
    st_rlx(&r->wait_kind, kind);
    st_rlx(&r->wait_obj, obj);
    st_rlx(&r->wait_since, weft__wpub(t->worker)->wheel.elapsed);
}

/* Notes a static word about the running task's next wait (a descriptor's
 * direction), for the one wait whose spec cannot carry it: a
 * weft__wait_many (weft__wait takes it as its spec's name). */
static inline void weft__wait_note_name(const char *name)
{
    st_rlx(
        &weft__wait_rec(ld_rlx(&weft__wpub(weft__tl_worker)->cur))->wait_name,
        name);
}

/* True if deadline (absolute, WEFT_NEVER: none) has come by the time the
 * worker's timer wheel has reached: a wait that would park returns
 * -ETIMEDOUT instead, without queueing. No clock read (a wait with a
 * deadline pays none): a deadline that has passed since the wheel last
 * moved parks, and its timer, due already, ends the park at the worker's
 * next look at its wheel, with the same result. The wheel moves only
 * between the worker's tasks, so two looks by one running task agree. */
static inline bool weft__wait_past(int64_t deadline)
{
    return deadline <= weft__wpub(weft__tl_worker)->wheel.elapsed;
}

/* True if a park's result says nobody claimed the waiter (a claim sets
 * the waker's code): it was handed nothing and must leave its queue. */
static inline bool weft__wait_unclaimed(int rc)
{
    /* One test on the common path: a claim's code is mostly >= 0. */
    return WEFT_UNLIKELY(rc < 0) && (rc == -ETIMEDOUT || rc == -ECANCELED);
}

/* ---- the one entry ---- */

/* Flags of a wait. */
enum {
    WEFT__WAIT_FIRM = 1,   /* cancellation does not end it (joins, relocks) */
    WEFT__WAIT_FRONT = 2,  /* queue first in line (a woken mutex waiter that
                            * lost keeps its turn) */
    WEFT__WAIT_QUEUED = 4, /* weft__wait_pmutex only: w is on q already,
                            * or was and a claim that failed popped it (a
                            * blocking call's job, whose waiter is its
                            * node in the pool's queues): queue nothing */
    WEFT__WAIT_OWN = 8,    /* w is the running task's own for good
                            * (weft__waiter_own: an actor's idle waiter):
                            * its task and set are not written again */
    /* Compact tasks (wait/compact.c): while the task is parked in this
     * wait, other threads touch nothing of its stack but w and, if
     * w->elem is set, the spec's elem_size bytes there (no publish, no
     * fired); so a compact task may give its stack back meanwhile. */
    WEFT__WAIT_COMPACT = 16,
    WEFT__WAIT_ELEM_OUT = 32 /* with COMPACT: wakers write elem (a
                              * receive), which a wait that returns 0
                              * copies to the caller's elem */
};

/* A prepared wait: what the running task waits on and where its waiter
 * is found. Written as a compound literal at the call, naming only the
 * fields the wait uses (the others are zero); weft__wait is inlined, so
 * what is zero costs nothing. */
typedef struct weft__wait_spec {
    const weft__wait_kind *kind; /* the record: what it waits on */
    const void *obj;             /* the record: the object */
    const char *name;            /* the record: a static word (a descriptor's
                                  * direction); NULL: not noted */
    weft__lock *lock;            /* held by the caller, guarding where the
                                  * waiter is found; released to park */
    weft__waitq *q;              /* where the waiter queues (its tail; the head
                                  * with WEFT__WAIT_FRONT); or */
    weft__waiter **slot;         /* where the object keeps its one waiter (an
                                  * idle actor; see weft__slot_claim); or, with
                                  * neither, publish puts it where it is found */
    int64_t deadline;            /* absolute; WEFT_NEVER: none */
    int flags;                   /* WEFT__WAIT_* */
    weft__waiter *woken;         /* waiters the caller claimed (a chain through
                                  * next): finished with 0 once the lock is
                                  * released, before the park */
    /* Under the lock, once the waiter is armed and queued (or, with
     * neither q nor slot, to put it where its wakers find it): whatever
     * must happen there before the lock goes (a condition variable
     * unlocks its mutex; an ask places its message). Returns one waiter it
     * claimed, to finish with 0 once the lock is released, or NULL. */
    weft__waiter *(*publish)(weft__waiter *w, void *ctx);
    /* Under the lock, after a wake nobody claimed, with neither q nor
     * slot: takes the waiter back from where publish put it, which it
     * knows by its own books (w->queued says something only once publish
     * pushed w on a queue). */
    void (*withdraw)(weft__waiter *w, void *ctx);
    void *ctx;        /* publish's and withdraw's */
    size_t elem_size; /* WEFT__WAIT_COMPACT: the bytes at w->elem */
} weft__wait_spec;

/* The entries' steps: this layer's own, no primitive calls them. */

/* Makes w the running task's waiter: its task, a fresh token, the record.
 * Under the lock that guards where w will be found. */
static inline __attribute__((always_inline)) void
weft__wait_arm(weft__waiter *w, const weft__wait_spec *s, weft_task *t)
{
    WEFT_ASSERT(t != NULL && t == ld_rlx(&weft__wpub(weft__tl_worker)->cur));
    if (!(s->flags & WEFT__WAIT_OWN)) {
        w->task = t;
        w->set = NULL;
    }
    WEFT_ASSERT_MSG(w->task == t && w->set == NULL,
                    "a task waits in another's own waiter");
#if defined(WEFT__ASSERTS)
    if (!s->q)
        w->queued = false; /* a claim's assert looks */
    w->claimed = false;
#endif
    weft__wait_note(t, s->kind, s->obj);
    if (s->name)
        st_rlx(&weft__wait_rec(t)->wait_name, s->name);
    w->token = weft__park_prepare(t, !(s->flags & WEFT__WAIT_FIRM));
}

/* Takes an unclaimed waiter back, under lock l: off q; out of *slot if it
 * is still there; or withdraw(w, ctx). */
void weft__wait_leave(weft__lock *l, weft__waitq *q, weft__waiter *w)
    __attribute__((cold));
void weft__wait_leave_slot(weft__lock *l, weft__waiter **slot, weft__waiter *w)
    __attribute__((cold));
void weft__wait_leave_by(weft__lock *l,
                         void (*withdraw)(weft__waiter *, void *), void *ctx,
                         weft__waiter *w) __attribute__((cold));

/* Parks the running task on its armed waiter w, published already and
 * the lock released; takes w back if nobody claimed it. */
static inline __attribute__((always_inline)) int
weft__wait_block(weft__waiter *w, const weft__wait_spec *s)
{
    weft_worker *wk = weft__tl_worker;
    WEFT_ASSERT_MSG(w->task == ld_rlx(&weft__wpub(wk)->cur) &&
                        w->task->worker == wk && w->set == NULL,
                    "a waiter parked by a task not its own, or off its "
                    "worker");
    int rc = weft__park_commit(wk, w->task, s->deadline);
    /* The common end (a claim's code, mostly 0) is the fall-through.
     * Written as one WEFT_UNLIKELY around weft__wait_unclaimed, gcc laid
     * out the caller's code after the park in the function's cold part,
     * two jumps away on every wake (5% of an ask). */
    if (WEFT_UNLIKELY(rc < 0) && weft__wait_unclaimed(rc)) {
        if (s->q)
            weft__wait_leave(s->lock, s->q, w);
        else if (s->slot)
            weft__wait_leave_slot(s->lock, s->slot, w);
        else if (s->withdraw)
            weft__wait_leave_by(s->lock, s->withdraw, s->ctx, w);
        return rc;
    }
    /* Woken with a code: a waker claimed w (off its queue: it may have
     * queued it elsewhere since, as the blocking pool does). */
    WEFT_ASSERT_MSG(w->claimed, "a waiter woken without a claim");
    return rc;
}

/* ---- compact tasks ---- */

/* A compact task's steps around a wait that allows it (wait/compact.c):
 * weft__compact_enter returns the waiter to wait on in w's stead, the
 * task's own off its stack (elem pointing at a bounce buffer holding a
 * copy of elem_size bytes at w->elem), with its park marked
 * TASK_MAY_RELEASE; or w itself if the stack must stay (an elem too
 * large). weft__compact_leave, after the wait on x != w, copies back what
 * the wait and its waker wrote (into w, and into elem if `out` and the
 * wait returned 0) and returns rc. */
weft__waiter *weft__compact_enter(weft__waiter *w, size_t elem_size)
    __attribute__((noinline));
int weft__compact_leave(weft__waiter *w, weft__waiter *x, int rc, bool out,
                        size_t elem_size) __attribute__((noinline));

/* THE ENTRY's body (weft__wait, below). The caller holds s->lock and
 * found nothing ready. A past deadline returns -ETIMEDOUT at once, the
 * lock released, nothing queued. Otherwise arms w, queues it on s->q (or
 * puts it in s->slot), calls s->publish, releases the lock, finishes
 * s->woken and what publish claimed, and parks. Returns with the lock released,
 * with the park's result: 0 (or the code the waker finished with) once handed
 * what it waited for, or -ETIMEDOUT / -ECANCELED with w taken back
 * (weft__wait_leave) and nothing handed over. Inline: every blocking
 * call's hot path. */
static inline __attribute__((always_inline)) int
weft__wait_here(weft__waiter *w, const weft__wait_spec *s, weft_task *t)
{
    WEFT_ASSERT_MSG(weft__lock_is_held(s->lock),
                    "a wait without its object's lock");
    WEFT_ASSERT(!(s->flags & WEFT__WAIT_QUEUED));
    if (WEFT_UNLIKELY(s->deadline != WEFT_NEVER) &&
        weft__wait_past(s->deadline)) {
        weft__lock_release(s->lock);
        return -ETIMEDOUT;
    }
    weft__wait_arm(w, s, t);
    if (s->q) {
        if (s->flags & WEFT__WAIT_FRONT)
            weft__waitq_push_front(s->q, w);
        else
            weft__waitq_push(s->q, w);
    } else if (s->slot) {
        WEFT_ASSERT_MSG(*s->slot == NULL, "an object's one waiter, twice");
        *s->slot = w;
    }
    weft__waiter *claimed = s->publish ? s->publish(w, s->ctx) : NULL;
    weft__lock_release(s->lock);
    weft__wake_chain(s->woken, 0);
    if (claimed)
        weft__wake_finish(claimed->task, 0);
    return weft__wait_block(w, s);
}

/* The entry for an object guarded by a pthread mutex m instead of a
 * spinlock (the blocking pool's, which its threads also wait on with a
 * condition variable); s->lock is NULL. The caller holds m and has
 * looked at the deadline itself (no check here). Arms w, queues it on
 * s->q unless WEFT__WAIT_QUEUED, releases m and parks. Returns the park's
 * result with m released; or -ETIMEDOUT / -ECANCELED with m held again
 * and w off s->q, nothing handed over, for the caller to undo the rest of
 * its books under the same lock. */
int weft__wait_pmutex(weft__waiter *w, const weft__wait_spec *s,
                      pthread_mutex_t *m);

/* The entry with no waiter: parks until s->deadline or, unless
 * WEFT__WAIT_FIRM, a cancel, noting (s->kind, s->obj) and the deadline;
 * s->lock, q and slot are NULL, and nothing else wakes it. For sleeps
 * and for a task that waits for an object without being queued on it,
 * looking at it again afterwards (the mutex's snooze, the limiter).
 * Returns -ETIMEDOUT or -ECANCELED. */
int weft__wait_sleep(const weft__wait_spec *s);

/* THE ENTRY: waits as s says (weft__wait_here above). A compact task
 * (weft_spawn_opts.compact) in a wait flagged WEFT__WAIT_COMPACT waits on
 * its own waiter off its stack instead (weft__compact_enter), so that the
 * stack may be given back while it is parked. Every other wait pays one
 * test of a constant and one of x, and a flagged wait of a task that is
 * not compact a test of its flags. (The spec stays out of memory: the
 * steps aside take scalars.) */
static inline __attribute__((always_inline)) int
weft__wait(weft__waiter *w, const weft__wait_spec *s)
{
    weft_task *t = ld_rlx(&weft__wpub(weft__tl_worker)->cur);
    weft__waiter *x = w;
    if ((s->flags & WEFT__WAIT_COMPACT) &&
        WEFT_UNLIKELY(t->flags & TASK_COMPACT))
        x = weft__compact_enter(w, s->elem_size);
    int rc = weft__wait_here(x, s, t);
    if (WEFT_UNLIKELY(x != w))
        rc = weft__compact_leave(w, x, rc, s->flags & WEFT__WAIT_ELEM_OUT,
                                 s->elem_size);
    return rc;
}

#endif
