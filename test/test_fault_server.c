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

#ifdef FAULT_SERVER_TLS
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <unistd.h>
#endif

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
    ptrdiff_t n =
        weft_read(c->fd, c->buf + c->have, sizeof c->buf - c->have, deadline);
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
        ASSERT_EQ(weft_sleep_for(WEFT_MSEC), 0);
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

/* Reads until the server closes: what it sent is in c->buf. */
static void read_to_end(client *c)
{
    ptrdiff_t n;
    while ((n = fill(c, DL)) > 0)
        ;
    ASSERT_EQ(n, 0);
}

/* The answers that are not HTTP: exactly their bytes, then the end. */
static void not_http(fault_server *f)
{
    client *c = connect_to(f);
    get(c, "/garbage");
    read_to_end(c);
    const char *g = "HTTP/1.1 abc Garbage\r\nContent-Length: 3\r\n\r\nok\n";
    ASSERT_EQ(c->have, strlen(g));
    ASSERT(!memcmp(c->buf, g, c->have));
    client_close(c);

    c = connect_to(f);
    get(c, "/binary");
    read_to_end(c);
    ASSERT_EQ(c->have, 1024);
    for (int i = 0; i < 1024; i++)
        ASSERT_EQ((unsigned char)c->buf[i], i & 0xff);
    client_close(c);

    /* A good head and a good first chunk, then a size that is not hex. */
    c = connect_to(f);
    get(c, "/bad_chunk");
    read_to_end(c);
    const char *head = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n"
                       "Content-Type: application/octet-stream\r\n\r\n";
    const char *body = "10\r\nabcdefghijklmnop\r\nzz\r\n";
    ASSERT_EQ(c->have, strlen(head) + strlen(body));
    ASSERT(!memcmp(c->buf, head, strlen(head)));
    ASSERT(!memcmp(c->buf + strlen(head), body, strlen(body)));
    client_close(c);
    ASSERT_EQ(stats(f).by_kind[FAULT_GARBAGE], 1);
    ASSERT_EQ(stats(f).by_kind[FAULT_BINARY], 1);
    ASSERT_EQ(stats(f).by_kind[FAULT_BAD_CHUNK], 1);
}
TEST(not_http)
{
    with_server(not_http);
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
    /* Stop once the server has read the request (a socket closed with
     * input unread sends an RST, not a FIN). */
    for (int i = 0; i < 10000 && !stats(f).by_kind[FAULT_SLOW]; i++)
        ASSERT_EQ(weft_sleep_for(WEFT_MSEC), 0);
    ASSERT_EQ(stats(f).by_kind[FAULT_SLOW], 1);
    int port = fault_server_port(f);
    weft_time t0 = weft_now();
    fault_server_stop(f);
    ASSERT(weft_now() - t0 < WEFT_SEC); /* /slow did not finish its sleep */
    client *all[] = {idle, stalled, slow, fresh};
    for (int i = 0; i < 4; i++) {
        ptrdiff_t n = fill(all[i], DL);
        if (n != 0)
            T_FAIL("client %d: %td", i, n);
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

/* ======================= HTTPS ======================================== */

#ifdef FAULT_SERVER_TLS
/* The certificate scripts/test-cert.sh makes, in a directory of its own. */
static char cert_dir[64];

static void make_cert(void)
{
    char cmd[512];
    strcpy(cert_dir, "/tmp/weft_fault_server_XXXXXX");
    ASSERT(mkdtemp(cert_dir) != NULL);
    snprintf(cmd, sizeof cmd, "%s/scripts/test-cert.sh %s", WEFT_SOURCE_DIR,
             cert_dir);
    ASSERT_EQ(system(cmd), 0);
}

static void remove_cert(void)
{
    char path[128];
    snprintf(path, sizeof path, "%s/cert.pem", cert_dir);
    ASSERT_EQ(unlink(path), 0);
    snprintf(path, sizeof path, "%s/key.pem", cert_dir);
    ASSERT_EQ(unlink(path), 0);
    ASSERT_EQ(rmdir(cert_dir), 0);
}

/* After SSL_* returned r <= 0: waits for what it wants. */
static int tls_wait(SSL *ssl, int fd, int r)
{
    int e = SSL_get_error(ssl, r);
    if (e == SSL_ERROR_WANT_READ)
        return weft_fd_wait(fd, WEFT_IO_READ, DL);
    if (e == SSL_ERROR_WANT_WRITE)
        return weft_fd_wait(fd, WEFT_IO_WRITE, DL);
    return -EPROTO;
}

/* GET /ok over ssl, and its answer. */
static void tls_get_ok(SSL *ssl, int fd)
{
    static const char req[] = "GET /ok HTTP/1.1\r\nHost: localhost\r\n\r\n";
    static const char want[] = "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n";
    char buf[512];
    size_t have = 0;
    int r;
    while ((r = SSL_write(ssl, req, sizeof req - 1)) <= 0)
        ASSERT_EQ(tls_wait(ssl, fd, r), 0);
    ASSERT_EQ(r, sizeof req - 1);
    while (!memmem(buf, have, "\r\n\r\nok\n", 7)) {
        r = SSL_read(ssl, buf + have, (int)(sizeof buf - have));
        if (r <= 0)
            ASSERT_EQ(tls_wait(ssl, fd, r), 0);
        else
            have += (size_t)r;
    }
    ASSERT(!memcmp(buf, want, sizeof want - 1));
}

static int https_root(void *arg)
{
    char cert[128], key[128];
    snprintf(cert, sizeof cert, "%s/cert.pem", cert_dir);
    snprintf(key, sizeof key, "%s/key.pem", cert_dir);
    weft_scope *s = scope_open();
    fault_server *f;
    fault_server_opts o = {.cert_file = cert, .key_file = key};
    ASSERT_EQ(fault_server_start(s, &o, &f), 0);

    /* A client that checks the certificate, for the name localhost. */
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    ASSERT(ctx != NULL);
    ASSERT_EQ(SSL_CTX_load_verify_locations(ctx, cert, NULL), 1);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    int fd = weft_tcp_connect("127.0.0.1", fault_server_port(f), DL);
    ASSERT(fd >= 0);
    SSL *ssl = SSL_new(ctx);
    ASSERT(ssl != NULL);
    ASSERT_EQ(SSL_set1_host(ssl, "localhost"), 1);
    ASSERT_EQ(SSL_set_tlsext_host_name(ssl, "localhost"), 1);
    ASSERT_EQ(SSL_set_fd(ssl, fd), 1);
    int r;
    while ((r = SSL_connect(ssl)) != 1)
        ASSERT_EQ(tls_wait(ssl, fd, r), 0);
    ASSERT_EQ(SSL_get_verify_result(ssl), X509_V_OK);
    tls_get_ok(ssl, fd); /* two requests, one connection */
    tls_get_ok(ssl, fd);
    /* Our close_notify, then the server's. */
    ASSERT(SSL_shutdown(ssl) >= 0);
    char b[64];
    while ((r = SSL_read(ssl, b, sizeof b)) <= 0 &&
           SSL_get_error(ssl, r) != SSL_ERROR_ZERO_RETURN)
        ASSERT_EQ(tls_wait(ssl, fd, r), 0);
    ASSERT(r <= 0);
    SSL_free(ssl);
    SSL_CTX_free(ctx);
    ERR_clear_error();
    ASSERT_EQ(weft_close(fd), 0);

    /* Plain HTTP to it: the handshake fails, the connection closes. */
    client *c = connect_to(f);
    get(c, "/ok");
    ptrdiff_t n;
    while ((n = fill(c, DL)) > 0) /* perhaps an alert first */
        ;
    ASSERT(n == 0 || n == -ECONNRESET);
    client_close(c);

    wait_open(f, 0);
    fault_server_stats st = stats(f);
    ASSERT_EQ(st.accepted, 2);
    ASSERT_EQ(st.tls_handshakes, 1);
    ASSERT_EQ(st.tls_failures, 1);
    ASSERT_EQ(st.by_kind[FAULT_OK], 2);
    fault_server_stop(f);
    scope_end(s);
    return 0;
}

#else
/* Built without OpenSSL: certificates are refused. */
static int https_root(void *arg)
{
    fault_server *f;
    fault_server_opts o = {.cert_file = "c.pem", .key_file = "k.pem"};
    ASSERT_EQ(fault_server_start(NULL, &o, &f), -ENOTSUP);
    return 0;
}
static void make_cert(void)
{
}
static void remove_cert(void)
{
}
#endif

TEST(https)
{
    make_cert();
    int fds = t_proc_count("/proc/self/fd");
    ASSERT_EQ(t_run_virtual(2, https_root, NULL), 0);
    ASSERT_EQ(t_proc_count("/proc/self/fd"), fds);
    remove_cert();
}
