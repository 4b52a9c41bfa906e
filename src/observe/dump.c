/* SPDX-License-Identifier: MIT */
/*
 * The task dump: every live task of a runtime, what it waits on and since
 * when, under the scopes it lives in.
 *
 * How it walks without stopping the world. The tasks are the members of
 * the scopes of the root scope's tree, each list guarded by its scope's
 * lock. The dump keeps a path: the scopes from the root to the one it is
 * showing, whose locks it holds, taken parent before child as a cancel
 * takes them. It formats lines into a fixed buffer; when the buffer is
 * nearly full, it releases every lock, writes, then takes the path again
 * from the root. Its place in each scope of the path is kept in the scope
 * itself (dump_task: the next member to show; dump_kid: the kid it is
 * inside, or the next to enter), and a member or kid that leaves while
 * the locks are released moves that cursor on, under the same lock (one
 * compare on its way out). When it takes the path again, a kid that is
 * no longer its parent's cursor has left: the path ends there, and the
 * walk goes on with the parent's next kid. So:
 *   - no lock is held while it writes, and one is held only while a
 *     buffer's worth of lines is formatted: a worker that needs a lock
 *     waits for microseconds, never for the descriptor;
 *   - memory is the buffer and the path, whatever the number of tasks;
 *   - the time is linear in the number of tasks and scopes;
 *   - a task that stays alive is shown once; one that starts or ends
 *     during the dump may be missed.
 * The cursors are per scope, so dumps are taken one at a time (dump_mu).
 *
 * Under each parked task, the line it blocks on and, with
 * WEFT_DUMP_STACKS, its frames: where.c walks its stack from its saved
 * registers, with its scope's lock held (so its stack stays mapped).
 *
 * What it reads of a task that runs meanwhile: its park word (atomic),
 * its wait record (relaxed atomics, written by the task for itself), its
 * worker's cur (relaxed); its name, spawn site and id were written
 * before it joined its scope's list, which the dump reads under the lock.
 * A mutex's holder is loaded with acquire (its owner is stored with
 * release), so its id and name may be read too.
 */
#include "actor/struct.h"
#include "future/future.h"
#include "io/io.h"
#include "observe/observe.h"
#include "observe/where.h"
#include "pool/pool.h"
#include "sched/scheduler.h"
#include "scope/struct.h"
#include "sync/sync.h"
#include "util/fault.h"
#include "util/json.h"
#include "wait/seen.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ITEM_MAX (24 * 1024) /* the most one task's lines may take */
#define NAME_SHOWN 128       /* bytes of a name shown (escaped: x6 at most) */
#define FILE_SHOWN 256       /* bytes of a file name shown */
#define FUNC_SHOWN 96        /* bytes of a frame's function shown */
#define FRAME_FILE_SHOWN 160 /* bytes of a frame's file shown */
#define FRAMES_SHOWN 32      /* frames of a stack shown; then a count */
#define MAX_DEPTH 64         /* deeper scopes are counted, not shown */

typedef struct level {
    weft_scope *s;
    bool kids; /* its members are shown: now its kids */
} level;

typedef struct dump {
    weft_runtime *rt;
    int fd;
    bool json;
    bool stacks;    /* WEFT_DUMP_STACKS: every parked task's whole stack */
    int err;        /* the first write error */
    weft__stack st; /* the stack of the task being shown */
    int64_t now;
    char *buf;
    size_t len, cap;
    level path[MAX_DEPTH]; /* path[0 .. depth-1] locked while formatting */
    int depth;
    long long ntasks, nscopes, deep;
} dump;

static pthread_mutex_t dump_mu = PTHREAD_MUTEX_INITIALIZER;

size_t weft__dump_buf_size = 64 * 1024;

/* ---- output ---- */

static void put(dump *d, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void put(dump *d, const char *fmt, ...)
{
    size_t room = d->cap - d->len;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(d->buf + d->len, room, fmt, ap);
    va_end(ap);
    if (n > 0)
        d->len += (size_t)n < room ? (size_t)n : room - 1;
}

static void put_ch(dump *d, char c)
{
    if (d->len + 1 < d->cap)
        d->buf[d->len++] = c;
}

/* s as a JSON string (null for NULL), at most max bytes of it. */
static void put_json_str(dump *d, const char *s, size_t max)
{
    if (!s) {
        put(d, "null");
        return;
    }
    put_ch(d, '"');
    for (size_t i = 0; s[i] && i < max; i++) {
        char e[6];
        size_t n = weft__json_char((unsigned char)s[i], e);
        for (size_t k = 0; k < n; k++)
            put_ch(d, e[k]);
    }
    put_ch(d, '"');
}

/* s as text: quoted, control characters shown as '?'. */
static void put_text_str(dump *d, const char *s, size_t max)
{
    put_ch(d, '"');
    for (size_t i = 0; s[i] && i < max; i++) {
        unsigned char c = (unsigned char)s[i];
        put_ch(d, c < 0x20 || c == 0x7f ? '?' : (char)c);
    }
    put_ch(d, '"');
}

/* A task's id as "W.N": the worker that spawned it (0: made outside a
 * worker, as the root task), then that worker's count; a JSON string. */
static void put_id(dump *d, uint64_t id)
{
    put(d, d->json ? "\"%llu.%llu\"" : "%llu.%llu",
        (unsigned long long)(id >> WEFT__ID_BITS),
        (unsigned long long)(id & ((1ull << WEFT__ID_BITS) - 1)));
}

static void put_secs(dump *d, int64_t ns)
{
    put(d, "%s%lld.%03lld s", ns < 0 ? "-" : "",
        (long long)(ns < 0 ? -ns : ns) / WEFT_SEC,
        (long long)((ns < 0 ? -ns : ns) % WEFT_SEC) / 1000000);
}

static void out_write(dump *d)
{
    size_t off = 0;
    while (off < d->len && !d->err) {
        ssize_t n = write(d->fd, d->buf + off, d->len - off);
        if (n > 0)
            off += (size_t)n;
        else if (n < 0 && errno != EINTR)
            d->err = -errno;
        else if (n == 0)
            d->err = -EIO;
    }
    d->len = 0;
}

/* ---- the path's locks ---- */

static void unlock_path(dump *d)
{
    for (int i = d->depth - 1; i >= 0; i--)
        weft__lock_release(&d->path[i].s->lock);
}

/* Takes the path again, root first. A kid its parent's cursor no longer
 * names has left the tree (it was joined): the path ends at the parent,
 * whose cursor names the next kid. */
static void relock_path(dump *d)
{
    weft__lock_acquire(&d->path[0].s->lock);
    for (int i = 1; i < d->depth; i++) {
        if (d->path[i - 1].s->dump_kid != d->path[i].s) {
            d->depth = i;
            return;
        }
        weft__lock_acquire(&d->path[i].s->lock);
    }
}

/* Writes the buffer with no lock held. */
static void flush(dump *d)
{
    unlock_path(d);
    out_write(d);
    if (d->err)
        d->depth = 0;
    else if (d->depth > 0)
        relock_path(d);
}

/* ---- lines ---- */

static const char *cancel_name(int reason)
{
    switch (reason) {
    case CANCEL_NONE:
        return "no";
    case CANCEL_USER:
        return "user";
    case CANCEL_DEADLINE:
        return "deadline";
    case CANCEL_POLICY:
        return "policy";
    case CANCEL_PARENT:
        return "parent";
    }
    return "?";
}

static void indent(dump *d, int n)
{
    for (int i = 0; i < n; i++)
        put(d, "  ");
}

/* The scope's line (its lock held). */
static void scope_line(dump *d, weft_scope *s)
{
    int depth = d->depth - 1;
    weft_scope *parent = depth ? d->path[depth - 1].s : NULL;
    int reason = ld_rlx(&s->cancelled);
    const char *pol = s->pol ? s->pol->name : "?";
    if (d->json) {
        put(d, "{\"type\":\"scope\",\"id\":\"%p\",\"parent\":", (void *)s);
        if (parent)
            put(d, "\"%p\"", (void *)parent);
        else
            put(d, "null");
        put(d, ",\"depth\":%d,\"policy\":\"%s\",\"owner\":", depth, pol);
        if (s->owner)
            put_id(d, s->owner->id);
        else
            put(d, "null");
        put(d, ",\"running\":%d,\"deadline\":", s->live);
        if (s->deadline != WEFT_NEVER)
            put(d, "%lld", (long long)s->deadline);
        else
            put(d, "null");
        put(d,
            ",\"cancelled\":\"%s\",\"shield\":%s,\"joined\":%s,\"root\":%s,"
            "\"task_scope\":%s}\n",
            cancel_name(reason), s->shield ? "true" : "false",
            s->joined ? "true" : "false", depth == 0 ? "true" : "false",
            s->task_scope ? "true" : "false");
        return;
    }
    indent(d, depth);
    put(d, "scope %p%s%s %s, %d running", (void *)s,
        depth == 0 ? " (root)" : "", s->task_scope ? " (a task's own)" : "",
        pol, s->live);
    if (s->owner) {
        put(d, ", owner task ");
        put_id(d, s->owner->id);
        if (s->owner->name) {
            put_ch(d, ' ');
            put_text_str(d, s->owner->name, NAME_SHOWN);
        }
    }
    if (s->deadline != WEFT_NEVER) {
        int64_t left = s->deadline - d->now;
        put(d, left >= 0 ? ", deadline in " : ", deadline passed ");
        put_secs(d, left >= 0 ? left : -left);
        if (left < 0)
            put(d, " ago");
    }
    if (reason != CANCEL_NONE)
        put(d, ", cancelled (%s)", cancel_name(reason));
    if (s->shield)
        put(d, ", shielded");
    if (s->joined)
        put(d, ", joined");
    put(d, "\n");
}

/* The worker running t, or -1 (a snapshot). */
static int running_on(dump *d, weft_task *t)
{
    for (int i = 0; i < d->rt->nworkers; i++)
        if (ld_rlx(&d->rt->workers[i].cur) == t)
            return i;
    return -1;
}

/* A pool wait: the pool's name. */
static void pool_details(dump *d, const void *pool)
{
    const char *name = weft__pool_name(pool);
    if (d->json) {
        put(d, ",\"pool\":");
        put_json_str(d, name, NAME_SHOWN);
    } else if (name[0]) {
        put_ch(d, ' ');
        put_text_str(d, name, NAME_SHOWN);
    }
}

/* What a parked task waits on, per kind, after the kind and object. */
static void wait_details(dump *d, const weft__wait_seen *w)
{
    if (w->kind == &weft__wk_mutex) {
        weft_task *h = weft__mutex_owner(w->obj);
        if (d->json) {
            put(d, ",\"holder\":");
            if (h) {
                put(d, "{\"id\":");
                put_id(d, h->id);
                put(d, ",\"name\":");
                put_json_str(d, h->name, NAME_SHOWN);
                put(d, "}");
            } else {
                put(d, "null");
            }
        } else if (h) {
            put(d, " held by task ");
            put_id(d, h->id);
            if (h->name) {
                put_ch(d, ' ');
                put_text_str(d, h->name, NAME_SHOWN);
            }
        } else {
            put(d, " (free: its next holder is on its way)");
        }
    } else if (w->kind == &weft__wk_fd) {
        int fd = weft__fd_of(w->obj);
        const char *dir = w->name;
        if (d->json) {
            put(d, ",\"fd\":%d,\"direction\":", fd);
            put_json_str(d, dir, NAME_SHOWN);
        } else {
            put(d, " (fd %d", fd);
            if (dir)
                put(d, ", %s", dir);
            put(d, ")");
        }
    } else if (w->kind == &weft__wk_pool) {
        pool_details(d, w->obj);
    } else if (w->kind == &weft__wk_sleep || w->kind == &weft__wk_limiter) {
        int64_t until = w->until;
        if (d->json) {
            if (until != WEFT_NEVER)
                put(d, ",\"until\":%lld", (long long)until);
            else
                put(d, ",\"until\":null");
        } else if (until != WEFT_NEVER) {
            put(d, " until ");
            put_secs(d, until);
            put(d, " (in ");
            put_secs(d, until - d->now);
            put(d, ")");
        } else {
            put(d, " forever");
        }
    }
}

/* ---- where a parked task waits: its blocking line, its stack ---- */

/* An actor between messages has no caller of a weft function on its
 * stack (its loop is weft's): its behaviour stands for it. */
static bool behaviour_of(const weft__wait_seen *w, weft__frame *f)
{
    if (w->kind != &weft__wk_mailbox || !w->obj)
        return false;
    const weft_actor *a = w->obj;
    return weft__where_pc((uintptr_t)a->fn, f) == 0;
}

static void put_frame_text(dump *d, const weft__frame *f)
{
    if (f->func)
        put(d, "%.*s", FUNC_SHOWN, f->func);
    else
        put(d, "%#lx", (unsigned long)f->pc);
    if (f->file)
        put(d, " (%.*s:%d)", FRAME_FILE_SHOWN, f->file, f->line);
    else if (f->module)
        put(d, " (%.*s+%#lx)", FRAME_FILE_SHOWN, f->module,
            (unsigned long)f->offset);
    else if (f->func)
        put(d, " (%#lx)", (unsigned long)f->pc);
}

/* Under a parked task's line: "at FUNC (FILE:LINE)", its blocking line,
 * then with WEFT_DUMP_STACKS its frames from the weft call that parked. */
static void text_where(dump *d, const weft__wait_seen *w)
{
    const weft__stack *st = &d->st;
    weft__frame b;
    if (st->at >= 0) {
        indent(d, d->depth + 1);
        put(d, "at ");
        put_frame_text(d, &st->f[st->at]);
        put(d, "\n");
    } else if (behaviour_of(w, &b)) {
        indent(d, d->depth + 1);
        put(d, "at the mailbox of behaviour ");
        put_frame_text(d, &b);
        put(d, "\n");
    }
    if (!d->stacks)
        return;
    int from = st->from >= 0 ? st->from : 0;
    for (int i = from; i < st->n && i < from + FRAMES_SHOWN; i++) {
        indent(d, d->depth + 2);
        put(d, "#%d ", i - from);
        put_frame_text(d, &st->f[i]);
        if (st->f[i].inlined)
            put(d, " [inlined]");
        put(d, "\n");
    }
    if (st->n - from > FRAMES_SHOWN) {
        indent(d, d->depth + 2);
        put(d, "... %d more frames\n", st->n - from - FRAMES_SHOWN);
    }
}

static void put_frame_json(dump *d, const weft__frame *f)
{
    put(d, "{\"function\":");
    put_json_str(d, f->func, FUNC_SHOWN);
    put(d, ",\"file\":");
    put_json_str(d, f->file, FRAME_FILE_SHOWN);
    put(d, ",\"line\":%d,\"pc\":\"%#lx\"", f->line, (unsigned long)f->pc);
    if (f->module) {
        put(d, ",\"module\":");
        put_json_str(d, f->module, FRAME_FILE_SHOWN);
        put(d, ",\"offset\":\"%#lx\"", (unsigned long)f->offset);
    }
    put(d, ",\"inlined\":%s}", f->inlined ? "true" : "false");
}

/* ,"where":{frame} or null, and with WEFT_DUMP_STACKS ,"stack":[...]. */
static void json_where(dump *d, const weft__wait_seen *w)
{
    const weft__stack *st = &d->st;
    weft__frame b;
    put(d, ",\"where\":");
    if (st->at >= 0)
        put_frame_json(d, &st->f[st->at]);
    else if (behaviour_of(w, &b))
        put_frame_json(d, &b);
    else
        put(d, "null");
    if (!d->stacks)
        return;
    put(d, ",\"stack\":[");
    int from = st->from >= 0 ? st->from : 0;
    for (int i = from; i < st->n && i < from + FRAMES_SHOWN; i++) {
        if (i > from)
            put_ch(d, ',');
        put_frame_json(d, &st->f[i]);
    }
    put(d, "]");
}

/* The kind shown for a task parked without a wait noted (one made parked
 * before it ever ran). */
static const weft__wait_kind nothing = {WEFT_WAIT_NONE, "nothing"};

/* A member's line in JSON: t parked (w: its wait record) or not (w->kind
 * NULL), in state, running on worker (or -1). */
static void task_line_json(dump *d, weft_task *t, const weft__wait_seen *w,
                           const char *state, int worker, int64_t for_ns)
{
    put(d, "{\"type\":\"task\",\"id\":");
    put_id(d, t->id);
    put(d, ",\"name\":");
    put_json_str(d, t->name, NAME_SHOWN);
    put(d, ",\"file\":");
    put_json_str(d, t->file, FILE_SHOWN);
    put(d, ",\"line\":%d,\"state\":\"%s\",\"worker\":", t->line, state);
    if (worker >= 0)
        put(d, "%d", worker);
    else
        put(d, "null");
    put(d, ",\"scope\":\"%p\",\"current_scope\":\"%p\",\"scopes\":[",
        (void *)d->path[d->depth - 1].s, (void *)weft__task_scope_cur(t));
    for (int i = d->depth - 1; i >= 0; i--)
        put(d, "\"%p\"%s", (void *)d->path[i].s, i ? "," : "");
    put(d, "],\"wait\":");
    if (w->kind) {
        put(d, "{\"kind\":\"%s\",\"object\":", weft__wait_kind_name(w->kind));
        if (w->obj)
            put(d, "\"%p\"", w->obj);
        else
            put(d, "null");
        put(d, ",\"since\":%lld,\"for_ns\":%lld", (long long)w->since,
            (long long)for_ns);
        wait_details(d, w);
        put(d, "}");
    } else {
        put(d, "null");
    }
    json_where(d, w);
    put(d, "}\n");
}

/* The same line in text. */
static void task_line_text(dump *d, weft_task *t, const weft__wait_seen *w,
                           const char *state, int worker, int64_t for_ns)
{
    indent(d, d->depth);
    put(d, "task ");
    put_id(d, t->id);
    if (t->name) {
        put_ch(d, ' ');
        put_text_str(d, t->name, NAME_SHOWN);
    }
    put(d, " (%.*s:%d): %s", FILE_SHOWN, t->file ? t->file : "?", t->line,
        state);
    if (worker >= 0)
        put(d, " on worker %d", worker);
    if (w->kind) {
        put(d, " for ");
        put_secs(d, for_ns);
        put(d, " on %s", weft__wait_kind_name(w->kind));
        if (w->obj)
            put(d, " %p", w->obj);
        wait_details(d, w);
    }
    put(d, "\n");
    if (w->kind)
        text_where(d, w);
}

/* A member's line (its home's lock held). */
static void task_line(dump *d, weft_task *t)
{
    uint64_t park = ld_rlx(&t->park);
    bool parked = PARK_STATE(park) != PARK_RUNNING;
    int worker = parked ? -1 : running_on(d, t);
    const char *state = parked ? "parked" : worker >= 0 ? "running" : "ready";
    weft__wait_seen w;
    weft__wait_record(t, &w);
    if (!parked)
        w.kind = NULL;
    else if (!w.kind)
        w.kind = &nothing; /* parked, never noted (a task made parked) */
    int64_t for_ns = d->now > w.since ? d->now - w.since : 0;
    d->ntasks++;
    d->st.n = 0;
    d->st.at = d->st.from = -1;
    if (parked)
        weft__task_stack(t, &d->st);
    if (d->json)
        task_line_json(d, t, &w, state, worker, for_ns);
    else
        task_line_text(d, t, &w, state, worker, for_ns);
}

/* ---- the walk ---- */

/* Makes s (locked, pushed on the path) the scope being shown. */
static void enter(dump *d, weft_scope *s)
{
    s->dump_task = s->members;
    s->dump_kid = s->kids;
    d->nscopes++;
    scope_line(d, s);
}

/* One step: a line, a move down, or a move up. */
static void step(dump *d)
{
    level *l = &d->path[d->depth - 1];
    weft_scope *s = l->s;
    if (!l->kids) {
        weft_task *t = s->dump_task;
        if (t) {
            task_line(d, t);
            s->dump_task = weft__scope_of_task(t)->mnext;
        } else {
            l->kids = true;
        }
        return;
    }
    weft_scope *k = s->dump_kid;
    if (!k) { /* s is done: up, to the parent's next kid */
        weft__lock_release(&s->lock);
        if (--d->depth > 0) /* s is still linked: its parent is locked */
            d->path[d->depth - 1].s->dump_kid = s->sib_next;
        return;
    }
    if (d->depth == MAX_DEPTH) {
        d->deep++;
        s->dump_kid = k->sib_next;
        return;
    }
    weft__lock_acquire(&k->lock);
    d->path[d->depth++] = (level){.s = k};
    enter(d, k);
}

static void header(dump *d)
{
    const char *clock =
        d->rt->clock == WEFT_CLOCK_VIRTUAL ? "virtual" : "monotonic";
    if (d->json) {
        put(d,
            "{\"type\":\"dump\",\"version\":1,\"runtime\":\"%p\","
            "\"workers\":%d,\"clock\":\"%s\",\"now\":%lld}\n",
            (void *)d->rt, d->rt->nworkers, clock, (long long)d->now);
        return;
    }
    put(d, "weft task dump: runtime %p, %d workers, %s clock, now ",
        (void *)d->rt, d->rt->nworkers, clock);
    put_secs(d, d->now);
    put(d, "\n");
}

/* The workers' slow slices (stats.c), before the end line: a stuck
 * program's dump also names the tasks that held their worker longest. */
static void slices(dump *d)
{
    char b[4096];
    size_t n = weft__slices_format(d->rt, d->json, b, sizeof b);
    if (d->cap - d->len < n + 256)
        flush(d);
    put(d, "%.*s", (int)n, b);
}

static void trailer(dump *d)
{
    slices(d);
    if (d->json) {
        put(d,
            "{\"type\":\"end\",\"tasks\":%lld,\"scopes\":%lld,\"deep\":%lld}\n",
            d->ntasks, d->nscopes, d->deep);
        return;
    }
    if (d->deep)
        put(d, "(%lld scopes nested deeper than %d not shown)\n", d->deep,
            MAX_DEPTH);
    put(d, "end of dump: %lld tasks in %lld scopes\n", d->ntasks, d->nscopes);
}

static void dump_all(void *arg)
{
    dump *d = arg;
    weft__where_prepare(); /* loaded before any scope's lock is taken */
    pthread_mutex_lock(&dump_mu);
    d->now = weft__now(d->rt);
    header(d);
    d->path[0] = (level){.s = weft__scope_rt(d->rt)->root};
    d->depth = 1;
    weft__lock_acquire(&weft__scope_rt(d->rt)->root->lock);
    enter(d, weft__scope_rt(d->rt)->root);
    while (d->depth > 0) {
        if (d->cap - d->len < ITEM_MAX)
            flush(d);
        else
            step(d);
    }
    if (!d->err) {
        trailer(d);
        out_write(d);
    }
    pthread_mutex_unlock(&dump_mu);
}

int weft__dump_write(weft_runtime *rt, int fd, unsigned flags)
{
    if (flags & ~(unsigned)(WEFT_DUMP_JSON | WEFT_DUMP_STACKS))
        return -EINVAL;
    if (!rt)
        return -ESRCH;
    if (fd < 0)
        return -EBADF;
    size_t cap = weft__dump_buf_size;
    if (cap < ITEM_MAX + 256)
        cap = ITEM_MAX + 256;
    dump *d = weft__calloc(1, sizeof(*d));
    char *buf = weft__malloc(cap);
    if (!d || !buf) {
        free(d);
        free(buf);
        return -ENOMEM;
    }
    *d = (dump){.rt = rt,
                .fd = fd,
                .json = flags & WEFT_DUMP_JSON,
                .stacks = flags & WEFT_DUMP_STACKS,
                .buf = buf,
                .cap = cap};
    /* Walking stacks takes more stack than a task has: from a task, the
     * dump runs on a thread of its own while the task's worker waits. */
    weft__on_big_stack(dump_all, d);
    int rc = d->err;
    free(buf);
    free(d);
    return rc;
}
