/* SPDX-License-Identifier: MIT */
/*
 * The trace exporter: an instrument (weft_instrument) that records what
 * every worker runs, and writes it as Chrome's Trace Event Format when
 * weft_run ends.
 *
 * Recording. Each worker has a buffer of its own (struct wbuf, a cache
 * line apart), written only by its thread: the callbacks find it through
 * weft__tl_worker, so there is no lock and no shared atomic. A run hook
 * notes which task started and when; the park or exit hook that ends the
 * run appends one complete slice (start, duration, task id, how it ended).
 * A wake appends an instant on the waker's worker, a scope cancel one on
 * the canceller's, a spawn a record of the task's name (copied: the
 * spawner's string may be gone by the end) and spawn site. Events from a
 * thread that is no worker of this runtime (a blocking pool's thread
 * waking a task) are not recorded. Storage grows in chunks of CHUNK
 * events, up to WEFT_TRACE_EVENTS events per worker (and as many task
 * records): later ones are counted as dropped.
 *
 * Writing. After every worker has stopped, weft_run calls
 * weft__trace_write: the task records of all workers go into one table
 * (id -> name, site), then the slices and instants of each worker are
 * written with their task's name. Times are microseconds from the
 * runtime's clock at the start, with nanosecond decimals.
 *
 * The trace's memory comes from plain malloc, not through the allocation
 * fault site (util/fault.h): a trace is how a run is looked at, so it must
 * not change the run. A seed replayed with a trace makes the same faults
 * at the same passes as without one.
 */
#include "actor/actor.h"
#include "future/future.h"
#include "io/io.h"
#include "observe/observe.h"
#include "pool/pool.h"
#include "sched/clock.h"
#include "scope/scope.h"
#include "sync/sync.h"
#include "util/json.h"
#include "wait/record.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Each layer's wait kinds (wait.h), by their public number. */
extern const weft__wait_kind weft__wk_supervisor; /* supervisor.c's */
static const weft__wait_kind none = {WEFT_WAIT_NONE, "nothing"};
static const weft__wait_kind yield = {WEFT_WAIT_YIELD, "yield"};
static const weft__wait_kind *const kinds[] = {
    &none,
    &weft__wk_sleep,
    &weft__wk_send,
    &weft__wk_recv,
    &weft__wk_select,
    &weft__wk_mutex,
    &weft__wk_rwlock,
    &weft__wk_cond,
    &weft__wk_sem,
    &weft__wk_event,
    &weft__wk_waitgroup,
    &weft__wk_once,
    &weft__wk_barrier,
    &weft__wk_future,
    &weft__wk_fd,
    &weft__wk_blocking,
    &weft__wk_bulkhead,
    &weft__wk_limiter,
    &weft__wk_scope,
    &weft__wk_task,
    &weft__wk_mailbox,
    &weft__wk_tell,
    &weft__wk_ask,
    &weft__wk_actor,
    &weft__wk_supervisor,
    &weft__wk_pool,
    &yield,
};
_Static_assert(sizeof kinds / sizeof *kinds == WEFT_WAIT_YIELD + 1,
               "a wait kind for every weft_wait_kind");

const char *weft_wait_kind_name(int kind)
{
    if (kind < 0 || kind > WEFT_WAIT_YIELD)
        return "?";
    /* Each kind sits at its own number. */
    WEFT_ASSERT(kinds[kind]->id == kind);
    return kinds[kind]->name;
}

/* ---- the buffers ---- */

#define CHUNK 4096 /* events per chunk */
#define NAME_MAX_COPY 48

enum { EV_SLICE, EV_WAKE, EV_CANCEL };
#define END_EXIT (-1) /* a slice's `how`: the task exited (else a kind) */

typedef struct ev {
    int64_t ts;     /* ns from the start */
    int64_t dur;    /* slices: ns */
    uint64_t id;    /* the task (a cancel: the scope's address) */
    uint64_t id2;   /* wake: the waker's id; cancel: the canceller's (0:
                     * none) */
    int32_t how;    /* slice: END_EXIT or the wait kind; wake: its code;
                     * cancel: the reason */
    int32_t status; /* slice that exits: the status */
    uint8_t type;   /* EV_* */
} ev;

typedef struct rec { /* a task's spawn */
    uint64_t id;
    const char *file;
    int line;
    bool named;
    char name[NAME_MAX_COPY];
} rec;

/* A growing array in chunks, up to WEFT_TRACE_EVENTS elements. */
typedef struct chunks {
    void **c;
    size_t nc, n;
    uint64_t dropped;
} chunks;

/* The sizes weft.h and docs/debugging.md give (on 64-bit systems). */
_Static_assert(sizeof(void *) != 8 || (sizeof(ev) == 48 && sizeof(rec) == 72),
               "the documented sizes of a trace's events and names");

struct __attribute__((aligned(WEFT_CACHELINE))) wbuf {
    chunks evs;      /* ev */
    chunks recs;     /* rec */
    uint64_t run_id; /* the task running, 0: none */
    int64_t run_ts;  /* since when */
};

struct weft__trace {
    weft_instrument self; /* ctx: this */
    const weft_instrument *user;
    weft_runtime *rt;
    FILE *f;
    char *path;
    int64_t t0;
    int nworkers;
    struct wbuf *bufs;
};

static void *chunks_slot(chunks *a, size_t size)
{
    if (a->n >= (size_t)WEFT_TRACE_EVENTS) {
        a->dropped++;
        return NULL;
    }
    size_t ci = a->n / CHUNK;
    if (ci == a->nc) {
        void **nc = realloc(a->c, (a->nc + 1) * sizeof(*nc));
        void *chunk = nc ? malloc(CHUNK * size) : NULL;
        if (nc)
            a->c = nc;
        if (!chunk) {
            a->dropped++;
            return NULL;
        }
        a->c[a->nc++] = chunk;
    }
    return (char *)a->c[ci] + (a->n++ % CHUNK) * size;
}

static void *chunks_at(const chunks *a, size_t i, size_t size)
{
    return (char *)a->c[i / CHUNK] + (i % CHUNK) * size;
}

static void chunks_free(chunks *a)
{
    for (size_t i = 0; i < a->nc; i++)
        free(a->c[i]);
    free(a->c);
}

/* The calling worker's buffer, or NULL off this runtime's workers. */
static struct wbuf *mine(weft__trace *tr)
{
    weft_worker *w = weft__tl_worker;
    return w && weft__wpub(w)->rt == tr->rt ? &tr->bufs[weft__wpub(w)->id]
                                            : NULL;
}

static int64_t now(weft__trace *tr)
{
    return weft__now(tr->rt) - tr->t0;
}

/* ---- the callbacks ---- */

static void on_spawn(void *ctx, const weft_task_info *t,
                     const weft_task_info *parent)
{
    weft__trace *tr = ctx;
    struct wbuf *b = mine(tr);
    rec *r = b ? chunks_slot(&b->recs, sizeof(rec)) : NULL;
    if (r) {
        r->id = t->id;
        r->file = t->file;
        r->line = t->line;
        r->named = t->name != NULL;
        if (t->name)
            snprintf(r->name, sizeof r->name, "%s", t->name);
    }
    if (tr->user && tr->user->spawn)
        tr->user->spawn(tr->user->ctx, t, parent);
}

static void on_run(void *ctx, const weft_task_info *t)
{
    weft__trace *tr = ctx;
    struct wbuf *b = mine(tr);
    if (b) {
        b->run_id = t->id;
        b->run_ts = now(tr);
    }
    if (tr->user && tr->user->run)
        tr->user->run(tr->user->ctx, t);
}

/* The run of t on this worker ends: its slice. */
static void slice_end(weft__trace *tr, const weft_task_info *t, int how,
                      int status)
{
    struct wbuf *b = mine(tr);
    if (!b || b->run_id != t->id)
        return;
    b->run_id = 0;
    ev *e = chunks_slot(&b->evs, sizeof(ev));
    if (!e)
        return;
    int64_t end = now(tr);
    *e = (ev){.type = EV_SLICE,
              .ts = b->run_ts,
              .dur = end - b->run_ts,
              .id = t->id,
              .how = how,
              .status = status};
}

static void on_park(void *ctx, const weft_task_info *t, weft_wait_kind kind,
                    const void *obj)
{
    weft__trace *tr = ctx;
    slice_end(tr, t, (int)kind, 0);
    if (tr->user && tr->user->park)
        tr->user->park(tr->user->ctx, t, kind, obj);
}

static void on_task_exit(void *ctx, const weft_task_info *t, int status)
{
    weft__trace *tr = ctx;
    slice_end(tr, t, END_EXIT, status);
    if (tr->user && tr->user->exit)
        tr->user->exit(tr->user->ctx, t, status);
}

static void instant(weft__trace *tr, int type, uint64_t id, uint64_t id2,
                    int how)
{
    struct wbuf *b = mine(tr);
    ev *e = b ? chunks_slot(&b->evs, sizeof(ev)) : NULL;
    if (e)
        *e = (ev){.type = (uint8_t)type,
                  .ts = now(tr),
                  .id = id,
                  .id2 = id2,
                  .how = how};
}

static void on_wake(void *ctx, const weft_task_info *t,
                    const weft_task_info *waker, int code)
{
    weft__trace *tr = ctx;
    instant(tr, EV_WAKE, t->id, waker ? waker->id : 0, code);
    if (tr->user && tr->user->wake)
        tr->user->wake(tr->user->ctx, t, waker, code);
}

static void on_scope_cancel(void *ctx, weft_scope *s, weft_cancel_reason reason,
                            const weft_task_info *by)
{
    weft__trace *tr = ctx;
    instant(tr, EV_CANCEL, (uint64_t)(uintptr_t)s, by ? by->id : 0,
            (int)reason);
    if (tr->user && tr->user->scope_cancel)
        tr->user->scope_cancel(tr->user->ctx, s, reason, by);
}

/* ---- set up ---- */

const char *weft__trace_path(const weft_config *cfg)
{
    const char *env = getenv("WEFT_TRACE");
    if (env)
        return *env ? env : NULL;
    return cfg->trace_path;
}

weft__trace *weft__trace_new(weft_runtime *rt, const char *path,
                             const weft_instrument *user, int *err)
{
    weft__trace *tr = calloc(1, sizeof(*tr));
    if (tr) {
        tr->bufs =
            aligned_alloc(WEFT_CACHELINE, (size_t)weft__rtpub(rt)->nworkers *
                                              sizeof(*tr->bufs));
        tr->path = strdup(path);
    }
    if (!tr || !tr->bufs || !tr->path) {
        weft__trace_free(tr);
        *err = -ENOMEM;
        return NULL;
    }
    memset(tr->bufs, 0, (size_t)weft__rtpub(rt)->nworkers * sizeof(*tr->bufs));
    tr->f = fopen(path, "w");
    if (!tr->f) {
        *err = -errno;
        fprintf(stderr,
                "weft: cannot create the trace file %s: %s; not "
                "running\n",
                path, strerror(errno));
        weft__trace_free(tr);
        return NULL;
    }
    tr->rt = rt;
    tr->user = user;
    tr->nworkers = weft__rtpub(rt)->nworkers;
    tr->t0 = weft__now(rt);
    tr->self = (weft_instrument){.ctx = tr,
                                 .spawn = on_spawn,
                                 .run = on_run,
                                 .park = on_park,
                                 .wake = on_wake,
                                 .exit = on_task_exit,
                                 .scope_cancel = on_scope_cancel};
    return tr;
}

const weft_instrument *weft__trace_instrument(weft__trace *tr)
{
    return &tr->self;
}

void weft__trace_free(weft__trace *tr)
{
    if (!tr)
        return;
    if (tr->bufs) {
        for (int i = 0; i < tr->nworkers; i++) {
            chunks_free(&tr->bufs[i].evs);
            chunks_free(&tr->bufs[i].recs);
        }
        free(tr->bufs);
    }
    if (tr->f)
        fclose(tr->f);
    free(tr->path);
    free(tr);
}

/* ---- writing ---- */

/* The task records of every worker, by id (open addressing). */
typedef struct names {
    const rec **slot;
    size_t mask;
} names;

static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x;
}

static int names_build(names *nm, weft__trace *tr)
{
    size_t n = 0;
    for (int i = 0; i < tr->nworkers; i++)
        n += tr->bufs[i].recs.n;
    size_t cap = 16;
    while (cap < 2 * n)
        cap *= 2;
    nm->slot = calloc(cap, sizeof(*nm->slot));
    if (!nm->slot)
        return -ENOMEM;
    nm->mask = cap - 1;
    for (int i = 0; i < tr->nworkers; i++) {
        const chunks *a = &tr->bufs[i].recs;
        for (size_t k = 0; k < a->n; k++) {
            const rec *r = chunks_at(a, k, sizeof(rec));
            size_t h = mix(r->id) & nm->mask;
            while (nm->slot[h])
                h = (h + 1) & nm->mask;
            nm->slot[h] = r;
        }
    }
    return 0;
}

static const rec *names_find(const names *nm, uint64_t id)
{
    for (size_t h = mix(id) & nm->mask; nm->slot[h]; h = (h + 1) & nm->mask)
        if (nm->slot[h]->id == id)
            return nm->slot[h];
    return NULL;
}

/* A JSON string's contents. */
static void put_str(FILE *f, const char *s)
{
    for (char e[6]; *s; s++)
        fwrite(e, 1, weft__json_char((unsigned char)*s, e), f);
}

/* Microseconds, from ns, with the ns as decimals. */
static void put_us(FILE *f, const char *key, int64_t ns)
{
    fprintf(f, ",\"%s\":%" PRId64 ".%03d", key, ns / 1000, (int)(ns % 1000));
}

static void put_task_name(FILE *f, const rec *r, uint64_t id)
{
    if (r && r->named)
        put_str(f, r->name);
    else /* as the dump names it: "task W.N" (W: the worker + 1) */
        fprintf(f, "task %" PRIu64 ".%" PRIu64, id >> WEFT__ID_BITS,
                id & ((UINT64_C(1) << WEFT__ID_BITS) - 1));
}

static void put_slice(FILE *f, const names *nm, int tid, const ev *e)
{
    const rec *r = names_find(nm, e->id);
    fputs("{\"name\":\"", f);
    put_task_name(f, r, e->id);
    fprintf(f, "\",\"cat\":\"task\",\"ph\":\"X\",\"pid\":1,\"tid\":%d", tid);
    put_us(f, "ts", e->ts);
    put_us(f, "dur", e->dur);
    fprintf(f, ",\"args\":{\"id\":%" PRIu64, e->id);
    if (r) {
        fputs(",\"spawn\":\"", f);
        put_str(f, r->file ? r->file : "?");
        fprintf(f, ":%d\"", r->line);
    }
    if (e->how == END_EXIT)
        fprintf(f, ",\"then\":\"exit\",\"status\":%d}}", e->status);
    else
        fprintf(f, ",\"then\":\"%s\"}}", weft_wait_kind_name(e->how));
}

static const char *reason_name(int r)
{
    return r == WEFT_CANCEL_USER       ? "cancel"
           : r == WEFT_CANCEL_DEADLINE ? "deadline"
                                       : "policy";
}

static void put_instant(FILE *f, const names *nm, int tid, const ev *e)
{
    if (e->type == EV_WAKE) {
        fputs("{\"name\":\"wake ", f);
        put_task_name(f, names_find(nm, e->id), e->id);
        fputs("\",\"cat\":\"wake\"", f);
    } else {
        fprintf(f, "{\"name\":\"scope %s\",\"cat\":\"cancel\"",
                reason_name(e->how));
    }
    fprintf(f, ",\"ph\":\"i\",\"s\":\"t\",\"pid\":1,\"tid\":%d", tid);
    put_us(f, "ts", e->ts);
    if (e->type == EV_WAKE)
        fprintf(f,
                ",\"args\":{\"id\":%" PRIu64 ",\"waker\":%" PRIu64
                ",\"code\":%d}}",
                e->id, e->id2, e->how);
    else
        fprintf(f,
                ",\"args\":{\"scope\":\"0x%" PRIx64 "\",\"by\":%" PRIu64 "}}",
                e->id, e->id2);
}

static void put_meta(FILE *f, weft__trace *tr)
{
    bool virt = weft__rtpub(tr->rt)->clock_ops == &weft__clock_virtual;
    fprintf(f,
            "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":1,\"tid\":0,"
            "\"args\":{\"name\":\"weft (%s clock)\"}}",
            virt ? "virtual" : "monotonic");
    for (int i = 0; i < tr->nworkers; i++)
        fprintf(f,
                ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,"
                "\"tid\":%d,\"args\":{\"name\":\"worker %d\"}},\n"
                "{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":1,"
                "\"tid\":%d,\"args\":{\"sort_index\":%d}}",
                i + 1, i, i + 1, i);
}

int weft__trace_write(weft__trace *tr)
{
    names nm;
    int rc = names_build(&nm, tr);
    if (rc != 0) {
        fprintf(stderr, "weft: out of memory writing the trace %s\n", tr->path);
        return rc;
    }
    FILE *f = tr->f;
    uint64_t dropped = 0;
    fputs("{\"traceEvents\":[\n", f);
    put_meta(f, tr);
    for (int i = 0; i < tr->nworkers; i++) {
        const struct wbuf *b = &tr->bufs[i];
        dropped += b->evs.dropped + b->recs.dropped;
        for (size_t k = 0; k < b->evs.n; k++) {
            const ev *e = chunks_at(&b->evs, k, sizeof(ev));
            fputs(",\n", f);
            if (e->type == EV_SLICE)
                put_slice(f, &nm, i + 1, e);
            else
                put_instant(f, &nm, i + 1, e);
        }
    }
    fprintf(
        f,
        "\n],\n\"displayTimeUnit\":\"ns\",\n\"otherData\":{\"clock\":"
        "\"%s\",\"workers\":%d,\"events_per_worker\":%d,\"dropped\":%" PRIu64
        "}}\n",
        weft__rtpub(tr->rt)->clock_ops == &weft__clock_virtual ? "virtual"
                                                               : "monotonic",
        tr->nworkers, WEFT_TRACE_EVENTS, dropped);
    free(nm.slot);
    tr->f = NULL;
    errno = 0;
    if (ferror(f) | fclose(f)) {
        rc = errno ? -errno : -EIO;
        fprintf(stderr, "weft: cannot write the trace %s: %s\n", tr->path,
                strerror(-rc));
        return rc;
    }
    if (dropped)
        fprintf(stderr,
                "weft: trace %s: %" PRIu64 " events dropped (more than %d on "
                "a worker)\n",
                tr->path, dropped, WEFT_TRACE_EVENTS);
    return 0;
}
