/* SPDX-License-Identifier: MIT */
/*
 * http_slow_clients: attacks examples/http_server with slow clients on
 * 127.0.0.1 and checks that it keeps serving and lets go of them.
 * scripts/http-check.sh runs it.
 *
 *   http_slow_clients SERVER [SLOW [NONREADING]]   default 1000 and 1000
 *
 * It starts SERVER as a child process with short deadlines (-r 2 -w 2
 * -i 30 0: the idle timeout is long, so only the request and the write
 * deadlines can end the attack), then opens
 *   - NONREADING connections with a 4 KiB receive buffer and 536-byte
 *     segments, each pipelining requests until its socket is full (or
 *     64 KiB), then never reading the answers: only a write deadline
 *     drops them;
 *   - SLOW slowloris connections, each sending a request line, a Host
 *     and the start of a header, then one more byte every 100 ms: every
 *     read brings a byte, so only a deadline per request drops them.
 * While they are open it counts the server's socket descriptors (in
 * /proc/PID/fd) and makes requests as a normal client, each of which must
 * get its exact answers within PROMPT_SEC. The server's socket count must
 * come back to what it was before the attack within RECOVERY_SEC of the
 * attack's set-up; then every slowloris connection must have been closed
 * by the server (after a 408 or nothing), normal requests work again, and
 * the server exits 0 on SIGTERM. Exits 0 if all of that holds, 1
 * otherwise; an alarm bounds the run to 60 s. Raises RLIMIT_NOFILE (for
 * itself and the server) as far as it may.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define REQ "GET / HTTP/1.1\r\nHost: x\r\n\r\n"
#define ANSWER                                                                 \
    "HTTP/1.1 200 OK\r\nContent-Length: 13\r\nContent-Type: text/plain\r\n"    \
    "\r\nHello, World!"
#define ANSWER_408                                                             \
    "HTTP/1.1 408 Request Timeout\r\nContent-Length: 0\r\n"                    \
    "Connection: close\r\n\r\n"
#define NONREADING_MAX (64 * 1024) /* bytes of requests, at most */
#define RECOVERY_SEC 15            /* after the attack is set up */
#define PROMPT_SEC 2               /* for a normal client's answers */

static pid_t server = -1;
static int port;
static int server_err = -1; /* the server's stderr */

static void fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "http_slow_clients: FAIL: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    if (server > 0)
        kill(server, SIGKILL);
    exit(1);
}

static void on_alarm(int sig)
{
    (void)sig;
    static const char msg[] = "http_slow_clients: FAIL: 60 s alarm\n";
    if (server > 0)
        kill(server, SIGKILL);
    if (write(2, msg, sizeof msg - 1) < 0) {
    }
    _exit(1);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
    while (nanosleep(&ts, &ts) && errno == EINTR) {
    }
}

/* The server's socket descriptors (/proc/PID/fd): the listener and the
 * connections. Its other descriptors are the runtime's, and a worker
 * opens its poller on its first I/O, which may come during the attack. */
static int server_fds(void)
{
    char path[64], link[64];
    snprintf(path, sizeof path, "/proc/%d/fd", (int)server);
    DIR *d = opendir(path);
    if (!d)
        fail("opendir %s: %s", path, strerror(errno));
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        ssize_t k = readlinkat(dirfd(d), e->d_name, link, sizeof link - 1);
        n += k > 7 && !memcmp(link, "socket:", 7);
    }
    closedir(d);
    return n;
}

/* As many descriptors as we may have, at least `need` or fail. */
static void raise_nofile(rlim_t need)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl))
        fail("getrlimit: %s", strerror(errno));
    if (rl.rlim_max < need) {
        rl.rlim_max = need; /* root may */
    }
    rl.rlim_cur = rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &rl) || rl.rlim_cur < need)
        fail("cannot have %lu descriptors: %s", (unsigned long)need,
             strerror(errno));
}

/* Starts the server on port 0 and reads "LISTEN <port>" from its stderr. */
static void start_server(const char *bin)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC))
        fail("pipe: %s", strerror(errno));
    server = fork();
    if (server < 0)
        fail("fork: %s", strerror(errno));
    if (server == 0) {
        dup2(p[1], 2);
        execl(bin, bin, "-r", "2", "-w", "2", "-i", "30", "0", (char *)NULL);
        _exit(127);
    }
    close(p[1]);
    char buf[256];
    size_t have = 0;
    double end = now_s() + 10;
    while (!port) {
        struct pollfd pf = {p[0], POLLIN, 0};
        if (now_s() > end || poll(&pf, 1, 100) < 0)
            fail("server did not say LISTEN");
        if (!pf.revents)
            continue;
        ssize_t n = read(p[0], buf + have, sizeof buf - 1 - have);
        if (n <= 0)
            fail("server exited before LISTEN");
        have += (size_t)n;
        buf[have] = 0;
        char *l = strstr(buf, "LISTEN ");
        if (l && strchr(l, '\n'))
            port = atoi(l + 7);
    }
    server_err = p[0]; /* what else it says is shown at the end */
}

/* Copies what the server wrote on stderr after LISTEN to ours. */
static void server_said(void)
{
    char buf[4096];
    ssize_t n;
    fcntl(server_err, F_SETFL, O_NONBLOCK);
    while ((n = read(server_err, buf, sizeof buf)) > 0)
        if (write(2, buf, (size_t)n) < 0)
            break;
}

static struct sockaddr_in server_addr(void)
{
    struct sockaddr_in sin = {.sin_family = AF_INET,
                              .sin_port = htons((uint16_t)port)};
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return sin;
}

/* A non-blocking TCP connection to the server, rcvbuf > 0: that receive
 * buffer. Waits (up to 5 s) until it is connected. */
static int dial(int rcvbuf)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        fail("socket: %s", strerror(errno));
    if (rcvbuf > 0) {
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &rcvbuf, sizeof rcvbuf);
    }
    struct sockaddr_in sin = server_addr();
    if (connect(fd, (struct sockaddr *)&sin, sizeof sin) &&
        errno != EINPROGRESS)
        fail("connect: %s", strerror(errno));
    struct pollfd pf = {fd, POLLOUT, 0};
    int err = 0;
    socklen_t len = sizeof err;
    if (poll(&pf, 1, 5000) != 1 ||
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) || err)
        fail("connect did not complete: %s", strerror(err));
    return fd;
}

/* Sends all of s, waiting at most until `end`. */
static bool send_all(int fd, const char *s, size_t n, double end)
{
    while (n) {
        ssize_t k = send(fd, s, n, MSG_NOSIGNAL);
        if (k > 0) {
            s += k;
            n -= (size_t)k;
            continue;
        }
        if (k < 0 && errno != EAGAIN)
            return false;
        struct pollfd pf = {fd, POLLOUT, 0};
        int ms = (int)((end - now_s()) * 1000);
        if (ms <= 0 || poll(&pf, 1, ms) != 1)
            return false;
    }
    return true;
}

/* Shows what the kernel knows of the listener and of the server's side
 * of the connection from client_port (-1: of every connection, the first
 * 20), with queues and timers, on stderr. */
static void show_connection(int client_port)
{
    char cmd[256];
    if (client_port < 0)
        snprintf(cmd, sizeof cmd,
                 "ss -tanioH '( sport = :%d )' | head -n 40 >&2", port);
    else
        snprintf(cmd, sizeof cmd,
                 "ss -tanioH '( sport = :%d and ( dport = :%d or "
                 "state listening ) )' >&2",
                 port, client_port);
    if (system(cmd)) {
    }
}

static int local_port(int fd)
{
    struct sockaddr_in sin;
    socklen_t len = sizeof sin;
    getsockname(fd, (struct sockaddr *)&sin, &len);
    return ntohs(sin.sin_port);
}

/* A normal client: two pipelined requests on a new connection; both
 * answers must arrive, exact, within PROMPT_SEC. Returns the time taken, or
 * fails. */
static double normal_request(const char *when)
{
    double t0 = now_s(), end = t0 + PROMPT_SEC;
    int fd = dial(0);
    static const char want[] = ANSWER ANSWER;
    char got[sizeof want];
    size_t have = 0;
    if (!send_all(fd, REQ REQ, sizeof(REQ REQ) - 1, end))
        fail("%s: normal client could not send: %s", when, strerror(errno));
    while (have < sizeof want - 1) {
        struct pollfd pf = {fd, POLLIN, 0};
        int ms = (int)((end - now_s()) * 1000);
        if (ms <= 0 || poll(&pf, 1, ms) != 1) {
            show_connection(local_port(fd));
            fail("%s: normal client: no answer within %d s (%zu bytes)", when,
                 PROMPT_SEC, have);
        }
        ssize_t k = recv(fd, got + have, sizeof want - 1 - have, 0);
        if (k <= 0)
            fail("%s: normal client: connection ended (%s)", when,
                 k ? strerror(errno) : "EOF");
        have += (size_t)k;
    }
    if (memcmp(got, want, sizeof want - 1))
        fail("%s: normal client: wrong answer", when);
    close(fd);
    return now_s() - t0;
}

/* ---- the attackers ---- */

struct attacker {
    int fd;
    bool closed; /* the server closed it (we saw EOF or a reset) */
};

static void slowloris_start(struct attacker *a)
{
    static const char start[] = "GET / HTTP/1.1\r\nHost: x\r\nX-Slow: ";
    a->fd = dial(0);
    a->closed = false;
    if (!send_all(a->fd, start, sizeof start - 1, now_s() + 1))
        fail("slowloris: could not send its start");
}

/* One more byte; notices when the server has closed. */
static void slowloris_trickle(struct attacker *a)
{
    if (a->closed)
        return;
    char buf[sizeof ANSWER_408];
    ssize_t k = recv(a->fd, buf, sizeof buf, MSG_DONTWAIT | MSG_PEEK);
    if (k == 0 || (k < 0 && errno != EAGAIN)) {
        a->closed = true;
        return;
    }
    if (send(a->fd, "a", 1, MSG_NOSIGNAL | MSG_DONTWAIT) < 0 && errno != EAGAIN)
        a->closed = true;
}

/* After the server let go: it sent nothing but (maybe) a 408, then
 * closed. */
static void slowloris_check(struct attacker *a)
{
    char buf[256];
    size_t have = 0;
    for (;;) {
        ssize_t k = recv(a->fd, buf + have, sizeof buf - have, MSG_DONTWAIT);
        if (k > 0) {
            have += (size_t)k;
            if (have == sizeof buf)
                break;
            continue;
        }
        if (k == 0 || errno == ECONNRESET || errno == EPIPE) {
            a->closed = true;
            break;
        }
        if (!a->closed) { /* a reset already taken by a send */
            fail("slowloris: still open after the deadline (%s)",
                 strerror(errno));
        }
        break;
    }
    if (have &&
        (have != sizeof ANSWER_408 - 1 || memcmp(buf, ANSWER_408, have)))
        fail("slowloris: got %zu bytes that are not a 408", have);
}

/* Connects with a 4 KiB receive buffer and a maximum segment size of
 * 536 bytes: over loopback (MTU 64 KiB) the server's send buffer would
 * grow to megabytes, which a client that never reads must fill before the
 * server's write waits; with 536-byte segments it stays below 100 KiB. */
static void nonreading_start(struct attacker *a)
{
    a->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int small = 4096, mss = 536;
    if (a->fd < 0 ||
        setsockopt(a->fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small) ||
        setsockopt(a->fd, IPPROTO_TCP, TCP_MAXSEG, &mss, sizeof mss))
        fail("non-reading client: socket: %s", strerror(errno));
    struct sockaddr_in sin = server_addr();
    if (connect(a->fd, (struct sockaddr *)&sin, sizeof sin) &&
        errno != EINPROGRESS)
        fail("connect: %s", strerror(errno));
    a->closed = false;
}

/* Pipelines requests on every non-reading connection, round after round,
 * until each has sent NONREADING_MAX bytes or its socket stays full (the
 * server stopped reading because it cannot write). Returns the bytes
 * sent. */
static size_t nonreading_fill(struct attacker *a, int n)
{
    static char reqs[64 * (sizeof REQ - 1)];
    for (size_t i = 0; i < 64; i++)
        memcpy(reqs + i * (sizeof REQ - 1), REQ, sizeof REQ - 1);
    size_t *sent = calloc((size_t)n + 1, sizeof *sent), total = 0;
    if (!sent)
        fail("out of memory");
    double end = now_s() + 5;
    for (int idle = 0; idle < 5 && now_s() < end;) {
        bool progress = false;
        for (int i = 0; i < n; i++) {
            if (sent[i] >= NONREADING_MAX)
                continue;
            size_t off = sent[i] % sizeof reqs; /* one stream of requests */
            ssize_t k = send(a[i].fd, reqs + off, sizeof reqs - off,
                             MSG_NOSIGNAL | MSG_DONTWAIT);
            if (k > 0) {
                sent[i] += (size_t)k;
                total += (size_t)k;
                progress = true;
            } else if (k < 0 && errno != EAGAIN && errno != ENOTCONN) {
                fail("non-reading client: send: %s", strerror(errno));
            }
        }
        idle = progress ? 0 : idle + 1;
        if (!progress)
            sleep_ms(10);
    }
    free(sent);
    return total;
}

int main(int argc, char **argv)
{
    if (argc < 2 || argc > 4) {
        fprintf(stderr,
                "usage: http_slow_clients SERVER [SLOW [NONREADING]]\n");
        return 2;
    }
    int nslow = argc > 2 ? atoi(argv[2]) : 1000;
    int nnon = argc > 3 ? atoi(argv[3]) : 1000;
    if (nslow < 0 || nnon < 0 || nslow + nnon > 20000)
        fail("bad counts");
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGALRM, on_alarm);
    alarm(60);
    raise_nofile((rlim_t)(nslow + nnon) + 256);
    start_server(argv[1]);

    /* Warm up (a worker's first connection may open descriptors of its
     * own), then count. */
    for (int i = 0; i < 4; i++)
        normal_request("before the attack");
    sleep_ms(100);
    int base = server_fds();

    double t0 = now_s();
    struct attacker *slow = calloc((size_t)nslow + 1, sizeof *slow);
    struct attacker *non = calloc((size_t)nnon + 1, sizeof *non);
    if (!slow || !non)
        fail("out of memory");
    for (int i = 0; i < nnon; i++)
        nonreading_start(&non[i]);
    size_t bytes = nonreading_fill(non, nnon);
    for (int i = 0; i < nslow; i++)
        slowloris_start(&slow[i]);
    double setup = now_s() - t0;

    /* The attack: trickle every 100 ms, count the server's sockets (the
     * last normal client's is gone by then), make a normal request. */
    int peak = 0, normal = 0;
    double worst = 0, recovered = 0;
    while (now_s() - t0 < setup + RECOVERY_SEC) {
        for (int i = 0; i < nslow; i++)
            slowloris_trickle(&slow[i]);
        int fds = server_fds();
        peak = fds > peak ? fds : peak;
        if (fds <= base) {
            recovered = now_s() - t0;
            break;
        }
        double l = normal_request("during the attack");
        worst = l > worst ? l : worst;
        normal++;
        sleep_ms(100);
    }
    printf("http_slow_clients: %d slowloris and %d non-reading clients "
           "(%zu KiB of requests) opened in %.2f s; server sockets: "
           "%d before, %d at the peak\n",
           nslow, nnon, bytes / 1024, setup, base, peak);
    printf("http_slow_clients: %d normal requests during the attack, "
           "slowest %.1f ms\n",
           normal, worst * 1000);
    if (peak < base + (nslow + nnon) / 2)
        fail("the attack did not land: %d descriptors at the peak", peak);
    if (!recovered) {
        show_connection(-1); /* which are left: queues and timers */
        fail("%d server sockets %d s after the attack was set up (%d "
             "before)",
             server_fds(), RECOVERY_SEC, base);
    }
    printf("http_slow_clients: back to %d server sockets %.2f s after the "
           "attack began\n",
           server_fds(), recovered);
    for (int i = 0; i < nslow; i++)
        slowloris_check(&slow[i]);
    for (int i = 0; i < nslow; i++)
        close(slow[i].fd);
    for (int i = 0; i < nnon; i++)
        close(non[i].fd);
    free(slow);
    free(non);
    for (int i = 0; i < 4; i++)
        normal_request("after the attack");

    kill(server, SIGTERM);
    int status;
    double end = now_s() + 10;
    while (waitpid(server, &status, WNOHANG) == 0) {
        if (now_s() > end)
            fail("server still running 10 s after SIGTERM");
        sleep_ms(20);
    }
    server = -1;
    server_said();
    if (!WIFEXITED(status) || WEXITSTATUS(status))
        fail("server exit status %d after SIGTERM", status);
    printf("http_slow_clients: ok\n");
    return 0;
}
