/* SPDX-License-Identifier: MIT */
/*
 * The scope layer: structured concurrency (scope.c), result policies as
 * tables (policy.c), a task's spawn into its scope and its exit (spawn.c),
 * and task handles (task.c).
 */
#ifndef WEFT_SCOPE_H
#define WEFT_SCOPE_H

#include "wait/wait.h"

/* ---- scope.c ---- */

/* The result policies, which struct weft_scope embeds. */
#include "scope/policy.h"

enum {
    CANCEL_NONE = 0,
    CANCEL_USER = 1,     /* weft_scope_cancel */
    CANCEL_DEADLINE = 2, /* the scope's deadline passed */
    CANCEL_POLICY = 3,   /* fail-fast error, or first-wins winner */
    CANCEL_PARENT = 4,   /* an enclosing scope was cancelled */
};

struct weft_scope {
    atomic_int cancelled; /* CANCEL_*, the first reason; read lock-free
                           * (the scheduler through weft_task.cancel) */
    weft__lock lock;
    /* pol->flags (below), at hand on the spawn and exit paths. */
    uint8_t pflags;
    bool joined;        /* join has completed: closed for spawns */
    bool shield;        /* enclosing cancellation stops here */
    bool orphaned;      /* joined at its owner's exit: anyone may free */
    bool task_scope;    /* a handle's scope around one task (task.c): the
                         * task's cur at first, hidden from its code; or
                         * an actor's (actor.c), which its stop cancels */
    weft_scope *parent; /* enclosing scope (NULL for the root) */
    weft_scope *kids;   /* scopes opened inside this one */
    weft_scope *sib_prev, *sib_next; /* in parent->kids, under parent's lock */
    weft_task *owner;          /* task that opened it (NULL for the root) */
    weft_task *members;        /* children still running */
    int spawned, live, failed; /* UNINDEXED: spawned, failed stop at INT_MAX */
    int capstatuses;
    weft__policy_state ps; /* what the policy keeps (winner, error) */
    int64_t *statuses; /* WEFT__POL_STATUSES: per child, INT64_MIN running */
    const weft__policy *pol; /* its policy's table (policy.h) */
    /* SERVE: where failures go (immutable after open; NULL: stderr), and
     * the stderr lines' rate limit: lines in the window that started at
     * log_window, and failures left out since the last line. */
    weft_failure_fn on_failure;
    void *failure_ctx;
    int64_t log_window;
    int log_lines;
    long long log_dropped;
    /* The owner's join (a firm waiter) or its select's scope case (a
     * plain one): claimed by the exit that leaves no child running. */
    weft__waitq done;
    weft__timer deadline_timer; /* on the owner's worker */
    int64_t deadline;
    bool is_root;
    /* An internal policy's user's context (weft__scope_open_internal): a
     * supervisor's scope holds its weft_sup. Immutable after open. */
    void *ctx;
    /* The task dump's place in this scope (observe layer, dump.c), under
     * the lock: the next member to show and the kid being shown. The dump
     * writes with no lock held and comes back here; a member or kid that
     * leaves meanwhile moves its cursor on (one compare on the way out).
     * Meaningless unless a dump is walking this scope. */
    weft_task *dump_task;
    weft_scope *dump_kid;
};

/* True if s is cancelled (its first reason is set). Any thread. */
static inline bool weft__scope_is_cancelled(const weft_scope *s)
{
    return ld_sc(&s->cancelled) != CANCEL_NONE;
}

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
    weft_scope *home;            /* scope it was spawned into */
    _Atomic(weft_scope *) cur;   /* innermost open scope (home if none);
                                  * weft_task.cancel points at its cancel
                                  * word (weft__task_set_scope) */
    weft_task *mprev, *mnext;    /* home's member list, under home's lock */
    struct weft__handle *handle; /* its handle's record (task.c), or NULL:
                                  * set at spawn, read at exit */
    int index;                   /* child index in home (WEFT_SERVE: 0) */
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

/* Makes s t's current scope, and s's cancel word the one the scheduler
 * reads for t (weft_task.cancel), with release: a canceller on another
 * thread that reads either sees s whole. */
static inline void weft__task_set_scope(weft_task *t, weft_scope *s)
{
    WEFT_ASSERT_MSG(
        s != NULL && (weft__task_is_current(t) || !(t->flags & TASK_STARTED)),
        "a task's current scope set by another task");
    atomic_store_explicit(&weft__scope_of_task(t)->cur, s,
                          memory_order_release);
    atomic_store_explicit(&t->cancel, &s->cancelled, memory_order_release);
}

/* A new life of t (prepared, not registered): its scope links cleared
 * and its handle's record h (NULL: none). Before weft__scope_add_child. */
static inline void weft__scope_task_init(weft_task *t, struct weft__handle *h)
{
    WEFT_ASSERT_MSG(!(t->flags & TASK_STARTED),
                    "a task's scope links set up after it started");
    *weft__scope_of_task(t) = (weft__task_scope){.handle = h};
}

int weft__scope_init_root(weft_runtime *rt, weft_scope *s);
/* Registers a new child in s; returns its index or an error. A task with
 * a handle gets the handle's scope, made a kid of s, as its current. */
int weft__scope_add_child(weft_scope *s, weft_task *t);
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
/* Frees the orphans nobody freed, and the records of the runtime's task
 * handles nobody joined or released; at the end of the runtime. */
void weft__scope_free_orphans(weft_runtime *rt);
int weft__scope_cancel(weft_scope *s, int reason);

/* select's scope case (wait/many.h, "select's cases"): joins the scope once no
 * child runs. check: scope NULL 1; the caller not its owner -EPERM;
 * joined already, or not the caller's innermost open scope -EINVAL. try
 * returns 0 without setting rc when no child runs (the join, which takes
 * the lock, is won()'s, which select calls then with code 0), else
 * -EAGAIN with a->q the done queue. won: rc = weft_scope_join(scope). */
int weft__scope_case_check(const weft_case *c);
weft__lock *weft__scope_case_lock(weft_case *c);
int weft__scope_case_try(weft_case *c, weft__arm *a, weft__chain *woken);
void weft__scope_case_won(weft_case *c, int code);

/* ---- task.c: task handles ---- */

/* The record behind a weft_task_handle. Records sit in chunks that live as
 * long as the process and are reused through a free list, so a stale
 * handle finds a record whose generation has moved on, never freed
 * memory. A handle's id is (gen << 24) | index. */
typedef struct weft__handle {
    weft__lock lock;  /* guards every field but `scope` (its own lock) */
    uint64_t gen;     /* this life's generation (never 0); bumped when freed */
    uint32_t index;   /* place in the table: the id's low bits */
    bool live;        /* handed out, not on the free list */
    bool done;        /* the task has finished: status holds its result */
    bool released;    /* joined or released: the user's part is over */
    int status;       /* the task's return value, once done */
    weft_runtime *rt; /* the task's runtime */
    weft__waitq joiners;            /* tasks in weft_task_join */
    struct weft__handle *next_free; /* free list, under the table's mutex */
    /* The task's own scope, a kid of its home and the task's current scope
     * when it starts: the handle's cancel is this scope's, so it flows
     * into the scopes the task opens and wakes the task as a scope's
     * cancel does. Closed at the task's exit; reused with the record. */
    weft_scope scope;
} weft__handle;

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

/* ---- spawn.c: a task spawned into a scope, and its exit ---- */

int weft__spawn(weft_scope *s, weft_fn fn, void *arg, const weft_spawn_opts *o,
                const char *file, int line);
/* The scope layer's hooks, for weft_runtime.hooks. */
extern const weft__task_hooks weft__scope_hooks;

#endif
