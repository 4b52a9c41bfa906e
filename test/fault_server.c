/* SPDX-License-Identifier: MIT */
/*
 * fault_server: see fault_server.h.
 *
 * One task accepts; each connection is a task of the acceptor's WEFT_SERVE
 * scope, which reads a request (examples/http_parse.c finds its head and
 * framing), reads its body, and routes its path. Everything that waits
 * (reads, writes, /slow's sleep, /stall's wait for the client to go) is a
 * weft call with a deadline or a cancellation point, so the server's time
 * is the runtime's and fault_server_stop ends it by cancelling.
 *
 * TLS goes through two memory BIOs rather than a socket BIO: OpenSSL then
 * never touches the socket, and the ciphertext moves with weft_read and
 * weft_write_all. So it is written with MSG_NOSIGNAL (a socket BIO
 * write()s, and a client that has gone would raise SIGPIPE in the test
 * process), and every wait is weft's, with its deadline and cancellation:
 * SSL_ERROR_WANT_READ means "read more from the socket"; with memory BIOs
 * OpenSSL never wants to write.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "fault_server.h"

#include <errno.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "http_parse.h"

#ifdef FAULT_SERVER_TLS
#include <openssl/err.h>
#include <openssl/ssl.h>
#endif

#define MAX_LEN (64L << 20)          /* /bytes, /stall, /chunked */
#define MAX_SLOW_MS 3600000L         /* /slow */
#define MAX_RETRY_AFTER 86400L       /* ?retry_after= */
#define CHUNK (16 * 1024)            /* bytes per write of a body */
#define PATTERN 26                   /* the body pattern's period */
#define KEYS_MAX 1024                /* /flaky keys per server */
#define KEY_MAX 63                   /* bytes of a key */
#define HANDSHAKE_NS (10 * WEFT_SEC) /* accept to end of TLS handshake */
#define CONN_STACK (256 * 1024)      /* a TLS connection's task stack */

/* What a request leaves the connection to do. */
enum action {
    KEEP,  /* answered: read the next request */
    CLOSE, /* answered, or nothing to answer: close (TLS: close_notify) */
    RESET, /* close with an RST */
};

/* A /flaky or /flaky_reset key and how many requests named it. */
struct flaky_key {
    char key[KEY_MAX + 2]; /* 'f' (/flaky) or 'r' (/flaky_reset), the key */
    long seen;             /* requests so far */
};

struct fault_server {
    int lfd;                   /* the listener: the acceptor closes it */
    int port;                  /* its port */
    weft_task_handle acceptor; /* joined by fault_server_stop */
#ifdef FAULT_SERVER_TLS
    SSL_CTX *ctx; /* NULL: plain HTTP; shared by the connections */
#endif
    /* The counters (fault_server_stats), added to by every task. */
    atomic_long accepted, open, requests, by_kind[FAULT_KINDS], bad, resets,
        tls_handshakes, tls_failures;
    weft_mutex keys_lock;   /* guards keys and nkeys */
    struct flaky_key *keys; /* KEYS_MAX of them, nkeys in use */
    int nkeys;
    /* 'a' + i % 26: any body is a slice of it. Written before the
     * acceptor starts, read only afterwards. */
    char pattern[CHUNK + PATTERN];
};

/* One connection: its task's state, on the heap (the buffers would not
 * fit a task's stack). Only that task touches it. */
struct conn {
    fault_server *f;
    int fd;
#ifdef FAULT_SERVER_TLS
    SSL *ssl;               /* NULL: plain HTTP */
    BIO *rbio, *wbio;       /* ciphertext in and out (SSL owns them) */
    char net[CHUNK + 1024]; /* ciphertext on its way */
#endif
    char in[HTTP_IN_SIZE]; /* received, not yet used: in[0..have) */
    size_t have;
    char target[HTTP_MAX_HEADER + 1]; /* this request's target, then its
                                         path alone (NUL-terminated) */
    char out[CHUNK + 32];             /* a chunk with its framing */
};

/* What the route needs to know of one request. */
struct req {
    const char *path;  /* the target up to '?' */
    const char *query; /* after '?', or "" */
    bool head_only;    /* HEAD: no body in the answer */
    bool close;        /* the client asked to close after this one */
    long retry_after;  /* ?retry_after=S, or -1 */
    char *body;        /* the request's body (malloc'd), or NULL */
    size_t body_len;
};

static void add(atomic_long *c, long n)
{
    atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}

/* ======================= I/O, plain or TLS =========================== */

#ifdef FAULT_SERVER_TLS
/* Writes out whatever OpenSSL has put in wbio. 0 or weft_write_all's
 * error. */
static int tls_flush(struct conn *c, weft_time deadline)
{
    int n;
    while ((n = BIO_read(c->wbio, c->net, (int)sizeof c->net)) > 0) {
        int err = weft_write_all(c->fd, c->net, (size_t)n, NULL, deadline);
        if (err)
            return err;
    }
    return 0;
}

/* Reads the socket's next bytes into rbio. 0, 1 at the end of the
 * stream, or weft_read's error. */
static int tls_fill(struct conn *c, weft_time deadline)
{
    ptrdiff_t n = weft_read(c->fd, c->net, sizeof c->net, deadline);
    if (n <= 0)
        return n == 0 ? 1 : (int)n;
    return BIO_write(c->rbio, c->net, (int)n) == (int)n ? 0 : -ENOMEM;
}

/* The handshake. 0, or a negative errno (-EPROTO: TLS failed). */
static int tls_accept(struct conn *c)
{
    c->ssl = SSL_new(c->f->ctx);
    c->rbio = BIO_new(BIO_s_mem());
    c->wbio = BIO_new(BIO_s_mem());
    if (!c->ssl || !c->rbio || !c->wbio) {
        BIO_free(c->rbio);
        BIO_free(c->wbio);
        return -ENOMEM; /* conn_free frees c->ssl */
    }
    SSL_set_bio(c->ssl, c->rbio, c->wbio);
    SSL_set_accept_state(c->ssl);
    weft_time deadline = weft_now() + HANDSHAKE_NS;
    for (;;) {
        ERR_clear_error();
        int r = SSL_accept(c->ssl);
        int e = r == 1 ? SSL_ERROR_NONE : SSL_get_error(c->ssl, r);
        int err = tls_flush(c, deadline); /* a failure's alert too */
        if (err)
            return err;
        if (r == 1)
            return 0;
        if (e != SSL_ERROR_WANT_READ) {
            ERR_clear_error();
            return -EPROTO;
        }
        err = tls_fill(c, deadline);
        if (err)
            return err > 0 ? -EPIPE : err;
    }
}

static ptrdiff_t tls_read(struct conn *c, void *buf, size_t n,
                          weft_time deadline)
{
    for (;;) {
        ERR_clear_error();
        int r = SSL_read(c->ssl, buf, n > INT_MAX ? INT_MAX : (int)n);
        if (r > 0)
            return r;
        int e = SSL_get_error(c->ssl, r);
        if (e == SSL_ERROR_ZERO_RETURN) /* close_notify */
            return 0;
        if (e != SSL_ERROR_WANT_READ) {
            ERR_clear_error();
            return -EPROTO;
        }
        int err = tls_flush(c, deadline); /* e.g. a KeyUpdate's answer */
        if (!err)
            err = tls_fill(c, deadline);
        if (err)
            return err > 0 ? 0 : err;
    }
}

static int tls_write_all(struct conn *c, const char *p, size_t n,
                         weft_time deadline)
{
    while (n > 0) {
        ERR_clear_error();
        int r = SSL_write(c->ssl, p, n > CHUNK ? CHUNK : (int)n);
        if (r <= 0) {
            ERR_clear_error();
            return -EPROTO;
        }
        p += r;
        n -= (size_t)r;
        int err = tls_flush(c, deadline); /* one record at a time */
        if (err)
            return err;
    }
    return 0;
}
#endif

/* weft_read on the connection: the count, 0 at the end, or an error. */
static ptrdiff_t conn_read(struct conn *c, void *buf, size_t n,
                           weft_time deadline)
{
#ifdef FAULT_SERVER_TLS
    if (c->ssl)
        return tls_read(c, buf, n, deadline);
#endif
    return weft_read(c->fd, buf, n, deadline);
}

/* weft_write_all on the connection: 0 or an error. */
static int conn_write(struct conn *c, const void *buf, size_t n,
                      weft_time deadline)
{
#ifdef FAULT_SERVER_TLS
    if (c->ssl)
        return tls_write_all(c, buf, n, deadline);
#endif
    return weft_write_all(c->fd, buf, n, NULL, deadline);
}

/* Closes the connection as `a` says and frees it. */
static void conn_free(struct conn *c, enum action a)
{
    if (a == RESET) {
        struct linger l = {.l_onoff = 1, .l_linger = 0};
        (void)setsockopt(c->fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
        add(&c->f->resets, 1);
    }
#ifdef FAULT_SERVER_TLS
    if (c->ssl) {
        if (a != RESET && SSL_is_init_finished(c->ssl)) {
            ERR_clear_error();
            (void)SSL_shutdown(c->ssl); /* our close_notify; not the peer's */
            (void)tls_flush(c, weft_now() + WEFT_SEC);
        }
        SSL_free(c->ssl);
        ERR_clear_error();
    }
#endif
    weft_close(c->fd);
    add(&c->f->open, -1);
    free(c);
}

/* ======================= answers ===================================== */

static const char *reason(int status)
{
    switch (status) {
    case 200:
        return "OK";
    case 201:
        return "Created";
    case 204:
        return "No Content";
    case 301:
        return "Moved Permanently";
    case 302:
        return "Found";
    case 304:
        return "Not Modified";
    case 400:
        return "Bad Request";
    case 401:
        return "Unauthorized";
    case 403:
        return "Forbidden";
    case 404:
        return "Not Found";
    case 408:
        return "Request Timeout";
    case 413:
        return "Content Too Large";
    case 429:
        return "Too Many Requests";
    case 431:
        return "Request Header Fields Too Large";
    case 500:
        return "Internal Server Error";
    case 501:
        return "Not Implemented";
    case 502:
        return "Bad Gateway";
    case 503:
        return "Service Unavailable";
    case 504:
        return "Gateway Timeout";
    default:
        return "Status";
    }
}

#define NO_LENGTH (-1L) /* send_head: no Content-Length (204, 304) */
#define CHUNKED (-2L)   /* send_head: Transfer-Encoding: chunked */

/* Writes an answer's status line and headers: Content-Length len (or
 * NO_LENGTH, CHUNKED), Content-Type type (NULL: none), the request's
 * Retry-After and Connection: close. 0 or conn_write's error. */
static int send_head(struct conn *c, const struct req *q, int status, long len,
                     const char *type)
{
    char h[512];
    int n = snprintf(h, sizeof h, "HTTP/1.1 %d %s\r\n", status, reason(status));
    if (len >= 0)
        n += snprintf(h + n, sizeof h - (size_t)n, "Content-Length: %ld\r\n",
                      len);
    else if (len == CHUNKED)
        n += snprintf(h + n, sizeof h - (size_t)n,
                      "Transfer-Encoding: chunked\r\n");
    if (type)
        n +=
            snprintf(h + n, sizeof h - (size_t)n, "Content-Type: %s\r\n", type);
    if (q->retry_after >= 0)
        n += snprintf(h + n, sizeof h - (size_t)n, "Retry-After: %ld\r\n",
                      q->retry_after);
    n += snprintf(h + n, sizeof h - (size_t)n, "%s\r\n",
                  q->close ? "Connection: close\r\n" : "");
    /* Every piece is short: 512 bytes hold them all. */
    return conn_write(c, h, (size_t)n, WEFT_NEVER);
}

/* What to do after an answer whose writing returned err. */
static enum action after(const struct req *q, int err)
{
    return err || q->close ? CLOSE : KEEP;
}

/* Answers with a body of len bytes at body (none for HEAD). */
static enum action answer(struct conn *c, const struct req *q, int status,
                          const char *body, size_t len, const char *type)
{
    bool none = status == 204 || status == 304;
    int err = send_head(c, q, status, none ? NO_LENGTH : (long)len, type);
    if (!err && !none && !q->head_only && len > 0)
        err = conn_write(c, body, len, WEFT_NEVER);
    return after(q, err);
}

static enum action text(struct conn *c, const struct req *q, int status,
                        const char *body)
{
    return answer(c, q, status, body, strlen(body), "text/plain");
}

/* Writes bytes [off, off + n) of the pattern body. 0 or an error. */
static int send_pattern(struct conn *c, const struct req *q, long off, long n)
{
    if (q->head_only)
        return 0;
    while (n > 0) {
        long k = n < CHUNK ? n : CHUNK;
        int err =
            conn_write(c, c->f->pattern + off % PATTERN, (size_t)k, WEFT_NEVER);
        if (err)
            return err;
        off += k;
        n -= k;
    }
    return 0;
}

static enum action send_chunked(struct conn *c, const struct req *q, long n)
{
    int err = send_head(c, q, 200, CHUNKED, "application/octet-stream");
    for (long off = 0; !err && !q->head_only && off < n; off += CHUNK) {
        long k = n - off < CHUNK ? n - off : CHUNK;
        int m = snprintf(c->out, sizeof c->out, "%lx\r\n", k);
        memcpy(c->out + m, c->f->pattern + off % PATTERN, (size_t)k);
        memcpy(c->out + m + k, "\r\n", 2);
        err = conn_write(c, c->out, (size_t)(m + k + 2), WEFT_NEVER);
    }
    if (!err && !q->head_only)
        err = conn_write(c, "0\r\n\r\n", 5, WEFT_NEVER);
    return after(q, err);
}

/* Writes the string s as it is (the faults that break HTTP). */
static int raw(struct conn *c, const char *s)
{
    return conn_write(c, s, strlen(s), WEFT_NEVER);
}

/* /stall: waits for the client to close (or the server to stop),
 * discarding what it sends. */
static void wait_gone(struct conn *c)
{
    while (conn_read(c, c->out, sizeof c->out, WEFT_NEVER) > 0)
        ;
}

/* ======================= routing ===================================== */

/* [s, s+n) as a decimal number of 1 to 10 digits, at most max. */
static bool num(const char *s, size_t n, long max, long *out)
{
    long v = 0;
    if (n == 0 || n > 10)
        return false;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return v <= max;
}

static bool num_str(const char *s, long max, long *out)
{
    return num(s, strlen(s), max, out);
}

/* If path starts with prefix, what follows; else NULL. */
static const char *rest(const char *path, const char *prefix)
{
    size_t n = strlen(prefix);
    return strncmp(path, prefix, n) ? NULL : path + n;
}

/* "KEY/K": the key (checked, copied to key) and K. */
static bool key_count(const char *s, char *key, long *k)
{
    const char *slash = strchr(s, '/');
    if (!slash || slash == s || slash - s > KEY_MAX)
        return false;
    for (const char *p = s; p < slash; p++)
        if (!(*p >= 'a' && *p <= 'z') && !(*p >= 'A' && *p <= 'Z') &&
            !(*p >= '0' && *p <= '9') && !strchr("_.-", *p))
            return false;
    memcpy(key, s, (size_t)(slash - s));
    key[slash - s] = '\0';
    return num_str(slash + 1, LONG_MAX / 2, k);
}

/* Counts a request for (kind, key): the number of requests so far, this
 * one included, or -ENOSPC (too many keys), -ECANCELED. */
static long flaky_seen(fault_server *f, char kind, const char *key)
{
    int err = weft_mutex_lock(&f->keys_lock);
    if (err)
        return err;
    struct flaky_key *e = NULL;
    for (int i = 0; i < f->nkeys && !e; i++)
        if (f->keys[i].key[0] == kind && !strcmp(f->keys[i].key + 1, key))
            e = &f->keys[i];
    if (!e && f->nkeys < KEYS_MAX) {
        e = &f->keys[f->nkeys++];
        e->key[0] = kind;
        strcpy(e->key + 1, key); /* at most KEY_MAX bytes: key_count */
        e->seen = 0;
    }
    long n = e ? ++e->seen : -ENOSPC;
    weft_mutex_unlock(&f->keys_lock);
    return n;
}

/* The query's retry_after=S, into q->retry_after. false: malformed. */
static bool query(struct req *q)
{
    q->retry_after = -1;
    for (const char *p = q->query; *p;) {
        const char *end = strchr(p, '&');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        const char *v = rest(p, "retry_after=");
        if (v && v <= p + n &&
            !num(v, n - (size_t)(v - p), MAX_RETRY_AFTER, &q->retry_after)) {
            q->retry_after = -1;
            return false;
        }
        p += n + (end != NULL);
    }
    return true;
}

static enum action bad_request(struct conn *c, const struct req *q)
{
    return text(c, q, 400, "bad request\n");
}

/* /flaky and /flaky_reset. */
static enum action flaky(struct conn *c, struct req *q, const char *s,
                         char kind)
{
    char key[KEY_MAX + 1];
    long k;
    if (!key_count(s, key, &k))
        return bad_request(c, q);
    long n = flaky_seen(c->f, kind, key);
    if (n == -ENOSPC)
        return text(c, q, 503, "too many keys\n");
    if (n < 0)
        return CLOSE;
    if (n > k)
        return text(c, q, 200, "ok\n");
    if (kind == 'r')
        return RESET;
    q->retry_after = 0;
    return text(c, q, 503, "flaky\n");
}

/* The path's kind, for the counters. */
static enum fault_kind kind_of(const char *p)
{
    static const struct {
        const char *prefix;
        bool exact;
        enum fault_kind kind;
    } t[] = {
        {"/ok", true, FAULT_OK},
        {"/bytes/", false, FAULT_BYTES},
        {"/slow/", false, FAULT_SLOW},
        {"/status/", false, FAULT_STATUS},
        {"/reset", true, FAULT_RESET},
        {"/close", true, FAULT_CLOSE},
        {"/stall/", false, FAULT_STALL},
        {"/flaky/", false, FAULT_FLAKY},
        {"/flaky_reset/", false, FAULT_FLAKY_RESET},
        {"/chunked/", false, FAULT_CHUNKED},
        {"/echo", true, FAULT_ECHO},
        {"/garbage", true, FAULT_GARBAGE},
        {"/binary", true, FAULT_BINARY},
        {"/bad_chunk", true, FAULT_BAD_CHUNK},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (t[i].exact ? !strcmp(p, t[i].prefix) : !!rest(p, t[i].prefix))
            return t[i].kind;
    return FAULT_NOT_FOUND;
}

static enum action route(struct conn *c, struct req *q)
{
    enum fault_kind kind = kind_of(q->path);
    const char *arg = strchr(q->path + 1, '/'); /* "/NAME/..." */
    arg = arg ? arg + 1 : "";
    long n;
    add(&c->f->by_kind[kind], 1);
    if (!query(q))
        return bad_request(c, q);
    switch (kind) {
    case FAULT_OK:
        return text(c, q, 200, "ok\n");
    case FAULT_BYTES:
        if (!num_str(arg, MAX_LEN, &n))
            return bad_request(c, q);
        if (send_head(c, q, 200, n, "application/octet-stream") ||
            send_pattern(c, q, 0, n))
            return CLOSE;
        return after(q, 0);
    case FAULT_SLOW:
        if (!num_str(arg, MAX_SLOW_MS, &n))
            return bad_request(c, q);
        if (weft_sleep_for(n * WEFT_MSEC))
            return CLOSE; /* cancelled: the server stops */
        return text(c, q, 200, "ok\n");
    case FAULT_STATUS: {
        char body[24];
        if (!num_str(arg, 599, &n) || n < 200)
            return bad_request(c, q);
        snprintf(body, sizeof body, "%ld\n", n);
        return text(c, q, (int)n, body);
    }
    case FAULT_RESET:
        return RESET;
    case FAULT_CLOSE:
        return CLOSE;
    case FAULT_STALL:
        if (!num_str(arg, MAX_LEN, &n))
            return bad_request(c, q);
        if (!send_head(c, q, 200, n, "application/octet-stream") &&
            !send_pattern(c, q, 0, n / 2))
            wait_gone(c);
        return CLOSE;
    case FAULT_FLAKY:
        return flaky(c, q, arg, 'f');
    case FAULT_FLAKY_RESET:
        return flaky(c, q, arg, 'r');
    case FAULT_CHUNKED:
        if (!num_str(arg, MAX_LEN, &n))
            return bad_request(c, q);
        return send_chunked(c, q, n);
    case FAULT_ECHO:
        return answer(c, q, 200, q->body, q->body_len,
                      "application/octet-stream");
    case FAULT_GARBAGE:
        (void)raw(c, "HTTP/1.1 abc Garbage\r\nContent-Length: 3\r\n\r\nok\n");
        return CLOSE;
    case FAULT_BINARY:
        for (int i = 0; i < 1024; i++)
            c->out[i] = (char)(i & 0xff);
        (void)conn_write(c, c->out, 1024, WEFT_NEVER);
        return CLOSE;
    case FAULT_BAD_CHUNK:
        if (!send_head(c, q, 200, CHUNKED, "application/octet-stream") &&
            !q->head_only)
            (void)raw(c, "10\r\nabcdefghijklmnop\r\nzz\r\n");
        return CLOSE;
    default:
        return text(c, q, 404, "not found\n");
    }
}

/* ======================= requests ==================================== */

/* Reads until in[] starts with a whole head. HTTP_OK and *r, 0 if the
 * connection ended first, or http_parse's error. */
static int read_head(struct conn *c, struct http_request *r)
{
    for (;;) {
        int rc = http_parse(c->in, c->have, r);
        if (rc != HTTP_MORE)
            return rc;
        /* HTTP_MORE means have < HTTP_MAX_HEADER < sizeof in: room. */
        ptrdiff_t n =
            conn_read(c, c->in + c->have, sizeof c->in - c->have, WEFT_NEVER);
        if (n <= 0)
            return 0;
        c->have += (size_t)n;
    }
}

/* Copies the request target of the head in in[] to c->target, cuts it
 * at '?', and fills q's path, query and head_only. */
static void read_target(struct conn *c, struct req *q, size_t head)
{
    /* http_parse checked "METHOD SP TARGET SP HTTP/1.x CRLF". */
    const char *sp = memchr(c->in, ' ', head);
    const char *t = sp + 1;
    const char *end = memchr(t, ' ', head - (size_t)(t - c->in));
    size_t n = (size_t)(end - t);
    memcpy(c->target, t, n);
    c->target[n] = '\0';
    q->head_only = sp - c->in == 4 && !memcmp(c->in, "HEAD", 4);
    q->path = c->target;
    char *qm = strchr(c->target, '?');
    q->query = "";
    if (qm) {
        *qm = '\0';
        q->query = qm + 1;
    }
}

/* Takes the head and the body (len bytes) off the input, the body into
 * q->body. 0, or -ENOMEM, -EPIPE (the stream ended), conn_read's error. */
static int read_body(struct conn *c, struct req *q, size_t head, size_t len)
{
    size_t got = c->have - head < len ? c->have - head : len;
    q->body_len = len;
    q->body = len ? malloc(len) : NULL;
    if (len && !q->body)
        return -ENOMEM;
    if (got)
        memcpy(q->body, c->in + head, got);
    c->have -= head + got;
    memmove(c->in, c->in + head + got, c->have);
    while (got < len) {
        ptrdiff_t n = conn_read(c, q->body + got, len - got, WEFT_NEVER);
        if (n <= 0)
            return n < 0 ? (int)n : -EPIPE;
        got += (size_t)n;
    }
    return 0;
}

static enum action one_request(struct conn *c)
{
    struct http_request r;
    struct req q = {.retry_after = -1};
    int rc = read_head(c, &r);
    if (rc == 0)
        return CLOSE;
    if (rc != HTTP_OK) {
        add(&c->f->bad, 1);
        q.close = true;
        (void)text(c, &q, -rc, "bad request\n");
        return CLOSE;
    }
    read_target(c, &q, r.head);
    q.close = r.close;
    if (read_body(c, &q, r.head, r.body)) {
        free(q.body);
        return CLOSE;
    }
    add(&c->f->requests, 1);
    enum action a = route(c, &q);
    free(q.body);
    return a;
}

static int serve(void *arg)
{
    struct conn *c = arg;
    enum action a = KEEP;
#ifdef FAULT_SERVER_TLS
    if (c->f->ctx) {
        if (tls_accept(c) == 0) {
            add(&c->f->tls_handshakes, 1);
        } else {
            add(&c->f->tls_failures, 1);
            a = CLOSE;
        }
    }
#endif
    while (a == KEEP)
        a = one_request(c);
    conn_free(c, a);
    return 0;
}

/* ======================= the server ================================== */

static int acceptor(void *arg)
{
    fault_server *f = arg;
    weft_scope *conns;
    weft_spawn_opts so = {.name = "fault_server connection"};
#ifdef FAULT_SERVER_TLS
    if (f->ctx)
        so.stack_size = CONN_STACK; /* OpenSSL's handshake wants room */
#endif
    if (weft_scope_open(&conns, &(weft_scope_opts){.policy = WEFT_SERVE}) ==
        0) {
        for (;;) {
            int fd = weft_accept(f->lfd, NULL, WEFT_NEVER);
            if (fd < 0)
                break; /* -ECANCELED: fault_server_stop, or s cancelled */
            add(&f->accepted, 1);
            add(&f->open, 1);
            struct conn *c = malloc(sizeof *c);
            if (!c) {
                weft_close(fd);
                add(&f->open, -1);
                continue;
            }
            c->f = f;
            c->fd = fd;
            c->have = 0;
#ifdef FAULT_SERVER_TLS
            c->ssl = NULL;
#endif
            if (weft_spawn_ex(conns, serve, c, &so) < 0)
                conn_free(c, CLOSE);
        }
        weft_scope_cancel(conns);
        weft_scope_join(conns); /* the connections end and close */
        weft_scope_free(conns);
    }
    weft_close(f->lfd);
    return 0;
}

#ifdef FAULT_SERVER_TLS
static int tls_init(fault_server *f, const char *cert, const char *key)
{
    if (access(cert, R_OK) != 0 || access(key, R_OK) != 0)
        return -errno;
    f->ctx = SSL_CTX_new(TLS_server_method());
    if (!f->ctx)
        return -ENOMEM;
    SSL_CTX_set_min_proto_version(f->ctx, TLS1_2_VERSION);
    SSL_CTX_set_options(f->ctx, SSL_OP_NO_RENEGOTIATION);
    if (SSL_CTX_use_certificate_chain_file(f->ctx, cert) != 1 ||
        SSL_CTX_use_PrivateKey_file(f->ctx, key, SSL_FILETYPE_PEM) != 1 ||
        SSL_CTX_check_private_key(f->ctx) != 1) {
        ERR_clear_error();
        return -EINVAL;
    }
    return 0;
}
#endif

static void server_free(fault_server *f)
{
#ifdef FAULT_SERVER_TLS
    SSL_CTX_free(f->ctx);
#endif
    weft_mutex_destroy(&f->keys_lock);
    free(f->keys);
    free(f);
}

int fault_server_start(weft_scope *s, const fault_server_opts *o,
                       fault_server **out)
{
    fault_server_opts def = {0};
    if (!out)
        return -EINVAL;
    *out = NULL;
    o = o ? o : &def;
    if (!o->cert_file != !o->key_file)
        return -EINVAL;
#ifndef FAULT_SERVER_TLS
    if (o->cert_file)
        return -ENOTSUP;
#endif
    fault_server *f = calloc(1, sizeof *f);
    if (!f)
        return -ENOMEM;
    f->keys_lock = (weft_mutex)WEFT_MUTEX_INIT;
    f->lfd = -1;
    for (size_t i = 0; i < sizeof f->pattern; i++)
        f->pattern[i] = (char)('a' + i % PATTERN);
    int err = 0;
    f->keys = calloc(KEYS_MAX, sizeof *f->keys);
    if (!f->keys)
        err = -ENOMEM;
#ifdef FAULT_SERVER_TLS
    if (!err && o->cert_file)
        err = tls_init(f, o->cert_file, o->key_file);
#endif
    if (!err) {
        f->lfd =
            weft_tcp_listen(o->host ? o->host : "127.0.0.1", o->port, 128, 0);
        err = f->lfd < 0 ? f->lfd : 0;
    }
    if (!err) {
        f->port = weft_local_port(f->lfd);
        int rc = weft_spawn_ex(
            s, acceptor, f,
            &(weft_spawn_opts){.name = "fault_server", .handle = &f->acceptor});
        if (rc < 0) {
            weft_close(f->lfd);
            err = rc;
        }
    }
    if (err) {
        server_free(f);
        return err;
    }
    *out = f;
    return 0;
}

int fault_server_port(const fault_server *f)
{
    return f->port;
}

static long get(const atomic_long *c)
{
    return atomic_load_explicit(c, memory_order_relaxed);
}

void fault_server_stats_get(const fault_server *f, fault_server_stats *out)
{
    out->accepted = get(&f->accepted);
    out->open = get(&f->open);
    out->requests = get(&f->requests);
    for (int i = 0; i < FAULT_KINDS; i++)
        out->by_kind[i] = get(&f->by_kind[i]);
    out->bad = get(&f->bad);
    out->resets = get(&f->resets);
    out->tls_handshakes = get(&f->tls_handshakes);
    out->tls_failures = get(&f->tls_failures);
}

void fault_server_stop(fault_server *f)
{
    if (!f)
        return;
    weft_task_cancel(f->acceptor);
    /* Shielded: the wait must end with the acceptor, also when the
     * caller's scope is cancelled (the program's shutdown). */
    weft_scope *shield;
    int err = weft_scope_open(&shield, &(weft_scope_opts){.shield = 1});
    int joined = weft_task_join(f->acceptor, NULL);
    if (err == 0) {
        weft_scope_join(shield);
        weft_scope_free(shield);
    }
    if (joined == 0)
        server_free(f);
    /* else (no memory for the shield, and cancelled): the acceptor may
     * still run, so the server is left allocated rather than freed
     * under it. */
}
