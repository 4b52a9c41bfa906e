/* SPDX-License-Identifier: MIT */
/*
 * The HTTP fault server (test/fault_server.h), talked to with weft's own
 * sockets and hand-written requests, in one runtime on the virtual clock:
 * /slow and /stall take virtual seconds and no real time. Every test
 * checks that the runtime leaves no descriptor open.
 */
#include "t.h"
#include "weft.h"

#include <stdbool.h>
#include <strings.h>
#include <time.h>

#include "fault_server.h"

/* A generous deadline for what must happen (virtual time). */
#define DL (weft_now() + 60 * WEFT_SEC)

/* ======================= a tiny HTTP client =========================== */

typedef struct client {
    int fd;
    char buf[65536]; /* received, not yet used: buf[0..have) */
    size_t have;
} client;

typedef struct resp {
    int status;
    long length;      /* Content-Length, or -1 */
    long retry_after; /* Retry-After, or -1 */
    bool chunked;     /* Transfer-Encoding: chunked */
    bool close;       /* Connection: close */
    char body[256];   /* the body's first bytes, NUL-terminated */
    long total;       /* the body's length */
    bool pattern;     /* byte i of the body is 'a' + i % 26 */
} resp;

static client *connect_to(fault_server *f)
{
    client *c = calloc(1, sizeof *c);
    ASSERT(c != NULL);
    c->fd = weft_tcp_connect("127.0.0.1", fault_server_port(f), DL);
    ASSERT(c->fd >= 0);
    return c;
}

static void client_close(client *c)
{
    ASSERT_EQ(weft_close(c->fd), 0);
    free(c);
}

static void send_str(client *c, const char *s)
{
    ASSERT_EQ(weft_write_all(c->fd, s, strlen(s), NULL, DL), 0);
}

/* GET path, keep-alive. */
static void get(client *c, const char *path)
{
    char req[512];
    snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: t\r\n\r\n", path);
    send_str(c, req);
}

/* Reads more into buf: weft_read's result. */
static ptrdiff_t fill(client *c, weft_time deadline)
{
    ASSERT(c->have < sizeof c->buf);
    ptrdiff_t n = weft_read(c->fd, c->buf + c->have, sizeof c->buf - c->have,
                            deadline);
    if (n > 0)
        c->have += (size_t)n;
    return n;
}

static void consume(client *c, size_t n)
{
    memmove(c->buf, c->buf + n, c->have - n);
    c->have -= n;
}

/* 0, -EPIPE at the end of the stream, or weft_read's error. */
static int fill_err(ptrdiff_t n)
{
    return n == 0 ? -EPIPE : (int)n;
}

/* Takes n bytes of body into r. */
static int body_bytes(client *c, resp *r, long n, weft_time deadline)
{
    while (n > 0) {
        if (c->have == 0) {
            ptrdiff_t k = fill(c, deadline);
            if (k <= 0)
                return fill_err(k);
        }
        size_t k = c->have < (size_t)n ? c->have : (size_t)n;
        for (size_t i = 0; i < k; i++) {
            size_t at = (size_t)r->total + i;
            if (at < sizeof r->body - 1)
                r->body[at] = c->buf[i];
            if (c->buf[i] != (char)('a' + at % 26))
                r->pattern = false;
        }
        r->total += (long)k;
        n -= (long)k;
        consume(c, k);
    }
    return 0;
}

/* One line, without its CRLF, into out. */
static int line(client *c, char *out, size_t cap, weft_time deadline)
{
    char *e;
    while (!(e = memmem(c->buf, c->have, "\r\n", 2))) {
        ptrdiff_t k = fill(c, deadline);
        if (k <= 0)
            return fill_err(k);
    }
    size_t n = (size_t)(e - c->buf);
    ASSERT(n < cap);
    memcpy(out, c->buf, n);
    out[n] = '\0';
    consume(c, n + 2);
    return 0;
}

/* Reads one response (head only for HEAD). 0, or a read's error. */
static int read_resp_until(client *c, resp *r, weft_time deadline)
{
    char l[1024];
    memset(r, 0, sizeof *r);
    r->length = r->retry_after = -1;
    r->pattern = true;
    int err = line(c, l, sizeof l, deadline);
    if (err)
        return err;
    ASSERT_EQ(sscanf(l, "HTTP/1.1 %d ", &r->status), 1);
    while ((err = line(c, l, sizeof l, deadline)) == 0 && l[0]) {
        if (!strncasecmp(l, "Content-Length: ", 16))
            r->length = atol(l + 16);
        else if (!strncasecmp(l, "Retry-After: ", 13))
            r->retry_after = atol(l + 13);
        else if (!strcasecmp(l, "Transfer-Encoding: chunked"))
            r->chunked = true;
        else if (!strcasecmp(l, "Connection: close"))
            r->close = true;
    }
    if (err)
        return err;
    if (!r->chunked)
        return r->length > 0 ? body_bytes(c, r, r->length, deadline) : 0;
    for (;;) {
        if ((err = line(c, l, sizeof l, deadline)) != 0)
            return err;
        char *end;
        long n = strtol(l, &end, 16);
        ASSERT(end != l && *end == '\0' && n >= 0);
        if (n == 0)
            break;
        if ((err = body_bytes(c, r, n, deadline)) != 0 ||
            (err = line(c, l, sizeof l, deadline)) != 0)
            return err;
        ASSERT_EQ(l[0], '\0'); /* the CRLF after a chunk's data */
    }
    err = line(c, l, sizeof l, deadline); /* no trailers: the last CRLF */
    ASSERT(err || l[0] == '\0');
    return err;
}

static void read_resp(client *c, resp *r)
{
    ASSERT_EQ(read_resp_until(c, r, DL), 0);
}

/* Waits (virtual milliseconds) until the server has n connections open:
 * it sees a client's close only when it reads. */
static void wait_open(fault_server *f, long n)
{
    fault_server_stats st;
    for (int i = 0; i < 10000; i++) {
        fault_server_stats_get(f, &st);
        if (st.open == n)
            return;
        ASSERT_EQ(weft_sleep(WEFT_MSEC), 0);
    }
    T_FAIL("%ld connections open, not %ld", st.open, n);
}

static fault_server_stats stats(fault_server *f)
{
    fault_server_stats st;
    fault_server_stats_get(f, &st);
    return st;
}

/* ======================= the frame ==================================== */

typedef void (*body_fn)(fault_server *f);

static int root(void *arg)
{
    body_fn body = *(body_fn *)arg;
    weft_scope *s = scope_open();
    fault_server *f;
    ASSERT_EQ(fault_server_start(s, NULL, &f), 0);
    ASSERT(fault_server_port(f) > 0);
    body(f);
    wait_open(f, 0);
    fault_server_stop(f);
    scope_end(s);
    return 0;
}

/* Runs body against a fresh server, on the virtual clock, and checks that
 * no descriptor is left open. */
static void with_server(body_fn body)
{
    int fds = t_proc_count("/proc/self/fd");
    ASSERT_EQ(t_run_virtual(2, root, &body), 0);
    ASSERT_EQ(t_proc_count("/proc/self/fd"), fds);
}

/* ======================= tests ======================================== */

static void ok_keepalive(fault_server *f)
{
    client *c = connect_to(f);
    resp r;
    for (int i = 0; i < 2; i++) {
        get(c, "/ok");
        read_resp(c, &r);
        ASSERT_EQ(r.status, 200);
        ASSERT_EQ(r.length, 3);
        ASSERT(!strcmp(r.body, "ok\n"));
        ASSERT(!r.close);
    }
    fault_server_stats st = stats(f);
    ASSERT_EQ(st.accepted, 1);
    ASSERT_EQ(st.open, 1);
    ASSERT_EQ(st.requests, 2);
    ASSERT_EQ(st.by_kind[FAULT_OK], 2);
    client_close(c);
}
TEST(ok_keepalive)
{
    with_server(ok_keepalive);
}

static void connection_close(fault_server *f)
{
    client *c = connect_to(f);
    resp r;
    send_str(c, "GET /ok HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    read_resp(c, &r);
    ASSERT_EQ(r.status, 200);
    ASSERT(r.close);
    ASSERT_EQ(fill(c, DL), 0); /* then the end of the stream */
    client_close(c);
}
TEST(connection_close)
{
    with_server(connection_close);
}

static void status(fault_server *f)
{
    client *c = connect_to(f);
    resp r;
    get(c, "/status/429?retry_after=3");
    read_resp(c, &r);
    ASSERT_EQ(r.status, 429);
    ASSERT_EQ(r.retry_after, 3);
    ASSERT(!strcmp(r.body, "429\n"));
    get(c, "/status/503?x=1&retry_after=0");
    read_resp(c, &r);
    ASSERT_EQ(r.status, 503);
    ASSERT_EQ(r.retry_after, 0);
    get(c, "/status/500");
    read_resp(c, &r);
    ASSERT_EQ(r.status, 500);
    ASSERT_EQ(r.retry_after, -1);
    get(c, "/status/204");
    read_resp(c, &r);
    ASSERT_EQ(r.status, 204);
    ASSERT_EQ(r.length, -1);
    get(c, "/status/99");
    read_resp(c, &r);
    ASSERT_EQ(r.status, 400);
    get(c, "/status/429?retry_after=x");
    read_resp(c, &r);
    ASSERT_EQ(r.status, 400);
    ASSERT_EQ(r.retry_after, -1);
    get(c, "/nothing/here");
    read_resp(c, &r);
    ASSERT_EQ(r.status, 404);
    ASSERT(!strcmp(r.body, "not found\n"));
    fault_server_stats st = stats(f);
    ASSERT_EQ(st.by_kind[FAULT_STATUS], 6);
    ASSERT_EQ(st.by_kind[FAULT_NOT_FOUND], 1);
    ASSERT_EQ(st.accepted, 1);
    client_close(c);
}
TEST(status)
{
    with_server(status);
}

static void bad_request(fault_server *f)
{
    client *c = connect_to(f);
    resp r;
    send_str(c, "GET /ok HTTP/1.1\r\n\r\n"); /* no Host */
    read_resp(c, &r);
    ASSERT_EQ(r.status, 400);
    ASSERT(r.close);
    ASSERT_EQ(fill(c, DL), 0);
    ASSERT_EQ(stats(f).bad, 1);
    ASSERT_EQ(stats(f).requests, 0);
    client_close(c);
}
TEST(bad_request)
{
    with_server(bad_request);
}

static void reset(fault_server *f)
{
    client *c = connect_to(f);
    get(c, "/reset");
    ASSERT_EQ(fill(c, DL), -ECONNRESET);
    client_close(c);
    wait_open(f, 0);
    ASSERT_EQ(stats(f).resets, 1);
    ASSERT_EQ(stats(f).by_kind[FAULT_RESET], 1);
}
TEST(reset)
{
    with_server(reset);
}

static void close_no_answer(fault_server *f)
{
    client *c = connect_to(f);
    get(c, "/close");
    ASSERT_EQ(fill(c, DL), 0); /* the end, and nothing before it */
    ASSERT_EQ(c->have, 0);
    client_close(c);
    ASSERT_EQ(stats(f).resets, 0);
}
TEST(close_no_answer)
{
    with_server(close_no_answer);
}

static double real_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void stall(fault_server *f)
{
    client *c = connect_to(f);
    resp r;
    get(c, "/stall/1000");
    /* The head and half the body come; the rest never does. */
    double real = real_seconds();
    weft_time t0 = weft_now();
    ASSERT_EQ(read_resp_until(c, &r, t0 + 60 * WEFT_SEC), -ETIMEDOUT);
    ASSERT_EQ(r.status, 200);
    ASSERT_EQ(r.length, 1000);
    ASSERT_EQ(r.total, 500);
    ASSERT(r.pattern);
    ASSERT(weft_now() >= t0 + 60 * WEFT_SEC);
    /* The virtual clock jumped: a minute of waiting took no minute. */
    ASSERT(real_seconds() - real < 30);
    ASSERT_EQ(stats(f).open, 1);
    client_close(c); /* and the stalled connection ends */
}
TEST(stall)
{
    with_server(stall);
}

static void slow(fault_server *f)
{
    client *c = connect_to(f);
    resp r;
    weft_time t0 = weft_now();
    get(c, "/slow/5000");
    read_resp(c, &r);
    ASSERT_EQ(r.status, 200);
    ASSERT(!strcmp(r.body, "ok\n"));
    weft_time took = weft_now() - t0;
    ASSERT(took >= 5 * WEFT_SEC);
    ASSERT(took < 5 * WEFT_SEC + WEFT_SEC / 2);
    client_close(c);
}
TEST(slow)
{
    with_server(slow);
}

static void bytes(fault_server *f)
{
    client *c = connect_to(f);
    resp r;
    get(c, "/bytes/10000000");
    read_resp(c, &r);
    ASSERT_EQ(r.status, 200);
    ASSERT_EQ(r.length, 10000000);
    ASSERT_EQ(r.total, 10000000);
    ASSERT(r.pattern);
    get(c, "/bytes/0");
    read_resp(c, &r);
    ASSERT_EQ(r.length, 0);
    get(c, "/bytes/67108865"); /* over 64 MiB */
    read_resp(c, &r);
    ASSERT_EQ(r.status, 400);
    send_str(c, "HEAD /bytes/5000 HTTP/1.1\r\nHost: t\r\n\r\n");
    ASSERT_EQ(line(c, r.body, sizeof r.body, DL), 0);
    ASSERT(!strcmp(r.body, "HTTP/1.1 200 OK"));
    /* The head ends, and no body follows: the next answer is /ok's. */
    while (line(c, r.body, sizeof r.body, DL) == 0 && r.body[0])
        ;
    get(c, "/ok");
    read_resp(c, &r);
    ASSERT(!strcmp(r.body, "ok\n"));
    ASSERT_EQ(stats(f).accepted, 1);
    client_close(c);
}
TEST(bytes)
{
    with_server(bytes);
}

static void chunked(fault_server *f)
{
    client *c = connect_to(f);
    resp r;
    get(c, "/chunked/40000");
    read_resp(c, &r);
    ASSERT_EQ(r.status, 200);
    ASSERT(r.chunked);
    ASSERT_EQ(r.length, -1);
    ASSERT_EQ(r.total, 40000);
    ASSERT(r.pattern);
    get(c, "/chunked/0");
    read_resp(c, &r);
    ASSERT(r.chunked);
    ASSERT_EQ(r.total, 0);
    /* The framing ended where it should: the connection goes on. */
    get(c, "/ok");
    read_resp(c, &r);
    ASSERT(!strcmp(r.body, "ok\n"));
    ASSERT_EQ(stats(f).by_kind[FAULT_CHUNKED], 2);
    client_close(c);
}
TEST(chunked)
{
    with_server(chunked);
}

static void echo(fault_server *f)
{
    client *c = connect_to(f);
    resp r;
    send_str(c, "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 11\r\n\r\n"
                "hello");
    send_str(c, " world");
    read_resp(c, &r);
    ASSERT_EQ(r.status, 200);
    ASSERT_EQ(r.length, 11);
    ASSERT(!strcmp(r.body, "hello world"));
    /* A body sent to another path is read and dropped. */
    send_str(c, "POST /ok HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n\r\nabc");
    read_resp(c, &r);
    ASSERT(!strcmp(r.body, "ok\n"));
    client_close(c);
}
TEST(echo)
{
    with_server(echo);
}

static void flaky(fault_server *f)
{
    client *c = connect_to(f);
    resp r;
    for (int i = 0; i < 4; i++) {
        get(c, "/flaky/a/2");
        read_resp(c, &r);
        ASSERT_EQ(r.status, i < 2 ? 503 : 200);
        ASSERT_EQ(r.retry_after, i < 2 ? 0 : -1);
    }
    get(c, "/flaky/b/1?n=1"); /* another key, counted apart */
    read_resp(c, &r);
    ASSERT_EQ(r.status, 503);
    get(c, "/flaky/b/1?n=2");
    read_resp(c, &r);
    ASSERT_EQ(r.status, 200);
    get(c, "/flaky/bad!/1");
    read_resp(c, &r);
    ASSERT_EQ(r.status, 400);
    client_close(c);
    /* /flaky_reset: the first K connections are reset. */
    for (int i = 0; i < 3; i++) {
        c = connect_to(f);
        get(c, "/flaky_reset/a/2");
        if (i < 2) {
            ASSERT_EQ(fill(c, DL), -ECONNRESET);
        } else {
            read_resp(c, &r);
            ASSERT_EQ(r.status, 200);
        }
        client_close(c);
    }
    wait_open(f, 0);
    fault_server_stats st = stats(f);
    ASSERT_EQ(st.resets, 2);
    ASSERT_EQ(st.by_kind[FAULT_FLAKY], 7);
    ASSERT_EQ(st.by_kind[FAULT_FLAKY_RESET], 3);
}
TEST(flaky)
{
    with_server(flaky);
}

/* fault_server_stop ends connections in every state. */
static int stop_root(void *arg)
{
    weft_scope *s = scope_open();
    fault_server *f;
    resp r;
    ASSERT_EQ(fault_server_start(s, NULL, &f), 0);
    client *idle = connect_to(f), *stalled = connect_to(f);
    client *slow = connect_to(f), *fresh = connect_to(f);
    get(idle, "/ok");
    read_resp(idle, &r);
    get(stalled, "/stall/100");
    ASSERT_EQ(read_resp_until(stalled, &r, weft_now() + WEFT_SEC), -ETIMEDOUT);
    get(slow, "/slow/100000");
    wait_open(f, 4);
    int port = fault_server_port(f);
    weft_time t0 = weft_now();
    fault_server_stop(f);
    ASSERT(weft_now() - t0 < WEFT_SEC); /* /slow did not finish its sleep */
    client *all[] = {idle, stalled, slow, fresh};
    for (int i = 0; i < 4; i++) {
        ASSERT_EQ(fill(all[i], DL), 0);
        client_close(all[i]);
    }
    ASSERT_EQ(weft_tcp_connect("127.0.0.1", port, DL), -ECONNREFUSED);
    scope_end(s);
    return 0;
}
TEST(stop)
{
    int fds = t_proc_count("/proc/self/fd");
    ASSERT_EQ(t_run_virtual(2, stop_root, NULL), 0);
    ASSERT_EQ(t_proc_count("/proc/self/fd"), fds);
}

/* Cancelling the server's scope ends it too; stop then only frees it. */
static int cancel_root(void *arg)
{
    weft_scope *s = scope_open();
    fault_server *f;
    resp r;
    ASSERT_EQ(fault_server_start(s, NULL, &f), 0);
    client *c = connect_to(f);
    get(c, "/stall/100");
    ASSERT_EQ(read_resp_until(c, &r, weft_now() + WEFT_SEC), -ETIMEDOUT);
    ASSERT_EQ(weft_scope_cancel(s), 0);
    ASSERT_EQ(weft_scope_join(s), -ECANCELED);
    ASSERT_EQ(fill(c, DL), 0);
    client_close(c);
    ASSERT_EQ(stats(f).open, 0);
    fault_server_stop(f);
    ASSERT_EQ(weft_scope_free(s), 0);
    return 0;
}
TEST(scope_cancel)
{
    int fds = t_proc_count("/proc/self/fd");
    ASSERT_EQ(t_run_virtual(2, cancel_root, NULL), 0);
    ASSERT_EQ(t_proc_count("/proc/self/fd"), fds);
}

static int opts_root(void *arg)
{
    fault_server *f = (fault_server *)1;
    fault_server_opts o = {.cert_file = "/nonexistent/cert.pem"};
    ASSERT_EQ(fault_server_start(NULL, NULL, NULL), -EINVAL);
    ASSERT_EQ(fault_server_start(NULL, &o, &f), -EINVAL); /* no key */
    ASSERT(f == NULL);
    o.key_file = "/nonexistent/key.pem";
    int err = fault_server_start(NULL, &o, &f);
    ASSERT(err == -ENOENT || err == -ENOTSUP);
    o = (fault_server_opts){.host = "127.0.0.1", .port = 0};
    ASSERT_EQ(fault_server_start(NULL, &o, &f), 0);
    fault_server *g;
    o.port = fault_server_port(f); /* taken */
    ASSERT_EQ(fault_server_start(NULL, &o, &g), -EADDRINUSE);
    fault_server_stop(f);
    fault_server_stop(NULL);
    return 0;
}
TEST(opts)
{
    int fds = t_proc_count("/proc/self/fd");
    ASSERT_EQ(t_run_virtual(1, opts_root, NULL), 0);
    ASSERT_EQ(t_proc_count("/proc/self/fd"), fds);
}
