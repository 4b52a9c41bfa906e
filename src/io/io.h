/* SPDX-License-Identifier: MIT */
/*
 * The I/O layer: descriptor waits and the fd records (io.c), the epoll
 * and io_uring pollers behind poller.h (poll_epoll.c, poll_uring.c),
 * sockets (net.c), the blocking pool (blocking.c).
 */
#ifndef WEFT_IO_H
#define WEFT_IO_H

#include "sched/task.h"

/* Select's cases (wait/many.h). */
typedef struct weft__arm weft__arm;
typedef struct weft__chain weft__chain;

/* ---- the io layer's part of a runtime (weft_runtime.ext) ---- */

struct weft__io_rt {
    /* blocking.c: the pool for weft_blocking, made on first use */
    pthread_mutex_t blocking_mu;
    struct weft__blocking *blocking;
    int blocking_threads, blocking_queue; /* from the config, 0: default */
    /* io.c: the poller the workers make (weft_poller_kind, resolved from
     * the config and WEFT_POLLER by weft_run; never DEFAULT) */
    int poller;
};

_Static_assert(sizeof(struct weft__io_rt) <= WEFT__RT_ACTOR - WEFT__RT_IO,
               "the io layer's part fits in weft_runtime.ext");

static inline struct weft__io_rt *weft__io_rt(weft_runtime *rt)
{
    return (struct weft__io_rt *)(void *)(weft__rtpub(rt)->ext + WEFT__RT_IO);
}

/* ---- io.c ---- */

/* select's descriptor case (wait/many.h, "select's cases"): WEFT_OP_READ or
 * WEFT_OP_WRITE on c->fd.
 * check: 1 (off) for fd < 0, -EINVAL for fd >= 2^20, -ENOMEM if fd's
 *   record cannot be made; else 0 (the record is made).
 * lock: the record's lock.
 * try: an edge not yet given to a wait is consumed: rc 0. Else fd is
 *   registered with the worker's poller if it is not (and, for a
 *   descriptor weft did not make, the check at park: see io.c), and the
 *   wait goes on the record's read or write queue: -EAGAIN with a->q set.
 *   A registration that fails is the case's result (c->rc = the error,
 *   return 0), except for an always ready regular file (rc 0). The check
 *   may find the number's file replaced: the old file's waiters are then
 *   appended to woken with -EAGAIN returned and a->q set (the new file is
 *   registered already), and the select must finish them (with 0) before
 *   it parks: select.c does so still holding the locks, then parks.
 *   Outside a task (weft_try_select on a
 *   plain thread) only a kept edge counts.
 * won: c->rc = code: 0 (an edge, or the number was found to name a new
 *   file), -EBADF (weft_close or weft_fd_forget under the wait).
 * lost: the case's try said -EAGAIN and it was not chosen. won and lost
 *   end the request a one-shot poller armed for the case (poller.h).
 * A select that parks on descriptor cases counts itself pending
 * (weft__pending_add(w, WEFT__PENDING_IO, +1), -1 after), so that its
 * worker reads (and sleeps in) its poller meanwhile. */
int weft__fd_case_check(const weft_case *c);
weft__lock *weft__fd_case_lock(weft_case *c);
int weft__fd_case_try(weft_case *c, weft__arm *a, weft__chain *woken);
void weft__fd_case_won(weft_case *c, int code);
void weft__fd_case_lost(weft_case *c);

/* TCP reads (see io.c): fd is a TCP socket; the read edges dispatched so
 * far (take it just before a read); after a read that returned data,
 * whether it came back short; and, before a read, wait first if the last
 * one was short and no edge came since (0 if waited or no need, else
 * weft_fd_wait's error; *stream: whether fd is a TCP socket). */
/* The descriptor whose record rec is (a weft__wk_fd wait's object), or
 * -1. For the task dump; any thread; never blocks. */
int weft__fd_of(const void *rec);
void weft__fd_set_stream(int fd);
/* fd was just made by weft (socket, accept4, signalfd), which closes it
 * with weft_close: forgets any earlier file under its number and marks it
 * weft's own, so waits on it skip the check at park (see io.c), and a TCP
 * socket (stream) for the reads above. Any thread; never blocks. */
void weft__fd_own(int fd, bool stream);
unsigned weft__fd_read_edges(int fd);
void weft__fd_read_done(int fd, unsigned edges_before, bool short_read);
int weft__fd_read_wait_first(int fd, weft_time deadline, bool *stream);

/* ---- blocking.c ---- */

/* The wait kinds of this layer (wait.h): a descriptor (io.c; obj: its
 * record, name: the direction), a blocking call (blocking.c; obj: its
 * job). */
extern const struct weft__wait_kind weft__wk_fd, weft__wk_blocking;

/* Waits for the pool's threads (each finishes the call it runs) and frees
 * the pool; at the end of weft_run, after the workers have stopped. */
void weft__blocking_fini(weft_runtime *rt);
/* weft_blocking_until that also says, when the caller left first
 * (-ECANCELED, -ETIMEDOUT), whether fn still runs (*abandoned: it will
 * use arg until it returns) or never will (dropped while queued). */
int weft__blocking_call(weft_fn fn, void *arg, int64_t deadline,
                        bool *abandoned);
/* rt's pool as weft_blocking_stats_get tells it (all zero before its first
 * call), from any thread while rt runs. */
void weft__blocking_info(weft_runtime *rt, weft_blocking_info *out);
/* How long an idle pool thread waits for work before it exits (tests
 * shorten it). */
extern int64_t weft__blocking_keepalive_ns;

#endif
