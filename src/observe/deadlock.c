/* SPDX-License-Identifier: MIT */
/*
 * Deadlock detection: every task asleep with nothing outside to wake one,
 * and cycles of mutex waits.
 *
 * Every task asleep (Go's checkdead, in weft's terms). A worker about to
 * sleep with no timer of its own and no task waiting for a descriptor or
 * the blocking pool joins the deadlock books (sched.c,
 * weft__idle_forever_enter); the last one to join calls all_idle below.
 * Under the books' lock it notes each worker's generation (how many times
 * it has joined); then, with the lock released, it walks the scope tree
 * and looks at every task: one that is not parked was woken by a plain
 * thread (a cancel, a channel's try_send) and will run; one that waits for
 * a future, or for the shutdown request, may be woken by a plain thread or
 * a signal. Then it takes the lock again: if every worker is still in the
 * books with the same generation and no work is visible (a plain thread's
 * wake lands in an inbox, which its worker empties only after leaving the
 * books, under the lock), nothing changed during the walk, and no task
 * can ever run: a deadlock. Reading the tasks' wait records is safe: each
 * was written by its worker before that worker took the lock to join.
 *
 * What comes then (weft_config.deadlock): the report, then the root scope
 * is cancelled, so tasks unwind through their cancellation points; if
 * they all fall asleep again (waits a cancel does not end), the runtime
 * gives up on them: it ends, and weft_run returns -EDEADLK.
 *
 * Mutex cycles (sync.c, "mutex cycles", on the slow path of a lock when
 * it first queues): under one lock that every contended lock takes to
 * note "t waits for m" in its task, the locker follows "held by" and
 * "waits for" from the mutex it wants; if that comes back to it, each
 * task on the way waits for a mutex held by the next, none can run to
 * release one, and the locker closes the ring. It is told
 * (on_mutex_cycle, here) and, with the default mode, its lock returns
 * -EDEADLK. Exactly one locker per ring is told, on any number of
 * workers: the last one to note its wait.
 */
#include "future/future.h"
#include "io/io.h"
#include "observe/observe.h"
#include "observe/where.h"
#include "sched/scheduler.h"
#include "scope/struct.h"
#include "sync/sync.h"
#include "util/fault.h"
#include "wait/seen.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define OUTSIDE_MAX 4
#define DEFAULT_GRACE_NS WEFT_SEC

struct weft__observe {
    weft_deadlock_mode mode;
    void (*cb)(void *ctx, weft_deadlock_kind kind);
    void *ctx;
    const void *outside[OUTSIDE_MAX]; /* waits on these are never stuck */
    int noutside;
    int64_t grace;    /* how long every task must stay asleep, real ns */
    atomic_int found; /* every task asleep: found (weft_run's -EDEADLK) */
    /* under rt->dmu: */
    int phase;      /* 0 nothing yet, 1 root cancelled, 2 gave up */
    bool watching;  /* every worker in the books since `since`, */
    int64_t since;  /* (mono ns) with these generations: */
    unsigned *gens; /* each worker's dgen then */
};

/* ---- the report ---- */

/* A line buffer for the report: written out when full and at the end. */
struct out {
    int fd;
    size_t len;
    char buf[4096];
};

static void out_flush(struct out *o)
{
    size_t off = 0;
    while (off < o->len) {
        ssize_t n = write(o->fd, o->buf + off, o->len - off);
        if (n <= 0)
            break; /* a report must not wedge the runtime: drop the rest */
        off += (size_t)n;
    }
    o->len = 0;
}

static void out_printf(struct out *o, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void out_printf(struct out *o, const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    size_t len = (size_t)n < sizeof line ? (size_t)n : sizeof line - 1;
    if (o->len + len > sizeof o->buf)
        out_flush(o);
    memcpy(o->buf + o->len, line, len);
    o->len += len;
}

static const char *task_name(const weft_task *t)
{
    return t && t->name ? t->name : "(unnamed)";
}

/* As the dump names it: "task W.N" (the worker that spawned it, then that
 * worker's count: see dump.c). */
static void out_task(struct out *o, const weft_task *t)
{
    out_printf(
        o, "task %llu.%llu \"%s\" (spawned at %s:%d)",
        (unsigned long long)(t->id >> WEFT__ID_BITS),
        (unsigned long long)(t->id & ((UINT64_C(1) << WEFT__ID_BITS) - 1)),
        task_name(t), t->file ? t->file : "?", t->line);
}

static void out_wait(struct out *o, weft_runtime *rt, const weft_task *t)
{
    weft__wait_seen w;
    weft__wait_record(t, &w);
    out_printf(o, "    waits for %s %p", weft__wait_kind_name(w.kind), w.obj);
    /* Only a descriptor's wait sets a name: another kind's is stale. */
    if (w.name && w.kind == &weft__wk_fd)
        out_printf(o, " (%s)", w.name);
    if (w.kind == &weft__wk_mutex) {
        weft_task *h = weft__mutex_owner(w.obj);
        if (h) {
            out_printf(o, ", held by ");
            out_task(o, h);
        }
    } else if (w.kind == &weft__wk_scope && w.obj) {
        const weft_scope *s = w.obj;
        out_printf(o, ", %d children running", s->live);
    }
    int64_t since = weft__now(rt) - w.since;
    if (since >= 0)
        out_printf(o, ", for %lld.%03lld ms\n", (long long)(since / WEFT_MSEC),
                   (long long)(since % WEFT_MSEC / WEFT_USEC));
    else
        out_printf(o, "\n");
}

/* "      at FUNC (FILE:LINE)": the line st's task blocks on, if known. */
static void out_where_stack(struct out *o, const weft__stack *st)
{
    if (st->at < 0)
        return;
    char buf[384];
    weft__frame_format(&st->f[st->at], buf, sizeof buf);
    out_printf(o, "      at %s\n", buf);
}

/* The same for a parked task, its stack walked as the dump does (the
 * report's walk holds scope locks meanwhile, as the dump's does). */
static void out_where(struct out *o, const weft_task *t)
{
    weft__stack st;
    if (weft__task_stack(t, &st) > 0)
        out_where_stack(o, &st);
}

/* ---- every task asleep ---- */

enum verdict { STUCK, WAKEABLE };

/* Whether t, parked, may be woken from outside the runtime. */
static bool outside_may_wake(const struct weft__observe *ob, const weft_task *t)
{
    weft__wait_seen w;
    weft__wait_record(t, &w);
    const void *obj = w.obj;
    if (w.kind == &weft__wk_future)
        return true;
    for (int i = 0; i < ob->noutside; i++)
        if (obj == ob->outside[i])
            return true;
    if (w.kind == &weft__wk_select && obj) {
        const weft_case *c = obj;
        int n = w.n;
        for (int i = 0; i < n; i++) {
            if (c[i].op == WEFT_OP_FUTURE)
                return true;
            for (int k = 0; k < ob->noutside; k++)
                if ((c[i].op == WEFT_OP_RECV || c[i].op == WEFT_OP_SEND) &&
                    (const void *)c[i].chan == ob->outside[k])
                    return true;
        }
    }
    return false;
}

/* Walks s and the scopes inside it. Returns WAKEABLE at the first task
 * that is not parked or may be woken from outside; counts the others. */
static enum verdict walk(weft_runtime *rt, weft_scope *s, struct out *o,
                         int *asleep)
{
    const struct weft__observe *ob = weft__observe_rt(rt)->observe;
    enum verdict v = STUCK;
    weft__lock_acquire(&s->lock);
    for (weft_task *t = s->members; t && v == STUCK;
         t = weft__scope_of_task(t)->mnext) {
        uint64_t pw = ld_acq(&t->park);
        if (PARK_STATE(pw) == PARK_RUNNING || outside_may_wake(ob, t)) {
            v = WAKEABLE;
            break;
        }
        (*asleep)++;
        if (o) {
            out_printf(o, "  ");
            out_task(o, t);
            out_printf(o, "\n");
            out_wait(o, rt, t);
            out_where(o, t);
        }
    }
    for (weft_scope *k = s->kids; k && v == STUCK; k = k->sib_next)
        v = walk(rt, k, o, asleep);
    weft__lock_release(&s->lock);
    return v;
}

/* Under rt->dmu: every worker in the books. */
static bool all_in_books(weft_runtime *rt)
{
    return rt->ndidle == rt->nworkers;
}

/* Under rt->dmu: every worker in the books, each with the generation it
 * had when the watch began. */
static bool unchanged(weft_runtime *rt)
{
    const struct weft__observe *ob = weft__observe_rt(rt)->observe;
    if (!ob->watching || !all_in_books(rt))
        return false;
    for (int i = 0; i < rt->nworkers; i++)
        if (ob->gens[i] != rt->workers[i].dgen)
            return false;
    return true;
}

static bool nothing_visible(weft_runtime *rt)
{
    for (int i = 0; i < rt->nworkers; i++)
        if (weft__work_visible(&rt->workers[i]))
            return false;
    return true;
}

/* The deadlock found: report it and act as the mode says. Returns what
 * on_all_idle returns. */
static int64_t act(weft_worker *w, int phase, int asleep)
{
    weft_runtime *rt = w->rt;
    struct weft__observe *ob = weft__observe_rt(rt)->observe;
    if (phase == 1) {
        st_rel(&ob->found, 1);
        if (ob->mode == WEFT_DEADLOCK_CALLBACK) {
            ob->cb(ob->ctx, WEFT_DEADLOCK_ALL_ASLEEP);
        } else {
            struct out o = {.fd = 2};
            out_printf(&o,
                       "weft: all tasks are asleep: deadlock (%d task%s; no "
                       "timer, descriptor, blocking call, future or "
                       "shutdown request could wake one)\n",
                       asleep, asleep == 1 ? "" : "s");
            int n = 0;
            weft__where_prepare(); /* before the walk takes scope locks */
            walk(rt, weft__scope_rt(rt)->root, &o, &n);
            out_printf(&o, "the task dump:\n");
            out_flush(&o);
            weft__dump_write(rt, 2, 0);
            if (ob->mode == WEFT_DEADLOCK_ABORT)
                abort();
        }
        /* Cancels everything: the tasks unwind through their
         * cancellation points, and weft_run returns -EDEADLK. */
        weft__scope_cancel(weft__scope_rt(rt)->root, CANCEL_USER);
        return 0;
    }
    if (ob->mode != WEFT_DEADLOCK_CALLBACK) {
        struct out o = {.fd = 2};
        out_printf(&o,
                   "weft: %d task%s still asleep after the deadlock's cancel "
                   "(waits a cancel does not end): the runtime ends without "
                   "%s\n",
                   asleep, asleep == 1 ? "" : "s", asleep == 1 ? "it" : "them");
        out_flush(&o);
    }
    st_rel(&rt->done, 1);
    for (int i = 0; i < rt->nworkers; i++)
        if (&rt->workers[i] != w)
            weft__worker_notify(&rt->workers[i]);
    return 0;
}

static int64_t all_idle(weft_worker *w)
{
    weft_runtime *rt = w->rt;
    struct weft__observe *ob = weft__observe_rt(rt)->observe;
    int64_t now = weft__real_now(rt);
    pthread_mutex_lock(&rt->dmu);
    if (!all_in_books(rt)) {
        pthread_mutex_unlock(&rt->dmu);
        return WEFT_NEVER; /* the worker that completes them looks */
    }
    if (!unchanged(rt)) { /* a new watch: from now */
        for (int i = 0; i < rt->nworkers; i++)
            ob->gens[i] = rt->workers[i].dgen;
        ob->watching = true;
        ob->since = now;
    }
    int64_t waited = now - ob->since;
    pthread_mutex_unlock(&rt->dmu);
    if (!nothing_visible(rt))
        return 0;
    int asleep = 0;
    if (walk(rt, weft__scope_rt(rt)->root, NULL, &asleep) != STUCK ||
        asleep == 0)
        return WEFT_NEVER; /* what can wake a task will wake a worker */
    if (waited < ob->grace)
        return ob->grace - waited;
    pthread_mutex_lock(&rt->dmu);
    int phase = 0;
    if (unchanged(rt) && ob->phase < 2) {
        phase = ++ob->phase;
        ob->watching = false;
    }
    pthread_mutex_unlock(&rt->dmu);
    if (!phase || !nothing_visible(rt))
        return 0;
    return act(w, phase, asleep);
}

/* ---- mutex cycles ---- */

struct cycle_report {
    weft_task *const *chain;
    const void *const *mutexes;
    int n;
    const uintptr_t *self; /* the locker's own return addresses */
    int nself;
};

/* The report: on a thread's stack (weft__on_big_stack), since the locker
 * is a task and walking stacks takes more room than a task has. The
 * locker runs (it is the caller's thread, waiting): its own stack is
 * walked as the caller's, from the thread the report borrowed. */
static void cycle_report(void *arg)
{
    const struct cycle_report *r = arg;
    weft_task *const *chain = r->chain;
    const void *const *mutexes = r->mutexes;
    int n = r->n;
    struct out o = {.fd = 2};
    out_printf(&o,
               "weft: mutex deadlock: %d tasks wait for each other's "
               "mutexes in a cycle\n",
               n);
    for (int i = 0; i < n; i++) {
        out_printf(&o, "  ");
        out_task(&o, chain[i]);
        out_printf(&o, "\n    %s mutex %p, held by ",
                   i == 0 ? "would wait for" : "waits for", mutexes[i]);
        out_task(&o, chain[(i + 1) % n]);
        out_printf(&o, "\n");
        /* Only the locker's own line: nothing keeps the others alive
         * while this thread would walk their stacks (a cancel may end one
         * and free its stack meanwhile); their lines are in a dump. */
        if (i == 0 && r->nself > 0) {
            weft__stack st;
            if (weft__pcs_stack(r->self, r->nself, &st) > 0)
                out_where_stack(&o, &st);
        }
    }
    out_printf(&o, "  the lock of ");
    out_task(&o, chain[0]);
    out_printf(&o, " returns -EDEADLK\n");
    out_flush(&o);
}

static int mutex_cycle(weft_runtime *rt, weft_task *const *chain,
                       const void *const *mutexes, int n)
{
    struct weft__observe *ob = weft__observe_rt(rt)->observe;
    if (ob->mode == WEFT_DEADLOCK_CALLBACK) {
        ob->cb(ob->ctx, WEFT_DEADLOCK_MUTEX_CYCLE);
        return -EDEADLK;
    }
    /* The locker's own stack, taken here, before the report moves to a
     * thread of its own; symbolized there. */
    uintptr_t self[WEFT__FRAMES_MAX];
    int nself = weft__self_pcs(self, WEFT__FRAMES_MAX);
    struct cycle_report r = {chain, mutexes, n, self, nself};
    weft__on_big_stack(cycle_report, &r);
    if (ob->mode == WEFT_DEADLOCK_ABORT)
        abort();
    return -EDEADLK;
}

/* ---- set-up ---- */

int weft__deadlock_init(weft_runtime *rt, const weft_config *cfg)
{
    if (cfg->deadlock == WEFT_DEADLOCK_IGNORE)
        return 0;
    struct weft__observe *ob = weft__calloc(1, sizeof *ob);
    unsigned *gens = weft__calloc((size_t)rt->nworkers, sizeof *gens);
    if (!ob || !gens) {
        free(ob);
        free(gens);
        return -ENOMEM;
    }
    ob->mode = cfg->deadlock;
    ob->grace =
        cfg->deadlock_grace_ns ? cfg->deadlock_grace_ns : DEFAULT_GRACE_NS;
    if (rt->sim) /* no plain thread will call in, and no real time passes */
        ob->grace = 0;
    ob->cb = cfg->on_deadlock;
    ob->ctx = cfg->deadlock_ctx;
    ob->gens = gens;
    atomic_init(&ob->found, 0);
    weft__observe_rt(rt)->observe = ob;
    rt->on_all_idle = all_idle;
    weft__sync_rt(rt)->on_mutex_cycle = mutex_cycle;
    weft__where_warm(); /* the cycle report walks the locker's stack */
    return 0;
}

void weft__deadlock_outside(weft_runtime *rt, const void *obj)
{
    struct weft__observe *ob = weft__observe_rt(rt)->observe;
    if (ob && ob->noutside < OUTSIDE_MAX)
        ob->outside[ob->noutside++] = obj;
}

bool weft__deadlock_found(weft_runtime *rt)
{
    return weft__observe_rt(rt)->observe &&
           ld_acq(&weft__observe_rt(rt)->observe->found);
}

void weft__deadlock_fini(weft_runtime *rt)
{
    if (!weft__observe_rt(rt)->observe)
        return;
    free(weft__observe_rt(rt)->observe->gens);
    free(weft__observe_rt(rt)->observe);
    weft__observe_rt(rt)->observe = NULL;
    rt->on_all_idle = NULL;
    weft__sync_rt(rt)->on_mutex_cycle = NULL;
}
