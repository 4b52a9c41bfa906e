/* SPDX-License-Identifier: MIT */
/*
 * The actor layer's structs, for the files that look inside an actor:
 * the actor layer's own, and the task dump.
 */
#ifndef WEFT_ACTOR_STRUCT_H
#define WEFT_ACTOR_STRUCT_H

#include "actor/actor.h"
#include "scope/struct.h"
#include "wait/queue.h"

#include <stddef.h>

/* ---- the actor layer's part of a task (weft_task.ext) ---- */

typedef struct weft__task_actor {
    /* owner: the actor whose behaviour the task runs now (actor.c), or
     * NULL. Set around each run of a behaviour and put back after it, so
     * it is NULL between lives: a new task needs no reset. */
    struct weft_actor *actor;
} weft__task_actor;

_Static_assert(sizeof(weft__task_actor) <= WEFT__TASK_EXT - WEFT__EXT_ACTOR,
               "the actor layer's part fits in weft_task.ext");

static inline weft__task_actor *weft__actor_of_task(const weft_task *t)
{
    WEFT_ASSERT(t != NULL);
    return (weft__task_actor *)(uintptr_t)(t->ext + WEFT__EXT_ACTOR);
}

/* ---- actor.c ---- */

/* Where an actor is in its life (its lock guards it). */
enum {
    WEFT__A_RUNNING = 0,  /* takes messages */
    WEFT__A_DRAINING = 1, /* WEFT_STOP_DRAIN: refuses, handles what is queued */
    WEFT__A_STOPPING = 2, /* WEFT_STOP_NOW: refuses, its scope is cancelled */
    WEFT__A_STOPPED = 3,  /* its loop has ended: queued asks failed, on_stop
                           * and the names' release still to come */
    WEFT__A_EXITED = 4,   /* gone: status final, monitors fired */
};

#define WEFT__ACTOR_MAGIC 0x6163746fu /* "acto": while referenced */

struct weft__ask;
struct weft__monitor;
struct weft__name;

/* The monitors on one actor, under its lock. Each record is on a list in
 * the order made (the exit fires them in that order) and on a chain of a
 * hash table by id, which is how weft_actor_demonitor finds it without a
 * search: monitor and demonitor cost O(1) however many there are. The
 * table is only an index: one inline bucket to begin with, then doubled
 * or halved (allocated out of the lock) to keep at most 2 records a chain
 * on average, and any size, a failed allocation's included, still finds
 * every record. */
typedef struct weft__monitors {
    struct weft__monitor *head, *tail; /* oldest first (next, prev) */
    struct weft__monitor **buckets;    /* nbuckets chains (hnext), or &one */
    struct weft__monitor *one;         /* the bucket while nbuckets is 1 */
    size_t nbuckets;                   /* a power of two */
    size_t count;                      /* records on the list */
    /* Records demonitor compared with the ids it looked for, in all: a
     * test reads it to show that a call looks at one or two, however
     * many there are. */
    unsigned long probes;
} weft__monitors;

#define WEFT__ACTOR_MSG_INLINE 16

struct weft_actor {
    /* The lines a message touches, in the order of the struct's first two
     * cache lines (actor_new aligns it to one): a sender reads the first
     * and claims the idle waiter in the second, which also holds what it
     * hands over (cur_kind, cur_ask, and a message of up to
     * WEFT__ACTOR_MSG_INLINE bytes: buf points at msg_inline then); the
     * third has the rest of the waiter and the cancel word of the actor's
     * scope, which the loop reads before each message. */
    uint32_t magic;  /* WEFT__ACTOR_MAGIC while referenced */
    weft__lock lock; /* guards what is marked "lock" */
    /* immutable after the spawn */
    weft_actor_fn fn;
    void *state;
    uint32_t msg_size;
    uint32_t slot_size; /* a ring slot: 8 bytes of header, then the message */
    uint32_t cap;       /* ring slots */
    /* lock */
    uint8_t life; /* WEFT__A_* */
    /* the actor's task only */
    bool replied; /* the current ask has had its reply */
    /* lock */
    bool has_downs;     /* downs (below) is not empty: the loop looks here
                         * at every message, on a line it touches anyway */
    uint32_t head, len; /* the ring: oldest slot, messages */
    weft__waiter *idle; /* its waiter while it waits for a
                         * message (NULL: not waiting) */
    unsigned char *buf; /* the message being handled (msg_size bytes) */
    int cur_kind;       /* WEFT_MSG_* of the message in buf */
    /* weft_task.mobile bits while it waits for a message: an actor
     * spawned with worker 0 may move then (nothing but its loop is on its
     * stack); 0 for one pinned, or run by a task of the caller's.
     * Immutable after the spawn; here, on a line every message touches. */
    uint8_t idle_mobile;
    struct weft__ask *cur_ask; /* the asker of the message being handled
                                * (NULL: a tell, or the asker gave up) */
    /* buf, for a message this small: a tell into an idle actor then
     * writes no line but the two it has just touched */
    _Alignas(8) unsigned char msg_inline[WEFT__ACTOR_MSG_INLINE];
    /* That waiter (idle points here then), the actor task's alone: in the
     * actor, beside the fields a sender has just touched, so the sender's
     * claim reads no line of the actor's stack. */
    weft__waiter mw;
    /* The actor's own scope (weft__scope_open_at), opened by its task
     * before the loop and freed after it (which frees no memory): its
     * first field, the cancel word that the loop and every cancellation
     * point of the behaviour read, shares the waiter's last line (static
     * assert below); the rest of it is cold. */
    weft_scope sc;
    weft__waitq sendq;           /* tells and asks waiting for room */
    unsigned char *ring;         /* cap * slot_size bytes (immutable) */
    weft_scope *scope;           /* lock: &sc while the loop may run, which
                                  * WEFT_STOP_NOW cancels; NULL before and after */
    struct weft__monitor *downs; /* lock: fired at this watcher, unhandled */
    /* cold from here */
    atomic_long refs;                 /* the last unref frees */
    uint32_t reply_size;              /* immutable */
    int status;                       /* lock: the exit status, once EXITED */
    weft_runtime *rt;                 /* immutable */
    weft_task *task;                  /* lock: the actor's task, once it runs */
    weft__waitq exitq;                /* lock: weft_actor_join_until */
    struct weft__monitor **downs_end; /* lock: where the next DOWN goes */
    /* under the registry's lock: the names it holds */
    struct weft__name *names;
    /* immutable after the spawn, read at the start and the exit only */
    weft_actor_opts o; /* a copy: fn, state, the hooks */
    int start_rc;      /* a registration that failed at spawn */
    bool run_name;     /* weft_actor_run: registers at its start */
    /* lock, and last: cold, out of the way of the fields above */
    weft__monitors mons; /* on this actor, to fire at exit */
};

/* The lines the comment at the top of the struct names (a message's). */
#define WEFT__ACTOR_LINE(f) (offsetof(struct weft_actor, f) / WEFT_CACHELINE)
_Static_assert(WEFT__ACTOR_LINE(buf) == 0 && WEFT__ACTOR_LINE(idle) == 0 &&
                   WEFT__ACTOR_LINE(cur_ask) == 1 &&
                   WEFT__ACTOR_LINE(idle_mobile) == 1 &&
                   WEFT__ACTOR_LINE(mw.token) == 1 &&
                   WEFT__ACTOR_LINE(has_downs) == 0 &&
                   WEFT__ACTOR_LINE(sc.cancelled) == 2,
               "a message's fields of weft_actor have moved to other lines");
#undef WEFT__ACTOR_LINE

static inline bool weft__actor_ok(const weft_actor *a)
{
    return a && a->magic == WEFT__ACTOR_MAGIC;
}

#endif
