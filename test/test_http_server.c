/* SPDX-License-Identifier: MIT */
/*
 * examples/http_server.c's connection loop and its deadlines, on the
 * virtual clock, so every time is exact: a request must arrive within the
 * request timeout of its first byte however it trickles (head or body), a
 * client that never reads is closed at the write timeout, an idle
 * keep-alive connection at the idle timeout, and a patient client whose
 * every request arrives in time is never cut. The server's loop (serve)
 * runs on one end of a socketpair, the client on the other; every test
 * checks that no descriptor is left open.
 */
#include "t.h"

#include <sys/socket.h>

#define main http_server_main
#include "../examples/http_server.c"
#undef main
#include "../examples/http_parse.c"

#define REQ "GET / HTTP/1.1\r\nHost: x\r\n\r\n"
#define GUARD (1000 * WEFT_SEC) /* fails a test that would hang */

static const char ANSWER_408[] =
    "HTTP/1.1 408 Request Timeout\r\nContent-Length: 0\r\n"
    "Connection: close\r\n\r\n";

/* One connection: serve() on fd[0], the test's client on fd[1]. */
struct conn_test {
    int fd[2];
    weft_time ended; /* when serve returned */
    int (*client)(struct conn_test *);
};

static int server_task(void *arg)
{
    struct conn_test *t = arg;
    int rc = serve((void *)(intptr_t)t->fd[0]);
    t->ended = weft_now();
    return rc;
}

static int conn_root(void *arg)
{
    struct conn_test *t = arg;
    weft_scope *s;
    ASSERT_EQ(weft_scope_open(&s, NULL), 0);
    ASSERT_EQ(weft_scope_set_deadline(s, weft_now() + GUARD), 0);
    ASSERT(weft_spawn(s, server_task, t) >= 0);
    int rc = t->client(t);
    ASSERT_EQ(weft_close(t->fd[1]), 0);
    ASSERT_EQ(weft_scope_join(s), 0);
    ASSERT_EQ(weft_scope_free(s), 0);
    return rc;
}

/* Runs client against serve() with these timeouts (seconds). */
static struct conn_test *run(int (*client)(struct conn_test *), int64_t request,
                             int64_t write, int64_t idle)
{
    static struct conn_test t;
    t = (struct conn_test){.client = client};
    timeout.request = request * WEFT_SEC;
    timeout.write = write * WEFT_SEC;
    timeout.idle = idle * WEFT_SEC;
    int before = t_proc_count("/proc/self/fd");
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0,
                         t.fd),
              0);
    ASSERT_EQ(t_run_virtual(1, conn_root, &t), 0);
    ASSERT_EQ(t_proc_count("/proc/self/fd"), before);
    return &t;
}

static void send_str(int fd, const char *s)
{
    ASSERT_EQ(weft_write_all(fd, s, strlen(s), NULL, WEFT_NEVER), 0);
}

/* Reads exactly what `expect` says, within the guard. */
static void expect(int fd, const char *what, size_t n)
{
    char buf[256];
    ASSERT(n <= sizeof buf);
    ASSERT_EQ(weft_read_exact(fd, buf, n, NULL, weft_now() + GUARD), 0);
    ASSERT(memcmp(buf, what, n) == 0);
}
#define EXPECT(fd, lit) expect((fd), (lit), sizeof(lit) - 1)
#define EXPECT_OK(fd) expect((fd), OK, sizeof OK - 1)

/* Waits for the end of the stream; returns when it came. */
static weft_time expect_eof(int fd)
{
    char c;
    ASSERT_EQ(weft_read(fd, &c, 1, weft_now() + GUARD), 0);
    return weft_now();
}

/* ---- a slow head: one byte every 300 ms ---- */

struct trickle {
    int fd;
    const char *bytes; /* sent one at a time, over and over */
};

static int trickler(void *arg)
{
    struct trickle *tr = arg;
    for (size_t i = 0;; i++) {
        if (weft_sleep_for(300 * WEFT_MSEC))
            return 0; /* cancelled: the test is over */
        char c = tr->bytes[i % strlen(tr->bytes)];
        if (weft_write(tr->fd, &c, 1, WEFT_NEVER) != 1)
            return 0; /* the server closed */
    }
}

/* A keep-alive connection's second request trickles in from t = 5 s: it
 * is dropped at 5 + 2 s, with a 408, although every read brings a byte
 * long before any per-read deadline. */
static int slow_head_client(struct conn_test *t)
{
    int fd = t->fd[1];
    send_str(fd, REQ);
    EXPECT_OK(fd);
    ASSERT_EQ(weft_sleep_for(5 * WEFT_SEC), 0);
    send_str(fd, "GET / HTTP/1.1\r\nHost: x\r\nX-Slow: ");
    weft_scope *s;
    ASSERT_EQ(weft_scope_open(&s, NULL), 0);
    struct trickle tr = {fd, "abcdefgh"};
    ASSERT(weft_spawn(s, trickler, &tr) >= 0);
    EXPECT(fd, ANSWER_408);
    ASSERT_EQ(expect_eof(fd), 7 * WEFT_SEC);
    ASSERT_EQ(weft_scope_cancel(s), 0);
    ASSERT_EQ(weft_scope_join(s), -ECANCELED);
    ASSERT_EQ(weft_scope_free(s), 0);
    return 0;
}

TEST(request_deadline_from_first_byte_not_per_read)
{
    struct conn_test *t = run(slow_head_client, 2, 10, 60);
    ASSERT_EQ(t->ended, 7 * WEFT_SEC);
}

/* A body counts in its request: a POST whose head comes at once is
 * answered, and dropped when its body is not all there 2 s after the
 * accept (a connection's first request counts from the accept), with no
 * 408: the request had its answer. */
static int slow_body_client(struct conn_test *t)
{
    int fd = t->fd[1];
    send_str(fd, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n");
    weft_scope *s;
    ASSERT_EQ(weft_scope_open(&s, NULL), 0);
    struct trickle tr = {fd, "x"};
    ASSERT(weft_spawn(s, trickler, &tr) >= 0);
    EXPECT_OK(fd);
    ASSERT_EQ(expect_eof(fd), 2 * WEFT_SEC);
    ASSERT_EQ(weft_scope_cancel(s), 0);
    ASSERT_EQ(weft_scope_join(s), -ECANCELED);
    ASSERT_EQ(weft_scope_free(s), 0);
    return 0;
}

TEST(request_deadline_covers_the_body)
{
    ASSERT_EQ(run(slow_body_client, 2, 10, 60)->ended, 2 * WEFT_SEC);
}

/* A connection that sends nothing is closed at the request timeout, with
 * no answer (there was no request). */
static int silent_client(struct conn_test *t)
{
    ASSERT_EQ(expect_eof(t->fd[1]), 3 * WEFT_SEC);
    return 0;
}

TEST(silent_connection_closed_at_request_timeout)
{
    ASSERT_EQ(run(silent_client, 3, 10, 60)->ended, 3 * WEFT_SEC);
}

/* After an answer, a keep-alive connection may idle for the idle timeout,
 * then is closed without an answer. */
static int idle_client(struct conn_test *t)
{
    int fd = t->fd[1];
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0);
    send_str(fd, REQ);
    EXPECT_OK(fd);
    ASSERT_EQ(expect_eof(fd), 1 * WEFT_SEC + 5 * WEFT_SEC);
    return 0;
}

TEST(idle_connection_closed_at_idle_timeout)
{
    ASSERT_EQ(run(idle_client, 2, 10, 5)->ended, 6 * WEFT_SEC);
}

/* A client that pipelines requests and never reads: the server's writes
 * stop when the socket is full, and the connection is closed at the write
 * timeout, counted from the read that brought the requests. */
static int non_reading_client(struct conn_test *t)
{
    int small = 4096;
    ASSERT_EQ(setsockopt(t->fd[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof small),
              0);
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0);
    static char reqs[300 * (sizeof REQ - 1)];
    for (size_t i = 0; i < 300; i++)
        memcpy(reqs + i * (sizeof REQ - 1), REQ, sizeof REQ - 1);
    ASSERT_EQ(weft_write_all(t->fd[1], reqs, sizeof reqs, NULL, WEFT_NEVER), 0);
    ASSERT_EQ(weft_sleep_for(10 * WEFT_SEC), 0); /* and never reads */
    return 0;
}

TEST(non_reading_client_closed_at_write_timeout)
{
    ASSERT_EQ(run(non_reading_client, 2, 4, 60)->ended,
              1 * WEFT_SEC + 4 * WEFT_SEC);
}

/* Every request arrives within 2 s of its first byte, over 12 s in all,
 * with idle gaps of 1 s: all are answered, and the connection stays. */
static int patient_client(struct conn_test *t)
{
    int fd = t->fd[1];
    for (int i = 0; i < 4; i++) {
        send_str(fd, "GET / HTTP/1.1\r\nHo");
        ASSERT_EQ(weft_sleep_for(1900 * WEFT_MSEC), 0);
        send_str(fd, "st: x\r\n\r\nGET / HTT"); /* and the next begins */
        EXPECT_OK(fd);
        ASSERT_EQ(weft_sleep_for(1900 * WEFT_MSEC), 0);
        send_str(fd, "P/1.1\r\nHost: x\r\n\r\n");
        EXPECT_OK(fd);
        ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0);
    }
    ASSERT_EQ(weft_now(), 4 * (1900 + 1900 + 1000) * WEFT_MSEC);
    ASSERT_EQ(weft_shutdown(fd, SHUT_WR), 0);
    ASSERT_EQ(expect_eof(fd), weft_now()); /* closed as the client left */
    return 0;
}

TEST(patient_client_is_never_cut)
{
    ASSERT_EQ(run(patient_client, 2, 10, 60)->ended,
              4 * (1900 + 1900 + 1000) * WEFT_MSEC);
}
