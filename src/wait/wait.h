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
 *   and the token of its park.
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
 * What each parked task waits on is recorded in the task (kind, object,
 * name, park instant) for the task dump and the deadlock detector: plain
 * stores of values at hand, the instant being the time the worker's wheel
 * reached last. A kind is a descriptor (weft__wait_kind) that the layer
 * owning the primitive defines (sync.h's weft__wk_mutex, ...); this layer
 * defines only its own (sleep, select). Readers take the record through
 * weft__wait_record.
 */
#ifndef WEFT_WAIT_H
#define WEFT_WAIT_H

#include "sched/park.h"

#include <stddef.h>

/* What a parked task waits on: one constant descriptor per kind, defined
 * by the layer that waits so (`const weft__wait_kind weft__wk_mutex` in
 * sync.c), compared by address. id is the kind's weft_wait_kind, told to
 * an instrument's park (through the scheduler's wait_of hook, which this
 * layer installs). */
struct weft__wait_kind {
    uint8_t id;       /* its weft_wait_kind */
    const char *name; /* the dump's word for it ("mutex") */
};
typedef struct weft__wait_kind weft__wait_kind;

/* The wait layer's own kinds. */
extern const weft__wait_kind weft__wk_sleep;  /* weft_sleep_for: a deadline */
extern const weft__wait_kind weft__wk_select; /* weft_select (obj: cases) */
/* select.c's name for its kind. */
#define WEFT__W_SELECT (&weft__wk_select)

/* The weft_wait_kind of a kind; NULL (never waited) is WEFT_WAIT_NONE. */
static inline int weft__wait_kind_id(const weft__wait_kind *k)
{
    return k ? k->id : WEFT_WAIT_NONE;
}

/* A kind's name for the dump; "nothing" for none (NULL). */
static inline const char *weft__wait_kind_name(const weft__wait_kind *k)
{
    return k ? k->name : "nothing";
}

/* Several waits at once (wait/many.h), and select's cases over them. */
typedef struct weft__arm weft__arm;
typedef struct weft__chain weft__chain;

/* ---- the wait layer's part of a task (weft_task.ext) ---- */

/* What the current park waits on (weft__wait_note), for the task dump
 * and the deadlock detector; stale once running. The task writes them
 * for itself and other threads read them while it runs: relaxed atomics
 * (plain moves on x86), read as a hint. The first part of ext: written
 * before each park, so never reset. */
struct weft__wait_rec {
    _Atomic(const weft__wait_kind *) wait_kind; /* NULL: never waited */
    _Atomic(const void *) wait_obj;             /* the object waited on */
    _Atomic(const char *) wait_name; /* a static word about the wait (a
                                      * descriptor's direction), or NULL;
                                      * set only by kinds that read it */
    _Atomic int64_t wait_since;      /* when it parked (the wheel's time) */
    _Atomic int64_t wait_until;      /* a sleep's deadline (weft__wait_sleep
                                      * only) */
    _Atomic int wait_n;              /* select: its number of cases */
};

_Static_assert(sizeof(struct weft__wait_rec) <=
                   WEFT__EXT_SCOPE - WEFT__EXT_WAIT,
               "the wait record fits in weft_task.ext");

/* t's wait record. Any thread that keeps t alive. */
static inline struct weft__wait_rec *weft__wait_rec(weft_task *t)
{
    WEFT_ASSERT(t != NULL);
    return (struct weft__wait_rec *)(void *)(t->ext + WEFT__EXT_WAIT);
}
static inline const struct weft__wait_rec *weft__wait_rec_c(const weft_task *t)
{
    return (const struct weft__wait_rec *)(const void *)(t->ext +
                                                         WEFT__EXT_WAIT);
}
/* The kind t parked with last (weft__wait_kind), and its object. */
static inline const weft__wait_kind *weft__task_wait_kind(const weft_task *t)
{
    return ld_rlx(&weft__wait_rec_c(t)->wait_kind);
}
static inline const void *weft__task_wait_obj(const weft_task *t)
{
    return ld_rlx(&weft__wait_rec_c(t)->wait_obj);
}
/* weft__task_hooks.wait_of (wait.c): t's kind's weft_wait_kind, and its
 * object in *obj. */
int weft__wait_of(const weft_task *t, const void **obj);

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
    bool claimed; /* asserts only: a claim won it since it was armed */
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
    WEFT_ASSERT_MSG(!w->queued, "a waiter claimed while still queued");
    if (WEFT_UNLIKELY(w->set != NULL))
        return weft__waitset_fire(w);
    if (!weft__wake_claim(w->task, w->token))
        return false;
#if defined(WEFT__ASSERTS)
    /* One claim per wait: its token is spent, so a second cannot win. */
    WEFT_ASSERT_MSG(!w->claimed, "a waiter claimed twice");
    w->claimed = true;
#endif
    if (w->fired)
        *w->fired = w->index;
    return true;
}

/* The claim of a waiter that is its task's only one (armed by weft__wait
 * or a variant: never a select's nor a set's), as weft__waiter_claim
 * without looking for either: an object's one waiter (weft__slot_claim),
 * an actor's tells and asks. */
static inline bool weft__waiter_claim_one(weft__waiter *w)
{
    WEFT_ASSERT(w->task != NULL && w->set == NULL);
    WEFT_ASSERT_MSG(!w->queued, "a waiter claimed while still queued");
    if (!weft__wake_claim(w->task, w->token))
        return false;
#if defined(WEFT__ASSERTS)
    WEFT_ASSERT_MSG(!w->claimed, "a waiter claimed twice");
    w->claimed = true;
#endif
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

/* Prepares a plain waiter for weft__wait: only the fields a claim or a
 * move reads before the entry sets the rest (elem, n, fired). Cheaper
 * than zeroing the struct, which costs a rep stos on every wait. */
static inline void weft__waiter_init(weft__waiter *w, void *elem, long n)
{
    w->elem = elem;
    w->n = n;
    w->fired = NULL;
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

/* A task's wait record, as another thread reads it (weft__wait_record):
 * a hint, as the task may be running again, each field read once, alone.
 * - kind: what it waits on (NULL: it never waited);
 * - obj: the object waited on;
 * - name: a static word (a descriptor's direction), or NULL; set only by
 *   the kinds that read it;
 * - since: when it parked (the wheel's time);
 * - until: a sleep's deadline (weft__wait_sleep only);
 * - n: select's number of cases. */
typedef struct weft__wait_seen {
    const weft__wait_kind *kind;
    const void *obj;
    const char *name;
    int64_t since, until;
    int n;
} weft__wait_seen;

static inline void weft__wait_record(const weft_task *t, weft__wait_seen *r)
{
    const struct weft__wait_rec *w = weft__wait_rec_c(t);
    r->kind = ld_rlx(&w->wait_kind);
    r->obj = ld_rlx(&w->wait_obj);
    r->name = ld_rlx(&w->wait_name);
    r->since = ld_rlx(&w->wait_since);
    r->until = ld_rlx(&w->wait_until);
    r->n = ld_rlx(&w->wait_n);
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
    WEFT__WAIT_OWN = 8     /* w is the running task's own for good
                            * (weft__waiter_own: an actor's idle waiter):
                            * its task and set are not written again */
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
    void *ctx; /* publish's and withdraw's */
} weft__wait_spec;

/* The entries' steps: this layer's own, no primitive calls them. */

/* Makes w the running task's waiter: its task, a fresh token, the record.
 * Under the lock that guards where w will be found. */
static inline __attribute__((always_inline)) void
weft__wait_arm(weft__waiter *w, const weft__wait_spec *s)
{
    weft_task *t = ld_rlx(&weft__wpub(weft__tl_worker)->cur);
    WEFT_ASSERT(t != NULL);
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

/* THE ENTRY: waits as s says. The caller holds s->lock and found nothing
 * ready. A past deadline returns -ETIMEDOUT at once, the lock released,
 * nothing queued. Otherwise arms w, queues it on s->q (or puts it in
 * s->slot), calls s->publish, releases the lock, finishes s->woken and
 * what publish claimed, and parks. Returns with the lock released, with
 * the park's result: 0 (or the code the waker finished with) once handed
 * what it waited for, or -ETIMEDOUT / -ECANCELED with w taken back
 * (weft__wait_leave) and nothing handed over. Inline: every blocking
 * call's hot path. */
static inline __attribute__((always_inline)) int
weft__wait(weft__waiter *w, const weft__wait_spec *s)
{
    WEFT_ASSERT_MSG(weft__lock_is_held(s->lock),
                    "a wait without its object's lock");
    WEFT_ASSERT(!(s->flags & WEFT__WAIT_QUEUED));
    if (WEFT_UNLIKELY(s->deadline != WEFT_NEVER) &&
        weft__wait_past(s->deadline)) {
        weft__lock_release(s->lock);
        return -ETIMEDOUT;
    }
    weft__wait_arm(w, s);
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

/* ---- an object's one waiter ---- */

/* Under the object's lock: claims the waiter in *slot (put there by
 * weft__wait with s->slot) and empties the slot. Returns the waiter,
 * claimed (hand it what it waits for, then weft__wake_finish its task
 * after unlocking), or NULL if there was none or its park ended
 * otherwise (a cancel: it takes itself out when it runs). */
static inline weft__waiter *weft__slot_claim(weft__waiter **slot)
{
    weft__waiter *w = *slot;
    if (!w)
        return NULL;
    *slot = NULL;
    return weft__waiter_claim_one(w) ? w : NULL;
}

/* Makes w task t's own waiter for good, for an object that only t ever
 * waits in (an actor's idle slot): its waits pass WEFT__WAIT_OWN and
 * write only what changes. Before w's first wait. */
static inline void weft__waiter_own(weft__waiter *w, weft_task *t)
{
    w->task = t;
    w->set = NULL;
}

/* Starts t, made parked without ever having run (the shutdown keeper):
 * the one wake, with code 0, that queues it on t->worker. Any thread. */
void weft__wake_new(weft_task *t);

#endif
