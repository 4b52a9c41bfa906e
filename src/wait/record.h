/* SPDX-License-Identifier: MIT */
/*
 * The wait layer's record of what a parked task waits on, and the kinds
 * it names: for the wait entries, which write it (wait/wait.h), for the
 * layers that define kinds and the tracer, which name them, and for the
 * readers of records (wait/seen.h).
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

#if !defined(WEFT_UCONTEXT)
/* Where the record starts in a task, whose struct is cache-line-aligned
 * (ucontext's context is too large to care). */
#define WEFT__WAIT_AT (offsetof(struct weft_task, ext) + WEFT__EXT_WAIT)
/* What every park writes (kind, object, name, instant: the fields before
 * wait_until) shares one cache line of a task. */
_Static_assert(WEFT__WAIT_AT % WEFT_CACHELINE +
                       offsetof(struct weft__wait_rec, wait_until) <=
                   WEFT_CACHELINE,
               "the wait record's hot part straddles two cache lines");
/* And the task's fields a park reads besides (its cancel pointer, at the
 * checkpoint; mobile, which an actor's wait writes twice) are on it too. */
_Static_assert(offsetof(struct weft_task, cancel) / WEFT_CACHELINE ==
                       WEFT__WAIT_AT / WEFT_CACHELINE &&
                   offsetof(struct weft_task, mobile) / WEFT_CACHELINE ==
                       WEFT__WAIT_AT / WEFT_CACHELINE,
               "a task's cancel pointer or mobile left the wait record's line");
#undef WEFT__WAIT_AT
#endif

/* t's wait record. Any thread that keeps t alive. */
static inline struct weft__wait_rec *weft__wait_rec(weft_task *t)
{
    WEFT_ASSERT(t != NULL);
    return (struct weft__wait_rec *)(void *)(t->ext + WEFT__EXT_WAIT);
}

#endif
