/* SPDX-License-Identifier: MIT */
/*
 * Futures and combinators.
 *
 * A future is a refcounted heap object, as a channel is: a spinlock, a
 * state (pending, resolved, rejected), the value bytes inline after the
 * struct, an optional canceller, and a wait queue (wait.h). It settles
 * once, under its lock, from any thread (a task, a plain pthread, a foreign
 * library's callback): the settler copies the value in, claims every
 * waiter of the queue (weft__waitq_claim_all), then, after unlocking,
 * finishes the wakes of the tasks it claimed (weft__wake_chain, as
 * weft_event_set does, so a plain thread can settle).
 *
 * Two kinds of waiter queue on a future. A select's future case queues a
 * plain waiter, claimed by the select's token (one case wins). The calls
 * below wait on n futures at once (weft_future_await is n = 1) through a
 * wait set (weft__waitset): one notify waiter per future, on that
 * future's queue; a settle claims it, which records its index in the set
 * in firing order and claims the task only if it is parked in the set
 * (weft__waitset_fire), and the task takes the fired indexes in as it
 * gets them (weft__waitset_wait), reading each result then. Lock order: a
 * future's lock, then a set's (the claim's); the set's lock is never held
 * while a future's is taken. Before it returns, the call takes every
 * waiter it queued off its future (under that future's lock, so a settler
 * still claiming one has finished with the set), leaving no trace, as
 * select does.
 *
 * What a call decides is a result policy's (policy.h), the same tables as
 * scopes': await and all are WEFT_FAIL_FAST (the first rejection decides),
 * all_settled WEFT_COLLECT, any WEFT_FIRST (the first resolution wins),
 * race WEFT_RACE (the first settle wins); any and race return the
 * winner's index.
 *
 * Determinism: futures already settled when a call starts are looked at in
 * index order, and the call stops at the first that decides it. So when
 * several are already settled at entry, weft_future_race returns the lowest
 * index among them, weft_future_any the lowest resolved one, and
 * weft_future_all the lowest-indexed rejection. Futures that settle while
 * the call waits count in the order they settled, and one already taken
 * in when the deadline or a cancel wakes the call still counts (a result
 * that is there wins over a deadline at the same instant). The calls look
 * at a future's state, not at a code: "not settled yet" is -EINPROGRESS,
 * which weft_future_reject refuses, so no result can be mistaken for it.
 *
 * Giving up: every combinator, whatever ended it (a decision, its deadline,
 * a cancel of its task), calls weft_future_cancel on every future whose
 * settling it has not seen; on a settled one that is a no-op (-EALREADY).
 * weft_future_await never cancels its future.
 *
 * weft_future_spawn runs a wrapper task that opens its own scope, runs
 * fn(arg) inline in it, joins it, and settles the future with fn's status.
 * The future's canceller cancels that scope; the scope pointer is published
 * and withdrawn under the future's lock, and the canceller uses it only
 * under that lock, so a cancel racing with the wrapper's exit never touches
 * a freed scope. A cancel that comes before the scope exists is remembered
 * and applied when it opens. A wrapper whose scope is cancelled before fn
 * starts does not call fn (the future is rejected with -ECANCELED); so
 * does each task of weft_gather_tasks, which records its status itself (a
 * WEFT_FAIL_FAST scope keeps only its first error, and a task that was
 * never spawned, its scope cancelled first, has none: -ECANCELED).
 */
#include "future/future.h"
#include "scope/policy.h"
#include "scope/scope.h"
#include "util/fault.h"
#include "wait/many.h"
#include "wait/waitset.h"

#include <stdlib.h>
#include <string.h>

const weft__wait_kind weft__wk_future = {WEFT_WAIT_FUTURE, "future"};

#define FUT_MAGIC 0x66757475u /* "futu" */
#define FUT_DEAD 0x64656164u  /* "dead": freed (weft__husk_free) */
#define MAX_VALUE 65536
#define MAX_WAIT 1024    /* futures per combinator call */
#define MAX_GATHER 65536 /* tasks per weft_gather_tasks */
#define STACK_WAITS 8    /* combinators this small need no malloc */

enum { F_PENDING = 0, F_RESOLVED = 1, F_REJECTED = 2 };

struct weft_future {
    uint32_t magic;  /* FUT_MAGIC while alive */
    weft__lock lock; /* guards everything below but refs */
    atomic_long refs;
    int state; /* F_* */
    int err;   /* F_REJECTED: the error */
    size_t size;
    void (*cancel_fn)(void *arg);
    void *cancel_arg;
    bool cancel_called;  /* the canceller has been called (once) */
    weft__waitq waiters; /* in arrival order */
    /* weft_future_spawn only */
    bool task_cancel;       /* cancel asked: cancel the scope when open */
    weft_scope *task_scope; /* the wrapper's scope while it exists */
    weft_fn task_fn;
    void *task_arg;
    unsigned char value[]; /* size bytes */
};

static bool fut_ok(const weft_future *f)
{
    return f && f->magic == FUT_MAGIC;
}

static void fut_lock(const weft_future *f)
{
    weft__lock_acquire((weft__lock *)&f->lock);
}

static void fut_unlock(const weft_future *f)
{
    weft__lock_release((weft__lock *)&f->lock);
}

int weft_future_new(weft_future **out, size_t value_size)
{
    if (!out || value_size > MAX_VALUE)
        return -EINVAL;
    weft_future *f = weft__calloc(1, sizeof(*f) + value_size);
    if (!f)
        return -ENOMEM;
    f->magic = FUT_MAGIC;
    f->size = value_size;
    f->state = F_PENDING;
    atomic_init(&f->refs, 1);
    *out = f;
    return 0;
}

weft_future *weft_future_ref(weft_future *f)
{
    if (fut_ok(f))
        add_rlx(&f->refs, 1);
    return f;
}

int weft_future_unref(weft_future *f)
{
    if (!fut_ok(f))
        return -EINVAL;
    if (add_acq_rel(&f->refs, -1) != 1)
        return 0;
    f->magic = FUT_DEAD;
    weft__husk_free(f);
    return 0;
}

/* ---- settling ---- */

/* Under f's lock: settles f and claims every waiter; returns the chain of
 * those claimed, to finish after unlocking. The queue is in arrival
 * order, so one call's waiters on one future fire in index order. */
static weft__waiter *settle_locked(weft_future *f, int state, int err,
                                   const void *value)
{
    f->state = state;
    f->err = err;
    if (state == F_RESOLVED && f->size)
        memcpy(f->value, value, f->size);
    weft__waiter *woken = NULL;
    weft__waitq_claim_all(&f->waiters, &woken);
    return woken;
}

static int settle(weft_future *f, int state, int err, const void *value)
{
    fut_lock(f);
    if (f->state != F_PENDING) {
        fut_unlock(f);
        return -EALREADY;
    }
    weft__waiter *woken = settle_locked(f, state, err, value);
    fut_unlock(f);
    weft__wake_chain(woken, 0);
    return 0;
}

int weft_future_resolve(weft_future *f, const void *value)
{
    if (!fut_ok(f) || (f->size && !value))
        return -EINVAL;
    return settle(f, F_RESOLVED, 0, value);
}

int weft_future_reject(weft_future *f, int err)
{
    if (!fut_ok(f) || err >= 0 || err == -EINPROGRESS)
        return -EINVAL;
    return settle(f, F_REJECTED, err, NULL);
}

int weft_future_set_canceller(weft_future *f, void (*fn)(void *arg), void *arg)
{
    if (!fut_ok(f) || !fn)
        return -EINVAL;
    int rc = 0;
    fut_lock(f);
    if (f->state != F_PENDING) {
        rc = -EALREADY;
    } else if (f->cancel_fn) {
        rc = -EBUSY;
    } else {
        f->cancel_fn = fn;
        f->cancel_arg = arg;
    }
    fut_unlock(f);
    return rc;
}

/* weft_future_cancel; reject_bare: whether a future without a canceller
 * is rejected (-ECANCELED) or, for the combinators, left alone (-ENOTSUP):
 * a bare promise may be shared, and one caller giving up on it must not
 * take its result from the others. */
static int cancel(weft_future *f, bool reject_bare)
{
    fut_lock(f);
    if (f->state != F_PENDING) {
        fut_unlock(f);
        return -EALREADY;
    }
    if (!f->cancel_fn && !reject_bare) {
        fut_unlock(f);
        return -ENOTSUP;
    }
    if (!f->cancel_fn) {
        weft__waiter *woken = settle_locked(f, F_REJECTED, -ECANCELED, NULL);
        fut_unlock(f);
        weft__wake_chain(woken, 0);
        return 0;
    }
    bool call = !f->cancel_called;
    f->cancel_called = true;
    void (*fn)(void *) = f->cancel_fn;
    void *arg = f->cancel_arg;
    fut_unlock(f);
    /* Outside the lock: the canceller typically settles f. The caller's
     * reference keeps f alive meanwhile. */
    if (call)
        fn(arg);
    return 0;
}

int weft_future_cancel(weft_future *f)
{
    if (!fut_ok(f))
        return -EINVAL;
    return cancel(f, true);
}

/* Its result now, copying a resolved value to out: under f's lock, or
 * without it once f is known settled (the result is final). */
static int result_of(const weft_future *f, void *out)
{
    switch (f->state) {
    case F_RESOLVED:
        if (out && f->size)
            memcpy(out, f->value, f->size);
        return 0;
    case F_REJECTED:
        return f->err;
    default:
        return -EINPROGRESS;
    }
}

int weft_future_try_await(const weft_future *f, void *out)
{
    if (!fut_ok(f))
        return -EINVAL;
    fut_lock(f);
    int rc = result_of(f, out);
    fut_unlock(f);
    return rc;
}

int weft__future_nwaiters(const weft_future *f)
{
    if (!fut_ok(f))
        return -EINVAL;
    int n = 0;
    fut_lock(f);
    for (const weft__waiter *w = f->waiters.head; w; w = w->next)
        n++;
    fut_unlock(f);
    return n;
}

/* ---- select's future case (wait/many.h) ---- */

int weft__future_case_check(const weft_case *c)
{
    if (!c->future)
        return 1;
    return fut_ok(c->future) ? 0 : -EINVAL;
}

weft__lock *weft__future_case_lock(weft_case *c)
{
    return &c->future->lock;
}

int weft__future_case_try(weft_case *c, weft__arm *a, weft__chain *woken)
{
    WEFT_UNUSED(woken);
    weft_future *f = c->future;
    if (f->state != F_PENDING) {
        c->rc = result_of(f, c->elem);
        return 0;
    }
    a->q = &f->waiters; /* a plain waiter: the select's token claims it */
    return -EAGAIN;
}

void weft__future_case_won(weft_case *c, int code)
{
    WEFT_UNUSED(code);
    /* The settle that claimed the waiter wrote the result first, under
     * the lock, and the wake orders it before this read. */
    c->rc = result_of(c->future, c->elem);
}

/* ---- waiting on n futures ---- */

/* One future of a waiting call. */
typedef struct fut_wait {
    weft__waiter w; /* notify waiter on the future's queue; w.set is NULL
                     * if the call never queued it (settled at the look) */
    bool taken;     /* the call has taken in its result */
} fut_wait;

typedef struct wait_op {
    const weft__policy *pol;
    bool give_up; /* cancel the futures not taken in (not await) */
    weft_future *const *fs;
    int n;
    const void *obj; /* what the task waits on, for the dump */
    void *out;       /* await: where the value goes */
    int *statuses;   /* all_settled: each result (may be NULL) */
    int left;        /* futures whose result has not been taken in */
    weft__policy_state ps;
    fut_wait *ws;
} wait_op;

/* Takes in future i's result st (0 or its error); true once the call's
 * result is known. */
static bool take_in(wait_op *op, int i, int st)
{
    op->ws[i].taken = true;
    op->left--;
    if (op->statuses)
        op->statuses[i] = st;
    unsigned v = weft__policy_child_done(op->pol, &op->ps, i, st, false);
    return (v & WEFT__POL_DECIDED) || op->left == 0;
}

/* The call's result: the winner's index (any, race), else the policy's;
 * interrupted: the deadline or cancel that ended an undecided call. */
static int op_result(const wait_op *op, int interrupted)
{
    if (op->ps.winner >= 0)
        return op->ps.winner;
    return op->pol->result(&op->ps, interrupted, op->n);
}

/* Cancels every future whose settling the call has not seen (the
 * combinators give up on them) and that has a canceller; a settled one,
 * and a bare promise, are left alone. */
static void give_up(wait_op *op)
{
    for (int i = 0; i < op->n; i++) {
        if (op->ws[i].taken)
            continue;
        int rc = cancel(op->fs[i], false);
        if (op->statuses)
            op->statuses[i] = rc == -EALREADY
                                  ? weft_future_try_await(op->fs[i], NULL)
                                  : -EINPROGRESS;
    }
}

/* Waits until op is decided, its deadline passes or its task is cancelled;
 * op->ws and fired have room for n. Called from a task, past the
 * checkpoint. */
static int wait_futures(wait_op *op, int *fired, int64_t deadline)
{
    weft__waitset set;
    weft__waitset_init(&set, fired, &weft__wk_future, op->obj);
    weft__policy_start(&op->ps);
    bool decided = false;
    op->left = op->n;
    for (int i = 0; i < op->n; i++)
        op->ws[i] = (fut_wait){.taken = false};

    /* Queue, looking at each future in index order: one already settled
     * is taken in at once, and the first that decides the call stops the
     * look (see "Determinism" above). */
    for (int i = 0; i < op->n && !decided; i++) {
        weft_future *f = op->fs[i];
        fut_wait *fw = &op->ws[i];
        fut_lock(f);
        bool pending = f->state == F_PENDING;
        int st = 0;
        if (pending) {
            weft__waitset_waiter(&set, &fw->w, i);
            weft__waitq_push(&f->waiters, &fw->w);
        } else {
            st = result_of(f, op->out);
        }
        fut_unlock(f);
        if (!pending)
            decided = take_in(op, i, st);
    }

    /* Take in what fired, in firing order (the results are final; read
     * them under each future's lock, as the set's lock is not held). A
     * result already there wins over a deadline or a cancel that came at
     * the same time: the wait returns it first, the code next time. */
    int code = 0, rc = 0;
    while (!decided) {
        int from, to;
        rc = weft__waitset_wait(&set, deadline, &code, &from, &to);
        if (rc)
            break;
        for (int k = from; k < to && !decided; k++) {
            int i = fired[k];
            decided = take_in(op, i, weft_future_try_await(op->fs[i], op->out));
        }
    }

    /* Leave no trace: every waiter off its future (and every settler
     * still claiming one done with the set). */
    for (int i = 0; i < op->n; i++)
        if (op->ws[i].w.set)
            weft__waitset_leave(&op->fs[i]->lock, &op->fs[i]->waiters,
                                &op->ws[i].w);
    if (op->give_up)
        give_up(op);
    return op_result(op, decided ? 0 : rc);
}

int weft_future_await(weft_future *f, void *out, weft_time deadline)
{
    if (!fut_ok(f))
        return -EINVAL;
    int rc = weft__checkpoint();
    if (rc)
        return rc;
    /* Settled already: no set, no park. */
    fut_lock(f);
    bool pending = f->state == F_PENDING;
    if (!pending)
        rc = result_of(f, out);
    fut_unlock(f);
    if (!pending)
        return rc;
    weft_future *fs[1] = {f};
    fut_wait fw;
    int fired[1];
    wait_op op = {.pol = &weft__policy_fail_fast,
                  .fs = fs,
                  .n = 1,
                  .obj = f,
                  .out = out,
                  .ws = &fw};
    return wait_futures(&op, fired, deadline);
}

/* The combinators: argument checks, the entry checkpoint, the waiters. */
static int combine(wait_op *op, int64_t deadline)
{
    if (!op->fs || op->n < 1 || op->n > MAX_WAIT)
        return -EINVAL;
    for (int i = 0; i < op->n; i++)
        if (!fut_ok(op->fs[i]))
            return -EINVAL;
    weft_task *t = weft__current();
    if (!t)
        return -EPERM;
    fut_wait ws_small[STACK_WAITS];
    int fired_small[STACK_WAITS];
    fut_wait *ws = ws_small;
    int *fired = fired_small;
    if (op->n > STACK_WAITS) {
        ws = weft__malloc((size_t)op->n * sizeof(*ws));
        fired = weft__malloc((size_t)op->n * sizeof(*fired));
        if (!ws || !fired) {
            free(ws);
            free(fired);
            return -ENOMEM;
        }
    }
    op->ws = ws;
    op->give_up = true;
    op->obj = op->fs;
    if (op->statuses)
        for (int i = 0; i < op->n; i++)
            op->statuses[i] = -EINPROGRESS;
    int rc;
    if (weft__task_cancelled(t)) {
        /* A cancellation point even when the answer is known: give up on
         * every future at once. */
        for (int i = 0; i < op->n; i++)
            ws[i] = (fut_wait){.taken = false};
        give_up(op);
        rc = -ECANCELED;
    } else {
        rc = wait_futures(op, fired, deadline);
    }
    if (ws != ws_small) {
        free(ws);
        free(fired);
    }
    return rc;
}

int weft_future_all(weft_future *const *fs, int n, weft_time deadline)
{
    wait_op op = {.pol = &weft__policy_fail_fast, .fs = fs, .n = n};
    return combine(&op, deadline);
}

int weft_future_all_settled(weft_future *const *fs, int n, int *statuses,
                            weft_time deadline)
{
    wait_op op = {
        .pol = &weft__policy_collect, .fs = fs, .n = n, .statuses = statuses};
    return combine(&op, deadline);
}

int weft_future_any(weft_future *const *fs, int n, weft_time deadline)
{
    wait_op op = {.pol = &weft__policy_first, .fs = fs, .n = n};
    return combine(&op, deadline);
}

int weft_future_race(weft_future *const *fs, int n, weft_time deadline)
{
    wait_op op = {.pol = &weft__policy_race, .fs = fs, .n = n};
    return combine(&op, deadline);
}

/* ---- weft_future_spawn ---- */

/* The future's canceller: cancels the wrapper's scope if it is open, and
 * remembers the request for a scope not opened yet. */
static void spawn_cancel(void *arg)
{
    weft_future *f = arg;
    fut_lock(f);
    f->task_cancel = true;
    if (f->task_scope)
        weft_scope_cancel(f->task_scope);
    fut_unlock(f);
}

/* The wrapper task; it holds its own reference to f until f is settled. */
static int spawn_body(void *arg)
{
    weft_future *f = arg;
    weft_scope *s;
    int st = weft_scope_open(&s, NULL);
    if (st == 0) {
        fut_lock(f);
        f->task_scope = s;
        bool cancel = f->task_cancel;
        fut_unlock(f);
        if (cancel)
            weft_scope_cancel(s);
        /* A task cancelled before it started does not run fn. */
        st = weft_scope_cancelled(s) ? -ECANCELED : f->task_fn(f->task_arg);
        /* fn's own scopes, if it left any open, then fn's children */
        weft__scope_join_above(weft__current(), s);
        weft_scope_join(s);
        fut_lock(f);
        f->task_scope = NULL;
        fut_unlock(f);
        weft_scope_free(s);
    }
    /* -EINPROGRESS means "not settled yet" and cannot be a rejection (the
     * reject would fail and leave f pending for good): it settles f as a
     * plain failure. */
    if (st == -EINPROGRESS)
        st = -EIO;
    if (st >= 0)
        weft_future_resolve(f, &st);
    else
        weft_future_reject(f, st);
    weft_future_unref(f);
    return 0; /* the status is the future's, not the scope's */
}

int weft_future_spawn(weft_scope *s, weft_fn fn, void *arg, weft_future **out)
{
    if (!out || !fn)
        return -EINVAL;
    if (!weft__current())
        return -EPERM;
    weft_future *f;
    int rc = weft_future_new(&f, sizeof(int));
    if (rc)
        return rc;
    f->task_fn = fn;
    f->task_arg = arg;
    f->cancel_fn = spawn_cancel;
    f->cancel_arg = f;
    weft_future_ref(f); /* the wrapper's */
    rc = weft_spawn_at(s, spawn_body, f, NULL, __FILE__, __LINE__);
    if (rc < 0) {
        weft_future_unref(f);
        weft_future_unref(f);
        *out = NULL;
        return rc;
    }
    *out = f;
    return rc;
}

/* ---- weft_gather_tasks ---- */

typedef struct gather_item {
    weft_fn fn;
    void *arg;
    int status; /* -ECANCELED until the task has run */
} gather_item;

/* Each task records its status itself: a WEFT_FAIL_FAST scope keeps only
 * its first error, and a task never spawned (the scope was cancelled
 * first) has none. A task cancelled before it started does not run fn. */
static int gather_task(void *arg)
{
    gather_item *it = arg;
    it->status = weft_cancelled() ? -ECANCELED : it->fn(it->arg);
    return it->status;
}

int weft_gather_tasks(weft_policy policy, int n, const weft_fn *fns,
                      void *const *args, int *statuses, int *winner,
                      weft_time deadline)
{
    if (n < 1 || n > MAX_GATHER || !fns || deadline < 0)
        return -EINVAL;
    if (policy != WEFT_FAIL_FAST && policy != WEFT_COLLECT &&
        policy != WEFT_FIRST && policy != WEFT_RACE)
        return -EINVAL;
    for (int i = 0; i < n; i++)
        if (!fns[i])
            return -EINVAL;
    if (!weft__current())
        return -EPERM;
    gather_item *items = weft__malloc((size_t)n * sizeof(*items));
    if (!items)
        return -ENOMEM;
    for (int i = 0; i < n; i++)
        items[i] = (gather_item){fns[i], args ? args[i] : NULL, -ECANCELED};
    weft_scope *s;
    int rc = weft__scope_open_until(&s, policy, deadline);
    if (rc) {
        free(items);
        return rc;
    }
    int spawn_err = 0;
    for (int i = 0; i < n; i++) {
        int idx = weft_spawn(s, gather_task, &items[i]);
        if (idx == -ECANCELED)
            break; /* the rest stay -ECANCELED */
        if (idx < 0) {
            spawn_err = idx; /* -ENOMEM: stop the ones started */
            weft_scope_cancel(s);
            break;
        }
    }
    rc = weft_scope_join(s);
    if (spawn_err)
        rc = spawn_err;
    if (winner) {
        int win = -1;
        if (policy == WEFT_FIRST || policy == WEFT_RACE) {
            win = weft_scope_winner(s);
            if (win < 0)
                win = -1;
        }
        *winner = win;
    }
    if (statuses)
        for (int i = 0; i < n; i++)
            statuses[i] = items[i].status;
    weft_scope_free(s);
    free(items);
    return rc;
}
