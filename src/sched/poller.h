/* SPDX-License-Identifier: MIT */
/*
 * The poller seam: how a worker learns that descriptors are ready.
 *
 * Each worker has at most one poller, made by io.c at its first wait for
 * a descriptor and owned by that worker's thread (only wake is called
 * from elsewhere). The poller knows nothing of tasks or wait queues: it
 * keeps the worker's interest in descriptors (per descriptor number and
 * generation, see io.c) and, when polled, reports each readiness it reads
 * to io.c (weft__fd_ready), which counts the edge and wakes the waiters.
 *
 * One implementation today, epoll (poll_epoll.c): edge-triggered, each
 * descriptor registered once per worker and generation and left
 * registered, an eventfd for wakes from other threads. A backend that
 * arms one request per wait (io_uring's POLL_ADD, kqueue's EV_ONESHOT)
 * would fill in the same table; `cancel` is there for it.
 *
 * The interface the scheduler and io.c use.
 */
#ifndef WEFT_POLLER_H
#define WEFT_POLLER_H

#include "sched/task.h"

/* Included by scheduler.h after the scheduler's declarations. */

typedef struct weft__poller weft__poller;

/* What `wait` returns besides 0 and a negative errno. */
enum {
    WEFT__POLL_NEW = 1,    /* registered just now (nothing to recheck) */
    WEFT__POLL_ALWAYS = 2, /* cannot be polled: always ready (a regular
                            * file), so a wait returns at once */
    WEFT__POLL_GONE = 3,   /* check: the file this poller registered has
                            * left the number, which names another now */
};

/* What a poller reports for a descriptor (weft__fd_ready's `ev`). */
enum {
    WEFT__FD_READ = 1,  /* readable, or the peer closed, or an error */
    WEFT__FD_WRITE = 2, /* writable, or an error */
    WEFT__FD_HUP = 4,   /* the peer closed or failed, or urgent data came:
                         * a short read no longer means "empty" */
};

typedef struct weft__poller_ops {
    const char *name;
    /* Makes worker w's poller; NULL with *err (a negative errno) if it
     * cannot. w's thread. */
    weft__poller *(*init)(weft_worker *w, int *err);
    /* Reads the ready events, waiting up to timeout ns for one (0: not at
     * all; WEFT_NEVER: until one comes or `wake`), and reports each to
     * weft__fd_ready, which wakes its waiters. Returns how many it read
     * (a wake counts). The owner's thread. */
    int (*poll)(weft__poller *p, int64_t timeout);
    /* Ends a poll that sleeps, or makes the next one return at once. Any
     * thread. */
    void (*wake)(weft__poller *p);
    /* The owner's interest in fd for generation gen, under fd's record
     * lock (so no close runs meanwhile). check false: registers fd unless
     * this poller has it for gen already; returns 0 (it had it) or
     * WEFT__POLL_NEW. check true, as a wait on a descriptor weft did not
     * make is about to park (registered here for gen): makes sure the
     * registration is for the file the number names now and polls it
     * again; returns 0, or WEFT__POLL_GONE. Both: WEFT__POLL_ALWAYS, or a
     * negative errno (-EBADF: not open; -ENOMEM). */
    int (*wait)(weft__poller *p, int fd, uint32_t gen, bool check);
    /* A wait on fd (generation gen) ended without an event: its deadline,
     * a cancel. No lock held; fd may be closed by now. A one-shot backend
     * withdraws the request `wait` armed; epoll keeps its registration
     * (edges keep being counted for the next wait) and does nothing. */
    void (*cancel)(weft__poller *p, int fd, uint32_t gen);
    /* Frees the poller (the worker has stopped). */
    void (*fini)(weft__poller *p);
} weft__poller_ops;

/* Every poller starts with its table. */
struct weft__poller {
    const weft__poller_ops *ops;
};

extern const weft__poller_ops weft__poller_epoll;

/* Called by a poller for each readiness it reads: fd, registered for
 * generation gen, is ready for ev (WEFT__FD_*). Counts the edges and wakes
 * the waiters (io.c). The poller's owner thread. */
void weft__fd_ready(int fd, uint32_t gen, unsigned ev);

/* The scheduler's side, on w's thread: polls w's poller if it has one;
 * returns how many events it read. */
static inline int weft__io_poll(weft_worker *w, int64_t timeout)
{
    WEFT_ASSERT_MSG(w == weft__tl_worker, "a poller polled by another thread");
    weft__poller *p = weft__wpub(w)->poller;
    return p ? p->ops->poll(p, timeout) : 0;
}

/* Interrupts weft__io_poll sleeping on w (which made its poller before it
 * slept in it). Any thread. */
static inline void weft__io_wake(weft_worker *w)
{
    weft__poller *p = weft__wpub(w)->poller;
    if (p)
        p->ops->wake(p);
}

/* Frees w's poller, if it has one (the worker has stopped), through its
 * table: the scheduler calls no function of the I/O layer by name. */
static inline void weft__io_fini(weft_worker *w)
{
    weft__poller *p = weft__wpub(w)->poller;
    weft__wpub(w)->poller = NULL;
    if (p)
        p->ops->fini(p);
}

#endif
