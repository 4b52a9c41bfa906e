/* SPDX-License-Identifier: MIT */
/*
 * The epoll poller (see poller.h): one epoll instance per worker,
 * edge-triggered.
 *
 * A descriptor is added with EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLPRI |
 * EPOLLET the first time the worker waits on it for a generation, and
 * stays added: later waits on weft's own sockets cost no system call.
 * Each registration carries the generation it was made for in its event
 * data, so io.c ignores the events of a file its record has forgotten.
 * `fdreg` says, per descriptor number, the generation + 1 this worker
 * added it for (0: none).
 *
 * The check before a park on a foreign descriptor (io.c's essay,
 * "Descriptors weft did not make") is EPOLL_CTL_MOD: epoll keys a
 * registration by number and open file, so MOD succeeds only if this
 * worker's registration is for the file the number names now (and it
 * polls the file again: a readiness present now is reported even if its
 * edge was missed); ENOENT says that file has left the number.
 *
 * Other threads wake a worker asleep in epoll_wait through an eventfd in
 * its set, tagged WAKE_TAG.
 */
#include "sched/poller.h"
#include "util/fault.h"

#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#define WAKE_TAG UINT64_MAX
#define MAX_EVENTS 256

typedef struct ep_poller {
    weft__poller base;
    int epfd, evfd;  /* epoll set; eventfd that wakes it from elsewhere */
    uint32_t *fdreg; /* per descriptor: generation + 1 it is added for */
    int nfdreg;
} ep_poller;

static weft__poller *ep_init(weft_worker *w, int *err)
{
    WEFT_UNUSED(w);
    ep_poller *e = weft__calloc(1, sizeof(*e));
    if (!e) {
        *err = -ENOMEM;
        return NULL;
    }
    e->base.ops = &weft__poller_epoll;
    e->epfd = weft__fault_fails(WEFT_FAULT_POLLER)
                  ? -1
                  : epoll_create1(EPOLL_CLOEXEC);
    if (e->epfd < 0) {
        *err = -errno;
        free(e);
        return NULL;
    }
    e->evfd = weft__fault_fails(WEFT_FAULT_EVENTFD)
                  ? -1
                  : eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = WAKE_TAG};
    if (e->evfd < 0 || epoll_ctl(e->epfd, EPOLL_CTL_ADD, e->evfd, &ev) != 0) {
        *err = -errno;
        if (e->evfd >= 0)
            close(e->evfd);
        close(e->epfd);
        free(e);
        return NULL;
    }
    return &e->base;
}

static void ep_fini(weft__poller *p)
{
    ep_poller *e = (ep_poller *)p;
    close(e->evfd);
    close(e->epfd);
    free(e->fdreg);
    free(e);
}

/* What a registration of fd for generation gen asks for and carries. */
static struct epoll_event reg_event(int fd, uint32_t gen)
{
    return (struct epoll_event){
        .events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLPRI | EPOLLET,
        .data.u64 = (uint64_t)gen << 32 | (uint32_t)fd,
    };
}

/* Puts fd in the set for generation gen: WEFT__POLL_NEW,
 * WEFT__POLL_ALWAYS (a regular file) or a negative errno. */
static int ep_register(ep_poller *e, int fd, uint32_t gen)
{
    if (fd >= e->nfdreg) {
        int n = e->nfdreg ? e->nfdreg : 256;
        while (n <= fd)
            n *= 2;
        uint32_t *g = weft__realloc(e->fdreg, (size_t)n * sizeof(*g));
        if (!g)
            return -ENOMEM;
        memset(g + e->nfdreg, 0, (size_t)(n - e->nfdreg) * sizeof(*g));
        e->fdreg = g;
        e->nfdreg = n;
    }
    struct epoll_event ev = reg_event(fd, gen);
    if (weft__fault_fails(WEFT_FAULT_POLLER_CTL))
        return -errno;
    if (epoll_ctl(e->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
        if (errno == EPERM)
            return WEFT__POLL_ALWAYS; /* regular files and the like */
        if (errno != EEXIST || epoll_ctl(e->epfd, EPOLL_CTL_MOD, fd, &ev) != 0)
            return -errno;
    }
    e->fdreg[fd] = gen + 1;
    return WEFT__POLL_NEW;
}

static int ep_wait(weft__poller *p, int fd, uint32_t gen, bool check)
{
    ep_poller *e = (ep_poller *)p;
    if (!check) {
        if (WEFT_LIKELY(fd < e->nfdreg && e->fdreg[fd] == gen + 1))
            return 0;
        return ep_register(e, fd, gen);
    }
    struct epoll_event ev = reg_event(fd, gen);
    if (epoll_ctl(e->epfd, EPOLL_CTL_MOD, fd, &ev) == 0)
        return 0;
    return errno == ENOENT ? WEFT__POLL_GONE : -errno;
}

static void ep_dispatch(ep_poller *e, const struct epoll_event *ev)
{
    if (ev->data.u64 == WAKE_TAG) {
        uint64_t v;
        if (read(e->evfd, &v, sizeof v) < 0) { /* EAGAIN: already drained */
        }
        return;
    }
    unsigned what = 0;
    if (ev->events & (EPOLLIN | EPOLLRDHUP | EPOLLPRI | EPOLLHUP | EPOLLERR))
        what |= WEFT__FD_READ;
    if (ev->events & (EPOLLOUT | EPOLLHUP | EPOLLERR))
        what |= WEFT__FD_WRITE;
    if (ev->events & (EPOLLRDHUP | EPOLLPRI | EPOLLHUP | EPOLLERR))
        what |= WEFT__FD_HUP;
    weft__fd_ready((int)(uint32_t)ev->data.u64, (uint32_t)(ev->data.u64 >> 32),
                   what);
}

static int epoll_wait_ns(int epfd, struct epoll_event *evs, int64_t timeout)
{
    if (weft__fault_fails(WEFT_FAULT_POLL))
        return -1;
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

static int ep_poll(weft__poller *p, int64_t timeout)
{
    ep_poller *e = (ep_poller *)p;
    struct epoll_event evs[MAX_EVENTS];
    int n = epoll_wait_ns(e->epfd, evs, timeout);
    for (int i = 0; i < n; i++)
        ep_dispatch(e, &evs[i]);
    return n > 0 ? n : 0;
}

static void ep_wake(weft__poller *p)
{
    ep_poller *e = (ep_poller *)p;
    uint64_t one = 1;
    if (write(e->evfd, &one, sizeof one) < 0) { /* full: it is awake */
    }
}

const weft__poller_ops weft__poller_epoll = {
    .name = "epoll",
    .init = ep_init,
    .poll = ep_poll,
    .wake = ep_wake,
    .wait = ep_wait,
    /* No arm, no cancel: edge-triggered and left registered, the edges
     * that come between waits are counted for the next one (io.c). */
    .fini = ep_fini,
};
