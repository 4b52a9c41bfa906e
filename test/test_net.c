/* SPDX-License-Identifier: MIT */
/*
 * Sockets: real TCP, UDP and Unix domain sockets on 127.0.0.1 (and ::1
 * where the host has it). Byte counts and contents are checked exactly;
 * tasks are sequenced with events, never with sleeps. Deadline tests that
 * need real I/O use the monotonic clock and check bounds; the slow-client
 * test, where only time passes, uses the virtual clock and exact times.
 * Every test runs through net_run, which checks that /proc/self/fd holds
 * the same descriptors after the runtime as before it.
 */
#include "t.h"
#include "io/io.h"
#include "sched/poller.h"
#include "weft.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Short deadlines for waits that must time out (real time). */
#define DL (50 * WEFT_MSEC)
/* How late a timed-out wait may return (sanitizers, a busy machine). */
#define SLACK (5 * WEFT_SEC)
#ifndef RCVBUF
#define RCVBUF 65536
#endif

/* ======================= descriptors ================================== */

#define FDS_MAX 4096

typedef struct fdset {
    int n;
    int fd[FDS_MAX];
} fdset;

static int int_cmp(const void *a, const void *b)
{
    return *(const int *)a - *(const int *)b;
}

static void fds_open(fdset *s)
{
    DIR *d = opendir("/proc/self/fd");
    ASSERT(d != NULL);
    struct dirent *e;
    s->n = 0;
    while ((e = readdir(d)) != NULL) {
        int fd = atoi(e->d_name);
        if (e->d_name[0] == '.' || fd == dirfd(d))
            continue;
        ASSERT(s->n < FDS_MAX);
        s->fd[s->n++] = fd;
    }
    closedir(d);
    qsort(s->fd, (size_t)s->n, sizeof(int), int_cmp);
}

static void fds_print(const char *what, const fdset *s)
{
    fprintf(stderr, "%s:", what);
    for (int i = 0; i < s->n; i++) {
        char path[64], target[256];
        snprintf(path, sizeof path, "/proc/self/fd/%d", s->fd[i]);
        ssize_t n = readlink(path, target, sizeof target - 1);
        target[n > 0 ? n : 0] = '\0';
        fprintf(stderr, " %d(%s)", s->fd[i], target);
    }
    fprintf(stderr, "\n");
}

static void fds_same(const fdset *before, const fdset *after)
{
    bool same =
        before->n == after->n &&
        memcmp(before->fd, after->fd, (size_t)before->n * sizeof(int)) == 0;
    if (!same) {
        fds_print("before", before);
        fds_print("after", after);
        T_FAIL("descriptors leaked or lost");
    }
}

/* Descriptors open now (from a task too: it reads /proc). */
static int fd_count(void)
{
    static fdset s;
    fds_open(&s);
    return s.n;
}

static fdset fds_before, fds_after;

/* Runs fn(arg) in a runtime and checks that it returned 0 and left no
 * descriptor behind. */
static void net_run_cfg(const weft_config *cfg, weft_fn fn, void *arg)
{
    fds_open(&fds_before);
    ASSERT_EQ(weft_run(cfg, fn, arg), 0);
    fds_open(&fds_after);
    fds_same(&fds_before, &fds_after);
}

static void net_run(int workers, weft_clock_kind clock, weft_fn fn, void *arg)
{
    weft_config cfg = {.workers = workers, .clock = clock};
    net_run_cfg(&cfg, fn, arg);
}

/* ======================= helpers ====================================== */

static unsigned char pat(unsigned id, size_t i)
{
    return (unsigned char)(i * 131u + id * 7u + (i >> 9));
}

static void pat_fill(unsigned id, size_t off, unsigned char *buf, size_t n)
{
    for (size_t i = 0; i < n; i++)
        buf[i] = pat(id, off + i);
}

static void pat_check(unsigned id, size_t off, const unsigned char *buf,
                      size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (buf[i] != pat(id, off + i))
            T_FAIL("stream %u: byte %zu is %d, not %d", id, off + i, buf[i],
                   pat(id, off + i));
}

static void set_opt(int fd, int level, int name, int value)
{
    ASSERT_EQ(setsockopt(fd, level, name, &value, sizeof value), 0);
}

static void assert_waited(weft_time t0, int64_t d)
{
    int64_t waited = weft_now() - t0;
    ASSERT(waited >= d);
    ASSERT(waited < d + SLACK);
}

static int listen_v4(int backlog)
{
    int lfd = weft_tcp_listen("127.0.0.1", 0, backlog, 0);
    ASSERT(lfd >= 0);
    return lfd;
}

static struct sockaddr_in addr_v4(int port)
{
    struct sockaddr_in sin = {.sin_family = AF_INET,
                              .sin_port = htons((uint16_t)port)};
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return sin;
}

/* A connected TCP pair through the listener lfd on 127.0.0.1: *a
 * connected, *b accepted. */
static void tcp_pair_on(int lfd, int *a, int *b)
{
    *a = weft_tcp_connect("127.0.0.1", weft_local_port(lfd), WEFT_NEVER);
    ASSERT(*a >= 0);
    struct sockaddr_storage peer;
    *b = weft_accept(lfd, &peer, WEFT_NEVER);
    ASSERT(*b >= 0);
    ASSERT_EQ(peer.ss_family, AF_INET);
}

static void tcp_pair(int *a, int *b)
{
    int lfd = listen_v4(8);
    tcp_pair_on(lfd, a, b);
    ASSERT_EQ(weft_close(lfd), 0);
}

static void close2(int a, int b)
{
    ASSERT_EQ(weft_close(a), 0);
    ASSERT_EQ(weft_close(b), 0);
}

/* Shrinks the kernel's buffers, so that writes fill them quickly. (A
 * receive buffer much smaller than loopback's 64 KiB segments makes TCP
 * drop and resend them, 200 ms a time: keep that one larger.) */
static void small_buffers(int wfd, int rfd)
{
    set_opt(wfd, SOL_SOCKET, SO_SNDBUF, 4096);
    set_opt(rfd, SOL_SOCKET, SO_RCVBUF, RCVBUF);
}

/* Reads fd to its end; checks the bytes against stream id. Returns the
 * count. */
static size_t drain(int fd, unsigned id)
{
    unsigned char buf[4096];
    size_t got = 0;
    ptrdiff_t n;
    while ((n = weft_read(fd, buf, sizeof buf, WEFT_NEVER)) > 0) {
        pat_check(id, got, buf, (size_t)n);
        got += (size_t)n;
    }
    ASSERT_EQ(n, 0);
    return got;
}

static bool have_ipv6(void)
{
    int fd = weft_tcp_listen("::1", 0, 1, 0);
    if (fd < 0) {
        printf("no IPv6 loopback here (%s): IPv6 part skipped\n",
               weft_strerror(fd));
        return false;
    }
    ASSERT_EQ(weft_close(fd), 0);
    return true;
}

/* ======================= an echo server =============================== */

struct echo_srv {
    int lfd;
    weft_scope *scope; /* the acceptor and one handler per connection */
    atomic_long bytes; /* echoed */
    atomic_int accepted;
    atomic_int on_worker[4]; /* handlers and client writers run there */
};

struct echo_conn {
    struct echo_srv *srv;
    int fd;
};

static int echo_handler(void *arg)
{
    struct echo_conn c = *(struct echo_conn *)arg;
    free(arg);
    atomic_fetch_add(&c.srv->on_worker[weft_worker_id() & 3], 1);
    unsigned char buf[2048];
    ptrdiff_t n;
    while ((n = weft_read(c.fd, buf, sizeof buf, WEFT_NEVER)) > 0) {
        ASSERT_EQ(weft_write_all(c.fd, buf, (size_t)n, NULL, WEFT_NEVER), 0);
        atomic_fetch_add(&c.srv->bytes, n);
    }
    ASSERT_EQ(n, 0);
    ASSERT_EQ(weft_close(c.fd), 0);
    return 0;
}

static int echo_acceptor(void *arg)
{
    struct echo_srv *s = arg;
    for (;;) {
        int fd = weft_accept(s->lfd, NULL, WEFT_NEVER);
        if (fd == -ECANCELED)
            return 0;
        ASSERT(fd >= 0);
        int k = atomic_fetch_add(&s->accepted, 1);
        struct echo_conn *c = malloc(sizeof(*c));
        ASSERT(c != NULL);
        *c = (struct echo_conn){s, fd};
        /* Handlers on every worker in turn: I/O from all their reactors. */
        weft_spawn_opts o = {.worker = k % weft_workers() + 1};
        ASSERT(weft_spawn_ex(s->scope, echo_handler, c, &o) >= 0);
    }
}

/* Opens the server's scope (the caller's current scope from now on) and
 * starts accepting on lfd. */
static void echo_start(struct echo_srv *s, int lfd)
{
    memset(s, 0, sizeof(*s));
    s->lfd = lfd;
    s->scope = scope_open();
    spawn(echo_acceptor, s);
}

/* Cancels the acceptor (every handler has finished: its client read the
 * end of the stream) and closes the listener. */
static void echo_stop(struct echo_srv *s)
{
    scope_cancel_end(s->scope);
    ASSERT_EQ(weft_close(s->lfd), 0);
}

/* ---- echo clients: a writer and a reader task per connection ---- */

struct echo_cfg {
    const char *host; /* TCP: host and port */
    int port;
    const char *path; /* or a Unix socket */
    int nconn;
    size_t bytes; /* per connection, each way */
};

struct echo_cli {
    const struct echo_cfg *cfg;
    struct echo_srv *srv;
    unsigned id;
    int fd;
};

/* Writes cfg->bytes in random pieces, with write-some and write-all. */
static int echo_writer(void *arg)
{
    struct echo_cli *c = arg;
    atomic_fetch_add(&c->srv->on_worker[weft_worker_id() & 3], 1);
    uint64_t rng = c->id;
    unsigned char buf[8192];
    size_t off = 0, total = c->cfg->bytes;
    while (off < total) {
        size_t n = 1 + rnd(&rng) % sizeof buf;
        if (n > total - off)
            n = total - off;
        pat_fill(c->id, off, buf, n);
        if (rnd(&rng) % 2) {
            ASSERT_EQ(weft_write_all(c->fd, buf, n, NULL, WEFT_NEVER), 0);
            off += n;
        } else {
            ptrdiff_t w = weft_write(c->fd, buf, n, WEFT_NEVER);
            ASSERT(w > 0 && (size_t)w <= n);
            off += (size_t)w;
        }
    }
    ASSERT_EQ(weft_shutdown(c->fd, SHUT_WR), 0);
    return 0;
}

static int echo_client(void *arg)
{
    struct echo_cli *c = arg;
    const struct echo_cfg *cfg = c->cfg;
    c->fd = cfg->path ? weft_unix_connect(cfg->path, WEFT_NEVER)
                      : weft_tcp_connect(cfg->host, cfg->port, WEFT_NEVER);
    ASSERT(c->fd >= 0);
    weft_scope *s = scope_open();
    spawn(echo_writer, c);
    ASSERT_EQ(drain(c->fd, c->id), cfg->bytes);
    scope_end(s);
    ASSERT_EQ(weft_close(c->fd), 0);
    return 0;
}

/* Serves cfg->nconn echo clients on lfd at once; checks every byte. */
static void echo_serve(struct echo_srv *srv, int lfd, struct echo_cfg *cfg)
{
    struct echo_cli *cli = calloc((size_t)cfg->nconn, sizeof(*cli));
    ASSERT(cli != NULL);
    echo_start(srv, lfd);
    weft_scope *s = scope_open();
    for (int i = 0; i < cfg->nconn; i++) {
        cli[i] = (struct echo_cli){cfg, srv, (unsigned)i + 1, -1};
        spawn(echo_client, &cli[i]);
    }
    scope_end(s);
    ASSERT_EQ(atomic_load(&srv->accepted), cfg->nconn);
    ASSERT_EQ(atomic_load(&srv->bytes), (long)cfg->bytes * cfg->nconn);
    echo_stop(srv);
    free(cli);
}

static struct echo_srv echo_srv;

static int echo_tcp_root(void *arg)
{
    struct echo_cfg *cfg = arg;
    int lfd = weft_tcp_listen(cfg->host, 0, 128, 0);
    ASSERT(lfd >= 0);
    cfg->port = weft_local_port(lfd);
    ASSERT(cfg->port > 0);
    echo_serve(&echo_srv, lfd, cfg);
    return 0;
}

static int workers_used(const struct echo_srv *s)
{
    int used = 0;
    for (int i = 0; i < 4; i++)
        used += atomic_load(&s->on_worker[i]) > 0;
    return used;
}

/* Echo over nconn connections at once with `workers` workers, the
 * handlers spawned on each worker in turn. */
static void echo_many(int workers)
{
    struct echo_cfg cfg = {.host = "127.0.0.1",
                           .nconn = T_LIVE(100) < 32 ? 32 : (int)T_LIVE(100),
                           .bytes = (size_t)T_SCALE(64 * 1024)};
    net_run(workers, WEFT_CLOCK_MONOTONIC, echo_tcp_root, &cfg);
    ASSERT_EQ(workers_used(&echo_srv), workers);
}

TEST(echo_one_worker)
{
    echo_many(1);
}

TEST(echo_two_workers)
{
    echo_many(2);
}

TEST(echo_four_workers)
{
    echo_many(4);
}

static int ipv6_root(void *arg)
{
    (void)arg;
    if (!have_ipv6())
        return 0;
    struct echo_cfg cfg = {.host = "::1",
                           .nconn = (int)T_LIVE(20),
                           .bytes = (size_t)T_SCALE(16 * 1024)};
    ASSERT_EQ(echo_tcp_root(&cfg), 0);
    /* A listener on every address (NULL) takes IPv4 and IPv6 alike. */
    int lfd = weft_tcp_listen(NULL, 0, 8, 0);
    ASSERT(lfd >= 0);
    int port = weft_local_port(lfd);
    const char *hosts[] = {"127.0.0.1", "::1"};
    for (int i = 0; i < 2; i++) {
        int c = weft_tcp_connect(hosts[i], port, WEFT_NEVER);
        ASSERT(c >= 0);
        struct sockaddr_storage peer;
        int s = weft_accept(lfd, &peer, WEFT_NEVER);
        ASSERT(s >= 0);
        ASSERT_EQ(peer.ss_family, AF_INET6); /* v4 arrives mapped */
        ASSERT_EQ(weft_write_all(c, "ping", 4, NULL, WEFT_NEVER), 0);
        char buf[4];
        ASSERT_EQ(weft_read_exact(s, buf, 4, NULL, WEFT_NEVER), 0);
        ASSERT(memcmp(buf, "ping", 4) == 0);
        close2(c, s);
    }
    ASSERT_EQ(weft_close(lfd), 0);
    return 0;
}

TEST(echo_ipv6_and_dual_stack)
{
    net_run(2, WEFT_CLOCK_MONOTONIC, ipv6_root, NULL);
}

/* ================= 10,000 connections on one worker ==================== */

/* The server runs here; the clients run in a child process (its own
 * runtime, one worker), so that each side needs one descriptor per
 * connection. Every server handler holds its connection until all of
 * them are open: the count proves they were open at once. */
struct mass {
    int lfd, port, n;
    weft_time deadline;
    weft_event all_in; /* every connection is open */
    atomic_int live;
    weft_sem inflight; /* client side: connects not yet greeted */
};

static struct mass mass;

static int mass_handler(void *arg)
{
    int fd = (int)(intptr_t)arg;
    uint32_t id, back;
    ASSERT_EQ(weft_write_all(fd, "G", 1, NULL, mass.deadline), 0);
    ASSERT_EQ(weft_read_exact(fd, &id, 4, NULL, mass.deadline), 0);
    if (atomic_fetch_add(&mass.live, 1) + 1 == mass.n)
        ASSERT_EQ(weft_event_set(&mass.all_in), 0);
    ASSERT_EQ(weft_event_wait_until(&mass.all_in, mass.deadline), 0);
    back = ~id;
    ASSERT_EQ(weft_write_all(fd, &back, 4, NULL, mass.deadline), 0);
    char c;
    ASSERT_EQ(weft_read(fd, &c, 1, mass.deadline), 0);
    ASSERT_EQ(weft_close(fd), 0);
    return 0;
}

static int mass_server(void *arg)
{
    (void)arg;
    mass.deadline = weft_now() + 100 * WEFT_SEC;
    weft_scope *s = scope_open();
    for (int i = 0; i < mass.n; i++) {
        int fd = weft_accept(mass.lfd, NULL, mass.deadline);
        ASSERT(fd >= 0);
        spawn(mass_handler, (void *)(intptr_t)fd);
    }
    scope_end(s);
    ASSERT_EQ(atomic_load(&mass.live), mass.n);
    return 0;
}

static int mass_client(void *arg)
{
    uint32_t id = (uint32_t)(uintptr_t)arg, back;
    int fd = weft_tcp_connect("127.0.0.1", mass.port, mass.deadline);
    ASSERT(fd >= 0);
    char g;
    ASSERT_EQ(weft_read_exact(fd, &g, 1, NULL, mass.deadline), 0);
    ASSERT_EQ(g, 'G');
    /* Accepted: let another connect go (the backlog stays short). */
    ASSERT_EQ(weft_sem_release(&mass.inflight, 1), 0);
    ASSERT_EQ(weft_write_all(fd, &id, 4, NULL, mass.deadline), 0);
    ASSERT_EQ(weft_read_exact(fd, &back, 4, NULL, mass.deadline), 0);
    ASSERT_EQ(back, ~id);
    ASSERT_EQ(weft_close(fd), 0);
    return 0;
}

static int mass_clients(void *arg)
{
    (void)arg;
    mass.deadline = weft_now() + 100 * WEFT_SEC;
    ASSERT_EQ(weft_sem_init(&mass.inflight, 256), 0);
    weft_scope *s = scope_open();
    for (int i = 0; i < mass.n; i++) {
        ASSERT_EQ(weft_sem_acquire(&mass.inflight, 1), 0);
        spawn(mass_client, (void *)(uintptr_t)i);
    }
    scope_end(s);
    return 0;
}

/* Raises the soft descriptor limit as far as the hard one allows; returns
 * how many connections each side can then hold. */
static int raise_nofile(int want)
{
    struct rlimit rl;
    ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &rl), 0);
    rlim_t need = (rlim_t)want + 64;
    rlim_t target = rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= need
                        ? need
                        : rl.rlim_max;
    if (rl.rlim_cur < target) {
        rl.rlim_cur = target;
        ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &rl), 0);
    }
    if (target < need) {
        printf("RLIMIT_NOFILE's hard limit is %llu: %llu connections, not "
               "%d\n",
               (unsigned long long)rl.rlim_max,
               (unsigned long long)(target - 64), want);
        return (int)(target - 64);
    }
    return want;
}

TEST(ten_thousand_connections_one_worker)
{
    int want = (int)T_LIVE(10000);
    if (want < 10000)
        printf("scaled (WEFT_TEST_SCALE or TSan's task cap): %d "
               "connections\n",
               want);
    mass.n = raise_nofile(want);
    fds_open(&fds_before);
    mass.lfd = weft_tcp_listen("127.0.0.1", 0, 4096, 0);
    ASSERT(mass.lfd >= 0);
    mass.port = weft_local_port(mass.lfd);
    fflush(NULL);
    pid_t child = fork();
    ASSERT(child >= 0);
    if (child == 0) {
        close(mass.lfd);
        _exit(t_run_mono(1, mass_clients, NULL) == 0 ? 0 : 1);
    }
    int rc = t_run_mono(1, mass_server, NULL);
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    ASSERT_EQ(rc, 0);
    ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    ASSERT_EQ(weft_close(mass.lfd), 0);
    fds_open(&fds_after);
    fds_same(&fds_before, &fds_after);
    printf("%d connections open at once on one worker\n", mass.n);
}

/* ======================= streams ====================================== */

/* read_exact, write_all, readv, writev, and the end of the stream. */
static int stream_root(void *arg)
{
    (void)arg;
    int a, b;
    tcp_pair(&a, &b);
    unsigned char out[300], in[300];
    pat_fill(5, 0, out, sizeof out);
    size_t done = 99;
    ASSERT_EQ(weft_write_all(a, out, 100, &done, WEFT_NEVER), 0);
    ASSERT_EQ(done, 100);
    struct iovec wv[3] = {{out + 100, 50}, {out + 150, 0}, {out + 150, 150}};
    ASSERT_EQ(weft_writev(a, wv, 3, WEFT_NEVER), 200);
    ASSERT_EQ(weft_read_exact(b, in, 120, &done, WEFT_NEVER), 0);
    ASSERT_EQ(done, 120);
    pat_check(5, 0, in, 120);
    /* readv fills its buffers in order, as far as data goes. */
    struct iovec rv[2] = {{in + 120, 30}, {in + 150, 200}};
    size_t got = 0;
    while (got < 180) {
        ptrdiff_t n = weft_readv(b, rv, 2, WEFT_NEVER);
        ASSERT(n > 0);
        got += (size_t)n;
        for (size_t skip = (size_t)n; skip > 0;) { /* advance the iovecs */
            struct iovec *v = rv[0].iov_len ? &rv[0] : &rv[1];
            size_t k = skip < v->iov_len ? skip : v->iov_len;
            v->iov_base = (char *)v->iov_base + k;
            v->iov_len -= k;
            skip -= k;
        }
    }
    ASSERT_EQ(got, 180);
    pat_check(5, 0, in, 300);
    /* Zero-length calls complete at once. */
    ASSERT_EQ(weft_read_exact(b, in, 0, &done, WEFT_NEVER), 0);
    ASSERT_EQ(done, 0);
    ASSERT_EQ(weft_write_all(a, out, 0, NULL, WEFT_NEVER), 0);
    ASSERT_EQ(weft_write(a, out, 0, WEFT_NEVER), 0);
    close2(a, b);
    return 0;
}

TEST(read_exact_write_all_readv_writev)
{
    net_run(1, WEFT_CLOCK_MONOTONIC, stream_root, NULL);
}

/* Pipes are descriptors too: write falls back from send to write. */
static int pipe_root(void *arg)
{
    (void)arg;
    int p[2];
    ASSERT_EQ(pipe2(p, O_NONBLOCK | O_CLOEXEC), 0);
    ASSERT_EQ(weft_write_all(p[1], "abc", 3, NULL, WEFT_NEVER), 0);
    struct iovec v = {"de", 2};
    ASSERT_EQ(weft_writev(p[1], &v, 1, WEFT_NEVER), 2);
    char buf[8];
    ASSERT_EQ(weft_read_exact(p[0], buf, 5, NULL, WEFT_NEVER), 0);
    ASSERT(memcmp(buf, "abcde", 5) == 0);
    ASSERT_EQ(weft_close(p[1]), 0);
    ASSERT_EQ(weft_read(p[0], buf, sizeof buf, WEFT_NEVER), 0);
    ASSERT_EQ(weft_close(p[0]), 0);
    return 0;
}

TEST(pipes)
{
    net_run(1, WEFT_CLOCK_MONOTONIC, pipe_root, NULL);
}

/* ---- short reads and writes: small kernel buffers, large transfers --- */

struct shorts {
    int fd;
    size_t total;
    long short_reads;
};

static int short_reader(void *arg)
{
    struct shorts *s = arg;
    static unsigned char buf[64 * 1024];
    uint64_t rng = 7;
    size_t got = 0;
    for (;;) {
        size_t want = 1 + rnd(&rng) % sizeof buf;
        ptrdiff_t n = weft_read(s->fd, buf, want, WEFT_NEVER);
        ASSERT(n >= 0);
        if (n == 0)
            break;
        s->short_reads += (size_t)n < want;
        pat_check(9, got, buf, (size_t)n);
        got += (size_t)n;
    }
    ASSERT_EQ(got, s->total);
    return 0;
}

static int shorts_root(void *arg)
{
    (void)arg;
    int a, b;
    tcp_pair(&a, &b);
    small_buffers(a, b);
    struct shorts s = {.fd = b, .total = (size_t)T_SCALE(4 << 20)};
    unsigned char *big = malloc(s.total);
    ASSERT(big != NULL);
    pat_fill(9, 0, big, s.total);
    /* Nobody reads yet: the kernel takes a part, write-some says how much. */
    ptrdiff_t w = weft_write(a, big, s.total, WEFT_NEVER);
    ASSERT(w > 0 && (size_t)w < s.total);
    weft_scope *sc = scope_open();
    spawn(short_reader, &s);
    size_t done = 0;
    ASSERT_EQ(
        weft_write_all(a, big + w, s.total - (size_t)w, &done, WEFT_NEVER), 0);
    ASSERT_EQ(done, s.total - (size_t)w);
    ASSERT_EQ(weft_shutdown(a, SHUT_WR), 0);
    scope_end(sc);
    ASSERT(s.short_reads > 0);
    free(big);
    close2(a, b);
    return 0;
}

TEST(short_reads_and_writes)
{
    net_run(1, WEFT_CLOCK_MONOTONIC, shorts_root, NULL);
    net_run(2, WEFT_CLOCK_MONOTONIC, shorts_root, NULL);
}

/* ======================= faults ======================================= */

struct blk {
    weft_event ready; /* set just before the blocking call */
    int fd;
    int rc;
    size_t done;
    unsigned char *buf;
    size_t n;
    struct sockaddr_storage addr;
    size_t alen;
    const char *path;
};

/* With one worker, a task that sets `ready` and then blocks is parked by
 * the time the task waiting for `ready` runs. */
static int blk_read(void *arg)
{
    struct blk *b = arg;
    weft_event_set(&b->ready);
    b->rc = (int)weft_read(b->fd, b->buf, b->n, WEFT_NEVER);
    return 0;
}

static int blk_read_exact(void *arg)
{
    struct blk *b = arg;
    weft_event_set(&b->ready);
    b->rc = weft_read_exact(b->fd, b->buf, b->n, &b->done, WEFT_NEVER);
    return 0;
}

static int blk_write_all(void *arg)
{
    struct blk *b = arg;
    weft_event_set(&b->ready);
    b->rc = weft_write_all(b->fd, b->buf, b->n, &b->done, WEFT_NEVER);
    return 0;
}

static int blk_accept(void *arg)
{
    struct blk *b = arg;
    weft_event_set(&b->ready);
    b->rc = weft_accept(b->fd, NULL, WEFT_NEVER);
    return 0;
}

static int blk_connect(void *arg)
{
    struct blk *b = arg;
    weft_event_set(&b->ready);
    b->rc = b->path ? weft_unix_connect(b->path, WEFT_NEVER)
                    : weft_tcp_connect_addr((struct sockaddr *)&b->addr,
                                            b->alen, WEFT_NEVER);
    return 0;
}

static int blk_recvfrom(void *arg)
{
    struct blk *b = arg;
    weft_event_set(&b->ready);
    b->rc = (int)weft_recvfrom(b->fd, b->buf, b->n, NULL, WEFT_NEVER);
    return 0;
}

typedef void (*poke_fn)(struct blk *b, weft_scope *s);

static void poke_cancel(struct blk *b, weft_scope *s)
{
    (void)b;
    ASSERT_EQ(weft_scope_cancel(s), 0);
}

static void poke_close(struct blk *b, weft_scope *s)
{
    (void)s;
    ASSERT_EQ(weft_close(b->fd), 0);
}

/* Runs fn(b) in a scope of its own and, once it blocks, pokes it: cancels
 * that scope, weft_close()s b->fd, or does what else wakes it. */
static void blocked(weft_fn fn, struct blk *b, poke_fn poke)
{
    weft_scope_opts o = {.policy = WEFT_COLLECT};
    weft_scope *s;
    ASSERT_EQ(weft_event_reset(&b->ready), 0);
    b->rc = 1;
    b->done = 0;
    ASSERT_EQ(weft_scope_open(&s, &o), 0);
    spawn(fn, b);
    ASSERT_EQ(weft_event_wait(&b->ready), 0);
    ASSERT_EQ(b->rc, 1); /* still blocked */
    poke(b, s);
    ASSERT_EQ(weft_scope_join(s), poke == poke_cancel ? -ECANCELED : 0);
    ASSERT_EQ(weft_scope_free(s), 0);
}

/* ---- a peer's reset: -ECONNRESET, then -EPIPE, and no SIGPIPE ---- */

struct reset {
    struct blk k;
    int peer;
};

static void reset_close(int fd)
{
    struct linger l = {.l_onoff = 1, .l_linger = 0};
    ASSERT_EQ(setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l), 0);
    ASSERT_EQ(weft_close(fd), 0);
}

static void poke_reset(struct blk *b, weft_scope *s)
{
    (void)s;
    reset_close(((struct reset *)b)->peer);
}

static int reset_root(void *arg)
{
    (void)arg;
    unsigned char buf[16];
    /* A blocked read is woken by the reset. */
    struct reset r = {.k = {.buf = buf, .n = sizeof buf}};
    tcp_pair(&r.peer, &r.k.fd);
    blocked(blk_read, &r.k, poke_reset);
    ASSERT_EQ(r.k.rc, -ECONNRESET);
    /* The connection is gone: writing says so, and SIGPIPE (left at its
     * default, which kills) is not raised. */
    ptrdiff_t w = weft_write(r.k.fd, "x", 1, WEFT_NEVER);
    ASSERT(w == -EPIPE || w == -ECONNRESET);
    ASSERT_EQ(weft_close(r.k.fd), 0);
    /* A writer in the middle of a large write_all: the reset ends it, and
     * done counts what went before. */
    int a, b;
    tcp_pair(&a, &b);
    small_buffers(a, b);
    size_t n = 8 << 20;
    r.k = (struct blk){.fd = a, .buf = calloc(1, n), .n = n};
    r.peer = b;
    ASSERT(r.k.buf != NULL);
    blocked(blk_write_all, &r.k, poke_reset);
    ASSERT(r.k.rc == -ECONNRESET || r.k.rc == -EPIPE);
    ASSERT(r.k.done > 0 && r.k.done < n);
    free(r.k.buf);
    ASSERT_EQ(weft_close(a), 0);
    return 0;
}

TEST(peer_reset)
{
    signal(SIGPIPE, SIG_DFL);
    net_run(1, WEFT_CLOCK_MONOTONIC, reset_root, NULL);
}

/* ---- half-close: the reader sees the end, the other way still works --- */

static void poke_shut(struct blk *b, weft_scope *s)
{
    (void)s;
    ASSERT_EQ(weft_shutdown(((struct reset *)b)->peer, SHUT_WR), 0);
}

static void poke_shut_rd(struct blk *b, weft_scope *s)
{
    (void)s;
    ASSERT_EQ(weft_shutdown(b->fd, SHUT_RD), 0);
}

static int half_close_root(void *arg)
{
    (void)arg;
    int a, b;
    tcp_pair(&a, &b);
    char buf[8];
    ASSERT_EQ(weft_write_all(a, "hello", 5, NULL, WEFT_NEVER), 0);
    ASSERT_EQ(weft_shutdown(a, SHUT_WR), 0);
    ASSERT_EQ(weft_read_exact(b, buf, 5, NULL, WEFT_NEVER), 0);
    ASSERT(memcmp(buf, "hello", 5) == 0);
    ASSERT_EQ(weft_read(b, buf, sizeof buf, WEFT_NEVER), 0);
    ASSERT_EQ(weft_read(b, buf, sizeof buf, WEFT_NEVER), 0); /* it stays */
    size_t done = 9;
    ASSERT_EQ(weft_read_exact(b, buf, 4, &done, WEFT_NEVER), -EPIPE);
    ASSERT_EQ(done, 0);
    /* b can still write, and a can still read. */
    ASSERT_EQ(weft_write_all(b, "world", 5, NULL, WEFT_NEVER), 0);
    ASSERT_EQ(weft_read_exact(a, buf, 5, NULL, WEFT_NEVER), 0);
    ASSERT(memcmp(buf, "world", 5) == 0);
    /* a shut its writing side: writing there fails, without SIGPIPE. */
    ASSERT_EQ(weft_write(a, "x", 1, WEFT_NEVER), -EPIPE);
    /* The end of the stream in the middle of read_exact: -EPIPE, done. */
    ASSERT_EQ(weft_write_all(b, "abc", 3, NULL, WEFT_NEVER), 0);
    ASSERT_EQ(weft_shutdown(b, SHUT_WR), 0);
    ASSERT_EQ(weft_read_exact(a, buf, 8, &done, WEFT_NEVER), -EPIPE);
    ASSERT_EQ(done, 3);
    ASSERT(memcmp(buf, "abc", 3) == 0);
    close2(a, b);
    /* A reader blocked when the peer shuts down wakes with the end; so
     * does one whose own side is shut down for reading. */
    struct reset r = {.k = {.buf = (unsigned char *)buf, .n = sizeof buf}};
    tcp_pair(&r.peer, &r.k.fd);
    blocked(blk_read, &r.k, poke_shut);
    ASSERT_EQ(r.k.rc, 0);
    close2(r.peer, r.k.fd);
    tcp_pair(&r.peer, &r.k.fd);
    blocked(blk_read, &r.k, poke_shut_rd);
    ASSERT_EQ(r.k.rc, 0);
    close2(r.peer, r.k.fd);
    return 0;
}

TEST(half_close)
{
    signal(SIGPIPE, SIG_DFL);
    net_run(1, WEFT_CLOCK_MONOTONIC, half_close_root, NULL);
}

/* ---- EINTR: signals at the worker while its tasks wait on sockets ---- */

static atomic_int eintr_caught;

static void on_usr1(int sig)
{
    (void)sig;
    atomic_fetch_add(&eintr_caught, 1);
}

struct eintr {
    int fd; /* the thread's end, blocking */
    pthread_t worker;
    size_t total;
    int sent;
    weft_event done;
};

/* Signals the worker thread (and the process) between short pauses, in
 * which the worker has nothing to do but wait in epoll_wait. */
static void eintr_storm(struct eintr *e)
{
    for (int k = 0; k < 4; k++) {
        if (k % 2)
            ASSERT_EQ(kill(getpid(), SIGUSR1), 0);
        else
            ASSERT_EQ(pthread_kill(e->worker, SIGUSR1), 0);
        e->sent++;
        struct timespec pause = {0, 200 * 1000};
        nanosleep(&pause, NULL);
    }
}

static void *eintr_thread(void *arg)
{
    struct eintr *e = arg;
    unsigned char buf[4096];
    /* Feed the task's read_exact in pieces, signals in between. */
    for (size_t off = 0; off < e->total; off += sizeof buf) {
        eintr_storm(e);
        pat_fill(11, off, buf, sizeof buf);
        for (size_t w = 0; w < sizeof buf;) {
            ssize_t n = write(e->fd, buf + w, sizeof buf - w);
            ASSERT(n > 0 || errno == EINTR);
            w += n > 0 ? (size_t)n : 0;
        }
    }
    /* Then drain the task's write_all slowly, signals in between. */
    for (size_t got = 0; got < e->total;) {
        eintr_storm(e);
        ssize_t n = read(e->fd, buf, sizeof buf);
        ASSERT(n > 0 || errno == EINTR);
        if (n > 0) {
            pat_check(12, got, buf, (size_t)n);
            got += (size_t)n;
        }
    }
    weft_event_set(&e->done);
    return NULL;
}

static int eintr_root(void *arg)
{
    struct eintr *e = arg;
    int a, b;
    tcp_pair(&a, &b);
    small_buffers(a, b);
    small_buffers(b, a);
    ASSERT_EQ(fcntl(b, F_SETFL, 0), 0); /* the thread blocks on it */
    e->fd = b;
    e->worker = pthread_self(); /* one worker: this thread */
    pthread_t th;
    ASSERT_EQ(pthread_create(&th, NULL, eintr_thread, e), 0);
    unsigned char *buf = malloc(e->total);
    ASSERT(buf != NULL);
    size_t done = 0;
    ASSERT_EQ(weft_read_exact(a, buf, e->total, &done, WEFT_NEVER), 0);
    ASSERT_EQ(done, e->total);
    pat_check(11, 0, buf, e->total);
    pat_fill(12, 0, buf, e->total);
    ASSERT_EQ(weft_write_all(a, buf, e->total, &done, WEFT_NEVER), 0);
    ASSERT_EQ(done, e->total);
    ASSERT_EQ(weft_event_wait(&e->done), 0);
    ASSERT_EQ(pthread_join(th, NULL), 0);
    free(buf);
    close2(a, b);
    return 0;
}

TEST(eintr_signals_while_blocked)
{
    struct sigaction sa = {.sa_handler = on_usr1}, old; /* no SA_RESTART */
    sigemptyset(&sa.sa_mask);
    ASSERT_EQ(sigaction(SIGUSR1, &sa, &old), 0);
    static struct eintr e;
    e.total = (size_t)T_SCALE(64) * 4096;
    net_run(1, WEFT_CLOCK_MONOTONIC, eintr_root, &e);
    ASSERT_EQ(sigaction(SIGUSR1, &old, NULL), 0);
    ASSERT(atomic_load(&eintr_caught) > 0);
    ASSERT(atomic_load(&eintr_caught) <= e.sent);
    printf("%d signals caught while tasks waited\n",
           atomic_load(&eintr_caught));
}

/* ---- EMFILE on accept: back off, keep serving, resume ---------------- */

struct emfile {
    int lfd;
    weft_event accepted[2];
    int fds[2]; /* the server's ends */
    int naccepted;
};

/* Accepts two connections (the second one while out of descriptors) and
 * echoes on each. */
static int emfile_acceptor(void *arg)
{
    struct emfile *m = arg;
    for (int i = 0; i < 2; i++) {
        int fd = weft_accept(m->lfd, NULL, WEFT_NEVER);
        ASSERT(fd >= 0);
        m->fds[i] = fd;
        m->naccepted++;
        ASSERT_EQ(weft_event_set(&m->accepted[i]), 0);
    }
    return 0;
}

static int emfile_echo(void *arg)
{
    int fd = (int)(intptr_t)arg;
    char c;
    ptrdiff_t n;
    while ((n = weft_read(fd, &c, 1, WEFT_NEVER)) == 1)
        ASSERT_EQ(weft_write(fd, &c, 1, WEFT_NEVER), 1);
    ASSERT_EQ(n, 0);
    return 0;
}

static void round_trip(int fd, char c)
{
    char back = 0;
    ASSERT_EQ(weft_write(fd, &c, 1, WEFT_NEVER), 1);
    ASSERT_EQ(weft_read(fd, &back, 1, WEFT_NEVER), 1);
    ASSERT_EQ(back, c);
}

/* Lowers RLIMIT_NOFILE and fills every free descriptor below it; returns
 * the descriptors it opened, -1 after the last. */
static int *exhaust_fds(struct rlimit *old)
{
    static fdset now;
    fds_open(&now);
    ASSERT_EQ(getrlimit(RLIMIT_NOFILE, old), 0);
    struct rlimit low = *old;
    low.rlim_cur = (rlim_t)now.fd[now.n - 1] + 4;
    int *ballast = calloc(low.rlim_cur + 1, sizeof(int));
    ASSERT(ballast != NULL);
    ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
    int n = 0;
    while ((ballast[n] = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0)
        n++;
    ASSERT_EQ(errno, EMFILE);
    ASSERT(n > 0);
    return ballast;
}

static int emfile_root(void *arg)
{
    (void)arg;
    struct emfile m = {.lfd = listen_v4(8)};
    struct sockaddr_in sin = addr_v4(weft_local_port(m.lfd));
    weft_scope *srv = scope_open();
    spawn(emfile_acceptor, &m);
    int a =
        weft_tcp_connect_addr((struct sockaddr *)&sin, sizeof sin, WEFT_NEVER);
    ASSERT(a >= 0);
    ASSERT_EQ(weft_event_wait(&m.accepted[0]), 0);
    spawn(emfile_echo, (void *)(intptr_t)m.fds[0]);
    round_trip(a, '1');
    /* B's socket exists; then no descriptor is left for accept. */
    int b = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    ASSERT(b >= 0);
    struct rlimit old;
    int *ballast = exhaust_fds(&old), nb = 0;
    while (ballast[nb] >= 0)
        nb++;
    ASSERT(connect(b, (struct sockaddr *)&sin, sizeof sin) == 0 ||
           errno == EINPROGRESS);
    ASSERT_EQ(weft_fd_wait(b, WEFT_IO_WRITE, WEFT_NEVER), 0);
    /* The acceptor meets EMFILE and backs off: over 300 ms this worker,
     * the only thread running tasks, uses little CPU, and it keeps
     * serving the open connection. */
    int64_t cpu0 = t_thread_cpu_ns();
    weft_time t0 = weft_now();
    round_trip(a, '2');
    ASSERT_EQ(weft_sleep_for(300 * WEFT_MSEC), 0);
    round_trip(a, '3');
    int64_t cpu = t_thread_cpu_ns() - cpu0;
    printf("out of descriptors for %lld ms: %lld us of CPU\n",
           (long long)((weft_now() - t0) / WEFT_MSEC),
           (long long)(cpu / WEFT_USEC));
    ASSERT(cpu < 60 * WEFT_MSEC);
    ASSERT_EQ(m.naccepted, 1);
    /* One descriptor freed: the next try takes B, within 100 ms. */
    ASSERT_EQ(close(ballast[--nb]), 0);
    t0 = weft_now();
    ASSERT_EQ(weft_event_wait_until(&m.accepted[1], t0 + 10 * WEFT_SEC), 0);
    ASSERT(weft_now() - t0 < 2 * WEFT_SEC);
    while (nb > 0)
        ASSERT_EQ(close(ballast[--nb]), 0);
    free(ballast);
    ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &old), 0);
    spawn(emfile_echo, (void *)(intptr_t)m.fds[1]);
    round_trip(b, '4');
    round_trip(a, '5');
    close2(a, b);
    scope_end(srv);
    close2(m.fds[0], m.fds[1]);
    ASSERT_EQ(weft_close(m.lfd), 0);
    return 0;
}

TEST(emfile_on_accept_backs_off)
{
    net_run(1, WEFT_CLOCK_MONOTONIC, emfile_root, NULL);
}

/* ---- a slow client that never finishes: read deadlines (virtual time) */

struct slow {
    int port;
    weft_event sent; /* the client's 3 bytes are in the server's socket */
    weft_event done; /* the server has timed out twice */
};

static int slow_client(void *arg)
{
    struct slow *w = arg;
    struct sockaddr_in sin = addr_v4(w->port);
    int fd =
        weft_tcp_connect_addr((struct sockaddr *)&sin, sizeof sin, WEFT_NEVER);
    ASSERT(fd >= 0);
    /* Loopback delivers before send returns: once the event is set, the
     * server's deadlines only ever wait for what never comes. */
    ASSERT_EQ(weft_write_all(fd, "abc", 3, NULL, WEFT_NEVER), 0);
    ASSERT_EQ(weft_event_set(&w->sent), 0);
    ASSERT_EQ(weft_event_wait(&w->done), 0); /* and nothing more */
    ASSERT_EQ(weft_close(fd), 0);
    return 0;
}

static int slow_root(void *arg)
{
    (void)arg;
    int lfd = listen_v4(8);
    struct slow w = {.port = weft_local_port(lfd)};
    weft_scope *s = scope_open();
    spawn(slow_client, &w);
    int fd = weft_accept(lfd, NULL, WEFT_NEVER);
    ASSERT(fd >= 0);
    ASSERT_EQ(weft_event_wait(&w.sent), 0);
    /* A request of 10 bytes, of which 3 come: the deadline ends it. */
    char buf[10];
    size_t done = 0;
    weft_time t0 = weft_now();
    ASSERT_EQ(weft_read_exact(fd, buf, 10, &done, t0 + 30 * WEFT_SEC),
              -ETIMEDOUT);
    ASSERT_EQ(weft_now(), t0 + 30 * WEFT_SEC);
    ASSERT_EQ(done, 3);
    ASSERT(memcmp(buf, "abc", 3) == 0);
    t0 = weft_now();
    ASSERT_EQ(weft_read(fd, buf, 10, t0 + WEFT_SEC), -ETIMEDOUT);
    ASSERT_EQ(weft_now(), t0 + WEFT_SEC);
    ASSERT_EQ(weft_event_set(&w.done), 0);
    scope_end(s);
    ASSERT_EQ(weft_read(fd, buf, 10, WEFT_NEVER), 0); /* it left */
    close2(fd, lfd);
    return 0;
}

TEST(slow_client_read_deadline)
{
    net_run(1, WEFT_CLOCK_VIRTUAL, slow_root, NULL);
}

/* ======================= deadlines and cancellation ==================== */

/* Connects to the listener at sin (backlog 1) until an attempt times out:
 * the backlog is full and the kernel drops further SYNs. The connections
 * that got in are stored in in[] (at most max). Returns their number. */
static int fill_backlog(const struct sockaddr_in *sin, int *in, int max)
{
    for (int i = 0; i < max; i++) {
        int before = fd_count();
        weft_time t0 = weft_now();
        int fd = weft_tcp_connect_addr((const struct sockaddr *)sin,
                                       sizeof(*sin), t0 + DL);
        if (fd == -ETIMEDOUT) {
            assert_waited(t0, DL);
            ASSERT_EQ(fd_count(), before); /* the socket was closed */
            return i;
        }
        ASSERT(fd >= 0);
        in[i] = fd;
    }
    T_FAIL("the backlog never filled");
}

static void close_all(int *fds, int n)
{
    for (int i = 0; i < n; i++)
        ASSERT_EQ(weft_close(fds[i]), 0);
}

/* The writer's buffers are full: write_all gave up after `done` bytes.
 * Checks the reader gets exactly those, then the end. */
static void check_written(int wfd, int rfd, unsigned id, size_t done)
{
    ASSERT_EQ(weft_shutdown(wfd, SHUT_WR), 0);
    ASSERT_EQ(drain(rfd, id), done);
}

static int deadline_root(void *arg)
{
    (void)arg;
    int a, b;
    tcp_pair(&a, &b);
    unsigned char buf[16];
    size_t done;
    /* read */
    weft_time t0 = weft_now();
    ASSERT_EQ(weft_read(b, buf, sizeof buf, t0 + DL), -ETIMEDOUT);
    assert_waited(t0, DL);
    /* read_exact: 3 of 10 bytes came */
    ASSERT_EQ(weft_write_all(a, "xyz", 3, NULL, WEFT_NEVER), 0);
    t0 = weft_now();
    ASSERT_EQ(weft_read_exact(b, buf, 10, &done, t0 + DL), -ETIMEDOUT);
    assert_waited(t0, DL);
    ASSERT_EQ(done, 3);
    ASSERT(memcmp(buf, "xyz", 3) == 0);
    /* write_all into full buffers */
    small_buffers(a, b);
    size_t n = 16 << 20;
    unsigned char *big = malloc(n);
    ASSERT(big != NULL);
    pat_fill(21, 0, big, n);
    t0 = weft_now();
    ASSERT_EQ(weft_write_all(a, big, n, &done, t0 + DL), -ETIMEDOUT);
    assert_waited(t0, DL);
    ASSERT(done > 0 && done < n);
    check_written(a, b, 21, done);
    free(big);
    close2(a, b);
    /* accept with nobody connecting */
    int lfd = listen_v4(1);
    t0 = weft_now();
    ASSERT_EQ(weft_accept(lfd, NULL, t0 + DL), -ETIMEDOUT);
    assert_waited(t0, DL);
    /* connect to a full backlog (fill_backlog times one out) */
    struct sockaddr_in sin = addr_v4(weft_local_port(lfd));
    int in[16];
    int nin = fill_backlog(&sin, in, 16);
    ASSERT(nin >= 1);
    close_all(in, nin);
    /* the same by name */
    t0 = weft_now();
    int fd = weft_tcp_connect("127.0.0.1", weft_local_port(lfd), t0 + DL);
    if (fd >= 0) /* a slot freed up as the closed ones left the queue */
        ASSERT_EQ(weft_close(fd), 0);
    else
        ASSERT_EQ(fd, -ETIMEDOUT);
    ASSERT_EQ(weft_close(lfd), 0);
    /* a deadline already past lets through what needs no waiting */
    tcp_pair(&a, &b);
    ASSERT_EQ(weft_write(a, "q", 1, 0), 1);
    ASSERT_EQ(weft_read(b, buf, 1, 0), 1);
    ASSERT_EQ(weft_read(b, buf, 1, 0), -ETIMEDOUT);
    close2(a, b);
    return 0;
}

TEST(deadlines_of_blocked_calls)
{
    net_run(1, WEFT_CLOCK_MONOTONIC, deadline_root, NULL);
}

static int cancel_root(void *arg)
{
    (void)arg;
    int a, b;
    unsigned char buf[16];
    tcp_pair(&a, &b);
    /* read-some */
    struct blk k = {.fd = b, .buf = buf, .n = sizeof buf};
    blocked(blk_read, &k, poke_cancel);
    ASSERT_EQ(k.rc, -ECANCELED);
    /* read_exact: 4 of 10 bytes came; they are in buf, the stream goes on
     * after them */
    ASSERT_EQ(weft_write_all(a, "0123", 4, NULL, WEFT_NEVER), 0);
    k.n = 10;
    blocked(blk_read_exact, &k, poke_cancel);
    ASSERT_EQ(k.rc, -ECANCELED);
    ASSERT_EQ(k.done, 4);
    ASSERT(memcmp(buf, "0123", 4) == 0);
    ASSERT_EQ(weft_write_all(a, "456789", 6, NULL, WEFT_NEVER), 0);
    ASSERT_EQ(weft_read_exact(b, buf, 6, NULL, WEFT_NEVER), 0);
    ASSERT(memcmp(buf, "456789", 6) == 0);
    /* write_all into full buffers: exactly `done` bytes went through */
    small_buffers(a, b);
    k = (struct blk){.fd = a, .n = 16 << 20};
    k.buf = malloc(k.n);
    ASSERT(k.buf != NULL);
    pat_fill(22, 0, k.buf, k.n);
    blocked(blk_write_all, &k, poke_cancel);
    ASSERT_EQ(k.rc, -ECANCELED);
    ASSERT(k.done > 0 && k.done < k.n);
    check_written(a, b, 22, k.done);
    free(k.buf);
    close2(a, b);
    /* accept: the listener is left as it was and takes the next one */
    int lfd = listen_v4(1);
    k = (struct blk){.fd = lfd};
    blocked(blk_accept, &k, poke_cancel);
    ASSERT_EQ(k.rc, -ECANCELED);
    tcp_pair_on(lfd, &a, &b);
    close2(a, b);
    /* connect to a full backlog: nothing is left open */
    struct sockaddr_in sin = addr_v4(weft_local_port(lfd));
    int in[16];
    int nin = fill_backlog(&sin, in, 16);
    int before = fd_count();
    k = (struct blk){.alen = sizeof sin};
    memcpy(&k.addr, &sin, sizeof sin);
    blocked(blk_connect, &k, poke_cancel);
    ASSERT_EQ(k.rc, -ECANCELED);
    ASSERT_EQ(fd_count(), before);
    close_all(in, nin);
    ASSERT_EQ(weft_close(lfd), 0);
    return 0;
}

TEST(cancel_blocked_calls)
{
    net_run(1, WEFT_CLOCK_MONOTONIC, cancel_root, NULL);
}

/* Trio's rule: in a cancelled scope every blocking call says -ECANCELED at
 * once, even when it could complete, and does nothing. */
static int entry_root(void *arg)
{
    (void)arg;
    int a, b;
    tcp_pair(&a, &b);
    int lfd = listen_v4(4);
    int port = weft_local_port(lfd);
    int c = weft_tcp_connect("127.0.0.1", port, WEFT_NEVER); /* pending */
    ASSERT(c >= 0);
    int u = weft_udp_bind("127.0.0.1", 0, 0);
    ASSERT(u >= 0);
    struct sockaddr_in usin = addr_v4(weft_local_port(u));
    ASSERT_EQ(weft_sendto(u, "d", 1, (struct sockaddr *)&usin, sizeof usin,
                          WEFT_NEVER),
              1);
    ASSERT_EQ(weft_write_all(a, "ready", 5, NULL, WEFT_NEVER), 0);
    char buf[8];
    size_t done = 9;
    struct iovec v = {buf, sizeof buf};
    struct sockaddr_storage ss;
    int before = fd_count();
    weft_scope *s = scope_open();
    ASSERT_EQ(weft_scope_cancel(s), 0);
    ASSERT_EQ(weft_read(b, buf, sizeof buf, WEFT_NEVER), -ECANCELED);
    ASSERT_EQ(weft_readv(b, &v, 1, WEFT_NEVER), -ECANCELED);
    ASSERT_EQ(weft_read_exact(b, buf, 5, &done, WEFT_NEVER), -ECANCELED);
    ASSERT_EQ(done, 0);
    ASSERT_EQ(weft_write(a, "x", 1, WEFT_NEVER), -ECANCELED);
    ASSERT_EQ(weft_writev(a, &v, 1, WEFT_NEVER), -ECANCELED);
    ASSERT_EQ(weft_write_all(a, "x", 1, &done, WEFT_NEVER), -ECANCELED);
    ASSERT_EQ(weft_accept(lfd, NULL, WEFT_NEVER), -ECANCELED);
    ASSERT_EQ(weft_tcp_connect("127.0.0.1", port, WEFT_NEVER), -ECANCELED);
    ASSERT_EQ(weft_tcp_connect("localhost", port, WEFT_NEVER), -ECANCELED);
    ASSERT_EQ(weft_tcp_connect_addr((struct sockaddr *)&usin, sizeof usin,
                                    WEFT_NEVER),
              -ECANCELED);
    ASSERT_EQ(weft_unix_connect("@weft-none", WEFT_NEVER), -ECANCELED);
    ASSERT_EQ(weft_resolve("localhost", 1, &ss, WEFT_NEVER), -ECANCELED);
    ASSERT_EQ(weft_recvfrom(u, buf, sizeof buf, NULL, WEFT_NEVER), -ECANCELED);
    ASSERT_EQ(weft_sendto(u, "e", 1, (struct sockaddr *)&usin, sizeof usin,
                          WEFT_NEVER),
              -ECANCELED);
    ASSERT_EQ(fd_count(), before);
    ASSERT_EQ(weft_scope_join(s), -ECANCELED);
    ASSERT_EQ(weft_scope_free(s), 0);
    /* Nothing was taken or sent: all of it is still there. */
    ASSERT_EQ(weft_read_exact(b, buf, 5, NULL, WEFT_NEVER), 0);
    ASSERT(memcmp(buf, "ready", 5) == 0);
    ASSERT_EQ(weft_recvfrom(u, buf, sizeof buf, NULL, WEFT_NEVER), 1);
    ASSERT_EQ(buf[0], 'd');
    ASSERT_EQ(weft_recvfrom(u, buf, sizeof buf, NULL, 0), -ETIMEDOUT);
    int s2 = weft_accept(lfd, NULL, WEFT_NEVER);
    ASSERT(s2 >= 0);
    ASSERT_EQ(weft_read(s2, buf, sizeof buf, 0), -ETIMEDOUT);
    close2(s2, c);
    close2(a, b);
    close2(lfd, u);
    return 0;
}

TEST(cancelled_scope_on_entry)
{
    net_run(1, WEFT_CLOCK_MONOTONIC, entry_root, NULL);
}

/* weft_close of a descriptor another task waits on: -EBADF. */
static int close_root(void *arg)
{
    (void)arg;
    int a, b;
    unsigned char buf[16];
    tcp_pair(&a, &b);
    struct blk k = {.fd = b, .buf = buf, .n = sizeof buf};
    blocked(blk_read, &k, poke_close);
    ASSERT_EQ(k.rc, -EBADF);
    ASSERT_EQ(weft_close(a), 0);
    tcp_pair(&a, &b);
    small_buffers(a, b);
    k = (struct blk){.fd = a, .n = 16 << 20};
    k.buf = calloc(1, k.n);
    ASSERT(k.buf != NULL);
    blocked(blk_write_all, &k, poke_close);
    ASSERT_EQ(k.rc, -EBADF);
    ASSERT(k.done > 0 && k.done < k.n);
    free(k.buf);
    ASSERT_EQ(weft_close(b), 0);
    k = (struct blk){.fd = listen_v4(1)};
    blocked(blk_accept, &k, poke_close);
    ASSERT_EQ(k.rc, -EBADF);
    k = (struct blk){
        .fd = weft_udp_bind("127.0.0.1", 0, 0), .buf = buf, .n = sizeof buf};
    ASSERT(k.fd >= 0);
    blocked(blk_recvfrom, &k, poke_close);
    ASSERT_EQ(k.rc, -EBADF);
    return 0;
}

TEST(close_while_another_task_waits)
{
    net_run(1, WEFT_CLOCK_MONOTONIC, close_root, NULL);
}

/* ======================= UDP ========================================== */

static int udp_root(void *arg)
{
    (void)arg;
    int a = weft_udp_bind("127.0.0.1", 0, 0);
    int b = weft_udp_bind("127.0.0.1", 0, 0);
    ASSERT(a >= 0 && b >= 0);
    struct sockaddr_in to = addr_v4(weft_local_port(a));
    unsigned char out[1000], in[1000];
    pat_fill(31, 0, out, sizeof out);
    /* Datagrams keep their bounds: 1000, 0, 7 bytes. */
    size_t sizes[3] = {1000, 0, 7};
    for (int i = 0; i < 3; i++)
        ASSERT_EQ(weft_sendto(b, out, sizes[i], (struct sockaddr *)&to,
                              sizeof to, WEFT_NEVER),
                  (ptrdiff_t)sizes[i]);
    for (int i = 0; i < 3; i++) {
        struct sockaddr_storage from;
        ASSERT_EQ(weft_recvfrom(a, in, sizeof in, &from, WEFT_NEVER),
                  (ptrdiff_t)sizes[i]);
        pat_check(31, 0, in, sizes[i]);
        ASSERT_EQ(from.ss_family, AF_INET);
        ASSERT_EQ(ntohs(((struct sockaddr_in *)&from)->sin_port),
                  weft_local_port(b));
    }
    /* A datagram longer than the buffer is cut; the next one is whole. */
    ASSERT_EQ(
        weft_sendto(b, out, 100, (struct sockaddr *)&to, sizeof to, WEFT_NEVER),
        100);
    ASSERT_EQ(
        weft_sendto(b, out, 5, (struct sockaddr *)&to, sizeof to, WEFT_NEVER),
        5);
    ASSERT_EQ(weft_recvfrom(a, in, 10, NULL, WEFT_NEVER), 10);
    ASSERT_EQ(weft_recvfrom(a, in, sizeof in, NULL, WEFT_NEVER), 5);
    /* A receive that waits, then a datagram comes; and its deadline. */
    struct blk k = {.fd = a, .buf = in, .n = sizeof in};
    struct blk *kp = &k;
    weft_scope *s = scope_open();
    spawn(blk_recvfrom, kp);
    ASSERT_EQ(weft_event_wait(&k.ready), 0);
    ASSERT_EQ(
        weft_sendto(b, out, 3, (struct sockaddr *)&to, sizeof to, WEFT_NEVER),
        3);
    scope_end(s);
    ASSERT_EQ(k.rc, 3);
    weft_time t0 = weft_now();
    ASSERT_EQ(weft_recvfrom(a, in, sizeof in, NULL, t0 + DL), -ETIMEDOUT);
    assert_waited(t0, DL);
    blocked(blk_recvfrom, &k, poke_cancel);
    ASSERT_EQ(k.rc, -ECANCELED);
    /* Connected: sendto without an address, weft_write, and a refused
     * peer reported on the next call. */
    ASSERT_EQ(connect(b, (struct sockaddr *)&to, sizeof to), 0);
    ASSERT_EQ(weft_sendto(b, "hi", 2, NULL, 0, WEFT_NEVER), 2);
    ASSERT_EQ(weft_write(b, "yo", 2, WEFT_NEVER), 2);
    ASSERT_EQ(weft_recvfrom(a, in, sizeof in, NULL, WEFT_NEVER), 2);
    ASSERT_EQ(weft_read(a, in, sizeof in, WEFT_NEVER), 2);
    ASSERT(memcmp(in, "yo", 2) == 0);
    ASSERT_EQ(weft_close(a), 0);
    ASSERT_EQ(weft_sendto(b, "?", 1, NULL, 0, WEFT_NEVER), 1);
    ASSERT_EQ(weft_recvfrom(b, in, sizeof in, NULL, WEFT_NEVER), -ECONNREFUSED);
    ASSERT_EQ(weft_close(b), 0);
    return 0;
}

TEST(udp)
{
    net_run(1, WEFT_CLOCK_MONOTONIC, udp_root, NULL);
}

static int udp6_root(void *arg)
{
    (void)arg;
    if (!have_ipv6())
        return 0;
    int any = weft_udp_bind(NULL, 0, 0); /* dual-stack */
    int v4 = weft_udp_bind("127.0.0.1", 0, 0);
    int v6 = weft_udp_bind("::1", 0, 0);
    ASSERT(any >= 0 && v4 >= 0 && v6 >= 0);
    struct sockaddr_storage to, from;
    int len = weft_resolve("::1", weft_local_port(any), &to, WEFT_NEVER);
    ASSERT(len > 0);
    ASSERT_EQ(weft_sendto(v6, "six", 3, (struct sockaddr *)&to, (size_t)len,
                          WEFT_NEVER),
              3);
    len = weft_resolve("127.0.0.1", weft_local_port(any), &to, WEFT_NEVER);
    ASSERT_EQ(len, sizeof(struct sockaddr_in));
    ASSERT_EQ(weft_sendto(v4, "four", 4, (struct sockaddr *)&to, (size_t)len,
                          WEFT_NEVER),
              4);
    char buf[8];
    ASSERT_EQ(weft_recvfrom(any, buf, sizeof buf, &from, WEFT_NEVER), 3);
    ASSERT(memcmp(buf, "six", 3) == 0);
    ASSERT_EQ(weft_recvfrom(any, buf, sizeof buf, &from, WEFT_NEVER), 4);
    ASSERT(memcmp(buf, "four", 4) == 0);
    ASSERT_EQ(from.ss_family, AF_INET6); /* mapped */
    /* The dual-stack socket sends to an IPv4 address as it is. */
    struct sockaddr_in sin = addr_v4(weft_local_port(v4));
    ASSERT_EQ(weft_sendto(any, "back", 4, (struct sockaddr *)&sin, sizeof sin,
                          WEFT_NEVER),
              4);
    ASSERT_EQ(weft_recvfrom(v4, buf, sizeof buf, NULL, WEFT_NEVER), 4);
    ASSERT(memcmp(buf, "back", 4) == 0);
    close2(any, v4);
    ASSERT_EQ(weft_close(v6), 0);
    return 0;
}

TEST(udp_ipv6_and_dual_stack)
{
    net_run(1, WEFT_CLOCK_MONOTONIC, udp6_root, NULL);
}

/* ======================= Unix domain sockets ========================== */

static void unix_path(char *buf, size_t n, const char *what)
{
    snprintf(buf, n, "/tmp/weft-test-net-%d-%s.sock", (int)getpid(), what);
    unlink(buf);
}

static int unix_root(void *arg)
{
    (void)arg;
    char path[108];
    unix_path(path, sizeof path, "echo");
    int lfd = weft_unix_listen(path, 64);
    ASSERT(lfd >= 0);
    ASSERT_EQ(weft_local_port(lfd), -EAFNOSUPPORT);
    ASSERT_EQ(weft_unix_listen(path, 1), -EADDRINUSE); /* the file is there */
    struct echo_cfg cfg = {.path = path,
                           .nconn = (int)T_LIVE(20),
                           .bytes = (size_t)T_SCALE(32 * 1024)};
    static struct echo_srv srv;
    echo_serve(&srv, lfd, &cfg);
    /* The listener is gone, the file stays: refused; no file: ENOENT. */
    ASSERT_EQ(weft_unix_connect(path, WEFT_NEVER), -ECONNREFUSED);
    ASSERT_EQ(unlink(path), 0);
    ASSERT_EQ(weft_unix_connect(path, WEFT_NEVER), -ENOENT);
    /* An abstract name: nothing in the file system. */
    char name[64];
    snprintf(name, sizeof name, "@weft-test-net-%d", (int)getpid());
    lfd = weft_unix_listen(name, 4);
    ASSERT(lfd >= 0);
    ASSERT_EQ(weft_unix_listen(name, 4), -EADDRINUSE);
    int c = weft_unix_connect(name, WEFT_NEVER);
    ASSERT(c >= 0);
    int s = weft_accept(lfd, NULL, WEFT_NEVER);
    ASSERT(s >= 0);
    ASSERT_EQ(weft_write_all(c, "unix", 4, NULL, WEFT_NEVER), 0);
    char buf[4];
    ASSERT_EQ(weft_read_exact(s, buf, 4, NULL, WEFT_NEVER), 0);
    ASSERT(memcmp(buf, "unix", 4) == 0);
    close2(c, s);
    ASSERT_EQ(weft_close(lfd), 0);
    ASSERT_EQ(weft_unix_connect(name, WEFT_NEVER), -ECONNREFUSED);
    return 0;
}

TEST(unix_sockets)
{
    net_run(2, WEFT_CLOCK_MONOTONIC, unix_root, NULL);
}

/* Unix datagrams: a socket at a path, another at an abstract name, an
 * unbound one that only sends. */
static int unix_dgram_root(void *arg)
{
    (void)arg;
    char path[108], name[64];
    unix_path(path, sizeof path, "dgram");
    snprintf(name, sizeof name, "@weft-test-dgram-%d", (int)getpid());
    int a = weft_unix_dgram_bind(path);
    ASSERT(a >= 0);
    ASSERT_EQ(weft_unix_dgram_bind(path), -EADDRINUSE);
    ASSERT_EQ(weft_unix_dgram_bind(""), -EINVAL);
    int b = weft_unix_dgram_bind(name);
    int u = weft_unix_dgram_bind(NULL);
    ASSERT(b >= 0 && u >= 0);
    struct sockaddr_un to = {.sun_family = AF_UNIX};
    snprintf(to.sun_path, sizeof to.sun_path, "%s", path);
    ASSERT_EQ(
        weft_sendto(u, "one", 3, (struct sockaddr *)&to, sizeof to, WEFT_NEVER),
        3);
    char buf[8];
    struct sockaddr_storage from;
    ASSERT_EQ(weft_recvfrom(a, buf, sizeof buf, &from, WEFT_NEVER), 3);
    ASSERT_EQ(memcmp(buf, "one", 3), 0); /* from an unbound socket: no name */
    /* b answers a at the path it sent from. */
    struct sockaddr_un bn = {.sun_family = AF_UNIX};
    memcpy(bn.sun_path + 1, name + 1, strlen(name) - 1);
    socklen_t blen =
        (socklen_t)(offsetof(struct sockaddr_un, sun_path) + strlen(name));
    ASSERT_EQ(
        weft_sendto(a, "two", 3, (struct sockaddr *)&bn, blen, WEFT_NEVER), 3);
    ASSERT_EQ(weft_recvfrom(b, buf, sizeof buf, &from, WEFT_NEVER), 3);
    ASSERT_EQ(strcmp(((struct sockaddr_un *)&from)->sun_path, path), 0);
    ASSERT_EQ(weft_close(a), 0);
    ASSERT_EQ(weft_close(b), 0);
    ASSERT_EQ(weft_close(u), 0);
    ASSERT_EQ(unlink(path), 0);
    return 0;
}

TEST(unix_datagram_sockets)
{
    net_run(1, WEFT_CLOCK_MONOTONIC, unix_dgram_root, NULL);
}

/* A full Unix backlog has no readiness: connect tries again until the
 * deadline, and gets in once the listener accepts. */
static void poke_accept(struct blk *b, weft_scope *s)
{
    (void)s;
    int fd = weft_accept(b->fd, NULL, WEFT_NEVER);
    ASSERT(fd >= 0);
    ASSERT_EQ(weft_close(fd), 0);
}

static int unix_backlog_root(void *arg)
{
    (void)arg;
    char name[64];
    snprintf(name, sizeof name, "@weft-test-net-backlog-%d", (int)getpid());
    int lfd = weft_unix_listen(name, 1);
    ASSERT(lfd >= 0);
    int in[16], nin = 0;
    for (;;) {
        int before = fd_count();
        weft_time t0 = weft_now();
        int fd = weft_unix_connect(name, t0 + DL);
        if (fd == -ETIMEDOUT) {
            assert_waited(t0, DL);
            ASSERT_EQ(fd_count(), before);
            break;
        }
        ASSERT(fd >= 0 && nin < 16);
        in[nin++] = fd;
    }
    ASSERT(nin >= 1);
    struct blk k = {.fd = lfd, .path = name};
    blocked(blk_connect, &k, poke_cancel);
    ASSERT_EQ(k.rc, -ECANCELED);
    blocked(blk_connect, &k, poke_accept);
    ASSERT(k.rc >= 0);
    ASSERT_EQ(weft_close(k.rc), 0);
    close_all(in, nin);
    ASSERT_EQ(weft_close(lfd), 0);
    return 0;
}

TEST(unix_full_backlog)
{
    net_run(1, WEFT_CLOCK_MONOTONIC, unix_backlog_root, NULL);
}

/* ======================= listening options ============================ */

static int reuseport_root(void *arg)
{
    (void)arg;
    int a = weft_tcp_listen("127.0.0.1", 0, 64, WEFT_REUSEPORT);
    ASSERT(a >= 0);
    int port = weft_local_port(a);
    int b = weft_tcp_listen("127.0.0.1", port, 64, WEFT_REUSEPORT);
    ASSERT(b >= 0);
    ASSERT_EQ(weft_tcp_listen("127.0.0.1", port, 8, 0), -EADDRINUSE);
    /* Connections spread over both; each is served by one of them. */
    int n = 32, got = 0;
    int c[32];
    for (int i = 0; i < n; i++) {
        c[i] = weft_tcp_connect("127.0.0.1", port, WEFT_NEVER);
        ASSERT(c[i] >= 0);
    }
    int l[2] = {a, b};
    for (int i = 0; i < 2; i++) {
        int fd;
        while ((fd = weft_accept(l[i], NULL, 0)) >= 0) {
            got++;
            ASSERT_EQ(weft_close(fd), 0);
        }
        ASSERT_EQ(fd, -ETIMEDOUT);
    }
    ASSERT_EQ(got, n);
    close_all(c, n);
    close2(a, b);
    /* SO_REUSEADDR: a port just used can be listened on again, even with
     * connections in TIME_WAIT. */
    a = weft_tcp_listen("127.0.0.1", port, 8, 0);
    ASSERT(a >= 0);
    ASSERT_EQ(weft_close(a), 0);
    struct sockaddr_in sin = addr_v4(0);
    a = weft_tcp_listen_addr((struct sockaddr *)&sin, sizeof sin, 0, 0);
    ASSERT(a >= 0);
    ASSERT(weft_local_port(a) > 0);
    b = weft_udp_bind_addr((struct sockaddr *)&sin, sizeof sin, 0);
    ASSERT(b >= 0);
    close2(a, b);
    return 0;
}

TEST(listen_reuseport_and_addr)
{
    net_run(1, WEFT_CLOCK_MONOTONIC, reuseport_root, NULL);
}

/* ======================= DNS ========================================== */

static int dns_root(void *arg)
{
    (void)arg;
    struct sockaddr_storage ss;
    int len = weft_resolve("localhost", 80, &ss, WEFT_NEVER);
    ASSERT(len > 0);
    ASSERT(ss.ss_family == AF_INET || ss.ss_family == AF_INET6);
    /* Listening on a name binds its IPv4 address if it has one. */
    int lfd = weft_tcp_listen("localhost", 0, 8, 0);
    ASSERT(lfd >= 0);
    int c = weft_tcp_connect("localhost", weft_local_port(lfd), WEFT_NEVER);
    ASSERT(c >= 0);
    int s = weft_accept(lfd, NULL, WEFT_NEVER);
    ASSERT(s >= 0);
    char b = 0;
    ASSERT_EQ(weft_write(c, "n", 1, WEFT_NEVER), 1);
    ASSERT_EQ(weft_read(s, &b, 1, WEFT_NEVER), 1);
    ASSERT_EQ(b, 'n');
    close2(c, s);
    ASSERT_EQ(weft_close(lfd), 0);
    int u = weft_udp_bind("localhost", 0, 0);
    ASSERT(u >= 0);
    ASSERT_EQ(weft_close(u), 0);
    ASSERT_EQ(weft_resolve("127.0.0.1", 9, &ss, 0), sizeof(struct sockaddr_in));
    ASSERT_EQ(ntohs(((struct sockaddr_in *)&ss)->sin_port), 9);
    return 0;
}

TEST(dns_names_through_the_pool)
{
    net_run(2, WEFT_CLOCK_MONOTONIC, dns_root, NULL);
}

/* A lookup waiting behind a busy pool (one thread, held by a call that
 * waits on a pipe) is given up at once on a deadline or a cancel. */
struct hold {
    int rfd; /* the pool's call reads it (blocking) */
    weft_event started;
};

static int hold_pool(void *arg)
{
    struct hold *h = arg;
    char c;
    weft_event_set(&h->started);
    return read(h->rfd, &c, 1) == 1 ? 0 : -EIO;
}

static int hold_task(void *arg)
{
    ASSERT_EQ(weft_blocking(hold_pool, arg), 0);
    return 0;
}

static int blk_resolve(void *arg)
{
    struct blk *b = arg;
    weft_event_set(&b->ready);
    b->rc = weft_resolve(b->path, 80, &b->addr, WEFT_NEVER);
    return 0;
}

static int dns_cancel_root(void *arg)
{
    (void)arg;
    int p[2];
    ASSERT_EQ(pipe2(p, O_CLOEXEC), 0);
    struct hold h = {.rfd = p[0]};
    weft_scope *s = scope_open();
    spawn(hold_task, &h);
    ASSERT_EQ(weft_event_wait(&h.started), 0);
    weft_time t0 = weft_now();
    struct sockaddr_storage ss;
    ASSERT_EQ(weft_resolve("localhost", 80, &ss, t0 + DL), -ETIMEDOUT);
    assert_waited(t0, DL);
    ASSERT_EQ(weft_tcp_connect("localhost", 80, t0 + 2 * DL), -ETIMEDOUT);
    struct blk k = {.path = "localhost"};
    blocked(blk_resolve, &k, poke_cancel);
    ASSERT_EQ(k.rc, -ECANCELED);
    weft_blocking_info info;
    ASSERT_EQ(weft_blocking_stats_get(&info), 0);
    ASSERT_EQ(info.running, 1); /* the pipe's reader, nothing else */
    ASSERT_EQ(info.queued, 0);
    ASSERT_EQ(write(p[1], "x", 1), 1);
    scope_end(s);
    /* The pool is free again: names resolve. */
    ASSERT(weft_resolve("localhost", 80, &ss, WEFT_NEVER) > 0);
    close2(p[0], p[1]);
    return 0;
}

TEST(dns_cancel_and_deadline)
{
    weft_config cfg = {.workers = 1, .blocking_threads = 1};
    net_run_cfg(&cfg, dns_cancel_root, NULL);
}

/* ======================= bad input ==================================== */

static int bad_root(void *arg)
{
    (void)arg;
    char buf[8], longpath[200];
    struct sockaddr_storage ss;
    struct sockaddr_un sun = {.sun_family = AF_UNIX};
    struct sockaddr_in sin = addr_v4(1);
    struct iovec v = {buf, sizeof buf};
    memset(longpath, 'x', sizeof longpath - 1);
    longpath[sizeof longpath - 1] = '\0';
    int a, b;
    tcp_pair(&a, &b);
    int p[2];
    ASSERT_EQ(pipe2(p, O_NONBLOCK | O_CLOEXEC), 0);
    /* descriptors */
    ASSERT_EQ(weft_read(-1, buf, 1, WEFT_NEVER), -EBADF);
    ASSERT_EQ(weft_write(-1, buf, 1, WEFT_NEVER), -EBADF);
    ASSERT_EQ(weft_read(1 << 20, buf, 1, WEFT_NEVER), -EBADF);
    ASSERT_EQ(weft_read_exact(-1, buf, 1, NULL, WEFT_NEVER), -EBADF);
    ASSERT_EQ(weft_write_all(-1, buf, 1, NULL, WEFT_NEVER), -EBADF);
    ASSERT_EQ(weft_readv(-1, &v, 1, WEFT_NEVER), -EBADF);
    ASSERT_EQ(weft_accept(-1, NULL, WEFT_NEVER), -EBADF);
    ASSERT_EQ(weft_accept(p[0], NULL, WEFT_NEVER), -ENOTSOCK);
    ASSERT_EQ(weft_accept(a, NULL, WEFT_NEVER), -EINVAL); /* not listening */
    ASSERT_EQ(weft_shutdown(-1, SHUT_WR), -EBADF);
    ASSERT_EQ(weft_shutdown(a, 7), -EINVAL);
    ASSERT_EQ(weft_shutdown(p[0], SHUT_WR), -ENOTSOCK);
    ASSERT_EQ(weft_local_port(-1), -EBADF);
    ASSERT_EQ(weft_local_port(p[0]), -ENOTSOCK);
    ASSERT_EQ(weft_recvfrom(-1, buf, 1, NULL, WEFT_NEVER), -EBADF);
    ASSERT_EQ(weft_sendto(-1, buf, 1, NULL, 0, WEFT_NEVER), -EBADF);
    /* buffers */
    ASSERT_EQ(weft_read(a, NULL, 1, WEFT_NEVER), -EINVAL);
    ASSERT_EQ(weft_write(a, NULL, 1, WEFT_NEVER), -EINVAL);
    size_t done = 5;
    ASSERT_EQ(weft_read_exact(a, NULL, 1, &done, WEFT_NEVER), -EINVAL);
    ASSERT_EQ(done, 0);
    ASSERT_EQ(weft_write_all(a, NULL, 1, NULL, WEFT_NEVER), -EINVAL);
    ASSERT_EQ(weft_readv(a, NULL, 1, WEFT_NEVER), -EINVAL);
    ASSERT_EQ(weft_writev(a, &v, -1, WEFT_NEVER), -EINVAL);
    ASSERT_EQ(weft_writev(a, &v, IOV_MAX + 1, WEFT_NEVER), -EINVAL);
    ASSERT_EQ(weft_recvfrom(a, NULL, 1, NULL, WEFT_NEVER), -EINVAL);
    ASSERT_EQ(weft_sendto(a, buf, 1, (struct sockaddr *)&sin, 1, WEFT_NEVER),
              -EINVAL);
    /* hosts, ports, flags, addresses */
    ASSERT_EQ(weft_tcp_listen(NULL, -1, 1, 0), -EINVAL);
    ASSERT_EQ(weft_tcp_listen(NULL, 65536, 1, 0), -EINVAL);
    ASSERT_EQ(weft_tcp_listen(NULL, 0, 1, 4), -EINVAL);
    ASSERT_EQ(weft_udp_bind(NULL, 0, 4), -EINVAL);
    ASSERT_EQ(weft_udp_bind("127.0.0.1", 70000, 0), -EINVAL);
    ASSERT_EQ(weft_tcp_listen_addr(NULL, 0, 1, 0), -EINVAL);
    ASSERT_EQ(weft_tcp_listen_addr((struct sockaddr *)&sin, 4, 1, 0), -EINVAL);
    ASSERT_EQ(weft_tcp_listen_addr((struct sockaddr *)&sun, sizeof sun, 1, 0),
              -EAFNOSUPPORT);
    ASSERT_EQ(weft_tcp_listen_addr((struct sockaddr *)&sin, sizeof sin, 1, 2),
              -EINVAL);
    ASSERT_EQ(weft_udp_bind_addr((struct sockaddr *)&sun, sizeof sun, 0),
              -EAFNOSUPPORT);
    ASSERT_EQ(weft_tcp_connect(NULL, 80, WEFT_NEVER), -EINVAL);
    ASSERT_EQ(weft_tcp_connect("", 80, WEFT_NEVER), -EINVAL);
    ASSERT_EQ(weft_resolve("", 80, &ss, WEFT_NEVER), -EINVAL);
    ASSERT_EQ(weft_tcp_connect("127.0.0.1", -1, WEFT_NEVER), -EINVAL);
    ASSERT_EQ(weft_tcp_connect_addr(NULL, 0, WEFT_NEVER), -EINVAL);
    ASSERT_EQ(
        weft_tcp_connect_addr((struct sockaddr *)&sun, sizeof sun, WEFT_NEVER),
        -EAFNOSUPPORT);
    ASSERT_EQ(weft_resolve(NULL, 80, &ss, WEFT_NEVER), -EINVAL);
    ASSERT_EQ(weft_resolve("localhost", 80, NULL, WEFT_NEVER), -EINVAL);
    ASSERT_EQ(weft_resolve("localhost", 65536, &ss, WEFT_NEVER), -EINVAL);
    ASSERT_EQ(weft_unix_listen(NULL, 1), -EINVAL);
    ASSERT_EQ(weft_unix_listen("", 1), -EINVAL);
    ASSERT_EQ(weft_unix_listen(longpath, 1), -ENAMETOOLONG);
    ASSERT_EQ(weft_unix_connect(NULL, WEFT_NEVER), -EINVAL);
    ASSERT_EQ(weft_unix_connect(longpath, WEFT_NEVER), -ENAMETOOLONG);
    ASSERT_EQ(weft_unix_listen("/nonexistent-dir/x.sock", 1), -ENOENT);
    /* a port nobody listens on */
    int lfd = listen_v4(1);
    int port = weft_local_port(lfd);
    ASSERT_EQ(weft_close(lfd), 0);
    ASSERT_EQ(weft_tcp_connect("127.0.0.1", port, WEFT_NEVER), -ECONNREFUSED);
    close2(a, b);
    close2(p[0], p[1]);
    return 0;
}

TEST(bad_input)
{
    net_run(1, WEFT_CLOCK_MONOTONIC, bad_root, NULL);
}

/* Outside a task the blocking calls say -EPERM; listening on a numeric
 * address works from any thread. */
TEST(outside_a_task)
{
    fds_open(&fds_before);
    char buf[4];
    struct sockaddr_storage ss;
    ASSERT_EQ(weft_read(0, buf, 1, WEFT_NEVER), -EPERM);
    ASSERT_EQ(weft_write(1, buf, 1, WEFT_NEVER), -EPERM);
    ASSERT_EQ(weft_tcp_connect("127.0.0.1", 1, WEFT_NEVER), -EPERM);
    ASSERT_EQ(weft_unix_connect("@x", WEFT_NEVER), -EPERM);
    ASSERT_EQ(weft_resolve("127.0.0.1", 1, &ss, WEFT_NEVER), -EPERM);
    ASSERT_EQ(weft_tcp_listen("localhost", 0, 1, 0), -EPERM);
    int lfd = weft_tcp_listen("127.0.0.1", 0, 1, 0);
    ASSERT(lfd >= 0);
    ASSERT_EQ(weft_accept(lfd, NULL, WEFT_NEVER), -EPERM);
    int u = weft_udp_bind(NULL, 0, 0);
    ASSERT(u >= 0);
    ASSERT_EQ(weft_recvfrom(u, buf, 1, NULL, WEFT_NEVER), -EPERM);
    ASSERT_EQ(weft_close(lfd), 0);
    ASSERT_EQ(weft_close(u), 0);
    fds_open(&fds_after);
    fds_same(&fds_before, &fds_after);
}

/* ======================= TCP reads that came back short ================ */

/* After a short read, a read with a deadline already past still takes
 * bytes that came since: their edge may not have been dispatched yet, and
 * the read needs no waiting. */
static int past_deadline_root(void *arg)
{
    (void)arg;
    int a, b;
    tcp_pair(&a, &b);
    char buf[16];
    ASSERT_EQ(weft_write(a, "x", 1, WEFT_NEVER), 1);
    ASSERT_EQ(weft_read(b, buf, sizeof buf, WEFT_NEVER), 1); /* short */
    ASSERT_EQ(weft_write(a, "yz", 2, WEFT_NEVER), 2);
    weft_time t0 = weft_now();
    ASSERT_EQ(weft_read(b, buf, sizeof buf, t0), 2);
    ASSERT(memcmp(buf, "yz", 2) == 0);
    ASSERT_EQ(weft_now(), t0);
    ASSERT_EQ(weft_read(b, buf, sizeof buf, t0), -ETIMEDOUT);
    /* read_exact too: the first byte, short, then the second past it. */
    size_t done = 9;
    ASSERT_EQ(weft_write(a, "1", 1, WEFT_NEVER), 1);
    ASSERT_EQ(weft_read(b, buf, sizeof buf, WEFT_NEVER), 1); /* short */
    ASSERT_EQ(weft_write(a, "23", 2, WEFT_NEVER), 2);
    ASSERT_EQ(weft_read_exact(b, buf, 2, &done, weft_now()), 0);
    ASSERT_EQ(done, 2);
    ASSERT(memcmp(buf, "23", 2) == 0);
    close2(a, b);
    return 0;
}

TEST(short_read_then_deadline_already_past)
{
    net_run(1, WEFT_CLOCK_VIRTUAL, past_deadline_root, NULL);
}

/* The peer accepts, writes and shuts down while the dialer still waits
 * for its connection, so that one event brings the connection and the end
 * of the stream: the dialer reads the bytes (short), then the end, at
 * once. */
struct dialer {
    weft_event ready;
    int port;
    ptrdiff_t rc[2];
    weft_time took;
};

static int dialer(void *arg)
{
    struct dialer *d = arg;
    weft_event_set(&d->ready);
    int fd = weft_tcp_connect("127.0.0.1", d->port, WEFT_NEVER);
    ASSERT(fd >= 0);
    char buf[16];
    weft_time t0 = weft_now();
    d->rc[0] = weft_read(fd, buf, sizeof buf, t0 + WEFT_SEC);
    d->rc[1] = weft_read(fd, buf, sizeof buf, t0 + WEFT_SEC);
    d->took = weft_now() - t0;
    ASSERT_EQ(weft_close(fd), 0);
    return 0;
}

static int dial_end_root(void *arg)
{
    (void)arg;
    int lfd = listen_v4(8);
    struct dialer d = {.port = weft_local_port(lfd)};
    weft_scope *s = scope_open();
    spawn(dialer, &d);
    ASSERT_EQ(weft_event_wait(&d.ready), 0); /* it waits to connect */
    /* Plain calls: this task does not let the worker read its events. */
    int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    ASSERT(fd >= 0);
    ASSERT_EQ(write(fd, "hello", 5), 5);
    ASSERT_EQ(shutdown(fd, SHUT_WR), 0);
    scope_end(s);
    ASSERT_EQ(d.rc[0], 5);
    ASSERT_EQ(d.rc[1], 0);
    ASSERT_EQ(d.took, 0);
    close2(fd, lfd);
    return 0;
}

TEST(end_of_stream_seen_while_connecting)
{
    net_run(1, WEFT_CLOCK_VIRTUAL, dial_end_root, NULL);
}

/* Urgent data: a read stops short at its mark, with the bytes after it
 * still queued and no edge to come for them; the next read takes them at
 * once. */
static int urgent_root(void *arg)
{
    (void)arg;
    int a, b;
    tcp_pair(&a, &b);
    unsigned char buf[16];
    struct blk k = {.fd = b, .buf = buf, .n = sizeof buf};
    weft_scope *s = scope_open();
    spawn(blk_read, &k);
    ASSERT_EQ(weft_event_wait(&k.ready), 0); /* it waits to read */
    ASSERT_EQ(send(a, "ab", 2, 0), 2);
    ASSERT_EQ(send(a, "!", 1, MSG_OOB), 1);
    ASSERT_EQ(send(a, "de", 2, 0), 2);
    scope_end(s);
    ASSERT_EQ(k.rc, 2); /* up to the mark */
    ASSERT(memcmp(buf, "ab", 2) == 0);
    weft_time t0 = weft_now();
    ASSERT_EQ(weft_read(b, buf, sizeof buf, t0 + WEFT_SEC), 2);
    ASSERT(memcmp(buf, "de", 2) == 0);
    ASSERT_EQ(weft_now(), t0);
    close2(a, b);
    return 0;
}

TEST(urgent_data_does_not_stall_reads)
{
    net_run(1, WEFT_CLOCK_VIRTUAL, urgent_root, NULL);
}

/* accept on a socket that cannot accept fails, every time: at once, not
 * skipped as a connection that failed in the backlog (which spins). */
static int accept_udp_root(void *arg)
{
    (void)arg;
    int u = weft_udp_bind("127.0.0.1", 0, 0);
    ASSERT(u >= 0);
    weft_time t0 = weft_now();
    ASSERT_EQ(weft_accept(u, NULL, t0 + WEFT_SEC), -EOPNOTSUPP);
    ASSERT_EQ(weft_now(), t0);
    ASSERT_EQ(weft_close(u), 0);
    return 0;
}

TEST(accept_on_a_udp_socket_fails)
{
    net_run(1, WEFT_CLOCK_VIRTUAL, accept_udp_root, NULL);
}

/* ---- interrupted reads and accepts lose nothing ---- */

/* A deadline for one interrupted call, drawn from *rng: none, one already
 * past, or 1-200 us away; or (-1) a scope whose deadline is that near, so
 * that the call is cancelled rather than timed out. */
static weft_time interrupt_at(uint64_t *rng, bool *by_scope)
{
    uint64_t r = rnd(rng);
    *by_scope = (r & 3) == 3;
    switch ((r >> 2) % 4) {
    case 0:
        return *by_scope ? weft_now() + 50 * WEFT_USEC : WEFT_NEVER;
    case 1:
        return weft_now();
    default:
        return weft_now() + (int64_t)(1 + (r >> 8) % 200) * WEFT_USEC;
    }
}

/* Runs a read (accept: fd < 0 stands for lfd) under an interrupt drawn
 * from *rng; returns its result. */
static ptrdiff_t interrupted(uint64_t *rng, int fd, void *buf, size_t n,
                             bool accept)
{
    bool by_scope;
    weft_time d = interrupt_at(rng, &by_scope);
    weft_scope *s = NULL;
    if (by_scope) {
        ASSERT_EQ(weft_scope_open(&s, &(weft_scope_opts){.deadline = d}), 0);
        d = WEFT_NEVER;
    }
    ptrdiff_t r = accept ? weft_accept(fd, NULL, d) : weft_read(fd, buf, n, d);
    if (s) {
        int jr = weft_scope_join(s);
        ASSERT(jr == 0 || jr == -ETIMEDOUT);
        ASSERT_EQ(weft_scope_free(s), 0);
    }
    if (r < 0)
        ASSERT(r == (by_scope ? -ECANCELED : -ETIMEDOUT));
    return r;
}

enum { LL_CLIENTS = 64 };

struct lossless {
    int a;    /* the writer's end */
    int port; /* the listener's */
    size_t n; /* bytes the writer sends */
    uint64_t seed;
};

static int ll_writer(void *arg)
{
    struct lossless *L = arg;
    uint64_t rng = L->seed ^ 0x5bd1e995;
    unsigned char buf[4096];
    size_t off = 0;
    while (off < L->n) {
        size_t k = 1 + rnd(&rng) % sizeof buf;
        if (k > L->n - off)
            k = L->n - off;
        pat_fill(1, off, buf, k);
        ASSERT_EQ(weft_write_all(L->a, buf, k, NULL, WEFT_NEVER), 0);
        off += k;
        if (rnd(&rng) % 4 == 0)
            weft_yield();
    }
    ASSERT_EQ(weft_shutdown(L->a, SHUT_WR), 0);
    return 0;
}

static int ll_client(void *arg)
{
    struct lossless *L = (struct lossless *)((uintptr_t)arg & ~(uintptr_t)255);
    unsigned char id = (unsigned char)((uintptr_t)arg & 255);
    int c = weft_tcp_connect("127.0.0.1", L->port, WEFT_NEVER);
    ASSERT(c >= 0);
    ASSERT_EQ(weft_write_all(c, &id, 1, NULL, WEFT_NEVER), 0);
    char x;
    ASSERT_EQ(weft_read(c, &x, 1, WEFT_NEVER), 0); /* the server's close */
    ASSERT_EQ(weft_close(c), 0);
    return 0;
}

static _Alignas(256) struct lossless ll_state;

static int lossless_root(void *arg)
{
    struct lossless *L = &ll_state;
    L->seed = (uint64_t)(uintptr_t)arg;
    uint64_t rng = L->seed;
    int b;
    tcp_pair(&L->a, &b);
    L->n = (size_t)T_SCALE(1 << 20);
    weft_scope *s = scope_open();
    ASSERT(weft_spawn(s, ll_writer, L) >= 0);
    /* Every byte once, in order, whatever the reads that timed out or
     * were cancelled. */
    unsigned char buf[3000];
    size_t got = 0;
    long interrupts = 0;
    for (;;) {
        size_t k = 1 + rnd(&rng) % sizeof buf;
        ptrdiff_t r = interrupted(&rng, b, buf, k, false);
        if (r < 0) {
            interrupts++;
            continue;
        }
        if (r == 0)
            break;
        pat_check(1, got, buf, (size_t)r);
        got += (size_t)r;
    }
    ASSERT_EQ(got, L->n);
    ASSERT(interrupts > 0);
    scope_end(s);
    close2(L->a, b);

    /* Every connection accepted once, whatever the accepts that timed out
     * or were cancelled. */
    int lfd = listen_v4(LL_CLIENTS);
    L->port = weft_local_port(lfd);
    s = scope_open();
    for (uintptr_t i = 0; i < LL_CLIENTS; i++)
        ASSERT(weft_spawn(s, ll_client, (void *)((uintptr_t)L | i)) >= 0);
    int seen[LL_CLIENTS] = {0};
    int accepted = 0;
    interrupts = 0;
    while (accepted < LL_CLIENTS) {
        ptrdiff_t c = interrupted(&rng, lfd, NULL, 0, true);
        if (c < 0) {
            interrupts++;
            continue;
        }
        unsigned char id = 255;
        ASSERT_EQ(weft_read_exact((int)c, &id, 1, NULL, WEFT_NEVER), 0);
        ASSERT(id < LL_CLIENTS);
        seen[id]++;
        accepted++;
        ASSERT_EQ(weft_close((int)c), 0);
    }
    for (int i = 0; i < LL_CLIENTS; i++)
        ASSERT_EQ(seen[i], 1);
    scope_end(s);
    ASSERT_EQ(weft_accept(lfd, NULL, weft_now()), -ETIMEDOUT); /* no more */
    ASSERT_EQ(weft_close(lfd), 0);
    return 0;
}

/* Reads and accepts that time out or are cancelled (by their deadline,
 * by a scope's) at random points, between and during waits, take nothing:
 * the stream arrives whole and in order, and every connection is accepted
 * once. On one worker and two, on each poller (the uring: entries). */
TEST(interrupted_reads_and_accepts_lose_nothing)
{
    for (uint64_t seed = 1; seed <= 3; seed++) {
        T_SEED(seed);
        net_run(1, WEFT_CLOCK_MONOTONIC, lossless_root, (void *)seed);
        net_run(2, WEFT_CLOCK_MONOTONIC, lossless_root, (void *)seed);
    }
}

/* ---- a TCP read that waits, on each poller ---- */

static uint64_t ring_ops(void)
{
    int err = 0;
    weft__poller *p = weft__io_poller(weft__tl_worker, &err);
    ASSERT(p != NULL);
    return p->ops_done;
}

static int late_writer(void *arg)
{
    int a = *(int *)arg;
    for (int i = 0; i < 10; i++)
        weft_yield(); /* one worker: the reader parked before this ran */
    ASSERT_EQ(weft_write_all(a, "late", 4, NULL, WEFT_NEVER), 0);
    return 0;
}

static int read_waits_root(void *arg)
{
    (void)arg;
    int a, b;
    tcp_pair(&a, &b);
    bool ring = strcmp(weft_poller_name(), "io_uring") == 0;
    for (int i = 0; i < 3; i++) {
        uint64_t before = ring_ops();
        weft_scope *s = scope_open();
        ASSERT(weft_spawn(s, late_writer, &a) >= 0);
        char buf[16];
        ASSERT_EQ(weft_read_exact(b, buf, 4, NULL, WEFT_NEVER), 0);
        ASSERT(memcmp(buf, "late", 4) == 0);
        scope_end(s);
        /* On io_uring the waiting read is one receive request, whose
         * completion brought the bytes; on epoll no request at all. */
        ASSERT_EQ(ring_ops() - before, ring ? 1u : 0u);
    }
    /* A short read, then one that waits: received through the ring as
     * well (the read that finds the queue empty waits first). */
    ASSERT_EQ(weft_write_all(a, "ab", 2, NULL, WEFT_NEVER), 0);
    char buf[16];
    ASSERT_EQ(weft_read(b, buf, sizeof buf, WEFT_NEVER), 2);
    uint64_t before = ring_ops();
    weft_scope *s = scope_open();
    ASSERT(weft_spawn(s, late_writer, &a) >= 0);
    ASSERT_EQ(weft_read(b, buf, sizeof buf, WEFT_NEVER), 4);
    scope_end(s);
    ASSERT_EQ(ring_ops() - before, ring ? 1u : 0u);
    /* The end of the stream, and a close under a waiting read. */
    ASSERT_EQ(weft_shutdown(a, SHUT_WR), 0);
    ASSERT_EQ(weft_read(b, buf, sizeof buf, WEFT_NEVER), 0);
    close2(a, b);
    return 0;
}

/* On the io_uring poller a TCP read that has to wait receives through
 * the worker's ring (one request, no readiness and recv(2) after it); on
 * epoll it waits for readiness. Either way the bytes come once, in
 * order. One worker, so that the writer runs only once the reader has
 * parked. */
TEST(a_tcp_read_that_waits_receives_through_the_ring)
{
    net_run(1, WEFT_CLOCK_MONOTONIC, read_waits_root, NULL);
}
