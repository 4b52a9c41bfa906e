/* SPDX-License-Identifier: MIT */
/*
 * Actors: a task that handles the messages of a bounded mailbox one at a
 * time.
 *
 * The mailbox is a ring of `cap` fixed slots (8 bytes of header, then the
 * message), allocated with the actor in one block and guarded by the
 * actor's spinlock, as a channel's ring is. A slot's header is a tagged
 * word: 0 for a tell, the asker's record | 1 for an ask (1 alone: an ask
 * whose asker gave up). Three ways a message goes in, under the lock:
 * - the actor is parked waiting for a message (its waiter is in `idle`,
 *   the wait layer's slot): the sender claims it, copies the message straight
 *   into the actor's `buf` and wakes it (wake_finish puts it next on this
 *   worker, so a ping-pong runs back to back): no trip through the ring;
 * - the ring has room: the message goes to its back;
 * - the ring is full: the sender waits on `sendq` (a tell as a channel's
 *   sender does; a timeout or cancel leaves nothing queued), and the actor,
 *   taking a message out, moves the first waiting sender's message in,
 *   which keeps each sender's messages in order.
 *
 * An ask's record (struct weft__ask) lives on the asker's stack: its park
 * (waiter), where the reply goes, the status, and where the record is
 * referenced from: sendq, a ring slot, the actor's `cur_ask` (being
 * handled), or nowhere (DONE). Only code holding the actor's lock moves or
 * reads it, and the asker parks once, from sending to the reply: the
 * actor moves an ask from sendq into the ring without waking it. Whoever
 * ends the ask (the reply, the behaviour returning without one, the
 * actor's exit) claims the asker's waiter under the lock, writes the
 * reply and status, marks the record DONE and wakes the asker after
 * unlocking (the asker stays parked until then). An asker whose deadline
 * or cancel woke it was claimed by nobody: it takes the lock and detaches
 * its record from wherever it is (off sendq, its slot's header to a bare
 * 1, or cur_ask to NULL), so the actor never touches it again. The message
 * itself stays queued and is handled (Erlang's and Akka's semantics); its
 * reply goes nowhere and weft_actor_reply returns 0.
 *
 * The actor's loop runs in a scope of its own, in the actor's struct (so
 * that its cancel word is on a line a message touches anyway), opened by
 * the actor's task and hidden from its code as a task handle's is
 * (task_scope: spawns into "the current scope" go to the scope around
 * it): WEFT_STOP_NOW cancels it, which wakes the behaviour from any
 * blocking call, and a cancel from above flows into it. The loop looks
 * at the stop and the cancel before each message, so an actor that is
 * never idle still stops.
 *
 * Monitors: a record made by weft_actor_monitor, on the target's
 * monitors (struct weft__monitors: a list in the order made, and a hash
 * table by id) until it exits or weft_actor_demonitor finds it by its id
 * in the table and unlinks it, both O(1). The exit takes the whole list
 * at once under the target's lock, so a record is either removed by a
 * demonitor (which returns 0, and no DOWN comes) or fired (and demonitor
 * says -ENOENT), never both. Firing moves each record to its watcher's
 * list of DOWNs (taking no slot, so it is never refused), which the loop
 * handles before the ring; a watcher that has stopped drops it. A monitor
 * future is resolved with the status instead.
 *
 * Lock order: the registry, then an actor; never two actors at once (a
 * monitor firing takes the target's lock, lets go, then the watcher's).
 */
#include "actor/struct.h"
#include "scope/struct.h"
#include "select/select.h"
#include "util/fault.h"
#include "wait/wait.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

const weft__wait_kind weft__wk_mailbox = {WEFT_WAIT_MAILBOX, "mailbox receive"};
const weft__wait_kind weft__wk_tell = {WEFT_WAIT_TELL, "actor tell"};
const weft__wait_kind weft__wk_ask = {WEFT_WAIT_ASK, "actor ask"};
const weft__wait_kind weft__wk_actor = {WEFT_WAIT_ACTOR, "actor exit"};

#define ACTOR_DEAD 0x64656164u /* "dead" */
#define MAX_MSG 65536
#define HDR 8 /* a slot's header */

/* Where an ask's record is referenced from (under the actor's lock). */
enum { ASK_SENDQ, ASK_SLOT, ASK_CURRENT, ASK_DONE };

typedef struct weft__ask {
    weft__waiter w; /* the asker's park; elem = the message, n = 1 (a
                     * tell's waiter has n = 0) */
    void *reply;    /* where the reply goes (NULL: dropped) */
    int status;     /* the ask's result, set by whoever claims w */
    int where;      /* ASK_* */
    uint32_t slot;  /* ASK_SLOT: the ring slot */
} weft__ask;

typedef struct weft__monitor {
    /* On the target (its lock): next and prev in the order made, hnext in
     * its id's chain of the table. Fired at a watcher: next in its list
     * of DOWNs (the watcher's lock). */
    struct weft__monitor *next, *prev, *hnext;
    long id;             /* > 0, unique in the process */
    weft_actor *watcher; /* a reference; NULL for a future */
    weft_future *fut;    /* a reference; NULL for a DOWN message */
    weft_actor *target;  /* once fired: a reference, for the DOWN */
    int status;          /* once fired: target's exit status */
} weft__monitor;

static atomic_long monitor_ids;

#define actor_ok weft__actor_ok

static inline weft__ask *ask_of(weft__waiter *w)
{
    return (weft__ask *)((char *)w - offsetof(weft__ask, w));
}

static void actor_select_install(void); /* select's cases, at the end */

/* ---- references ---- */

weft_actor *weft_actor_ref(weft_actor *a)
{
    if (actor_ok(a))
        add_rlx(&a->refs, 1);
    return a;
}

int weft_actor_unref(weft_actor *a)
{
    if (!actor_ok(a))
        return -EINVAL;
    if (add_acq_rel(&a->refs, -1) != 1)
        return 0;
    a->magic = ACTOR_DEAD;
    weft__husk_free(a);
    return 0;
}

/* ---- the ring (the actor's lock held) ---- */

static inline unsigned char *slot_at(weft_actor *a, uint32_t i)
{
    return a->ring + (size_t)i * a->slot_size;
}

/* Appends msg with header hdr; returns its slot. The ring has room. */
static inline uint32_t ring_push(weft_actor *a, const void *msg, uintptr_t hdr)
{
    uint32_t i = a->head + a->len;
    if (i >= a->cap)
        i -= a->cap;
    unsigned char *p = slot_at(a, i);
    memcpy(p, &hdr, sizeof hdr);
    weft__copy_small(p + HDR, msg, a->msg_size);
    a->len++;
    return i;
}

/* Claims the actor's waiter if it waits for a message: its task, to wake
 * after unlocking; NULL if it does not wait, or its park was ended
 * otherwise (a cancel). Either way it no longer waits here. */
static inline weft_task *claim_actor(weft_actor *a)
{
    weft__waiter *w = weft__slot_claim(&a->idle);
    return w ? w->task : NULL;
}

/* Ends the ask r (referenced by the actor until now) with status, if its
 * asker still waits: true if it does (claimed: wake it after unlocking). */
static inline bool ask_end(weft__ask *r, int status)
{
    r->where = ASK_DONE;
    if (!weft__waiter_claim_one(&r->w))
        return false; /* it gave up: it detaches once it has the lock */
    r->status = status;
    return true;
}

/* Moves the first waiting sender's message into the ring, which has room;
 * returns a tell's waiter to wake with 0 after unlocking, or NULL. */
static weft__waiter *sender_in(weft_actor *a)
{
    weft__waiter *w;
    while ((w = a->sendq.head) != NULL) {
        weft__waitq_remove(&a->sendq, w);
        if (w->n) { /* an ask: it stays parked, now for its reply */
            weft__ask *r = ask_of(w);
            r->slot = ring_push(a, w->elem, (uintptr_t)r | 1);
            r->where = ASK_SLOT;
            return NULL;
        }
        if (weft__waiter_claim(w)) { /* records a select's case */
            ring_push(a, w->elem, 0);
            return w;
        }
    }
    return NULL;
}

/* Fails every waiting sender with -ESRCH (the actor refuses messages):
 * tells onto *tells (finish with -ESRCH), asks onto *asks (finish 0). */
static void senders_fail(weft_actor *a, weft__chain *tells, weft__chain *asks)
{
    weft__waiter *w;
    while ((w = a->sendq.head) != NULL) {
        weft__waitq_remove(&a->sendq, w);
        if (w->n) {
            if (ask_end(ask_of(w), -ESRCH))
                weft__chain_add(asks, w);
        } else if (weft__waiter_claim(w)) {
            weft__chain_add(tells, w);
        }
    }
}

/* ---- spawn and run ---- */

int weft__actor_opts_check(const weft_actor_opts *o)
{
    if (!o || !o->fn || o->msg_size < 1 || o->msg_size > MAX_MSG ||
        o->reply_size > MAX_MSG || o->capacity < 1)
        return -EINVAL;
    if (o->worker < 0)
        return -EINVAL;
    return 0;
}

static weft_actor *actor_new(const weft_actor_opts *o, weft_runtime *rt,
                             long refs, int *err)
{
    size_t head = (sizeof(weft_actor) + 15) & ~(size_t)15;
    size_t msg = (o->msg_size + 7) & ~(size_t)7;
    size_t slot = HDR + msg;
    size_t own = msg <= WEFT__ACTOR_MSG_INLINE ? 0 : msg; /* buf, after */
    size_t cap = (size_t)o->capacity;
    if (cap > (SIZE_MAX - head - own) / slot) {
        *err = -EINVAL;
        return NULL;
    }
    /* Aligned to a cache line, so that the fields a message touches take
     * the lines the struct's order gives them (weft_actor). */
    size_t size = head + own + cap * slot;
    if (size > SIZE_MAX - WEFT_CACHELINE) {
        *err = -EINVAL;
        return NULL;
    }
    size = (size + WEFT_CACHELINE - 1) & ~(size_t)(WEFT_CACHELINE - 1);
    weft_actor *a = weft__aligned_alloc(WEFT_CACHELINE, size);
    if (!a) {
        *err = -ENOMEM;
        return NULL;
    }
    memset(a, 0, sizeof(*a));
    a->magic = WEFT__ACTOR_MAGIC;
    atomic_init(&a->refs, refs);
    a->fn = o->fn;
    a->state = o->state;
    a->msg_size = (uint32_t)o->msg_size;
    a->reply_size = (uint32_t)o->reply_size;
    a->slot_size = (uint32_t)slot;
    a->cap = (uint32_t)cap;
    a->rt = rt;
    a->o = *o;
    a->downs_end = &a->downs;
    a->mons.buckets = &a->mons.one;
    a->mons.nbuckets = 1;
    a->buf = own ? (unsigned char *)a + head : a->msg_inline;
    a->ring = (unsigned char *)a + head + own;
    return a;
}

/* The exit's first half, the loop having ended: refuses every message
 * from now on, fails the asks still queued, waiting or being handled with
 * -ESRCH, drops the tells. True if WEFT_STOP_NOW stopped it. */
static bool actor_stopped(weft_actor *a)
{
    weft__chain tells, asks;
    weft__chain_init(&tells);
    weft__chain_init(&asks);
    weft__lock_acquire(&a->lock);
    bool now = a->life == WEFT__A_STOPPING;
    a->life = WEFT__A_STOPPED;
    a->scope = NULL; /* the task joins and frees it next */
    weft__ask *r = a->cur_ask;
    a->cur_ask = NULL;
    if (r && ask_end(r, -ESRCH))
        weft__chain_add(&asks, &r->w);
    for (; a->len; a->len--) {
        uintptr_t hdr;
        memcpy(&hdr, slot_at(a, a->head), sizeof hdr);
        a->head = a->head + 1 == a->cap ? 0 : a->head + 1;
        r = (weft__ask *)(hdr & ~(uintptr_t)1);
        if (r && ask_end(r, -ESRCH))
            weft__chain_add(&asks, &r->w);
    }
    senders_fail(a, &tells, &asks);
    weft__lock_release(&a->lock);
    weft__wake_chain(tells.head, -ESRCH);
    weft__wake_chain(asks.head, 0);
    return now;
}

static void monitor_fire(weft__monitor *m, weft_actor *target, int status);
static weft__monitor **mons_take(weft__monitors *ms, weft__monitor **list);

static void downs_free(weft__monitor *d)
{
    while (d) {
        weft__monitor *next = d->next;
        weft_actor_unref(d->target);
        free(d);
        d = next;
    }
}

/* The exit's second half: the status is final, the waiters woken, the
 * monitors fired. */
static void actor_exited(weft_actor *a, int status)
{
    weft__chain waiters;
    weft__chain_init(&waiters);
    weft__lock_acquire(&a->lock);
    a->life = WEFT__A_EXITED;
    a->status = status;
    weft__monitor *mons, *downs = a->downs;
    weft__monitor **table = mons_take(&a->mons, &mons);
    a->downs = NULL;
    a->downs_end = &a->downs;
    a->has_downs = false;
    weft__waiter *w;
    while ((w = weft__waitq_claim(&a->exitq)) != NULL)
        weft__chain_add(&waiters, w);
    weft__lock_release(&a->lock);
    weft__wake_chain(waiters.head, 0);
    free(table);
    downs_free(downs);
    while (mons) { /* in the order they were made */
        weft__monitor *next = mons->next;
        monitor_fire(mons, a, status);
        mons = next;
    }
}

/* Handles one message (kind, in buf) or DOWN (d); returns the
 * behaviour's result. */
static inline int handle(weft_actor *a, weft_actor_msg *m, int kind)
{
    m->kind = kind;
    m->data = a->buf;
    a->replied = false;
    return a->fn(a->state, m);
}

static int handle_down(weft_actor *a, weft_actor_msg *m, weft__monitor *d)
{
    m->kind = WEFT_MSG_DOWN;
    m->data = NULL;
    m->down = d->target;
    m->down_status = d->status;
    m->monitor = d->id;
    int rc = a->fn(a->state, m);
    m->down = NULL;
    m->down_status = 0;
    m->monitor = 0;
    weft_actor_unref(d->target);
    free(d);
    return rc;
}

/* The behaviour's result as the loop reads it: 0 goes on, anything else
 * ends the loop with that exit status. */
static inline int verdict(int rc)
{
    if (WEFT_LIKELY(rc == 0))
        return 0;
    return rc == WEFT_ACTOR_STOP ? 1 : rc < 0 ? rc : 0;
}

/* Under the lock, a DOWN pending: hands it to the behaviour, the lock
 * released meanwhile (and *woken finished first). Returns its verdict,
 * the lock held again. */
static int serve_down(weft_actor *a, weft_actor_msg *m, weft__waiter **woken)
{
    weft__monitor *d = a->downs;
    a->downs = d->next;
    if (!a->downs) {
        a->downs_end = &a->downs;
        a->has_downs = false;
    }
    weft__lock_release(&a->lock);
    weft__wake_chain(*woken, 0);
    *woken = NULL;
    int rc = verdict(handle_down(a, m, d));
    weft__lock_acquire(&a->lock);
    return rc;
}

/* Under the lock, the ring not empty: moves its oldest message into buf,
 * and the first waiting sender's into the ring (a tell's waiter joins
 * *woken, to wake); then releases the lock. Returns the message's kind. */
static int ring_take(weft_actor *a, weft__waiter **woken)
{
    unsigned char *p = slot_at(a, a->head);
    uintptr_t hdr;
    memcpy(&hdr, p, sizeof hdr);
    weft__copy_small(a->buf, p + HDR, a->msg_size);
    a->head = a->head + 1 == a->cap ? 0 : a->head + 1;
    a->len--;
    weft__ask *r = (weft__ask *)(hdr & ~(uintptr_t)1);
    a->cur_ask = r;
    if (r)
        r->where = ASK_CURRENT;
    if (WEFT_UNLIKELY(a->sendq.head != NULL)) {
        weft__waiter *s = sender_in(a);
        if (s) {
            s->next = *woken;
            *woken = s;
        }
    }
    weft__lock_release(&a->lock);
    return (int)(hdr & 1);
}

/* Under the lock, the mailbox empty: waits in the actor's `idle` slot
 * (finishing *woken once unlocked) until a sender hands a message over
 * (0: buf, cur_kind and cur_ask are set, the lock released), or a stop or
 * a DOWN says to look again (1), or a cancel: then the lock is held again
 * on return. */
static int mailbox_wait(weft_actor *a, weft__waiter **woken)
{
    /* a->mw: the actor task's own (actor_main), claimed by
     * weft__slot_claim alone. Between two messages only this loop is on
     * the actor's stack: it may move to where its messages come from
     * (sched.c, "moves"), unless pinned. */
    weft_task *t = a->mw.task;
    t->mobile |= a->idle_mobile;
    int code = weft__wait(&a->mw, &(weft__wait_spec){.kind = &weft__wk_mailbox,
                                                     .obj = a,
                                                     .lock = &a->lock,
                                                     .slot = &a->idle,
                                                     .deadline = WEFT_NEVER,
                                                     .flags = WEFT__WAIT_OWN,
                                                     .woken = *woken});
    t->mobile &= (uint8_t)~WEFT__MOBILE_IDLE;
    *woken = NULL;
    if (WEFT_UNLIKELY(code != 0))
        weft__lock_acquire(&a->lock);
    return code;
}

/* Under the lock: the behaviour returned without replying to the current
 * ask, which ends with -ENOMSG. Returns its waiter to wake, or NULL. */
static weft__waiter *ask_unanswered(weft_actor *a)
{
    weft__ask *r = a->cur_ask;
    a->cur_ask = NULL;
    if (!ask_end(r, -ENOMSG))
        return NULL;
    r->w.next = NULL;
    return &r->w;
}

/* The message loop; returns the exit status. Not inlined into the
 * actor's task: its frame then holds the loop's few locals alone, not
 * actor_main's, and a message touches two lines fewer of the actor's
 * stack (bench/ring: 9.3 to 7.3 lines a hop in all, and 0.96x the time). */
static __attribute__((noinline)) int serve(weft_actor *a)
{
    weft_actor_msg m = {.priv_ = a};
    weft__waiter *woken = NULL; /* waiters to wake once unlocked */
    int rc = 0;
    weft__lock_acquire(&a->lock);
    weft_scope *sc = a->scope; /* set before the loop, cleared after it */
    for (;;) {
        /* The lock is held. */
        if (WEFT_UNLIKELY(a->life == WEFT__A_STOPPING ||
                          weft__scope_is_cancelled(sc))) {
            rc = -ECANCELED;
            break;
        }
        int kind;
        if (WEFT_UNLIKELY(a->has_downs)) {
            if ((rc = serve_down(a, &m, &woken)) != 0)
                break;
            continue;
        }
        if (a->len) {
            /* A message without a wait: it takes from the task's budget,
             * as a receive does, so that a flooded actor lets its
             * worker's other tasks run. */
            if (weft__budget_take(weft__tl_worker)) {
                weft__lock_release(&a->lock);
                weft__wake_chain(woken, 0); /* none kept across the yield */
                woken = NULL;
                weft__budget_spent(weft__tl_worker);
                weft__lock_acquire(&a->lock);
                continue; /* all looked at again */
            }
            kind = ring_take(a, &woken);
        } else if (a->life == WEFT__A_DRAINING) {
            rc = 0;
            break;
        } else {
            if (mailbox_wait(a, &woken) != 0)
                continue;
            kind = a->cur_kind; /* handed over: buf, cur_ask */
        }
        weft__wake_chain(woken, 0);
        woken = NULL;
        rc = verdict(handle(a, &m, kind));
        weft__lock_acquire(&a->lock);
        if (WEFT_UNLIKELY(a->cur_ask != NULL)) {
            if (rc) /* stopped or failed: the exit fails it (-ESRCH) */
                break;
            woken = ask_unanswered(a); /* woken is empty: finished above */
        }
        if (rc)
            break;
    }
    weft__lock_release(&a->lock);
    weft__wake_chain(woken, 0);
    return rc == 1 ? 0 : rc;
}

/* Runs the actor a on the calling task, which holds one of its
 * references (dropped here): start, messages, exit. Returns the exit
 * status; *now says whether WEFT_STOP_NOW stopped it. */
static int actor_main(weft_actor *a, void (*started)(void *, weft_actor *),
                      void *ctx, bool *now)
{
    weft_worker *wk = weft__tl_worker;
    weft_task *t = weft__wpub(wk)->cur;
    weft_actor *outer =
        weft__actor_of_task(t)->actor; /* an actor's behaviour may run one */
    weft__actor_of_task(t)->actor = a;
    weft_scope *sc = NULL;
    int status = a->start_rc;
    if (status == 0 && (status = weft__scope_open_at(&a->sc, NULL)) == 0) {
        sc = &a->sc;
        sc->task_scope = true; /* hidden from the behaviour's code */
        weft__lock_acquire(&a->lock);
        a->task = t;
        weft__waiter_own(&a->mw, t);
        a->scope = sc;
        if (a->life == WEFT__A_STOPPING)
            status = -ECANCELED;
        weft__lock_release(&a->lock);
    }
    if (status == 0 && a->run_name)
        status = weft_register(a->o.register_as, a);
    if (status == 0 && a->o.on_start) {
        int rc = a->o.on_start(a->state);
        if (rc < 0)
            status = rc;
    }
    bool began = status == 0;
    if (began) {
        if (started)
            started(ctx, a);
        status = serve(a);
    }
    *now = actor_stopped(a);
    if (sc) {
        weft__scope_join_above(t, sc); /* scopes the behaviour left open */
        weft_scope_join(sc);           /* no child: closes it at once */
        weft_scope_free(sc);
    }
    if (began && a->o.on_stop)
        a->o.on_stop(a->state, status);
    weft__registry_drop(a);
    actor_exited(a, status);
    weft__actor_of_task(t)->actor = outer;
    weft_actor_unref(a);
    return status;
}

/* Checks o and the caller (a task), and makes the actor with `refs`
 * references; NULL with *err set (-EINVAL, -EPERM, -ENOMEM). */
static weft_actor *actor_make(const weft_actor_opts *o, long refs, int *err)
{
    *err = weft__actor_opts_check(o);
    if (*err)
        return NULL;
    weft_worker *wk = weft__tl_worker;
    if (!wk || !weft__wpub(wk)->cur) {
        *err = -EPERM;
        return NULL;
    }
    actor_select_install();
    return actor_new(o, weft__wpub(wk)->rt, refs, err);
}

static int actor_task(void *arg)
{
    bool now;
    int status = actor_main(arg, NULL, NULL, &now);
    /* A stop's -ECANCELED is the stopper's choice, not a failure for the
     * scope's policy to act on (a task handle's cancel is the same). */
    if (now && status == -ECANCELED)
        weft__current()->flags |= TASK_WITHDRAWN;
    return status;
}

int weft__actor_run_with(const weft_actor_opts *o,
                         void (*started)(void *ctx, weft_actor *a), void *ctx)
{
    int rc;
    weft_actor *a = actor_make(o, 1, &rc);
    if (!a)
        return rc;
    a->run_name = o->register_as != NULL; /* registered at the start */
    bool now;
    return actor_main(a, started, ctx, &now);
}

int weft_actor_run(const weft_actor_opts *o)
{
    return weft__actor_run_with(o, NULL, NULL);
}

int weft_actor_spawn(weft_scope *s, const weft_actor_opts *o, weft_actor **out)
{
    if (!out)
        return -EINVAL;
    *out = NULL;
    int rc;
    weft_actor *a = actor_make(o, 2, &rc);
    if (!a)
        return rc;
    /* The name is taken now, so that it is there when spawn returns; a
     * name already taken fails the actor at its start (-EEXIST). */
    if (o->register_as) {
        rc = weft_register(o->register_as, a);
        if (rc == -EINVAL) {
            free(a);
            return rc;
        }
        a->start_rc = rc;
    }
    if (WEFT__CAN_MOVE && !o->worker)
        a->idle_mobile = WEFT__MOBILE_IDLE | WEFT__MOBILE_EVER;
    weft_spawn_opts so = {.name = o->name, .worker = o->worker};
    rc = weft__spawn(s, actor_task, a, &so, __FILE__, __LINE__);
    if (rc < 0) {
        weft__lock_acquire(&a->lock);
        a->life = WEFT__A_EXITED;
        weft__lock_release(&a->lock);
        weft__registry_drop(a);
        free(a);
        return rc;
    }
    *out = a;
    return 0;
}

weft_actor *weft_actor_self(void)
{
    weft_task *t = weft__current();
    return t ? weft__actor_of_task(t)->actor : NULL;
}

/* ---- tell and ask ---- */

/* Before a tell's lock: asks the cache for the lines that handing a
 * message to an idle actor touches after the lock's, the actor's second
 * line (its idle waiter, cur_kind, a small message's bytes) and its
 * task's park word. Their misses then overlap the lock line's instead of
 * following it one after the other (the claim reads the waiter, then the
 * park word through it): in a ring of 1,000 actors every message finds
 * these lines cold (bench/ring 0.92x a hop). Not in an ask, whose actor is
 * usually warm, asked again and again (bench/ask and ask2: 1.03x). */
static inline void mailbox_prefetch(weft_actor *a)
{
    __builtin_prefetch(&a->mw, 1, 3);
    weft_task *t = weft__waiter_task_hint(&a->mw);
    if (t)
        weft__task_prefetch_park(t);
}

/* A tell's wait for room in a full mailbox, a's lock held: 0 once moved
 * in, -ESRCH if the actor refused it, or -ETIMEDOUT / -ECANCELED off the
 * queue with nothing queued. A function of its own, so that a tell that
 * needs no wait runs without its frame (the waiter and the wait's spec:
 * bench/ring's handler, with the tell inlined, had a frame of 192 bytes,
 * 24 without): every stack line a tell touches is one more that a ring
 * of actors brings in at each message. */
static __attribute__((noinline)) int tell_wait(weft_actor *a, const void *msg,
                                               int64_t deadline)
{
    weft__waiter self;
    weft__waiter_init(&self, (void *)msg, 0);
    return weft__wait(&self, &(weft__wait_spec){.kind = &weft__wk_tell,
                                                .obj = a,
                                                .lock = &a->lock,
                                                .q = &a->sendq,
                                                .deadline = deadline});
}

/* A tell; waits for room unless wait is false (-EAGAIN instead). */
static inline int tell(weft_actor *a, const void *msg, int64_t deadline,
                       bool wait)
{
    if (WEFT_UNLIKELY(!actor_ok(a) || !msg))
        return -EINVAL;
    mailbox_prefetch(a);
    if (wait) {
        int rc = weft__checkpoint();
        if (WEFT_UNLIKELY(rc))
            return rc;
    }
    weft__lock_acquire(&a->lock);
    if (WEFT_UNLIKELY(a->life != WEFT__A_RUNNING)) {
        weft__lock_release(&a->lock);
        return -ESRCH;
    }
    weft_task *t = claim_actor(a);
    if (t) { /* parked, empty: straight in */
        weft__copy_small(a->buf, msg, a->msg_size);
        a->cur_kind = WEFT_MSG_TELL;
        a->cur_ask = NULL;
        weft__lock_release(&a->lock);
        weft__wake_finish(t, 0);
        return 0;
    }
    if (a->len < a->cap) {
        ring_push(a, msg, 0);
        weft__lock_release(&a->lock);
        return 0;
    }
    if (!wait) {
        weft__lock_release(&a->lock);
        return -EAGAIN;
    }
    int rc = tell_wait(a, msg, deadline);
    /* Not a tail call: the wait returns into the public call, the frame
     * the dump names. A compiler barrier, no instruction. */
    atomic_signal_fence(memory_order_seq_cst);
    return rc;
}

int weft_actor_tell(weft_actor *a, const void *msg, weft_time deadline)
{
    return tell(a, msg, deadline, true);
}

int weft_actor_try_tell(weft_actor *a, const void *msg)
{
    return tell(a, msg, WEFT_NEVER, false);
}

/* The ask's publish step (the actor a's lock held, the asker's waiter w
 * armed: a reply from another worker finds it): puts the message
 * (w->elem) where the actor finds it, straight into an idle actor (whose
 * waiter is returned, claimed, to wake), into the ring, or on sendq with
 * w. */
static weft__waiter *ask_publish(weft__waiter *w, void *a_)
{
    weft_actor *a = a_;
    weft__ask *r = ask_of(w);
    weft__waiter *idle = weft__slot_claim(&a->idle);
    if (idle) { /* parked, empty: straight in */
        weft__copy_small(a->buf, w->elem, a->msg_size);
        a->cur_kind = WEFT_MSG_ASK;
        a->cur_ask = r;
        r->where = ASK_CURRENT;
    } else if (a->len < a->cap) {
        r->slot = ring_push(a, w->elem, (uintptr_t)r | 1);
        r->where = ASK_SLOT;
    } else {
        r->where = ASK_SENDQ;
        weft__waitq_push(&a->sendq, w);
    }
    return idle;
}

/* The ask's withdraw step, under the actor's lock: an asker that gave up
 * (its park ended by a deadline or a cancel, so nobody claimed it); the
 * actor lets go of its record. */
WEFT_COLD static void ask_withdraw(weft__waiter *w, void *a_)
{
    weft_actor *a = a_;
    weft__ask *r = ask_of(w);
    switch (r->where) {
    case ASK_SENDQ:
        weft__waitq_remove(&a->sendq, w);
        break;
    case ASK_SLOT: {
        uintptr_t bare = 1; /* still an ask, with nobody to reply to */
        memcpy(slot_at(a, r->slot), &bare, sizeof bare);
        break;
    }
    case ASK_CURRENT:
        a->cur_ask = NULL;
        break;
    default: /* DONE: the actor let go already */
        break;
    }
}

int weft_actor_ask(weft_actor *a, const void *msg, void *reply,
                   weft_time deadline)
{
    if (WEFT_UNLIKELY(!actor_ok(a) || !msg))
        return -EINVAL;
    weft_worker *wk = weft__tl_worker;
    weft_task *t = wk ? weft__wpub(wk)->cur : NULL;
    if (WEFT_UNLIKELY(!t))
        return -EPERM;
    if (WEFT_UNLIKELY(weft__actor_of_task(t)->actor == a))
        return -EDEADLK;
    if (WEFT_UNLIKELY(weft__task_cancelled(t)))
        return -ECANCELED;
    weft__ask r;
    r.reply = reply;
    r.status = 0;
    r.w.n = 1; /* an ask (a tell's waiter has 0); claimed by ask_end */
    r.w.elem = (void *)msg;
    weft__lock_acquire(&a->lock);
    if (WEFT_UNLIKELY(a->life != WEFT__A_RUNNING)) {
        weft__lock_release(&a->lock);
        return -ESRCH;
    }
    /* One park from here to the reply (ask_publish). */
    int rc = weft__wait(&r.w, &(weft__wait_spec){.kind = &weft__wk_ask,
                                                 .obj = a,
                                                 .lock = &a->lock,
                                                 .deadline = deadline,
                                                 .publish = ask_publish,
                                                 .withdraw = ask_withdraw,
                                                 .ctx = a});
    if (WEFT_UNLIKELY(weft__wait_unclaimed(rc)))
        return rc;
    return r.status;
}

/* The reply to the current ask of the actor m belongs to: reply bytes,
 * or status < 0. */
static int reply(weft_actor_msg *m, const void *data, int status)
{
    if (!m || m->kind != WEFT_MSG_ASK || !actor_ok(m->priv_))
        return -EINVAL;
    weft_actor *a = m->priv_;
    if (status == 0 && !data && a->reply_size)
        return -EINVAL;
    if (a->replied)
        return -EALREADY;
    a->replied = true;
    weft__lock_acquire(&a->lock);
    weft__ask *r = a->cur_ask;
    a->cur_ask = NULL;
    if (r && ask_end(r, status)) {
        if (data && r->reply && a->reply_size)
            weft__copy_small(r->reply, data, a->reply_size);
    } else {
        r = NULL; /* nobody waits: dropped */
    }
    weft__lock_release(&a->lock);
    if (r)
        weft__wake_finish(r->w.task, 0);
    return 0;
}

int weft_actor_reply(weft_actor_msg *m, const void *data)
{
    return reply(m, data, 0);
}

int weft_actor_reply_error(weft_actor_msg *m, int err)
{
    if (err >= 0)
        return -EINVAL;
    return reply(m, NULL, err);
}

/* ---- stop, wait, queued ---- */

int weft_actor_stop(weft_actor *a, int how)
{
    if (!actor_ok(a) || (how != WEFT_STOP_DRAIN && how != WEFT_STOP_NOW))
        return -EINVAL;
    weft__chain tells, asks;
    weft__chain_init(&tells);
    weft__chain_init(&asks);
    weft_task *look = NULL;
    weft__lock_acquire(&a->lock);
    if (a->life == WEFT__A_EXITED) {
        weft__lock_release(&a->lock);
        return -ESRCH;
    }
    if (a->life < WEFT__A_STOPPING) {
        if (a->life == WEFT__A_RUNNING)
            senders_fail(a, &tells, &asks); /* not queued: refused */
        if (how == WEFT_STOP_NOW) {
            a->life = WEFT__A_STOPPING;
            /* Wakes the actor from its mailbox or the behaviour from
             * whatever it blocks in (the scope is the actor's until its
             * loop ends, which clears it under this lock). */
            if (a->scope)
                weft__scope_cancel(a->scope, CANCEL_USER);
        } else if (a->life == WEFT__A_RUNNING) {
            a->life = WEFT__A_DRAINING;
            look = claim_actor(a); /* idle: to see it must go */
        }
    }
    weft__lock_release(&a->lock);
    weft__wake_chain(tells.head, -ESRCH);
    weft__wake_chain(asks.head, 0);
    if (look)
        weft__wake_finish(look, 1);
    return 0;
}

int weft_actor_join(weft_actor *a, int *status)
{
    return weft_actor_join_until(a, status, WEFT_NEVER);
}

int weft_actor_join_until(weft_actor *a, int *status, weft_time deadline)
{
    if (!actor_ok(a))
        return -EINVAL;
    weft_task *t = weft__current();
    if (!t)
        return -EPERM;
    if (weft__actor_of_task(t)->actor == a)
        return -EDEADLK;
    for (;;) {
        int rc = weft__checkpoint();
        if (rc)
            return rc;
        weft__lock_acquire(&a->lock);
        if (a->life == WEFT__A_EXITED) {
            if (status)
                *status = a->status;
            weft__lock_release(&a->lock);
            return 0;
        }
        weft__waiter w;
        weft__waiter_init(&w, NULL, 0);
        rc = weft__wait(&w, &(weft__wait_spec){.kind = &weft__wk_actor,
                                               .obj = a,
                                               .lock = &a->lock,
                                               .q = &a->exitq,
                                               .deadline = deadline});
        if (rc)
            return rc;
    }
}

size_t weft_actor_queued(const weft_actor *a)
{
    if (!actor_ok(a))
        return 0;
    weft_actor *m = (weft_actor *)a;
    weft__lock_acquire(&m->lock);
    size_t n = m->len;
    weft__lock_release(&m->lock);
    return n;
}

/* ---- monitors ---- */

/* Hands a fired DOWN to its watcher (or drops it if the watcher has
 * stopped), or resolves its future; takes m. target is alive (its task,
 * or the caller, holds a reference). */
static void monitor_fire(weft__monitor *m, weft_actor *target, int status)
{
    if (m->fut) {
        weft_future_resolve(m->fut, &status);
        weft_future_unref(m->fut);
        free(m);
        return;
    }
    weft_actor *w = m->watcher;
    m->target = weft_actor_ref(target);
    m->status = status;
    m->next = NULL;
    weft_task *look = NULL;
    weft__lock_acquire(&w->lock);
    bool taken = w->life < WEFT__A_STOPPED;
    if (taken) {
        *w->downs_end = m;
        w->downs_end = &m->next;
        w->has_downs = true;
        look = claim_actor(w);
    }
    weft__lock_release(&w->lock);
    if (look)
        weft__wake_finish(look, 1);
    if (!taken) {
        weft_actor_unref(m->target);
        free(m);
    }
    weft_actor_unref(w);
}

/* ---- an actor's monitors: a list in the order made, a table by id ---- */

#define MONS_MIN 8 /* the smallest table allocated */

static inline size_t mons_bucket(const weft__monitors *ms, long id)
{
    /* Fibonacci hashing, the product's top bits: ids come from one counter
     * for all actors, so one actor's may be consecutive or spaced by any
     * stride, and these bits spread both evenly. */
    if (ms->nbuckets == 1)
        return 0;
    uint64_t h = (uint64_t)id * 0x9e3779b97f4a7c15ull;
    return (size_t)(h >> (64 - __builtin_ctzll(ms->nbuckets)));
}

/* Appends m (lock held). */
static void mons_link(weft__monitors *ms, weft__monitor *m)
{
    m->next = NULL;
    m->prev = ms->tail;
    if (ms->tail)
        ms->tail->next = m;
    else
        ms->head = m;
    ms->tail = m;
    weft__monitor **b = &ms->buckets[mons_bucket(ms, m->id)];
    m->hnext = *b;
    *b = m;
    ms->count++;
}

/* Finds the record of id and unlinks it (lock held); NULL if none. */
static weft__monitor *mons_unlink(weft__monitors *ms, long id)
{
    weft__monitor **p = &ms->buckets[mons_bucket(ms, id)];
    for (; *p; p = &(*p)->hnext) {
        ms->probes++;
        if ((*p)->id == id)
            break;
    }
    weft__monitor *m = *p;
    if (!m)
        return NULL;
    *p = m->hnext;
    if (m->prev)
        m->prev->next = m->next;
    else
        ms->head = m->next;
    if (m->next)
        m->next->prev = m->prev;
    else
        ms->tail = m->prev;
    ms->count--;
    return m;
}

/* Empties ms (lock held): *list gets every record, oldest first, linked
 * by next; returns the table to free after unlocking (NULL: inline). */
static weft__monitor **mons_take(weft__monitors *ms, weft__monitor **list)
{
    weft__monitor **table = ms->buckets == &ms->one ? NULL : ms->buckets;
    *list = ms->head;
    ms->head = ms->tail = NULL;
    ms->one = NULL;
    ms->buckets = &ms->one;
    ms->nbuckets = 1;
    ms->count = 0;
    return table;
}

/* The table size that suits ms's count, or 0 if its own does: up to 2
 * records a chain, at least one in 8 buckets used once it has grown. */
static size_t mons_want(const weft__monitors *ms)
{
    if (ms->count >= 2 * ms->nbuckets)
        return ms->nbuckets < MONS_MIN ? MONS_MIN : 2 * ms->nbuckets;
    if (ms->nbuckets > MONS_MIN && ms->count < ms->nbuckets / 8)
        return ms->nbuckets / 2;
    return 0;
}

/* Gives a's monitors a table of `want` buckets, allocated without the
 * lock, unless their count has moved on meanwhile (another call resized
 * it, or the exit took them). Without memory the table stays as it is:
 * longer chains, or more buckets than needed, never a record lost. The
 * rehash is O(count) under the lock, once per doubling or halving, so
 * O(1) a call amortised. */
static void mons_resize(weft_actor *a, size_t want)
{
    weft__monitor **b = weft__calloc(want, sizeof(*b));
    if (!b)
        return;
    weft__monitors *ms = &a->mons;
    weft__monitor **old = NULL;
    weft__lock_acquire(&a->lock);
    if (mons_want(ms) == want) {
        old = ms->buckets == &ms->one ? NULL : ms->buckets;
        ms->one = NULL;
        ms->buckets = b;
        ms->nbuckets = want;
        for (weft__monitor *m = ms->head; m; m = m->next) {
            weft__monitor **h = &b[mons_bucket(ms, m->id)];
            m->hnext = *h;
            *h = m;
        }
        b = NULL;
    }
    weft__lock_release(&a->lock);
    free(b);
    free(old);
}

/* A new monitor id: process-wide, > 0 (after LONG_MAX of them it starts
 * again at 1). */
static inline long monitor_id(void)
{
    unsigned long n = (unsigned long)add_rlx(&monitor_ids, 1) + 1;
    long id = (long)(n & (unsigned long)LONG_MAX);
    return id ? id : 1;
}

/* Puts m on target's monitors, or fires it now if target has exited;
 * returns its id. */
static long monitor_add(weft_actor *target, weft__monitor *m)
{
    long id = m->id = monitor_id();
    weft__lock_acquire(&target->lock);
    bool gone = target->life == WEFT__A_EXITED;
    int status = target->status;
    size_t want = 0;
    if (!gone) {
        mons_link(&target->mons, m);
        want = mons_want(&target->mons);
    }
    weft__lock_release(&target->lock);
    if (gone)
        monitor_fire(m, target, status);
    else if (WEFT_UNLIKELY(want))
        mons_resize(target, want);
    return id;
}

long weft_actor_monitor(weft_actor *target, weft_actor *watcher)
{
    if (!actor_ok(target) || !actor_ok(watcher))
        return -EINVAL;
    weft__lock_acquire(&watcher->lock);
    bool gone = watcher->life >= WEFT__A_STOPPED;
    weft__lock_release(&watcher->lock);
    if (gone)
        return -ESRCH;
    weft__monitor *m = weft__calloc(1, sizeof(*m));
    if (!m)
        return -ENOMEM;
    m->watcher = weft_actor_ref(watcher);
    return monitor_add(target, m);
}

int weft_actor_monitor_future(weft_actor *target, weft_future **out)
{
    if (!actor_ok(target) || !out)
        return -EINVAL;
    weft__monitor *m = weft__calloc(1, sizeof(*m));
    if (!m)
        return -ENOMEM;
    weft_future *f;
    int rc = weft_future_new(&f, sizeof(int));
    if (rc) {
        free(m);
        return rc;
    }
    m->fut = weft_future_ref(f);
    *out = f;
    monitor_add(target, m);
    return 0;
}

int weft_actor_demonitor(weft_actor *target, long monitor)
{
    if (!actor_ok(target) || monitor <= 0)
        return -EINVAL;
    weft__lock_acquire(&target->lock);
    weft__monitor *m = mons_unlink(&target->mons, monitor);
    size_t want = m ? mons_want(&target->mons) : 0;
    weft__lock_release(&target->lock);
    if (!m)
        return -ENOENT;
    if (WEFT_UNLIKELY(want))
        mons_resize(target, want);
    if (m->fut)
        weft_future_unref(m->fut);
    else
        weft_actor_unref(m->watcher);
    free(m);
    return 0;
}

/* ---- select's cases ----
 * ACTOR_JOIN and TELL (wait/many.h, "select's cases"; select sits below this
 * layer, so the actor installs their rows when it makes its first actor).
 * ACTOR_JOIN waits on exitq as weft_actor_join_until does. TELL is tell()
 * under the lock: straight into a parked actor (the select's own arm
 * carries the actor's wake, finished once select unlocks), or to the
 * ring's back, or a waiter on sendq (n = 0: a tell) that sender_in
 * claims before it moves the message in, so a select that another case
 * won told nothing. */

static int exit_case_check(const weft_case *c)
{
    if (!c->actor)
        return 1;
    if (!actor_ok(c->actor))
        return -EINVAL;
    weft_task *t = weft__current();
    if (!t)
        return -EPERM;
    return weft__actor_of_task(t)->actor == c->actor ? -EDEADLK : 0;
}

static weft__lock *actor_case_lock(weft_case *c)
{
    return &c->actor->lock;
}

static int exit_case_try(weft_case *c, weft__arm *arm, weft__chain *woken)
{
    WEFT_UNUSED(woken);
    weft_actor *a = c->actor;
    if (a->life == WEFT__A_EXITED) {
        if (c->elem)
            *(int *)c->elem = a->status;
        c->rc = 0;
        return 0;
    }
    arm->q = &a->exitq;
    arm->w.elem = NULL;
    arm->w.n = 0;
    return -EAGAIN;
}

static void exit_case_won(weft_case *c, int code)
{
    WEFT_UNUSED(code);
    weft_actor *a = c->actor;
    weft__lock_acquire(&a->lock); /* claimed once the status was final */
    if (c->elem)
        *(int *)c->elem = a->status;
    weft__lock_release(&a->lock);
    c->rc = 0;
}

static int tell_case_check(const weft_case *c)
{
    if (!c->actor)
        return 1;
    return actor_ok(c->actor) && c->elem ? 0 : -EINVAL;
}

static int tell_case_try(weft_case *c, weft__arm *arm, weft__chain *woken)
{
    weft_actor *a = c->actor;
    if (a->life != WEFT__A_RUNNING) {
        c->rc = -ESRCH; /* refused at once, as tell() */
        return 0;
    }
    weft__waiter *idle = weft__slot_claim(&a->idle);
    if (idle) { /* parked, empty: straight in */
        weft__copy_small(a->buf, c->elem, a->msg_size);
        a->cur_kind = WEFT_MSG_TELL;
        a->cur_ask = NULL;
        weft__chain_add(woken, idle); /* woken with 0 once select unlocks */
        c->rc = 0;
        return 0;
    }
    if (a->len < a->cap) {
        ring_push(a, c->elem, 0);
        c->rc = 0;
        return 0;
    }
    arm->q = &a->sendq;
    arm->w.elem = c->elem;
    arm->w.n = 0; /* a tell */
    return -EAGAIN;
}

static void tell_case_won(weft_case *c, int code)
{
    c->rc = code; /* 0: moved in; -ESRCH: refused */
}

static const weft__case_ops exit_case = {exit_case_check,
                                         actor_case_lock,
                                         exit_case_try,
                                         exit_case_won,
                                         NULL,
                                         NULL,
                                         NULL};
static const weft__case_ops tell_case = {tell_case_check,
                                         actor_case_lock,
                                         tell_case_try,
                                         tell_case_won,
                                         NULL,
                                         NULL,
                                         NULL};

static void actor_select_install(void)
{
    weft__select_install(WEFT_OP_ACTOR_JOIN, &exit_case);
    weft__select_install(WEFT_OP_TELL, &tell_case);
}
