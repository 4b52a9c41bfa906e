/* SPDX-License-Identifier: MIT */
/*
 * The reactor: one epoll instance per worker, edge-triggered.
 *
 * A task that waits for a descriptor registers it (once per worker and
 * descriptor) in its own worker's epoll and parks there; since a started
 * task never leaves its worker, the events that wake it are read by the
 * same thread that runs it. The first wait on a descriptor adds it with
 * EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLPRI | EPOLLET and it stays added:
 * later waits on weft's own sockets cost no system call (on descriptors
 * weft did not make, see below).
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
 * one that is about to park first re-registers it with EPOLL_CTL_MOD
 * (io_recheck). epoll keys a registration by number and open file, so
 * MOD succeeds only if this worker's registration is for the file the
 * number names now (and it polls the file again: a readiness present now
 * is reported even if its edge was missed); ENOENT says the worker's
 * file has left the number, which another now has. Then the record
 * forgets the old file as weft_close would (rec_reset: a new generation,
 * no edges kept), so a registration of the old file that lives on (the
 * old file still open under another number, after a dup) is ignored, and
 * waits parked elsewhere, which may have registered the new file under
 * the old generation, are woken with 0 to try again; the new file is
 * added. EBADF: the number is not open, the wait fails. Weft's own
 * descriptors skip the check: weft closes them, bumping the generation,
 * and making one resets the record of its number (weft__fd_own) in case
 * a foreign file had it and was closed behind weft's back. So their
 * waits stay free of system calls; a foreign one pays one epoll_ctl per
 * park, none when a kept edge ends the wait at once. The alternatives
 * cost the same call and do less: EPOLLONESHOT re-armed per wait would
 * drop the edges that come between waits (kept now, see above), and an
 * identity check through fstat's st_dev and st_ino cannot tell apart the
 * files that share one anonymous inode (eventfd, timerfd, signalfd), and
 * does not re-arm anything. What no check can see is a close while a
 * task already waits (nothing wakes it to look): weft_fd_forget, from a
 * library's close hook, ends such waits with -EBADF and resets the
 * record as weft_close does, without the close.
 *
 * Waking follows the primitives' rule: under the record's lock a waker
 * claims a waiter before handing it anything, and a waiter that leaves on
 * a deadline or a cancel takes itself off the queue. Events are read by
 * the worker when it has nothing else to do, every FAIR_EVERY scheduling
 * decisions while it is busy, and in its sleep: an idle worker with tasks
 * waiting on descriptors sleeps in epoll_wait instead of on its futex, and
 * other threads wake it through an eventfd in its epoll set.
 *
 * io_uring later: the interface the rest of weft sees is weft_fd_wait
 * (readiness) plus the per-worker poll hook (weft__io_poll) and the
 * sleep hook. A uring backend would keep that shape for readiness
 * (IORING_OP_POLL_ADD, multishot, in place of epoll_ctl; the completion
 * queue read in weft__io_poll; io_uring_enter with a timeout as the
 * sleep, an eventfd or IORING_OP_MSG_RING for cross-thread wakes) and
 * could add completion-style calls (read/write/accept submitted with the
 * waiter as user_data, the result handed over by the same claim-then-
 * finish step) behind the same socket functions, chosen per worker at
 * start-up when the kernel allows it.
 */
#include "internal.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#define FD_CHUNK_BITS 10
#define FD_CHUNK (1 << FD_CHUNK_BITS)
#define FD_CHUNKS 1024 /* descriptors below 1M */
#define WAKE_TAG UINT64_MAX
#define MAX_EVENTS 256

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

static fd_rec *fd_lookup(int fd, bool create)
{
    if (fd < 0 || fd >= FD_CHUNK * FD_CHUNKS)
        return NULL;
    _Atomic(fd_rec *) *slot = &fdtab[fd >> FD_CHUNK_BITS];
    fd_rec *chunk = ld_acq(slot);
    if (!chunk) {
        if (!create)
            return NULL;
        fd_rec *fresh = calloc(FD_CHUNK, sizeof(*fresh));
        if (!fresh)
            return NULL;
        if (cas_acq_rel(slot, &chunk, fresh))
            chunk = fresh;
        else
            free(fresh); /* another thread made it first */
    }
    return &chunk[fd & (FD_CHUNK - 1)];
}

/* ---- per worker ---- */

static int io_start(weft_worker *w)
{
    w->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (w->epfd < 0)
        return -errno;
    w->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = WAKE_TAG};
    if (w->evfd < 0 || epoll_ctl(w->epfd, EPOLL_CTL_ADD, w->evfd, &ev) != 0) {
        int err = -errno;
        if (w->evfd >= 0)
            close(w->evfd);
        close(w->epfd);
        w->epfd = w->evfd = -1;
        return err;
    }
    return 0;
}

void weft__io_fini(weft_worker *w)
{
    if (w->epfd >= 0) {
        close(w->evfd);
        close(w->epfd);
    }
    w->epfd = w->evfd = -1;
    free(w->fdreg);
    w->fdreg = NULL;
    w->nfdreg = 0;
}

/* What a registration of fd for generation gen asks for and carries. */
static struct epoll_event reg_event(int fd, uint32_t gen)
{
    return (struct epoll_event){
        .events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLPRI | EPOLLET,
        .data.u64 = (uint64_t)gen << 32 | (uint32_t)fd,
    };
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

/* Under fd's record lock (fd_wait, which saw that fd is not there yet):
 * puts fd in w's epoll for generation gen. Returns 0, 1 if fd cannot be
 * polled because it is always ready (a regular file), or a negative
 * errno. */
static int io_register(weft_worker *w, int fd, uint32_t gen)
{
    if (w->epfd < 0) {
        int err = io_start(w);
        if (err)
            return err;
    }
    if (fd >= w->nfdreg) {
        int n = w->nfdreg ? w->nfdreg : 256;
        while (n <= fd)
            n *= 2;
        uint32_t *g = realloc(w->fdreg, (size_t)n * sizeof(*g));
        if (!g)
            return -ENOMEM;
        memset(g + w->nfdreg, 0, (size_t)(n - w->nfdreg) * sizeof(*g));
        w->fdreg = g;
        w->nfdreg = n;
    }
    struct epoll_event ev = reg_event(fd, gen);
    if (epoll_ctl(w->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
        if (errno == EPERM)
            return 1; /* regular files and the like: always ready */
        if (errno != EEXIST || epoll_ctl(w->epfd, EPOLL_CTL_MOD, fd, &ev) != 0)
            return -errno;
    }
    w->fdreg[fd] = gen + 1;
    return 0;
}

/* Under r's lock, as a wait on fd (not weft's own, registered in w for
 * r's generation) is about to park: makes sure the registration is for
 * the file the number names now (see "Descriptors weft did not make").
 * MOD finds it (0), or says the number is not open (-EBADF), or that w
 * has no registration of this file under it: the file it had was closed,
 * and the number reused. Then r forgets the old file, its other waiters
 * are claimed onto *stale to be woken with 0 (they try again and register
 * the new file), and the new file is added. Returns 0, 1 (the number now
 * names a regular file: always ready), or a negative errno. */
static int io_recheck(weft_worker *w, fd_rec *r, int fd, weft__waiter **stale)
{
    struct epoll_event ev = reg_event(fd, ld_rlx(&r->gen));
    if (epoll_ctl(w->epfd, EPOLL_CTL_MOD, fd, &ev) == 0)
        return 0;
    if (errno != ENOENT)
        return -errno;
    rec_reset(r, stale);
    return io_register(w, fd, ld_rlx(&r->gen));
}

static void dispatch(weft_worker *w, const struct epoll_event *ev)
{
    if (ev->data.u64 == WAKE_TAG) {
        uint64_t v;
        if (read(w->evfd, &v, sizeof v) < 0) { /* EAGAIN: already drained */
        }
        return;
    }
    int fd = (int)(uint32_t)ev->data.u64;
    uint32_t gen = (uint32_t)(ev->data.u64 >> 32);
    fd_rec *r = fd_lookup(fd, false);
    if (!r)
        return;
    int kinds = 0;
    if (ev->events & (EPOLLIN | EPOLLRDHUP | EPOLLPRI | EPOLLHUP | EPOLLERR))
        kinds |= WEFT_IO_READ;
    if (ev->events & (EPOLLOUT | EPOLLHUP | EPOLLERR))
        kinds |= WEFT_IO_WRITE;
    weft__waiter *woken = NULL, **tail = &woken;
    weft__lock_acquire(&r->lock);
    if (ld_rlx(&r->gen) == gen) {
        /* A short read no longer means "empty": after the end of the
         * stream, and at TCP's urgent mark, where a read stops short
         * with data still queued and no edge to come for it. */
        if (ev->events & (EPOLLRDHUP | EPOLLPRI | EPOLLHUP | EPOLLERR))
            r->hup = true;
        for (int k = 0; k < 2; k++) {
            if (!(kinds & (1 << k)))
                continue;
            unsigned e = ld_rlx(&r->edges[k]) + 1;
            st_rel(&r->edges[k], e);
            weft__waiter **before = tail;
            tail = weft__waitq_claim_all(&r->q[k], tail);
            if (tail != before)
                r->seen[k] = e; /* given to the waiters; else kept */
        }
    }
    weft__lock_release(&r->lock);
    weft__wake_chain(woken, 0);
}

static int epoll_wait_ns(int epfd, struct epoll_event *evs, int64_t timeout)
{
#if defined(SYS_epoll_pwait2)
    static atomic_int no_pwait2;
    if (timeout > 0 && timeout != WEFT_NEVER && !ld_rlx(&no_pwait2)) {
        struct timespec ts = {timeout / WEFT_SEC, timeout % WEFT_SEC};
        long n = syscall(SYS_epoll_pwait2, epfd, evs, MAX_EVENTS, &ts, NULL,
                         (size_t)0);
        if (n >= 0 || errno != ENOSYS)
            return (int)n;
        st_rlx(&no_pwait2, 1);
    }
#endif
    return epoll_wait(epfd, evs, MAX_EVENTS, weft__timeout_ms(timeout));
}

int weft__io_poll(weft_worker *w, int64_t timeout)
{
    if (w->epfd < 0)
        return 0;
    struct epoll_event evs[MAX_EVENTS];
    int n = epoll_wait_ns(w->epfd, evs, timeout);
    for (int i = 0; i < n; i++)
        dispatch(w, &evs[i]);
    return n > 0 ? n : 0;
}

void weft__io_wake(weft_worker *w)
{
    uint64_t one = 1;
    if (write(w->evfd, &one, sizeof one) < 0) { /* full: it is awake */
    }
}

/* ---- public ---- */

/* Waits for events on fd. after == NULL: an edge not yet given to a wait
 * counts (weft_fd_wait); else only a read edge past *after does. */
static int fd_wait(int fd, int events, weft_time deadline,
                   const unsigned *after)
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
    weft_task *t = w->cur;
    /* Registered under the lock, with the generation read under it: as
     * weft_close bumps the generation and closes the descriptor under the
     * lock, the descriptor registered is the one the caller means (after
     * a close the number is closed, and the registration fails, or a new
     * descriptor has it), and a close never runs while epoll_ctl looks at
     * the number. The ADD happens once per worker and descriptor; a wait
     * on a foreign descriptor adds a MOD each time it parks (io_recheck). */
    weft__lock_acquire(&r->lock);
    uint32_t gen = ld_rlx(&r->gen);
    bool added = fd >= w->nfdreg || w->fdreg[fd] != gen + 1;
    if (added && (rc = io_register(w, fd, gen)) != 0) {
        weft__lock_release(&r->lock);
        return rc > 0 ? 0 : rc;
    }
    weft__waiter ws[2];
    memset(ws, 0, sizeof ws);
    bool ready = false;
    for (int k = 0; k < 2; k++) {
        unsigned e = ld_rlx(&r->edges[k]);
        if ((events & (1 << k)) && (after ? e != *after : e != r->seen[k])) {
            r->seen[k] = e;
            ready = true;
        }
    }
    /* About to park: a descriptor weft did not make may have been closed
     * and its number reused behind weft's back. */
    weft__waiter *stale = NULL;
    if (!ready && !added && !r->owned &&
        (rc = io_recheck(w, r, fd, &stale)) != 0) {
        weft__lock_release(&r->lock);
        weft__wake_chain(stale, 0);
        return rc > 0 ? 0 : rc;
    }
    if (ready) {
        weft__lock_release(&r->lock);
        return 0;
    }
    uint64_t token = weft__park_prepare(t, true);
    for (int k = 0; k < 2; k++) {
        if (events & (1 << k)) {
            ws[k].task = t;
            ws[k].token = token;
            weft__waitq_push(&r->q[k], &ws[k]);
        }
    }
    weft__lock_release(&r->lock);
    weft__wake_chain(stale, 0);
    w->nio++;
    rc = weft__park_commit(w, t, deadline);
    w->nio--;
    if (rc != 0 || events == (WEFT_IO_READ | WEFT_IO_WRITE)) {
        weft__lock_acquire(&r->lock); /* take what is left off the queues */
        weft__waitq_remove(&r->q[0], &ws[0]);
        weft__waitq_remove(&r->q[1], &ws[1]);
        weft__lock_release(&r->lock);
    }
    return rc;
}

int weft_fd_wait(int fd, int events, weft_time deadline)
{
    return fd_wait(fd, events, deadline, NULL);
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

int weft__fd_read_wait_first(int fd, weft_time deadline, bool *stream)
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
    return fd_wait(fd, WEFT_IO_READ, deadline, &at);
}

/* Linux closes the descriptor even when close() reports an error. */
static int close_fd(int fd)
{
    return close(fd) == 0 || errno == EINTR ? 0 : -errno;
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
    int fd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
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
