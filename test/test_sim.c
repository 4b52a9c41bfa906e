/* SPDX-License-Identifier: MIT */
/*
 * Simulation: programs and their network in virtual time, from a seed.
 * Nothing here sleeps for real; every run is seeded.
 */
#include "t.h"

/* The examples' servers, run as simulated hosts below. */
#define main echo_example_main
#define root echo_example_root
#include "../examples/echo_server.c"
#undef main
#undef root
#define main http_example_main
#define root http_example_root
#include "../examples/http_server.c"
#undef main
#undef root
#include "../examples/http_parse.c"

#include "io/io.h" /* weft__netsys_for: connect(2) on a simulated socket */
#include "util/runlog.h" /* weft__sim_off: the classes shrinking switches off */

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#define ECHO_PORT 7

static int sim_run(uint64_t seed, const weft_sim_opts *o, weft_fn fn, void *arg)
{
    static const weft_sim_opts defaults;
    weft_config cfg = {0};
    cfg.seed = seed;
    cfg.sim = o ? o : &defaults;
    int rc = weft_run(&cfg, fn, arg);
    if (getenv("T_SIM_LOG")) /* to see what happened */
        weft_sim_log_write(2);
    return rc;
}

/* ---- an echo server, as a host runs it ---- */

static int echo_conn(void *arg)
{
    int fd = (int)(intptr_t)arg;
    char buf[512];
    for (;;) {
        ptrdiff_t n = weft_read(fd, buf, sizeof buf, WEFT_NEVER);
        if (n <= 0 || weft_write_all(fd, buf, (size_t)n, NULL, WEFT_NEVER))
            break;
    }
    weft_close(fd);
    return 0;
}

static int echo_server(void *arg)
{
    (void)arg;
    int lfd = weft_tcp_listen(NULL, ECHO_PORT, 64, 0);
    if (lfd < 0)
        return lfd;
    weft_scope *s;
    int rc = weft_scope_open(&s, &(weft_scope_opts){.policy = WEFT_SERVE});
    while (rc == 0) {
        int fd = weft_accept(lfd, NULL, WEFT_NEVER);
        if (fd < 0)
            break;
        weft_spawn(s, echo_conn, (void *)(intptr_t)fd);
    }
    if (rc == 0) {
        weft_scope_cancel(s);
        weft_scope_join(s);
        weft_scope_free(s);
    }
    weft_close(lfd);
    return 0;
}

/* One request on fd: writes msg, reads its echo by deadline. */
static int echo_once(int fd, const char *msg, weft_time deadline)
{
    size_t n = strlen(msg);
    char back[128];
    int rc = weft_write_all(fd, msg, n, NULL, deadline);
    if (rc == 0)
        rc = weft_read_exact(fd, back, n, NULL, deadline);
    if (rc == 0 && memcmp(back, msg, n) != 0)
        rc = -EBADMSG;
    return rc;
}

static weft_sim_host *server_up(void)
{
    weft_sim_host *h;
    ASSERT_EQ(weft_sim_host_new(&h, "server"), 0);
    ASSERT_EQ(weft_sim_host_start(h, echo_server, NULL), 0);
    return h;
}

/* ---- echo ---- */

static int echo_client_body(void *arg)
{
    (void)arg;
    weft_sim_host *srv = server_up();
    char ip[16];
    ASSERT_EQ(weft_sim_host_addr(srv, ip, sizeof ip), 0);
    ASSERT_EQ(strcmp(ip, "10.0.0.2"), 0);
    ASSERT_EQ(strcmp(weft_poller_name(), "sim"), 0);
    int fd = weft_tcp_connect("server", ECHO_PORT, WEFT_NEVER);
    ASSERT(fd >= 0);
    /* A connect is a round trip: at least two latencies of 1 ms. */
    ASSERT(weft_now() >= 2 * WEFT_MSEC);
    struct sockaddr_storage peer;
    ASSERT_EQ(weft_resolve("server", ECHO_PORT, &peer, WEFT_NEVER),
              (int)sizeof(struct sockaddr_in));
    for (int i = 0; i < 20; i++) {
        char msg[32];
        snprintf(msg, sizeof msg, "hello %d", i);
        weft_time t0 = weft_now();
        ASSERT_EQ(echo_once(fd, msg, WEFT_NEVER), 0);
        ASSERT(weft_now() - t0 >= 2 * WEFT_MSEC);
        ASSERT(weft_now() - t0 <= 4 * WEFT_MSEC);
    }
    /* The server sees our end of the stream and closes its side. */
    ASSERT_EQ(weft_shutdown(fd, SHUT_WR), 0);
    char c;
    ASSERT_EQ(weft_read(fd, &c, 1, WEFT_NEVER), 0);
    ASSERT_EQ(weft_close(fd), 0);
    ASSERT_EQ(weft_sim_host_crash(srv), 0);
    return 0;
}

TEST(echo_over_the_simulated_network)
{
    int64_t t0 = t_real_ns();
    ASSERT_EQ(sim_run(T_SEED(11), NULL, echo_client_body, NULL), 0);
    ASSERT(weft_sim_log_hash() != 0);
    /* Forty round trips of 2 to 4 virtual ms: no real waiting. */
    ASSERT(t_real_ns() - t0 < 2 * WEFT_SEC);
}

/* ---- the mode itself ---- */

/* Inline: on the worker, not on a thread of the pool. */
static int blocking_fn(void *arg)
{
    return weft_worker_id() == 0 ? *(int *)arg + 1 : -1;
}

static int unchanged_program(void *arg)
{
    int *ok = arg;
    ASSERT(weft_seed() != 0);
    ASSERT(weft_sim_host_self() != NULL);
    /* An unchanged program's own loopback echo. */
    int lfd = weft_tcp_listen("127.0.0.1", 8080, 8, 0);
    ASSERT(lfd >= 0);
    ASSERT_EQ(weft_local_port(lfd), 8080);
    weft_scope *s;
    ASSERT_EQ(weft_scope_open(&s, NULL), 0);
    int afd = -1;
    int cfd = weft_tcp_connect("localhost", 8080, WEFT_NEVER);
    ASSERT(cfd >= 0);
    afd = weft_accept(lfd, NULL, WEFT_NEVER);
    ASSERT(afd >= 0);
    ASSERT_EQ(weft_spawn(s, echo_conn, (void *)(intptr_t)afd), 0);
    ASSERT_EQ(echo_once(cfd, "ping", WEFT_NEVER), 0);
    ASSERT_EQ(weft_close(cfd), 0);
    ASSERT_EQ(weft_scope_join(s), 0);
    ASSERT_EQ(weft_scope_free(s), 0);
    ASSERT_EQ(weft_close(lfd), 0);
    /* Unix sockets are the simulated host's too, never the kernel's. */
    int ufd = weft_unix_listen("@weft-sim-test", 1);
    ASSERT(ufd >= 0);
    ASSERT_EQ(weft_close(ufd), 0);
    /* Not simulated: refused. */
    ASSERT_EQ(weft_fd_wait(0, WEFT_IO_READ, WEFT_NEVER), -ENOTSUP);
    /* Ten virtual seconds take no real time. */
    weft_time t = weft_now();
    ASSERT_EQ(weft_sleep_for(10 * WEFT_SEC), 0);
    ASSERT_EQ(weft_now() - t, 10 * WEFT_SEC);
    /* A blocking call runs inline, at the instant it is made. */
    int v = 41;
    t = weft_now();
    ASSERT_EQ(weft_blocking(blocking_fn, &v), 42);
    ASSERT_EQ(weft_now(), t);
    *ok = 1;
    return 0;
}

TEST(weft_sim_in_the_environment_simulates_an_unchanged_program)
{
    setenv("WEFT_SIM", "1", 1);
    int ok = 0;
    int64_t t0 = t_real_ns();
    ASSERT_EQ(weft_run(NULL, unchanged_program, &ok), 0);
    ASSERT_EQ(ok, 1);
    ASSERT(t_real_ns() - t0 < 2 * WEFT_SEC);
    setenv("WEFT_SIM", "yes", 1);
    ASSERT_EQ(weft_run(NULL, unchanged_program, &ok), -EINVAL);
    unsetenv("WEFT_SIM");
}

static int not_simulated(void *arg)
{
    (void)arg;
    weft_sim_host *h;
    ASSERT_EQ(weft_sim_host_new(&h, "x"), -ENOTSUP);
    ASSERT_EQ(weft_sim_log("x"), -ENOTSUP);
    ASSERT(weft_sim_host_self() == NULL);
    return 0;
}

TEST(sim_calls_outside_a_simulation)
{
    weft_sim_host *h;
    ASSERT_EQ(weft_sim_host_new(&h, "x"), -EPERM);
    ASSERT_EQ(t_run_virtual(1, not_simulated, NULL), 0);
    weft_sim_opts bad = {.latency_ns = -1};
    ASSERT_EQ(sim_run(1, &bad, not_simulated, NULL), -EINVAL);
    bad = (weft_sim_opts){.loss_permille = 1001};
    ASSERT_EQ(sim_run(1, &bad, not_simulated, NULL), -EINVAL);
}

/* ---- refused, reset, end of stream ---- */

static int closer_server(void *arg)
{
    (void)arg;
    int lfd = weft_tcp_listen(NULL, 9, 8, 0);
    ASSERT(lfd >= 0);
    /* First: close with the request unread (a reset); second: read it,
     * then close (an end of stream). */
    for (int i = 0; i < 2; i++) {
        int fd = weft_accept(lfd, NULL, WEFT_NEVER);
        if (fd < 0)
            break;
        char buf[4];
        ASSERT_EQ(weft_sleep_for(10 * WEFT_MSEC), 0);
        if (i == 1)
            ASSERT_EQ(weft_read(fd, buf, sizeof buf, WEFT_NEVER), 4);
        weft_close(fd);
    }
    weft_close(lfd);
    return 0;
}

static int refused_body(void *arg)
{
    (void)arg;
    weft_sim_host *srv;
    ASSERT_EQ(weft_sim_host_new(&srv, "server"), 0);
    /* Nothing listens yet; no host has this address. */
    ASSERT_EQ(weft_tcp_connect("server", 9, WEFT_NEVER), -ECONNREFUSED);
    ASSERT_EQ(weft_tcp_connect("10.0.0.99", 9, WEFT_NEVER), -ENETUNREACH);
    ASSERT_EQ(weft_tcp_connect("nosuchhost", 9, WEFT_NEVER), -ENOENT);
    ASSERT_EQ(weft_sim_host_start(srv, closer_server, NULL), 0);
    ASSERT_EQ(weft_sim_host_start(srv, closer_server, NULL), -EBUSY);
    ASSERT_EQ(weft_sleep_for(WEFT_MSEC), 0);
    char buf[8];
    int fd = weft_tcp_connect("server", 9, WEFT_NEVER);
    ASSERT(fd >= 0);
    ASSERT_EQ(weft_write(fd, "abcd", 4, WEFT_NEVER), 4);
    ASSERT_EQ(weft_read(fd, buf, sizeof buf, WEFT_NEVER), -ECONNRESET);
    ASSERT_EQ(weft_read(fd, buf, sizeof buf, WEFT_NEVER), 0);
    ASSERT_EQ(weft_write(fd, "x", 1, WEFT_NEVER), -EPIPE);
    ASSERT_EQ(weft_close(fd), 0);
    fd = weft_tcp_connect("server", 9, WEFT_NEVER);
    ASSERT(fd >= 0);
    ASSERT_EQ(weft_write(fd, "abcd", 4, WEFT_NEVER), 4);
    ASSERT_EQ(weft_read(fd, buf, sizeof buf, WEFT_NEVER), 0);
    /* The peer is gone: a write is taken, and its reset comes back. */
    ASSERT_EQ(weft_write(fd, "more", 4, WEFT_NEVER), 4);
    ASSERT_EQ(weft_sleep_for(10 * WEFT_MSEC), 0);
    ASSERT_EQ(weft_write(fd, "more", 4, WEFT_NEVER), -ECONNRESET);
    ASSERT_EQ(weft_close(fd), 0);
    return 0;
}

TEST(refused_connects_resets_and_end_of_stream)
{
    ASSERT_EQ(sim_run(T_SEED(3), NULL, refused_body, NULL), 0);
}

/* ---- partition, repair, hold, release ---- */

static int udp_echo(void *arg)
{
    (void)arg;
    int fd = weft_udp_bind(NULL, 53, 0);
    ASSERT(fd >= 0);
    for (;;) {
        char buf[64];
        struct sockaddr_storage from;
        ptrdiff_t n = weft_recvfrom(fd, buf, sizeof buf, &from, WEFT_NEVER);
        if (n < 0)
            break;
        weft_sendto(fd, buf, (size_t)n, (struct sockaddr *)&from,
                    sizeof(struct sockaddr_in), WEFT_NEVER);
    }
    weft_close(fd);
    return 0;
}

static int both_servers(void *arg)
{
    weft_scope *s;
    ASSERT_EQ(weft_scope_open(&s, NULL), 0);
    weft_spawn(s, udp_echo, arg);
    weft_spawn(s, echo_server, arg);
    weft_scope_join(s);
    weft_scope_free(s);
    return 0;
}

static int connect_never(void *arg)
{
    int *fd = arg;
    *fd = weft_tcp_connect("server", ECHO_PORT, WEFT_NEVER);
    return 0;
}

/* A datagram's round trip to the server's udp echo by deadline: the
 * bytes back, or a negative errno. */
static ptrdiff_t udp_ping(int fd, weft_time deadline)
{
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(53)};
    inet_pton(AF_INET, "10.0.0.2", &to.sin_addr);
    ptrdiff_t n = weft_sendto(fd, "ping", 4, (struct sockaddr *)&to, sizeof to,
                              WEFT_NEVER);
    if (n != 4)
        return n < 0 ? n : -EIO;
    char buf[8];
    return weft_recvfrom(fd, buf, sizeof buf, NULL, deadline);
}

static int verbs_body(void *arg)
{
    (void)arg;
    weft_sim_host *srv;
    ASSERT_EQ(weft_sim_host_new(&srv, "server"), 0);
    ASSERT_EQ(weft_sim_host_start(srv, both_servers, NULL), 0);
    ASSERT_EQ(weft_sleep_for(WEFT_MSEC), 0);
    int fd = weft_tcp_connect("server", ECHO_PORT, WEFT_NEVER);
    ASSERT(fd >= 0);
    int ufd = weft_udp_bind(NULL, 0, 0);
    ASSERT(ufd >= 0);
    ASSERT_EQ(udp_ping(ufd, weft_now() + WEFT_SEC), 4);
    ASSERT_EQ(weft_sim_partition(NULL, NULL), -EINVAL);

    /* Partition: a stream's bytes wait, datagrams and connects are lost. */
    ASSERT_EQ(weft_sim_partition(NULL, srv), 0);
    char back[8];
    ASSERT_EQ(weft_write(fd, "abc", 3, WEFT_NEVER), 3);
    ASSERT_EQ(weft_read(fd, back, 3, weft_now() + 100 * WEFT_MSEC), -ETIMEDOUT);
    ASSERT_EQ(udp_ping(ufd, weft_now() + 100 * WEFT_MSEC), -ETIMEDOUT);
    ASSERT_EQ(
        weft_tcp_connect("server", ECHO_PORT, weft_now() + 100 * WEFT_MSEC),
        -ETIMEDOUT);
    ASSERT_EQ(weft_sim_repair(srv, NULL), 0);
    weft_time t = weft_now();
    size_t done = 0;
    ASSERT_EQ(weft_read_exact(fd, back, 3, &done, WEFT_NEVER), 0);
    ASSERT_EQ(memcmp(back, "abc", 3), 0);
    ASSERT(weft_now() - t <= 3 * WEFT_MSEC); /* the echo's one trip */
    ASSERT_EQ(udp_ping(ufd, weft_now() + WEFT_SEC), 4);

    /* Hold: everything waits, in order, datagrams and connects too, and
     * arrives at the release. */
    ASSERT_EQ(weft_sim_hold(NULL, srv), 0);
    ASSERT_EQ(weft_write(fd, "one", 3, WEFT_NEVER), 3);
    ASSERT_EQ(weft_write(fd, "two", 3, WEFT_NEVER), 3);
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(53)};
    inet_pton(AF_INET, "10.0.0.2", &to.sin_addr);
    ASSERT_EQ(weft_sendto(ufd, "held", 4, (struct sockaddr *)&to, sizeof to,
                          WEFT_NEVER),
              4);
    weft_scope *s;
    ASSERT_EQ(weft_scope_open(&s, NULL), 0);
    int cfd = -2;
    ASSERT_EQ(weft_spawn(s, connect_never, &cfd), 0);
    ASSERT_EQ(weft_read(fd, back, 6, weft_now() + WEFT_SEC), -ETIMEDOUT);
    ASSERT_EQ(cfd, -2);
    ASSERT_EQ(weft_sim_release(NULL, srv), 0);
    ASSERT_EQ(weft_read_exact(fd, back, 6, NULL, WEFT_NEVER), 0);
    ASSERT_EQ(memcmp(back, "onetwo", 6), 0);
    ASSERT_EQ(weft_recvfrom(ufd, back, sizeof back, NULL, WEFT_NEVER), 4);
    ASSERT_EQ(memcmp(back, "held", 4), 0);
    ASSERT_EQ(weft_scope_join(s), 0);
    ASSERT_EQ(weft_scope_free(s), 0);
    ASSERT(cfd >= 0);
    ASSERT_EQ(echo_once(cfd, "new", WEFT_NEVER), 0);
    ASSERT_EQ(weft_close(cfd), 0);

    ASSERT_EQ(weft_close(fd), 0);
    ASSERT_EQ(weft_close(ufd), 0);
    ASSERT_EQ(weft_sim_host_crash(srv), 0);
    ASSERT_EQ(weft_sim_host_crash(srv), -ESRCH);
    return 0;
}

TEST(partition_repair_hold_release)
{
    ASSERT_EQ(sim_run(T_SEED(5), NULL, verbs_body, NULL), 0);
}

/* ---- datagrams ---- */

static int lossy_body(void *arg)
{
    (void)arg;
    weft_sim_host *srv;
    ASSERT_EQ(weft_sim_host_new(&srv, "server"), 0);
    ASSERT_EQ(weft_sim_host_start(srv, udp_echo, NULL), 0);
    ASSERT_EQ(weft_sleep_for(WEFT_MSEC), 0);
    int ufd = weft_udp_bind("0.0.0.0", 0, 0);
    ASSERT(ufd >= 0);
    int got = 0;
    for (int i = 0; i < 100; i++)
        got += udp_ping(ufd, weft_now() + 50 * WEFT_MSEC) == 4;
    /* Half of each trip's two datagrams are lost: about a quarter come
     * back. */
    ASSERT(got > 5 && got < 50);
    ASSERT_EQ(weft_close(ufd), 0);
    ASSERT_EQ(weft_sim_host_crash(srv), 0);
    return got;
}

TEST(datagrams_are_lost_as_the_seed_says)
{
    weft_sim_opts o = {.loss_permille = 500};
    int a = sim_run(T_SEED(8), &o, lossy_body, NULL);
    ASSERT(a > 0);
    uint64_t h = weft_sim_log_hash();
    ASSERT_EQ(sim_run(8, &o, lossy_body, NULL), a);
    ASSERT_EQ(weft_sim_log_hash(), h);
}

/* ---- crash and restart ---- */

typedef struct client {
    int requests;   /* to make */
    int done;       /* answered */
    int errors;     /* failed tries */
    int max_errors; /* then it gives up (0: never) */
    int id;
    int port; /* the server's (0: ECHO_PORT) */
    /* One request by deadline on fd (NULL: an echo of a line). */
    int (*once)(int fd, const char *msg, weft_time deadline);
    weft_time last; /* when the last answer came */
} client;

/* Makes c->requests requests, each tried again on a new connection
 * until it is answered. */
static int retrying_client(void *arg)
{
    client *c = arg;
    int fd = -1;
    while (c->done < c->requests) {
        if (fd < 0) {
            fd = weft_tcp_connect("server", c->port ? c->port : ECHO_PORT,
                                  weft_now() + 50 * WEFT_MSEC);
            if (fd == -ECANCELED)
                return fd;
        }
        char msg[32];
        snprintf(msg, sizeof msg, "c%d r%d", c->id, c->done);
        int (*once)(int, const char *, weft_time) =
            c->once ? c->once : echo_once;
        int rc = fd < 0 ? fd : once(fd, msg, weft_now() + 50 * WEFT_MSEC);
        if (rc == 0) {
            c->done++;
            c->last = weft_now();
            continue;
        }
        if (rc == -ECANCELED)
            return rc;
        if (++c->errors == c->max_errors)
            return -ETIMEDOUT;
        if (fd >= 0)
            weft_close(fd);
        fd = -1;
        weft_sleep_for(5 * WEFT_MSEC);
    }
    if (fd >= 0)
        weft_close(fd);
    return 0;
}

static int crash_body(void *arg)
{
    (void)arg;
    weft_sim_host *srv = server_up();
    weft_scope *s;
    ASSERT_EQ(weft_scope_open(&s, NULL), 0);
    client c = {.requests = 200, .id = 1};
    ASSERT_EQ(weft_spawn(s, retrying_client, &c), 0);
    ASSERT_EQ(weft_sleep_for(100 * WEFT_MSEC), 0);
    int before = c.done;
    ASSERT(before > 0 && before < c.requests);
    ASSERT_EQ(weft_sim_host_restart(srv), -EBUSY);
    ASSERT_EQ(weft_sim_host_crash(srv), 0);
    /* Down: nothing answers, not even refusals. */
    ASSERT_EQ(weft_sleep_for(200 * WEFT_MSEC), 0);
    ASSERT(c.done <= before + 1);
    ASSERT(c.errors > 0);
    ASSERT_EQ(weft_sim_host_restart(srv), 0);
    ASSERT_EQ(weft_scope_join(s), 0);
    ASSERT_EQ(weft_scope_free(s), 0);
    ASSERT_EQ(c.done, c.requests);
    ASSERT_EQ(weft_sim_host_crash(srv), 0);
    return 0;
}

TEST(a_crashed_host_restarts_and_its_client_reconnects)
{
    ASSERT_EQ(sim_run(T_SEED(21), NULL, crash_body, NULL), 0);
}

/* ---- determinism ---- */

#define NCLIENTS 4

static int many_clients(void *arg)
{
    int *requests = arg;
    weft_sim_host *srv = server_up();
    weft_scope *s;
    ASSERT_EQ(weft_scope_open(&s, NULL), 0);
    client cs[NCLIENTS];
    for (int i = 0; i < NCLIENTS; i++) {
        cs[i] = (client){.requests = *requests, .id = i};
        ASSERT(weft_spawn(s, retrying_client, &cs[i]) >= 0);
    }
    ASSERT_EQ(weft_scope_join(s), 0);
    ASSERT_EQ(weft_scope_free(s), 0);
    char note[64];
    for (int i = 0; i < NCLIENTS; i++) {
        ASSERT_EQ(cs[i].done, *requests);
        snprintf(note, sizeof note, "client %d done at %lld", i,
                 (long long)cs[i].last);
        ASSERT_EQ(weft_sim_log(note), 0);
    }
    ASSERT_EQ(weft_sim_host_crash(srv), 0);
    return 0;
}

/* The log's text, read back from weft_sim_log_write. */
static char *log_text(size_t *len)
{
    FILE *f = tmpfile();
    ASSERT(f != NULL);
    ASSERT_EQ(weft_sim_log_write(fileno(f)), 0);
    long n = ftell(f) >= 0 ? lseek(fileno(f), 0, SEEK_END) : -1;
    ASSERT(n > 0);
    char *buf = malloc((size_t)n);
    ASSERT(buf != NULL);
    ASSERT_EQ(pread(fileno(f), buf, (size_t)n, 0), n);
    fclose(f);
    *len = (size_t)n;
    return buf;
}

TEST(the_same_seed_gives_the_same_log_and_others_differ)
{
    int requests = T_SCALE(20) > 2 ? T_SCALE(20) : 2;
    int nseeds = 6;
    uint64_t hashes[6];
    weft_sim_opts o = {.jitter_ns = 2 * WEFT_MSEC};
    for (int i = 0; i < nseeds; i++) {
        uint64_t seed = T_SEED(100 + (uint64_t)i);
        ASSERT_EQ(sim_run(seed, &o, many_clients, &requests), 0);
        hashes[i] = weft_sim_log_hash();
        size_t n1, n2;
        char *a = log_text(&n1);
        ASSERT_EQ(sim_run(seed, &o, many_clients, &requests), 0);
        ASSERT_EQ(weft_sim_log_hash(), hashes[i]);
        char *b = log_text(&n2);
        ASSERT_EQ(n1, n2);
        ASSERT_EQ(memcmp(a, b, n1), 0);
        free(a);
        free(b);
        for (int j = 0; j < i && !getenv("WEFT_SEED"); j++)
            ASSERT(hashes[j] != hashes[i]); /* WEFT_SEED: one seed for all */
    }
}

/* Without jitter the network is the same for every seed: the order in
 * which the worker runs ready tasks still differs. */
TEST(different_seeds_interleave_differently)
{
    if (getenv("WEFT_SEED"))
        T_SKIP("WEFT_SEED gives both runs one seed");
    int requests = 3;
    weft_sim_opts o = {.jitter_ns = -1};
    ASSERT_EQ(sim_run(T_SEED(1), &o, many_clients, &requests), 0);
    uint64_t a = weft_sim_log_hash();
    ASSERT_EQ(sim_run(T_SEED(2), &o, many_clients, &requests), 0);
    ASSERT(weft_sim_log_hash() != a);
}

/* ---- liveness: faults, then a healed network, and every request ---- */

typedef struct chaos {
    weft_sim_host *srv;
    uint64_t rng;
    weft_time until; /* faults stop then */
    int crashes, partitions, holds;
    /* The server's host runs server_fn(server_arg) on port, answering
     * `once` (NULL: this file's echo server). */
    weft_fn server_fn;
    void *server_arg;
    int port;
    int (*once)(int fd, const char *msg, weft_time deadline);
} chaos;

static uint64_t chaos_rand(chaos *c)
{
    uint64_t z = (c->rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static int chaos_task(void *arg)
{
    chaos *c = arg;
    bool down = false;
    while (weft_now() < c->until) {
        ASSERT_EQ(weft_sleep_for((int64_t)(chaos_rand(c) % 40 + 5) * WEFT_MSEC),
                  0);
        switch (chaos_rand(c) % 4) {
        case 0:
            if (down) {
                ASSERT_EQ(weft_sim_host_restart(c->srv), 0);
            } else {
                ASSERT_EQ(weft_sim_host_crash(c->srv), 0);
                c->crashes++;
            }
            down = !down;
            break;
        case 1:
            ASSERT_EQ(weft_sim_partition(NULL, c->srv), 0);
            c->partitions++;
            break;
        case 2:
            ASSERT_EQ(weft_sim_hold(c->srv, NULL), 0);
            c->holds++;
            break;
        default:
            ASSERT_EQ(weft_sim_repair(NULL, c->srv), 0);
            ASSERT_EQ(weft_sim_release(NULL, c->srv), 0);
        }
    }
    /* Heal: the server up, the link clear. */
    ASSERT_EQ(weft_sim_repair(NULL, c->srv), 0);
    ASSERT_EQ(weft_sim_release(NULL, c->srv), 0);
    if (down)
        ASSERT_EQ(weft_sim_host_restart(c->srv), 0);
    weft_sim_log("healed");
    return 0;
}

static int liveness_body(void *arg)
{
    chaos *ch = arg;
    if (ch->server_fn) {
        ASSERT_EQ(weft_sim_host_new(&ch->srv, "server"), 0);
        ASSERT_EQ(weft_sim_host_start(ch->srv, ch->server_fn, ch->server_arg),
                  0);
    } else {
        ch->srv = server_up();
    }
    ch->until = weft_now() + WEFT_SEC;
    weft_scope *s;
    ASSERT_EQ(weft_scope_open(&s, NULL), 0);
    client cs[NCLIENTS];
    for (int i = 0; i < NCLIENTS; i++) {
        cs[i] = (client){
            .requests = 100, .id = i, .port = ch->port, .once = ch->once};
        ASSERT(weft_spawn(s, retrying_client, &cs[i]) >= 0);
    }
    ASSERT(weft_spawn(s, chaos_task, ch) >= 0);
    ASSERT_EQ(weft_scope_join(s), 0);
    ASSERT_EQ(weft_scope_free(s), 0);
    int errors = 0;
    for (int i = 0; i < NCLIENTS; i++) {
        ASSERT_EQ(cs[i].done, cs[i].requests);
        errors += cs[i].errors;
    }
    ASSERT(errors > 0);
    ASSERT_EQ(weft_sim_host_crash(ch->srv), 0);
    return 0;
}

TEST(after_the_faults_stop_every_request_completes)
{
    weft_sim_opts o = {.reset_permille = 5};
    int seeds = T_SCALE(10) > 2 ? T_SCALE(10) : 2;
    for (int i = 0; i < seeds; i++) {
        chaos ch = {.rng = T_SEED(1000 + (uint64_t)i)};
        ASSERT_EQ(sim_run(1000 + (uint64_t)i, &o, liveness_body, &ch), 0);
        ASSERT(ch.crashes + ch.partitions + ch.holds > 0);
    }
}

/* ---- a crash under a shield ---- */

static int shielded_acceptor(void *arg)
{
    int *rc = arg;
    int lfd = weft_tcp_listen(NULL, 11, 8, 0);
    ASSERT(lfd >= 0);
    weft_scope *s;
    ASSERT_EQ(weft_scope_open(&s, &(weft_scope_opts){.shield = 1}), 0);
    *rc = weft_accept(lfd, NULL, WEFT_NEVER); /* the cancel cannot reach */
    ASSERT_EQ(weft_scope_join(s), 0);
    ASSERT_EQ(weft_scope_free(s), 0);
    ASSERT_EQ(weft_close(lfd), 0);
    return 0;
}

static int shield_body(void *arg)
{
    int *rc = arg;
    weft_sim_host *h;
    ASSERT_EQ(weft_sim_host_new(&h, "server"), 0);
    ASSERT_EQ(weft_sim_host_start(h, shielded_acceptor, rc), 0);
    ASSERT_EQ(weft_sleep_for(WEFT_MSEC), 0);
    ASSERT_EQ(weft_sim_host_crash(h), 0);
    ASSERT_EQ(weft_sleep_for(WEFT_MSEC), 0);
    /* The host's descriptors are gone: a socket call on one fails, and
     * no caller tries it again. */
    ASSERT_EQ(*rc, -EBADF);
    return 0;
}

TEST(a_crash_ends_the_socket_calls_a_cancel_cannot_reach)
{
    int rc = 1;
    ASSERT_EQ(sim_run(T_SEED(4), NULL, shield_body, &rc), 0);
}

/* ---- with a fault plan ---- */

/* Clients that give up, and a server that may fail: under faults any
 * call may fail. Returns the requests answered, or an error. */
static int faulty_clients(void *arg)
{
    (void)arg;
    weft_sim_host *h;
    int rc = weft_sim_host_new(&h, "server");
    if (rc == 0)
        rc = weft_sim_host_start(h, echo_server, NULL);
    weft_scope *s;
    if (rc == 0 && (rc = weft_scope_open(&s, NULL)) != 0)
        weft_sim_host_crash(h); /* else it would serve forever */
    if (rc)
        return rc;
    client cs[NCLIENTS];
    for (int i = 0; i < NCLIENTS; i++) {
        cs[i] = (client){.requests = 5, .id = i, .max_errors = 10};
        weft_spawn(s, retrying_client, &cs[i]);
    }
    weft_scope_join(s);
    weft_scope_free(s);
    weft_sim_host_crash(h);
    int done = 0;
    for (int i = 0; i < NCLIENTS; i++)
        done += cs[i].done;
    return done;
}

TEST(a_fault_plan_in_simulation_is_a_function_of_the_seed)
{
    weft_fault_plan plan = {.active_permille = 1000, .fail_permille = 50};
    weft_config cfg = {.seed = T_SEED(77), .faults = &plan};
    weft_sim_opts o = {0};
    cfg.sim = &o;
    /* The process keeps some memory from its first run (io.c's records of
     * descriptors), which later runs do not allocate again: with faults
     * at allocations, the runs to compare are the second and third (as a
     * replay in a new process is the first of its own). */
    int r1 = weft_run(&cfg, faulty_clients, NULL);
    if (r1 == -ENOTSUP)
        T_SKIP("built without the fault sites (WEFT_FAULTS)");
    r1 = weft_run(&cfg, faulty_clients, NULL);
    uint64_t h = weft_sim_log_hash();
    weft_fault_stats a, b;
    ASSERT_EQ(weft_fault_stats_get(&a), 0);
    ASSERT_EQ(weft_run(&cfg, faulty_clients, NULL), r1);
    ASSERT_EQ(weft_sim_log_hash(), h);
    ASSERT_EQ(weft_fault_stats_get(&b), 0);
    ASSERT_EQ(memcmp(&a, &b, sizeof a), 0);
    uint64_t fired = 0;
    for (int i = 0; i < WEFT_FAULT_SITES; i++)
        fired += a.fired[i];
    ASSERT(fired > 0);
}

/* ---- the examples' servers, in simulation ---- */

/* A GET on an http_server connection, by deadline: its fixed answer. */
static int http_once(int fd, const char *msg, weft_time deadline)
{
    (void)msg;
    static const char req[] = "GET / HTTP/1.1\r\nHost: server\r\n\r\n";
    char back[sizeof OK];
    int rc = weft_write_all(fd, req, sizeof req - 1, NULL, deadline);
    if (rc == 0)
        rc = weft_read_exact(fd, back, sizeof OK - 1, NULL, deadline);
    if (rc == 0 && memcmp(back, OK, sizeof OK - 1) != 0)
        rc = -EBADMSG;
    return rc;
}

TEST(the_examples_echo_server_serves_every_request_once_the_faults_stop)
{
    static int port = 7777;
    weft_sim_opts o = {.reset_permille = 5};
    for (int i = 0; i < 3; i++) {
        chaos ch = {.rng = T_SEED(500 + (uint64_t)i),
                    .server_fn = echo_example_root,
                    .server_arg = &port,
                    .port = port};
        ASSERT_EQ(sim_run(500 + (uint64_t)i, &o, liveness_body, &ch), 0);
        uint64_t h = weft_sim_log_hash();
        ch = (chaos){.rng = 500 + (uint64_t)i,
                     .server_fn = echo_example_root,
                     .server_arg = &port,
                     .port = port};
        ASSERT_EQ(sim_run(500 + (uint64_t)i, &o, liveness_body, &ch), 0);
        ASSERT_EQ(weft_sim_log_hash(), h);
    }
}

TEST(the_examples_http_server_answers_every_request_once_the_faults_stop)
{
    weft_sim_opts o = {.reset_permille = 5};
    for (int i = 0; i < 3; i++) {
        chaos ch = {.rng = T_SEED(600 + (uint64_t)i),
                    .server_fn = http_example_root,
                    .server_arg = (void *)(intptr_t)8080,
                    .port = 8080,
                    .once = http_once};
        ASSERT_EQ(sim_run(600 + (uint64_t)i, &o, liveness_body, &ch), 0);
        ASSERT(ch.crashes + ch.partitions + ch.holds > 0);
    }
}

/* ---- the network's resets ---- */

static int reset_body(void *arg)
{
    (void)arg;
    weft_sim_host *srv = server_up();
    int fd = weft_tcp_connect("server", ECHO_PORT, WEFT_NEVER);
    ASSERT(fd >= 0);
    /* Every segment resets its connection: the write is taken, then both
     * ends see the reset. */
    ASSERT_EQ(weft_write(fd, "abc", 3, WEFT_NEVER), 3);
    char c;
    ASSERT_EQ(weft_read(fd, &c, 1, WEFT_NEVER), -ECONNRESET);
    ASSERT_EQ(weft_read(fd, &c, 1, WEFT_NEVER), 0);
    ASSERT_EQ(weft_write(fd, "abc", 3, WEFT_NEVER), -EPIPE);
    ASSERT_EQ(weft_close(fd), 0);
    ASSERT_EQ(weft_sim_host_crash(srv), 0);
    return 0;
}

TEST(the_network_resets_connections_as_the_seed_says)
{
    weft_sim_opts o = {.reset_permille = 1000};
    ASSERT_EQ(sim_run(T_SEED(9), &o, reset_body, NULL), 0);
}

/* ---- the runtime's random numbers ---- */

static int backoff_body(void *arg)
{
    int64_t *sum = arg;
    weft_retry policy = {
        .max_attempts = 10, .base_ns = WEFT_MSEC, .jitter = WEFT_JITTER_FULL};
    weft_backoff b;
    ASSERT_EQ(weft_backoff_init(&b, &policy), 0);
    *sum = 0;
    for (int i = 0; i < 8; i++) {
        int64_t d = weft_backoff_next(&b);
        ASSERT(d >= 0);
        *sum = *sum * 31 + d;
        char note[32];
        snprintf(note, sizeof note, "backoff %lld", (long long)d);
        ASSERT_EQ(weft_sim_log(note), 0);
        ASSERT_EQ(weft_sleep_for(d), 0);
    }
    return 0;
}

TEST(backoff_jitter_comes_from_the_seed)
{
    int64_t a, b, c;
    ASSERT_EQ(sim_run(T_SEED(31), NULL, backoff_body, &a), 0);
    uint64_t h = weft_sim_log_hash();
    ASSERT_EQ(sim_run(31, NULL, backoff_body, &b), 0);
    ASSERT_EQ(a, b);
    ASSERT_EQ(weft_sim_log_hash(), h);
    if (getenv("WEFT_SEED"))
        return; /* one seed for all runs */
    ASSERT_EQ(sim_run(32, NULL, backoff_body, &c), 0);
    ASSERT(c != a);
}

/* ---- waits on simulated sockets ---- */

static int waits_body(void *arg)
{
    (void)arg;
    weft_sim_host *srv = server_up();
    int fd = weft_tcp_connect("server", ECHO_PORT, WEFT_NEVER);
    ASSERT(fd >= 0);
    weft_time t = weft_now();
    ASSERT_EQ(weft_fd_wait(fd, WEFT_IO_READ, t + 10 * WEFT_MSEC), -ETIMEDOUT);
    ASSERT_EQ(weft_now(), t + 10 * WEFT_MSEC);
    /* The echo makes the socket readable one round trip later. */
    ASSERT_EQ(weft_write(fd, "x", 1, WEFT_NEVER), 1);
    t = weft_now();
    ASSERT_EQ(weft_fd_wait(fd, WEFT_IO_READ, WEFT_NEVER), 0);
    ASSERT(weft_now() - t >= 2 * WEFT_MSEC && weft_now() - t <= 4 * WEFT_MSEC);
    char c;
    ASSERT_EQ(weft_read(fd, &c, 1, WEFT_NEVER), 1);
    /* A select over the socket and a deadline: the echo wins. */
    ASSERT_EQ(weft_write(fd, "y", 1, WEFT_NEVER), 1);
    weft_case cases[2] = {
        {.op = WEFT_OP_READ, .fd = fd},
        {.op = WEFT_OP_DEADLINE, .deadline = weft_now() + WEFT_SEC},
    };
    ASSERT_EQ(weft_select(cases, 2, WEFT_NEVER), 0);
    ASSERT_EQ(cases[0].rc, 0);
    ASSERT_EQ(weft_read(fd, &c, 1, WEFT_NEVER), 1);
    ASSERT_EQ(c, 'y');
    /* Across a partition the deadline wins. */
    ASSERT_EQ(weft_sim_partition(srv, NULL), 0);
    ASSERT_EQ(weft_write(fd, "z", 1, WEFT_NEVER), 1);
    cases[1].deadline = weft_now() + 100 * WEFT_MSEC;
    ASSERT_EQ(weft_select(cases, 2, WEFT_NEVER), 1);
    ASSERT_EQ(weft_close(fd), 0);
    ASSERT_EQ(weft_sim_host_crash(srv), 0);
    return 0;
}

TEST(waits_and_select_on_simulated_sockets)
{
    ASSERT_EQ(sim_run(T_SEED(12), NULL, waits_body, NULL), 0);
}

/* ---- a swarm sweep on the simulated network ---- */

static int sweep_body(void *arg)
{
    (void)arg;
    int done = faulty_clients(NULL); /* faults may fail anything */
    char note[32];
    snprintf(note, sizeof note, "answered %d", done);
    weft_sim_log(note);
    return 0;
}

TEST(a_swarm_sweep_runs_on_the_simulated_network)
{
    weft_sim_opts so = {.reset_permille = 5};
    weft_config cfg = {.sim = &so};
    weft_swarm_opts o = {.name = "sim",
                         .seeds = (uint64_t)(T_SCALE(40) > 4 ? T_SCALE(40) : 4),
                         .check_every = 2,
                         .verbose = -1,
                         .config = &cfg};
    weft_swarm_stats st;
    ASSERT_EQ(weft_swarm_run(&o, sweep_body, NULL, &st), 0);
    ASSERT(st.checked > 0);
}

/* ---- the same log twice ---- */

/* Runs fn twice with seed and o: the same status, and the same event log
 * byte for byte. Returns the status. */
static int twice(uint64_t seed, const weft_sim_opts *o, weft_fn fn, void *arg)
{
    int a = sim_run(seed, o, fn, arg);
    uint64_t h = weft_sim_log_hash();
    size_t n1, n2;
    char *t1 = log_text(&n1);
    ASSERT_EQ(sim_run(seed, o, fn, arg), a);
    ASSERT_EQ(weft_sim_log_hash(), h);
    char *t2 = log_text(&n2);
    ASSERT_EQ(n1, n2);
    ASSERT_EQ(memcmp(t1, t2, n1), 0);
    free(t1);
    free(t2);
    return a;
}

static bool log_has(const char *what)
{
    size_t n;
    char *t = log_text(&n);
    bool has = memmem(t, n, what, strlen(what)) != NULL;
    free(t);
    return has;
}

/* ---- datagrams duplicated and held back ---- */

#define NDGRAMS 200

typedef struct dgram_seen {
    int got[NDGRAMS];
    int dups, overtaken, total;
} dgram_seen;

static int numbered_sink(void *arg)
{
    dgram_seen *d = arg;
    int fd = weft_udp_bind(NULL, 53, 0);
    ASSERT(fd >= 0);
    int last = -1;
    for (;;) {
        int v;
        ptrdiff_t n =
            weft_recvfrom(fd, &v, sizeof v, NULL, weft_now() + 100 * WEFT_MSEC);
        if (n == -ETIMEDOUT)
            break;
        ASSERT_EQ(n, (ptrdiff_t)sizeof v);
        ASSERT(v >= 0 && v < NDGRAMS);
        d->total++;
        d->dups += d->got[v]++ > 0;
        d->overtaken += v < last;
        last = v > last ? v : last;
    }
    weft_close(fd);
    return 0;
}

static int dup_body(void *arg)
{
    dgram_seen *d = arg;
    memset(d, 0, sizeof(*d));
    weft_sim_host *srv;
    ASSERT_EQ(weft_sim_host_new(&srv, "server"), 0);
    ASSERT_EQ(weft_sim_host_start(srv, numbered_sink, d), 0);
    ASSERT_EQ(weft_sleep_for(WEFT_MSEC), 0);
    int fd = weft_udp_bind("0.0.0.0", 0, 0);
    ASSERT(fd >= 0);
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(53)};
    inet_pton(AF_INET, "10.0.0.2", &to.sin_addr);
    for (int i = 0; i < NDGRAMS; i++) {
        ASSERT_EQ(weft_sendto(fd, &i, sizeof i, (struct sockaddr *)&to,
                              sizeof to, WEFT_NEVER),
                  (ptrdiff_t)sizeof i);
        ASSERT_EQ(weft_sleep_for(100 * WEFT_USEC), 0);
    }
    ASSERT_EQ(weft_close(fd), 0);
    return 0; /* the sink ends 100 ms after the last one */
}

TEST(datagrams_are_duplicated_and_held_back_as_the_seed_says)
{
    /* No jitter: without the two faults every datagram comes once, in
     * order. */
    dgram_seen d;
    weft_sim_opts calm = {.jitter_ns = -1};
    ASSERT_EQ(twice(T_SEED(31), &calm, dup_body, &d), 0);
    ASSERT_EQ(d.total, NDGRAMS);
    ASSERT_EQ(d.dups + d.overtaken, 0);
    weft_sim_opts o = {
        .jitter_ns = -1, .dup_permille = 200, .reorder_permille = 200};
    ASSERT_EQ(twice(T_SEED(31), &o, dup_body, &d), 0);
    for (int i = 0; i < NDGRAMS; i++)
        ASSERT(d.got[i] >= 1); /* none lost */
    /* About one in five twice, one in five overtaken. */
    ASSERT(d.dups > NDGRAMS / 20 && d.dups < NDGRAMS / 2);
    ASSERT(d.overtaken > NDGRAMS / 20);
    ASSERT_EQ(d.total, NDGRAMS + d.dups);
    ASSERT(log_has("duplicate dgram"));
    ASSERT(log_has("hold back dgram"));
}

/* ---- writev on a datagram socket: one datagram of every piece ---- */

static int gather_body(void *arg)
{
    (void)arg;
    int rx = weft_udp_bind("127.0.0.1", 53, 0);
    int tx = weft_udp_bind("127.0.0.1", 0, 0);
    ASSERT(rx >= 0 && tx >= 0);
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(53)};
    inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
    ASSERT_EQ(
        weft__netsys_for(tx)->connect(tx, (struct sockaddr *)&to, sizeof to),
        0);
    struct iovec v[3] = {{"ab", 2}, {"cde", 3}, {"f", 1}};
    ASSERT_EQ(weft_writev(tx, v, 3, WEFT_NEVER), 6);
    ASSERT_EQ(weft_writev(tx, v + 2, 1, WEFT_NEVER), 1);
    char buf[16];
    ASSERT_EQ(weft_recvfrom(rx, buf, sizeof buf, NULL, WEFT_NEVER), 6);
    ASSERT_EQ(memcmp(buf, "abcdef", 6), 0);
    ASSERT_EQ(weft_recvfrom(rx, buf, sizeof buf, NULL, WEFT_NEVER), 1);
    ASSERT_EQ(buf[0], 'f');
    /* And a Unix datagram socket's. */
    int urx = weft_unix_dgram_bind("/run/rx");
    int utx = weft_unix_dgram_bind(NULL);
    ASSERT(urx >= 0 && utx >= 0);
    struct sockaddr_un un = {.sun_family = AF_UNIX, .sun_path = "/run/rx"};
    ASSERT_EQ(
        weft__netsys_for(utx)->connect(utx, (struct sockaddr *)&un, sizeof un),
        0);
    ASSERT_EQ(weft_writev(utx, v, 3, WEFT_NEVER), 6);
    ASSERT_EQ(weft_recvfrom(urx, buf, sizeof buf, NULL, WEFT_NEVER), 6);
    ASSERT_EQ(memcmp(buf, "abcdef", 6), 0);
    weft_close(urx);
    weft_close(utx);
    weft_close(rx);
    weft_close(tx);
    return 0;
}

TEST(writev_on_a_datagram_socket_sends_one_datagram_of_every_piece)
{
    ASSERT_EQ(twice(T_SEED(32), NULL, gather_body, NULL), 0);
}

/* ---- a crash leaves its peers' connections half-open ---- */

static int half_open_body(void *arg)
{
    bool restart = *(bool *)arg;
    weft_sim_host *srv = server_up();
    int fd = weft_tcp_connect("server", ECHO_PORT, WEFT_NEVER);
    ASSERT(fd >= 0);
    ASSERT_EQ(echo_once(fd, "before", WEFT_NEVER), 0);
    ASSERT_EQ(weft_sim_host_crash(srv), 0);
    /* Nothing tells the client: its reads wait (a minute here). */
    char c;
    ASSERT_EQ(weft_read(fd, &c, 1, weft_now() + 60 * WEFT_SEC), -ETIMEDOUT);
    /* A write is taken (the kernel buffers it); its segment is sent
     * again until the host answers: the restarted host knows no such
     * connection and resets it; a host that stays down, after the
     * retransmissions, times it out. */
    weft_time t0 = weft_now();
    ASSERT_EQ(weft_write(fd, "after", 5, WEFT_NEVER), 5);
    if (restart) {
        ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0);
        ASSERT_EQ(weft_sim_host_restart(srv), 0);
    }
    ASSERT_EQ(weft_read(fd, &c, 1, WEFT_NEVER),
              restart ? -ECONNRESET : -ETIMEDOUT);
    weft_time took = weft_now() - t0;
    if (restart) /* the retransmission after the restart */
        ASSERT(took > WEFT_SEC && took < 4 * WEFT_SEC);
    else /* 200 ms, doubled at each of eight retransmissions */
        ASSERT(took > 50 * WEFT_SEC && took < 60 * WEFT_SEC);
    ASSERT_EQ(weft_close(fd), 0);
    if (restart)
        ASSERT_EQ(weft_sim_host_crash(srv), 0);
    return 0;
}

TEST(a_crashed_host_leaves_its_peers_connections_half_open)
{
    bool restart = true;
    ASSERT_EQ(twice(T_SEED(33), NULL, half_open_body, &restart), 0);
    ASSERT(log_has("retransmit data"));
    restart = false;
    ASSERT_EQ(twice(T_SEED(33), NULL, half_open_body, &restart), 0);
    ASSERT(log_has("time out data"));
}

/* ---- Unix sockets: paths on a simulated host ---- */

static int unix_echo_server(void *arg)
{
    (void)arg;
    int lfd = weft_unix_listen("/run/echo.sock", 8);
    ASSERT(lfd >= 0);
    /* The path is taken on this host. */
    ASSERT_EQ(weft_unix_listen("/run/echo.sock", 8), -EADDRINUSE);
    int fd = weft_accept(lfd, NULL, WEFT_NEVER);
    if (fd == -ECANCELED) { /* its host crashed */
        weft_close(lfd);
        return 0;
    }
    ASSERT(fd >= 0);
    char buf[64];
    for (;;) {
        ptrdiff_t n = weft_read(fd, buf, sizeof buf, WEFT_NEVER);
        if (n <= 0)
            break;
        ASSERT_EQ(weft_write_all(fd, buf, (size_t)n, NULL, WEFT_NEVER), 0);
    }
    weft_close(fd);
    weft_close(lfd);
    /* Datagrams: one in, its answer to the sender's path. */
    int d = weft_unix_dgram_bind("@dns");
    ASSERT(d >= 0);
    struct sockaddr_storage from;
    ptrdiff_t n = weft_recvfrom(d, buf, sizeof buf, &from, WEFT_NEVER);
    ASSERT_EQ(n, 5);
    struct sockaddr_un *un = (struct sockaddr_un *)&from;
    ASSERT_EQ(un->sun_family, AF_UNIX);
    ASSERT_EQ(strcmp(un->sun_path, "/run/client"), 0);
    ASSERT_EQ(weft_sendto(d, "pong", 4, (struct sockaddr *)&from,
                          sizeof(struct sockaddr_un), WEFT_NEVER),
              4);
    weft_close(d);
    return 0;
}

static int unix_body(void *arg)
{
    (void)arg;
    weft_sim_host *srv;
    ASSERT_EQ(weft_sim_host_new(&srv, "server"), 0);
    ASSERT_EQ(weft_sim_host_start(srv, unix_echo_server, NULL), 0);
    ASSERT_EQ(weft_sleep_for(WEFT_MSEC), 0);
    /* Another host's path: nothing here. */
    ASSERT_EQ(weft_unix_connect("/run/echo.sock", WEFT_NEVER), -ENOENT);
    ASSERT_EQ(weft_sim_host_crash(srv), 0);
    return 0;
}

static int unix_client(void *arg)
{
    (void)arg;
    int fd = weft_unix_connect("/run/echo.sock", WEFT_NEVER);
    ASSERT_EQ(fd < 0 ? fd : 0, 0);
    weft_time t0 = weft_now();
    for (int i = 0; i < 10; i++)
        ASSERT_EQ(echo_once(fd, "over a unix socket", WEFT_NEVER), 0);
    ASSERT_EQ(weft_now(), t0); /* no network: no latency */
    ASSERT_EQ(weft_shutdown(fd, SHUT_WR), 0);
    char c;
    ASSERT_EQ(weft_read(fd, &c, 1, WEFT_NEVER), 0); /* the server closed */
    ASSERT_EQ(weft_close(fd), 0);
    /* Its path is free again once it is closed: no file stays. */
    int again = weft_unix_listen("/run/echo.sock", 1);
    ASSERT(again >= 0);
    weft_close(again);
    int d = weft_unix_dgram_bind("/run/client");
    ASSERT(d >= 0);
    struct sockaddr_un to = {.sun_family = AF_UNIX};
    to.sun_path[0] = '\0'; /* "@dns": abstract */
    memcpy(to.sun_path + 1, "dns", 3);
    socklen_t tolen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 4);
    ASSERT_EQ(
        weft_sendto(d, "ping!", 5, (struct sockaddr *)&to, tolen, WEFT_NEVER),
        5);
    char buf[8];
    ASSERT_EQ(weft_recvfrom(d, buf, sizeof buf, NULL, WEFT_NEVER), 4);
    ASSERT_EQ(memcmp(buf, "pong", 4), 0);
    weft_close(d);
    return 0;
}

static int unix_box(void *arg)
{
    (void)arg;
    weft_scope *s;
    ASSERT_EQ(weft_scope_open(&s, NULL), 0);
    ASSERT(weft_spawn(s, unix_echo_server, NULL) >= 0);
    ASSERT_EQ(weft_sleep_for(WEFT_MSEC), 0);
    ASSERT(weft_spawn(s, unix_client, NULL) >= 0);
    ASSERT_EQ(weft_scope_join(s), 0);
    ASSERT_EQ(weft_scope_free(s), 0);
    return 0;
}

static int unix_both(void *arg)
{
    ASSERT_EQ(unix_body(arg), 0);
    weft_sim_host *h;
    ASSERT_EQ(weft_sim_host_new(&h, "box"), 0);
    ASSERT_EQ(weft_sim_host_start(h, unix_box, NULL), 0);
    return 0;
}

TEST(unix_stream_and_datagram_sockets_are_paths_on_a_simulated_host)
{
    ASSERT_EQ(twice(T_SEED(34), NULL, unix_both, NULL), 0);
    ASSERT(log_has("accept unix box:/run/echo.sock"));
    ASSERT(log_has("send unix box:@dns len 5"));
}

/* ---- shrinking the network's faults ---- */

/* Pings the udp echo twenty times, each answered within 20 ms: a lost
 * datagram or a partition fails the run. */
static int fragile_body(void *arg)
{
    (void)arg;
    weft_sim_host *srv;
    ASSERT_EQ(weft_sim_host_new(&srv, "server"), 0);
    ASSERT_EQ(weft_sim_host_start(srv, udp_echo, NULL), 0);
    ASSERT_EQ(weft_sleep_for(WEFT_MSEC), 0);
    int fd = weft_udp_bind("0.0.0.0", 0, 0);
    ASSERT(fd >= 0);
    int failed = 0;
    for (int i = 0; i < 20; i++) {
        if (i == 10)
            ASSERT_EQ(weft_sim_partition(NULL, srv), 0);
        if (i == 12)
            ASSERT_EQ(weft_sim_repair(NULL, srv), 0);
        failed += udp_ping(fd, weft_now() + 20 * WEFT_MSEC) != 4;
    }
    ASSERT_EQ(weft_close(fd), 0);
    ASSERT_EQ(weft_sim_host_crash(srv), 0);
    if (failed)
        weft_swarm_fail("a ping went unanswered");
    return 0;
}

TEST(shrinking_switches_the_networks_fault_classes_off_one_at_a_time)
{
    ASSERT_EQ(strcmp(weft_sim_fault_name(WEFT_SIM_PARTITION), "partition"), 0);
    ASSERT(weft_sim_fault_name(WEFT_SIM_FAULTS) == NULL);
    weft_sim_opts so = {.loss_permille = 100, .reset_permille = 1};
    weft_config cfg = {.sim = &so};
    weft_swarm_opts o = {.name = "net",
                         .seeds = 1,
                         .first_seed = T_SEED(5),
                         .shrink = 1,
                         .sites = 1u << WEFT_FAULT_READ,
                         .max_permille = 1,
                         .verbose = -1,
                         .config = &cfg};
    unsigned loss = WEFT_SWARM_NET(WEFT_SIM_LOSS),
             reset = WEFT_SWARM_NET(WEFT_SIM_RESET),
             part = WEFT_SWARM_NET(WEFT_SIM_PARTITION);
    weft_swarm_profile p;
    ASSERT_EQ(weft_swarm_profile_get(&o, 1, &p), 0);
    ASSERT_EQ(p.sites & WEFT_SWARM_NET_ALL, loss | reset | part);
    weft_swarm_stats st;
    ASSERT_EQ(weft_swarm_run(&o, fragile_body, NULL, &st), 1);
    ASSERT_EQ(st.failed, 1);
    ASSERT_EQ(st.failed_sites & WEFT_SWARM_NET_ALL, loss | reset | part);
    /* Loss alone fails it too (a ping in twenty is lost, most seeds), so
     * the loss class goes first, and what is left is the partition. */
    ASSERT_EQ(st.shrunk, 1);
    ASSERT_EQ(st.shrunk_sites, part);
    /* Replays: with none of the network's faults it passes; with the
     * partition alone, or loss alone, it fails; the runs' logs say which
     * were off. */
    uint64_t seed = st.first_failed_seed;
    ASSERT_EQ(weft_swarm_replay(&o, seed, 1, 0, NULL, fragile_body, NULL), 0);
    ASSERT(log_has("partition main server (off)"));
    ASSERT_EQ(weft_swarm_replay(&o, seed, 1, part, NULL, fragile_body, NULL),
              -EPROTO);
    ASSERT(!log_has("(off)"));
    unsigned shrunk;
    ASSERT_EQ(weft_swarm_shrink(&o, seed, fragile_body, NULL, &shrunk), 1);
    ASSERT_EQ(shrunk, part);
    /* Outside simulation a profile has no network classes. */
    o.config = NULL;
    ASSERT_EQ(weft_swarm_profile_get(&o, 1, &p), 0);
    ASSERT_EQ(p.sites & WEFT_SWARM_NET_ALL, 0u);
}

/* The lines of the last run's log that contain what, in order. */
static char *log_lines(const char *what)
{
    size_t n;
    char *t = log_text(&n);
    char *out = calloc(1, n + 1);
    ASSERT(out != NULL);
    size_t at = 0;
    for (char *line = t; line < t + n;) {
        char *end = memchr(line, '\n', (size_t)(t + n - line));
        size_t len = end ? (size_t)(end - line) + 1 : (size_t)(t + n - line);
        if (memmem(line, len, what, strlen(what))) {
            memcpy(out + at, line, len);
            at += len;
        }
        line += len;
    }
    free(t);
    return out;
}

TEST(a_fault_class_switched_off_leaves_the_others_draws_in_place)
{
    /* A jitter below the datagrams' spacing: each one draws its latency,
     * and none overtakes another by it. */
    dgram_seen d;
    weft_sim_opts o = {.jitter_ns = 50 * WEFT_USEC,
                       .dup_permille = 200,
                       .reorder_permille = 200};
    ASSERT_EQ(sim_run(T_SEED(35), &o, dup_body, &d), 0);
    char *held = log_lines("hold back");
    ASSERT(strlen(held) > 0);
    ASSERT(d.dups > 0);
    /* Duplication off: no copy, and the same datagrams held back at the
     * same instants. */
    atomic_store(&weft__sim_off, 1u << WEFT_SIM_DUP);
    ASSERT_EQ(sim_run(T_SEED(35), &o, dup_body, &d), 0);
    atomic_store(&weft__sim_off, 0u);
    ASSERT_EQ(d.dups, 0);
    char *again = log_lines("hold back");
    ASSERT_EQ(strcmp(held, again), 0);
    free(again);
    /* Holding back off: none held back, none overtaken. */
    atomic_store(&weft__sim_off, 1u << WEFT_SIM_REORDER);
    ASSERT_EQ(sim_run(T_SEED(35), &o, dup_body, &d), 0);
    atomic_store(&weft__sim_off, 0u);
    ASSERT_EQ(d.overtaken, 0);
    again = log_lines("hold back");
    ASSERT_EQ(strlen(again), 0u);
    free(again);
    free(held);
}
