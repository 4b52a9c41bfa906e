/* SPDX-License-Identifier: MIT */
/*
 * Sockets: TCP, UDP and Unix domain sockets on top of the reactor.
 *
 * Every call has one shape: make the system call on the non-blocking
 * descriptor; EINTR, make it again; EAGAIN, wait with weft_fd_wait for the
 * readiness it needs, then make it again (readiness is a hint: the call may
 * say EAGAIN once more). Nothing here parks by itself, so deadlines and
 * cancellation are weft_fd_wait's, and a call that needs no waiting costs
 * its one system call. A blocking call checks for cancellation on entry
 * (weft__checkpoint: Trio's rule, a cancelled scope gets -ECANCELED even
 * when the call could complete), and after that only while it waits, so
 * read_exact and write_all do not stop between two transfers that need no
 * waiting; their `done` says how far they got either way.
 *
 * Writes to sockets go through send/sendmsg with MSG_NOSIGNAL, so a peer
 * that closed makes them fail with EPIPE instead of killing the process
 * with SIGPIPE; on a descriptor that is not a socket (a pipe) the call
 * falls back to write/writev for the rest of that call.
 *
 * accept and running out of descriptors: EMFILE (or ENFILE, ENOBUFS,
 * ENOMEM) leaves the connection in the backlog, and with edge-triggered
 * polling no new edge comes for it, so waiting for readiness would either
 * hang or, retried at once, spin. weft_accept sleeps instead, 10 ms
 * doubling to 100 ms, and tries again: a server out of descriptors uses
 * next to no CPU (one try a sleep), keeps serving the connections it has,
 * and accepts again within 100 ms of a descriptor being freed. Errors that
 * belong to one failed connection (ECONNABORTED and the network errors
 * accept(2) lists) are skipped at once.
 *
 * DNS: a numeric host is parsed by getaddrinfo(AI_NUMERICHOST), which does
 * not block; a name is looked up on a thread of weft_blocking's pool. A
 * cancelled or timed-out lookup returns at once while getaddrinfo goes on
 * to its end on its thread, so the request lives on the heap and the side
 * that finishes last frees it; a lookup the pool dropped before it started
 * is freed by its caller at once (weft__blocking_call says which).
 */
#include "io/io.h"
#include "util/fault.h"

#include <arpa/inet.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#define ACCEPT_BACKOFF_MIN (10 * WEFT_MSEC)
#define ACCEPT_BACKOFF_MAX (100 * WEFT_MSEC)
#define CONNECT_BACKOFF_MIN (1 * WEFT_MSEC)
#define CONNECT_BACKOFF_MAX (64 * WEFT_MSEC)

/* ---- the kernel's socket calls (io.h) ---- */

const weft__netsys weft__netsys_os = {
    .name = "os",
    .read = read,
    .recv = recv,
    .readv = readv,
    .recvfrom = recvfrom,
    .accept4 = accept4,
    .send = send,
    .write = write,
    .sendmsg = sendmsg,
    .writev = writev,
    .sendto = sendto,
    .socket = socket,
    .bind = bind,
    .listen = listen,
    .connect = connect,
    .shutdown = shutdown,
    .close = close,
    .getsockopt = getsockopt,
    .setsockopt = setsockopt,
    .getsockname = getsockname,
    .getpeername = getpeername,
    .lookup = NULL,
    .poller = NULL,
};

_Atomic(const weft__netsys *) weft__netsys_sim;

/* ---- the I/O loop ---- */

enum io_kind {
    IO_READ, /* read-ish: wait for WEFT_IO_READ */
    IO_RECV, /* IO_READ on a TCP socket: recv skips the VFS layer */
    IO_READV,
    IO_RECVFROM,
    IO_ACCEPT,
    IO_SEND, /* write-ish: wait for WEFT_IO_WRITE */
    IO_WRITE,
    IO_SENDMSG,
    IO_WRITEV,
    IO_SENDTO,
};

/* One system call, made again until it does not say EAGAIN. */
typedef struct io_op {
    enum io_kind kind; /* IO_SEND(MSG) becomes IO_WRITE(V) on ENOTSOCK */
    void *buf;
    size_t n;
    const struct iovec *iov;
    int iovcnt;
    struct sockaddr *addr; /* accept, recvfrom: out; sendto: in */
    socklen_t alen;        /* sendto: in; accept, recvfrom: out */
} io_op;

/* The plan's fault for op, if any (fault.h): -1 with errno, or op->n
 * shortened (a short transfer; op restored by the caller), or 0. */
static int io_fault(io_op *op, size_t *full)
{
    weft_fault_site site = op->kind == IO_ACCEPT ? WEFT_FAULT_ACCEPT
                           : op->kind < IO_SEND  ? WEFT_FAULT_READ
                                                 : WEFT_FAULT_WRITE;
    int e = weft__fault(site);
    if (WEFT_LIKELY(e == 0))
        return 0;
    if (e != WEFT__FAULT_SHORT) {
        errno = e;
        return -1;
    }
    if (op->iov == NULL && op->n > 1 && op->kind != IO_ACCEPT) {
        *full = op->n;
        op->n = weft__fault_short(op->n);
    }
    return 0; /* a vector's short transfer: left whole */
}

static ptrdiff_t io_call_(int fd, io_op *op);

static ptrdiff_t io_call(int fd, io_op *op)
{
    size_t full = 0;
    if (io_fault(op, &full) < 0)
        return -1;
    ptrdiff_t r = io_call_(fd, op);
    if (full)
        op->n = full;
    return r;
}

static ptrdiff_t io_call_(int fd, io_op *op)
{
    const weft__netsys *sys = weft__netsys_for(fd);
    switch (op->kind) {
    case IO_READ:
        return sys->read(fd, op->buf, op->n);
    case IO_RECV:
        return sys->recv(fd, op->buf, op->n, 0);
    case IO_READV:
        return sys->readv(fd, op->iov, op->iovcnt);
    case IO_RECVFROM:
        op->alen = sizeof(struct sockaddr_storage);
        return sys->recvfrom(fd, op->buf, op->n, 0, op->addr,
                             op->addr ? &op->alen : NULL);
    case IO_ACCEPT:
        op->alen = sizeof(struct sockaddr_storage);
        return sys->accept4(fd, op->addr, &op->alen,
                            SOCK_NONBLOCK | SOCK_CLOEXEC);
    case IO_SEND:
        return sys->send(fd, op->buf, op->n, MSG_NOSIGNAL);
    case IO_WRITE:
        return sys->write(fd, op->buf, op->n);
    case IO_SENDMSG: {
        struct msghdr m = {.msg_iov = (struct iovec *)op->iov,
                           .msg_iovlen = (size_t)op->iovcnt};
        return sys->sendmsg(fd, &m, MSG_NOSIGNAL);
    }
    case IO_WRITEV:
        return sys->writev(fd, op->iov, op->iovcnt);
    case IO_SENDTO:
        return sys->sendto(fd, op->buf, op->n, MSG_NOSIGNAL, op->addr,
                           op->alen);
    }
    errno = EINVAL;
    return -1;
}

/* A stream read's result r: a short one (data, fewer bytes than asked)
 * says the queue is empty now, unless an edge came since `edges`. */
static ptrdiff_t read_done(int fd, const io_op *op, unsigned edges, ptrdiff_t r)
{
    if (r >= 0)
        weft__fd_read_done(fd, edges, r > 0 && (size_t)r < op->n);
    return r;
}

/* Makes op's call until it succeeds or fails for a reason other than
 * EINTR or EAGAIN, waiting for readiness after EAGAIN. Returns the call's
 * result or a negative errno (weft_fd_wait's among them). */
static ptrdiff_t io_loop(int fd, io_op *op, weft_time deadline)
{
    int events = op->kind < IO_SEND ? WEFT_IO_READ : WEFT_IO_WRITE;
    bool stream_read =
        (op->kind == IO_READ || op->kind == IO_RECV) && op->n > 0;
    unsigned edges = 0;
    ptrdiff_t r;
    if (stream_read) { /* the last read emptied the queue: wait first */
        bool tcp;
        edges = weft__fd_read_edges(fd);
        int rc =
            weft__fd_read_wait_first(fd, deadline, &tcp, op->buf, op->n, &r);
        if (rc == 1) /* received through the worker's ring */
            return read_done(fd, op, edges, r);
        /* Timed out: the read decides, since the edge that would have
         * ended the wait may still sit undispatched in epoll (a deadline
         * already past lets through a read that needs no waiting). */
        if (rc && rc != -ETIMEDOUT)
            return rc;
        op->kind = tcp ? IO_RECV : IO_READ;
    }
    for (;;) {
        if (stream_read)
            edges = weft__fd_read_edges(fd);
        r = io_call(fd, op);
        if (r >= 0)
            return stream_read ? read_done(fd, op, edges, r) : r;
        int err = errno;
        if (err == EINTR)
            continue;
        if (err == ENOTSOCK &&
            (op->kind == IO_SEND || op->kind == IO_SENDMSG)) {
            op->kind = op->kind == IO_SEND ? IO_WRITE : IO_WRITEV;
            continue;
        }
        if (err != EAGAIN && err != EWOULDBLOCK)
            return -err;
        int rc = op->kind == IO_RECV && op->n > 0
                     ? weft__fd_recv_wait(fd, op->buf, op->n, deadline, &r)
                     : weft_fd_wait(fd, events, deadline);
        if (rc == 1) /* received through the worker's ring */
            return read_done(fd, op, edges, r);
        if (rc)
            return rc;
    }
}

/* The public entry: a checkpoint, then the loop. */
static ptrdiff_t io_run(int fd, io_op *op, weft_time deadline)
{
    if (fd < 0)
        return -EBADF;
    int rc = weft__checkpoint();
    return rc ? rc : io_loop(fd, op, deadline);
}

/* Sleeps *delay (or until the deadline), then doubles *delay up to max.
 * Returns 0 to try again, -ETIMEDOUT (the deadline came), -ECANCELED. */
static int backoff(int64_t *delay, int64_t max, weft_time deadline)
{
    weft_time now = weft_now();
    if (now >= deadline)
        return -ETIMEDOUT;
    bool last = deadline - now <= *delay;
    int rc = weft_sleep_until(last ? deadline : now + *delay);
    if (rc)
        return rc;
    *delay = *delay * 2 < max ? *delay * 2 : max;
    return last ? -ETIMEDOUT : 0;
}

/* ---- reading and writing ---- */

static bool buf_ok(const void *buf, size_t n)
{
    return buf != NULL || n == 0;
}

static bool iov_ok(const struct iovec *iov, int iovcnt)
{
    return iovcnt >= 0 && iovcnt <= IOV_MAX && (iov != NULL || iovcnt == 0);
}

ptrdiff_t weft_read(int fd, void *buf, size_t n, weft_time deadline)
{
    if (!buf_ok(buf, n))
        return -EINVAL;
    io_op op = {.kind = IO_READ, .buf = buf, .n = n};
    return io_run(fd, &op, deadline);
}

ptrdiff_t weft_write(int fd, const void *buf, size_t n, weft_time deadline)
{
    if (!buf_ok(buf, n))
        return -EINVAL;
    io_op op = {.kind = IO_SEND, .buf = (void *)buf, .n = n};
    return io_run(fd, &op, deadline);
}

ptrdiff_t weft_readv(int fd, const struct iovec *iov, int iovcnt,
                     weft_time deadline)
{
    if (!iov_ok(iov, iovcnt))
        return -EINVAL;
    io_op op = {.kind = IO_READV, .iov = iov, .iovcnt = iovcnt};
    return io_run(fd, &op, deadline);
}

ptrdiff_t weft_writev(int fd, const struct iovec *iov, int iovcnt,
                      weft_time deadline)
{
    if (!iov_ok(iov, iovcnt))
        return -EINVAL;
    io_op op = {.kind = IO_SENDMSG, .iov = iov, .iovcnt = iovcnt};
    return io_run(fd, &op, deadline);
}

/* read_exact and write_all: op's call until n bytes went through. At the
 * end of the stream a read returns 0: -EPIPE. */
static int io_all(int fd, io_op op, size_t *done, weft_time deadline)
{
    char *base = op.buf;
    size_t n = op.n, got = 0;
    int rc = fd < 0 ? -EBADF : weft__checkpoint();
    while (rc == 0 && got < n) {
        op.buf = base + got;
        op.n = n - got;
        ptrdiff_t r = io_loop(fd, &op, deadline);
        if (r > 0)
            got += (size_t)r;
        else
            rc = r < 0 ? (int)r : -EPIPE;
    }
    if (done)
        *done = got;
    return rc;
}

int weft_read_exact(int fd, void *buf, size_t n, size_t *done,
                    weft_time deadline)
{
    if (done)
        *done = 0;
    if (!buf_ok(buf, n))
        return -EINVAL;
    return io_all(fd, (io_op){.kind = IO_READ, .buf = buf, .n = n}, done,
                  deadline);
}

int weft_write_all(int fd, const void *buf, size_t n, size_t *done,
                   weft_time deadline)
{
    if (done)
        *done = 0;
    if (!buf_ok(buf, n))
        return -EINVAL;
    return io_all(fd, (io_op){.kind = IO_SEND, .buf = (void *)buf, .n = n},
                  done, deadline);
}

int weft_shutdown(int fd, int how)
{
    if (fd < 0)
        return -EBADF;
    if (how != SHUT_RD && how != SHUT_WR && how != SHUT_RDWR)
        return -EINVAL;
    return weft__netsys_for(fd)->shutdown(fd, how) == 0 ? 0 : -errno;
}

/* ---- addresses ---- */

static bool port_ok(int port)
{
    return port >= 0 && port <= 65535;
}

/* An IPv4 or IPv6 address of the right length (-EINVAL if NULL or
 * short, -EAFNOSUPPORT for another family). */
static int inet_check(const struct sockaddr *sa, size_t len)
{
    if (!sa || len < sizeof(sa_family_t))
        return -EINVAL;
    if (sa->sa_family == AF_INET)
        return len >= sizeof(struct sockaddr_in) ? 0 : -EINVAL;
    if (sa->sa_family == AF_INET6)
        return len >= sizeof(struct sockaddr_in6) ? 0 : -EINVAL;
    return -EAFNOSUPPORT;
}

static int gai_errno(int rc)
{
    switch (rc) {
    case EAI_NONAME:
#ifdef EAI_NODATA
    case EAI_NODATA:
#endif
#ifdef EAI_ADDRFAMILY
    case EAI_ADDRFAMILY:
#endif
        return -ENOENT;
    case EAI_AGAIN:
        return -EAGAIN;
    case EAI_MEMORY:
        return -ENOMEM;
    case EAI_SYSTEM:
        return errno ? -errno : -EIO;
    case EAI_FAIL:
        return -EIO;
    default: /* EAI_FAMILY, EAI_SERVICE, EAI_SOCKTYPE, EAI_BADFLAGS */
        return -EINVAL;
    }
}

/* ---- DNS through the blocking pool ---- */

enum { DNS_PENDING, DNS_DONE, DNS_GONE }; /* dns_req.state */

/* One lookup, on the heap: the caller may leave before it ends. */
typedef struct dns_req {
    char *host;            /* copy, for the same reason */
    char svc[8];           /* port, as a string */
    struct addrinfo hints; /* AI_* flags, socket type */
    struct addrinfo *res;  /* getaddrinfo's answer */
    int rc;                /* 0, or getaddrinfo's error as an errno */
    atomic_int state;      /* DNS_DONE / DNS_GONE: whoever is second frees */
} dns_req;

static void dns_free(dns_req *q)
{
    if (q->res)
        freeaddrinfo(q->res);
    free(q->host);
    free(q);
}

/* On a pool thread. Always returns 0: the answer is in q. */
static int dns_lookup(void *arg)
{
    dns_req *q = arg;
    int rc = getaddrinfo(q->host, q->svc, &q->hints, &q->res);
    q->rc = rc ? gai_errno(rc) : 0; /* EAI_SYSTEM: errno is this thread's */
    if (atomic_exchange(&q->state, DNS_DONE) == DNS_GONE)
        dns_free(q); /* the caller left while it ran */
    return 0;
}

/* Looks a name up on the pool. Returns 0 and sets *out, or an error. */
static int dns_blocking(const char *host, const char *svc,
                        const struct addrinfo *hints, weft_time deadline,
                        struct addrinfo **out)
{
    dns_req *q = weft__calloc(1, sizeof(*q));
    char *copy = weft__strdup(host);
    if (!q || !copy) {
        free(q);
        free(copy);
        return -ENOMEM;
    }
    q->host = copy;
    snprintf(q->svc, sizeof q->svc, "%s", svc);
    q->hints = *hints;
    bool running;
    int rc = weft__blocking_call(dns_lookup, q, deadline, &running);
    if (rc != 0) {
        /* Left first: a lookup that still runs frees q when it ends. */
        if (!running || atomic_exchange(&q->state, DNS_GONE) == DNS_DONE)
            dns_free(q);
        return rc;
    }
    rc = q->rc;
    *out = q->res;
    q->res = NULL;
    dns_free(q);
    return rc;
}

/* Resolves host:port for socktype (host NULL with passive: the wildcard).
 * Numeric hosts are parsed here; names go to the pool. */
static int resolve(const char *host, int port, int socktype, bool passive,
                   weft_time deadline, struct addrinfo **out)
{
    char svc[8];
    snprintf(svc, sizeof svc, "%d", port);
    struct addrinfo hints = {
        .ai_family = AF_UNSPEC,
        .ai_socktype = socktype,
        .ai_flags =
            AI_NUMERICSERV | AI_NUMERICHOST | (passive ? AI_PASSIVE : 0),
    };
    int rc = getaddrinfo(host, svc, &hints, out);
    if (rc == 0)
        return 0;
    if (rc != EAI_NONAME || !host)
        return gai_errno(rc);
    const weft__netsys *sys = weft__netsys_new();
    if (sys->lookup) { /* simulation: the hosts' names, nothing else */
        char ip[INET6_ADDRSTRLEN];
        if (sys->lookup(host, ip, sizeof ip) != 0)
            return -errno;
        rc = getaddrinfo(ip, svc, &hints, out);
        return rc ? gai_errno(rc) : 0;
    }
    if ((rc = weft__checkpoint()) != 0)
        return rc;
    hints.ai_flags &= ~AI_NUMERICHOST;
    return dns_blocking(host, svc, &hints, deadline, out);
}

int weft_resolve(const char *host, int port, struct sockaddr_storage *out,
                 weft_time deadline)
{
    if (!host || !*host || !out || !port_ok(port))
        return -EINVAL;
    int rc = weft__checkpoint();
    struct addrinfo *res = NULL;
    if (rc || (rc = resolve(host, port, SOCK_STREAM, false, deadline, &res)))
        return rc;
    memcpy(out, res->ai_addr, res->ai_addrlen);
    rc = (int)res->ai_addrlen;
    freeaddrinfo(res);
    return rc;
}

int weft_local_port(int fd)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    if (fd < 0)
        return -EBADF;
    if (weft__netsys_for(fd)->getsockname(fd, (struct sockaddr *)&ss, &len) !=
        0)
        return -errno;
    if (ss.ss_family == AF_INET)
        return ntohs(((struct sockaddr_in *)&ss)->sin_port);
    if (ss.ss_family == AF_INET6)
        return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    return -EAFNOSUPPORT;
}

/* ---- sockets ---- */

/* Every socket weft makes is weft's own (see io.c): waits on it park
 * without a system call, and weft_close closes it. */
static int sock_new(int family, int type)
{
    int fd = weft__fault_fails(WEFT_FAULT_SOCKET)
                 ? -1
                 : weft__netsys_new()->socket(
                       family, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    weft__fd_own(fd, false);
    return fd;
}

static int set_int(int fd, int level, int name, int value)
{
    return weft__netsys_for(fd)->setsockopt(fd, level, name, &value,
                                            sizeof value) == 0
               ? 0
               : -errno;
}

static bool is_tcp(int family)
{
    return family == AF_INET || family == AF_INET6;
}

/* Small writes go out at once (Go's default): request/response protocols
 * otherwise meet Nagle and delayed ACKs and wait 40 ms. */
static void tcp_nodelay(int fd, int family)
{
    if (is_tcp(family))
        (void)set_int(fd, IPPROTO_TCP, TCP_NODELAY, 1);
}

/* A socket of `type` bound to sa, with the options a server wants.
 * Returns the descriptor or an error (nothing left open). */
static int sock_bind(const struct sockaddr *sa, size_t len, int type, int flags)
{
    int fd = sock_new(sa->sa_family, type);
    if (fd < 0)
        return fd;
    int rc = 0;
    if (sa->sa_family != AF_UNIX && type == SOCK_STREAM)
        rc = set_int(fd, SOL_SOCKET, SO_REUSEADDR, 1);
    if (!rc && (flags & WEFT_REUSEPORT))
        rc = set_int(fd, SOL_SOCKET, SO_REUSEPORT, 1);
    if (!rc && sa->sa_family == AF_INET6) /* "::" takes IPv4 too */
        rc = set_int(fd, IPPROTO_IPV6, IPV6_V6ONLY, 0);
    if (!rc && weft__netsys_for(fd)->bind(fd, sa, (socklen_t)len) != 0)
        rc = -errno;
    if (rc) {
        weft_close(fd);
        return rc;
    }
    return fd;
}

static int sock_listen(const struct sockaddr *sa, size_t len, int backlog,
                       int flags)
{
    int fd = sock_bind(sa, len, SOCK_STREAM, flags);
    if (fd >= 0 && weft__netsys_for(fd)->listen(
                       fd, backlog > 0 ? backlog : SOMAXCONN) != 0) {
        int err = -errno;
        weft_close(fd);
        return err;
    }
    return fd;
}

typedef int (*bind_fn)(const struct sockaddr *sa, size_t len, int a, int b);

/* bind_fn on host:port: the dual-stack wildcard for NULL (IPv4's where
 * there is no IPv6), else the host's first IPv4 address, or its first. */
static int bind_host(const char *host, int port, int socktype, bind_fn fn,
                     int a, int b)
{
    if (!host || !*host) {
        struct sockaddr_in6 any6 = {.sin6_family = AF_INET6,
                                    .sin6_port = htons((uint16_t)port)};
        int fd = fn((struct sockaddr *)&any6, sizeof any6, a, b);
        if (fd != -EAFNOSUPPORT && fd != -EADDRNOTAVAIL)
            return fd;
        struct sockaddr_in any4 = {.sin_family = AF_INET,
                                   .sin_port = htons((uint16_t)port)};
        return fn((struct sockaddr *)&any4, sizeof any4, a, b);
    }
    struct addrinfo *res = NULL, *ai;
    int rc = resolve(host, port, socktype, true, WEFT_NEVER, &res);
    if (rc)
        return rc;
    for (ai = res; ai->ai_next && ai->ai_family != AF_INET;)
        ai = ai->ai_next;
    if (ai->ai_family != AF_INET)
        ai = res;
    rc = fn(ai->ai_addr, ai->ai_addrlen, a, b);
    freeaddrinfo(res);
    return rc;
}

int weft_tcp_listen_addr(const struct sockaddr *addr, size_t addrlen,
                         int backlog, int flags)
{
    int rc = inet_check(addr, addrlen);
    if (rc)
        return rc;
    if (flags & ~WEFT_REUSEPORT)
        return -EINVAL;
    return sock_listen(addr, addrlen, backlog, flags);
}

int weft_tcp_listen(const char *host, int port, int backlog, int flags)
{
    if (!port_ok(port) || (flags & ~WEFT_REUSEPORT))
        return -EINVAL;
    return bind_host(host, port, SOCK_STREAM, sock_listen, backlog, flags);
}

static int udp_bind(const struct sockaddr *sa, size_t len, int flags,
                    int unused)
{
    (void)unused;
    return sock_bind(sa, len, SOCK_DGRAM, flags);
}

int weft_udp_bind_addr(const struct sockaddr *addr, size_t addrlen, int flags)
{
    int rc = inet_check(addr, addrlen);
    if (rc)
        return rc;
    if (flags & ~WEFT_REUSEPORT)
        return -EINVAL;
    return udp_bind(addr, addrlen, flags, 0);
}

int weft_udp_bind(const char *host, int port, int flags)
{
    if (!port_ok(port) || (flags & ~WEFT_REUSEPORT))
        return -EINVAL;
    return bind_host(host, port, SOCK_DGRAM, udp_bind, flags, 0);
}

/* ---- accept ---- */

/* Errors of one connection that failed in the backlog: skip it. Not
 * EOPNOTSUPP, which accept(2) lists too: Linux says it for a socket that
 * cannot accept (UDP), every time, so skipping it would spin. */
static bool accept_skip(int err)
{
    switch (err) {
    case ECONNABORTED:
    case EPROTO:
    case ENETDOWN:
    case ENOPROTOOPT:
    case EHOSTDOWN:
    case ENONET:
    case EHOSTUNREACH:
    case ENETUNREACH:
        return true;
    default:
        return false;
    }
}

/* Out of descriptors or memory: wait, then try again. */
static bool accept_backoff(int err)
{
    return err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM;
}

int weft_accept(int lfd, struct sockaddr_storage *peer, weft_time deadline)
{
    struct sockaddr_storage ss;
    io_op op = {.kind = IO_ACCEPT,
                .addr = (struct sockaddr *)(peer ? peer : &ss)};
    int64_t delay = ACCEPT_BACKOFF_MIN;
    ptrdiff_t r = io_run(lfd, &op, deadline);
    while (r < 0) {
        int err = (int)-r;
        if (accept_backoff(err)) {
            int rc = backoff(&delay, ACCEPT_BACKOFF_MAX, deadline);
            if (rc)
                return rc;
        } else if (!accept_skip(err)) {
            return (int)r;
        }
        r = io_loop(lfd, &op, deadline);
    }
    /* weft's own, and a TCP socket for short reads (see io.c). */
    weft__fd_own((int)r, is_tcp(op.addr->sa_family));
    tcp_nodelay((int)r, op.addr->sa_family);
    return (int)r;
}

/* ---- connect ---- */

/* After EINPROGRESS: waits until the connection is made or has failed. */
static int connect_finish(int fd, weft_time deadline)
{
    const weft__netsys *sys = weft__netsys_for(fd);
    for (;;) {
        int rc = weft_fd_wait(fd, WEFT_IO_WRITE, deadline);
        if (rc)
            return rc;
        int err = 0;
        socklen_t len = sizeof err;
        if (sys->getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
            return -errno;
        if (err)
            return -err;
        struct sockaddr_storage ss;
        len = sizeof ss;
        if (sys->getpeername(fd, (struct sockaddr *)&ss, &len) == 0)
            return 0;
        if (errno != ENOTCONN)
            return -errno;
        /* A stale hint: not connected yet. */
    }
}

/* Connects fd to sa. EAGAIN (a Unix listener's backlog is full; Linux
 * offers no readiness for it) is tried again after a backoff. */
static int connect_fd(int fd, const struct sockaddr *sa, size_t len,
                      weft_time deadline)
{
    int64_t delay = CONNECT_BACKOFF_MIN;
    for (;;) {
        if (!weft__fault_fails(WEFT_FAULT_CONNECT) &&
            weft__netsys_for(fd)->connect(fd, sa, (socklen_t)len) == 0)
            return 0;
        int err = errno;
        if (err == EINPROGRESS || err == EINTR || err == EALREADY)
            return connect_finish(fd, deadline);
        if (err != EAGAIN)
            return -err;
        int rc = backoff(&delay, CONNECT_BACKOFF_MAX, deadline);
        if (rc)
            return rc;
    }
}

/* A new stream socket connected to sa; on any failure it is closed. */
static int dial(const struct sockaddr *sa, size_t len, weft_time deadline)
{
    int fd = sock_new(sa->sa_family, SOCK_STREAM);
    if (fd < 0)
        return fd;
    int rc = connect_fd(fd, sa, len, deadline);
    if (rc) {
        weft_close(fd);
        return rc;
    }
    tcp_nodelay(fd, sa->sa_family);
    if (is_tcp(sa->sa_family))
        weft__fd_set_stream(fd); /* short reads: see io.c */
    return fd;
}

int weft_tcp_connect_addr(const struct sockaddr *addr, size_t addrlen,
                          weft_time deadline)
{
    int rc = inet_check(addr, addrlen);
    if (rc || (rc = weft__checkpoint()))
        return rc;
    return dial(addr, addrlen, deadline);
}

int weft_tcp_connect(const char *host, int port, weft_time deadline)
{
    if (!host || !*host || !port_ok(port))
        return -EINVAL;
    int rc = weft__checkpoint();
    struct addrinfo *res = NULL;
    if (rc || (rc = resolve(host, port, SOCK_STREAM, false, deadline, &res)))
        return rc;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        rc = dial(ai->ai_addr, ai->ai_addrlen, deadline);
        if (rc >= 0 || rc == -ETIMEDOUT || rc == -ECANCELED)
            break;
    }
    freeaddrinfo(res);
    return rc;
}

/* ---- UDP ---- */

ptrdiff_t weft_sendto(int fd, const void *buf, size_t n,
                      const struct sockaddr *to, size_t tolen,
                      weft_time deadline)
{
    if (!buf_ok(buf, n) || (to && tolen < sizeof(sa_family_t)))
        return -EINVAL;
    io_op op = {.kind = IO_SENDTO,
                .buf = (void *)buf,
                .n = n,
                .addr = (struct sockaddr *)to,
                .alen = to ? (socklen_t)tolen : 0};
    return io_run(fd, &op, deadline);
}

ptrdiff_t weft_recvfrom(int fd, void *buf, size_t n,
                        struct sockaddr_storage *from, weft_time deadline)
{
    if (!buf_ok(buf, n))
        return -EINVAL;
    io_op op = {.kind = IO_RECVFROM,
                .buf = buf,
                .n = n,
                .addr = (struct sockaddr *)from};
    return io_run(fd, &op, deadline);
}

/* ---- Unix domain sockets ---- */

/* path as a sockaddr_un ('@' first: an abstract name). Returns its
 * length, or -EINVAL, -ENAMETOOLONG. */
static int unix_addr(const char *path, struct sockaddr_un *sun)
{
    if (!path || !*path)
        return -EINVAL;
    size_t n = strlen(path);
    bool abstract = path[0] == '@';
    if (n + !abstract > sizeof sun->sun_path)
        return -ENAMETOOLONG;
    memset(sun, 0, sizeof(*sun));
    sun->sun_family = AF_UNIX;
    memcpy(sun->sun_path, path, n);
    if (abstract)
        sun->sun_path[0] = '\0';
    return (int)(offsetof(struct sockaddr_un, sun_path) + n + !abstract);
}

int weft_unix_listen(const char *path, int backlog)
{
    struct sockaddr_un sun;
    int len = unix_addr(path, &sun);
    if (len < 0)
        return len;
    return sock_listen((struct sockaddr *)&sun, (size_t)len, backlog, 0);
}

int weft_unix_dgram_bind(const char *path)
{
    if (!path)
        return sock_new(AF_UNIX, SOCK_DGRAM);
    struct sockaddr_un sun;
    int len = unix_addr(path, &sun);
    if (len < 0)
        return len;
    return sock_bind((struct sockaddr *)&sun, (size_t)len, SOCK_DGRAM, 0);
}

int weft_unix_connect(const char *path, weft_time deadline)
{
    struct sockaddr_un sun;
    int len = unix_addr(path, &sun);
    int rc = len < 0 ? len : weft__checkpoint();
    if (rc)
        return rc;
    return dial((struct sockaddr *)&sun, (size_t)len, deadline);
}
