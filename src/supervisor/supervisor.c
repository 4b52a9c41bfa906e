/* SPDX-License-Identifier: MIT */
/*
 * Supervisors (weft.h section 13), in the manner of Erlang/OTP's.
 *
 * A supervisor is a task that owns two scopes, both of the internal
 * policy WEFT__POLICY_SUPERVISE (policy.h: children independent, a failure
 * cancels nobody and is reported to nobody, nothing kept per child):
 *
 * - `watch`, opened first, where one small task (the watcher) sleeps until
 *   the scope is cancelled: by a cancel of the supervisor's own scope
 *   (which reaches it) or by the supervisor at its end. It then asks the
 *   supervisor to stop. This is how the supervisor hears of its own cancel
 *   without being cut short by it.
 * - `kids`, opened inside it with a shield, where the children run. The
 *   shield keeps an enclosing cancel from reaching the children all at
 *   once: the supervisor stops them itself, in reverse start order, each
 *   with its stop hook and its shutdown time, and since the supervisor's
 *   own current scope is `kids`, its timers work during that shutdown.
 *
 * Each child runs as a task of `kids` spawned with a task handle (for its
 * cancel), through child_main: it runs the child's function, stores the
 * status in the child's record and links the record into the supervisor's
 * exit list under the supervisor's lock, waking the supervisor if it is
 * parked. A child posts one exit per start, and the supervisor starts it
 * again only after it has taken that exit in, so the record, made once per
 * child, serves every restart: a restart allocates nothing of the
 * supervisor's (the task slot and the handle record come from their pools).
 *
 * The supervisor task's loop waits (one wait queue, `wq`, and "something
 * happened": an exit, a request, a stop) until the earliest backoff
 * deadline; takes the exits in (a child's state becomes EXITED and its
 * record goes on a pending list, FIFO), handles them (restart, give up,
 * escalate), then the requests of other tasks (start_child,
 * terminate_child: each caller waits on its request's queue for the
 * reply), then starts the children whose backoff is over.
 *
 * Stopping a child (at shutdown, for a group restart, terminate_child)
 * waits for its exit with the same wait; exits of other children that come
 * meanwhile go on the pending list, to be handled afterwards. A child
 * that exited and whose exit is still pending when it is to be stopped
 * is simply taken off the list: its exit is the stop's (OTP ignores the
 * EXIT of a child it has terminated the same way).
 *
 * The restart intensity is OTP's sliding window: the instants of the
 * restarts within period_ns; a restart that makes them more than
 * `intensity` makes the supervisor give up. A group restart (one_for_all,
 * rest_for_one) is one restart, as in OTP.
 *
 * Everything but the lock's fields (exits, requests, stop, closed, done)
 * and the published counts is the supervisor task's own.
 */
#include "actor/actor.h"
#include "scope/struct.h"
#include "util/fault.h"
#include "wait/wait.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* Its wait kind (wait.h): its loop, or a call waiting for it; the object
 * is the supervisor. Declared here, as this layer has no header, and
 * where the public names are kept (trace.c). */
extern const weft__wait_kind weft__wk_supervisor;
const weft__wait_kind weft__wk_supervisor = {WEFT_WAIT_SUPERVISOR,
                                             "supervisor"};

/* OTP's defaults (intensity 1, period 5 s), when both are 0. */
#define DEFAULT_INTENSITY 1
#define DEFAULT_PERIOD (5 * WEFT_SEC)
/* A restart window of at most this many instants is allocated at the
 * start; a larger one grows as needed. */
#define RING_PREALLOC 4096

enum {
    C_IDLE = 0, /* not running, nothing scheduled */
    C_RUNNING,  /* its task runs (its exit not taken in yet) */
    C_EXITED,   /* its exit was taken in and waits on the pending list */
    C_BACKOFF,  /* to be started at restart_at */
};

typedef struct child {
    struct child *prev, *next; /* start order */
    struct child *exit_next;   /* the exit list, under the supervisor's lock */
    struct child *pend_next;   /* the pending list */
    weft_sup *sup;
    weft_child_spec spec;
    weft_task_handle h; /* while RUNNING (released when the exit comes in) */
    int state;          /* C_* */
    int status;         /* the last exit's, stored by the child's task */
    bool pending;
    weft_time started;    /* when it was last started */
    weft_time restart_at; /* C_BACKOFF: when */
    weft_backoff bo;
    weft_actor *actor; /* an actor child's, from its start to its exit;
                        * under the supervisor's lock */
} child;

enum { REQ_START = 0, REQ_TERMINATE = 1 };

/* A call of another task, on that task's stack. */
typedef struct sup_req {
    struct sup_req *next;
    int kind;
    const weft_child_spec *spec; /* REQ_START */
    const char *name;            /* REQ_TERMINATE */
    bool taken;                  /* the supervisor has it */
    bool done;                   /* rc is the reply */
    int rc;
    weft__waitq q; /* the caller, waiting for the reply */
} sup_req;

struct weft_sup {
    weft__lock lock;
    /* ---- under the lock ---- */
    weft__waitq wq; /* the supervisor task's wait */
    child *exits;   /* posted exits, newest first */
    sup_req *reqs, **reqs_tail;
    sup_req *cur_req; /* the request being handled; NULL if its caller left */
    bool stop_req;    /* weft_sup_stop, or the watcher */
    bool closed;      /* stopping or stopped: requests get -ESRCH */
    bool done;        /* weft_sup_spawn's: the run returned, status set */
    int status;
    weft__waitq waiters; /* weft_sup_join_until */
    /* ---- published for weft_sup_stats_get ---- */
    _Atomic int running_pub;
    _Atomic long restarts_pub;
    /* ---- set at creation ---- */
    bool spawned; /* by weft_sup_spawn: freed by weft_sup_free */
    weft_sup_opts o;
    int intensity;  /* < 0: no limit */
    int64_t period; /* ns */
    int64_t reset;  /* backoff_reset_ns, or period */
    /* ---- the supervisor task's ---- */
    weft_task *task;
    weft_scope *kids;
    child *head, *tail;
    int nchildren;
    int running;
    long restarts;
    child *pend_head, **pend_tail;
    int nbackoff; /* children in C_BACKOFF */
    /* The restart window: instants, oldest at ring[first]. */
    weft_time *ring;
    int ring_cap, ring_n, ring_first;
};

/* ---- checks ---- */

static int spec_check(const weft_child_spec *c)
{
    if (!c || !c->name)
        return -EINVAL;
    if ((unsigned)c->restart > WEFT_TEMPORARY ||
        c->shutdown_ns < WEFT_SHUTDOWN_INFINITY)
        return -EINVAL;
    if (c->actor)
        return c->start ? -EINVAL : weft__actor_opts_check(c->actor);
    return c->start ? 0 : -EINVAL;
}

static int opts_check(const weft_sup_opts *o, int n)
{
    if ((unsigned)o->strategy > WEFT_DYNAMIC || o->period_ns < 0 ||
        o->backoff_reset_ns < 0 || o->max_children < 0 || n < 0)
        return -EINVAL;
    if (o->intensity > 0 && o->period_ns == 0)
        return -EINVAL; /* a window of no length */
    if (o->strategy == WEFT_DYNAMIC && o->max_children > 0 &&
        n > o->max_children)
        return -EINVAL;
    weft_backoff b;
    if (o->backoff && weft_backoff_init(&b, o->backoff) != 0)
        return -EINVAL;
    return 0;
}

/* ---- the children's list ---- */

static child *find_child(weft_sup *s, const char *name)
{
    for (child *c = s->head; c; c = c->next)
        if (strcmp(c->spec.name, name) == 0)
            return c;
    return NULL;
}

static child *child_new(weft_sup *s, const weft_child_spec *spec)
{
    child *c = weft__calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->sup = s;
    c->spec = *spec;
    if (s->o.backoff)
        weft_backoff_init(&c->bo, s->o.backoff); /* checked: cannot fail */
    c->prev = s->tail;
    if (s->tail)
        s->tail->next = c;
    else
        s->head = c;
    s->tail = c;
    s->nchildren++;
    return c;
}

/* Removes an idle child. */
static void child_remove(weft_sup *s, child *c)
{
    if (c->prev)
        c->prev->next = c->next;
    else
        s->head = c->next;
    if (c->next)
        c->next->prev = c->prev;
    else
        s->tail = c->prev;
    s->nchildren--;
    free(c);
}

static void pend_push(weft_sup *s, child *c)
{
    c->pend_next = NULL;
    c->pending = true;
    *s->pend_tail = c;
    s->pend_tail = &c->pend_next;
}

static child *pend_pop(weft_sup *s)
{
    child *c = s->pend_head;
    if (!c)
        return NULL;
    s->pend_head = c->pend_next;
    if (!s->pend_head)
        s->pend_tail = &s->pend_head;
    c->pending = false;
    return c;
}

static void pend_remove(weft_sup *s, child *c)
{
    if (!c->pending)
        return;
    child **p = &s->pend_head, *prev = NULL;
    while (*p != c) {
        prev = *p;
        p = &(*p)->pend_next;
    }
    *p = c->pend_next;
    if (s->pend_tail == &c->pend_next)
        s->pend_tail = prev ? &prev->pend_next : &s->pend_head;
    c->pending = false;
}

/* ---- a child's task ---- */

/* An actor child has started: the supervisor keeps a reference, for a
 * graceful stop. */
static void actor_started(void *ctx, weft_actor *a)
{
    child *c = ctx;
    weft_actor_ref(a);
    weft__lock_acquire(&c->sup->lock);
    c->actor = a;
    weft__lock_release(&c->sup->lock);
}

/* What the child's task runs: its function, or its actor. */
static int child_body(child *c)
{
    if (!c->spec.actor)
        return c->spec.start(c->spec.arg);
    int st = weft__actor_run_with(c->spec.actor, actor_started, c);
    weft__lock_acquire(&c->sup->lock);
    weft_actor *a = c->actor;
    c->actor = NULL;
    weft__lock_release(&c->sup->lock);
    if (a)
        weft_actor_unref(a);
    return st;
}

/* Wakes the supervisor if it is parked (its lock held): returns the waiter
 * to finish after unlocking, or NULL. */
static weft__waiter *poke_locked(weft_sup *s)
{
    return weft__waitq_claim(&s->wq);
}

static void finish(weft__waiter *w)
{
    if (w)
        weft__wake_finish(w->task, 0);
}

static int child_main(void *arg)
{
    child *c = arg;
    weft_sup *s = c->sup;
    int st = child_body(c);
    /* From here on the record is the supervisor's: it may start the
     * child again at once. The supervisor outlives this task (its scope
     * waits for it), so s stays valid. */
    c->status = st;
    weft__lock_acquire(&s->lock);
    c->exit_next = s->exits;
    s->exits = c;
    weft__waiter *w = poke_locked(s);
    weft__lock_release(&s->lock);
    finish(w);
    return st;
}

/* ---- the supervisor's waits ---- */

/* Takes the posted exits in (oldest first): each child is EXITED and
 * pending, its handle given up. */
static void intake(weft_sup *s, child *list)
{
    child *rev = NULL;
    while (list) {
        child *n = list->exit_next;
        list->exit_next = rev;
        rev = list;
        list = n;
    }
    while (rev) {
        child *c = rev;
        rev = rev->exit_next;
        c->state = C_EXITED;
        weft_task_detach(c->h);
        c->h = (weft_task_handle){0};
        st_rlx(&s->running_pub, --s->running);
        pend_push(s, c);
    }
}

/* Waits until something is posted (with exits_only, an exit) or the
 * deadline comes, then takes the exits in. Returns true if a stop was
 * asked for. */
static bool sup_wait(weft_sup *s, weft_time deadline, bool exits_only)
{
    weft__lock_acquire(&s->lock);
    if (!s->exits && (exits_only || (!s->reqs && !s->stop_req))) {
        weft__waiter w;
        weft__waiter_init(&w, NULL, 0);
        /* The supervisor's current scope is `kids`, which nobody cancels:
         * only a post or the deadline ends this. */
        weft__wait(&w, &(weft__wait_spec){.kind = &weft__wk_supervisor,
                                          .obj = s,
                                          .lock = &s->lock,
                                          .q = &s->wq,
                                          .deadline = deadline});
        weft__lock_acquire(&s->lock);
    }
    child *ex = s->exits;
    s->exits = NULL;
    bool stop = s->stop_req;
    weft__lock_release(&s->lock);
    intake(s, ex);
    return stop;
}

/* Waits for c's exit until the deadline: true if it came. */
static bool wait_exit(weft_sup *s, child *c, weft_time deadline)
{
    while (c->state == C_RUNNING) {
        if (deadline != WEFT_NEVER && weft_now() >= deadline)
            return false;
        sup_wait(s, deadline, true);
    }
    return true;
}

/* ---- events ---- */

/* Drops the restart instants older than the window. */
static void window_prune(weft_sup *s, weft_time now)
{
    while (s->ring_n > 0 && s->ring[s->ring_first] < now - s->period) {
        s->ring_first = (s->ring_first + 1) % s->ring_cap;
        s->ring_n--;
    }
}

static void event(weft_sup *s, weft_sup_event_kind kind, const child *c,
                  int status, int64_t delay, weft_time now)
{
    if (!s->o.on_event)
        return;
    weft_sup_event e = {
        .kind = kind,
        .supervisor = s->o.name ? s->o.name : "",
        .child = c->spec.name,
        .status = status,
        .restarts = s->ring_n,
        .delay_ns = delay,
        .at = now,
    };
    s->o.on_event(s->o.event_ctx, &e);
}

/* Counts a restart at now: false if that is one too many. */
static bool window_add(weft_sup *s, weft_time now)
{
    if (s->intensity < 0)
        return true;
    window_prune(s, now);
    if (s->ring_n == s->ring_cap) {
        /* Only past RING_PREALLOC: room for intensity + 1 instants. */
        int cap = s->ring_cap ? s->ring_cap : RING_PREALLOC / 2;
        cap = cap > INT_MAX / 2 ? INT_MAX : cap * 2;
        if (cap - 1 > s->intensity)
            cap = s->intensity + 1;
        weft_time *r = weft__malloc((size_t)cap * sizeof(*r));
        if (!r && s->ring_cap == 0)
            return true; /* no memory to count with */
        if (r) {
            for (int i = 0; i < s->ring_n; i++)
                r[i] = s->ring[(s->ring_first + i) % s->ring_cap];
            free(s->ring);
            s->ring = r;
            s->ring_cap = cap;
            s->ring_first = 0;
        } else { /* no memory: forget the oldest instant */
            s->ring_first = (s->ring_first + 1) % s->ring_cap;
            s->ring_n--;
        }
    }
    s->ring[(s->ring_first + s->ring_n) % s->ring_cap] = now;
    s->ring_n++;
    return s->ring_n <= s->intensity;
}

/* ---- starting and stopping a child ---- */

static int child_start(weft_sup *s, child *c, weft_time now)
{
    c->started = now;
    weft_spawn_opts so = {.name = c->spec.name, .handle = &c->h};
    int rc = weft__spawn(s->kids, child_main, c, &so, __FILE__, __LINE__);
    if (rc < 0)
        return rc;
    c->state = C_RUNNING;
    st_rlx(&s->running_pub, ++s->running);
    /* Let it begin before the next one starts (OTP starts children one
     * after the other): on this worker it runs first. */
    weft_yield();
    return 0;
}

/* Asks a running child to finish: an actor with WEFT_STOP_DRAIN (or a
 * cancel if it has not started yet), else its stop hook, or else a
 * cancel. Runs on the supervisor's task; the hook must not block. */
static void child_ask_stop(child *c)
{
    if (c->spec.actor) {
        weft__lock_acquire(&c->sup->lock);
        weft_actor *a = c->actor ? weft_actor_ref(c->actor) : NULL;
        weft__lock_release(&c->sup->lock);
        if (a) {
            weft_actor_stop(a, WEFT_STOP_DRAIN);
            weft_actor_unref(a);
        } else {
            weft_task_cancel(c->h);
        }
    } else if (c->spec.stop)
        c->spec.stop(c->spec.arg);
    else
        weft_task_cancel(c->h);
}

/* Stops c as at shutdown: asks it to finish, waits up to its shutdown
 * time, then cancels it and waits for it. Afterwards c is idle. */
static void child_stop(weft_sup *s, child *c)
{
    switch (c->state) {
    case C_IDLE:
        return;
    case C_BACKOFF:
        s->nbackoff--;
        c->state = C_IDLE;
        return;
    case C_EXITED: /* its exit is the stop's */
        pend_remove(s, c);
        c->state = C_IDLE;
        return;
    default:
        break;
    }
    int64_t sd = c->spec.shutdown_ns;
    if (sd == WEFT_SHUTDOWN_BRUTAL) {
        weft_task_cancel(c->h);
    } else {
        child_ask_stop(c);
        weft_time deadline = sd == WEFT_SHUTDOWN_INFINITY
                                 ? WEFT_NEVER
                                 : weft__add_sat(weft_now(), sd);
        if (!wait_exit(s, c, deadline) && c->state == C_RUNNING)
            weft_task_cancel(c->h);
    }
    wait_exit(s, c, WEFT_NEVER);
    pend_remove(s, c);
    c->state = C_IDLE;
}

/* Stops every child, last started first. */
static void stop_all(weft_sup *s)
{
    for (child *c = s->tail; c; c = c->prev)
        child_stop(s, c);
}

/* Starts the children whose backoff is over, in start order; returns 0 or
 * a spawn's error. Sets *next to the earliest backoff still pending. */
static int start_due(weft_sup *s, weft_time *next)
{
    *next = WEFT_NEVER;
    if (s->nbackoff == 0)
        return 0;
    weft_time now = weft_now();
    for (child *c = s->head; c; c = c->next) {
        if (c->state != C_BACKOFF)
            continue;
        if (c->restart_at > now) {
            if (c->restart_at < *next)
                *next = c->restart_at;
            continue;
        }
        s->nbackoff--;
        c->state = C_IDLE;
        int rc = child_start(s, c, now);
        if (rc)
            return rc;
    }
    return 0;
}

/* Starts c now (delay 0) or schedules it. */
static int child_restart(weft_sup *s, child *c, int64_t delay, weft_time now)
{
    if (delay == 0)
        return child_start(s, c, now);
    c->state = C_BACKOFF;
    c->restart_at = weft__add_sat(now, delay);
    s->nbackoff++;
    return 0;
}

/* A child's exit that nobody asked for: restarts it (and its group), gives
 * it up, or gives up altogether (-ECHILD). Returns 0 or the supervisor's
 * result. */
/* The delay before c's restart: its backoff's next, begun again when it
 * ran long enough since its last start (0 without a backoff). */
static int64_t restart_delay(weft_sup *s, child *c, weft_time now)
{
    if (!s->o.backoff)
        return 0;
    if (now - c->started >= s->reset) { /* it ran long enough */
        uint64_t rng = c->bo.rng;
        weft_backoff_init(&c->bo, s->o.backoff);
        c->bo.rng = rng; /* the jitter goes on where it was */
    }
    return weft_backoff_next(&c->bo);
}

/* Restarts the group from first to the last child, c's exit (status st)
 * having decided it: stops the others, last started first, then starts
 * them all again in order, the temporary ones excepted. */
static int group_restart(weft_sup *s, child *first, child *c, int st,
                         int64_t delay)
{
    for (child *x = s->tail; x != first->prev; x = x->prev)
        child_stop(s, x);
    weft_time now = weft_now();
    for (child *x = first, *next; x; x = next) {
        next = x->next;
        if (x->spec.restart == WEFT_TEMPORARY) {
            child_remove(s, x);
            continue;
        }
        if (s->o.on_event)
            event(s, WEFT_SUP_RESTART, x, x == c ? st : x->status, delay, now);
        int rc = child_restart(s, x, delay, now);
        if (rc)
            return rc;
    }
    return 0;
}

static int child_exited(weft_sup *s, child *c)
{
    int st = c->status;
    c->state = C_IDLE;
    weft_time now = weft_now();
    bool events = s->o.on_event != NULL;
    if (events) {
        if (s->intensity >= 0)
            window_prune(s, now);
        event(s, WEFT_SUP_EXIT, c, st, 0, now);
    }
    weft_restart rt = c->spec.restart;
    if (rt == WEFT_TEMPORARY || (rt == WEFT_TRANSIENT && st >= 0)) {
        if (events)
            event(s, WEFT_SUP_GIVE_UP, c, st, 0, now);
        if (rt == WEFT_TEMPORARY || s->o.strategy == WEFT_DYNAMIC)
            child_remove(s, c);
        return 0;
    }
    if (!window_add(s, now)) {
        if (events)
            event(s, WEFT_SUP_ESCALATE, c, st, 0, now);
        return -ECHILD;
    }
    st_rlx(&s->restarts_pub, ++s->restarts);
    int64_t delay = restart_delay(s, c, now);
    bool group = s->o.strategy == WEFT_ONE_FOR_ALL
                     ? s->nchildren > 1
                     : s->o.strategy == WEFT_REST_FOR_ONE && c->next;
    if (group) /* the group: first .. the last child */
        return group_restart(s, s->o.strategy == WEFT_ONE_FOR_ALL ? s->head : c,
                             c, st, delay);
    if (events)
        event(s, WEFT_SUP_RESTART, c, st, delay, now);
    return child_restart(s, c, delay, now);
}

/* ---- requests ---- */

/* Handles a request taken from the queue (the target of a terminate
 * resolved under the lock: t, or NULL). */
static int on_request(weft_sup *s, sup_req *r, child *t)
{
    if (r->kind == REQ_TERMINATE) {
        if (!t)
            return -ENOENT;
        child_stop(s, t);
        child_remove(s, t);
        return 0;
    }
    const weft_child_spec *spec = r->spec;
    if (find_child(s, spec->name))
        return -EEXIST;
    if (s->o.strategy == WEFT_DYNAMIC && s->o.max_children > 0 &&
        s->nchildren >= s->o.max_children)
        return -EMFILE;
    child *c = child_new(s, spec);
    if (!c)
        return -ENOMEM;
    int rc = child_start(s, c, weft_now());
    if (rc)
        child_remove(s, c);
    return rc;
}

/* Takes the requests one by one and replies. */
static void requests(weft_sup *s)
{
    for (;;) {
        weft__lock_acquire(&s->lock);
        sup_req *r = s->reqs;
        if (!r) {
            weft__lock_release(&s->lock);
            return;
        }
        s->reqs = r->next;
        if (!s->reqs)
            s->reqs_tail = &s->reqs;
        r->taken = true;
        s->cur_req = r;
        /* A terminate's caller may leave once it is cancelled: what the
         * supervisor needs of its request is read now. */
        child *t = r->kind == REQ_TERMINATE ? find_child(s, r->name) : NULL;
        weft__lock_release(&s->lock);
        int rc = on_request(s, r, t);
        weft__lock_acquire(&s->lock);
        weft__waiter *w = NULL;
        if (s->cur_req == r) {
            r->rc = rc;
            r->done = true;
            w = weft__waitq_claim(&r->q);
        }
        s->cur_req = NULL;
        weft__lock_release(&s->lock);
        finish(w);
    }
}

/* Refuses the queued requests (the supervisor stops), and any later. */
static void close_requests(weft_sup *s)
{
    weft__chain woken;
    weft__chain_init(&woken);
    weft__lock_acquire(&s->lock);
    s->closed = true;
    for (sup_req *r; (r = s->reqs) != NULL;) {
        s->reqs = r->next;
        r->taken = true;
        r->rc = -ESRCH;
        r->done = true;
        weft__waiter *w = weft__waitq_claim(&r->q);
        if (w)
            weft__chain_add(&woken, w);
    }
    s->reqs_tail = &s->reqs;
    weft__lock_release(&s->lock);
    weft__wake_chain(woken.head, 0);
}

/* ---- the supervisor ---- */

static void sup_free(weft_sup *s)
{
    for (child *c = s->head, *n; c; c = n) {
        n = c->next;
        free(c);
    }
    free(s->ring);
    free(s);
}

static int sup_new(const weft_sup_opts *o, const weft_child_spec *children,
                   int n, weft_sup **out)
{
    static const weft_sup_opts defaults = {0};
    if (!o)
        o = &defaults;
    if (n < 0 || (n > 0 && !children))
        return -EINVAL;
    int rc = opts_check(o, n);
    if (rc)
        return rc;
    for (int i = 0; i < n; i++) {
        if ((rc = spec_check(&children[i])) != 0)
            return rc;
        for (int j = 0; j < i; j++)
            if (strcmp(children[i].name, children[j].name) == 0)
                return -EINVAL;
    }
    weft_sup *s = weft__calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    s->o = *o;
    s->intensity = o->intensity;
    s->period = o->period_ns;
    if (o->intensity == 0 && o->period_ns == 0) {
        s->intensity = DEFAULT_INTENSITY;
        s->period = DEFAULT_PERIOD;
    }
    s->reset = o->backoff_reset_ns ? o->backoff_reset_ns : s->period;
    s->reqs_tail = &s->reqs;
    s->pend_tail = &s->pend_head;
    if (s->intensity >= 0 && s->intensity < RING_PREALLOC) {
        s->ring_cap = s->intensity + 1;
        s->ring = weft__malloc((size_t)s->ring_cap * sizeof(*s->ring));
        if (!s->ring) {
            free(s);
            return -ENOMEM;
        }
    }
    for (int i = 0; i < n; i++) {
        if (!child_new(s, &children[i])) {
            sup_free(s);
            return -ENOMEM;
        }
    }
    *out = s;
    return 0;
}

/* Asks s to stop (its lock taken here). */
static int ask_stop(weft_sup *s)
{
    weft__lock_acquire(&s->lock);
    if (s->closed) {
        weft__lock_release(&s->lock);
        return -ESRCH;
    }
    s->stop_req = true;
    weft__waiter *w = poke_locked(s);
    weft__lock_release(&s->lock);
    finish(w);
    return 0;
}

/* The watcher: waits for the cancel of the supervisor's `watch` scope,
 * then asks the supervisor to stop. */
static int watcher(void *arg)
{
    weft_sup *s = arg;
    while (weft__wait_sleep(&(weft__wait_spec){.kind = &weft__wk_supervisor,
                                               .obj = s,
                                               .deadline = WEFT_NEVER}) !=
           -ECANCELED)
        ;
    ask_stop(s);
    return 0;
}

/* Runs s on the calling task; returns its result. */
static int sup_run(weft_sup *s)
{
    weft_task *t = weft__current();
    if (!t)
        return -EPERM;
    weft__lock_acquire(&s->lock);
    s->task = t; /* request() reads it under the lock */
    weft__lock_release(&s->lock);
    weft_scope *watch, *kids;
    weft_scope_opts wo = {.policy = (weft_policy)WEFT__POLICY_SUPERVISE};
    int rc = weft__scope_open_internal(&watch, &wo, s);
    if (rc)
        return rc;
    rc = weft__spawn(watch, watcher, s,
                     &(weft_spawn_opts){.name = "supervisor watcher"}, __FILE__,
                     __LINE__);
    if (rc == -ECANCELED)
        s->stop_req = true; /* cancelled already: start nothing */
    else if (rc < 0)
        goto out_watch;
    wo.shield = 1;
    if ((rc = weft__scope_open_internal(&kids, &wo, s)) != 0)
        goto out_watch;
    s->kids = kids;

    int result = 0;
    if (!s->stop_req) {
        weft_time now = weft_now();
        for (child *c = s->head; c && result == 0; c = c->next)
            result = child_start(s, c, now);
    }
    weft_time next = WEFT_NEVER;
    bool stop = s->stop_req;
    while (result == 0 && !stop) {
        /* On a stop, the exits pending are the shutdown's to take. */
        if ((stop = sup_wait(s, next, false)))
            break;
        child *c;
        while (result == 0 && (c = pend_pop(s)) != NULL)
            result = child_exited(s, c);
        if (result)
            break;
        requests(s);
        result = start_due(s, &next);
    }
    close_requests(s);
    stop_all(s);
    weft_scope_join(kids);
    weft_scope_free(kids);
    rc = result;
out_watch:
    weft_scope_cancel(watch);
    weft_scope_join(watch);
    weft_scope_free(watch);
    return rc;
}

/* ---- the public API ---- */

int weft_sup_run(const weft_sup_opts *o, const weft_child_spec *children, int n)
{
    if (!weft__current())
        return -EPERM;
    weft_sup *s;
    int rc = sup_new(o, children, n, &s);
    if (rc)
        return rc;
    rc = sup_run(s);
    sup_free(s);
    return rc;
}

static int sup_task(void *arg)
{
    weft_sup *s = arg;
    int st = sup_run(s);
    weft__waiter *woken = NULL;
    weft__lock_acquire(&s->lock);
    s->closed = true;
    s->done = true;
    s->status = st;
    weft__waitq_claim_all(&s->waiters, &woken);
    weft__lock_release(&s->lock);
    /* s may be freed from here on. */
    weft__wake_chain(woken, 0);
    return st;
}

int weft_sup_spawn(weft_scope *sc, const weft_sup_opts *o,
                   const weft_child_spec *children, int n, weft_sup **out)
{
    if (!out)
        return -EINVAL;
    weft_sup *s;
    int rc = sup_new(o, children, n, &s);
    if (rc)
        return rc;
    s->spawned = true;
    rc = weft_spawn_ex(sc, sup_task, s, &(weft_spawn_opts){.name = s->o.name});
    if (rc < 0) {
        sup_free(s);
        return rc;
    }
    *out = s;
    return 0;
}

weft_sup *weft_sup_current(void)
{
    weft_task *t = weft__current();
    if (!t)
        return NULL;
    weft_scope *sc = weft__task_scope_cur(t);
    if (sc->pol != &weft__policy_supervise || sc->owner != t)
        return NULL;
    return sc->ctx;
}

/* Queues r and waits for the reply (start_child, terminate_child). */
static int request(weft_sup *s, sup_req *r)
{
    weft_task *self = weft__current();
    if (!self)
        return -EPERM;
    int rc = weft__checkpoint();
    if (rc)
        return rc;
    weft__lock_acquire(&s->lock);
    if (s->closed || self == s->task) {
        weft__lock_release(&s->lock);
        return s->closed ? -ESRCH : -EDEADLK;
    }
    r->next = NULL;
    *s->reqs_tail = r;
    s->reqs_tail = &r->next;
    weft__waiter *w = poke_locked(s);
    weft__lock_release(&s->lock);
    finish(w);
    weft__lock_acquire(&s->lock);
    bool firm = false;
    while (!r->done) {
        weft__waiter self_w;
        weft__waiter_init(&self_w, NULL, 0);
        rc = weft__wait(
            &self_w, &(weft__wait_spec){.kind = &weft__wk_supervisor,
                                        .obj = s,
                                        .lock = &s->lock,
                                        .q = &r->q,
                                        .deadline = WEFT_NEVER,
                                        .flags = firm ? WEFT__WAIT_FIRM : 0});
        weft__lock_acquire(&s->lock);
        if (rc != -ECANCELED || r->done)
            continue;
        if (!r->taken) { /* nothing was done: withdraw it */
            sup_req **p = &s->reqs, *prev = NULL;
            while (*p != r) {
                prev = *p;
                p = &(*p)->next;
            }
            *p = r->next;
            if (s->reqs_tail == &r->next)
                s->reqs_tail = prev ? &prev->next : &s->reqs;
            weft__lock_release(&s->lock);
            return -ECANCELED;
        }
        if (r->kind == REQ_TERMINATE) { /* it goes on without the caller */
            s->cur_req = NULL;
            weft__lock_release(&s->lock);
            return -ECANCELED;
        }
        firm = true; /* a start is answered without blocking: wait for it */
    }
    rc = r->rc;
    weft__lock_release(&s->lock);
    return rc;
}

int weft_sup_start_child(weft_sup *s, const weft_child_spec *c)
{
    if (!s)
        return -EINVAL;
    int rc = spec_check(c);
    if (rc)
        return rc;
    sup_req r = {.kind = REQ_START, .spec = c};
    return request(s, &r);
}

int weft_sup_terminate_child(weft_sup *s, const char *name)
{
    if (!s || !name)
        return -EINVAL;
    sup_req r = {.kind = REQ_TERMINATE, .name = name};
    return request(s, &r);
}

int weft_sup_stats_get(weft_sup *s, weft_sup_stats *out)
{
    if (!s || !out)
        return -EINVAL;
    out->running = ld_rlx(&s->running_pub);
    out->restarts = ld_rlx(&s->restarts_pub);
    return 0;
}

int weft_sup_stop(weft_sup *s)
{
    if (!s)
        return -EINVAL;
    return ask_stop(s);
}

int weft_sup_join(weft_sup *s, int *status)
{
    return weft_sup_join_until(s, status, WEFT_NEVER);
}

int weft_sup_join_until(weft_sup *s, int *status, weft_time deadline)
{
    if (!s || !s->spawned)
        return -EINVAL;
    int rc = weft__checkpoint();
    if (rc)
        return rc;
    weft__lock_acquire(&s->lock);
    while (!s->done) {
        weft__waiter w;
        weft__waiter_init(&w, NULL, 0);
        rc = weft__wait(&w, &(weft__wait_spec){.kind = &weft__wk_supervisor,
                                               .obj = s,
                                               .lock = &s->lock,
                                               .q = &s->waiters,
                                               .deadline = deadline});
        if (rc)
            return rc; /* -ETIMEDOUT, -ECANCELED: lock released */
        weft__lock_acquire(&s->lock);
    }
    if (status)
        *status = s->status;
    weft__lock_release(&s->lock);
    return 0;
}

int weft_sup_free(weft_sup *s)
{
    if (!s || !s->spawned)
        return -EINVAL;
    weft__lock_acquire(&s->lock);
    bool done = s->done;
    weft__lock_release(&s->lock);
    if (!done)
        return -EBUSY;
    sup_free(s);
    return 0;
}
