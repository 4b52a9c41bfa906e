/* SPDX-License-Identifier: MIT */
/*
 * The scope layer: structured concurrency (scope.c), result policies as
 * tables (policy.c), a task's spawn into its scope and its exit (spawn.c),
 * and task handles (task.c). A scope and a handle's record are opaque
 * here; scope/struct.h has them, for the files that look inside. The
 * layer's select cases are in scope/cases.h.
 */
#ifndef WEFT_SCOPE_H
#define WEFT_SCOPE_H

#include "sched/task.h"

typedef struct weft__handle weft__handle;

/* ---- scope.c ---- */

enum {
    CANCEL_NONE = 0,
    CANCEL_USER = 1,     /* weft_scope_cancel */
    CANCEL_DEADLINE = 2, /* the scope's deadline passed */
    CANCEL_POLICY = 3,   /* fail-fast error, or first-wins winner */
    CANCEL_PARENT = 4,   /* an enclosing scope was cancelled */
};

/* ---- the scope layer's part of a runtime (weft_runtime.ext) ---- */

struct weft__scope_rt {
    weft_scope *root; /* the root scope (runtime.c makes and frees it) */
    int root_status;  /* the root task's status (scope.c, at its exit) */
    pthread_mutex_t orphan_mu;
    weft_scope *orphans; /* auto-joined at their owner's exit, not freed */
};

_Static_assert(sizeof(struct weft__scope_rt) <= WEFT__RT_SYNC - WEFT__RT_SCOPE,
               "the scope layer's part fits in weft_runtime.ext");

static inline struct weft__scope_rt *weft__scope_rt(weft_runtime *rt)
{
    return (struct weft__scope_rt *)(void *)(weft__rtpub(rt)->ext +
                                             WEFT__RT_SCOPE);
}

/* ---- the scope layer's part of a task (weft_task.ext) ---- */

typedef struct weft__task_scope {
    weft_scope *home;          /* scope it was spawned into */
    _Atomic(weft_scope *) cur; /* innermost open scope (home if none);
                                * weft_task.cancel points at its cancel
                                * word (weft__task_set_scope) */
    weft_task *mprev, *mnext;  /* home's member list, under home's lock */
    weft__handle *handle;      /* its handle's record (task.c), or NULL:
                                * set at spawn, read at exit */
    int index;                 /* child index in home (WEFT_SERVE: 0;
                                * a background child: -1) */
} weft__task_scope;

_Static_assert(sizeof(weft__task_scope) <= WEFT__EXT_SYNC - WEFT__EXT_SCOPE,
               "the scope layer's part fits in weft_task.ext");

/* t's scope links. The task itself, or under its home's lock, or any
 * thread that keeps t alive for cur. */
static inline weft__task_scope *weft__scope_of_task(const weft_task *t)
{
    WEFT_ASSERT(t != NULL);
    return (weft__task_scope *)(uintptr_t)(t->ext + WEFT__EXT_SCOPE);
}

/* t's innermost open scope (its home if none). */
static inline weft_scope *weft__task_scope_cur(const weft_task *t)
{
    return ld_rlx(&weft__scope_of_task(t)->cur);
}

/* A new life of t (prepared, not registered): its handle's record h
 * (NULL: none). Before weft__scope_add_child, which sets the rest of t's
 * scope links. */
static inline void weft__scope_task_init(weft_task *t, weft__handle *h)
{
    WEFT_ASSERT_MSG(!(t->flags & TASK_STARTED),
                    "a task's scope links set up after it started");
    weft__scope_of_task(t)->handle = h; /* the rest: weft__scope_add_child */
}

int weft__scope_init_root(weft_runtime *rt, weft_scope *s);
/* Registers a new child in s; returns its index or an error. A task with
 * a handle gets the handle's scope, made a kid of s, as its current. A
 * background child (weft_spawn_opts.background) gets no index (-1 in its
 * links; 0 returned) and s's policy never sees its end. */
int weft__scope_add_child(weft_scope *s, weft_task *t, bool background);
/* The capacity of a statuses array after `cap` entries are full: 16, then
 * doubling, at most INT_MAX (indexes are ints). */
int weft__scope_status_cap(int cap);
/* Bytes the scope holds: the struct and its statuses array (tests). */
size_t weft__scope_footprint(const weft_scope *s);
/* At the exit of a task with a handle, once the scopes it left open inside
 * its handle's scope p are joined: closes p, leaving the home current. */
void weft__scope_close_task(weft_scope *p);
/* The child finished: records its status, wakes the joiner. */
void weft__scope_child_done(weft_scope *s, weft_task *t);
/* Joins the scopes the task opened above `keep` and left open (its own
 * scopes at its exit, with keep = t->home; or those a function run inside
 * a scope of the caller's left), innermost first, and leaves them to be
 * freed by any task or by weft_run. Afterwards keep is current. */
void weft__scope_join_above(weft_task *t, weft_scope *keep);
/* weft_scope_open for the calls that take a deadline argument, where it
 * is absolute with WEFT_NEVER for none, so 0 is an instant (the virtual
 * clock's start) where a scope's options read "none": it has come, and
 * the scope starts cancelled by its deadline, as one whose deadline is
 * past does. */
int weft__scope_open_until(weft_scope **s, weft_policy policy,
                           weft_time deadline);
/* weft_scope_open that also takes the internal policies (policy.h's
 * WEFT__POLICY_*, which weft_scope_open refuses), keeping ctx in the
 * scope for its user (scope->ctx). */
int weft__scope_open_internal(weft_scope **s, const weft_scope_opts *opts,
                              void *ctx);
/* weft_scope_open into memory of the caller's, which must stay until
 * weft_scope_free (which then frees nothing but what the scope holds) and
 * must not be left open at the opener's exit (no orphan): an actor's own
 * scope, in the actor, so that the cancel word its loop reads before every
 * message sits on a line the message touches anyway. Returns as
 * weft_scope_open; on an error the memory is left as it was. */
int weft__scope_open_at(weft_scope *at, const weft_scope_opts *opts);
/* Frees the orphans nobody freed, and the records of the runtime's task
 * handles nobody joined or released; at the end of the runtime. */
void weft__scope_free_orphans(weft_runtime *rt);
int weft__scope_cancel(weft_scope *s, int reason);

/* ---- task.c: task handles ---- */

/* A record for a new task of rt, or NULL (no memory). */
weft__handle *weft__handle_new(weft_runtime *rt);
/* The spawn failed: the record goes back unused. */
void weft__handle_abandon(weft__handle *h);
uint64_t weft__handle_id(const weft__handle *h);
/* At the exit of t, which has a handle: closes the handle's scope, stores
 * the status, wakes the joiners, frees the record if it was released. */
void weft__handle_exit(weft_task *t);
/* Frees the records of rt that are still live (their tasks have all
 * finished): their handles then read -ESRCH. */
void weft__handles_fini(weft_runtime *rt);

/* The wait kinds of this layer (wait/record.h): a scope's join (scope.c), a
 * task handle's (task.c). */
extern const struct weft__wait_kind weft__wk_scope, weft__wk_task;

/* ---- spawn.c: a task spawned into a scope, and its exit ---- */

int weft__spawn(weft_scope *s, weft_fn fn, void *arg, const weft_spawn_opts *o,
                const char *file, int line);
/* The scope layer's hooks, for weft_runtime.hooks. */
extern const struct weft__task_hooks weft__scope_hooks;

#endif
