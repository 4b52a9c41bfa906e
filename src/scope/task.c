/* SPDX-License-Identifier: MIT */
/*
 * Task handles: cancel one task, join it for its status, release it.
 *
 * A handle is a value, {id}, not a pointer: a handle joined or released,
 * or from a runtime that has returned, must be refused, not followed into
 * freed memory. The id names a record in a table (its low 24 bits) and
 * the life of that record (its generation, the high 40 bits). Records sit
 * in chunks that are never freed while the process runs and go back to a
 * free list when both sides are done with them (the task has finished,
 * and the user has joined or released it), their generation bumped: a
 * stale id then misses. The chunk pointers are published with a release
 * store, so a lookup from any thread needs no table lock, only the
 * record's own.
 *
 * A task spawned with a handle runs inside the record's scope (scope.c
 * makes it a kid of the task's home and the task's current scope), so a
 * cancel of the handle is a cancel of that scope: level-triggered, waking
 * the task if it is parked cancellably, flowing into the scopes it opens
 * but not past shields, and never up to the home or the siblings.
 *
 * Lifetime, under the record's lock: `done` (the task has finished: its
 * scope is closed and unlinked, its status stored) and `released` (the
 * user's part is over). The record is freed by whichever of the task's
 * exit, a successful join, or a release makes both true. A cancel holds
 * the record's lock while it cancels the scope, and acts only while the
 * task is not done: the task cannot finish under it, because its exit
 * closes the scope first (under the scope's lock, which the cancel also
 * takes) and a closed scope refuses the cancel. Lock order: the record,
 * then its scope, then the scopes below; nothing takes the record's lock
 * while holding a scope's.
 *
 * Joiners wait on the record's queue through weft__wait; the exit
 * and a release wake them all, and each looks at the record again.
 *
 * A task cancelled through its handle that returns -ECANCELED is marked
 * withdrawn: its scope keeps and counts its status, but the policy does
 * not act on it (a fail-fast scope would otherwise cancel every sibling
 * because one was stopped on purpose; Trio's cancel scope likewise
 * swallows the Cancelled it caused).
 */
#include "scope/cases.h"
#include "scope/struct.h"
#include "util/fault.h"
#include "wait/many.h"
#include "wait/wait.h"

#include <stdlib.h>

const weft__wait_kind weft__wk_task = {WEFT_WAIT_TASK, "task join"};

#define INDEX_BITS 24
#define CHUNK_BITS 8
#define CHUNK (1u << CHUNK_BITS)
#define NCHUNKS (1u << (INDEX_BITS - CHUNK_BITS))
#define GEN_MASK ((UINT64_C(1) << (64 - INDEX_BITS)) - 1)

static pthread_mutex_t table_mu = PTHREAD_MUTEX_INITIALIZER;
static _Atomic(weft__handle *) chunks[NCHUNKS]; /* published, never freed */
static unsigned nchunks;                        /* under table_mu */
static weft__handle *free_list;                 /* under table_mu */

/* A new chunk's records onto the free list (table_mu held). */
static int add_chunk(void)
{
    if (nchunks == NCHUNKS)
        return -ENOMEM; /* 16 M handles at once */
    weft__handle *c = weft__calloc(CHUNK, sizeof(*c));
    if (!c)
        return -ENOMEM;
    for (unsigned i = CHUNK; i-- > 0;) {
        c[i].index = nchunks * CHUNK + i;
        c[i].gen = 1;
        c[i].next_free = free_list;
        free_list = &c[i];
    }
    st_rel(&chunks[nchunks++], c);
    return 0;
}

weft__handle *weft__handle_new(weft_runtime *rt)
{
    pthread_mutex_lock(&table_mu);
    weft__handle *h = NULL;
    if (free_list || add_chunk() == 0) {
        h = free_list;
        free_list = h->next_free;
    }
    pthread_mutex_unlock(&table_mu);
    if (!h)
        return NULL;
    weft__lock_acquire(&h->lock);
    h->live = true;
    h->done = false;
    h->released = false;
    h->status = 0;
    h->rt = rt;
    h->joiners = (weft__waitq){NULL, NULL};
    weft__lock_release(&h->lock);
    return h;
}

uint64_t weft__handle_id(const weft__handle *h)
{
    /* Only the spawner reads gen before the id is out: no lock needed. */
    return h->gen << INDEX_BITS | h->index;
}

/* Ends the record's life (its lock held): ids of this life miss from now
 * on. The caller puts it back with put_free once unlocked. */
static void retire_locked(weft__handle *h)
{
    h->gen = (h->gen + 1) & GEN_MASK;
    if (h->gen == 0)
        h->gen = 1; /* 0 would let the zero handle name index 0 */
    h->live = false;
    h->rt = NULL;
}

static void put_free(weft__handle *h)
{
    pthread_mutex_lock(&table_mu);
    h->next_free = free_list;
    free_list = h;
    pthread_mutex_unlock(&table_mu);
}

/* Lets go of a record locked by the caller. If this was its last use (the
 * task done and the handle released, or a spawn that failed), its life
 * ends and it goes back to the free list; then the joiners the caller
 * claimed under the lock are woken. */
static void unlock_and_wake(weft__handle *h, bool last, weft__waiter *joiners)
{
    if (last)
        retire_locked(h);
    weft__lock_release(&h->lock);
    if (last)
        put_free(h);
    weft__wake_chain(joiners, 0);
}

void weft__handle_abandon(weft__handle *h)
{
    weft__lock_acquire(&h->lock);
    unlock_and_wake(h, true, NULL);
}

/* The live record an id names, locked; or -EINVAL (zero, or no such
 * record was ever made), -ESRCH (that life is over). */
static int lookup(uint64_t id, weft__handle **out)
{
    uint64_t index = id & ((UINT64_C(1) << INDEX_BITS) - 1);
    if (id == 0)
        return -EINVAL;
    weft__handle *c = ld_acq(&chunks[index >> CHUNK_BITS]);
    if (!c)
        return -EINVAL;
    weft__handle *h = &c[index & (CHUNK - 1)];
    weft__lock_acquire(&h->lock);
    if (h->gen != id >> INDEX_BITS || !h->live || h->released) {
        bool never = (id >> INDEX_BITS) > h->gen;
        weft__lock_release(&h->lock);
        return never ? -EINVAL : -ESRCH;
    }
    *out = h;
    return 0;
}

WEFT_COLD void weft__handle_exit(weft_task *t)
{
    weft__handle *h = weft__scope_of_task(t)->handle;
    weft__scope_close_task(&h->scope);
    /* Cancelled by the handle itself (not from above, which the scope's
     * flag would name CANCEL_PARENT): a -ECANCELED is that cancel's echo,
     * not a failure the scope's policy should act on. */
    if (t->status == -ECANCELED && ld_rlx(&h->scope.cancelled) == CANCEL_USER)
        t->flags |= TASK_WITHDRAWN;
    weft__waiter *joiners = NULL;
    weft__lock_acquire(&h->lock);
    h->status = t->status;
    h->done = true;
    weft__waitq_claim_all(&h->joiners, &joiners);
    unlock_and_wake(h, h->released, joiners);
}

void weft__handles_fini(weft_runtime *rt)
{
    pthread_mutex_lock(&table_mu);
    unsigned n = nchunks;
    pthread_mutex_unlock(&table_mu);
    for (unsigned c = 0; c < n; c++) {
        weft__handle *chunk = ld_acq(&chunks[c]);
        for (unsigned i = 0; i < CHUNK; i++) {
            weft__handle *h = &chunk[i];
            weft__lock_acquire(&h->lock);
            /* done: every task of rt has finished */
            unlock_and_wake(h, h->live && h->rt == rt, NULL);
        }
    }
}

/* ---- the public API ---- */

int weft_task_cancel(weft_task_handle th)
{
    weft__handle *h;
    int rc = lookup(th.id, &h);
    if (rc)
        return rc;
    if (!h->done)
        weft__scope_cancel(&h->scope, CANCEL_USER);
    weft__lock_release(&h->lock);
    return 0;
}

int weft_task_detach(weft_task_handle th)
{
    weft__handle *h;
    int rc = lookup(th.id, &h);
    if (rc)
        return rc;
    h->released = true;
    weft__waiter *joiners = NULL;
    weft__waitq_claim_all(&h->joiners, &joiners); /* they find -ESRCH */
    unlock_and_wake(h, h->done, joiners);
    return 0;
}

int weft_task_join_until(weft_task_handle th, int *status, weft_time deadline)
{
    weft_task *self = weft__current();
    if (!self)
        return -EPERM;
    for (;;) {
        /* A checkpoint even when the task has finished (Trio's rule), so
         * a cancelled joiner never consumes the handle. */
        int rc = weft__checkpoint();
        if (rc)
            return rc;
        weft__handle *h;
        if ((rc = lookup(th.id, &h)) != 0)
            return rc;
        if (h->rt != weft__wpub(self->worker)->rt) {
            rc = -EINVAL;
        } else if (h == weft__scope_of_task(self)->handle) {
            rc = -EDEADLK;
        } else if (!h->done) {
            weft__waiter w = {0};
            rc = weft__wait(&w, &(weft__wait_spec){.kind = &weft__wk_task,
                                                   .obj = h,
                                                   .lock = &h->lock,
                                                   .q = &h->joiners,
                                                   .deadline = deadline});
            if (rc)
                return rc; /* -ECANCELED, -ETIMEDOUT: nothing changed */
            continue;      /* woken by the exit or a release: look again */
        } else {
            if (status)
                *status = h->status;
            h->released = true;
            unlock_and_wake(h, true, NULL);
            return 0;
        }
        weft__lock_release(&h->lock);
        return rc;
    }
}

int weft_task_join(weft_task_handle h, int *status)
{
    return weft_task_join_until(h, status, WEFT_NEVER);
}

/* ---- select's cases ----
 * JOIN (wait/many.h, "select's cases"): a select waits on the record's
 * joiners' queue, which the task's exit and a release claim all at once.
 * The join itself (status out, the record's life ended) happens under
 * the record's lock: in try when the task is done already, else in won
 * after the wake, which looks the record up again as weft_task_join's
 * loop does. A select that another case won only left the queue: the
 * handle is as it was, and can still be joined. */

/* The record an id would name, whatever its life (the id was looked up
 * once: its chunk exists). */
static weft__handle *record_of(uint64_t id)
{
    uint64_t index = id & ((UINT64_C(1) << INDEX_BITS) - 1);
    weft__handle *c = ld_acq(&chunks[index >> CHUNK_BITS]);
    return &c[index & (CHUNK - 1)];
}

/* Under h's lock, h the live record of c's handle: is it the one, and if
 * its task is done, the join (the caller puts it back once unlocked). */
static bool join_locked(weft__handle *h, weft_case *c)
{
    if (h->gen != c->task.id >> INDEX_BITS || !h->live || h->released) {
        c->rc = -ESRCH; /* released or joined since check */
        return true;
    }
    if (!h->done)
        return false;
    if (c->elem)
        *(int *)c->elem = h->status;
    h->released = true;
    retire_locked(h);
    c->rc = 0;
    return true;
}

int weft__join_case_check(const weft_case *c)
{
    if (c->task.id == 0)
        return 1;
    weft_task *self = weft__current();
    if (!self)
        return -EPERM;
    weft__handle *h;
    int rc = lookup(c->task.id, &h);
    if (rc)
        return rc;
    if (h->rt != weft__wpub(self->worker)->rt)
        rc = -EINVAL;
    else if (h == weft__scope_of_task(self)->handle)
        rc = -EDEADLK;
    weft__lock_release(&h->lock);
    return rc;
}

weft__lock *weft__join_case_lock(weft_case *c)
{
    return &record_of(c->task.id)->lock;
}

int weft__join_case_try(weft_case *c, weft__arm *a, weft__chain *woken)
{
    WEFT_UNUSED(woken);
    weft__handle *h = record_of(c->task.id);
    if (join_locked(h, c))
        return 0;
    a->q = &h->joiners;
    a->w.elem = NULL;
    a->w.n = 0;
    return -EAGAIN;
}

void weft__join_case_ready(weft_case *c)
{
    if (c->rc == 0)
        put_free(record_of(c->task.id));
}

void weft__join_case_won(weft_case *c, int code)
{
    WEFT_UNUSED(code);
    /* Woken by the exit (done) or a release (gone): either way the look
     * below decides; the task cannot be running still. */
    weft__handle *h = record_of(c->task.id);
    weft__lock_acquire(&h->lock);
    bool decided = join_locked(h, c);
    WEFT_ASSERT_MSG(decided, "a joiner woken before its task was done");
    if (!decided)
        c->rc = -EAGAIN;
    weft__lock_release(&h->lock);
    weft__join_case_ready(c);
}
