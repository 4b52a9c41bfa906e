/* SPDX-License-Identifier: MIT */
/*
 * A parked task's wait record (wait/record.h) as other threads read it:
 * for the task dump, the deadlock detector and the instrument's park
 * (weft__wait_of), which need nothing else of the wait layer.
 */
#ifndef WEFT_WAIT_SEEN_H
#define WEFT_WAIT_SEEN_H

#include "wait/record.h"

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

/* t's wait record (weft__wait_rec), to read. Any thread that keeps t
 * alive. */
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
