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
 * Two implementations. epoll (poll_epoll.c, the default): edge-triggered,
 * each descriptor registered once per worker and generation and left
 * registered, an eventfd for wakes from other threads. io_uring
 * (poll_uring.c, asked for by weft_config.poller or WEFT_POLLER): one
 * one-shot POLL_ADD per wait and direction, which `arm` asks for as the
 * wait parks and `cancel` withdraws when the wait ends (`forget` at once,
 * when weft_close wakes the waits); io.c calls these only for a backend
 * that has them (epoll leaves them NULL). A third, in simulation, is the
 * simulated network's (src/sim), which io.c gets from its socket table
 * (io.h, weft__netsys) and which reports readiness from the runtime's own
 * timers.
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

/* A file operation for a completion-based backend (io/file.c): what to
 * run, and where its result goes. On the submitting task's stack; the
 * task does not return before `complete` has run. */
enum {
    WEFT__OP_OPEN,  /* openat(AT_FDCWD, path, flags | O_CLOEXEC, mode) */
    WEFT__OP_READ,  /* read at off (-1: the descriptor's offset) */
    WEFT__OP_WRITE, /* write at off (-1: the descriptor's offset) */
    WEFT__OP_FSYNC, /* fsync */
    WEFT__OP_RECV,  /* recv(fd, buf, n, 0) on a socket */
    WEFT__OP_KINDS
};

typedef struct weft__op {
    int code; /* WEFT__OP_* */
    int fd;
    const char *path;
    int flags;
    unsigned mode;
    void *buf;
    uint32_t n;
    int64_t off;
    int32_t res; /* the result (a count, a descriptor, or -errno), set
                  * before complete runs */
    /* Submitted with the poller's next look or sleep rather than at once
     * (a receive, whose wait that look would start anyway). */
    bool lazy;
    /* Called once, on the poller's owner thread, when the operation is
     * over (its result in res): a completion or a cancel's. */
    void (*complete)(struct weft__op *op);
    uint32_t slot; /* the poller's */
} weft__op;

/* Whether an operation's result says it was interrupted before it had
 * any effect: -EINTR, or the kernel's own restart codes (ERESTARTSYS and
 * its kin, 512 to 516), which an operation running in the kernel's
 * workers (an open) returns when a cancel interrupts it. */
static inline bool weft__op_interrupted(int32_t res)
{
    return res == -EINTR || (res <= -512 && res >= -516);
}

typedef struct weft__poller_ops {
    const char *name;
    /* Its readiness comes from inside the runtime (the simulated network's
     * timers), not from the kernel: a task waiting on it is not work
     * pending outside the runtime (WEFT__PENDING_IO), so the worker idles
     * as with no descriptor, the virtual clock moves without a grace, and
     * the deadlock detector looks. */
    bool in_runtime;
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
    /* A one-shot backend's (NULL for epoll): a wait on fd for events
     * (WEFT_IO_READ, WEFT_IO_WRITE) is about to park, under fd's record
     * lock, after `wait` said 0 or WEFT__POLL_NEW for generation gen and
     * nothing was ready: asks for a request that reports fd's readiness
     * for gen (submitted by the next poll; one per direction, shared by
     * the worker's waits). Never fails. The owner's thread. */
    void (*arm)(weft__poller *p, int fd, uint32_t gen, int events);
    /* With arm: a wait that armed for events has ended, whichever way (an
     * event, its deadline, a cancel, a close). No lock held; fd may be
     * closed by now. Once no wait of the worker needs a direction's
     * request, it is withdrawn at once: a request in flight holds the
     * file, which must close when weft_close closes its number. */
    void (*cancel)(weft__poller *p, int fd, int events);
    /* With arm: weft_close or weft_fd_forget, on the owner's thread, has
     * woken fd's waiters: its requests are withdrawn now, not when the
     * woken waits end (their cancel then finds nothing to withdraw), so
     * that the file closes with the close. */
    void (*forget)(weft__poller *p, int fd);
    /* A completion-based backend's (NULL for epoll): starts op, which
     * completes through op->complete, on the owner's thread, even if
     * op_cancel is called. Returns 0; -ENOTSUP (the kernel lacks the
     * operation), -EAGAIN or -ENOMEM (nothing started: run it elsewhere).
     * The owner's thread. */
    int (*op_submit)(weft__poller *p, weft__op *op);
    /* Asks the kernel to stop op, started by op_submit and not complete:
     * it completes (op->complete) with -ECANCELED or, if it was too late,
     * with its own result. The owner's thread. */
    void (*op_cancel)(weft__poller *p, weft__op *op);
    /* Frees the poller (the worker has stopped). */
    void (*fini)(weft__poller *p);
} weft__poller_ops;

/* Every poller starts with its table. */
struct weft__poller {
    const weft__poller_ops *ops;
    uint64_t ops_done; /* operations completed (op_submit's); tests */
};

extern const weft__poller_ops weft__poller_epoll;
/* Its init fails (the process says why once, on stderr) where the kernel
 * refuses a ring or libweft was built without liburing. */
extern const weft__poller_ops weft__poller_uring;

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
