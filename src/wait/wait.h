/* SPDX-License-Identifier: MIT */
/*
 * The wait layer: the one way a task waits for something.
 *
 * Every blocking primitive (channels, select, the sync objects, futures,
 * descriptors, the blocking pool, the bulkhead, the limiter, scope joins,
 * sleep) keeps its own state under its own lock and waits through the
 * calls below; only this layer and the scheduler call
 * weft__park_prepare / weft__park_commit.
 *
 * The protocol, written once here:
 * - A waiter is a node on a wait queue (weft__waitq), on the waiting
 *   task's stack, guarded by the queue owner's lock. It carries the task
 *   and the token of its park.
 * - A waker, holding that lock, pops waiters and claims each
 *   (weft__waiter_claim). A claim that fails means the waiter was woken
 *   otherwise (its deadline, a cancel, another case of its select): skip
 *   it; it takes itself off the queue when it runs. A claim that succeeds
 *   gives the waker the task: it hands over what the task waited for,
 *   still under the lock, and finishes the wake (weft__wake_finish, or
 *   weft__wake_chain) after unlocking.
 * - A waiter that wakes with -ETIMEDOUT or -ECANCELED was claimed by
 *   nobody, so nothing was handed over: it leaves the queue under the lock
 *   and returns (weft__wait_park does this).
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
 * What each parked task waits on is recorded in the task (kind, object,
 * name, park instant) for the task dump and the deadlock detector: plain
 * stores of values at hand, the instant being the time the worker's wheel
 * reached last.
 */
#ifndef WEFT_WAIT_H
#define WEFT_WAIT_H

#include "sched/scheduler.h"

/* What a parked task waits on. Names for the dump: weft__wait_kind_name. */
typedef enum weft__wait_kind {
    WEFT__W_NONE = 0,
    WEFT__W_SLEEP,      /* weft_sleep_for: a deadline only */
    WEFT__W_SEND,       /* a channel send */
    WEFT__W_RECV,       /* a channel receive */
    WEFT__W_SELECT,     /* several cases (obj: the case array) */
    WEFT__W_MUTEX,      /* weft_mutex */
    WEFT__W_RWLOCK,     /* weft_rwlock */
    WEFT__W_COND,       /* weft_cond */
    WEFT__W_SEM,        /* weft_sem */
    WEFT__W_EVENT,      /* weft_event */
    WEFT__W_WAITGROUP,  /* weft_waitgroup */
    WEFT__W_ONCE,       /* weft_once, run by another task */
    WEFT__W_BARRIER,    /* weft_barrier */
    WEFT__W_FUTURE,     /* one future or a combinator over several */
    WEFT__W_FD,         /* a descriptor (obj: the fd's record) */
    WEFT__W_BLOCKING,   /* a weft_blocking call */
    WEFT__W_BULKHEAD,   /* weft_bulkhead */
    WEFT__W_LIMITER,    /* weft_limiter */
    WEFT__W_SCOPE,      /* a scope's children to finish */
    WEFT__W_TASK,       /* a task handle's join */
    WEFT__W_MAILBOX,    /* an actor waiting for a message (obj: the actor) */
    WEFT__W_TELL,       /* a tell waiting for room in a mailbox */
    WEFT__W_ASK,        /* an ask waiting for room, then for its reply */
    WEFT__W_ACTOR,      /* weft_actor_join_until: an actor's exit */
    WEFT__W_SUPERVISOR, /* a supervisor's loop, or a call waiting for it */
    WEFT__W_KINDS
} weft__wait_kind;

const char *weft__wait_kind_name(int kind);

typedef struct weft__waitset weft__waitset;

/* A task waiting on a primitive, on the waiting task's own stack, guarded
 * by the primitive's lock. */
typedef struct weft__waiter {
    struct weft__waiter *next, *prev;
    weft_task *task;
    uint64_t token;     /* the task's park token (plain waiters) */
    weft__waitset *set; /* notify waiters: the set it fires into */
    void *elem;         /* channels: the value to send, or where to receive */
    long n;             /* semaphores, rwlocks, bulkheads: units wanted */
    int index;          /* select: this waiter's case; sets: its source */
    int *fired;         /* select: where the claim writes the case */
    int64_t since;      /* mutex: when it first queued (starvation) */
    bool queued;
} weft__waiter;

typedef struct weft__waitq {
    weft__waiter *head, *tail;
} weft__waitq;

static inline bool weft__waitq_empty(const weft__waitq *q)
{
    return q->head == NULL;
}

static inline void weft__waitq_push(weft__waitq *q, weft__waiter *w)
{
    w->next = NULL;
    w->prev = q->tail;
    if (q->tail)
        q->tail->next = w;
    else
        q->head = w;
    q->tail = w;
    w->queued = true;
}

/* Queues w first in line (a woken mutex waiter that lost keeps its turn). */
static inline void weft__waitq_push_front(weft__waitq *q, weft__waiter *w)
{
    w->prev = NULL;
    w->next = q->head;
    if (q->head)
        q->head->prev = w;
    else
        q->tail = w;
    q->head = w;
    w->queued = true;
}

/* Unlinks w if it is queued (a no-op otherwise): the "unlink" of both
 * kinds of waiter. */
static inline void weft__waitq_remove(weft__waitq *q, weft__waiter *w)
{
    if (!w->queued)
        return;
    /* w is on q, not on another queue, and q is whole around it. */
    WEFT_ASSERT_MSG(w->prev ? w->prev->next == w : q->head == w,
                    "a waiter unlinked from a queue it is not on");
    WEFT_ASSERT_MSG(w->next ? w->next->prev == w : q->tail == w,
                    "a waiter unlinked from a queue it is not on");
    if (w->prev)
        w->prev->next = w->next;
    else
        q->head = w->next;
    if (w->next)
        w->next->prev = w->prev;
    else
        q->tail = w->prev;
    w->queued = false;
}

/* A notify waiter's claim (wait.c): records w->index in its set; true if
 * that claimed the set's parked task. */
bool weft__waitset_fire(weft__waiter *w);

/* The claim of either kind of waiter (it is off its queue): true if the
 * caller won w's task, which it then hands over to and finishes (a plain
 * waiter also records its case for select). */
static inline bool weft__waiter_claim(weft__waiter *w)
{
    WEFT_ASSERT(w->task != NULL);
    if (WEFT_UNLIKELY(w->set != NULL))
        return weft__waitset_fire(w);
    if (!weft__wake_claim(w->task, w->token))
        return false;
    if (w->fired)
        *w->fired = w->index;
    return true;
}

/* Pops waiters until one is claimed; returns it, or NULL. */
static inline weft__waiter *weft__waitq_claim(weft__waitq *q)
{
    weft__waiter *w;
    while ((w = q->head) != NULL) {
        weft__waitq_remove(q, w);
        if (weft__waiter_claim(w))
            return w;
    }
    return NULL;
}

/* Claims every waiter of q (under its primitive's lock) and appends them,
 * in arrival order, to a chain through `next` whose end is *tail; returns
 * the chain's new end (tail itself if none was claimed). */
static inline weft__waiter **weft__waitq_claim_all(weft__waitq *q,
                                                   weft__waiter **tail)
{
    weft__waiter *w;
    while ((w = weft__waitq_claim(q)) != NULL) {
        w->next = NULL;
        *tail = w;
        tail = &w->next;
    }
    return tail;
}

/* The grant helper of FIFO queues whose head must fit (semaphores,
 * rwlocks, bulkheads): while q's head fits (fits(w, ctx)), pops it and,
 * if it is claimed, takes what it wants (take(w, ctx)) and appends it to
 * the chain ending at *tail. A head whose claim fails is dropped and the
 * next one looked at. Under the primitive's lock; returns the chain's new
 * end. static inline, so the two callbacks inline at each use. */
static inline weft__waiter **
weft__waitq_grant(weft__waitq *q, bool (*fits)(const weft__waiter *, void *),
                  void (*take)(weft__waiter *, void *), void *ctx,
                  weft__waiter **tail)
{
    weft__waiter *w;
    while ((w = q->head) != NULL && fits(w, ctx)) {
        weft__waitq_remove(q, w);
        if (!weft__waiter_claim(w))
            continue;
        take(w, ctx);
        w->next = NULL;
        *tail = w;
        tail = &w->next;
    }
    return tail;
}

/* Finishes the wakes of a chain of claimed waiters (after unlocking), each
 * with `code`. A waiter's memory is gone once its task runs. */
static inline void weft__wake_chain(weft__waiter *w, int code)
{
    while (w) {
        weft__waiter *next = w->next;
        weft__wake_finish(w->task, code);
        w = next;
    }
}

/* Prepares a plain waiter for weft__wait_one (or arm and park): only the
 * fields a claim or a move reads before the wait layer sets the rest
 * (elem, n, fired). Cheaper than zeroing the struct, which costs a rep
 * stos on every wait. */
static inline void weft__waiter_init(weft__waiter *w, void *elem, long n)
{
    w->elem = elem;
    w->n = n;
    w->fired = NULL;
}

/* Records in the running task t what it is about to wait on. */
static inline void weft__wait_note(weft_task *t, int kind, const void *obj)
{
    /* Read by other threads (the mutex cycle check, the dump): relaxed
     * atomic stores, plain ones on the machines weft runs on. Noted before
     * the park word is set, whose store releases them. */
    WEFT_ASSERT_MSG(weft__task_is_current(t), "a wait noted for another task");
    st_rlx(&t->wait_kind, (uint8_t)kind);
    st_rlx(&t->wait_obj, obj);
    st_rlx(&t->wait_since, t->worker->wheel.elapsed);
}

/* True if deadline (absolute, WEFT_NEVER: none) has come by the time the
 * worker's timer wheel has reached: a wait that would park returns
 * -ETIMEDOUT instead, without queueing. No clock read (a wait with a
 * deadline pays none): a deadline that has passed since the wheel last
 * moved parks, and its timer, due already, ends the park at the worker's
 * next look at its wheel, with the same result. */
static inline bool weft__wait_past(int64_t deadline)
{
    return deadline <= weft__tl_worker->wheel.elapsed;
}

/* Flags of a wait. */
enum {
    WEFT__WAIT_FIRM = 1, /* cancellation does not end it (joins, relocks) */
};

/* Makes w the running task's waiter for a park that follows: sets its task
 * and a fresh token, and notes (kind, obj) in the task. Call under the
 * primitive's lock, then queue w and call weft__wait_park. Inline: every
 * blocking call's hot path. */
static inline __attribute__((always_inline)) void
weft__wait_arm(weft__waiter *w, int kind, const void *obj, int flags)
{
    weft_task *t = ld_rlx(&weft__tl_worker->cur);
    WEFT_ASSERT(t != NULL);
    w->task = t;
    w->set = NULL;
    weft__wait_note(t, kind, obj);
    w->token = weft__park_prepare(t, !(flags & WEFT__WAIT_FIRM));
}

/* True if a park's result says nobody claimed the waiter (a claim sets
 * the waker's code): it was handed nothing and must leave its queue. */
static inline bool weft__wait_unclaimed(int rc)
{
    return rc == -ETIMEDOUT || rc == -ECANCELED;
}

/* Takes an unclaimed waiter off its queue, under the queue's lock. */
void weft__wait_leave(weft__lock *l, weft__waitq *q, weft__waiter *w)
    __attribute__((cold));

/* Parks the running task, whose waiter w (armed, queued on q) is under
 * lock l, which the caller holds; returns with l released, with the
 * park's result: 0 (or the code the waker finished with) once handed
 * what it waited for, or -ETIMEDOUT / -ECANCELED with w off the queue and
 * nothing handed over. */
static inline __attribute__((always_inline)) int
weft__wait_park(weft__lock *l, weft__waitq *q, weft__waiter *w,
                int64_t deadline)
{
    WEFT_ASSERT_MSG(weft__lock_is_held(l), "parking without the queue's lock");
    WEFT_ASSERT_MSG(weft__task_is_current(w->task) && w->set == NULL,
                    "parking on a waiter that is not the running task's");
    weft__lock_release(l);
    int rc = weft__park_commit(weft__tl_worker, w->task, deadline);
    if (WEFT_UNLIKELY(weft__wait_unclaimed(rc)))
        weft__wait_leave(l, q, w);
    return rc;
}

/* Parks the running task, whose waiter w is armed (weft__wait_arm) and
 * found by its wakers through its object rather than on a queue (an
 * actor's wait for a message, an asker's for its reply); the caller has
 * released the object's lock. Returns the park's result; after
 * -ETIMEDOUT / -ECANCELED the caller withdraws w from its object under
 * that lock. */
static inline __attribute__((always_inline)) int
weft__wait_commit(weft__waiter *w, int64_t deadline)
{
    return weft__park_commit(weft__tl_worker, w->task, deadline);
}

/* weft__wait_park for a primitive guarded by a pthread mutex m (the
 * blocking pool's, which its threads also wait on with a condition
 * variable): the caller holds m, w is armed and queued on q (or was, and
 * a claim that failed popped it). Releases m and parks. Returns the
 * park's result with m released; or -ETIMEDOUT / -ECANCELED with m held
 * again and w off q, nothing handed over, for the caller to undo the rest
 * of its books under the same lock. */
int weft__wait_park_mutex(pthread_mutex_t *m, weft__waitq *q, weft__waiter *w,
                          int64_t deadline);

/* The whole wait, for the common case: the caller holds l and found
 * nothing ready. A past deadline returns -ETIMEDOUT at once (l released);
 * otherwise arms w, queues it at q's tail and parks (weft__wait_park). */
static inline __attribute__((always_inline)) int
weft__wait_one(weft__lock *l, weft__waitq *q, weft__waiter *w, int kind,
               const void *obj, int64_t deadline)
{
    if (WEFT_UNLIKELY(deadline != WEFT_NEVER) && weft__wait_past(deadline)) {
        weft__lock_release(l);
        return -ETIMEDOUT;
    }
    weft__wait_arm(w, kind, obj, 0);
    weft__waitq_push(q, w);
    return weft__wait_park(l, q, w, deadline);
}

/* ---- several waits at once, exactly one wins ---- */

/* One case of a wait_many: a waiter to queue on q, under lock (NULL lock
 * and queue: a case that only bounds the wait, such as a deadline). */
typedef struct weft__arm {
    weft__lock *lock;
    weft__waitq *q;
    weft__waiter w; /* elem, n set by the caller; the rest by wait_many */
} weft__arm;

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
int weft__wait_many(weft__lock **order, int k, weft__arm *arms, int n, int kind,
                    const void *obj, int64_t deadline, int *code);

/* A chain of claimed waiters through `next`, to finish after unlocking. */
typedef struct weft__chain {
    weft__waiter *head, **tail;
} weft__chain;

static inline void weft__chain_init(weft__chain *c)
{
    c->head = NULL;
    c->tail = &c->head;
}

static inline void weft__chain_add(weft__chain *c, weft__waiter *w)
{
    w->next = NULL;
    *c->tail = w;
    c->tail = &w->next;
}

/* ---- select's cases ----
 * weft_select (select.c, above every layer it waits on) drives each kind
 * of case through four functions its object's layer gives, named
 * weft__K_case_* for K in chan, fd, future, scope, sem:
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
 *       select with the locks held; a second call after a wake is not made.
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

/* ---- wait sets: several sources, taken in as they fire ---- */

/* The future combinators' wait: the task registers a notify waiter (set =
 * this set, index = its source) on each source's queue; a source that
 * fires records the index in fired[] (room for every source) and wakes
 * the task if it is parked in weft__waitset_wait. */
struct weft__waitset {
    weft__lock lock;
    weft_task *task;
    uint64_t token; /* nonzero while the task is parked in the set */
    int *fired;     /* the sources' indexes, in firing order */
    int nfired;     /* written by fire */
    int seen;       /* taken in by the task */
};

/* A set for the running task, with room for fired[]'s sources. */
void weft__waitset_init(weft__waitset *s, int *fired, int kind,
                        const void *obj);

/* Notify waiter number index of set s. */
static inline void weft__waitset_waiter(weft__waitset *s, weft__waiter *w,
                                        int index)
{
    *w = (weft__waiter){.task = s->task, .set = s, .index = index};
}

/* Waits until a source fires that the task has not taken in; returns the
 * range [*from, *to) of fired[] to take in now (0), or -ETIMEDOUT /
 * -ECANCELED when the deadline or a cancel came with nothing new. A
 * result that fired at the same time as a deadline or cancel wins: the
 * call returns it, and the next call the code. */
int weft__waitset_wait(weft__waitset *s, int64_t deadline, int *code, int *from,
                       int *to);

/* The end of a set's wait, however it ended (decided, deadline, cancel),
 * for each notify waiter w it queued: takes w off its source's queue q
 * under the source's lock l, so a source still firing w has finished
 * with the set (on the waiting task's stack) when this returns. A waiter
 * that fired is off its queue already: then only the lock is taken. */
static inline void weft__waitset_leave(weft__lock *l, weft__waitq *q,
                                       weft__waiter *w)
{
    weft__lock_acquire(l);
    weft__waitq_remove(q, w);
    weft__lock_release(l);
}

/* Parks with nothing to wake it but the deadline or a cancel (sleep). */
int weft__wait_sleep(int64_t deadline);

/* weft__wait_sleep noting (kind, obj) as what the task waits on, with
 * flags (WEFT__WAIT_FIRM: a cancel does not end it): for a waiter that
 * is queued nowhere but still waits for an object, looking at it again
 * after the sleep (the mutex's snooze). Returns as weft__wait_sleep. */
int weft__wait_sleep_on(int64_t deadline, int kind, const void *obj, int flags);

/* Starts t, made parked without ever having run (the shutdown keeper):
 * the one wake, with code 0, that queues it on t->worker. Any thread. */
void weft__wake_new(weft_task *t);

#endif
