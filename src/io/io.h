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

#include <sys/socket.h>

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

/* ---- the system's socket calls: the kernel's, or simulated ----
 * net.c and io.c make every socket call through a table of functions
 * with the system calls' signatures and conventions (-1 and errno): the
 * kernel's (weft__netsys_os), or, for a descriptor the simulated network
 * made (WEFT__SIM_FD_BASE and up) and for the new sockets of a simulated
 * runtime, the one the simulation layer (src/sim) installs for its run.
 * So the socket code is written once, whatever is under it. */

typedef struct weft__netsys {
    const char *name;
    ssize_t (*read)(int fd, void *buf, size_t n);
    ssize_t (*recv)(int fd, void *buf, size_t n, int flags);
    ssize_t (*readv)(int fd, const struct iovec *iov, int iovcnt);
    ssize_t (*recvfrom)(int fd, void *buf, size_t n, int flags,
                        struct sockaddr *addr, socklen_t *alen);
    int (*accept4)(int fd, struct sockaddr *addr, socklen_t *alen, int flags);
    ssize_t (*send)(int fd, const void *buf, size_t n, int flags);
    ssize_t (*write)(int fd, const void *buf, size_t n);
    ssize_t (*sendmsg)(int fd, const struct msghdr *m, int flags);
    ssize_t (*writev)(int fd, const struct iovec *iov, int iovcnt);
    ssize_t (*sendto)(int fd, const void *buf, size_t n, int flags,
                      const struct sockaddr *addr, socklen_t alen);
    int (*socket)(int family, int type, int proto);
    int (*bind)(int fd, const struct sockaddr *addr, socklen_t alen);
    int (*listen)(int fd, int backlog);
    int (*connect)(int fd, const struct sockaddr *addr, socklen_t alen);
    int (*shutdown)(int fd, int how);
    int (*close)(int fd);
    int (*getsockopt)(int fd, int level, int name, void *val, socklen_t *len);
    int (*setsockopt)(int fd, int level, int name, const void *val,
                      socklen_t len);
    int (*getsockname)(int fd, struct sockaddr *addr, socklen_t *alen);
    int (*getpeername)(int fd, struct sockaddr *addr, socklen_t *alen);
    /* A host name's numeric address (into ip, n bytes), or -1 with errno
     * ENOENT; NULL: names go to the system's resolver. */
    int (*lookup)(const char *name, char *ip, size_t n);
    /* The workers' poller in this mode; NULL: the configured one. */
    const struct weft__poller_ops *poller;
} weft__netsys;

extern const weft__netsys weft__netsys_os;
/* The simulated network's table while a simulated runtime runs, else
 * NULL (one such runtime at a time). */
extern _Atomic(const weft__netsys *) weft__netsys_sim;

/* Descriptors the simulated network hands out start here, far above the
 * kernel's numbers, and stay below io.c's limit of 1M. */
#define WEFT__SIM_FD_BASE (1 << 19)

/* The table for calls on fd. */
static inline const weft__netsys *weft__netsys_for(int fd)
{
    const weft__netsys *s =
        atomic_load_explicit(&weft__netsys_sim, memory_order_acquire);
    return WEFT_UNLIKELY(s != NULL) && fd >= WEFT__SIM_FD_BASE
               ? s
               : &weft__netsys_os;
}

/* The table for a new socket of the calling task. */
static inline const weft__netsys *weft__netsys_new(void)
{
    weft_worker *w = weft__tl_worker;
    const weft__netsys *s =
        atomic_load_explicit(&weft__netsys_sim, memory_order_acquire);
    return WEFT_UNLIKELY(s != NULL) && w && weft__rtpub(weft__wpub(w)->rt)->sim
               ? s
               : &weft__netsys_os;
}

/* ---- io.c ---- */

/* The generation of fd's record (see io.c), which a poller's reports
 * carry. Any thread; never blocks. */
uint32_t weft__fd_gen(int fd);

/* TCP reads (see io.c): fd is a TCP socket; the read edges dispatched so
 * far (take it just before a read); after a read that returned data,
 * whether it came back short; and, before a read, wait first if the last
 * one was short and no edge came since (0 if waited or no need, else
 * weft_fd_wait's error; *stream: whether fd is a TCP socket; a wait may
 * receive into buf instead, as weft__fd_recv_wait's, returning 1 with
 * the result in *got). */
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
int weft__fd_read_wait_first(int fd, weft_time deadline, bool *stream,
                             void *buf, size_t n, ptrdiff_t *got);
/* A TCP read of n > 0 bytes into buf got EAGAIN: waits until fd is
 * readable (0: read again) or, on a worker whose poller takes receives as
 * requests, receives: 1, with the receive's result (bytes, 0 at the end
 * of the stream, or -errno) in *got. Or weft_fd_wait's error. The
 * buffer is the caller's again once it returns. */
int weft__fd_recv_wait(int fd, void *buf, size_t n, weft_time deadline,
                       ptrdiff_t *got);

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
