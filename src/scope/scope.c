/* SPDX-License-Identifier: MIT */
/*
 * Scopes: structured concurrency, result policies and cancellation.
 *
 * The scope tree. Every task is a member of the scope it was spawned into
 * (its home). A task that opens a scope owns it and the new scope becomes
 * the task's current scope, a child (a "kid") of the scope that was
 * current. So the tree links scope -> kid scopes, scope -> member tasks,
 * and each task knows its innermost open scope (`cur`).
 *
 * Cancellation is a flag on each scope, level-triggered (Trio): a blocking
 * call checks the flag of the task's current scope before it parks, and
 * keeps failing with -ECANCELED while the task stays inside. Cancelling a
 * scope sets its flag, wakes its owner and members that are parked
 * cancellably in a cancelled scope, then does the same for each kid that is
 * not shielded. Locks are taken parent before child, never the other way,
 * and no lock is held across a park.
 *
 * Race with a task about to park: the task stores its park word, then
 * reads the flag; the canceller stores every flag of the subtree, passes
 * weft__cancel_fence, then reads park words. One of them sees the other,
 * so no park is missed (see the fence's comment in sched.c).
 *
 * Results flow up at join: each finishing child records its status under
 * the scope's lock as its policy says (a table of policy.h: what it keeps,
 * whether a child's end cancels the rest, what join returns); the last
 * one claims the scope's done queue, where the owner waits in join
 * (through the wait layer, firmly) or in a select's scope case. A
 * WEFT_SERVE scope records nothing per child: a failure goes to the
 * scope's handler (or a rate-limited line on stderr) from the failing
 * child, before it takes the lock to leave.
 *
 * A task spawned with a handle runs inside a scope of its own (the
 * record's, task.c), a kid of its home with the task as owner: cancelling
 * the handle cancels that scope, and the protocol above does the rest
 * (flag, fence, wake; scopes the task opens are its kids). The task's code
 * never sees it: a spawn into "the current scope" and weft_scope_current()
 * skip it, and the task closes it at its exit.
 */
#include "sched/clock.h"
#include "sched/spawn.h"
#include "scope/cases.h"
#include "scope/struct.h"
#include "timer/timer.h"
#include "util/fault.h"
#include "wait/many.h"
#include "wait/wait.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const weft__wait_kind weft__wk_scope = {WEFT_WAIT_SCOPE, "scope join"};
/* The public cancel reasons are the scope's own (weft_instrument's
 * scope_cancel passes them on). */
_Static_assert((int)WEFT_CANCEL_USER == CANCEL_USER &&
                   (int)WEFT_CANCEL_DEADLINE == CANCEL_DEADLINE &&
                   (int)WEFT_CANCEL_POLICY == CANCEL_POLICY,
               "weft_cancel_reason follows the scope layer's reasons");

/* WEFT_SERVE without a handler: at most LOG_BURST lines on stderr in any
 * LOG_WINDOW, per scope. A server whose clients all vanish at once must not
 * spend its workers writing to stderr. */
#define LOG_BURST 10
#define LOG_WINDOW WEFT_SEC

static inline __attribute__((always_inline)) void
scope_lock(const weft_scope *s)
{
    weft__lock_acquire((weft__lock *)&s->lock);
}

static inline __attribute__((always_inline)) void
scope_unlock(const weft_scope *s)
{
    weft__lock_release((weft__lock *)&s->lock);
}

static inline bool has(const weft_scope *s, unsigned flag)
{
    return (s->pflags & flag) != 0;
}

/* A new scope's policy: the table, its flags, its state before any child
 * has finished. */
static void set_policy(weft_scope *s, const weft__policy *pol)
{
    s->pol = pol;
    s->pflags = (uint8_t)pol->flags;
    weft__policy_start(&s->ps);
}

/* Links kid k into its parent p's kid list; p's lock is held. */
static void kid_link_locked(weft_scope *p, weft_scope *k)
{
    WEFT_ASSERT(weft__lock_is_held((weft__lock *)&p->lock));
    k->parent = p;
    k->sib_prev = NULL;
    k->sib_next = p->kids;
    if (p->kids)
        p->kids->sib_prev = k;
    p->kids = k;
}

static void kid_unlink_locked(weft_scope *p, weft_scope *k)
{
    WEFT_ASSERT(weft__lock_is_held((weft__lock *)&p->lock));
    WEFT_ASSERT_MSG(k->parent == p && (k->sib_prev ? k->sib_prev->sib_next == k
                                                   : p->kids == k),
                    "a scope unlinked from a parent it is not a kid of");
    if (WEFT_UNLIKELY(p->dump_kid == k))
        p->dump_kid = k->sib_next; /* a dump is inside k: it moves on */
    if (k->sib_prev)
        k->sib_prev->sib_next = k->sib_next;
    else
        p->kids = k->sib_next;
    if (k->sib_next)
        k->sib_next->sib_prev = k->sib_prev;
}

/* ---- cancellation ---- */

/* Sets the flag of s and of every scope below it that is not shielded;
 * returns false if s was cancelled already (so was its subtree). */
static bool mark_locked(weft_scope *s, int reason)
{
    if (ld_rlx(&s->cancelled) != CANCEL_NONE)
        return false; /* the first reason stands */
    st_sc(&s->cancelled, reason);
    for (weft_scope *k = s->kids; k; k = k->sib_next) {
        if (k->shield)
            continue;
        weft__lock_acquire(&k->lock);
        mark_locked(k, CANCEL_PARENT);
        weft__lock_release(&k->lock);
    }
    return true;
}

/* Wakes the tasks of s and below that are parked in a cancelled scope. */
static void wake_locked(weft_scope *s)
{
    if (s->owner)
        weft__wake_if_cancelled(s->owner);
    for (weft_task *m = s->members; m; m = weft__scope_of_task(m)->mnext)
        weft__wake_if_cancelled(m);
    for (weft_scope *k = s->kids; k; k = k->sib_next) {
        if (k->shield)
            continue;
        weft__lock_acquire(&k->lock);
        wake_locked(k);
        weft__lock_release(&k->lock);
    }
}

/* Returns false if s was cancelled already. */
static bool cancel_locked(weft_scope *s, int reason)
{
    if (!mark_locked(s, reason))
        return false;
    /* Every flag is set: make sure each parker either sees its flag or
     * has its park word seen below (pairs with the parker's fence in sched.c).
     */
    weft__cancel_fence();
    wake_locked(s);
    return true;
}

/* s was just cancelled for reason, by the running task `by` (NULL: none):
 * the instrument's scope_cancel, if the calling thread is a worker with
 * one. After s's lock is released (the callback may take locks). */
static void cancelled_hook(weft_scope *s, int reason, weft_task *by)
{
    weft_worker *w = weft__tl_worker;
    if (WEFT_UNLIKELY(w && weft__wpub(w)->instr))
        weft__instr_scope_cancel(weft__wpub(w)->instr, s, reason, by);
}

int weft__scope_cancel(weft_scope *s, int reason)
{
    scope_lock(s);
    int rc = 0;
    bool now = false;
    if (s->joined)
        rc = -ESHUTDOWN;
    else
        now = cancel_locked(s, reason);
    scope_unlock(s);
    if (now)
        cancelled_hook(s, reason,
                       reason == CANCEL_DEADLINE ? NULL : weft__current());
    return rc;
}

static void deadline_fired(weft__timer *tm)
{
    weft_scope *s =
        (weft_scope *)((char *)tm - offsetof(weft_scope, deadline_timer));
    weft__scope_cancel(s, CANCEL_DEADLINE);
}

/* ---- children ---- */

int weft__scope_status_cap(int cap)
{
    /* cap * 2 would overflow an int from 2^30 on. */
    return cap == 0 ? 16 : cap > INT_MAX / 2 ? INT_MAX : cap * 2;
}

static int grow_statuses(weft_scope *s)
{
    if (s->spawned < s->capstatuses)
        return 0;
    int cap = weft__scope_status_cap(s->capstatuses);
    if ((size_t)cap > SIZE_MAX / sizeof(*s->statuses))
        return -ENOMEM; /* 32-bit size_t */
    int64_t *n = weft__realloc(s->statuses, (size_t)cap * sizeof(*n));
    if (!n)
        return -ENOMEM;
    s->statuses = n;
    s->capstatuses = cap;
    return 0;
}

size_t weft__scope_footprint(const weft_scope *s)
{
    scope_lock(s);
    size_t n = sizeof(*s) + (size_t)s->capstatuses * sizeof(*s->statuses);
    scope_unlock(s);
    return n;
}

/* The scope of t's handle, opened around it inside s (s's lock held). */
WEFT_COLD static weft_scope *task_scope_open_locked(weft_scope *s, weft_task *t)
{
    weft_scope *p = &weft__scope_of_task(t)->handle->scope;
    memset(p, 0, sizeof(*p));
    set_policy(p, &weft__policy_fail_fast);
    p->task_scope = true;
    p->owner = t;
    p->deadline = WEFT_NEVER;
    kid_link_locked(s, p);
    return p;
}

/* s's policy numbers its children and keeps no status array: a child's
 * index is the count of those before it. */
static inline bool counted_index(const weft_scope *s)
{
    return !(s->pflags & (WEFT__POL_STATUSES | WEFT__POL_UNINDEXED));
}

/* The index of a new child of s (its lock held), or an error. */
static int next_index(weft_scope *s)
{
    if (WEFT_LIKELY(counted_index(s)))
        return s->spawned == INT_MAX ? -EOVERFLOW : s->spawned++;
    if (s->pflags & WEFT__POL_UNINDEXED) {
        if (s->spawned < INT_MAX) /* a count, not an index: it may stop */
            s->spawned++;
        return 0;
    }
    if (s->spawned == INT_MAX)
        return -EOVERFLOW; /* no index left to give */
    int rc = grow_statuses(s);
    if (rc)
        return rc;
    s->statuses[s->spawned] = INT64_MIN;
    return s->spawned++;
}

/* Under s's lock: t joins s's members, with this index (-1: a background
 * child), and s becomes its current scope (or, with a handle, the
 * handle's scope, opened inside s). */
static inline __attribute__((always_inline)) void
add_member(weft_scope *s, weft_task *t, int index)
{
    WEFT_ASSERT_MSG(!(t->flags & TASK_STARTED),
                    "a task registered in a scope after it started");
    s->live++;
    weft__task_scope *ts = weft__scope_of_task(t);
    ts->home = s;
    ts->index = index;
    ts->mprev = NULL;
    ts->mnext = s->members;
    if (s->members)
        weft__scope_of_task(s->members)->mprev = t;
    s->members = t;
    weft_scope *cur = s;
    if (WEFT_UNLIKELY(ts->handle != NULL))
        cur = task_scope_open_locked(s, t);
    weft__task_set_scope(t, cur);
}

/* weft__scope_add_child in every case; s's lock held if `locked`. */
static __attribute__((noinline)) int add_child_any(weft_scope *s, weft_task *t,
                                                   bool background, bool locked)
{
    int rc;
    if (!locked)
        scope_lock(s);
    if (s->joined)
        rc = -ESHUTDOWN;
    else if (ld_rlx(&s->cancelled) != CANCEL_NONE)
        rc = -ECANCELED;
    else if (WEFT_LIKELY((rc = background ? 0 : next_index(s)) >= 0))
        add_member(s, t, background ? -1 : rc);
    scope_unlock(s);
    return rc;
}

/* The usual case (the lock free, the scope open, an indexed child of a
 * policy that keeps no statuses, no handle) calls nothing: the others
 * are a tail call, so it saves no register. */
int weft__scope_add_child(weft_scope *s, weft_task *t, bool background)
{
    if (WEFT_UNLIKELY(!weft__lock_try((weft__lock *)&s->lock)))
        return add_child_any(s, t, background, false);
    /* One test of all the unusual cases, on one value (no branch each). */
    int odd = (int)s->joined | (int)background |
              (int)(ld_rlx(&s->cancelled) != CANCEL_NONE) |
              (int)(weft__scope_of_task(t)->handle != NULL) |
              (int)!counted_index(s) | (int)(s->spawned == INT_MAX);
    if (WEFT_UNLIKELY(odd))
        return add_child_any(s, t, background, true);
    int rc = s->spawned++;
    add_member(s, t, rc);
    scope_unlock(s);
    return rc;
}

/* Under s's lock: t's status goes to s's policy (and status array).
 * Returns true if the policy cancelled s. */
static bool record_status(weft_scope *s, weft_task *t)
{
    int st = t->status;
    int index = weft__scope_of_task(t)->index;
    if (WEFT_UNLIKELY(index < 0))
        return false; /* a background child: no policy sees it */
    if (has(s, WEFT__POL_STATUSES))
        s->statuses[index] = st;
    if (st < 0) {
        if (s->failed < INT_MAX)
            s->failed++;
        if (WEFT_UNLIKELY(t->flags & TASK_WITHDRAWN))
            return false; /* stopped alone through its handle (task.c) */
    }
    if (WEFT_LIKELY(st >= 0 && !has(s, WEFT__POL_SUCCESSES)))
        return false; /* the policy does not look at successes */
    bool cancelled = ld_rlx(&s->cancelled) != CANCEL_NONE;
    if (s->pol->done(&s->ps, index, st, cancelled) & WEFT__POL_CANCEL)
        return cancel_locked(s, CANCEL_POLICY);
    return false;
}

/* A WEFT_SERVE child failed, and no handler was given: one line on
 * stderr, unless LOG_BURST lines went out in this window already. */
static void log_failure(weft_scope *s, weft_task *t)
{
    if (t->status == -ECANCELED)
        return;
    weft_time now = weft__now(weft__wpub(t->worker)->rt);
    scope_lock(s);
    if (now - s->log_window >= LOG_WINDOW) {
        s->log_window = now;
        s->log_lines = 0;
    }
    bool print = s->log_lines < LOG_BURST;
    long long dropped = 0;
    if (print) {
        s->log_lines++;
        dropped = s->log_dropped;
        s->log_dropped = 0;
    } else {
        s->log_dropped++;
    }
    scope_unlock(s);
    if (!print)
        return;
    char more[64] = "";
    if (dropped)
        snprintf(more, sizeof more, " (%lld earlier failures not shown)",
                 dropped);
    fprintf(stderr, "weft: task%s%s%s spawned at %s:%d failed: %s (%d)%s\n",
            t->name ? " \"" : "", t->name ? t->name : "", t->name ? "\"" : "",
            t->file ? t->file : "?", t->line, weft_strerror(t->status),
            t->status, more);
}

/* Join of a WEFT_SERVE scope: the failures left out since the last line. */
static void log_dropped_at_join(weft_scope *s)
{
    scope_lock(s);
    long long dropped = s->log_dropped;
    s->log_dropped = 0;
    scope_unlock(s);
    if (dropped)
        fprintf(stderr,
                "weft: %lld more failed tasks not shown (at most %d lines a "
                "second per scope)\n",
                dropped, LOG_BURST);
}

/* A WEFT_SERVE child failed: tell the handler, or stderr. On the child's
 * task, no lock held; the child still counts as live, so the scope stays
 * open meanwhile. */
WEFT_COLD static void report_failure(weft_scope *s, weft_task *t)
{
    if (!s->on_failure) {
        log_failure(s, t);
        return;
    }
    weft_child_failure f = {
        .status = t->status, .name = t->name, .file = t->file, .line = t->line};
    s->on_failure(s->failure_ctx, &f);
}

/* The last running child of s has left (s's lock held): claims the done
 * queue (the owner's join, or its select's scope case), unlocks, wakes
 * them; after the root's last child, tells the workers that every task
 * has finished. Out of line, so the exit path it hangs off stays small
 * (one exit in a scope's many takes it), but not cold: in a tree of
 * small scopes (skynet) it is one exit in ten. */
static __attribute__((noinline)) void last_child_done(weft_scope *s,
                                                      weft_runtime *rt)
{
    weft__waiter *woken = NULL;
    weft__waitq_claim_all(&s->done, &woken);
    bool all_done = s->is_root;
    scope_unlock(s);
    /* The claimed tasks stay parked until finished, so s outlives these
     * wakes, though not necessarily anything after them. */
    weft__wake_chain(woken, 0);
    if (all_done) {
        /* The root scope is empty: every task has finished. */
        st_rel(&weft__rtpub(rt)->done, 1);
        for (int i = 0; i < weft__rtpub(rt)->nworkers; i++)
            weft__worker_notify(weft__rt_worker(rt, i));
    }
}

/* Takes t, a child that is done, off s's member list, under s's lock. */
static inline void remove_member(weft_scope *s, weft_task *t)
{
    weft__task_scope *ts = weft__scope_of_task(t);
    WEFT_ASSERT_MSG(ts->home == s && s->live > 0 &&
                        (ts->mprev ? weft__scope_of_task(ts->mprev)->mnext == t
                                   : s->members == t),
                    "a task left a scope it is not a member of");
    WEFT_ASSERT_MSG(!s->joined, "a joined scope had a live child");
    if (ts->mprev)
        weft__scope_of_task(ts->mprev)->mnext = ts->mnext;
    else
        s->members = ts->mnext;
    if (ts->mnext)
        weft__scope_of_task(ts->mnext)->mprev = ts->mprev;
}

/* weft__scope_child_done in every case; s's lock held if `locked` (then t
 * succeeded: no failure to report). */
static __attribute__((noinline)) void child_done_any(weft_scope *s,
                                                     weft_task *t, bool locked)
{
    weft_runtime *rt = weft__wpub(t->worker)->rt;
    if (!locked) {
        if (WEFT_UNLIKELY(t->status < 0) && has(s, WEFT__POL_REPORT))
            report_failure(s, t); /* takes the lock itself */
        scope_lock(s);
    }
    if (WEFT_UNLIKELY(s->dump_task == t))
        s->dump_task =
            weft__scope_of_task(t)->mnext; /* a dump's next member leaves */
    remove_member(s, t);
    if (s->is_root && weft__scope_of_task(t)->index == 0)
        weft__scope_rt(rt)->root_status = t->status;
    bool cancelled = record_status(s, t);
    if (WEFT_UNLIKELY(--s->live == 0))
        last_child_done(s, rt); /* unlocks s */
    else
        scope_unlock(s);
    if (WEFT_UNLIKELY(cancelled)) /* s is a key only now: it may be freed */
        cancelled_hook(s, CANCEL_POLICY, t);
}

/* The usual end (a child that succeeded, the lock free, a policy that
 * keeps no statuses and hears of no success, not the root scope, no dump
 * at t, other children still live) calls nothing: the others are a tail
 * call, so it saves no register. */
void weft__scope_child_done(weft_scope *s, weft_task *t)
{
    if (WEFT_UNLIKELY(t->status < 0) ||
        WEFT_UNLIKELY(!weft__lock_try((weft__lock *)&s->lock))) {
        child_done_any(s, t, false);
        return;
    }
    /* One test of all the unusual cases, on one value (no branch each). */
    int odd = (int)has(s, WEFT__POL_STATUSES | WEFT__POL_SUCCESSES) |
              (int)s->is_root | (int)(s->dump_task == t) | (int)(s->live <= 1);
    if (WEFT_UNLIKELY(odd)) {
        child_done_any(s, t, true);
        return;
    }
    remove_member(s, t);
    s->live--;
    scope_unlock(s);
}

int weft__scope_init_root(weft_runtime *rt, weft_scope *s)
{
    WEFT_UNUSED(rt);
    memset(s, 0, sizeof(*s));
    set_policy(s, &weft__policy_fail_fast);
    s->is_root = true;
    s->deadline = WEFT_NEVER;
    return 0;
}

/* ---- the public scope API ---- */

static int arm_deadline(weft_scope *s, weft_time deadline)
{
    weft_worker *w = s->owner->worker;
    /* The deadline's timer is on the owner's worker's wheel, which only
     * that worker's thread touches. */
    WEFT_ASSERT(weft__task_is_current(s->owner));
    weft__wheel_disarm(&weft__wpub(w)->wheel, &s->deadline_timer);
    /* Only WEFT_NEVER means none: 0 is an instant, long past (the opts'
     * "0: none" is weft_scope_open's to apply, before calling here). */
    scope_lock(s); /* weft_deadline() reads it from the children */
    s->deadline = deadline;
    scope_unlock(s);
    if (deadline == WEFT_NEVER)
        return 0;
    if (deadline <= weft__now(weft__wpub(w)->rt))
        return weft__scope_cancel(s, CANCEL_DEADLINE);
    weft__wheel_arm(&weft__wpub(w)->wheel, &s->deadline_timer, deadline);
    if (!s->anchored) { /* a movable owner stays with its timer */
        s->anchored = true;
        weft__task_anchor(s->owner, 1);
    }
    return 0;
}

/* weft_scope_open, and with `internal` an internal policy's scope (whose
 * user's context goes to s->ctx); in `at` if not NULL, else allocated. */
static int scope_open(weft_scope **out, const weft_scope_opts *opts,
                      bool internal, void *ctx, weft_scope *at)
{
    if (!out)
        return -EINVAL;
    weft_task *t = weft__current();
    if (!t)
        return -EPERM;
    const weft__policy *pol =
        weft__policy_of(opts ? opts->policy : WEFT_FAIL_FAST);
    if (!pol || (!internal && (pol->flags & WEFT__POL_INTERNAL)))
        return -EINVAL;
    if (opts && (opts->deadline < 0 || opts->movable < 0 || opts->movable > 1 ||
                 opts->compact < 0 || opts->compact > 1))
        return -EINVAL;
    if (opts && opts->on_failure && !(pol->flags & WEFT__POL_REPORT))
        return -EINVAL;
    weft_scope *s = at;
    if (s) {
        memset(s, 0, sizeof(*s));
        s->embedded = true;
    } else if (!(s = weft__calloc(1, sizeof(*s)))) {
        return -ENOMEM;
    }
    weft_scope *parent = weft__task_scope_cur(t);
    WEFT_ASSERT(parent != NULL);
    set_policy(s, pol);
    s->shield = opts && opts->shield;
    s->movable = (opts && opts->movable) || parent->movable;
    s->compact = (opts && opts->compact) || parent->compact;
    s->owner = t;
    s->deadline = WEFT_NEVER;
    s->deadline_timer.fn = deadline_fired;
    if (opts) {
        s->on_failure = opts->on_failure;
        s->failure_ctx = opts->failure_ctx;
    }
    s->ctx = ctx;
    scope_lock(parent);
    kid_link_locked(parent, s);
    if (!s->shield && ld_rlx(&parent->cancelled) != CANCEL_NONE)
        atomic_store(&s->cancelled, CANCEL_PARENT);
    scope_unlock(parent);
    weft__task_set_scope(t, s);
    if (opts && opts->deadline)
        arm_deadline(s, opts->deadline);
    *out = s;
    return 0;
}

int weft_scope_open(weft_scope **out, const weft_scope_opts *opts)
{
    return scope_open(out, opts, false, NULL, NULL);
}

int weft__scope_open_internal(weft_scope **out, const weft_scope_opts *opts,
                              void *ctx)
{
    return scope_open(out, opts, true, ctx, NULL);
}

int weft__scope_open_at(weft_scope *at, const weft_scope_opts *opts)
{
    weft_scope *s;
    return scope_open(&s, opts, false, NULL, at);
}

/* Join's result: the policy's, told what cancelled the scope (a cancel
 * by the policy itself is not an interruption). */
static int scope_result(const weft_scope *s)
{
    int reason = ld_rlx((atomic_int *)&s->cancelled);
    int by_cancel = reason == CANCEL_DEADLINE ? -ETIMEDOUT
                    : reason == CANCEL_USER || reason == CANCEL_PARENT
                        ? -ECANCELED
                        : 0;
    return s->pol->result(&s->ps, by_cancel, s->spawned);
}

int weft_scope_join(weft_scope *s)
{
    if (!s)
        return -EINVAL;
    weft_task *t = weft__current();
    if (!t)
        return -EPERM;
    if (s->owner != t)
        return -EPERM;
    if (s->joined || weft__task_scope_cur(t) != s)
        return -EINVAL;
    weft_worker *w = t->worker;
    scope_lock(s);
    /* Firm: a cancel does not end it, only the exit of the last child,
     * which claims the done queue. Again if a spawn came in between. */
    while (s->live > 0) {
        weft__waiter self = {0};
        weft__wait(&self, &(weft__wait_spec){.kind = &weft__wk_scope,
                                             .obj = s,
                                             .lock = &s->lock,
                                             .q = &s->done,
                                             .deadline = WEFT_NEVER,
                                             .flags = WEFT__WAIT_FIRM});
        scope_lock(s);
    }
    /* Joined only once its children are gone: its member tasks, and
     * the scopes they and the owner opened inside it. */
    WEFT_ASSERT_MSG(s->live == 0 && s->members == NULL && s->kids == NULL,
                    "a scope joined with children left");
    s->joined = true;
    scope_unlock(s);
    w = t->worker; /* another one, if t moved while it waited */
    weft__wheel_disarm(&weft__wpub(w)->wheel, &s->deadline_timer);
    if (s->anchored) {
        s->anchored = false;
        weft__task_anchor(t, -1);
    }
    weft_scope *parent = s->parent;
    scope_lock(parent);
    kid_unlink_locked(parent, s);
    scope_unlock(parent);
    weft__task_set_scope(t, parent);
    if (has(s, WEFT__POL_REPORT) && !s->on_failure)
        log_dropped_at_join(s);
    return scope_result(s);
}

/* ---- select's scope case ---- */

int weft__scope_case_check(const weft_case *c)
{
    weft_scope *s = c->scope;
    if (!s)
        return 1;
    weft_task *t = weft__current();
    if (!t || s->owner != t)
        return -EPERM;
    /* What join would refuse: it must not fail after the case won. */
    if (s->joined || weft__task_scope_cur(t) != s)
        return -EINVAL;
    return 0;
}

weft__lock *weft__scope_case_lock(weft_case *c)
{
    return &c->scope->lock;
}

int weft__scope_case_try(weft_case *c, weft__arm *a, weft__chain *woken)
{
    WEFT_UNUSED(woken);
    weft_scope *s = c->scope;
    if (s->live == 0)
        return 0; /* won() joins it, after select unlocks */
    a->q = &s->done;
    return -EAGAIN;
}

void weft__scope_case_won(weft_case *c, int code)
{
    WEFT_UNUSED(code);
    /* No child runs (unless someone spawned into the scope since, which
     * the join then waits for, as join does). */
    c->rc = weft_scope_join(c->scope);
}

void weft__scope_close_task(weft_scope *p)
{
    weft_scope_join(p); /* it has no children: closes it at once */
}

void weft__scope_join_above(weft_task *t, weft_scope *keep)
{
    weft_runtime *rt = weft__wpub(t->worker)->rt;
    /* keep off the chain: fn joined it itself (misuse); the scopes now
     * above are the caller's, not fn's leftovers. */
    weft_scope *s = weft__task_scope_cur(t);
    while (s && s != keep)
        s = s->parent;
    if (!s)
        return;
    while ((s = weft__task_scope_cur(t)) != keep) {
        weft_scope_join(s);
        /* The owner is gone: any task may free it; if none does, the
         * runtime does at its end. It is off its parent's kid list, so
         * the sibling links can hold the orphan list. */
        WEFT_ASSERT_MSG(!s->embedded,
                        "a scope in its opener's memory left open at its exit");
        pthread_mutex_lock(&weft__scope_rt(rt)->orphan_mu);
        s->orphaned = true;
        s->sib_prev = NULL;
        s->sib_next = weft__scope_rt(rt)->orphans;
        if (weft__scope_rt(rt)->orphans)
            weft__scope_rt(rt)->orphans->sib_prev = s;
        weft__scope_rt(rt)->orphans = s;
        pthread_mutex_unlock(&weft__scope_rt(rt)->orphan_mu);
    }
}

int weft_scope_cancel(weft_scope *s)
{
    if (!s)
        return -EINVAL;
    return weft__scope_cancel(s, CANCEL_USER);
}

int weft_scope_free(weft_scope *s)
{
    if (!s)
        return -EINVAL;
    weft_task *t = weft__current();
    if (!t || (s->owner != t && !s->orphaned))
        return -EPERM;
    if (!s->joined)
        return -EBUSY;
    if (s->orphaned) {
        weft_runtime *rt = weft__wpub(t->worker)->rt;
        pthread_mutex_lock(&weft__scope_rt(rt)->orphan_mu);
        if (s->sib_prev)
            s->sib_prev->sib_next = s->sib_next;
        else
            weft__scope_rt(rt)->orphans = s->sib_next;
        if (s->sib_next)
            s->sib_next->sib_prev = s->sib_prev;
        pthread_mutex_unlock(&weft__scope_rt(rt)->orphan_mu);
    }
    WEFT_ASSERT_MSG(s->live == 0 && s->members == NULL && s->kids == NULL,
                    "a scope freed with children left");
    free(s->statuses);
    if (!s->embedded)
        free(s);
    return 0;
}

void weft__scope_free_orphans(weft_runtime *rt)
{
    weft__handles_fini(rt);
    while (weft__scope_rt(rt)->orphans) {
        weft_scope *s = weft__scope_rt(rt)->orphans;
        weft__scope_rt(rt)->orphans = s->sib_next;
        WEFT_ASSERT(s->orphaned && s->joined && s->live == 0);
        free(s->statuses);
        free(s);
    }
}

int weft_scope_set_deadline(weft_scope *s, weft_time deadline)
{
    if (!s || deadline < 0)
        return -EINVAL;
    weft_task *t = weft__current();
    if (!t || s->owner != t)
        return -EPERM;
    if (s->joined)
        return -ESHUTDOWN;
    return arm_deadline(s, deadline);
}

int weft_scope_cancelled(const weft_scope *s)
{
    return s ? weft__scope_is_cancelled(s) : 0;
}

int weft_scope_spawned(const weft_scope *s)
{
    if (!s)
        return -EINVAL;
    scope_lock(s);
    int n = s->spawned;
    scope_unlock(s);
    return n;
}

int weft_scope_failed(const weft_scope *s)
{
    if (!s)
        return -EINVAL;
    scope_lock(s);
    int n = s->failed;
    scope_unlock(s);
    return n;
}

int weft_scope_status(const weft_scope *s, int child, int *status)
{
    if (!s || !status)
        return -EINVAL;
    int rc = 0;
    scope_lock(s);
    if (has(s, WEFT__POL_UNINDEXED))
        rc = -ENODATA; /* its children have no index */
    else if (child < 0 || child >= s->spawned)
        rc = -ENOENT;
    else if (!has(s, WEFT__POL_STATUSES))
        rc = -ENODATA;
    else if (s->statuses[child] == INT64_MIN)
        rc = -EAGAIN;
    else
        *status = (int)s->statuses[child];
    scope_unlock(s);
    return rc;
}

int weft_scope_winner(const weft_scope *s)
{
    if (!s)
        return -EINVAL;
    scope_lock(s);
    int w = s->ps.winner;
    scope_unlock(s);
    return w >= 0 ? w : -ENOENT;
}

int weft__scope_open_until(weft_scope **s, weft_policy policy,
                           weft_time deadline)
{
    weft_scope_opts o = {.policy = policy,
                         .deadline = deadline ? deadline : WEFT_NEVER};
    int rc = weft_scope_open(s, &o);
    if (rc == 0 && deadline == 0)
        weft__scope_cancel(*s, CANCEL_DEADLINE);
    return rc;
}

weft_time weft_deadline(void)
{
    weft_task *t = weft__current();
    if (!t)
        return WEFT_NEVER;
    weft_time d = WEFT_NEVER;
    /* The scopes on the way up stay open while the task runs inside them
     * (a scope cannot be joined before its children finish). */
    for (weft_scope *s = weft__task_scope_cur(t); s; s = s->parent) {
        scope_lock(s);
        if (s->deadline < d)
            d = s->deadline;
        bool shield = s->shield;
        scope_unlock(s);
        if (shield)
            break;
    }
    return d;
}

weft_scope *weft_scope_current(void)
{
    weft_task *t = weft__current();
    if (!t)
        return NULL;
    weft_scope *s = weft__task_scope_cur(t);
    while (s->task_scope) /* a handle's or an actor's is not the code's */
        s = s->parent;
    return s;
}

/* ---- public: a block with a deadline ---- */

int weft_call_for(weft_fn fn, void *arg, int64_t timeout_ns)
{
    weft_worker *w = weft__tl_worker;
    if (!w || !weft__wpub(w)->cur)
        return -EPERM;
    if (!fn)
        return -EINVAL;
    weft_scope *s;
    weft_time now = weft__now(weft__wpub(w)->rt);
    int rc = weft__scope_open_until(
        &s, WEFT_FAIL_FAST,
        timeout_ns <= 0 ? now : weft__add_sat(now, timeout_ns));
    if (rc)
        return rc;
    rc = fn(arg);
    /* The running task, read again: a movable one may have moved in fn
     * (w is the worker it started on). Scopes fn left open, if any. */
    weft__scope_join_above(weft__current(), s);
    weft_scope_join(s);
    bool timed_out = ld_rlx(&s->cancelled) == CANCEL_DEADLINE;
    weft_scope_free(s);
    return timed_out && rc < 0 ? -ETIMEDOUT : rc;
}
