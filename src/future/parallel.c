/* SPDX-License-Identifier: MIT */
/*
 * Bounded parallelism (weft_map_tasks) and pipelines (weft_pipeline), built on
 * scopes and channels only: no new primitive, no lock of their own.
 *
 * weft_map_tasks: a bounded worker pool over an array.
 *   A scope with the caller's policy and deadline holds min(limit, n)
 *   worker tasks. Each takes the next index i from a shared counter and
 *   calls fn(items + i * item_size), until the indices run out. So at most
 * `limit` calls run at once, indices are taken in order, and the task count
 * does not grow with n. Statuses start as -ECANCELED and each call overwrites
 * its own. FAIL_FAST: a worker whose call fails raises `stop` and returns the
 *   error, which the scope records and turns into a cancel; the other
 *   workers look at `stop` and at their scope's flag before taking an
 *   index, so no call starts after the failure was seen. The result is
 *   what the scope's join says (first error, -ETIMEDOUT, -ECANCELED).
 *
 * weft_pipeline: stages joined by channels, all tasks in one scope.
 *   Stage k reads from `in` (k = 0) or from an internal channel made with
 *   stage k-1's out_size and capacity, and writes to the next internal
 *   channel or, for the last stage, to `out`.
 *
 *   Unordered stage (or one worker): W tasks receive from the input
 *   channel (fan-out: whoever is free takes the next value), call fn and
 *   send to the shared output channel (fan-in) unless fn returned
 *   WEFT_SKIP (any other status >= 0 passes the value on). A task whose
 *   input is closed and drained ends; the last of the W to end closes the
 *   output, so the close travels down behind the last value.
 *
 *   Ordered stage (W > 1): values are dealt round-robin and gathered in
 *   the same order, so they leave in the order they came:
 *
 *       in --> dispatcher --todo[j]--> worker j --done[j]--> collector --> out
 *
 *   The dispatcher receives value m straight into a buffer slot of worker
 *   j = m % W and sends the slot's number on todo[j] (capacity 1); worker j
 *   calls fn on that slot, writing its result into the matching output
 *   slot, and sends fn's verdict (pass or WEFT_SKIP) on done[j] (capacity
 *   1); the collector receives verdicts from done[0], done[1], ... in turn
 *   and forwards each passed value from its slot, so a skipped value keeps
 *   its turn. Values themselves never cross these channels, only slot
 *   numbers and verdicts. Three slots per worker are enough: the k-th
 *   value of worker j uses slot k % 3, and before it is written, the send
 *   of the (k-1)-th todo (or done) has completed, so the (k-2)-th has been
 *   received (capacity 1), and its receiver takes the next one only after
 *   it has finished with the (k-3)-th, the slot's previous user. The end:
 *   the dispatcher closes every todo[j] when `in` is closed and drained,
 *   each worker closes its done[j] when its todo[j] is, and the collector
 *   stops at the first done[j] found closed: in round-robin order that is
 *   the turn after the last value. Progress: the collector waits only for
 *   a value already dealt, whose worker has no older value left to hand
 *   over, so the three kinds of task cannot wait on each other in a ring.
 *
 *   Failure: a stage error, a send to an `out` closed by its reader, or a
 *   spawn that fails calls fail(): the first such error is kept (unless
 *   the scope was already cancelled, by the deadline or from outside:
 *   then join's -ETIMEDOUT or -ECANCELED is the answer), the scope is
 *   cancelled (every task's channel wait returns -ECANCELED, values in
 *   flight are dropped with the tasks' buffers), and `in` and `out` are
 *   closed, so the producer's sends and the consumer's receives end in
 *   -EPIPE at once, not when the slowest stage task notices. A task
 *   woken by -ECANCELED calls fail() too, which for a deadline or an
 *   outside cancel is what closes `in` and `out`. A stage ends normally
 *   only if its input closed while the scope was not cancelled, so a
 *   pipeline that failed never closes an output as if it had finished.
 *   If everything has gone through when a deadline or a cancel comes, the
 *   work is done and the result is 0.
 *
 *   Memory: everything (stages, workers, buffers, internal channels) is
 *   allocated before the first task starts, so -ENOMEM, like -EINVAL,
 *   leaves `in` and `out` untouched; it is freed after the scope is
 *   joined, when no task is left to touch it. The pipeline holds a
 *   reference to `in` and `out` while it runs.
 */
#include "sched/task.h"
#include "scope/scope.h"
#include "sync/sync.h"
#include "util/fault.h"

#include <limits.h>
#include <stdalign.h>
#include <stdlib.h>
#include <string.h>

/* ======================================================================
 * weft_map_tasks
 * ==================================================================== */

struct map {
    weft_fn fn;
    char *items; /* item i is at items + i * size */
    size_t size;
    size_t n;
    weft_policy policy;
    int *statuses;       /* n entries, or NULL */
    _Atomic size_t next; /* the next index to start */
    atomic_int stop;     /* FAIL_FAST: a call failed, start no more */
};

static int map_worker(void *arg)
{
    struct map *m = arg;
    /* stop is a hint that is faster than the scope's cancel (which comes
     * when the failed worker exits): relaxed is enough, the cancel itself
     * is what orders everything else. */
    while (!ld_rlx(&m->stop) && !weft_cancelled()) {
        size_t i = add_rlx(&m->next, 1);
        if (i >= m->n)
            break;
        int st = m->fn(m->items + i * m->size);
        if (m->statuses)
            m->statuses[i] = st; /* read by the caller after join */
        if (st < 0 && m->policy == WEFT_FAIL_FAST) {
            st_rlx(&m->stop, 1);
            return st; /* the scope records it and cancels the rest */
        }
    }
    return 0;
}

int weft_map_tasks(size_t n, int limit, weft_fn fn, void *items,
                   size_t item_size, weft_policy policy, int *statuses,
                   weft_time deadline)
{
    if (!fn || (policy != WEFT_FAIL_FAST && policy != WEFT_COLLECT) ||
        deadline < 0)
        return -EINVAL;
    /* An array that fits in memory: items + i * item_size cannot wrap. */
    if (item_size && n &&
        (!items || n > (SIZE_MAX - (uintptr_t)items) / item_size))
        return -EINVAL;
    if (!weft__current())
        return -EPERM;
    if (n == 0)
        return 0;
    for (size_t i = 0; statuses && i < n; i++)
        statuses[i] = -ECANCELED;
    size_t tasks = limit > 0 && (size_t)limit < n ? (size_t)limit : n;
    if (tasks > INT_MAX)
        tasks = INT_MAX; /* a scope counts its children in an int */

    struct map m = {.fn = fn,
                    .items = items,
                    .size = item_size,
                    .n = n,
                    .policy = policy,
                    .statuses = statuses};
    atomic_init(&m.next, 0);
    atomic_init(&m.stop, 0);
    weft_scope *s;
    int rc = weft__scope_open_until(&s, policy, deadline);
    if (rc)
        return rc;
    int spawn_err = 0;
    weft_spawn_opts so = {.name = "weft_map_tasks"};
    for (size_t k = 0; k < tasks; k++) {
        int r = weft_spawn_ex(s, map_worker, &m, &so);
        if (r < 0) {
            /* -ECANCELED: a call failed already, or the deadline or an
             * outside cancel came; join tells which. */
            if (r != -ECANCELED) {
                spawn_err = r;
                weft_scope_cancel(s);
            }
            break;
        }
    }
    rc = weft_scope_join(s);
    weft_scope_free(s);
    return spawn_err ? spawn_err : rc;
}

/* ======================================================================
 * weft_pipeline
 * ==================================================================== */

#define MAX_STAGES 64
#define MAX_ELEM 65536
#define SLOTS 3 /* buffers per worker of an ordered stage (see the top) */

struct pipe;
struct stage;

/* A worker task of a stage; its buffers belong to it alone (ordered: the
 * dispatcher writes in[], the collector reads out[], in turns). */
struct pworker {
    struct stage *st;
    unsigned char *in[SLOTS], *out[SLOTS]; /* unordered: [0] only */
    weft_chan *todo;    /* ordered: dispatcher -> worker, slot numbers */
    weft_chan *done;    /* ordered: worker -> collector, verdicts */
    int deal_slot;      /* ordered: the slot of the next value dealt to it
                         * (the dispatcher's), 0, 1, 2, 0, ... */
    int take_slot;      /* ordered: the slot of the next verdict taken
                         * from it (the collector's), in the same cycle */
    unsigned char *mem; /* the buffers' one allocation */
};

struct stage {
    struct pipe *p;
    weft_stage_fn fn;
    void *ctx;
    size_t in_size, out_size;
    int nw;             /* worker tasks */
    bool ordered;       /* ordered and nw > 1: dispatcher and collector */
    bool last;          /* the last stage: its output is the pipe's out */
    weft_chan *in;      /* borrowed: the pipe's in, or the previous out */
    weft_chan *out;     /* the pipe's out, or an internal channel (owned) */
    atomic_int running; /* unordered: workers not ended normally yet */
    struct pworker *w;
};

struct pipe {
    weft_chan *in, *out;
    weft_scope *scope;
    int n;
    struct stage *st;
    atomic_int err;       /* the first error that failed it, 0: none */
    atomic_int completed; /* the last stage closed out normally */
};

/* ---- failure and ends ---- */

/* Fails the pipeline with err (see the top): keeps the first error that
 * came before any cancel, cancels every task, closes in and out. Any
 * task. */
static void fail(struct pipe *p, int err)
{
    if (!weft_scope_cancelled(p->scope)) {
        int none = 0;
        cas_sc(&p->err, &none, err);
        weft_scope_cancel(p->scope);
    }
    weft_chan_close(p->in); /* -EPIPE if closed already: fine */
    weft_chan_close(p->out);
}

/* What a receive that failed with rc means for the stage: -EPIPE from an
 * input closed while the pipeline runs is the normal end (0); after a
 * cancel it is part of the failure (the close came from fail()). */
static int input_end(struct stage *st, int rc)
{
    if (rc == -EPIPE)
        return weft_scope_cancelled(st->p->scope) ? -ECANCELED : 0;
    return rc;
}

/* Closes a stage's output after its last value: the end travels down. */
static void close_output(struct stage *st)
{
    weft_chan_close(st->out); /* out closed by its reader: nothing lost */
    if (st->last)
        st_rel(&st->p->completed, 1);
}

/* Every stage task ends here with its status. */
static int task_end(struct stage *st, int rc)
{
    if (rc < 0)
        fail(st->p, rc);
    return rc;
}

/* ---- unordered stage: W workers share the input and the output ---- */

static int stage_worker(void *arg)
{
    struct pworker *w = arg;
    struct stage *st = w->st;
    int rc;
    for (;;) {
        rc = weft_chan_recv(st->in, w->in[0]);
        if (rc) {
            rc = input_end(st, rc);
            break;
        }
        rc = st->fn(st->ctx, w->in[0], w->out[0]);
        if (rc == WEFT_SKIP)
            continue;
        if (rc < 0 || (rc = weft_chan_send(st->out, w->out[0])) != 0)
            break;
    }
    if (rc == 0 && add_acq_rel(&st->running, -1) == 1)
        close_output(st); /* the last worker out */
    return task_end(st, rc);
}

/* ---- ordered stage: dispatcher, workers, collector ---- */

static int ordered_dispatcher(void *arg)
{
    struct stage *st = arg;
    int rc, j = 0;
    for (;;) {
        struct pworker *w = &st->w[j];
        int slot = w->deal_slot;
        rc = weft_chan_recv(st->in, w->in[slot]);
        if (rc) {
            rc = input_end(st, rc);
            break;
        }
        if ((rc = weft_chan_send(w->todo, &slot)) != 0)
            break;
        w->deal_slot = slot + 1 == SLOTS ? 0 : slot + 1;
        j = j + 1 == st->nw ? 0 : j + 1;
    }
    if (rc == 0)
        for (int i = 0; i < st->nw; i++)
            weft_chan_close(st->w[i].todo);
    return task_end(st, rc);
}

static int ordered_worker(void *arg)
{
    struct pworker *w = arg;
    struct stage *st = w->st;
    int rc, slot;
    for (;;) {
        rc = weft_chan_recv(w->todo, &slot);
        if (rc) {
            rc = input_end(st, rc);
            break;
        }
        int verdict = st->fn(st->ctx, w->in[slot], w->out[slot]);
        if (verdict < 0) {
            rc = verdict;
            break;
        }
        if ((rc = weft_chan_send(w->done, &verdict)) != 0)
            break;
    }
    if (rc == 0)
        weft_chan_close(w->done);
    return task_end(st, rc);
}

static int ordered_collector(void *arg)
{
    struct stage *st = arg;
    int rc, j = 0;
    for (;;) {
        struct pworker *w = &st->w[j];
        int verdict;
        rc = weft_chan_recv(w->done, &verdict);
        if (rc) {
            rc = input_end(st, rc);
            break;
        }
        int slot = w->take_slot;
        w->take_slot = slot + 1 == SLOTS ? 0 : slot + 1;
        if (verdict != WEFT_SKIP &&
            (rc = weft_chan_send(st->out, w->out[slot])) != 0)
            break;
        j = j + 1 == st->nw ? 0 : j + 1;
    }
    if (rc == 0)
        close_output(st);
    return task_end(st, rc);
}

/* ---- validation, setup, teardown ---- */

static int check_args(weft_chan *in, weft_chan *out, const weft_stage *stages,
                      int n, weft_time deadline)
{
    if (!stages || n < 1 || n > MAX_STAGES || deadline < 0)
        return -EINVAL;
    if (!weft__chan_elem(in) || !weft__chan_elem(out))
        return -EINVAL;
    for (int k = 0; k < n; k++) {
        const weft_stage *s = &stages[k];
        if (!s->fn || s->out_size < 1 || s->out_size > MAX_ELEM ||
            s->workers < 0)
            return -EINVAL;
    }
    if (stages[n - 1].out_size != weft__chan_elem(out))
        return -EINVAL;
    return 0;
}

static size_t round_up(size_t n)
{
    size_t a = alignof(max_align_t);
    return (n + a - 1) / a * a;
}

static void free_stage(struct stage *st)
{
    for (int j = 0; st->w && j < st->nw; j++) {
        struct pworker *w = &st->w[j];
        if (w->todo)
            weft_chan_unref(w->todo);
        if (w->done)
            weft_chan_unref(w->done);
        free(w->mem);
    }
    free(st->w);
    if (!st->last && st->out)
        weft_chan_unref(st->out);
}

static void free_pipe(struct pipe *p)
{
    for (int k = 0; p->st && k < p->n; k++)
        free_stage(&p->st[k]);
    free(p->st);
}

static int setup_worker(struct stage *st, struct pworker *w)
{
    int nslots = st->ordered ? SLOTS : 1;
    size_t in = round_up(st->in_size), out = round_up(st->out_size);
    w->st = st;
    w->mem = weft__malloc((size_t)nslots * (in + out));
    if (!w->mem)
        return -ENOMEM;
    for (int i = 0; i < nslots; i++) {
        w->in[i] = w->mem + (size_t)i * (in + out);
        w->out[i] = w->in[i] + in;
    }
    if (!st->ordered)
        return 0;
    int rc = weft_chan_new(&w->todo, sizeof(int), 1);
    if (rc == 0)
        rc = weft_chan_new(&w->done, sizeof(int), 1);
    return rc;
}

static int setup_stage(struct pipe *p, int k, const weft_stage *def)
{
    struct stage *st = &p->st[k];
    st->p = p;
    st->fn = def->fn;
    st->ctx = def->ctx;
    st->in_size = k == 0 ? weft__chan_elem(p->in) : p->st[k - 1].out_size;
    st->out_size = def->out_size;
    st->nw = def->workers > 0 ? def->workers : 1;
    st->ordered = def->ordered && st->nw > 1;
    st->last = k == p->n - 1;
    st->in = k == 0 ? p->in : p->st[k - 1].out;
    atomic_init(&st->running, st->nw);
    int rc = 0;
    if (st->last)
        st->out = p->out;
    else if ((rc = weft_chan_new(&st->out, def->out_size, def->capacity)) != 0)
        return rc;
    st->w = weft__calloc((size_t)st->nw, sizeof(*st->w));
    if (!st->w)
        return -ENOMEM;
    for (int j = 0; j < st->nw && rc == 0; j++)
        rc = setup_worker(st, &st->w[j]);
    return rc;
}

static int spawn_stage(struct stage *st)
{
    static const weft_spawn_opts worker = {.name = "weft_pipeline worker"};
    static const weft_spawn_opts dispatcher = {.name =
                                                   "weft_pipeline dispatcher"};
    static const weft_spawn_opts collector = {.name =
                                                  "weft_pipeline collector"};
    weft_scope *s = st->p->scope;
    int rc = 0;
    if (st->ordered)
        rc = weft_spawn_ex(s, ordered_dispatcher, st, &dispatcher);
    for (int j = 0; j < st->nw && rc >= 0; j++)
        rc = weft_spawn_ex(s, st->ordered ? ordered_worker : stage_worker,
                           &st->w[j], &worker);
    if (st->ordered && rc >= 0)
        rc = weft_spawn_ex(s, ordered_collector, st, &collector);
    return rc < 0 ? rc : 0;
}

/* Runs the stages in p->scope (open) and returns the pipeline's result. */
static int run(struct pipe *p)
{
    int rc = 0;
    for (int k = 0; k < p->n && rc == 0; k++)
        rc = spawn_stage(&p->st[k]);
    if (rc < 0 && rc != -ECANCELED) /* else: already failing, join says */
        fail(p, rc);
    rc = weft_scope_join(p->scope);
    weft_scope_free(p->scope);
    int err = ld_acq(&p->err);
    if (err)
        return err;
    if (ld_acq(&p->completed))
        return 0; /* all went through before the deadline or cancel hit */
    return rc;
}

int weft_pipeline(weft_chan *in, weft_chan *out, const weft_stage *stages,
                  int n, weft_time deadline)
{
    int rc = check_args(in, out, stages, n, deadline);
    if (rc)
        return rc;
    if (!weft__current())
        return -EPERM;
    struct pipe p = {.in = in, .out = out, .n = n};
    atomic_init(&p.err, 0);
    atomic_init(&p.completed, 0);
    p.st = weft__calloc((size_t)n, sizeof(*p.st));
    if (!p.st)
        return -ENOMEM;
    for (int k = 0; k < n && rc == 0; k++)
        rc = setup_stage(&p, k, &stages[k]);
    if (rc == 0)
        rc = weft__scope_open_until(&p.scope, WEFT_FAIL_FAST, deadline);
    if (rc) {
        free_pipe(&p);
        return rc;
    }
    /* Producers and consumers may drop their references while we run. */
    weft_chan_ref(in);
    weft_chan_ref(out);
    rc = run(&p);
    if (rc) {
        weft_chan_close(in);
        weft_chan_close(out);
    }
    free_pipe(&p);
    weft_chan_unref(in);
    weft_chan_unref(out);
    return rc;
}
