/* SPDX-License-Identifier: MIT */
/*
 * The wait layer's record of what a parked task waits on: for the wait
 * entries, which write it (wait/wait.h), and for its readers (the task
 * dump, the deadlock detector, the tracer, the instrument's park), which
 * need nothing else of the wait layer.
 *
 * What each parked task waits on is recorded in the task (kind, object,
 * name, park instant) for the task dump and the deadlock detector: plain
 * stores of values at hand, the instant being the time the worker's wheel
 * reached last. A kind is a descriptor (weft__wait_kind) that the layer
 * owning the primitive defines (sync.h's weft__wk_mutex, ...); this layer
 * defines only its own (sleep, select). Readers take the record through
 * weft__wait_record.
 */
#ifndef WEFT_WAIT_RECORD_H
#define WEFT_WAIT_RECORD_H

#include "sched/task.h"

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

#endif
