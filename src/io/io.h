/* SPDX-License-Identifier: MIT */
/*
 * The I/O layer: descriptor waits and the fd records (io.c), the epoll
 * and io_uring pollers behind poller.h (poll_epoll.c, poll_uring.c),
 * sockets (net.c), the blocking pool (blocking.c). The layer's select
 * case is in io/cases.h.
 */
#ifndef WEFT_IO_H
#define WEFT_IO_H

#include "sched/task.h"

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

/* Worker w's poller (sched/poller.h), made at its first use as weft's
 * descriptor waits make it; NULL with *err if it cannot be. w's thread. */
struct weft__poller *weft__io_poller(weft_worker *w, int *err);

/* ---- blocking.c ---- */

/* The wait kinds of this layer (wait/record.h): a descriptor (io.c; obj: its
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
/* weft_blocking_until whose call, once it runs, is waited for: a deadline
 * or a cancel that comes while fn runs waits (firm) for fn's status and
 * returns it; one that comes before fn starts drops the call (-ETIMEDOUT,
 * -ECANCELED: fn never ran). So arg may point into the caller's stack
 * (the files' calls: their buffers are the caller's). */
int weft__blocking_finish(weft_fn fn, void *arg, int64_t deadline);
/* rt's pool as weft_blocking_stats_get tells it (all zero before its first
 * call), from any thread while rt runs. */
void weft__blocking_info(weft_runtime *rt, weft_blocking_info *out);
/* How long an idle pool thread waits for work before it exits (tests
 * shorten it). */
extern int64_t weft__blocking_keepalive_ns;

#endif
