/* SPDX-License-Identifier: MIT */
/*
 * The scope layer's structs, for the files that look inside a scope or a
 * task handle's record: the scope layer's own, and the observers'.
 */
#ifndef WEFT_SCOPE_STRUCT_H
#define WEFT_SCOPE_STRUCT_H

#include "scope/scope.h"
#include "wait/queue.h"

/* The result policies, which struct weft_scope embeds. */
#include "scope/policy.h"

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
    bool embedded;      /* in memory of its opener's (weft__scope_open_at),
                         * which weft_scope_free leaves alone */
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
    /* Its tasks may move (weft_scope_opts.movable, or its parent's);
     * immutable after open. */
    bool movable;
    /* Its tasks are compact (weft_scope_opts.compact, or its parent's);
     * immutable after open. */
    bool compact;
    /* The deadline timer was armed on the owner's wheel: the owner is
     * anchored there (weft__task_anchor) until the join. */
    bool anchored;
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

/* ---- task.c: task handles ---- */

/* The record behind a weft_task_handle. Records sit in chunks that live as
 * long as the process and are reused through a free list, so a stale
 * handle finds a record whose generation has moved on, never freed
 * memory. A handle's id is (gen << 24) | index. */
struct weft__handle {
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
};

#endif
