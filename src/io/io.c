/* SPDX-License-Identifier: MIT */
/*
 * Descriptors: weft_fd_wait, select's descriptor cases, weft_close, over
 * each worker's poller (poller.h; epoll, edge-triggered: poll_epoll.c,
 * the default; or io_uring, one-shot: poll_uring.c).
 *
 * A task that waits for a descriptor registers it (once per worker and
 * descriptor) with its own worker's poller and parks there; since a
 * started task never leaves its worker, the events that wake it are read
 * by the same thread that runs it. The registration stays: later waits on
 * weft's own sockets cost no system call (on descriptors weft did not
 * make, see below).
 *
 * Per descriptor, process-wide, a record (fd_rec) holds the tasks waiting
 * to read and to write, and counts of the read and write edges dispatched
 * and of those given to a wait: an edge nobody was waiting for is kept
 * (edge-triggered epoll reports each edge once, so an edge that falls
 * between a call's EAGAIN and the wait must not be lost; a wait that
 * finds one returns at once and the caller's retry decides),
 * and a generation that weft_close (and whatever else decides the number
 * may name another file) bumps. Each registration carries the
 * generation it was made for, so events for a closed descriptor, or a
 * registration left behind when its number is reused, are recognised and
 * ignored. Records live in chunks allocated on first use and never freed,
 * so a lookup is two loads and never races with a free.
 *
 * Descriptors weft did not make. The kernel drops a file's registrations
 * when the file is closed, telling nobody, and the next descriptor made
 * may get the number at once. weft_close bumps the generation, so every
 * worker registers the number again; but libraries (libcurl, libpq,
 * c-ares) close their sockets with close(2), and a worker whose books
 * still said "registered for this generation" parked waits on the new
 * file that no event could end (they slept to their deadline). So a
 * record knows whether weft made the descriptor and will close it
 * (owned: net.c's sockets, the signalfd below), and a wait on any other
 * one that is about to park first has the poller check its registration
 * (rec_check; epoll re-registers it with EPOLL_CTL_MOD, which succeeds
 * only if this worker's registration is for the file the number names
 * now, and polls the file again: a readiness present now is reported
 * even if its edge was missed). If the poller says the worker's file has
 * left the number, which another now has, the record forgets the old
 * file as weft_close would (rec_reset: a new generation, no edges kept),
 * so a registration of the old file that lives on (the old file still
 * open under another number, after a dup) is ignored, and waits parked
 * elsewhere, which may have registered the new file under the old
 * generation, are woken with 0 to try again; the new file is registered,
 * and the wait looks again before it parks. EBADF: the number is not
 * open, the wait fails. Weft's own descriptors skip the check: weft
 * closes them, bumping the generation, and making one resets the record
 * of its number (weft__fd_own) in case a foreign file had it and was
 * closed behind weft's back. So their waits stay free of system calls; a
 * foreign one pays one epoll_ctl per park, none when a kept edge ends the
 * wait at once. The alternatives cost the same call and do less:
 * EPOLLONESHOT re-armed per wait would drop the edges that come between
 * waits (kept now, see above), and an identity check through fstat's
 * st_dev and st_ino cannot tell apart the files that share one anonymous
 * inode (eventfd, timerfd, signalfd), and does not re-arm anything. What
 * no check can see is a close while a task already waits (nothing wakes
 * it to look): weft_fd_forget, from a library's close hook, ends such
 * waits with -EBADF and resets the record as weft_close does, without
 * the close.
 *
 * A close under a wait. weft_close and weft_fd_forget claim every waiter
 * of the record, of both directions, and wake it with -EBADF: a
 * weft_fd_wait returns -EBADF (for READ | WRITE too: one wake for both),
 * a select's descriptor case is chosen with rc -EBADF. Only a wait's
 * check at park (above) wakes with 0: the number names a new file, which
 * the woken wait registers when it looks again.
 *
 * Waiting goes through the wait layer (wait.h): one arm per direction
 * waited for, on the record's read or write queue, under the record's
 * lock, kind weft__wk_fd with the record as the object; a waker claims a
 * waiter before handing it anything, and a waiter that leaves on a
 * deadline or a cancel takes itself off the queue (wait.c does). Events
 * are read by the worker when it has nothing else to do, every FAIR_EVERY
 * scheduling decisions while it is busy, and in its sleep: an idle worker
 * with tasks waiting on descriptors (the pending hook, WEFT__PENDING_IO)
 * sleeps in its poller instead of on its futex, and other threads wake it
 * through the poller (epoll: an eventfd in its set).
 *
 * io_uring: the interface the rest of weft sees is weft_fd_wait
 * (readiness), select's descriptor case, and the poller (poller.h): poll
 * with a timeout, wake, wait (register interest), and, for a backend
 * that arms one request per wait, arm and cancel. poll_uring.c fills in
 * that table for readiness: a one-shot IORING_OP_POLL_ADD armed as a wait
 * parks (fd_wait, and select's try) and withdrawn when it ends (every
 * end: fd_wait after its park, select's won and lost), since a request
 * holds its file open. Its completions count as edges here, as epoll's
 * do (see its essay for why the rest holds). Completion-style calls
 * (read/write/accept submitted with the waiter as user_data, the result
 * handed over by the same claim-then-finish step) could come behind the
 * same socket functions later.
 */
#include "io/io.h"
#include "io/cases.h"
#include "sched/poller.h"
#include "util/fault.h"
#include "wait/many.h"
#include "wait/wait.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

const weft__wait_kind weft__wk_fd = {WEFT_WAIT_FD, "descriptor"};

#define FD_CHUNK_BITS 10
#define FD_CHUNK (1 << FD_CHUNK_BITS)
#define FD_CHUNKS 1024 /* descriptors below 1M */

typedef struct fd_rec {
    weft__lock lock;      /* guards everything but gen and edges' reads */
    atomic_uint gen;      /* bumped (under the lock) whenever the number may
                           * name another file: rec_reset */
    atomic_uint edges[2]; /* read, write edges dispatched (under the lock) */
    unsigned seen[2];     /* edges a wait has been given */
    bool owned;           /* weft made it and closes it: no check at park */
    bool stream;          /* a TCP socket: see weft__fd_read_* */
    bool hup;             /* the peer closed, failed or sent urgent data */
    bool drained;         /* its last read came back short ... */
    unsigned drained_at;  /* ... with edges[0] at this count before it */
    weft__waitq q[2];     /* tasks waiting to read, to write */
} fd_rec;

static _Atomic(fd_rec *) fdtab[FD_CHUNKS];

int weft__fd_of(const void *rec)
{
    const fd_rec *r = rec;
    for (int i = 0; i < FD_CHUNKS; i++) {
        const fd_rec *chunk = ld_acq(&fdtab[i]);
        if (chunk && r >= chunk && r < chunk + FD_CHUNK)
            return i * FD_CHUNK + (int)(r - chunk);
    }
    return -1;
}

static fd_rec *fd_lookup(int fd, bool create)
{
    if (fd < 0 || fd >= FD_CHUNK * FD_CHUNKS)
        return NULL;
    _Atomic(fd_rec *) *slot = &fdtab[fd >> FD_CHUNK_BITS];
    fd_rec *chunk = ld_acq(slot);
    if (!chunk) {
        if (!create)
            return NULL;
        fd_rec *fresh = weft__calloc(FD_CHUNK, sizeof(*fresh));
        if (!fresh)
            return NULL;
        if (cas_acq_rel(slot, &chunk, fresh))
            chunk = fresh;
        else
            free(fresh); /* another thread made it first */
    }
    return &chunk[fd & (FD_CHUNK - 1)];
}

/* ---- per worker: the poller ---- */

/* w's poller, made at its first wait for a descriptor; NULL with *err if
 * it cannot be. w's thread. */
static weft__poller *io_poller(weft_worker *w, int *err)
{
    if (WEFT_LIKELY(weft__wpub(w)->poller != NULL))
        return weft__wpub(w)->poller;
    weft__poller *p = NULL;
    const weft__poller_ops *sim = weft__netsys_new()->poller;
    if (sim) /* simulation: nothing else */
        return weft__wpub(w)->poller = sim->init(w, err);
    if (weft__io_rt(weft__wpub(w)->rt)->poller == WEFT_POLLER_IO_URING)
        p = weft__poller_uring.init(w, err); /* refused: says why, once */
    weft__wpub(w)->poller = p ? p : weft__poller_epoll.init(w, err);
    return weft__wpub(w)->poller;
}

weft__poller *weft__io_poller(weft_worker *w, int *err)
{
    return io_poller(w, err);
}

const char *weft_poller_name(void)
{
    weft_worker *w = weft__tl_worker;
    int err;
    weft__poller *p = w ? io_poller(w, &err) : NULL;
    return p ? p->ops->name : NULL;
}

/* Under r's lock: forgets the file r's number named. A new generation
 * (the old file's registrations and events are ignored from now on, and
 * every worker registers the number again at its next wait), no edges
 * kept, no stream state, not weft's own; its waiters are claimed onto the
 * chain whose end is *tail (the caller wakes them after unlocking).
 * Returns the chain's new end. */
static weft__waiter **rec_reset(fd_rec *r, weft__waiter **tail)
{
    st_rel(&r->gen, ld_rlx(&r->gen) + 1);
    r->seen[0] = ld_rlx(&r->edges[0]);
    r->seen[1] = ld_rlx(&r->edges[1]);
    r->owned = r->stream = r->drained = r->hup = false;
    return weft__waitq_claim_all(&r->q[1],
                                 weft__waitq_claim_all(&r->q[0], tail));
}

/* Under fd's record lock r, with the generation read under it: as
 * weft_close bumps the generation and closes the descriptor under the
 * lock, the descriptor registered is the one the caller means (after a
 * close the number is closed, and the registration fails, or a new
 * descriptor has it), and a close never runs while the poller looks at
 * the number. Makes sure p watches fd for r's generation: 0, with *fresh
 * set if it registered it just now; WEFT__POLL_ALWAYS (a regular file);
 * or a negative errno. Free of system calls once registered. */
static int rec_watch(weft__poller *p, fd_rec *r, int fd, bool *fresh)
{
    WEFT_ASSERT(weft__lock_is_held(&r->lock) &&
                p == weft__wpub(weft__tl_worker)->poller);
    int rc = p->ops->wait(p, fd, ld_rlx(&r->gen), false);
    *fresh = rc == WEFT__POLL_NEW;
    return *fresh ? 0 : rc;
}

/* Under r's lock, as a wait on fd (not weft's own, registered with p for
 * r's generation, nothing ready) is about to park: the poller makes sure
 * its registration is for the file the number names now (see
 * "Descriptors weft did not make"). If that file has left the number, r
 * forgets it, its waiters are claimed onto *stale (to be woken with 0
 * after unlocking: they try again and register the new file), and the
 * new file is registered. Returns 0, WEFT__POLL_ALWAYS (the number now
 * names a regular file), or a negative errno. */
static int rec_check(weft__poller *p, fd_rec *r, int fd, weft__chain *stale)
{
    WEFT_ASSERT(weft__lock_is_held(&r->lock) &&
                p == weft__wpub(weft__tl_worker)->poller);
    int rc = p->ops->wait(p, fd, ld_rlx(&r->gen), true);
    if (rc != WEFT__POLL_GONE)
        return rc;
    stale->tail = rec_reset(r, stale->tail);
    rc = p->ops->wait(p, fd, ld_rlx(&r->gen), false);
    return rc == WEFT__POLL_NEW ? 0 : rc;
}

void weft__fd_ready(int fd, uint32_t gen, unsigned ev)
{
    fd_rec *r = fd_lookup(fd, false);
    if (!r)
        return;
    weft__chain woken;
    weft__chain_init(&woken);
    weft__lock_acquire(&r->lock);
    if (ld_rlx(&r->gen) == gen) {
        /* A short read no longer means "empty": after the end of the
         * stream, and at TCP's urgent mark, where a read stops short
         * with data still queued and no edge to come for it. */
        if (ev & WEFT__FD_HUP)
            r->hup = true;
        for (int k = 0; k < 2; k++) { /* WEFT__FD_READ, WEFT__FD_WRITE */
            if (!(ev & (1u << k)))
                continue;
            unsigned e = ld_rlx(&r->edges[k]) + 1;
            st_rel(&r->edges[k], e);
            weft__waiter **before = woken.tail;
            woken.tail = weft__waitq_claim_all(&r->q[k], woken.tail);
            if (woken.tail != before)
                r->seen[k] = e; /* given to the waiters; else kept */
        }
    }
    weft__lock_release(&r->lock);
    weft__wake_chain(woken.head, 0);
}

/* ---- waits ---- */

/* Under r's lock: whether an edge for events has come (after == NULL: one
 * not yet given to a wait; else a read edge past *after); if so it is
 * given to this wait. */
static bool rec_ready(fd_rec *r, int events, const unsigned *after)
{
    bool ready = false;
    for (int k = 0; k < 2; k++) {
        unsigned e = ld_rlx(&r->edges[k]);
        if ((events & (1 << k)) && (after ? e != *after : e != r->seen[k])) {
            r->seen[k] = e;
            ready = true;
        }
    }
    return ready;
}

enum { FD_PARK = 1 }; /* fd_look: nothing yet, park */

/* Looks at fd's record r until the wait must park: returns FD_PARK with
 * r's lock held, or the wait's result with it released (0: an edge came,
 * or fd is always ready; < 0: an error). The registration happens once
 * per worker and descriptor; a wait on a foreign descriptor adds a check
 * each time it parks (rec_check). */
static int fd_look(weft__poller *p, fd_rec *r, int fd, int events,
                   const unsigned *after)
{
    bool checked = false;
    for (;;) {
        weft__lock_acquire(&r->lock);
        bool fresh;
        int rc = rec_watch(p, r, fd, &fresh);
        if (rc != 0 || rec_ready(r, events, after)) {
            weft__lock_release(&r->lock);
            return rc > 0 ? 0 : rc;
        }
        if (fresh || checked || r->owned)
            return FD_PARK;
        /* About to park: a descriptor weft did not make may have been
         * closed and its number reused behind weft's back. */
        weft__chain stale;
        weft__chain_init(&stale);
        rc = rec_check(p, r, fd, &stale);
        if (rc == 0 && !stale.head)
            return FD_PARK;
        /* Failed, or the number names a new file, registered now: wake
         * the waits of the old one, and look again. */
        weft__lock_release(&r->lock);
        weft__wake_chain(stale.head, 0);
        if (rc)
            return rc > 0 ? 0 : rc;
        checked = true;
    }
}

/* Under r's lock, nothing ready: waits on r's queue of each direction of
 * events (noting which way, for the task dump) until an edge, the deadline
 * or a cancel. Returns the wait's result, the lock released. */
static int fd_park(fd_rec *r, int events, int64_t deadline)
{
    const char *dir = events == WEFT_IO_READ    ? "read"
                      : events == WEFT_IO_WRITE ? "write"
                                                : "read or write";
    if (events != (WEFT_IO_READ | WEFT_IO_WRITE)) {
        weft__waiter ws;
        weft__waiter_init(&ws, NULL, 0);
        return weft__wait(
            &ws, &(weft__wait_spec){.kind = &weft__wk_fd,
                                    .obj = r,
                                    .name = dir,
                                    .lock = &r->lock,
                                    .q = &r->q[events == WEFT_IO_READ ? 0 : 1],
                                    .deadline = deadline,
                                    .flags = WEFT__WAIT_COMPACT});
    }
    weft__arm arms[2] = {{.lock = &r->lock, .q = &r->q[0]},
                         {.lock = &r->lock, .q = &r->q[1]}};
    weft__lock *order[1] = {&r->lock};
    int code = 0;
    weft__wait_note_name(dir);
    int rc =
        weft__wait_many(order, 1, arms, 2, &weft__wk_fd, r, deadline, &code);
    return rc >= 0 ? code : rc;
}

/* ---- a read as a request in the worker's ring ----
 * A TCP read that would wait, on a worker whose poller takes receives as
 * requests (io_uring's IORING_OP_RECV): instead of a readiness request
 * and a recv(2) once it fires, one request that receives. The task waits
 * on two queues at once (wait_many): the record's read queue, as any read
 * wait (so weft_close and weft_fd_forget wake it with -EBADF, and an edge
 * from elsewhere with 0), and the request's own, which its completion
 * wakes (RECV_DONE). Whatever ended the wait, the request is over before
 * the call returns: if it has not completed, it is cancelled and its
 * completion waited for, firm, since the kernel may still write the
 * caller's buffer until then. Bytes it received are returned whatever
 * else happened (a deadline, a cancel, a close that came with them), so
 * none is dropped; only a request that moved nothing gives the wait's own
 * code. */

enum { RECV_DONE = 1 }; /* the completion's wake code */

typedef struct ring_recv {
    weft__op op;
    weft__lock lock; /* guards done and q */
    bool done;
    weft__waitq q; /* the task, while the request runs */
} ring_recv;

/* The poller's owner thread, once: the result is in. */
static void recv_complete(weft__op *op)
{
    ring_recv *c = (ring_recv *)op;
    weft__chain woken;
    weft__chain_init(&woken);
    weft__lock_acquire(&c->lock);
    c->done = true;
    woken.tail = weft__waitq_claim_all(&c->q, woken.tail);
    weft__lock_release(&c->lock);
    weft__wake_chain(woken.head, RECV_DONE);
}

/* Under r's lock (fd_look said park): starts c's request; false (the
 * lock still held) if the poller takes none (epoll; a kernel without the
 * operation; a full ring). */
static bool recv_start(weft__poller *p, ring_recv *c)
{
    return p->ops->op_submit && p->ops->op_submit(p, &c->op) == 0;
}

/* Under r's lock, c's request started: waits for it (see above); returns
 * 1 with the request's result in *got, 0 (an edge came: read again), or
 * the wait's error (-ETIMEDOUT, -ECANCELED, -EBADF). r's lock released. */
static int recv_wait(weft__poller *p, fd_rec *r, ring_recv *c, int64_t deadline,
                     ptrdiff_t *got)
{
    weft__arm arms[2] = {{.lock = &r->lock, .q = &r->q[0]},
                         {.lock = &c->lock, .q = &c->q}};
    weft__lock *order[2] = {&r->lock, &c->lock};
    weft__lock_acquire(&c->lock); /* nobody else has it yet */
    int code = 0;
    weft__wait_note_name("read");
    int won =
        weft__wait_many(order, 2, arms, 2, &weft__wk_fd, r, deadline, &code);
    weft__lock_acquire(&c->lock);
    if (!c->done) {
        weft__lock_release(&c->lock);
        p->ops->op_cancel(p, &c->op);
        weft__lock_acquire(&c->lock);
    }
    if (!c->done) {
        weft__waiter w;
        weft__waiter_init(&w, NULL, 0);
        weft__wait(&w, &(weft__wait_spec){.kind = &weft__wk_fd,
                                          .obj = r,
                                          .name = "read",
                                          .lock = &c->lock,
                                          .q = &c->q,
                                          .deadline = WEFT_NEVER,
                                          .flags = WEFT__WAIT_FIRM});
    } else {
        weft__lock_release(&c->lock);
    }
    int32_t res = c->op.res;
    /* A result that moved nothing: cancelled, interrupted, or nothing to
     * read after all (an inline try of a request that may not wait). */
    bool nothing =
        res == -ECANCELED || res == -EAGAIN || weft__op_interrupted(res);
    if (!nothing) {
        *got = res;
        return 1;
    }
    if (won < 0)
        return won;                         /* its deadline or a cancel */
    return won == 0 && code < 0 ? code : 0; /* a close; or read again */
}

/* Waits for events on fd. after == NULL: an edge not yet given to a wait
 * counts (weft_fd_wait); else only a read edge past *after does. With
 * rbuf (a TCP read of rn > 0 bytes that would wait) on a worker whose
 * poller takes receives as requests, receives instead: returns 1 with the
 * result in *got (see above). */
static int fd_wait_recv(int fd, int events, weft_time deadline,
                        const unsigned *after, void *rbuf, size_t rn,
                        ptrdiff_t *got)
{
    if (fd < 0 || !(events & (WEFT_IO_READ | WEFT_IO_WRITE)) ||
        (events & ~(WEFT_IO_READ | WEFT_IO_WRITE)))
        return -EINVAL;
    int rc = weft__checkpoint();
    if (rc)
        return rc;
    fd_rec *r = fd_lookup(fd, true);
    if (!r)
        return fd >= FD_CHUNK * FD_CHUNKS ? -EINVAL : -ENOMEM;
    weft_worker *w = weft__tl_worker;
    weft__poller *p = io_poller(w, &rc);
    if (!p)
        return rc;
    if ((rc = fd_look(p, r, fd, events, after)) != FD_PARK)
        return rc;
    weft_task *t = ld_rlx(&weft__wpub(w)->cur);
    /* A compact task waits for readiness instead: a receive in flight
     * would keep its stack (the kernel may write the buffer there), where
     * a readiness wait lets it give the stack back. */
    if (rbuf && !(t->flags & TASK_COMPACT)) {
        ring_recv c = {.op = {.code = WEFT__OP_RECV,
                              .fd = fd,
                              .buf = rbuf,
                              .n = rn < (1u << 30) ? (uint32_t)rn : 1u << 30,
                              .complete = recv_complete,
                              .lazy = true}};
        if (recv_start(p, &c)) {
            /* The request counts as pending I/O until it completes; the
             * task stays on w, whose ring has it. */
            weft__task_anchor(t, 1);
            rc = recv_wait(p, r, &c, deadline, got);
            weft__task_anchor(t, -1);
            return rc;
        }
    }
    /* Counted while parked, so that the worker polls (and sleeps in) its
     * poller meanwhile. */
    bool oneshot = p->ops->arm != NULL;
    if (oneshot) /* a request for this wait (poller.h) */
        p->ops->arm(p, fd, ld_rlx(&r->gen), events);
    /* Waits on a simulated network's sockets are not outside work; either
     * way the task stays on w, where its registration is. */
    int outside = p->ops->in_runtime ? 0 : 1;
    weft__pending_add(w, WEFT__PENDING_IO, outside);
    weft__task_anchor(t, 1);
    rc = fd_park(r, events, deadline);
    weft__task_anchor(t, -1);
    weft__pending_add(w, WEFT__PENDING_IO, -outside);
    if (oneshot)
        p->ops->cancel(p, fd, events);
    return rc;
}

static int fd_wait(int fd, int events, weft_time deadline,
                   const unsigned *after)
{
    return fd_wait_recv(fd, events, deadline, after, NULL, 0, NULL);
}

int weft_fd_wait(int fd, int events, weft_time deadline)
{
    return fd_wait(fd, events, deadline, NULL);
}

int weft__fd_recv_wait(int fd, void *buf, size_t n, weft_time deadline,
                       ptrdiff_t *got)
{
    return fd_wait_recv(fd, WEFT_IO_READ, deadline, NULL, buf, n, got);
}

/* ---- select's descriptor case (wait/many.h, "select's cases") ---- */

int weft__fd_case_check(const weft_case *c)
{
    if (c->fd < 0)
        return 1;
    if (c->fd >= FD_CHUNK * FD_CHUNKS)
        return -EINVAL;
    return fd_lookup(c->fd, true) ? 0 : -ENOMEM; /* for case_lock */
}

weft__lock *weft__fd_case_lock(weft_case *c)
{
    fd_rec *r = fd_lookup(c->fd, true); /* made by the check already */
    return r ? &r->lock : NULL;
}

int weft__fd_case_try(weft_case *c, weft__arm *a, weft__chain *woken)
{
    fd_rec *r = fd_lookup(c->fd, false);
    int k = c->op == WEFT_OP_READ ? 0 : 1;
    int rc = 0;
    weft_worker *w = weft__tl_worker;
    weft__poller *p = NULL;
    bool fresh = false;
    if (!r)
        rc = -ENOMEM;
    else if (w && !(p = io_poller(w, &rc)))
        ; /* rc says why */
    else if (p)
        rc = rec_watch(p, r, c->fd, &fresh);
    if (rc) { /* the case's result: an error, or always ready (0) */
        c->rc = rc > 0 ? 0 : rc;
        return 0;
    }
    unsigned e = ld_rlx(&r->edges[k]);
    if (e != r->seen[k]) {
        r->seen[k] = e;
        c->rc = 0;
        return 0;
    }
    if (p && !fresh && !r->owned && (rc = rec_check(p, r, c->fd, woken))) {
        c->rc = rc > 0 ? 0 : rc;
        return 0;
    }
    if (p && p->ops->arm) /* ended by won or lost */
        p->ops->arm(p, c->fd, ld_rlx(&r->gen), 1 << k);
    a->q = &r->q[k];
    return -EAGAIN;
}

/* A case whose try said -EAGAIN on a worker has ended: a one-shot
 * poller's request for it is no longer needed. */
static void fd_case_end(weft_case *c)
{
    weft_worker *w = weft__tl_worker;
    weft__poller *p = w ? weft__wpub(w)->poller : NULL;
    if (p && p->ops->cancel)
        p->ops->cancel(p, c->fd,
                       c->op == WEFT_OP_READ ? WEFT_IO_READ : WEFT_IO_WRITE);
}

void weft__fd_case_won(weft_case *c, int code)
{
    c->rc = code;
    fd_case_end(c);
}

void weft__fd_case_lost(weft_case *c)
{
    fd_case_end(c);
}

/* ---- stream reads: skip the read that would say EAGAIN ----
 * A read from a stream socket that comes back short has emptied the
 * kernel's queue, and any byte that arrives later brings a new edge. So
 * when the last read was short and no read edge has been dispatched
 * since just before it, the next read would say EAGAIN: wait for the next
 * edge first (it may already sit in epoll's ready list, undispatched) and
 * save the system call (one in three of an HTTP keep-alive request's).
 * Two exceptions keep it honest. A read that returns data does not report
 * an end of stream queued behind it, whose edge may have come before the
 * read: once the peer has closed or failed (RDHUP, HUP, ERR seen) every
 * read is made, and so it is once urgent data came (PRI): a read stops
 * short at its mark with the bytes after it still queued. And only TCP
 * sockets are marked: a Unix stream read may stop short at a change of
 * sender credentials with data still queued. */

void weft__fd_own(int fd, bool stream)
{
    fd_rec *r = fd_lookup(fd, true);
    if (!r)
        return; /* out of memory: left foreign, which is only slower */
    weft__waiter *woken = NULL;
    weft__lock_acquire(&r->lock);
    rec_reset(r, &woken); /* the number was closed: nobody waits on it */
    r->owned = true;
    r->stream = stream;
    weft__lock_release(&r->lock);
    weft__wake_chain(woken, -EBADF);
}

uint32_t weft__fd_gen(int fd)
{
    fd_rec *r = fd_lookup(fd, false);
    return r ? ld_acq(&r->gen) : 0;
}

void weft__fd_set_stream(int fd)
{
    fd_rec *r = fd_lookup(fd, true);
    if (!r)
        return;
    weft__lock_acquire(&r->lock);
    r->stream = true;
    /* hup stays (weft_close cleared it): a dial's wait for the connection
     * may already have dispatched the peer's end of the stream. */
    r->drained = false;
    weft__lock_release(&r->lock);
}

unsigned weft__fd_read_edges(int fd)
{
    fd_rec *r = fd_lookup(fd, false);
    return r ? ld_acq(&r->edges[0]) : 0;
}

void weft__fd_read_done(int fd, unsigned edges_before, bool short_read)
{
    fd_rec *r = fd_lookup(fd, false);
    if (!r)
        return;
    weft__lock_acquire(&r->lock);
    if (r->stream) {
        r->drained = short_read;
        r->drained_at = edges_before;
    }
    weft__lock_release(&r->lock);
}

int weft__fd_read_wait_first(int fd, weft_time deadline, bool *stream,
                             void *buf, size_t n, ptrdiff_t *got)
{
    fd_rec *r = fd_lookup(fd, false);
    *stream = false;
    if (!r)
        return 0;
    weft__lock_acquire(&r->lock);
    *stream = r->stream;
    bool drained = r->stream && r->drained && !r->hup;
    unsigned at = r->drained_at;
    weft__lock_release(&r->lock);
    if (!drained || ld_acq(&r->edges[0]) != at)
        return 0;
    return fd_wait_recv(fd, WEFT_IO_READ, deadline, &at, buf, n, got);
}

/* weft_close, weft_fd_forget: the calling worker's one-shot poller lets
 * go of fd's file now (poller.h); other workers' do as their woken
 * waits end. */
static void poller_forget(int fd)
{
    weft_worker *w = weft__tl_worker;
    weft__poller *p = w ? weft__wpub(w)->poller : NULL;
    if (p && p->ops->forget)
        p->ops->forget(p, fd);
}

/* Linux closes the descriptor even when close() reports an error. */
static int close_fd(int fd)
{
    return weft__netsys_for(fd)->close(fd) == 0 || errno == EINTR ? 0 : -errno;
}

int weft_close(int fd)
{
    if (fd < 0)
        return -EBADF;
    /* The record is made if need be, so that a wait starting now on this
     * descriptor (which makes it too) meets the close under its lock. */
    fd_rec *r = fd_lookup(fd, true);
    if (!r)
        return close_fd(fd);
    weft__waiter *woken = NULL;
    weft__lock_acquire(&r->lock);
    rec_reset(r, &woken);
    /* Closed under the lock, with the new generation (see fd_wait). */
    int rc = close_fd(fd);
    weft__lock_release(&r->lock);
    weft__wake_chain(woken, -EBADF);
    poller_forget(fd);
    return rc;
}

int weft_fd_forget(int fd)
{
    if (fd < 0)
        return -EBADF;
    /* No record: weft never waited on the number (a wait starting now
     * registers the file still open, as it would just after the forget). */
    fd_rec *r = fd_lookup(fd, false);
    if (!r)
        return 0;
    weft__waiter *woken = NULL;
    weft__lock_acquire(&r->lock);
    rec_reset(r, &woken);
    weft__lock_release(&r->lock);
    weft__wake_chain(woken, -EBADF);
    poller_forget(fd);
    return 0;
}

/* ---- signals ---- */

int weft_signal_wait(const int *signals, int n, weft_time deadline)
{
    if (!signals || n < 1)
        return -EINVAL;
    int rc = weft__checkpoint();
    if (rc)
        return rc;
    /* The kernel keeps a signal for signalfd only while every thread
     * blocks it; the workers share the mask of weft_run's caller. */
    sigset_t set, cur;
    sigemptyset(&set);
    pthread_sigmask(SIG_BLOCK, NULL, &cur);
    for (int i = 0; i < n; i++) {
        if (sigaddset(&set, signals[i]) != 0 ||
            sigismember(&cur, signals[i]) != 1)
            return -EINVAL;
    }
    int fd = weft__fault_fails(WEFT_FAULT_SIGNALFD)
                 ? -1
                 : signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
    if (fd < 0)
        return -errno;
    weft__fd_own(fd, false);
    for (;;) {
        struct signalfd_siginfo si;
        ssize_t got = read(fd, &si, sizeof si);
        if (got == (ssize_t)sizeof si) {
            rc = (int)si.ssi_signo;
            break;
        }
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0 && errno != EAGAIN) {
            rc = -errno;
            break;
        }
        if ((rc = weft_fd_wait(fd, WEFT_IO_READ, deadline)) != 0)
            break;
    }
    weft_close(fd);
    return rc;
}
