/* SPDX-License-Identifier: MIT */
/*
 * Resource pools: weft_pool_*.
 *
 * A pool holds up to max_size resources, each in one of its entries (an
 * array made with the pool): free (no resource), creating (an acquire is
 * making one), idle (on the idle stack) or borrowed. Everything is under
 * one spinlock; the callbacks (create, validate, reset, destroy, on_leak)
 * run outside it, on the task that called into the pool.
 *
 * Hand-over. Acquires that find nothing wait in a FIFO queue of the wait
 * layer (weft__wait, kind weft__wk_pool), and are served by dispatch:
 * whoever makes something available (a release, a broken return that
 * frees a place, a creation that ends) claims the first waiter under the
 * lock and hands it, still under the lock, either an idle entry (marked
 * borrowed) or a free place to make one in (the entry marked creating).
 * The claim is the wait layer's: a waiter whose deadline or cancel woke it
 * first cannot be claimed, is skipped, and was handed nothing; a claimed
 * one owns what it was handed, whatever happens to its task after. So no
 * resource or place is ever lost between a grant and its waiter: the
 * waiter either has it or never had it.
 *
 * Why FIFO, and no barging: an acquire takes an idle resource or a free
 * place itself only when nobody waits; otherwise it queues behind. A task
 * that releases and acquires in a loop cannot keep a resource from the
 * tasks waiting for it, and the longest wait is bounded by the queue ahead
 * (bb8 and HikariCP users reported starvation under bursts where a new
 * caller overtook the queue).
 *
 * Cancellation cannot leak. A waiter woken by its deadline or a cancel
 * was not claimed: it holds nothing. A claimed waiter whose task is then
 * cancelled (the grant and the cancel raced, and the grant won) gives
 * what it was handed back, through the release path (so the next waiter
 * gets it), and returns -ECANCELED; the same for a creation that succeeds
 * after a cancel. A create that fails (a cancelled connect, say) frees its
 * place, and dispatch offers it to the next waiter.
 *
 * Failed creations. create's error is the result of the acquire that
 * called it, at once. The next creation waits for a backoff (opts.backoff,
 * weft_backoff's delays), and while creations fail only one is tried at a
 * time. Nobody runs in the background: the first waiter ("the prober")
 * waits with a deadline at the end of the backoff and, woken by it, makes
 * the next try itself; when it leaves (its own deadline, a cancel) or its
 * try fails, the next first waiter is handed the role (W_RETRY). An
 * acquire whose deadline passes while creations fail returns the last
 * creation's error instead of -ETIMEDOUT.
 *
 * Upkeep (idle timeout, max lifetime, leaks) is done lazily, under the
 * lock, on every acquire, release and stats_get: expired idle resources
 * are taken out there and destroyed after unlocking; borrows older than
 * the leak threshold are told, once each.
 */
#include "pool/pool.h"
#include "util/fault.h"
#include "wait/wait.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const weft__wait_kind weft__wk_pool = {WEFT_WAIT_POOL, "pool"};

enum { E_FREE, E_CREATING, E_IDLE, E_BORROWED, E_RETURNING };
/* What a claimed waiter was handed (in its waiter's n; elem: the entry). */
enum { W_RES = 1, W_CREATE = 2, W_RETRY = 3 };

#define NAME_COPY 32 /* bytes of a borrower's name kept for leak reports */
#define BATCH 16     /* idle resources destroyed per lock section */
#define LEAKS 4      /* leaks told per lock section */
#define DEFAULT_MAX 10
#define DEFAULT_BASE (100 * WEFT_MSEC)
#define DEFAULT_CAP (10 * WEFT_SEC)

typedef struct entry {
    void *res;
    struct entry *next; /* the idle stack, or the free list */
    int state;          /* E_* */
    int64_t created;    /* when its resource was made */
    int64_t idle_since; /* idle: since when */
    int64_t since;      /* borrowed: since when */
    uint64_t holder;    /* borrowed: the task's id */
    char holder_name[NAME_COPY];
    const char *file; /* borrowed: the acquire's call site */
    int line;
    bool leak_told;
} entry;

struct weft_pool {
    weft__lock lock; /* guards everything below but o, retry, name, ents'
                      * count */
    weft_pool_opts o;
    weft_retry retry;
    char name[48];
    int cap; /* max_size */
    entry *ents;
    entry *idle;   /* the idle stack, most recently returned first */
    entry *free_e; /* entries without a resource */
    int size, nidle, in_use, creating, waiting;
    int fails; /* creations failed in a row */
    int last_err;
    int64_t retry_at; /* while fails: no creation starts before this */
    bool bo_ready;
    weft_backoff bo;
    bool closed;
    weft__waitq q;       /* acquires waiting, FIFO */
    weft__waitq closers; /* weft_pool_close waiting for the borrowed */
    int64_t acquired, timeouts, created, destroyed, create_failures, leaks;
};

const char *weft__pool_name(const void *obj)
{
    return obj ? ((const weft_pool *)obj)->name : "";
}

/* ---- what is done after unlocking: destroys, leak reports ---- */

typedef struct after {
    void (*destroy)(void *ctx, void *res);
    void (*on_leak)(const weft_pool_leak_info *info, void *ctx);
    void *ctx;
    void *dead[BATCH];
    int ndead;
    weft_pool_leak_info leak[LEAKS];
    char names[LEAKS][NAME_COPY];
    int nleak;
    weft__chain woken; /* claimed waiters, finished with 0 */
} after;

static void after_init(weft_pool *p, after *a)
{
    a->destroy = p->o.destroy;
    a->on_leak = p->o.on_leak;
    a->ctx = p->o.ctx;
    a->ndead = 0;
    a->nleak = 0;
    weft__chain_init(&a->woken);
}

static void leak_print(const weft_pool_leak_info *i)
{
    fprintf(stderr,
            "weft: pool %s%s%s: resource %p held for %.3f s by task %" PRIu64
            "%s%s, acquired at %s:%d\n",
            i->pool[0] ? "\"" : "", i->pool[0] ? i->pool : "(unnamed)",
            i->pool[0] ? "\"" : "", i->res, (double)i->held_ns / 1e9,
            i->task_id, i->task_name[0] ? " " : "", i->task_name,
            i->file ? i->file : "?", i->line);
}

/* Without the lock: wakes, destroys and reports what the section left. */
static void after_run(after *a)
{
    weft__wake_chain(a->woken.head, 0);
    for (int i = 0; i < a->ndead; i++)
        a->destroy(a->ctx, a->dead[i]);
    for (int i = 0; i < a->nleak; i++) {
        a->leak[i].task_name = a->names[i];
        if (a->on_leak)
            a->on_leak(&a->leak[i], a->ctx);
        else
            leak_print(&a->leak[i]);
    }
}

/* ---- under the lock ---- */

static entry *take_idle(weft_pool *p)
{
    entry *e = p->idle;
    p->idle = e->next;
    p->nidle--;
    e->state = E_BORROWED;
    p->in_use++;
    return e;
}

/* A free place, for a creation. */
static entry *reserve(weft_pool *p)
{
    entry *e = p->free_e;
    WEFT_ASSERT_MSG(e != NULL, "a pool under max_size without a free entry");
    p->free_e = e->next;
    e->state = E_CREATING;
    e->res = NULL;
    p->size++;
    p->creating++;
    return e;
}

/* Its resource is gone (or never came): the place is free again. */
static void unslot(weft_pool *p, entry *e)
{
    e->state = E_FREE;
    e->res = NULL;
    e->next = p->free_e;
    p->free_e = e;
    p->size--;
}

static void kill_entry(weft_pool *p, entry *e, after *a)
{
    WEFT_ASSERT(a->ndead < BATCH);
    a->dead[a->ndead++] = e->res;
    unslot(p, e);
    p->destroyed++;
}

static bool too_old(const weft_pool *p, const entry *e, int64_t now)
{
    return p->o.max_lifetime_ns && now - e->created >= p->o.max_lifetime_ns;
}

static bool may_create(const weft_pool *p, int64_t now)
{
    if (p->closed || p->size >= p->cap)
        return false;
    return p->fails == 0 || (p->creating == 0 && now >= p->retry_at);
}

/* Hands what there is to the waiters, first come first served. */
static void dispatch(weft_pool *p, int64_t now, after *a)
{
    while (p->q.head) {
        bool idle = p->idle != NULL;
        if (!idle && !may_create(p, now))
            return;
        weft__waiter *w = weft__waitq_claim(&p->q);
        if (!w)
            return;
        p->waiting--;
        w->elem = idle ? take_idle(p) : reserve(p);
        w->n = idle ? W_RES : W_CREATE;
        weft__chain_add(&a->woken, w);
    }
}

/* Creations are failing and a place is free: the first waiter becomes the
 * prober (woken to wait again at the front, until the backoff's end). */
static void pass_probe(weft_pool *p, after *a)
{
    if (!p->fails || p->closed || p->size >= p->cap || p->creating)
        return;
    weft__waiter *w = weft__waitq_claim(&p->q);
    if (!w)
        return;
    p->waiting--;
    w->elem = NULL;
    w->n = W_RETRY;
    weft__chain_add(&a->woken, w);
}

static void wake_closers(weft_pool *p, after *a)
{
    if (!p->closed || p->in_use || p->creating)
        return;
    weft__waiter *w;
    while ((w = weft__waitq_claim(&p->closers)) != NULL)
        weft__chain_add(&a->woken, w);
}

/* Takes out expired idle resources and notes borrows past the leak
 * threshold. */
static void upkeep(weft_pool *p, int64_t now, after *a)
{
    for (entry **pp = &p->idle; *pp && a->ndead < BATCH;) {
        entry *e = *pp;
        bool idle_out = p->o.idle_timeout_ns &&
                        now - e->idle_since >= p->o.idle_timeout_ns &&
                        p->size > p->o.min_size;
        if (idle_out || too_old(p, e, now)) {
            *pp = e->next;
            p->nidle--;
            kill_entry(p, e, a);
        } else {
            pp = &e->next;
        }
    }
    int64_t th = p->o.leak_threshold_ns;
    if (!th)
        return;
    for (int i = 0; i < p->cap && a->nleak < LEAKS; i++) {
        entry *e = &p->ents[i];
        if ((e->state != E_BORROWED && e->state != E_RETURNING) ||
            e->leak_told || now - e->since < th)
            continue;
        e->leak_told = true;
        p->leaks++;
        memcpy(a->names[a->nleak], e->holder_name, NAME_COPY);
        a->leak[a->nleak++] = (weft_pool_leak_info){.pool = p->name,
                                                    .res = e->res,
                                                    .task_id = e->holder,
                                                    .file = e->file,
                                                    .line = e->line,
                                                    .since = e->since,
                                                    .held_ns = now - e->since};
    }
}

/* A borrowed (or returning) entry comes back: idle, or destroyed. */
static void put_back(weft_pool *p, entry *e, bool broken, int64_t now, after *a)
{
    p->in_use--;
    if (broken || p->closed || too_old(p, e, now)) {
        kill_entry(p, e, a);
    } else {
        e->state = E_IDLE;
        e->idle_since = now;
        e->next = p->idle;
        p->idle = e;
        p->nidle++;
    }
    dispatch(p, now, a);
    pass_probe(p, a);
    wake_closers(p, a);
}

/* ---- making and freeing ---- */

int weft_pool_new(weft_pool **out, const weft_pool_opts *opts)
{
    if (!out || !opts || !opts->create || !opts->destroy)
        return -EINVAL;
    int max = opts->max_size ? opts->max_size : DEFAULT_MAX;
    if (max < 1 || opts->min_size < 0 || opts->min_size > max ||
        opts->idle_timeout_ns < 0 || opts->max_lifetime_ns < 0 ||
        opts->leak_threshold_ns < 0)
        return -EINVAL;
    weft_retry r = {.base_ns = DEFAULT_BASE, .jitter = WEFT_JITTER_FULL};
    if (opts->backoff) {
        r = *opts->backoff;
        if (r.base_ns < 0 || r.cap_ns < 0 || (int)r.jitter < 0 ||
            r.jitter > WEFT_JITTER_DECORRELATED)
            return -EINVAL;
    }
    r.max_attempts = 0;
    r.budget_ns = 0;
    r.attempt_timeout_ns = 0;
    r.retryable = NULL;
    r.on_retry = NULL;
    if (!r.cap_ns)
        r.cap_ns = DEFAULT_CAP;
    weft_pool *p = weft__calloc(1, sizeof(*p));
    entry *ents = weft__calloc((size_t)max, sizeof(*ents));
    if (!p || !ents) {
        free(p);
        free(ents);
        return -ENOMEM;
    }
    p->o = *opts;
    p->o.max_size = max;
    p->o.backoff = NULL;
    p->o.name = p->name;
    p->retry = r;
    if (opts->name)
        snprintf(p->name, sizeof p->name, "%s", opts->name);
    p->cap = max;
    p->ents = ents;
    for (int i = max - 1; i >= 0; i--) {
        ents[i].next = p->free_e;
        p->free_e = &ents[i];
    }
    *out = p;
    return 0;
}

int weft_pool_free(weft_pool *p)
{
    if (!p)
        return -EINVAL;
    weft__lock_acquire(&p->lock);
    bool busy = p->size || p->waiting || p->closers.head;
    weft__lock_release(&p->lock);
    if (busy)
        return -EBUSY;
    free(p->ents);
    free(p);
    return 0;
}

/* ---- acquire ---- */

/* A creation failed with rc (under the lock): the backoff moves on. */
static void create_failed(weft_pool *p, int rc, int64_t now)
{
    p->create_failures++;
    p->fails++;
    p->last_err = rc;
    if (!p->bo_ready) {
        weft_backoff_init(&p->bo, &p->retry);
        p->bo_ready = true;
    }
    int64_t d = weft_backoff_next(&p->bo);
    p->retry_at = weft__add_sat(now, d > 0 ? d : 0);
}

/* e was made for us (E_CREATING): runs create. 0 with e borrowed, or an
 * error with e's place freed. */
static int make(weft_pool *p, entry *e)
{
    void *r = NULL;
    int rc = p->o.create(p->o.ctx, &r);
    if (rc > 0 || (rc == 0 && !r))
        rc = -EINVAL; /* create must return 0 and a resource, or -errno */
    int64_t now = weft_now();
    after a;
    weft__lock_acquire(&p->lock);
    after_init(p, &a);
    p->creating--;
    if (rc == 0) {
        p->created++;
        p->fails = 0;
        p->last_err = 0;
        p->bo_ready = false;
        e->res = r;
        e->created = now;
        e->state = E_BORROWED;
        p->in_use++;
        if (p->closed) { /* closed while it was being made */
            put_back(p, e, true, now, &a);
            rc = -ESHUTDOWN;
        } else {
            dispatch(p, now, &a); /* others may make theirs now */
        }
    } else {
        /* A create cut short by our own cancel says nothing of the
         * server: no failure counted, no backoff. */
        if (rc != -ECANCELED || !weft__task_cancelled(weft__current()))
            create_failed(p, rc, now);
        unslot(p, e);
        dispatch(p, now, &a);
        pass_probe(p, &a);
        wake_closers(p, &a);
    }
    weft__lock_release(&p->lock);
    after_run(&a);
    return rc;
}

/* Gives back what an acquire was handed but will not keep (its task was
 * cancelled as it came, or it failed validation: broken). */
static void hand_back(weft_pool *p, entry *e, bool broken)
{
    int64_t now = weft_now();
    after a;
    weft__lock_acquire(&p->lock);
    after_init(p, &a);
    put_back(p, e, broken, now, &a);
    weft__lock_release(&p->lock);
    after_run(&a);
}

/* What a look at the pool ends with, besides 0 (GOT: *e is ours) and an
 * error: look again (first in line if front was set). */
enum { AGAIN = 1 };

/* A waiter that nobody claimed (rc: -ETIMEDOUT or -ECANCELED) is off the
 * queue: uncounted, it passes the prober's role on, or, woken at the
 * backoff's end as the prober (probe), looks again first in line. Returns
 * AGAIN, or the acquire's error: the last creation's while creations fail
 * and the deadline passed. */
static int left_line(weft_pool *p, int rc, bool probe, bool *front)
{
    bool again = probe && rc == -ETIMEDOUT;
    after a;
    weft__lock_acquire(&p->lock);
    after_init(p, &a);
    p->waiting--;
    int err = rc;
    if (!again) {
        pass_probe(p, &a);
        if (rc == -ETIMEDOUT) {
            p->timeouts++;
            if (p->fails)
                err = p->last_err;
        }
    }
    weft__lock_release(&p->lock);
    after_run(&a);
    if (again)
        *front = true;
    return again ? AGAIN : err;
}

/* Under the lock, nothing to take: waits for a hand-over. The prober
 * (first in line while creations fail with a place free) wakes at the
 * backoff's end to try again. Returns 0 with *e handed to us (ours
 * whatever comes), AGAIN, or an error; the lock released. */
static int wait_turn(weft_pool *p, int64_t now, weft_time deadline, bool *front,
                     entry **e)
{
    bool probe = p->fails && !p->creating && p->size < p->cap &&
                 (!p->q.head || *front) && p->retry_at > now &&
                 p->retry_at < deadline;
    weft__waiter self;
    weft__waiter_init(&self, NULL, 0);
    p->waiting++;
    int rc = weft__wait(
        &self, &(weft__wait_spec){.kind = &weft__wk_pool,
                                  .obj = p,
                                  .lock = &p->lock,
                                  .q = &p->q,
                                  .deadline = probe ? p->retry_at : deadline,
                                  .flags = *front ? WEFT__WAIT_FRONT : 0});
    if (rc == 0 && self.n == W_RETRY) {
        *front = true;
        return AGAIN;
    }
    if (rc == 0) {
        *e = self.elem;
        return 0;
    }
    if (weft__wait_unclaimed(rc))
        return left_line(p, rc, probe, front);
    return rc; /* -ESHUTDOWN: closed while we waited */
}

/* One look: an idle resource or a free place to make one in, taken if
 * nobody waits ahead of us (or front), else a wait in line. Returns 0 with
 * *e borrowed or E_CREATING for us, AGAIN, or an error. */
static int look(weft_pool *p, weft_time deadline, bool *front, entry **e)
{
    int64_t now = weft_now();
    after a;
    weft__lock_acquire(&p->lock);
    if (p->closed) {
        weft__lock_release(&p->lock);
        return -ESHUTDOWN;
    }
    after_init(p, &a);
    upkeep(p, now, &a);
    if (a.ndead) { /* places freed: the ones ahead of us first */
        dispatch(p, now, &a);
        pass_probe(p, &a);
    }
    *e = NULL;
    if (!p->q.head || *front) {
        if (p->idle)
            *e = take_idle(p);
        else if (may_create(p, now))
            *e = reserve(p);
    }
    if (!*e && !a.ndead && !a.nleak && !a.woken.head)
        return wait_turn(p, now, deadline, front, e);
    weft__lock_release(&p->lock);
    after_run(&a); /* before any wait: destroys, reports, wakes */
    return *e ? 0 : AGAIN;
}

/* What a look got made ready: made (E_CREATING), or checked (an idle one:
 * too old, or validate says no, and it is destroyed). Returns 0, AGAIN
 * (first in line), or create's error. */
static int make_ready(weft_pool *p, entry *e, bool *front)
{
    if (e->state == E_CREATING)
        return make(p, e);
    WEFT_ASSERT(e->state == E_BORROWED);
    if (too_old(p, e, weft_now()) ||
        (p->o.validate && p->o.validate(p->o.ctx, e->res) != 0)) {
        hand_back(p, e, true);
        *front = true;
        return AGAIN;
    }
    return 0;
}

/* e is t's now: notes the borrow for leak reports. */
static void *stamp(weft_pool *p, entry *e, weft_task *t, const char *file,
                   int line)
{
    const char *name = ld_rlx(&t->name);
    weft__lock_acquire(&p->lock);
    e->since = weft_now();
    e->holder = ld_rlx(&t->id);
    snprintf(e->holder_name, NAME_COPY, "%s", name ? name : "");
    e->file = file;
    e->line = line;
    e->leak_told = false;
    p->acquired++;
    void *res = e->res;
    weft__lock_release(&p->lock);
    return res;
}

int weft_pool_acquire_at(weft_pool *p, void **res, const char *file, int line,
                         weft_time deadline)
{
    if (!p || !res)
        return -EINVAL;
    weft_task *t = weft__current();
    if (!t)
        return -EPERM;
    bool front = false; /* served already (a retry): keep the first place */
    for (;;) {
        int rc = weft__checkpoint();
        if (rc)
            return rc;
        entry *e = NULL;
        rc = look(p, deadline, &front, &e);
        if (rc == 0)
            rc = make_ready(p, e, &front);
        if (rc == AGAIN)
            continue;
        if (rc)
            return rc;
        /* Ours. A cancel that came meanwhile: give it back, hold nothing. */
        if (weft__task_cancelled(t)) {
            hand_back(p, e, false);
            return -ECANCELED;
        }
        *res = stamp(p, e, t, file, line);
        return 0;
    }
}

/* ---- filling to min_size ---- */

int weft_pool_fill(weft_pool *p, weft_time deadline)
{
    if (!p)
        return -EINVAL;
    /* Borrows until min_size exist (an idle one first, then new ones,
     * as any acquire), then gives them all back: what exists then is
     * idle, and the FIFO hand-over and the counts stay the acquire's. */
    int want = p->o.min_size;
    void **held = want ? weft__calloc((size_t)want, sizeof(*held)) : NULL;
    if (want && !held)
        return -ENOMEM;
    int n = 0, rc = 0;
    for (;;) {
        weft_pool_stats st;
        weft_pool_stats_get(p, &st);
        if (st.size >= want || n == want)
            break;
        rc = weft_pool_acquire_at(p, &held[n], __FILE__, __LINE__, deadline);
        if (rc)
            break;
        n++;
    }
    for (int i = 0; i < n; i++)
        weft_pool_release(p, held[i]);
    free(held);
    return rc;
}

/* ---- release ---- */

static entry *find_borrowed(weft_pool *p, const void *res)
{
    for (int i = 0; i < p->cap; i++)
        if (p->ents[i].state == E_BORROWED && p->ents[i].res == res)
            return &p->ents[i];
    return NULL;
}

static int give(weft_pool *p, void *res, bool broken)
{
    if (!p || !res)
        return -EINVAL;
    if (!weft__current())
        return -EPERM;
    weft__lock_acquire(&p->lock);
    entry *e = find_borrowed(p, res);
    if (!e) {
        weft__lock_release(&p->lock);
        return -EINVAL;
    }
    e->state = E_RETURNING; /* still in use, but not given back twice */
    weft__lock_release(&p->lock);
    if (!broken && p->o.reset && p->o.reset(p->o.ctx, res) != 0)
        broken = true;
    int64_t now = weft_now();
    after a;
    weft__lock_acquire(&p->lock);
    after_init(p, &a);
    upkeep(p, now, &a);
    if (a.ndead == BATCH) { /* room for ours */
        weft__lock_release(&p->lock);
        after_run(&a);
        weft__lock_acquire(&p->lock);
        after_init(p, &a);
    }
    put_back(p, e, broken, now, &a);
    weft__lock_release(&p->lock);
    after_run(&a);
    return 0;
}

int weft_pool_release(weft_pool *p, void *res)
{
    return give(p, res, false);
}

int weft_pool_release_broken(weft_pool *p, void *res)
{
    return give(p, res, true);
}

/* ---- close, stats ---- */

int weft_pool_close(weft_pool *p, weft_time deadline)
{
    if (!p)
        return -EINVAL;
    if (!weft__current())
        return -EPERM;
    /* Not a checkpoint at entry: a cleanup path in a cancelled scope still
     * closes, and only the wait for the borrowed ones is cut short. */
    for (;;) {
        after a;
        weft__chain shut;
        weft__chain_init(&shut);
        weft__lock_acquire(&p->lock);
        after_init(p, &a);
        if (!p->closed) {
            p->closed = true;
            weft__waiter *w;
            while ((w = weft__waitq_claim(&p->q)) != NULL) {
                p->waiting--;
                weft__chain_add(&shut, w);
            }
        }
        while (p->idle && a.ndead < BATCH) {
            entry *e = p->idle;
            p->idle = e->next;
            p->nidle--;
            kill_entry(p, e, &a);
        }
        if (a.ndead || shut.head) {
            weft__lock_release(&p->lock);
            weft__wake_chain(shut.head, -ESHUTDOWN);
            after_run(&a);
            continue;
        }
        if (!p->in_use && !p->creating) {
            weft__lock_release(&p->lock);
            return 0;
        }
        weft__waiter self;
        weft__waiter_init(&self, NULL, 0);
        int rc = weft__wait(&self, &(weft__wait_spec){.kind = &weft__wk_pool,
                                                      .obj = p,
                                                      .lock = &p->lock,
                                                      .q = &p->closers,
                                                      .deadline = deadline});
        if (rc)
            return rc;
    }
}

int weft_pool_stats_get(weft_pool *p, weft_pool_stats *out)
{
    if (!p || !out)
        return -EINVAL;
    int64_t now = weft_now();
    after a;
    weft__lock_acquire(&p->lock);
    after_init(p, &a);
    int64_t th = p->o.leak_threshold_ns;
    if (th) {
        /* Leaks only: destroying needs a task, and this may be a thread. */
        entry *idle = p->idle;
        p->idle = NULL;
        upkeep(p, now, &a);
        p->idle = idle;
    }
    *out = (weft_pool_stats){.size = p->size,
                             .idle = p->nidle,
                             .in_use = p->in_use,
                             .creating = p->creating,
                             .waiting = p->waiting,
                             .acquired = p->acquired,
                             .timeouts = p->timeouts,
                             .created = p->created,
                             .destroyed = p->destroyed,
                             .create_failures = p->create_failures,
                             .leaks = p->leaks,
                             .last_create_error = p->last_err};
    weft__lock_release(&p->lock);
    after_run(&a);
    return 0;
}
