/* SPDX-License-Identifier: MIT */
/*
 * The simulated network's sockets: the system calls of io.h's socket
 * table (weft__netsys), with the kernel's conventions (-1 and errno,
 * EAGAIN when a call would wait, EINPROGRESS from connect), so that the
 * io layer's socket code runs over it unchanged.
 *
 * Packets. Everything that crosses the network is a packet: SYN (a
 * connect), SYNACK, DATA, FIN (a shutdown or close), RST, and DGRAM. A
 * packet is scheduled at now + latency + a seeded jitter (a stream's
 * never before the one its socket sent last, so its bytes stay in order),
 * kept in a heap by (arrival, sequence number), and delivered by one
 * timer on the worker's wheel, so the virtual clock jumps to it as to any
 * timer. On arrival the link decides (route): held, it parks the packet
 * in order; partitioned, it parks a stream's (TCP would retransmit it)
 * and loses a SYN or a datagram; a crashed host loses it. Delivery
 * changes the receiving socket and reports the readiness to io.c
 * (weft__fd_ready), as the kernel's events are, so waits, deadlines,
 * cancels and select work as for real sockets.
 *
 * Sockets live until the run ends (a packet may point at one long after
 * its descriptor is closed; such a socket is `gone`, and a DATA packet
 * that reaches it is answered with a reset, as the kernel does).
 * Descriptors are numbers from WEFT__SIM_FD_BASE, lowest free first.
 * Sends never wait: there is no window, the receiver's buffer grows.
 */
#include "sim/sim.h"
#include "util/fault.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <sys/un.h>

/* A stream segment sent to a crashed host is sent again (TCP
 * retransmits it) this many times, the first RTO later and each time
 * twice as long, before its connection times out. */
#define RTX_MAX 8
#define RTX_FIRST (200 * WEFT_MSEC)

enum { P_SYN, P_SYNACK, P_DATA, P_FIN, P_RST, P_DGRAM };
static const char *const kind_names[] = {"syn", "synack", "data",
                                         "fin", "rst",    "dgram"};

struct sim_pkt {
    sim_pkt *next;       /* a link's parked list, a socket's datagrams */
    int64_t when;        /* arrival */
    uint64_t seq;        /* ties: first sent, first delivered */
    int kind;            /* P_* */
    int src, dst;        /* hosts */
    sim_sock *from, *to; /* to: NULL for SYN and DGRAM (by address) */
    uint32_t sip, dip;   /* addresses, host order */
    uint16_t sport, dport;
    int tries; /* a stream segment's retransmissions to a down host */
    size_t len;
    socklen_t plen; /* a Unix datagram's: its sender's path, after data */
    char data[];
};

enum { S_NEW, S_BOUND, S_LISTEN, S_CONNECTING, S_OPEN, S_CLOSED };

struct sim_sock {
    sim_sock *next, *prev; /* the network's live list, or (next) its gone
                            * one: scans for ports see the live ones */
    int fd;                /* -1: none (not accepted yet, or closed) */
    int type;              /* SOCK_STREAM, SOCK_DGRAM */
    int family;            /* AF_INET, AF_UNIX */
    int state;             /* S_* */
    bool gone;             /* closed, or dropped by its host's crash */
    bool crashed; /* dropped by a crash: its calls fail with ENETDOWN */
    bool reset;   /* a reset came: reads end, writes fail */
    bool rd_eof;  /* the peer's FIN came */
    bool rd_shut, wr_shut;
    int err; /* to report once (SO_ERROR, or the next call) */
    weft_sim_host *host;
    uint32_t lip, rip;
    uint16_t lport, rport;
    sim_sock *peer; /* a stream's other end, once known */
    char *rx;       /* received bytes: [rxoff, rxlen) unread */
    size_t rxoff, rxlen, rxcap;
    int64_t tx_last; /* arrival of the last packet this stream sent */
    sim_sock **acq;  /* a listener's connections not yet accepted */
    int nacq, capacq, backlog;
    sim_pkt *dq, *dqtail; /* datagrams received */
    /* AF_UNIX: the path bound (sun_path's bytes; 0: none), a name on its
     * host (there is no file system: it is free once the socket
     * closes); rpath: a datagram socket's default destination. */
    socklen_t pathlen, rpathlen;
    char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
    char rpath[sizeof(((struct sockaddr_un *)0)->sun_path)];
};

/* Whether a seeded fault of chance permille is drawn now: a draw is
 * made whenever the chance is set, also with its class switched off
 * (weft__sim_off: shrinking), and so are the draws that follow a hit
 * (a held-back datagram's delay, a copy's latency), so that the other
 * classes' draws stay where they were. */
static bool drawn(unsigned permille)
{
    return permille && weft__sim_rand() % 1000 < permille;
}

/* Whether fault class c (weft_sim_fault) is switched on. */
static bool class_on(int c)
{
    return !(weft__sim->off & (1u << c));
}

/* A seeded fault of class c that draws nothing more when it strikes. */
static bool strikes(unsigned permille, int c)
{
    return drawn(permille) && class_on(c);
}

/* ---- the heap of packets in flight ---- */

static bool before(const sim_pkt *a, const sim_pkt *b)
{
    return a->when < b->when || (a->when == b->when && a->seq < b->seq);
}

static bool heap_push(sim_net *n, sim_pkt *p)
{
    if (n->nheap == n->capheap) {
        size_t cap = n->capheap ? n->capheap * 2 : 64;
        sim_pkt **h = weft__realloc(n->heap, cap * sizeof(*h));
        if (!h)
            return false;
        n->heap = h;
        n->capheap = cap;
    }
    size_t i = n->nheap++;
    while (i > 0 && before(p, n->heap[(i - 1) / 2])) {
        n->heap[i] = n->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    n->heap[i] = p;
    return true;
}

static sim_pkt *heap_pop(sim_net *n)
{
    sim_pkt *top = n->heap[0], *last = n->heap[--n->nheap];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n->nheap)
            break;
        if (c + 1 < n->nheap && before(n->heap[c + 1], n->heap[c]))
            c++;
        if (!before(n->heap[c], last))
            break;
        n->heap[i] = n->heap[c];
        i = c;
    }
    if (n->nheap)
        n->heap[i] = last;
    return top;
}

/* The timer is due at the first packet's arrival. */
static void timer_update(sim_net *n)
{
    weft__wheel *wh = &n->rt->workers[0].wheel;
    int64_t when = n->nheap ? n->heap[0]->when : WEFT_NEVER;
    if (weft__timer_armed(&n->timer)) {
        if (n->timer.when == when)
            return;
        weft__wheel_disarm(wh, &n->timer);
    }
    if (when != WEFT_NEVER)
        weft__wheel_arm(wh, &n->timer, when);
}

/* ---- sending ---- */

static void addr_str(char *buf, size_t n, uint32_t ip, uint16_t port)
{
    snprintf(buf, n, "%u.%u.%u.%u:%u", ip >> 24, (ip >> 16) & 255,
             (ip >> 8) & 255, ip & 255, port);
}

static void log_pkt(const char *what, const sim_pkt *p)
{
    char a[32], b[32];
    addr_str(a, sizeof a, p->sip, p->sport);
    addr_str(b, sizeof b, p->dip, p->dport);
    weft__sim_logf("%s %s %s > %s len %zu", what, kind_names[p->kind], a, b,
                   p->len);
}

static sim_pkt *pkt_new(int kind, const void *data, size_t len)
{
    sim_pkt *p = weft__calloc(1, sizeof(*p) + len);
    if (!p)
        return NULL;
    p->kind = kind;
    p->len = len;
    if (data && len)
        memcpy(p->data, data, len);
    return p;
}

/* Addresses p from s to its peer's address (to: the peer's socket, or
 * NULL). */
static void pkt_route(sim_pkt *p, const sim_sock *s, sim_sock *to)
{
    p->from = (sim_sock *)s;
    p->to = to;
    p->src = s->host->idx;
    p->sip = s->lip;
    p->sport = s->lport;
    p->dip = s->rip;
    p->dport = s->rport;
    weft_sim_host *dh = weft__sim_host_by_ip(s->rip, s->host);
    p->dst = dh ? dh->idx : s->host->idx;
}

static int64_t latency(sim_net *n)
{
    int64_t j = n->o.jitter_ns;
    int64_t d = n->o.latency_ns;
    if (j > 0)
        d += (int64_t)(weft__sim_rand() % (uint64_t)(j + 1));
    return d > 0 ? d : 1;
}

/* Puts p in flight, late ns later than its latency; frees it if it
 * cannot be (out of memory: lost). */
static void pkt_send_late(sim_pkt *p, sim_sock *stream, int64_t late)
{
    sim_net *n = weft__sim;
    p->when = weft__now(n->rt) + latency(n) + late;
    if (stream) {
        if (p->when < stream->tx_last)
            p->when = stream->tx_last;
        stream->tx_last = p->when;
    }
    p->seq = ++n->seq;
    log_pkt("send", p);
    if (!heap_push(n, p)) {
        free(p);
        return;
    }
    timer_update(n);
}

static void pkt_send(sim_pkt *p, sim_sock *stream)
{
    pkt_send_late(p, stream, 0);
}

/* A packet without data from stream s to its peer. */
static void stream_signal(sim_sock *s, int kind)
{
    sim_pkt *p = pkt_new(kind, NULL, 0);
    if (!p)
        return;
    pkt_route(p, s, s->peer);
    pkt_send(p, s);
}

/* A reset answering p, from the socket it reached (or its host). */
static void reply_rst(const sim_pkt *p)
{
    if (!p->from)
        return;
    sim_pkt *r = pkt_new(P_RST, NULL, 0);
    if (!r)
        return;
    r->from = p->to;
    r->to = p->from;
    r->src = p->dst;
    r->dst = p->src;
    r->sip = p->dip;
    r->sport = p->dport;
    r->dip = p->sip;
    r->dport = p->sport;
    pkt_send(r, NULL);
}

/* ---- readiness ---- */

static void edge(sim_sock *s, unsigned ev)
{
    if (s->fd >= 0)
        weft__fd_ready(s->fd, weft__fd_gen(s->fd), ev);
}

/* ---- sockets ---- */

static sim_sock *sock_make(weft_sim_host *h, int type)
{
    sim_net *n = weft__sim;
    sim_sock *s = weft__calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    s->fd = -1;
    s->type = type;
    s->host = h;
    s->lip = weft__sim_host_ip(h);
    s->next = n->socks;
    if (n->socks)
        n->socks->prev = s;
    n->socks = s;
    return s;
}

/* The lowest free descriptor for s, or -1 (ENFILE, ENOMEM). */
static int fd_give(sim_sock *s)
{
    sim_net *n = weft__sim;
    int i = 0;
    while (i < n->nfds && n->fds[i])
        i++;
    if (i == n->nfds) {
        int cap = n->nfds ? n->nfds * 2 : 64;
        if (WEFT__SIM_FD_BASE + cap > (1 << 20)) {
            errno = ENFILE;
            return -1;
        }
        sim_sock **f = weft__realloc(n->fds, (size_t)cap * sizeof(*f));
        if (!f) {
            errno = ENOMEM;
            return -1;
        }
        memset(f + n->nfds, 0, (size_t)(cap - n->nfds) * sizeof(*f));
        n->fds = f;
        n->nfds = cap;
    }
    n->fds[i] = s;
    s->fd = WEFT__SIM_FD_BASE + i;
    return s->fd;
}

/* fd's socket, or NULL with errno EBADF. */
static sim_sock *sock_of(int fd)
{
    sim_net *n = weft__sim;
    int i = fd - WEFT__SIM_FD_BASE;
    if (n && i >= 0 && i < n->nfds && n->fds[i])
        return n->fds[i];
    errno = EBADF;
    return NULL;
}

/* fd's socket, alive: NULL with errno EBADF, also if its host crashed
 * (its descriptors are gone, as a dead process's are; only weft_close
 * is left to do; EBADF is retried by nothing, where accept would skip
 * ENETDOWN and try again at once, forever). */
static sim_sock *sock_live(int fd)
{
    sim_sock *s = sock_of(fd);
    if (s && s->crashed) {
        errno = EBADF;
        return NULL;
    }
    return s;
}

/* The socket bound on host h, port, of type: a listener or a datagram
 * socket. */
static sim_sock *sock_bound(int h, uint16_t port, int type)
{
    for (sim_sock *s = weft__sim->socks; s; s = s->next)
        if (!s->gone && s->host->idx == h && s->lport == port &&
            s->type == type && s->state != S_NEW &&
            (type == SOCK_DGRAM || s->state == S_LISTEN || s->state == S_BOUND))
            return s;
    return NULL;
}

static bool port_used(int h, uint16_t port, int type)
{
    for (sim_sock *s = weft__sim->socks; s; s = s->next)
        if (!s->gone && s->host->idx == h && s->lport == port &&
            s->type == type && s->state != S_NEW)
            return true;
    return false;
}

/* Binds s to an ephemeral port of its host. */
static int autobind(sim_sock *s)
{
    weft_sim_host *h = s->host;
    for (int tries = 0; tries < 16384; tries++) {
        uint16_t p = h->next_port;
        h->next_port = p == 65535 ? 49152 : (uint16_t)(p + 1);
        if (!port_used(h->idx, p, s->type)) {
            s->lport = p;
            s->state = S_BOUND;
            return 0;
        }
    }
    errno = EADDRINUSE;
    return -1;
}

static int sim_socket(int family, int type, int proto)
{
    WEFT_UNUSED(proto);
    int t = type & 0xf;
    if (family != AF_INET && family != AF_UNIX) {
        errno = EAFNOSUPPORT;
        return -1;
    }
    if (t != SOCK_STREAM && t != SOCK_DGRAM) {
        errno = EPROTONOSUPPORT;
        return -1;
    }
    bool dead;
    weft_sim_host *h = weft__sim_host_here(&dead);
    if (dead) {
        errno = ENETDOWN;
        return -1;
    }
    sim_sock *s = sock_make(h, t);
    if (!s) {
        errno = ENOMEM;
        return -1;
    }
    s->family = family;
    if (family == AF_UNIX)
        s->lip = 0;
    return fd_give(s);
}

/* ---- Unix domain sockets: paths on the host, no network ---- */

/* a's path (sun_path's bytes, an abstract name's '\0' first) into buf;
 * its length, or 0 with errno. */
static socklen_t unix_path_of(const struct sockaddr *a, socklen_t len,
                              char *buf)
{
    size_t off = offsetof(struct sockaddr_un, sun_path);
    if (!a || len <= off || a->sa_family != AF_UNIX ||
        len - off > sizeof(((struct sockaddr_un *)0)->sun_path)) {
        errno = a && a->sa_family != AF_UNIX ? EAFNOSUPPORT : EINVAL;
        return 0;
    }
    socklen_t n = (socklen_t)(len - off);
    memcpy(buf, ((const struct sockaddr_un *)a)->sun_path, n);
    /* A path's length ends at its '\0' (an abstract name has none). */
    if (buf[0] != '\0')
        n = (socklen_t)strnlen(buf, n);
    return n;
}

static void unix_fill(struct sockaddr *a, socklen_t *alen, const char *path,
                      socklen_t n)
{
    if (!a || !alen)
        return;
    struct sockaddr_un un = {.sun_family = AF_UNIX};
    memcpy(un.sun_path, path, n);
    socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n +
                                (n && path[0] != '\0'));
    memcpy(a, &un, *alen < len ? *alen : len);
    *alen = len;
}

/* The socket bound at path on host h (of any type), or NULL. */
static sim_sock *unix_bound(const weft_sim_host *h, const char *path,
                            socklen_t n)
{
    for (sim_sock *s = weft__sim->socks; s; s = s->next)
        if (!s->gone && s->family == AF_UNIX && s->host == h &&
            s->pathlen == n && memcmp(s->path, path, n) == 0)
            return s;
    return NULL;
}

static void unix_log(const char *what, const sim_sock *s, const char *path,
                     socklen_t n, size_t len)
{
    weft__sim_logf("%s unix %s:%s%.*s len %zu", what, s->host->name,
                   n && path[0] == '\0' ? "@" : "",
                   (int)(n && path[0] == '\0' ? n - 1 : n),
                   n && path[0] == '\0' ? path + 1 : path, len);
}

static int unix_bind(sim_sock *s, const struct sockaddr *a, socklen_t len)
{
    char path[sizeof(s->path)];
    socklen_t n = unix_path_of(a, len, path);
    if (!n)
        return -1;
    if (s->state != S_NEW || s->pathlen) {
        errno = EINVAL;
        return -1;
    }
    if (unix_bound(s->host, path, n)) {
        errno = EADDRINUSE;
        return -1;
    }
    memcpy(s->path, path, n);
    s->pathlen = n;
    s->state = S_BOUND;
    unix_log("bind", s, path, n, 0);
    return 0;
}

/* A Unix stream's connect is done at once, as Linux's is: the listener's
 * new socket is queued for accept. */
static int unix_connect(sim_sock *s, const struct sockaddr *a, socklen_t len)
{
    char path[sizeof(s->path)];
    socklen_t n = unix_path_of(a, len, path);
    if (!n)
        return -1;
    sim_sock *l = unix_bound(s->host, path, n);
    int e = s->state == S_OPEN                                ? EISCONN
            : s->state == S_LISTEN || s->state == S_CLOSED    ? EINVAL
            : !l                                              ? ENOENT
            : l->type != s->type                              ? EPROTOTYPE
            : s->type == SOCK_STREAM && l->state != S_LISTEN  ? ECONNREFUSED
            : s->type == SOCK_STREAM && l->nacq >= l->backlog ? EAGAIN
                                                              : 0;
    if (e) {
        errno = e;
        return -1;
    }
    if (s->type == SOCK_DGRAM) { /* a default destination */
        memcpy(s->rpath, path, n);
        s->rpathlen = n;
        s->state = S_OPEN;
        return 0;
    }
    if (l->nacq == l->capacq) {
        int cap = l->capacq ? l->capacq * 2 : 8;
        sim_sock **q = weft__realloc(l->acq, (size_t)cap * sizeof(*q));
        if (!q) {
            errno = ENOBUFS;
            return -1;
        }
        l->acq = q;
        l->capacq = cap;
    }
    sim_sock *c = sock_make(s->host, SOCK_STREAM);
    if (!c) {
        errno = ENOBUFS;
        return -1;
    }
    c->family = AF_UNIX;
    c->lip = 0;
    memcpy(c->path, path, n);
    c->pathlen = n;
    c->peer = s;
    c->state = S_OPEN;
    s->peer = c;
    s->state = S_OPEN;
    memcpy(s->rpath, path, n);
    s->rpathlen = n;
    l->acq[l->nacq++] = c;
    unix_log("connect", s, path, n, 0);
    edge(l, WEFT__FD_READ);
    return 0;
}

static bool inet_addr_of(const struct sockaddr *a, socklen_t len, uint32_t *ip,
                         uint16_t *port)
{
    if (!a || len < sizeof(struct sockaddr_in) || a->sa_family != AF_INET) {
        errno = a && a->sa_family != AF_INET ? EAFNOSUPPORT : EINVAL;
        return false;
    }
    const struct sockaddr_in *in = (const struct sockaddr_in *)a;
    *ip = ntohl(in->sin_addr.s_addr);
    *port = ntohs(in->sin_port);
    return true;
}

static void inet_fill(struct sockaddr *a, socklen_t *len, uint32_t ip,
                      uint16_t port)
{
    if (!a || !len)
        return;
    struct sockaddr_in in = {.sin_family = AF_INET,
                             .sin_port = htons(port),
                             .sin_addr.s_addr = htonl(ip)};
    memcpy(a, &in, *len < sizeof in ? *len : sizeof in);
    *len = sizeof in;
}

static int sim_bind(int fd, const struct sockaddr *a, socklen_t len)
{
    sim_sock *s = sock_live(fd);
    uint32_t ip;
    uint16_t port;
    if (s && s->family == AF_UNIX)
        return unix_bind(s, a, len);
    if (!s || !inet_addr_of(a, len, &ip, &port))
        return -1;
    if (s->state != S_NEW) {
        errno = EINVAL;
        return -1;
    }
    if (weft__sim_host_by_ip(ip, s->host) != s->host) {
        errno = EADDRNOTAVAIL;
        return -1;
    }
    if (port == 0)
        return autobind(s);
    if (port_used(s->host->idx, port, s->type)) {
        errno = EADDRINUSE;
        return -1;
    }
    s->lport = port;
    s->state = S_BOUND;
    weft__sim_logf("bind %s %s:%u", s->type == SOCK_STREAM ? "tcp" : "udp",
                   s->host->name, port);
    return 0;
}

static int sim_listen(int fd, int backlog)
{
    sim_sock *s = sock_live(fd);
    if (!s)
        return -1;
    if (s->type != SOCK_STREAM ||
        (s->state != S_BOUND && s->state != S_NEW && s->state != S_LISTEN)) {
        errno = s->type != SOCK_STREAM ? EOPNOTSUPP : EINVAL;
        return -1;
    }
    if (s->state == S_NEW && s->family == AF_INET && autobind(s) != 0)
        return -1;
    s->state = S_LISTEN;
    s->backlog = backlog > 0 ? backlog : 128;
    if (s->family == AF_UNIX)
        unix_log("listen", s, s->path, s->pathlen, 0);
    else
        weft__sim_logf("listen %s:%u", s->host->name, s->lport);
    return 0;
}

static int sim_accept4(int fd, struct sockaddr *a, socklen_t *alen, int flags)
{
    WEFT_UNUSED(flags);
    sim_sock *s = sock_live(fd);
    if (!s)
        return -1;
    if (s->state != S_LISTEN) {
        errno = EINVAL;
        return -1;
    }
    if (s->nacq == 0) {
        errno = EAGAIN;
        return -1;
    }
    sim_sock *c = s->acq[0];
    if (fd_give(c) < 0)
        return -1; /* left in the queue */
    memmove(s->acq, s->acq + 1, (size_t)--s->nacq * sizeof(*s->acq));
    if (c->family == AF_UNIX) {
        unix_fill(a, alen, "", 0); /* the connecting socket: unnamed */
        unix_log("accept", s, s->path, s->pathlen, 0);
        return c->fd;
    }
    inet_fill(a, alen, c->rip, c->rport);
    char b[32];
    addr_str(b, sizeof b, c->rip, c->rport);
    weft__sim_logf("accept %s:%u from %s", s->host->name, s->lport, b);
    return c->fd;
}

static int sim_connect(int fd, const struct sockaddr *a, socklen_t len)
{
    sim_sock *s = sock_live(fd);
    uint32_t ip;
    uint16_t port;
    if (s && s->family == AF_UNIX)
        return unix_connect(s, a, len);
    if (!s || !inet_addr_of(a, len, &ip, &port))
        return -1;
    weft_sim_host *dh = weft__sim_host_by_ip(ip, s->host);
    int e = s->state == S_CONNECTING                       ? EALREADY
            : s->state == S_OPEN                           ? EISCONN
            : s->state == S_LISTEN || s->state == S_CLOSED ? EINVAL
            : !dh                                          ? ENETUNREACH
                                                           : 0;
    if (e == 0 && s->state == S_NEW && autobind(s) != 0)
        return -1;
    if (e) {
        errno = e;
        return -1;
    }
    s->rip = weft__sim_host_ip(dh);
    s->rport = port;
    if (s->type == SOCK_DGRAM) { /* a default destination */
        s->state = S_OPEN;
        return 0;
    }
    s->state = S_CONNECTING;
    sim_pkt *p = pkt_new(P_SYN, NULL, 0);
    if (!p) {
        errno = ENOBUFS;
        return -1;
    }
    pkt_route(p, s, NULL);
    pkt_send(p, s);
    errno = EINPROGRESS;
    return -1;
}

/* ---- reading ---- */

/* A stream's state for a read that found no byte: 0 (the end), or -1
 * with errno. */
static ssize_t stream_empty(sim_sock *s)
{
    if (s->err) {
        errno = s->err;
        s->err = 0;
        return -1;
    }
    if (s->reset || s->rd_eof || s->rd_shut)
        return 0;
    if (s->state == S_CONNECTING) {
        errno = EAGAIN;
        return -1;
    }
    if (s->state != S_OPEN) {
        errno = ENOTCONN;
        return -1;
    }
    errno = EAGAIN;
    return -1;
}

static size_t stream_take(sim_sock *s, void *buf, size_t n)
{
    size_t k = s->rxlen - s->rxoff;
    if (k > n)
        k = n;
    memcpy(buf, s->rx + s->rxoff, k);
    s->rxoff += k;
    if (s->rxoff == s->rxlen)
        s->rxoff = s->rxlen = 0;
    return k;
}

static ssize_t dgram_take(sim_sock *s, void *buf, size_t n, struct sockaddr *a,
                          socklen_t *alen)
{
    sim_pkt *p = s->dq;
    if (!p) {
        errno = EAGAIN;
        return -1;
    }
    s->dq = p->next;
    if (!s->dq)
        s->dqtail = NULL;
    size_t k = p->len < n ? p->len : n;
    memcpy(buf, p->data, k);
    if (s->family == AF_UNIX && !p->plen && alen)
        *alen = 0; /* an unbound sender: no name, as Linux says */
    else if (s->family == AF_UNIX)
        unix_fill(a, alen, p->data + p->len, p->plen);
    else
        inet_fill(a, alen, p->sip, p->sport);
    free(p);
    return (ssize_t)k;
}

static ssize_t sim_recvfrom(int fd, void *buf, size_t n, int flags,
                            struct sockaddr *a, socklen_t *alen)
{
    WEFT_UNUSED(flags);
    sim_sock *s = sock_live(fd);
    if (!s)
        return -1;
    if (s->type == SOCK_DGRAM)
        return dgram_take(s, buf, n, a, alen);
    if (n == 0)
        return 0;
    if (s->rxlen > s->rxoff)
        return (ssize_t)stream_take(s, buf, n);
    return stream_empty(s);
}

static ssize_t sim_recv(int fd, void *buf, size_t n, int flags)
{
    return sim_recvfrom(fd, buf, n, flags, NULL, NULL);
}

static ssize_t sim_read(int fd, void *buf, size_t n)
{
    return sim_recvfrom(fd, buf, n, 0, NULL, NULL);
}

static ssize_t sim_readv(int fd, const struct iovec *iov, int iovcnt)
{
    sim_sock *s = sock_live(fd);
    if (!s)
        return -1;
    if (s->type == SOCK_DGRAM || s->rxlen == s->rxoff) {
        for (int i = 0; i < iovcnt; i++)
            if (iov[i].iov_len)
                return sim_recvfrom(fd, iov[i].iov_base, iov[i].iov_len, 0,
                                    NULL, NULL);
        return 0;
    }
    size_t got = 0;
    for (int i = 0; i < iovcnt && s->rxlen > s->rxoff; i++)
        got += stream_take(s, iov[i].iov_base, iov[i].iov_len);
    return (ssize_t)got;
}

/* ---- writing ---- */

/* Whether stream s may send now: 0, or -1 with errno. */
static int stream_can_send(sim_sock *s)
{
    int e = 0;
    if (s->err) {
        e = s->err;
        s->err = 0;
    } else if (s->state == S_CONNECTING) {
        e = EAGAIN;
    } else if (s->state != S_OPEN) {
        e = ENOTCONN;
    } else if (s->reset || s->wr_shut) {
        e = EPIPE;
    }
    if (!e)
        return 0;
    errno = e;
    return -1;
}

/* The network's seeded reset: both ends of s's connection get one. */
static void seeded_reset(sim_sock *s)
{
    weft__sim_logf("reset %s:%u (seeded)", s->host->name, s->lport);
    sim_pkt out = {0}; /* the segment that was to go: answered as lost */
    pkt_route(&out, s, s->peer);
    stream_signal(s, P_RST);
    reply_rst(&out);
}

static bool rx_append(sim_sock *s, const char *data, size_t n);

/* A Unix stream's bytes go straight into the peer's buffer. */
static ssize_t unix_stream_send(sim_sock *s, const struct iovec *iov,
                                int iovcnt, size_t n)
{
    sim_sock *peer = s->peer;
    if (!peer || peer->gone || peer->rd_shut) {
        errno = EPIPE;
        return -1;
    }
    for (int i = 0; i < iovcnt; i++)
        if (!rx_append(peer, iov[i].iov_base, iov[i].iov_len)) {
            errno = ENOBUFS; /* what went stays: a short write */
            return -1;
        }
    unix_log("send", s, s->rpath, s->rpathlen, n);
    edge(peer, WEFT__FD_READ);
    return (ssize_t)n;
}

/* Gathers iov's bytes into a new packet of kind (len: their total). */
static sim_pkt *pkt_gather(int kind, const struct iovec *iov, int iovcnt,
                           size_t len, size_t extra)
{
    sim_pkt *p = pkt_new(kind, NULL, len + extra);
    if (!p) {
        errno = ENOBUFS;
        return NULL;
    }
    p->len = len;
    for (size_t off = 0, i = 0; i < (size_t)iovcnt; i++) {
        memcpy(p->data + off, iov[i].iov_base, iov[i].iov_len);
        off += iov[i].iov_len;
    }
    return p;
}

/* Sends iov's bytes from stream s as one segment. */
static ssize_t stream_send(sim_sock *s, const struct iovec *iov, int iovcnt)
{
    if (stream_can_send(s) != 0)
        return -1;
    size_t n = 0;
    for (int i = 0; i < iovcnt; i++)
        n += iov[i].iov_len;
    if (n == 0)
        return 0;
    if (s->family == AF_UNIX)
        return unix_stream_send(s, iov, iovcnt, n);
    if (strikes(weft__sim->o.reset_permille, WEFT_SIM_RESET)) {
        seeded_reset(s);
        return (ssize_t)n; /* taken, and lost with the connection */
    }
    sim_pkt *p = pkt_gather(P_DATA, iov, iovcnt, n, 0);
    if (!p)
        return -1;
    pkt_route(p, s, s->peer);
    pkt_send(p, s);
    return (ssize_t)n;
}

/* p joins the end of the list head .. *tail. */
static void pkt_append(sim_pkt **head, sim_pkt **tail, sim_pkt *p)
{
    p->next = NULL;
    if (*tail)
        (*tail)->next = p;
    else
        *head = p;
    *tail = p;
}

/* Datagram p joins s's queue. */
static void dq_push(sim_sock *s, sim_pkt *p)
{
    pkt_append(&s->dq, &s->dqtail, p);
    edge(s, WEFT__FD_READ);
}

/* A Unix datagram from s to the socket bound at path on its host: there
 * at once, never lost. */
static ssize_t unix_dgram_send(sim_sock *s, const struct iovec *iov, int iovcnt,
                               size_t n, const char *path, socklen_t plen)
{
    sim_sock *d = unix_bound(s->host, path, plen);
    if (!d || d->type != SOCK_DGRAM) {
        errno = !d ? ENOENT : EPROTOTYPE;
        return -1;
    }
    sim_pkt *p = pkt_gather(P_DGRAM, iov, iovcnt, n, s->pathlen);
    if (!p)
        return -1;
    memcpy(p->data + n, s->path, s->pathlen);
    p->plen = s->pathlen;
    unix_log("send", s, path, plen, n);
    dq_push(d, p);
    return (ssize_t)n;
}

/* A datagram of iov's bytes (n of them) from s to ip:port: lost,
 * duplicated or held back as the seed says. */
static ssize_t dgram_send(sim_sock *s, const struct iovec *iov, int iovcnt,
                          size_t n, uint32_t ip, uint16_t port)
{
    if (s->state == S_NEW && autobind(s) != 0)
        return -1;
    weft_sim_host *dh = weft__sim_host_by_ip(ip, s->host);
    if (!dh) {
        errno = ENETUNREACH;
        return -1;
    }
    sim_pkt *p = pkt_gather(P_DGRAM, iov, iovcnt, n, 0);
    if (!p)
        return -1;
    p->from = s;
    p->src = s->host->idx;
    p->dst = dh->idx;
    p->sip = s->lip;
    p->sport = s->lport;
    p->dip = weft__sim_host_ip(dh);
    p->dport = port;
    sim_net *net = weft__sim;
    if (strikes(net->o.loss_permille, WEFT_SIM_LOSS)) {
        log_pkt("lose", p);
        free(p);
        return (ssize_t)n;
    }
    bool twice = drawn(net->o.dup_permille);
    sim_pkt *dup = NULL;
    if (twice && class_on(WEFT_SIM_DUP) &&
        (dup = pkt_gather(P_DGRAM, iov, iovcnt, n, 0)) != NULL) {
        memcpy(dup, p, sizeof(*p));
        log_pkt("duplicate", p);
    }
    int64_t late = 0;
    if (drawn(net->o.reorder_permille)) {
        int64_t extra =
            net->o.latency_ns * (1 + (int64_t)(weft__sim_rand() % 10));
        if (class_on(WEFT_SIM_REORDER)) {
            late = extra;
            log_pkt("hold back", p);
        }
    }
    pkt_send_late(p, NULL, late);
    if (dup)
        pkt_send(dup, NULL);
    else if (twice)
        (void)latency(net); /* the copy's draw, made or not */
    return (ssize_t)n;
}

/* iov's bytes from s, as one segment or one datagram (to a, or to the
 * socket's default destination when a is NULL). */
static ssize_t sock_send(sim_sock *s, const struct iovec *iov, int iovcnt,
                         const struct sockaddr *a, socklen_t alen)
{
    if (s->type == SOCK_STREAM)
        return stream_send(s, iov, iovcnt);
    size_t n = 0;
    for (int i = 0; i < iovcnt; i++)
        n += iov[i].iov_len;
    if (!a && s->state != S_OPEN) {
        errno = EDESTADDRREQ;
        return -1;
    }
    if (s->family == AF_UNIX) {
        char path[sizeof(s->path)];
        socklen_t plen = a ? unix_path_of(a, alen, path) : s->rpathlen;
        if (!plen)
            return -1;
        return unix_dgram_send(s, iov, iovcnt, n, a ? path : s->rpath, plen);
    }
    uint32_t ip = s->rip;
    uint16_t port = s->rport;
    if (a && !inet_addr_of(a, alen, &ip, &port))
        return -1;
    return dgram_send(s, iov, iovcnt, n, ip, port);
}

static ssize_t sim_sendto(int fd, const void *buf, size_t n, int flags,
                          const struct sockaddr *a, socklen_t alen)
{
    WEFT_UNUSED(flags);
    sim_sock *s = sock_live(fd);
    if (!s)
        return -1;
    struct iovec v = {(void *)buf, n};
    return sock_send(s, &v, 1, a, alen);
}

static ssize_t sim_send(int fd, const void *buf, size_t n, int flags)
{
    return sim_sendto(fd, buf, n, flags, NULL, 0);
}

static ssize_t sim_write(int fd, const void *buf, size_t n)
{
    return sim_sendto(fd, buf, n, 0, NULL, 0);
}

static ssize_t sim_writev(int fd, const struct iovec *iov, int iovcnt)
{
    sim_sock *s = sock_live(fd);
    if (!s)
        return -1;
    return sock_send(s, iov, iovcnt, NULL, 0);
}

static ssize_t sim_sendmsg(int fd, const struct msghdr *m, int flags)
{
    WEFT_UNUSED(flags);
    sim_sock *s = sock_live(fd);
    if (!s)
        return -1;
    return sock_send(s, m->msg_iov, (int)m->msg_iovlen, m->msg_name,
                     m->msg_namelen);
}

/* ---- ending ---- */

static void unix_end(sim_sock *s, bool unread);

static int sim_shutdown(int fd, int how)
{
    sim_sock *s = sock_live(fd);
    if (!s)
        return -1;
    if (s->type != SOCK_STREAM || s->state != S_OPEN) {
        errno = ENOTCONN;
        return -1;
    }
    if ((how == SHUT_WR || how == SHUT_RDWR) && !s->wr_shut) {
        s->wr_shut = true;
        if (s->family == AF_UNIX)
            unix_end(s, false);
        else if (!s->reset)
            stream_signal(s, P_FIN);
    }
    if ((how == SHUT_RD || how == SHUT_RDWR) && !s->rd_shut) {
        s->rd_shut = true;
        edge(s, WEFT__FD_READ | WEFT__FD_HUP);
    }
    return 0;
}

/* s is gone: off the live list, onto the gone one. */
static void sock_bury(sim_sock *s)
{
    sim_net *n = weft__sim;
    s->gone = true;
    if (s->prev)
        s->prev->next = s->next;
    else
        n->socks = s->next;
    if (s->next)
        s->next->prev = s->prev;
    s->prev = NULL;
    s->next = n->gone;
    n->gone = s;
}

/* A Unix stream s ends its side: its peer reads the end, or, if s
 * leaves bytes unread, a reset (as Linux does). */
static void unix_end(sim_sock *s, bool unread)
{
    sim_sock *peer = s->peer;
    if (!peer || peer->gone || peer->reset)
        return;
    if (unread) {
        peer->err = ECONNRESET;
        peer->reset = true;
    } else {
        peer->rd_eof = true;
    }
    edge(peer, WEFT__FD_READ | WEFT__FD_HUP | (unread ? WEFT__FD_WRITE : 0));
}

/* s leaves: a stream says so to its peer (a reset if bytes were left
 * unread, as Linux does, else a FIN), a listener resets what it did not
 * accept. A crash says nothing: the host is gone at once, and its peers
 * learn it only when they send (TCP's half-open connection: their
 * segments are retransmitted until the host is back and answers with a
 * reset, or time out). */
static void sock_drop(sim_sock *s, bool crash)
{
    if (s->gone)
        return;
    if (s->type == SOCK_STREAM && s->state == S_OPEN && !s->reset) {
        bool unread = s->rxlen > s->rxoff;
        if (s->family == AF_UNIX)
            unix_end(s, unread || crash);
        else if (crash)
            ;
        else if (unread)
            stream_signal(s, P_RST);
        else if (!s->wr_shut)
            stream_signal(s, P_FIN);
    }
    for (int i = 0; i < s->nacq; i++) {
        sim_sock *c = s->acq[i];
        if (c->family == AF_UNIX)
            unix_end(c, true);
        else if (!crash)
            stream_signal(c, P_RST);
        c->state = S_CLOSED;
        c->crashed = crash;
        sock_bury(c);
    }
    s->nacq = 0;
    while (s->dq) {
        sim_pkt *p = s->dq;
        s->dq = p->next;
        free(p);
    }
    s->dqtail = NULL;
    s->crashed = crash;
    s->state = S_CLOSED;
    sock_bury(s);
}

static int sim_close(int fd)
{
    sim_sock *s = sock_of(fd);
    if (!s)
        return -1;
    if (!s->gone && s->family == AF_UNIX)
        unix_log("close", s, s->path, s->pathlen, 0);
    else if (!s->gone)
        weft__sim_logf("close %s:%u", s->host->name, s->lport);
    sock_drop(s, false);
    weft__sim->fds[fd - WEFT__SIM_FD_BASE] = NULL;
    s->fd = -1;
    free(s->rx);
    s->rx = NULL;
    s->rxoff = s->rxlen = s->rxcap = 0;
    return 0;
}

void weft__sim_net_crash(weft_sim_host *h)
{
    /* Each drop moves sockets (s, a listener's queue) to the gone list:
     * look again from the start of the live one. */
    for (sim_sock *s = weft__sim->socks; s;) {
        if (s->host != h) {
            s = s->next;
            continue;
        }
        sock_drop(s, true);
        edge(s, WEFT__FD_READ | WEFT__FD_WRITE | WEFT__FD_HUP);
        s = weft__sim->socks;
    }
}

/* ---- options and names ---- */

static int sim_getsockopt(int fd, int level, int name, void *val,
                          socklen_t *len)
{
    sim_sock *s = sock_live(fd);
    if (!s)
        return -1;
    if (val && len && *len >= sizeof(int)) {
        int v = 0;
        if (level == SOL_SOCKET && name == SO_ERROR) {
            v = s->err;
            s->err = 0;
        }
        memcpy(val, &v, sizeof v);
        *len = sizeof v;
    }
    return 0;
}

static int sim_setsockopt(int fd, int level, int name, const void *val,
                          socklen_t len)
{
    WEFT_UNUSED(level);
    WEFT_UNUSED(name);
    WEFT_UNUSED(val);
    WEFT_UNUSED(len);
    return sock_live(fd) ? 0 : -1;
}

static int sim_getsockname(int fd, struct sockaddr *a, socklen_t *alen)
{
    sim_sock *s = sock_live(fd);
    if (!s)
        return -1;
    if (s->family == AF_UNIX)
        unix_fill(a, alen, s->path, s->pathlen);
    else
        inet_fill(a, alen, s->lip, s->lport);
    return 0;
}

static int sim_getpeername(int fd, struct sockaddr *a, socklen_t *alen)
{
    sim_sock *s = sock_live(fd);
    if (!s)
        return -1;
    if (s->state != S_OPEN) {
        errno = ENOTCONN;
        return -1;
    }
    if (s->family == AF_UNIX)
        unix_fill(a, alen, s->rpath, s->rpathlen);
    else
        inet_fill(a, alen, s->rip, s->rport);
    return 0;
}

static int sim_lookup(const char *name, char *ip, size_t n)
{
    sim_net *net = weft__sim;
    if (strcmp(name, "localhost") == 0) {
        snprintf(ip, n, "127.0.0.1");
        return 0;
    }
    for (int i = 0; net && i < net->nhosts; i++)
        if (strcmp(net->hosts[i]->name, name) == 0)
            return weft_sim_host_addr(net->hosts[i], ip, n) == 0 ? 0 : -1;
    errno = ENOENT;
    return -1;
}

const weft__netsys weft__sim_netsys = {
    .name = "sim",
    .read = sim_read,
    .recv = sim_recv,
    .readv = sim_readv,
    .recvfrom = sim_recvfrom,
    .accept4 = sim_accept4,
    .send = sim_send,
    .write = sim_write,
    .sendmsg = sim_sendmsg,
    .writev = sim_writev,
    .sendto = sim_sendto,
    .socket = sim_socket,
    .bind = sim_bind,
    .listen = sim_listen,
    .connect = sim_connect,
    .shutdown = sim_shutdown,
    .close = sim_close,
    .getsockopt = sim_getsockopt,
    .setsockopt = sim_setsockopt,
    .getsockname = sim_getsockname,
    .getpeername = sim_getpeername,
    .lookup = sim_lookup,
    .poller = &weft__sim_poller,
};

/* ---- arrival ---- */

static bool rx_append(sim_sock *s, const char *data, size_t n)
{
    if (s->rxlen + n > s->rxcap) {
        size_t cap = s->rxcap ? s->rxcap : 1024;
        while (cap < s->rxlen + n)
            cap *= 2;
        char *r = weft__realloc(s->rx, cap);
        if (!r)
            return false;
        s->rx = r;
        s->rxcap = cap;
    }
    memcpy(s->rx + s->rxlen, data, n);
    s->rxlen += n;
    return true;
}

/* A SYN reached its host: a connection in the listener's queue, or a
 * reset if nothing listens or the queue is full. */
static void arrive_syn(sim_pkt *p)
{
    sim_sock *l = sock_bound(p->dst, p->dport, SOCK_STREAM);
    if (!l || l->state != S_LISTEN || l->nacq >= l->backlog) {
        reply_rst(p);
        return;
    }
    if (l->nacq == l->capacq) {
        int cap = l->capacq ? l->capacq * 2 : 8;
        sim_sock **q = weft__realloc(l->acq, (size_t)cap * sizeof(*q));
        if (!q)
            return; /* lost: the client's deadline decides */
        l->acq = q;
        l->capacq = cap;
    }
    sim_sock *c = sock_make(weft__sim->hosts[p->dst], SOCK_STREAM);
    if (!c)
        return;
    c->lip = p->dip;
    c->lport = p->dport;
    c->rip = p->sip;
    c->rport = p->sport;
    c->peer = p->from;
    c->state = S_OPEN;
    l->acq[l->nacq++] = c;
    edge(l, WEFT__FD_READ);
    stream_signal(c, P_SYNACK);
}

/* A stream packet reached socket s. */
static void arrive_stream(sim_pkt *p, sim_sock *s)
{
    switch (p->kind) {
    case P_SYNACK:
        if (s->state != S_CONNECTING || s->gone) {
            reply_rst(p);
            return;
        }
        s->peer = p->from;
        s->state = S_OPEN;
        edge(s, WEFT__FD_WRITE);
        return;
    case P_DATA:
        if (s->gone || s->rd_shut) {
            reply_rst(p);
            return;
        }
        if (s->reset || !rx_append(s, p->data, p->len))
            return;
        edge(s, WEFT__FD_READ);
        return;
    case P_FIN:
        if (s->gone && s->crashed) { /* the host is back: it knows none */
            reply_rst(p);
            return;
        }
        if (s->gone || s->reset)
            return;
        s->rd_eof = true;
        edge(s, WEFT__FD_READ | WEFT__FD_HUP);
        return;
    case P_RST:
        if (s->gone || s->reset)
            return;
        if (s->state == S_CONNECTING) {
            s->err = ECONNREFUSED;
            s->state = S_CLOSED;
        } else {
            s->err = ECONNRESET;
            s->reset = true;
            s->rxoff = s->rxlen = 0; /* the kernel drops what is unread */
        }
        edge(s, WEFT__FD_READ | WEFT__FD_WRITE | WEFT__FD_HUP);
        return;
    }
}

static void arrive_dgram(sim_pkt *p)
{
    sim_sock *s = sock_bound(p->dst, p->dport, SOCK_DGRAM);
    if (!s) {
        log_pkt("lose", p);
        free(p);
        return;
    }
    dq_push(s, p);
}

static void park(sim_link *l, sim_pkt *p)
{
    log_pkt("park", p);
    pkt_append(&l->parked, &l->ptail, p);
}

/* A stream's segment p reached a crashed host: sent again an RTO later
 * (doubled each time), or, after RTX_MAX tries, its connection times
 * out (ETIMEDOUT), as TCP's retransmissions do. */
static void retransmit(sim_pkt *p)
{
    sim_net *n = weft__sim;
    sim_sock *from = p->from;
    if (p->tries == RTX_MAX) {
        log_pkt("time out", p);
        if (from && !from->gone && !from->reset) {
            from->err = ETIMEDOUT;
            from->reset = true;
            edge(from, WEFT__FD_READ | WEFT__FD_WRITE | WEFT__FD_HUP);
        }
        free(p);
        return;
    }
    log_pkt("retransmit", p);
    p->when = weft__now(n->rt) + (RTX_FIRST << p->tries);
    p->tries++;
    if (!heap_push(n, p))
        free(p);
}

/* p has arrived: the link and the host decide, then the socket. */
static void route(sim_pkt *p)
{
    sim_net *n = weft__sim;
    sim_link *l = &n->links[p->src][p->dst];
    bool lossy = p->kind == P_SYN || p->kind == P_DGRAM;
    if (p->src != p->dst && (l->flags & LINK_HOLD)) {
        park(l, p);
        return;
    }
    if (p->src != p->dst && (l->flags & LINK_PART)) {
        if (!lossy) {
            park(l, p);
            return;
        }
        log_pkt("lose", p);
        free(p);
        return;
    }
    if (n->hosts[p->dst]->down) {
        if (p->kind == P_DATA || p->kind == P_FIN || p->kind == P_SYNACK) {
            retransmit(p);
            return;
        }
        log_pkt("lose", p);
        free(p);
        return;
    }
    log_pkt("deliver", p);
    if (p->kind == P_DGRAM) {
        arrive_dgram(p);
        return;
    }
    if (p->kind == P_SYN)
        arrive_syn(p);
    else if (p->to)
        arrive_stream(p, p->to);
    free(p);
}

void weft__sim_net_fire(weft__timer *t)
{
    WEFT_UNUSED(t);
    sim_net *n = weft__sim;
    int64_t now = weft__now(n->rt);
    while (n->nheap && n->heap[0]->when <= now)
        route(heap_pop(n));
    timer_update(n);
}

void weft__sim_unpark(sim_link *l)
{
    sim_net *n = weft__sim;
    sim_pkt *p = l->parked;
    l->parked = l->ptail = NULL;
    int64_t when = weft__now(n->rt) + 1;
    while (p) {
        sim_pkt *next = p->next;
        p->when = when; /* its seq keeps it in order */
        if (!heap_push(n, p))
            free(p);
        p = next;
    }
    timer_update(n);
}

static void socks_free(sim_sock *s)
{
    while (s) {
        sim_sock *next = s->next;
        for (sim_pkt *p = s->dq, *q; p; p = q) {
            q = p->next;
            free(p);
        }
        free(s->rx);
        free(s->acq);
        free(s);
        s = next;
    }
}

void weft__sim_net_free(sim_net *n)
{
    if (weft__timer_armed(&n->timer))
        weft__wheel_disarm(&n->rt->workers[0].wheel, &n->timer);
    for (size_t i = 0; i < n->nheap; i++)
        free(n->heap[i]);
    free(n->heap);
    for (int a = 0; a < SIM_MAX_HOSTS; a++)
        for (int b = 0; b < SIM_MAX_HOSTS; b++)
            for (sim_pkt *p = n->links[a][b].parked, *q; p; p = q) {
                q = p->next;
                free(p);
            }
    socks_free(n->socks);
    socks_free(n->gone);
    free(n->fds);
    for (int i = 0; i < n->nhosts; i++) {
        free(n->hosts[i]->name);
        free(n->hosts[i]);
    }
    free(n);
}
